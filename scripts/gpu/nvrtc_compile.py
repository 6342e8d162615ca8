#!/usr/bin/env python3
"""Compiles kernels/*.cu with NVRTC as hyoka does at run time (src/model/backend/nvrtc.rs: no headers,
no options but the architecture), for each compute capability given, on a machine without a GPU:
NVRTC needs no device. A kernel that nvcc accepts can still fail here (NVRTC has no CUDA
headers), and hyoka would then fail on the GPU at its first prefill. Needs libnvrtc on
LD_LIBRARY_PATH (scripts/gpu/cuda_toolchain.sh installs it from PyPI).

Usage: scripts/gpu/nvrtc_compile.py [ARCH ...]   (default: 75 80 90)
"""
import ctypes
import pathlib
import sys


def compile_one(lib, source: bytes, name: str, arch: str) -> str | None:
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source, name.encode(), 0, None, None) != 0:
        return "nvrtcCreateProgram failed"
    opts = (ctypes.c_char_p * 1)(f"--gpu-architecture=compute_{arch}".encode())
    rc = lib.nvrtcCompileProgram(prog, 1, opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return None if rc == 0 else log.value.decode(errors="replace").strip() or f"error {rc}"


def main() -> int:
    archs = sys.argv[1:] or ["75", "80", "90"]
    try:
        lib = ctypes.CDLL("libnvrtc.so.13")
    except OSError as e:
        print(f"nvrtc_compile: no libnvrtc ({e}); run scripts/gpu/cuda_toolchain.sh first")
        return 2
    root = pathlib.Path(__file__).resolve().parents[2]
    failed = 0
    for path in sorted((root / "kernels").glob("*.cu")):
        for arch in archs:
            error = compile_one(lib, path.read_bytes(), f"kernels/{path.name}", arch)
            print(f"kernels/{path.name} compute_{arch}: {'ok' if error is None else 'FAILED'}")
            if error:
                print(error)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
