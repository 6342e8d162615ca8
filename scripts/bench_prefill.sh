#!/usr/bin/env bash
# Prefill benchmark: hyoka against llama.cpp on the same GGUF, the same token ids and the same
# thread count, in one run. Usage: scripts/bench_prefill.sh [N_ITEMS] [THREADS]
# Needs a release build, the test models, DBDC3 items, and llama-cpp-python in $HYOKA_REF_PYTHON
# (default: python3); install it with CMAKE_ARGS=-DGGML_NATIVE=ON pip install llama-cpp-python.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-20}"
threads="${2:-2}"
models="${HYOKA_TEST_MODELS:-$HOME/.cache/hyoka/test-models}"
gguf="$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
py="${HYOKA_REF_PYTHON:-python3}"
work=$(mktemp -d)
[ -f "$work/items.jsonl" ] || target/release/hyoka import dbdc3 ../shared/datasets/dbdc3-ja -o "$work/items.jsonl" --max-context 4 2>/dev/null
RAYON_NUM_THREADS="$threads" target/release/hyoka bench --model "$gguf" --input "$work/items.jsonl" --n "$n" \
  --rubric "${HYOKA_BENCH_RUBRIC:-dialogue6-ja}" --dump-tokens "$work/tokens.json" | tee "$work/hyoka.json"
"$py" scripts/bench_llama_cpp.py "$gguf" "$work/tokens.json" --threads "$threads" | tee "$work/llama.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
h = json.load(open(f"{w}/hyoka.json")); l = json.load(open(f"{w}/llama.json"))
print(f"prefill tok/s on {h['items']} prompts (mean {h['mean_prompt_tokens']:.0f} tokens), {l['threads']} threads:")
print(f"  llama.cpp batch 1     {l['prefill_tok_s']:8.1f}")
for k in ("prefill_batch1_tok_s", "prefill_batched_tok_s"):
    print(f"  hyoka {k[8:-6]:15} {h[k]:8.1f}  = {h[k] / l['prefill_tok_s']:.2f}x llama.cpp")
print(f"  hyoka judge layout: {h['judge_items_s']:.2f} items/s (all aspects), "
      f"{h['judge_forward_tokens']} forward tokens vs {h['judge_naive_tokens']} for one prompt per aspect")
PY
