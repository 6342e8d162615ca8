#!/usr/bin/env bash
# Install from PyPI what `cargo build --features cuda` compiles with and links against, and print
# the environment it needs (no system CUDA toolkit needed). Usage: eval "$(scripts/gpu/cuda_toolchain.sh)"
# Pinned to CUDA 13.0 (nvvm included: pip would pull a newer cicc that writes PTX 13.0's ptxas
# refuses): drivers of the 580 series (CUDA 13.0) refuse PTX from a newer nvcc.
#
# candle links cuBLAS, cuBLASLt, cuRAND and NVRTC (their 13.0 wheels, installed here) and the
# driver's libcuda.so.1, which no wheel carries: a stub of it is built from the driver functions
# cudarc calls, for the linker only, as CUDA's own `lib/stubs/libcuda.so` is. At run time the
# machine's driver is used (soname libcuda.so.1), with the libraries installed here
# (LD_LIBRARY_PATH) or the system's.
set -euo pipefail
venv="${HYOKA_CUDA_VENV:-$HOME/.cache/hyoka/cuda-13.0}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
wheels=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
  nvidia-cuda-crt==13.0.88 nvidia-cuda-nvrtc==13.0.88 nvidia-nvvm==13.0.88
  nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35)
"$venv/bin/pip" install -q --disable-pip-version-check "${wheels[@]}" >&2
root=$(ls -d "$venv"/lib/python3*/site-packages/nvidia/cu13)
# The wheels ship versioned libraries only (libcudart.so.13); linkers and cudarc look for the
# unversioned names.
for lib in "$root"/lib/lib*.so.*; do
  base="${lib%%.so.*}.so"
  [ -e "$base" ] || ln -s "$(basename "$lib")" "$base"
done
[ -e "$root/lib64" ] || ln -s lib "$root/lib64"
if [ ! -e "$root/lib/stubs/libcuda.so" ]; then
  # The driver functions cudarc can call, from its bindings (every CUDA version's names).
  cudarc=$(cargo metadata --format-version 1 --locked --features cuda --filter-platform "$(rustc -vV | sed -n "s/^host: //p")" \
    --manifest-path "$(dirname "$0")/../../Cargo.toml" |
    python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "cudarc").rsplit("/", 1)[0])')
  mkdir -p "$root/lib/stubs"
  grep -oh 'load::<_F>("cu[A-Za-z0-9_]*")' "$cudarc/src/driver/sys/mod.rs" |
    sed 's/.*("\(.*\)")/void \1(void) {}/' | sort -u > "$root/lib/stubs/libcuda_stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$root/lib/stubs/libcuda.so" \
    "$root/lib/stubs/libcuda_stub.c"
fi
echo "export CUDA_ROOT='$root' CUDA_PATH='$root' CUDA_HOME='$root'"
echo "export PATH='$root/bin':\"\$PATH\""
echo "export LD_LIBRARY_PATH='$root/lib':\"\${LD_LIBRARY_PATH:-}\""
# Where a GPU answers, candle's build asks it (nvidia-smi) for its compute capability; with no
# GPU to ask, build for Hopper (H100/H200) unless told otherwise.
if ! nvidia-smi --query-gpu=compute_cap --format=csv,noheader > /dev/null 2>&1; then
  echo "export CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-90}"
fi
