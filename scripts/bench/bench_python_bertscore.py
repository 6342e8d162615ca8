#!/usr/bin/env python3
"""hyoka.bertscore against bert_score 0.3.13 in one process, on DBDC3-ja pairs (each system
response against the turn before it), the same encoder files, the same layer and batch_size.

Prints, per library, the median of alternated timed runs for a whole `score()` call (loading the
encoder included) and for a loaded scorer's `score()` (`BERTScorer`), the ratio, and the largest
|ΔP|, |ΔR|, |ΔF| between the two. Needs torch and bert-score (scripts/requirements-reference.txt)
and the hyoka package (`pip install .`) in one environment.

Usage: python scripts/bench/bench_python_bertscore.py [--pairs 1500] [--model DIR] [--layer 12]
       [--device cpu] [--runs 3]
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from dbdc3_data import dialogues  # noqa: E402


def dbdc3_pairs(n: int) -> tuple[list[str], list[str]]:
    pairs = []
    for _, dialogue in dialogues():
        turns = dialogue["turns"]
        pairs += [(t["utterance"], p["utterance"]) for p, t in zip(turns, turns[1:]) if t["speaker"] == "S"]
    if len(pairs) < n:
        raise SystemExit(f"only {len(pairs)} pairs in DBDC3-ja")
    pairs = pairs[:n]
    return [c for c, _ in pairs], [r for _, r in pairs]


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    default_model = Path(os.environ.get("HYOKA_TEST_MODELS", Path.home() / ".cache/hyoka/test-models")) / "multilingual-e5-small"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=1500)
    ap.add_argument("--model", default=str(default_model))
    ap.add_argument("--layer", type=int, default=12)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    import bert_score
    import torch

    import hyoka
    from hyoka import bertscore as hb

    cands, refs = dbdc3_pairs(args.pairs)
    common = dict(model_type=args.model, num_layers=args.layer, batch_size=args.batch_size, device=args.device)
    ref_call = lambda: bert_score.score(cands, refs, use_fast_tokenizer=True, **common)  # noqa: E731
    our_call = lambda: hb.score(cands, refs, **common)  # noqa: E731
    ref_scorer = bert_score.BERTScorer(use_fast_tokenizer=True, **common)
    our_scorer = hb.BERTScorer(**common)

    # One untimed call each (files in the page cache, lazy initialisation), then alternated runs.
    ref_prf = [t.numpy() for t in ref_call()]
    our_prf = our_call()
    times: dict[str, list[float]] = {"bert_score.score": [], "hyoka.bertscore.score": [],
                                     "bert_score BERTScorer.score": [], "hyoka BERTScorer.score": []}
    for _ in range(args.runs):
        times["bert_score.score"].append(timed(ref_call)[0])
        times["hyoka.bertscore.score"].append(timed(our_call)[0])
        times["bert_score BERTScorer.score"].append(timed(lambda: ref_scorer.score(cands, refs))[0])
        times["hyoka BERTScorer.score"].append(timed(lambda: our_scorer.score(cands, refs))[0])

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.pairs} DBDC3-ja pairs, {Path(args.model).name} layer {args.layer}, batch_size {args.batch_size}, "
          f"device {args.device}; torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"bert_score 0.3.13, hyoka {hyoka.__version__}; median of {args.runs} alternated runs")
    print("| call | seconds | pairs/s |")
    print("|---|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.2f} | {args.pairs / v:.0f} |")
    print(f"whole call: hyoka {med['bert_score.score'] / med['hyoka.bertscore.score']:.2f}× bert_score; "
          f"loaded scorer: {med['bert_score BERTScorer.score'] / med['hyoka BERTScorer.score']:.2f}×")
    for name, a, b in zip("PRF", ref_prf, our_prf):
        print(f"max |Δ{name}| = {np.abs(a - b).max():.2e}")


if __name__ == "__main__":
    main()
