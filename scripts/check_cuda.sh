#!/usr/bin/env bash
# Check that `--features cuda` compiles and links on a machine without a GPU: installs nvcc 13.0,
# cuBLAS and cuRAND from PyPI with a libcuda stub (scripts/cuda_toolchain.sh --link), type-checks
# every target and links the binary, building candle's CUDA kernels (PTX, and the static MoE
# kernels for CUDA_COMPUTE_CAP). Linking is checked because compiling was not enough: until
# cuBLAS/cuRAND and the stub were installed, a CUDA binary could not be built here at all.
# Then hyoka's own kernels (kernels/*.cu), which it compiles with NVRTC on the GPU at run time,
# through NVRTC here, for compute capability 7.5, 8.0 and 9.0 (scripts/nvrtc_compile.py).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/cuda_toolchain.sh --link)"
cargo check --locked --features cuda --all-targets
cargo build --locked --features cuda --bin hyoka
python3 scripts/nvrtc_compile.py
