"""hyoka (評価): dialogue responses scored with in-process models — BERTScore as bert_score
computes it, LLM judges with the full distribution over a rubric's scores, and their
meta-evaluation against human ratings. The command line is the same program: `hyoka --help`.

    import hyoka
    P, R, F = hyoka.bertscore.score(["いいですね"], ["それは良かった"], lang="ja")
    judge = hyoka.Judge("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "breakdown3-ja")
    lines = judge.score(items)
    summary = hyoka.meta(items, lines)
    hyoka.eval("items.jsonl", "out", model="judge.gguf", rubric="breakdown3-ja")
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from . import _hyoka, _progress, bertscore
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


def eval(
    items: Iterable[Mapping[str, Any]] | str | os.PathLike[str],
    output: str | os.PathLike[str],
    verbose: bool | None = None,
    **options: Any,
) -> dict[str, Any]:
    """`hyoka eval`: the main job into the folder `output` — the items, the judge's results
    (judge.jsonl), BERTScore (bertscore.jsonl), every item's scores (scores.jsonl) and, with
    human ratings, summary.md, summary.json and report.html: the files the command writes for
    the same items and options. A run into a folder of the same settings continues it.

    items: the items (dicts, or an items JSONL path).
    options: `hyoka eval` options by name — model (a name or a list; default the small default
        judge from the Hub), rubric (default "dialogue6-ja"), bertscore_model, lang, layer,
        rescale, no_bertscore, against ("reference" or "last-turn"), likelihood (a list),
        translate ("en") with translate_rubric, translate_prompt, translate_model,
        translate_bertscore_model, translate_layer, translate_keep_unfinished; sample_dialogues,
        sample_seed, shard ("K/N"), baseline, overwrite; the judge's runtime options (device,
        dtype, weights, prefill_gemm, batch_tokens, …) and the statistics' (fit_w, calibrate,
        bootstrap, seed, w, …) as in `hyoka.Judge` and `hyoka.meta`.
    verbose: a progress bar per step (tqdm when installed); default: in a notebook or on a
        terminal. Ctrl-C stops the step in progress and raises KeyboardInterrupt; a rerun
        continues.

    Returns {"dir": the folder written (a shard's own), "failed": what failed (a rerun tries it
    again), "summary": summary.json's dict, or None without human ratings or for a shard}."""
    bars: dict[str, _progress.Bar] = {}
    progress = None
    if _progress.wanted(verbose):

        def progress(step: str, done: int, total: int) -> None:
            bar = bars.setdefault(step, _progress.Bar(step, "item"))
            bar.to(done, total)

    folder, failed = _hyoka.eval(_source("items", items), os.fspath(output), _settings(options), progress)
    summary_path = os.path.join(folder, "summary.json")
    summary = None
    if os.path.exists(summary_path):
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
    return {"dir": folder, "failed": list(failed), "summary": summary}


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
    "eval",
    "meta",
    "rubrics",
]
