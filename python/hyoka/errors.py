"""The exceptions hyoka raises. Every one is a HyokaError; bad input is also a ValueError and a
missing file or model also a FileNotFoundError, so generic handlers catch them too. The message
is the text the command line prints (FILE:LINE: FIELD for a bad line of an items file)."""


class HyokaError(Exception):
    """Any failure hyoka reports (the command line's exit code 1)."""


class InvalidInputError(HyokaError, ValueError):
    """An items, rubric or results file or value that fails validation (exit code 3)."""


class UsageError(HyokaError, ValueError):
    """A bad option or option value, or one this build or machine cannot use (exit code 2)."""


class NotFoundError(HyokaError, FileNotFoundError):
    """A file, folder or model that is not there."""


__all__ = ["HyokaError", "InvalidInputError", "UsageError", "NotFoundError"]
