"""The `hyoka` command installed with the Python package: the same program as the binary."""

import signal
import sys

from . import _hyoka


def main() -> None:
    # The work runs in Rust without returning to the interpreter: Ctrl-C stops the process, as it
    # stops the binary, instead of waiting for Python's handler.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(_hyoka.main(["hyoka", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
