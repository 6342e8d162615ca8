#!/usr/bin/env python3
"""Write tests/fixtures/iquants/blocks.safetensors: random blocks of each of llama.cpp's
i-quant types and their values as gguf-py (llama.cpp's own Python package, `gguf.quants`)
dequantizes them — a NumPy implementation written apart from ggml's C, which
tests/suite/iquant_blocks.rs holds hyoka's decoding to.

Each type gets 64 blocks of random bytes whose f16 scale is set to a finite value: log-uniform
magnitudes 1e-5 … 1e-1 of either sign, and the edge cases zero, a subnormal and 1000. Tensors
`<TYPE>.blocks` (u8, blocks × block bytes) and `<TYPE>.values` (f32, blocks × block values).

Needs gguf==0.19.0, numpy and safetensors (scripts/requirements-reference.txt).
Run: python scripts/make_iquant_fixtures.py
"""

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, quants
from gguf.constants import GGML_QUANT_SIZES
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "iquants" / "blocks.safetensors"
TYPES = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS"]
BLOCKS = 64


def scales(rng: np.random.Generator) -> np.ndarray:
    mags = 10.0 ** rng.uniform(-5, -1, BLOCKS)
    d = (mags * rng.choice([-1.0, 1.0], BLOCKS)).astype(np.float16)
    d[0], d[1], d[2] = 0.0, np.float16(3e-6), 1000.0  # zero, subnormal, large
    return d


def main() -> None:
    rng = np.random.default_rng(20261127)
    tensors = {}
    for name in TYPES:
        qtype = GGMLQuantizationType[name]
        values, size = GGML_QUANT_SIZES[qtype]
        blocks = rng.integers(0, 256, (BLOCKS, size), dtype=np.uint8)
        d = scales(rng).view(np.uint16)
        if name == "IQ1_M":
            # The f16 scale is the top nibbles of the four u16 of the block's last 8 bytes.
            sc = blocks[:, size - 8:].copy().view(np.uint16)
            for i in range(4):
                nibble = (d >> (4 * i)) & 0xF
                sc[:, i] = (sc[:, i] & 0x0FFF) | (nibble << 12)
            blocks[:, size - 8:] = sc.view(np.uint8)
        else:
            blocks[:, :2] = d.reshape(-1, 1).view(np.uint8)
        decoded = quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32)
        decoded = decoded.reshape(BLOCKS, values)
        if not np.isfinite(decoded).all():
            raise SystemExit(f"{name}: non-finite values")
        tensors[f"{name}.blocks"] = np.ascontiguousarray(blocks)
        tensors[f"{name}.values"] = np.ascontiguousarray(decoded)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT))
    print(f"wrote {OUT.relative_to(ROOT)}: {len(TYPES)} types × {BLOCKS} blocks")


if __name__ == "__main__":
    main()
