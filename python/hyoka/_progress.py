"""Progress for long calls: tqdm when installed (its notebook bar under Jupyter), else a line on
stderr. Shown when asked, in a notebook, or for long work on a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable


def wanted(verbose: bool | None, long: bool = True) -> bool:
    """Whether to show progress: `verbose` when given, else in a notebook or on a terminal."""
    if verbose is not None:
        return verbose
    return long and ("ipykernel" in sys.modules or sys.stderr.isatty())


class Bar:
    """A bar over `unit`s whose total is known at the first update (set_total) or given."""

    def __init__(self, desc: str, unit: str, total: int | None = None) -> None:
        self.desc, self.unit, self.total, self.done = desc, unit, total, 0
        self._tqdm: object | None = None
        self._line: Callable[[], None] | None = None

    def _open(self) -> None:
        try:
            from tqdm.auto import tqdm  # type: ignore[import-untyped]

            self._tqdm = tqdm(total=self.total, unit=self.unit, desc=self.desc)
        except ImportError:
            self._tqdm = None

    def to(self, done: int, total: int | None = None) -> None:
        """Move the bar to `done` of `total` (or of the total given before)."""
        if total is not None:
            self.total = total
        if self._tqdm is None and self._line is None:
            self._open()
            if self._tqdm is None:
                self._line = self._print_line
        step, self.done = done - self.done, done
        if self._tqdm is not None:
            self._tqdm.total = self.total  # type: ignore[attr-defined]
            self._tqdm.update(step)  # type: ignore[attr-defined]
            if self.total is not None and done >= self.total:
                self._tqdm.close()  # type: ignore[attr-defined]
        elif self._line is not None:
            self._line()

    def add(self, n: int) -> None:
        self.to(self.done + n)

    def _print_line(self) -> None:
        finished = self.total is not None and self.done >= self.total
        print(f"{self.desc} {self.done}/{self.total} {self.unit}s", end="\n" if finished else "\r",
              file=sys.stderr, flush=True)
