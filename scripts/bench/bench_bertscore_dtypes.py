#!/usr/bin/env python3
"""BERTScore on a GPU in every dtype, next to bert_score in f32 and fp16, in one run.

Usage: bench_bertscore_dtypes.py ITEMS.jsonl --encoder DIR:LAYER:LABEL [--encoder ...]
           [--pairs 100000] [--ref-pairs 20000] [--hyoka target/release/hyoka] [--device cuda]
           [--json OUT.json]
ITEMS: DBDC3 items (`hyoka import dbdc3`); the pairs are each response against its last context
turn. DBDC3 has about 1,500 such pairs and both scorers encode each distinct sentence once, so
past them every pair is made distinct: in the r-th repetition (r ≥ 1) the response is followed by
the response of the item r further on and the turn by the turn of the item 2r further on (two
utterances joined, about twice as long). --repeat keeps plain repetitions instead (then the
encoders run once per distinct sentence and the matching dominates). For each encoder (a folder bert_score and hyoka both
load), hyoka scores all the pairs in f32, f32 with --tf32, bf16 and f16; bert_score 0.3.13 scores
the first --ref-pairs of them (batch_size 64, its default) in f32 and with the model in fp16
(`scorer._model.half()`), after a warm-up call. Model loading is timed on neither side: hyoka's
figure is its own "pairs/s" line, bert_score's the time of its score() call.
Printed per encoder and dtype: pairs/s, the ratio to bert_score f32 and fp16, max |ΔF| against
bert_score f32 on the shared pairs, the useful TFLOP/s (the encoder's matrix products and
attention over the distinct sentences' real tokens, padding not counted) and its share of the dtype's dense peak on an
H200 SXM (f32 67, tf32 494, bf16/f16 989 TFLOP/s), and the GPU's busy share (nvidia-smi's
utilization, sampled every 100 ms while hyoka scores). Needs torch, transformers, bert-score.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEAK = {"f32": 67e12, "tf32": 494e12, "bf16": 989e12, "f16": 989e12}
VARIANTS = [("f32", ["--dtype", "f32"]), ("tf32", ["--dtype", "f32", "--tf32"]),
            ("bf16", ["--dtype", "bf16"]), ("f16", ["--dtype", "f16"])]


def make_pairs(items_path: Path, n: int, out: Path, distinct: bool):
    with open(items_path, encoding="utf-8") as f:
        items = [it for it in map(json.loads, f) if it["context"]]
    m = len(items)
    cands, refs = [], []
    with open(out, "w", encoding="utf-8") as f:
        for k in range(n):
            r = k // m
            it = json.loads(json.dumps(items[k % m]))
            it["id"] = f"{it['id']}#{r}"
            if distinct and r > 0:
                it["response"]["text"] += items[(k + r) % m]["response"]["text"]
                it["context"][-1]["text"] += items[(k + 2 * r) % m]["context"][-1]["text"]
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
            cands.append(it["response"]["text"])
            refs.append(it["context"][-1]["text"])
    return cands, refs


def encoder_flops(folder: str, layer: int, texts) -> float:
    """Multiply-adds × 2 of `layer` BERT layers over each sentence's own tokens."""
    from transformers import AutoConfig, AutoTokenizer
    cfg = AutoConfig.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder, use_fast=True)
    h, ffn = cfg.hidden_size, cfg.intermediate_size
    total = 0.0
    for ids in tok(texts, truncation=True, max_length=510)["input_ids"]:
        n = len(ids)
        total += layer * (2 * n * (4 * h * h + 2 * h * ffn) + 4 * n * n * h)
    return total


