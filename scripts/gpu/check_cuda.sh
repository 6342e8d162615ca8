#!/usr/bin/env bash
# Check that `--features cuda` compiles, passes clippy and links on a machine without a GPU:
# installs nvcc 13.0, cuBLAS, cuBLASLt, cuRAND and NVRTC from PyPI with a libcuda stub, the route
# the docs give (scripts/gpu/cuda_toolchain.sh), then builds every target once (the Python extension's too), linted by clippy on the way (clippy-driver as the
# workspace's compiler: warnings, clippy's included, are errors) and linked, with candle's CUDA
# kernels (PTX, and the static MoE kernels for CUDA_COMPUTE_CAP), in the unoptimised
# `cuda-check` profile, through nvcc with device optimisations off (scripts/gpu/nvcc_unoptimised.sh)
# on every core: nothing built here runs. One build instead of `cargo clippy` then
# `cargo build` compiles the dependencies once. Then hyoka's own kernels
# (kernels/*.cu), which it compiles with NVRTC on the GPU at run time, through NVRTC here, for
# compute capability 7.5, 8.0 and 9.0 (scripts/gpu/nvrtc_compile.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
eval "$(scripts/gpu/cuda_toolchain.sh)"
install -m 755 scripts/gpu/nvcc_unoptimised.sh "$CUDA_ROOT/bin/nvcc-unoptimised"
export NVCC="$CUDA_ROOT/bin/nvcc-unoptimised" CUDAFORGE_THREADS="$(nproc)"
RUSTFLAGS="${RUSTFLAGS:-} -D warnings" RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver)" \
  cargo build --locked --profile cuda-check --features cuda --all-targets -p hyoka -p hyoka-python
python3 scripts/gpu/nvrtc_compile.py
