#!/usr/bin/env bash
# The GPU check, in one command: the parity suites on a GPU in bf16, f16 and f32 (the same tests
# the CPU runs, device and dtype from HYOKA_TEST_DEVICE / HYOKA_TEST_DTYPE, tolerances per dtype
# in each test), then the GPU benchmarks (BERTScore next to bert_score, judge prefill).
# Usage: scripts/gpu_check.sh [DEVICE]   (default cuda; metal on Apple GPUs)
# Needs cargo, nvcc (scripts/cuda_toolchain.sh installs one from PyPI) and the test models
# (python3 scripts/fetch_test_models.py); the benchmarks need bert-score and torch in
# $HYOKA_REF_PYTHON (default python3). Prints one summary line per step; exits non-zero when a
# suite fails.
set -uo pipefail
cd "$(dirname "$0")/.."
device="${1:-cuda}"
feature="${device%%:*}"
log=$(mktemp -d)
status=0
step() { # NAME COMMAND...: run, keep the log, print PASS/FAIL and the worst differences seen
  local name="$1"; shift
  if "$@" > "$log/$name.log" 2>&1; then echo "PASS  $name"; else echo "FAIL  $name (log: $log/$name.log)"; status=1; fi
  grep -h "worst\|max |Δ|" "$log/$name.log" | sed 's/^/      /' | sort -u | head -20
}
# The suites that take their device and dtype from the environment.
suites=(--test runtime_parity --test judge_parity --test gguf_parity --test bertscore_parity)
if [ "$feature" = cuda ] && ! command -v nvcc > /dev/null; then eval "$(scripts/cuda_toolchain.sh)"; fi
step build cargo build --release --features "$feature"
step import target/release/hyoka import dbdc3 ../shared/datasets/dbdc3-ja -o "$log/items.jsonl"
for dtype in bf16 f16 f32; do
  step "suite-$dtype" env HYOKA_TEST_DEVICE="$device" HYOKA_TEST_DTYPE="$dtype" \
    cargo test --release --features "$feature" "${suites[@]}" -- --nocapture
  step "attention-2^31-$dtype" env HYOKA_TEST_DEVICE="$device" HYOKA_TEST_DTYPE="$dtype" \
    cargo test --release --features "$feature" --test attention_scale -- --ignored --nocapture
done
step bench-bertscore scripts/bench_bertscore.sh 20000 "$(nproc)" "$device"
grep -h "pairs/s\|ratio" "$log/bench-bertscore.log" | sed 's/^/      /'
step bench-judge target/release/hyoka bench --device "$device" --model \
  "${HYOKA_TEST_MODELS:-$HOME/.cache/hyoka/test-models}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" \
  --input "$log/items.jsonl" --n 200
tail -5 "$log/bench-judge.log" | sed 's/^/      /'
echo "logs: $log"
exit $status
