#!/usr/bin/env python3
"""Write tests/fixtures/tiny/<arch>/expected.q8_0.safetensors: what HF transformers computes with
a tiny checkpoint's matrices rounded to Q8_0 by llama.cpp's own quantizer — the reference for
`--weights q8_0`, which quantizes a safetensors checkpoint's matrices at load as llama.cpp's
converter writes a q8_0 GGUF.

For each checkpoint of tests/fixtures/tiny (scripts/make_runtime_fixtures.py): every 2-D
parameter (the projections, the embedding, an untied head; all rows whole 32-value blocks) is
quantized to Q8_0 and expanded back with gguf-py's `quants` (llama.cpp's Python reference,
bit-exact with ggml's quantize_row_q8_0: d = max|x| / 127, q = x · (1/d) rounded half away from
zero, d stored as f16); norms and biases stay f32. Then the logits of the prompts of the
checkpoint's expected.safetensors (same ids, same positions kept), float32, eager attention.

Needs torch, transformers, safetensors (scripts/requirements-reference.txt) and gguf
(gguf-py 0.19, or the llama-cpp-python sdist's gguf-py on PYTHONPATH).
Run: python scripts/make_q8_0_fixtures.py
"""

from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny"


def main() -> None:
    for folder in sorted(p for p in TINY.iterdir() if (p / "model.safetensors").exists()):
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() != 2:
                    continue
                assert p.shape[1] % 32 == 0, f"{folder.name} {name}: rows of {p.shape[1]} values"
                q8 = quantize(p.numpy().astype(np.float32), GGMLQuantizationType.Q8_0)
                back = dequantize(q8, GGMLQuantizationType.Q8_0).reshape(p.shape)
                p.copy_(torch.from_numpy(np.ascontiguousarray(back)))
        expected = load_file(folder / "expected.safetensors")
        out = {}
        n = 0
        while f"ids.{n}" in expected:
            ids = expected[f"ids.{n}"]
            with torch.no_grad():
                logits = model(input_ids=ids.unsqueeze(0)).logits[0]
            keep = expected[f"logits.{n}"].shape[0]
            out[f"ids.{n}"] = ids.contiguous()
            out[f"logits.{n}"] = logits[-keep:].to(torch.float32).contiguous()
            n += 1
        save_file(out, folder / "expected.q8_0.safetensors")
        print(f"wrote {(folder / 'expected.q8_0.safetensors').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
