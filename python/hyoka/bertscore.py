"""BERTScore as bert_score 0.3.13 computes it (with its fast tokenizer), from hyoka's encoder.

`score()` and `BERTScorer` take bert_score's arguments and return what it returns — P, R and F
per candidate, as arrays of shape (N,) — so that replacing ``import bert_score`` by
``from hyoka import bertscore as bert_score`` keeps a script's numbers (within 1e-5, tested
against bert_score's own output) and makes it faster. What differs is written in each argument.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _hyoka
from . import _progress as _bar
from .errors import InvalidInputError, UsageError

# Pairs scored per call into the extension: between two calls Ctrl-C is honoured and progress
# shown. The scores do not depend on it (hyoka's batching never changes a score).
_CHUNK = 8192


def _texts(name: str, texts: Any) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise UsageError(f"{name}: a list of strings, got {type(texts).__name__}")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise UsageError(f"{name}[{i}]: a string, got {type(t).__name__}")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidInputError(
                f"{name}[{i}]: not valid Unicode text ({t[e.start:e.end]!r} is a lone surrogate, "
                "half of a UTF-16 pair)"
            ) from None
    return out


def _references(refs: Any, n: int) -> list[list[str]]:
    """One reference per candidate, or a list of references per candidate (their maximum)."""
    if isinstance(refs, str) or not isinstance(refs, Sequence):
        raise UsageError(f"refs: a list of strings or of lists of strings, got {type(refs).__name__}")
    grouped = [[r] if isinstance(r, str) else _texts(f"refs[{i}]", r) for i, r in enumerate(refs)]
    empty = next((i for i, g in enumerate(grouped) if not g), None)
    if empty is not None:
        # Nothing to compare with: a score of 0 would read as a real, very bad one.
        raise UsageError(f"refs[{empty}]: an empty list of references: give at least one per candidate")
    if len(grouped) != n:
        raise UsageError(f"{n} candidates but {len(grouped)} references: give one reference (or one list) per candidate")
    return grouped


def _device(device: str | None) -> str:
    return device if device is not None else _hyoka.default_device()


def _progress(total: int, verbose: bool) -> Callable[[int], None] | None:
    """A bar over pairs, when asked (verbose), or for long work in a notebook or on a terminal."""
    if not _bar.wanted(True if verbose else None, long=total >= 4 * _CHUNK):
        return None
    return _bar.Bar("bertscore", "pair", total).add


def _as_output(values: list[float], return_torch: bool) -> Any:
    arr = np.asarray(values, dtype=np.float32)
    if return_torch:
        import torch  # type: ignore[import-not-found]

        return torch.from_numpy(arr)
    return arr


class BERTScorer:
    """An encoder kept loaded between calls, as bert_score's `BERTScorer`.

    model_type: a local folder (config.json, model.safetensors, tokenizer.json), a Hugging Face
        id, or one of bert_score's names (roberta-large: fetched from FacebookAI/roberta-large);
        default: bert_score's model for `lang` (bert-base-multilingual-cased for ja), from the
        Hub or its cache (HF_HUB_OFFLINE=1). A model that cannot be had raises NotFoundError
        saying how to get it; no other model is used in its place.
    num_layers: the layer read; default bert_score's for the model (9 for
        bert-base-multilingual-cased; 12 for hyoka's multilingual-e5-small copy).
    lang: the language of the texts (default ja when neither it nor model_type is given);
        chooses the default model and the shipped rescaling baseline.
    idf: weight tokens by inverse document frequency, over `idf_sents` when given, else over each
        call's references (bert_score's `score()` does the latter; its class needs idf_sents).
    rescale_with_baseline, baseline_path: rescale (x − b) / (1 − b) with bert_score's baseline
        file, or the one hyoka ships for (lang, model).
    device: "cpu", "cuda", "cuda:N"; default CUDA when this build has it and a GPU answers.
    batch_size: bert_score's batch size. bert_score scores 64 pairs at a time with padding that
        floors some tokens' best match at 0; hyoka reproduces that for the same numbers. None
        turns it off.
    dtype: "f32" (bert_score's numbers), "bf16" or "f16" on a GPU.
    batch_tokens: padded tokens per encoder batch (speed only; default by device).
    nthreads, all_layers, use_fast_tokenizer: bert_score's; hyoka tokenizes in parallel, reads
        one layer, and always matches bert_score's fast tokenizer.
    """

    def __init__(
        self,
        model_type: str | None = None,
        num_layers: int | None = None,
        batch_size: int | None = 64,
        nthreads: int = 4,
        all_layers: bool = False,
        idf: bool = False,
        idf_sents: Sequence[str] | None = None,
        device: str | None = None,
        lang: str | None = None,
        rescale_with_baseline: bool = False,
        baseline_path: str | os.PathLike[str] | None = None,
        use_fast_tokenizer: bool = True,
        *,
        dtype: str = "f32",
        batch_tokens: int | None = None,
    ) -> None:
        if all_layers:
            raise UsageError("all_layers=True is not supported: hyoka reads one layer (num_layers)")
        for name, value, least in (("num_layers", num_layers, 0), ("batch_size", batch_size, 1), ("batch_tokens", batch_tokens, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                what = "a layer from 0 (the embeddings) up" if name == "num_layers" else "an integer of at least 1"
                raise UsageError(f"{name}: {value!r} is not {what}")
        if not isinstance(idf, bool):
            raise UsageError("idf: True or False (an idf dict is not supported; pass idf_sents)")
        if rescale_with_baseline and lang is None and baseline_path is None:
            raise UsageError("rescale_with_baseline needs lang (or baseline_path)")
        self.lang = lang if lang is not None or model_type is not None else "ja"
        self.idf = idf
        self.batch_size = batch_size
        self.rescale_with_baseline = rescale_with_baseline
        self.baseline_path = None if baseline_path is None else os.fspath(baseline_path)
        self._encoder = _hyoka.Encoder(model_type, self.lang or "ja", num_layers, _device(device), dtype, batch_tokens)
        self._idf_sents = None if idf_sents is None else _texts("idf_sents", idf_sents)
        self._baseline = (
            self._encoder.baseline(self.lang, self.baseline_path) if rescale_with_baseline else None
        )

    @property
    def model_type(self) -> str:
        return self._encoder.model

    @property
    def num_layers(self) -> int:
        return self._encoder.layer

    @property
    def hash(self) -> str:
        """Names the model, layer, idf, rescaling and hyoka's version, as bert_score's hash."""
        text = f"{self.model_type}_L{self.num_layers}{'_idf' if self.idf else '_no-idf'}_version=hyoka-{_hyoka.version()}"
        if self.rescale_with_baseline:
            text += "-custom-rescaled" if self.baseline_path else "-rescaled"
        return text + "_fast-tokenizer"

    def compute_idf(self, sents: Sequence[str]) -> None:
        """Use `sents` for idf from now on (bert_score's method)."""
        self._idf_sents = _texts("sents", sents)

    def score(
        self,
        cands: Sequence[str],
        refs: Sequence[str] | Sequence[Sequence[str]],
        verbose: bool = False,
        batch_size: int | None = None,
        return_hash: bool = False,
        *,
        return_torch: bool = False,
    ) -> Any:
        """(P, R, F), each of shape (N,): float32 numpy arrays, torch tensors with
        return_torch=True. Several references per candidate give each column's maximum."""
        candidates = _texts("cands", cands)
        references = _references(refs, len(candidates))
        group = self.batch_size if batch_size is None else batch_size
        job = self._encoder.prepare(candidates, references, self.idf, group or None, self._idf_sents)
        update = _progress(job.pairs, verbose)
        for start in range(0, job.pairs, _CHUNK):
            self._encoder.score(job, start, start + _CHUNK)
            if update:
                update(min(_CHUNK, job.pairs - start))
        p, r, f = job.results(self._baseline)
        out = tuple(_as_output(v, return_torch) for v in (p, r, f))
        return (out, self.hash) if return_hash else out


def score(
    cands: Sequence[str],
    refs: Sequence[str] | Sequence[Sequence[str]],
    model_type: str | None = None,
    num_layers: int | None = None,
    verbose: bool = False,
    idf: bool = False,
    device: str | None = None,
    batch_size: int | None = 64,
    nthreads: int = 4,
    all_layers: bool = False,
    lang: str | None = None,
    return_hash: bool = False,
    rescale_with_baseline: bool = False,
    baseline_path: str | os.PathLike[str] | None = None,
    use_fast_tokenizer: bool = True,
    *,
    dtype: str = "f32",
    batch_tokens: int | None = None,
    return_torch: bool = False,
) -> Any:
    """BERTScore of each candidate against its reference(s), as bert_score.score: (P, R, F), or
    ((P, R, F), hash) with return_hash. idf is computed from the references. The arguments are
    BERTScorer's; one call loads the encoder once (keep a BERTScorer for many calls)."""
    # Bad texts are refused before an encoder is looked for.
    _references(refs, len(_texts("cands", cands)))
    scorer = BERTScorer(
        model_type=model_type,
        num_layers=num_layers,
        batch_size=batch_size,
        nthreads=nthreads,
        all_layers=all_layers,
        idf=idf,
        device=device,
        lang=lang,
        rescale_with_baseline=rescale_with_baseline,
        baseline_path=baseline_path,
        use_fast_tokenizer=use_fast_tokenizer,
        dtype=dtype,
        batch_tokens=batch_tokens,
    )
    return scorer.score(cands, refs, verbose=verbose, return_hash=return_hash, return_torch=return_torch)


__all__ = ["BERTScorer", "score"]
