#!/usr/bin/env bash
# The GPU check, in one command: the parity suites on a GPU in bf16, f16 and f32 (the same tests
# the CPU runs, device and dtype from HYOKA_TEST_DEVICE / HYOKA_TEST_DTYPE, tolerances per dtype
# in each test), then the GPU benchmarks: BERTScore next to bert_score, judge prefill and decoding
# next to transformers on the same tokens (Qwen2.5-0.5B when present, and a random-weight GGUF of
# Llama-3.1-8B's shapes from scripts/synthetic_gguf.py).
# Usage: scripts/gpu_check.sh [DEVICE]   (default cuda; metal on Apple GPUs)
#   HYOKA_GPU_STEPS    which steps (default: "suites attention bench-bertscore bench-judge");
#                      HYOKA_BENCH_PAIRS (20000), HYOKA_BENCH_ITEMS (20) size the benchmarks
#   HYOKA_GPU_LOGS     the folder for the steps' logs (default: a new temporary one)
#   HYOKA_GPU_BUNDLE   .gpu/bundle.tar.xz from scripts/gpu_bundle.sh: use its binaries instead of
#                      building (a GPU machine without cargo); its items, tokenizers and wheels
#                      stand in for the dataset and test models; tests needing a model that is
#                      not there are skipped (HYOKA_SKIP_MODEL_TESTS=1) and say so.
# Otherwise needs cargo, nvcc (scripts/cuda_toolchain.sh installs one from PyPI) and the test
# models (python3 scripts/fetch_test_models.py). The benchmarks need torch, transformers, gguf
# and bert-score in $HYOKA_REF_PYTHON (default python3). Prints one PASS/FAIL line per step and
# the worst differences seen; exits non-zero when a step fails.
set -uo pipefail
cd "$(dirname "$0")/.."
device="${1:-cuda}"
feature="${device%%:*}"
steps=" ${HYOKA_GPU_STEPS:-suites attention bench-bertscore bench-judge} "
log="${HYOKA_GPU_LOGS:-$(mktemp -d)}"
mkdir -p "$log"
status=0
py="${HYOKA_REF_PYTHON:-python3}"
step() { # NAME COMMAND...: run, keep the log, print PASS/FAIL and the worst differences seen
  local name="$1"; shift
  local t0=$SECONDS
  if "$@" > "$log/$name.log" 2>&1; then echo "PASS  $name ($((SECONDS - t0)) s)"; else echo "FAIL  $name (log: $log/$name.log)"; status=1; fi
  # The tests' verdicts, what they skipped, and the three worst differences they printed.
  grep -h "test result\|panicked" "$log/$name.log" | sed 's/^/      /' | head -8
  grep -h "skipping" "$log/$name.log" | sort -u | sed 's/^/      /'
  grep -h "worst\|max |Δ" "$log/$name.log" | awk '{print $NF "\t" $0}' | sort -g | tail -3 | cut -f2- | sed 's/^/      /'
}
wants() { [[ "$steps" == *" $1 "* ]]; }
command -v nvidia-smi > /dev/null &&
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
# The suites that take their device and dtype from the environment.
suites=(runtime_parity judge_parity gguf_parity bertscore_parity gguf_converter)
if [ -n "${HYOKA_GPU_BUNDLE:-}" ]; then
  b="$log/bundle"
  mkdir -p "$b"
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$HYOKA_GPU_BUNDLE" "$b" || exit 1
  echo "bundle of $(tr '\n' ' ' < "$b/commit")"
  bin="$b/bin/hyoka"
  items="$b/items.jsonl"
  export HYOKA_TEST_MODELS="${HYOKA_TEST_MODELS:-$b/models}" HYOKA_SKIP_MODEL_TESTS=1 CARGO_MANIFEST_DIR="$PWD"
  # The CUDA libraries hyoka links (cuBLAS, cuRAND, the runtime): PyTorch's wheels carry them.
  libs=$("$py" -c 'import glob, os, site
dirs = {os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/**/lib*.so.*", recursive=True)}
print(":".join(sorted(dirs)))')
  # The driver's libcuda.so.1, where NVIDIA's container images mount it.
  [ -d /usr/local/nvidia/lib64 ] && libs="$libs:/usr/local/nvidia/lib64"
  export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
  "$py" -m pip install -q --no-index --no-deps --target "$b/site" "$b"/wheels/*.whl > "$log/wheels.log" 2>&1
  export PYTHONPATH="$b/site:${PYTHONPATH:-}"
  suite_cmd() { cmd=("$b/tests/$1" "${@:2}"); }
else
  if [ "$feature" = cuda ] && ! command -v nvcc > /dev/null; then eval "$(scripts/cuda_toolchain.sh)"; fi
  step build cargo build --release --features "$feature"
  bin=target/release/hyoka
  items="$log/items.jsonl"
  step import "$bin" import dbdc3 ../shared/datasets/dbdc3-ja -o "$items"
  suite_cmd() { cmd=(cargo test --release --features "$feature" --test "$1" -- "${@:2}"); }
fi
models="${HYOKA_TEST_MODELS:-$HOME/.cache/hyoka/test-models}"
for dtype in bf16 f16 f32; do
  if wants suites; then
    for s in "${suites[@]}"; do
      suite_cmd "$s" --nocapture
      step "$s-$dtype" env HYOKA_TEST_DEVICE="$device" HYOKA_TEST_DTYPE="$dtype" "${cmd[@]}"
    done
  fi
  if wants attention; then
    suite_cmd attention_scale --ignored --nocapture
    step "attention-2^31-$dtype" env HYOKA_TEST_DEVICE="$device" HYOKA_TEST_DTYPE="$dtype" "${cmd[@]}"
  fi
done
if wants bench-bertscore; then
  bench_models="$models"
  if [ -n "${b:-}" ] && [ ! -e "$models/all-MiniLM-L6-v2/model.safetensors" ]; then
    # The bundle carries all-MiniLM-L6-v2's tokenizer and config only: random weights (seeded)
    # of its shapes. Both sides load the same folder, so the speed ratio and max |ΔF| mean what
    # they mean with the real weights.
    bench_models="$log/random-models"
    mkdir -p "$bench_models/all-MiniLM-L6-v2"
    cp "$b"/bench/minilm-tokenizer/* "$bench_models/all-MiniLM-L6-v2/"
    "$py" -c 'import sys, torch, transformers
torch.manual_seed(0)
transformers.BertModel(transformers.BertConfig.from_pretrained(sys.argv[1])).save_pretrained(sys.argv[1])' \
      "$bench_models/all-MiniLM-L6-v2" > "$log/minilm.log" 2>&1
  fi
  step bench-bertscore env HYOKA_BIN="$bin" HYOKA_ITEMS="$items" HYOKA_TEST_MODELS="$bench_models" \
    scripts/bench_bertscore.sh "${HYOKA_BENCH_PAIRS:-20000}" "$(nproc)" "$device"
  grep -h "pairs/s\|MiB" "$log/bench-bertscore.log" | grep -v "max |Δ" | sed 's/^/      /'
fi
bench_judge() { # NAME GGUF [hyoka flags...]: hyoka bench and transformers on the same token ids
  local name="$1" gguf="$2"; shift 2
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$log/$name.mem" 2> /dev/null &
  local smi=$!
  step "$name" "$bin" bench --device "$device" --model "$gguf" --input "$items" --n "${HYOKA_BENCH_ITEMS:-20}" \
    --dump-tokens "$log/$name.tokens.json" --decode-tokens 64 "$@"
  kill "$smi" 2> /dev/null
  local dtype  # hyoka's, for transformers too
  dtype=$(grep -o '"dtype": "[a-z0-9]*"' "$log/$name.log" | head -1 | cut -d'"' -f4)
  step "$name-transformers" "$py" scripts/bench_torch_prefill.py "$gguf" "$log/$name.tokens.json" \
    --device "$device" --decode-tokens 64 ${dtype:+--dtype "$dtype"}
  python3 - "$log/$name" <<'PY'
import json, sys
base = sys.argv[1]
def last_json(path):  # the report that follows the progress lines
    text = open(path).read()
    return json.loads(text[text.rindex("\n{") + 1:] if "\n{" in text else text[text.index("{"):])
try:
    h = last_json(base + ".log")
    t = last_json(base + "-transformers.log")
except (OSError, ValueError) as e:
    sys.exit(f"      no figures: {e}")
mem = [int(x) for x in open(base + ".mem").read().split() if x.isdigit()]
r = lambda a, b: f"{a:8.1f} ({a / b:.2f}x transformers)" if a and b else f"{a}"  # noqa: E731
print(f"      {h['items']} prompts, mean {h['mean_prompt_tokens']:.0f} tokens; {t['engine']}")
print(f"      prefill tok/s batch 1  {r(h['prefill_batch1_tok_s'], t['prefill_tok_s'])}; transformers {t['prefill_tok_s']:.1f}")
print(f"      prefill tok/s batched  {h['prefill_batched_tok_s']:8.1f}; judge layout {h['judge_items_s']:.2f} items/s")
print(f"      decode tok/s batch 1   {r(h['decode_batch1_tok_s'], t['decode_batch1_tok_s'])}; "
      f"{h['decode_rows']} rows together {h['decode_batched_tok_s']:.1f}")
if mem:
    print(f"      peak GPU memory: hyoka {max(mem)} MiB (nvidia-smi, whole GPU), transformers {t['peak_gpu_gb']:.1f} GB (allocated)")
PY
}
if wants bench-judge; then
  qwen="$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
  [ -e "$qwen" ] && bench_judge bench-judge-qwen0.5b "$qwen"
  synth="${HYOKA_SYNTH_8B:-$HOME/.cache/hyoka/synthetic/llama-8b-q4_k_m.gguf}"
  if [ ! -e "$synth" ]; then
    mkdir -p "$(dirname "$synth")"
    step synthetic-8b "$py" scripts/synthetic_gguf.py --shape llama-8b --quant q4_k_m -o "$synth" --models "$models"
  fi
  bench_judge bench-judge-llama8b "$synth" --tokenizer "$models/llama-3-tokenizer"
fi
echo "logs: $log"
exit $status
