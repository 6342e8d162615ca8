#!/usr/bin/env bash
# BERTScore benchmark: hyoka against bert_score 0.3.13 on the same pairs (DBDC3-ja responses
# against their last context turn), the same encoder (all-MiniLM-L6-v2, layer 6) and the same
# thread count, in one run. Model loading is not timed on either side.
# Usage: scripts/bench/bench_bertscore.sh [N_PAIRS] [THREADS] [DEVICE]   (DEVICE: cpu or cuda)
# Needs a release build, the test models, and bert-score in $HYOKA_REF_PYTHON (default python3).
# HYOKA_BIN: the hyoka binary (default target/release/hyoka); HYOKA_ITEMS: DBDC3 items already
# imported (default: imported from data/dbdc3-ja.tar.gz).
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-1500}"
threads="${2:-2}"
device="${3:-cpu}"
models="${HYOKA_TEST_MODELS:-$HOME/.cache/hyoka/test-models}"
enc="$models/all-MiniLM-L6-v2"
py="${HYOKA_REF_PYTHON:-python3}"
bin="${HYOKA_BIN:-target/release/hyoka}"
work=$(mktemp -d)
if [ -n "${HYOKA_ITEMS:-}" ]; then
  cp "$HYOKA_ITEMS" "$work/all.jsonl"
else
  "$bin" import dbdc3 data/dbdc3-ja.tar.gz -o "$work/all.jsonl" >/dev/null 2>&1
fi
# The 1,500 items with a context turn (the 150 openings have none); repeated, with fresh ids,
# when more pairs are asked for.
python3 - "$work" "$n" <<'PY'
import json, sys
w, n = sys.argv[1], int(sys.argv[2])
items = [it for it in map(json.loads, open(f"{w}/all.jsonl")) if it["context"]]
with open(f"{w}/items.jsonl", "w") as f:
    for k in range(n):
        it = dict(items[k % len(items)]); it["id"] = f"{it['id']}#{k // len(items)}"
        f.write(json.dumps(it, ensure_ascii=False) + "\n")
PY
# HYOKA_BERTSCORE_FLAGS: more flags for hyoka (e.g. "--tf32", "--dtype bf16").
RAYON_NUM_THREADS="$threads" "$bin" bertscore --model "$enc" --layer 6 --against last-turn ${HYOKA_BERTSCORE_FLAGS:-} \
  --device "$device" -i "$work/items.jsonl" -o "$work/hyoka.jsonl" 2> "$work/hyoka.log"
cat "$work/hyoka.log"
"$py" - "$work" "$enc" "$threads" "$device" <<'PY'
import json, sys, time
import torch
from bert_score import BERTScorer
w, enc, threads, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
items = [json.loads(l) for l in open(f"{w}/items.jsonl")]
cands = [i["response"]["text"] for i in items]
refs = [i["context"][-1]["text"] for i in items]
scorer = BERTScorer(model_type=enc, num_layers=6, use_fast_tokenizer=True, device=device)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
t = time.perf_counter()
P, R, F = scorer.score(cands, refs, batch_size=64)
if device == "cuda":
    torch.cuda.synchronize()
secs = time.perf_counter() - t
ours = [json.loads(l)["bertscore"]["F"] for l in open(f"{w}/hyoka.jsonl")]
diff = max(abs(a - b) for a, b in zip(ours, F.tolist()))
line = open(f"{w}/hyoka.log").read().split("scored ")[-1]
hyoka_rate = float(line.split("(")[1].split(" pairs/s")[0])
print(f"bert_score {len(cands)} pairs in {secs:.2f}s = {len(cands) / secs:.1f} pairs/s ({threads} threads, {device})")
if device == "cuda":
    print(f"bert_score peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
print(f"hyoka {hyoka_rate:.1f} pairs/s = {hyoka_rate / (len(cands) / secs):.2f}x bert_score; max |ΔF| {diff:.2e}")
PY
