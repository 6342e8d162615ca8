"""LLM judges: `Judge(model, rubric).score(items)`, the numbers `hyoka judge` writes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from . import _hyoka
from . import _progress as _bar
from .errors import InvalidInputError, UsageError


class Judge:
    """A judge model (or several, `model` a list: each one's scores and their mean) with a
    rubric, loaded once.

    model: a local .gguf file or checkpoint folder (`~` is the home folder), or a Hugging Face
        id (ORG/NAME[:Q4_K_M]).
    rubric: a built-in rubric's name (`hyoka.rubrics()`) or a rubric file.
    device, dtype: as `hyoka judge --device/--dtype`: the CPU unless `device` is given (unlike
        `bertscore`, which takes a GPU when there is one); dtype by device.
    options: any other `hyoka judge` option by name — weights="stored", prefill_gemm="int8",
        batch_tokens=4096, max_prompt_tokens=…, template_date="2024-01-01", tokenizer=…,
        chat_template=…, temperature=…, seed=…, greedy_baseline=…, sha256=…. They are in every
        result's provenance as in the command's output.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | list[str | os.PathLike[str]],
        rubric: str | os.PathLike[str],
        device: str | None = None,
        dtype: str | None = None,
        **options: Any,
    ) -> None:
        models = model if isinstance(model, list) else [model]
        if not models:
            # An empty list would load the default judge from the Hub: not what was asked.
            raise UsageError("model: an empty list: name at least one judge model")
        given = {"device": device, "dtype": dtype, **options}
        self._judge = _hyoka.Judge([os.fspath(m) for m in models], os.fspath(rubric), _settings(given))
        self.rubric = os.fspath(rubric)
        self.models = [os.fspath(m) for m in models]

    def score(
        self, items: Iterable[Mapping[str, Any]] | str | os.PathLike[str], verbose: bool | None = None
    ) -> list[dict[str, Any]]:
        """Score items — dicts in the items format, or an items JSONL path — and return one
        dict per item, in input order, as `hyoka judge` writes its lines: per aspect `score`
        (most probable), `expected`, `distribution` over the valid scores and `off_scale`; in
        json mode also `reason` and `answer`; and the run's `provenance`. An item that fails has
        an `error` instead.

        verbose: a progress bar over the items (tqdm when installed); default: shown in a
            notebook or on a terminal. Ctrl-C stops the run after the batch in progress and
            raises KeyboardInterrupt."""
        bar = _bar.Bar("judging", "item") if _bar.wanted(verbose) else None
        progress = None if bar is None else bar.to
        if isinstance(items, (str, os.PathLike)):
            lines = self._judge.score_file(os.fspath(items), progress)
        else:
            lines = self._judge.score_items(json_texts("items", items), progress)
        return [json.loads(line) for line in lines]

    def compare(
        self,
        items: Iterable[Mapping[str, Any]] | str | os.PathLike[str],
        baseline: str | None = None,
        verbose: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Judge pairs of responses with a pairwise rubric (`hyoka compare`): items that share a
        `context_id` are responses of different systems (each item's `system`) to one context;
        pairs are every two systems of a context, or each against `baseline`. Returns one dict
        per pair as `hyoka compare` writes its lines: `pair` (context_id, first, second) and per
        aspect the order-averaged probabilities `first`, `second`, `tie`, the `verdict`, whether
        both orders agree (`consistent`), the `position_bias` and each order's own
        distribution; and the run's `provenance`. `hyoka.meta(items, results)` ranks the systems.

        verbose: a progress bar over the pairs, as `score`."""
        bar = _bar.Bar("comparing", "pair") if _bar.wanted(verbose) else None
        progress = None if bar is None else bar.to
        if isinstance(items, (str, os.PathLike)):
            lines = self._judge.compare_file(os.fspath(items), baseline, progress)
        else:
            lines = self._judge.compare_items(json_texts("items", items), baseline, progress)
        return [json.loads(line) for line in lines]


    def likelihood(
        self,
        items: Iterable[Mapping[str, Any]] | str | os.PathLike[str],
        scorer: str | os.PathLike[str] = "fed-ja",
        verbose: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Likelihood scores with the judge's (first) model (`hyoka likelihood`): FED
        (`fed-ja`, `fed-en`: follow-up utterances, positive minus negative) or GPTScore
        (`gptscore-ja`, `gptscore-en`: the response's own likelihood), or a scorer file. Returns
        one dict per item, in input order, as `hyoka likelihood` writes its lines: per aspect
        `score`, `positive`, `negative`, `tokens`, and the run's `provenance`; `hyoka.meta`
        reads them beside a judge's.

        verbose: a progress bar over the items, as `score`."""
        bar = _bar.Bar("scoring", "item") if _bar.wanted(verbose) else None
        progress = None if bar is None else bar.to
        lines = self._judge.likelihood_items(_item_texts(items), os.fspath(scorer), None, progress)
        return [json.loads(line) for line in lines]

    def translate(
        self,
        items: Iterable[Mapping[str, Any]] | str | os.PathLike[str],
        to: str = "en",
        source: str = "ja",
        prompt: str | os.PathLike[str] | None = None,
        max_new_tokens: int | None = None,
        keep_unfinished: bool = False,
        verbose: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Translate items with the judge's (first) model (`hyoka translate`, in memory): every
        text (context turns, response, references, setting) from `source` into `to`, each
        distinct text once, greedy. Returns the translated items as dicts in input order, ids
        and ratings kept, each with `translation` (the texts it came from and the run's
        provenance). A text that cannot be translated raises HyokaError naming it.

        prompt: a built-in translation prompt's name or a TOML file (default: the built-in for
            the two languages).
        max_new_tokens: one limit for every translation (default: 16 + 4 x the text's tokens).
        keep_unfinished: keep a translation cut at its limit (named in `translation.unfinished`)
            instead of raising.
        verbose: a progress bar over the distinct texts, as `score`."""
        bar = _bar.Bar("translating", "text") if _bar.wanted(verbose) else None
        progress = None if bar is None else bar.to
        chosen = None if prompt is None else os.fspath(prompt)
        texts = self._judge.translate_items(
            _item_texts(items), source, to, chosen, max_new_tokens, keep_unfinished, progress)
        return [json.loads(text) for text in texts]


def _item_texts(items: Iterable[Mapping[str, Any]] | str | os.PathLike[str]) -> str | list[str]:
    """Items as the extension takes them: an items JSONL path (read as the commands read `-i`),
    or dicts as JSON texts."""
    if isinstance(items, (str, os.PathLike)):
        return os.fspath(items)
    return json_texts("items", items)


def _settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options as the extension takes them: paths as strings; None and False mean the default."""
    return {
        key: os.fspath(value) if isinstance(value, os.PathLike) else value
        for key, value in options.items()
        if value is not None and value is not False
    }


def json_texts(name: str, dicts: Iterable[Mapping[str, Any]]) -> list[str]:
    """Dicts (items, results lines) as JSON texts; a non-dict is refused as `name[N]`."""
    texts = []
    for i, value in enumerate(dicts):
        if not isinstance(value, Mapping):
            raise InvalidInputError(f"{name}[{i}]: a dict, got {type(value).__name__}")
        text = json.dumps(value, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidInputError(
                f"{name}[{i}]: not valid Unicode text ({text[e.start:e.end]!r} is a lone surrogate, "
                "half of a UTF-16 pair): every string must be text"
            ) from None
        texts.append(text)
    return texts


__all__ = ["Judge"]
