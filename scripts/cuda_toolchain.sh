#!/usr/bin/env bash
# Install the CUDA 13.0 compiler from PyPI (no system CUDA needed) and print the environment that
# `cargo build --features cuda` needs. Usage: eval "$(scripts/cuda_toolchain.sh)"
# Pinned to 13.0 (nvvm included: pip would pull a newer cicc that writes PTX 13.0's ptxas refuses):
# the GPU machines run driver 580 (CUDA 13.0), which refuses PTX from a newer nvcc.
set -euo pipefail
venv="${HYOKA_CUDA_VENV:-$HOME/.cache/hyoka/cuda-13.0}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
"$venv/bin/pip" install -q --disable-pip-version-check \
  nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 \
  nvidia-cuda-crt==13.0.88 nvidia-cuda-nvrtc==13.0.88 nvidia-nvvm==13.0.88 >&2
root=$(ls -d "$venv"/lib/python3*/site-packages/nvidia/cu13)
# The wheels ship libcudart.so.13 only; linkers and cudarc look for the unversioned names.
for lib in "$root"/lib/lib*.so.*; do
  base="${lib%%.so.*}.so"
  [ -e "$base" ] || ln -s "$(basename "$lib")" "$base"
done
[ -e "$root/lib64" ] || ln -s lib "$root/lib64"
echo "export CUDA_ROOT='$root' CUDA_PATH='$root' CUDA_HOME='$root'"
echo "export PATH='$root/bin':\"\$PATH\""
echo "export LD_LIBRARY_PATH='$root/lib':\"\${LD_LIBRARY_PATH:-}\""
# No GPU here to ask: build for Hopper (H100/H200) unless told otherwise.
echo "export CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-90}"
