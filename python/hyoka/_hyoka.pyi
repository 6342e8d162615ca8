"""The extension module (Rust, python/src/lib.rs)."""

from collections.abc import Callable
from typing import Any, final

__all__ = ["Encoder", "Job", "Judge", "default_device", "eval", "main", "meta", "rubrics", "version"]

def main(argv: list[str]) -> int: ...
def meta(items: str | list[str], scores: list[str | list[str]], options: dict[str, Any] | None = None) -> str: ...
def eval(
    items: str | list[str],
    output: str,
    options: dict[str, Any] | None = None,
    progress: Callable[[str, int, int], object] | None = None,
) -> tuple[str, list[str]]: ...
def rubrics() -> list[str]: ...
def version() -> str: ...
def default_device() -> str: ...

@final
class Encoder:
    def __new__(
        cls,
        model: str | None,
        lang: str,
        layer: int | None = None,
        device: str = ...,
        dtype: str = ...,
        batch_tokens: int | None = None,
    ) -> Encoder: ...
    @property
    def model(self) -> str: ...
    @property
    def layer(self) -> int: ...
    def baseline(self, lang: str | None, path: str | None = None) -> tuple[float, float, float]: ...
    def prepare(
        self,
        candidates: list[str],
        references: list[list[str]],
        idf: bool,
        group: int | None = None,
        idf_sentences: list[str] | None = None,
    ) -> Job: ...
    def score(self, job: Job, start: int, end: int) -> None: ...

@final
class Job:
    @property
    def pairs(self) -> int: ...
    def results(
        self, baseline: tuple[float, float, float] | None = None
    ) -> tuple[list[float], list[float], list[float]]: ...

@final
class Judge:
    def __new__(cls, models: list[str], rubric: str, options: dict[str, Any] | None = None) -> Judge: ...
    def score_items(
        self, items: list[str], progress: Callable[[int, int], object] | None = None
    ) -> list[str]: ...
    def score_file(
        self, path: str, progress: Callable[[int, int], object] | None = None
    ) -> list[str]: ...
    def compare_items(
        self, items: list[str], baseline: str | None = None, progress: Callable[[int, int], object] | None = None
    ) -> list[str]: ...
    def compare_file(
        self, path: str, baseline: str | None = None, progress: Callable[[int, int], object] | None = None
    ) -> list[str]: ...
    def likelihood_items(
        self,
        items: str | list[str],
        scorer: str,
        batch_tokens: int | None = None,
        progress: Callable[[int, int], object] | None = None,
    ) -> list[str]: ...
    def translate_items(
        self,
        items: str | list[str],
        source: str,
        to: str,
        prompt: str | None = None,
        max_new_tokens: int | None = None,
        keep_unfinished: bool = False,
        progress: Callable[[int, int], object] | None = None,
    ) -> list[str]: ...
