"""Progress for long calls: tqdm when installed (its notebook bar under Jupyter), else a line on
stderr. Shown when asked, in a notebook, or for long work on a terminal."""

from __future__ import annotations

import sys
from typing import Any


def wanted(verbose: bool | None, long: bool = True) -> bool:
    """Whether to show progress: `verbose` when given, else in a notebook or on a terminal."""
    if verbose is not None:
        return verbose
    return long and ("ipykernel" in sys.modules or sys.stderr.isatty())


class Bar:
    """A bar over `unit`s whose total is given, or known at the first update (`to`)."""

    def __init__(self, desc: str, unit: str, total: int | None = None) -> None:
        self.desc, self.unit, self.total, self.done = desc, unit, total, 0
        self._tqdm: Any = None
        self._started = False

    def to(self, done: int, total: int | None = None) -> None:
        """Move the bar to `done` of `total` (or of the total given before)."""
        if total is not None:
            self.total = total
        if not self._started:
            self._started = True
            try:
                from tqdm.auto import tqdm  # type: ignore[import-untyped]

                self._tqdm = tqdm(total=self.total, unit=self.unit, desc=self.desc)
            except ImportError:
                pass
        step, self.done = done - self.done, done
        finished = self.total is not None and done >= self.total
        if self._tqdm is not None:
            self._tqdm.total = self.total
            self._tqdm.update(step)
            if finished:
                self._tqdm.close()
        else:
            print(f"{self.desc} {done}/{self.total} {self.unit}s", end="\n" if finished else "\r",
                  file=sys.stderr, flush=True)

    def add(self, n: int) -> None:
        self.to(self.done + n)
