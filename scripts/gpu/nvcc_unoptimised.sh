#!/usr/bin/env bash
# nvcc for CUDA builds that are checked but never run (scripts/gpu/check_cuda.sh): the same
# compilation with the device code's optimisations off (cicc and ptxas at -O0, host code at
# -O0), which compiles candle's template-heavy MMQ and MoE kernels about twice as fast. The
# kernels are still compiled for the target and linked; only their speed would differ.
# check_cuda.sh installs it beside the real nvcc, where cudaforge (candle's kernel builder) looks
# for the toolkit's include and lib folders from the nvcc it is given.
set -euo pipefail
args=()
for a in "$@"; do
  case "$a" in
    -O1 | -O2 | -O3) ;;
    *) args+=("$a") ;;
  esac
done
exec "$(dirname "$0")/nvcc" "${args[@]}" -O0 -Xcicc -O0 -Xptxas -O0