def run_hyoka(binary, folder, layer, device, flags, items, out, log):
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    t = time.perf_counter()
    p = subprocess.run([binary, "bertscore", "--model", folder, "--layer", str(layer), "--against", "last-turn",
                        "--device", device, *flags, "-i", str(items), "-o", str(out), "--overwrite"],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    smi.terminate()
    busy = [int(x) for x in smi.communicate()[0].split() if x.isdigit()]
    log.write_text(p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"hyoka {' '.join(flags)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    m = re.search(r"scored (\d+) items in ([0-9.]+)s \(([0-9.]+) pairs/s", p.stderr)
    scoring = float(m.group(2))
    # The samples while it scored: the run's last `scoring` seconds.
    tail = busy[-max(1, int(scoring * 10)):] if busy else []
    with open(out, encoding="utf-8") as f:
        scores = [json.loads(line)["bertscore"]["F"] for line in f]
    return {"pairs_s": float(m.group(3)), "scoring_s": scoring, "wall_s": wall,
            "gpu_busy": sum(tail) / len(tail) / 100 if tail else None}, scores


def run_bert_score(folder, layer, device, cands, refs, half):
    import torch
    from bert_score import BERTScorer
    scorer = BERTScorer(model_type=folder, num_layers=layer, use_fast_tokenizer=True, device=device)
    if half:
        scorer._model.half()
    scorer.score(cands[:64], refs[:64], batch_size=64)  # CUDA's first-call costs, untimed
    torch.cuda.synchronize()
    t = time.perf_counter()
    _, _, F = scorer.score(cands, refs, batch_size=64)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t
    return {"pairs_s": len(cands) / secs, "seconds": secs}, F.float().tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("items", type=Path)
    ap.add_argument("--encoder", action="append", required=True, metavar="DIR:LAYER:LABEL")
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--ref-pairs", type=int, default=20_000)
    ap.add_argument("--hyoka", default="target/release/hyoka")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeat", action="store_true", help="plain repetitions past DBDC3's pairs")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    items = work / "items.jsonl"
    cands, refs = make_pairs(args.items, args.pairs, items, distinct=not args.repeat)
    distinct = sorted(set(cands) | set(refs))
    m = min(args.ref_pairs, args.pairs)
    report = {"pairs": args.pairs, "ref_pairs": m, "encoders": {}}
    for spec in args.encoder:
        folder, layer, label = spec.rsplit(":", 2)
        layer = int(layer)
        flops = encoder_flops(folder, layer, distinct)
        ref32, f32 = run_bert_score(folder, layer, args.device, cands[:m], refs[:m], half=False)
        ref16, f16 = run_bert_score(folder, layer, args.device, cands[:m], refs[:m], half=True)
        ref16["max_dF_vs_f32"] = max(abs(a - b) for a, b in zip(f16, f32))
        rows = {"bert_score f32": ref32, "bert_score fp16": ref16}
        print(f"{label} (layer {layer}): {args.pairs} pairs, {len(distinct)} distinct sentences, "
              f"{flops / args.pairs / 1e9:.2f} GFLOP a pair; "
              f"bert_score on the first {m}: f32 {ref32['pairs_s']:.0f} pairs/s, fp16 {ref16['pairs_s']:.0f} "
              f"(max |ΔF| fp16 vs f32 {ref16['max_dF_vs_f32']:.1e})")
        for name, flags in VARIANTS:
            r, ours = run_hyoka(args.hyoka, folder, layer, args.device, flags, items, work / f"{label}-{name}.jsonl",
                                work / f"{label}-{name}.log")
            r["x_bert_score_f32"] = r["pairs_s"] / ref32["pairs_s"]
            r["x_bert_score_fp16"] = r["pairs_s"] / ref16["pairs_s"]
            r["max_dF_vs_bert_score_f32"] = max(abs(a - b) for a, b in zip(ours[:m], f32))
            r["tflop_s"] = flops / r["scoring_s"] / 1e12
            r["share_of_peak"] = flops / r["scoring_s"] / PEAK[name]
            rows[f"hyoka {name}"] = r
            busy = f"{r['gpu_busy']:.0%}" if r["gpu_busy"] is not None else "?"
            print(f"  hyoka {name:5} {r['pairs_s']:9.0f} pairs/s = {r['x_bert_score_f32']:5.2f}x bert_score f32, "
                  f"{r['x_bert_score_fp16']:5.2f}x fp16; max |ΔF| {r['max_dF_vs_bert_score_f32']:.1e}; "
                  f"{r['tflop_s']:6.1f} TFLOP/s = {r['share_of_peak']:.1%} of peak; GPU busy {busy}; "
                  f"scoring {r['scoring_s']:.1f} s of {r['wall_s']:.1f} s")
            sys.stdout.flush()
        report["encoders"][label] = {"layer": layer, "distinct_sentences": len(distinct),
                                     "gflop_a_pair": flops / args.pairs / 1e9, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
