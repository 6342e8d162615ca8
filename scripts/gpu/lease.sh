#!/usr/bin/env bash
# One short lease of a GPU machine, spent in order of what matters most and stopped before its
# time runs out: the parity suites in bf16 (the GPUs' default), the whole surface on the device
# against the CPU (scripts/gpu/gpu_check.sh's device-vs-cpu), BERTScore in every dtype with the
# Japanese encoders' shapes, judge prefill and decoding next to transformers, the suites in f32
# and f16, then `hyoka judge` on 1,000 items. A part that would not fit in what is left is
# skipped and says so.
# Usage, on the GPU machine in the repository, with the bundle of scripts/gpu/gpu_bundle.sh:
#   HYOKA_LEASE_SECONDS=540 scripts/gpu/lease.sh [OUTDIR]
# OUTDIR (default $OUT, else /tmp/lease) receives run.log and logs.tar.gz (every step's log and
# the benchmarks' JSON).
set -uo pipefail
cd "$(dirname "$0")/../.."
budget="${HYOKA_LEASE_SECONDS:-540}"
out="${1:-${OUT:-/tmp/lease}}"
mkdir -p "$out"
export HYOKA_GPU_BUNDLE="${HYOKA_GPU_BUNDLE:-.gpu/bundle.tar.xz}" HYOKA_GPU_LOGS="${HYOKA_GPU_LOGS:-/tmp/gpu-logs}"
export HYOKA_SYNTH_DIR="${HYOKA_SYNTH_DIR:-/tmp/synthetic}"
status=0
exec > >(tee "$out/run.log") 2>&1
part() { # SECONDS_NEEDED SECONDS_AT_MOST VAR=VALUE...: gpu_check.sh with these settings, if it
  # fits, and stopped after SECONDS_AT_MOST or at the lease's end
  local need="$1" most="$2" left=$((budget - SECONDS)); shift 2
  if [ "$left" -lt "$need" ]; then echo "SKIP  $* (${left} s left)"; return; fi
  echo "== $* (${left} s left)"
  local end=$(($(date +%s) + (most < left ? most : left)))
  env HYOKA_GPU_DEADLINE="$end" "$@" scripts/gpu/gpu_check.sh cuda || status=1
}
part 0 150 HYOKA_STEP_TIMEOUT=60 HYOKA_GPU_STEPS=suites HYOKA_GPU_DTYPES=bf16
part 90 130 HYOKA_GPU_STEPS=device-vs-cpu
part 100 150 HYOKA_GPU_STEPS=bench-bertscore-ja
part 80 120 HYOKA_GPU_STEPS=bench-judge HYOKA_SYNTH_SHAPES=llama-8b
part 40 120 HYOKA_STEP_TIMEOUT=30 HYOKA_GPU_STEPS=suites "HYOKA_GPU_DTYPES=f32 f16"
part 60 200 HYOKA_GPU_STEPS=judge-items HYOKA_SYNTH_SHAPES=llama-8b
echo "lease: $SECONDS s of $budget"
# Logs and small results; not the models, the unpacked bundle or the 100,000-line outputs.
tar -C "$HYOKA_GPU_LOGS" -czf "$out/logs.tar.gz" --exclude=bundle --exclude=random-encoders \
  --exclude='*.gguf' --exclude=random-models --exclude='items*.jsonl' . 2> /dev/null
exit $status
