"""hyoka (評価): dialogue responses scored with in-process models — BERTScore as bert_score
computes it, LLM judges with the full distribution over a rubric's scores, and their
meta-evaluation against human ratings. The command line is the same program: `hyoka --help`.

    import hyoka
    P, R, F = hyoka.bertscore.score(["いいですね"], ["それは良かった"], lang="ja")
    judge = hyoka.Judge("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "breakdown3-ja")
    lines = judge.score(items)
    summary = hyoka.meta(items, lines)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from . import _hyoka, bertscore
from .bertscore import BERTScorer
from .errors import HyokaError, InvalidInputError, NotFoundError, UsageError
from .judge import Judge, _settings, json_texts

__version__: str = _hyoka.version()


def rubrics() -> list[str]:
    """The built-in rubrics' names (`hyoka rubrics list` describes them)."""
    return list(_hyoka.rubrics())


Results = Iterable[Mapping[str, Any]]


def meta(
    items: Iterable[Mapping[str, Any]] | str | os.PathLike[str],
    *scores: Results | str | os.PathLike[str],
    **options: Any,
) -> dict[str, Any]:
    """`hyoka meta`: correlations of judge and BERTScore results with the items' human ratings,
    returned as the dict summary.json holds.

    items: the items (dicts, or an items JSONL path) with their `human` ratings.
    scores: results of `Judge.score`, or paths of `hyoka judge`/`hyoka bertscore` outputs.
    options: `hyoka meta` options by name, e.g. fit_w=True, calibrate=True, half="held-out",
        bootstrap=1000, seed=0, w=10, combine_with="F", breakdown_levels=["coherence:1=O,0=X"],
        accept_unhashed=True (results lines without input_sha256, refused otherwise).
        Every level (item, system, dialogue) that the items allow is in the result.
    """
    if not scores:
        raise UsageError("meta needs at least one results list or file")
    summary = _hyoka.meta(_source("items", items), [_source(f"scores[{n}]", s) for n, s in enumerate(scores)], _settings(options))
    result: dict[str, Any] = json.loads(summary)
    return result


def _source(name: str, value: Any) -> str | list[str]:
    """A path as a string, or dicts (items, results lines) as JSON texts."""
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    return json_texts(name, value)


__all__ = [
    "BERTScorer",
    "HyokaError",
    "InvalidInputError",
    "Judge",
    "NotFoundError",
    "UsageError",
    "__version__",
    "bertscore",
    "meta",
    "rubrics",
]
