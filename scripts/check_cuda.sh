#!/usr/bin/env bash
# Check that `--features cuda` compiles on a machine without a GPU: installs nvcc 13.0 from PyPI
# (scripts/cuda_toolchain.sh) and type-checks the crate, building candle's CUDA kernels to PTX.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/cuda_toolchain.sh)"
cargo check --locked --features cuda --all-targets
