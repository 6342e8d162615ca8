#!/usr/bin/env bash
# Prefill and decoding benchmark on real judge prompts, in one run: hyoka with its weights kept as stored and
# expanded at load (peak RSS of each), and llama.cpp on the same GGUF, token ids and threads
# when llama-cpp-python is in $HYOKA_REF_PYTHON (default python3; install it with
# CMAKE_ARGS=-DGGML_NATIVE=ON pip install llama-cpp-python).
# Usage: scripts/bench/bench_prefill.sh [N_ITEMS] [THREADS] [GGUF]
# HYOKA_BENCH_WEIGHTS="stored" skips the expanded run (an 8B GGUF expanded to f32 needs ~32 GB);
# a "+GEMM" variant (e.g. "stored stored+bf16 stored+int8") runs with --prefill-gemm GEMM;
# HYOKA_TEST_INT8_BODY=avx2 runs int8 on the AVX2 body (what CPUs without AVX-512 VNNI get), and
# LLAMA_CPP_LIB_PATH points llama-cpp-python at another build of llama.cpp (e.g. AVX2 only).
# Needs a release build, the test models and DBDC3 items; /usr/bin/time (Debian's `time`).
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-20}"
threads="${2:-2}"
models="${HYOKA_TEST_MODELS:-$HOME/.cache/hyoka/test-models}"
gguf="${3:-$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}"
py="${HYOKA_REF_PYTHON:-python3}"
bin="${HYOKA_BIN:-target/release/hyoka}"
decode="${HYOKA_DECODE_TOKENS:-64}"
work=$(mktemp -d)
"$bin" import dbdc3 data/dbdc3-ja.tar.gz -o "$work/items.jsonl" --max-context 4 2>/dev/null
variants="${HYOKA_BENCH_WEIGHTS:-stored expanded}"
for variant in $variants; do
  gemm=(); [[ "$variant" == *+* ]] && gemm=(--prefill-gemm "${variant#*+}")
  RAYON_NUM_THREADS="$threads" /usr/bin/time -f "%M" -o "$work/rss-$variant" "$bin" bench \
    --model "$gguf" --input "$work/items.jsonl" --n "$n" --weights "${variant%%+*}" "${gemm[@]}" \
    --rubric "${HYOKA_BENCH_RUBRIC:-dialogue6-ja}" --dump-tokens "$work/tokens.json" --decode-tokens "$decode" > "$work/hyoka-$variant.json"
done
if "$py" -c "import llama_cpp" 2>/dev/null; then
  "$py" scripts/bench/bench_llama_cpp.py "$gguf" "$work/tokens.json" --threads "$threads" --decode-tokens "$decode" > "$work/llama.json"
fi
python3 - "$work" "$(stat -c %s "$gguf")" $variants <<'PY'
import json, os, sys
w, size = sys.argv[1], int(sys.argv[2])
h = {m: json.load(open(f"{w}/hyoka-{m}.json")) for m in sys.argv[3:] if os.path.exists(f"{w}/hyoka-{m}.json")}
rss = {m: int(open(f"{w}/rss-{m}").read().split()[-1]) / 1e6 for m in h}
l = json.load(open(f"{w}/llama.json")) if os.path.exists(f"{w}/llama.json") else None
s = h.get("stored") or next(iter(h.values()))
print(f"prefill tok/s on {s['items']} prompts (mean {s['mean_prompt_tokens']:.0f} tokens), GGUF {size / 1e9:.2f} GB:")
if l:
    print(f"  llama.cpp batch 1       {l['prefill_tok_s']:8.1f} ({l['threads']} threads)")
for m in h:
    for k in ("prefill_batch1_tok_s", "prefill_batched_tok_s"):
        ratio = f" = {h[m][k] / l['prefill_tok_s']:.2f}x llama.cpp" if l else ""
        print(f"  hyoka {m:12} {k[8:-6]:9} {h[m][k]:8.1f}{ratio}")
    body = f"; 8-bit products on {h[m]['int8_body']}" if h[m].get("prefill_gemm") == "int8" else ""
    print(f"  hyoka {m:12} judge layout {h[m]['judge_items_s']:.2f} items/s; peak RSS {rss[m]:.2f} GB{body}")
print(f"decoding tok/s, {s['decode_tokens']} greedy tokens after the first prompt (batch 1) / after all {s['decode_rows']}:")
if l and l.get("decode_batch1_tok_s"):
    print(f"  llama.cpp batch 1       {l['decode_batch1_tok_s']:8.1f}")
for m in h:
    ratio = f" = {h[m]['decode_batch1_tok_s'] / l['decode_batch1_tok_s']:.2f}x llama.cpp" if l and l.get("decode_batch1_tok_s") else ""
    print(f"  hyoka {m:12} batch 1 {h[m]['decode_batch1_tok_s']:8.1f}{ratio}; {s['decode_rows']} rows {h[m]['decode_batched_tok_s']:8.1f}")
if "expanded" in h and "stored" in h:
    print(f"  stored / expanded, batched prefill: {s['prefill_batched_tok_s'] / h['expanded']['prefill_batched_tok_s']:.3f}")
PY
