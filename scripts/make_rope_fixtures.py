#!/usr/bin/env python3
"""Write tests/fixtures/rope/scaling.json: rope scaling settings as config.json files carry them,
with the inverse frequencies and attention factor transformers computes from each
(`ROPE_INIT_FUNCTIONS`, the code its models call at load).

Cases: YaRN as Qwen2.5/Qwen3 document it for long contexts, with explicit betas and no
truncation, an explicit attention_factor, DeepSeek-style mscale / mscale_all_dim, a top-level
original_max_position_embeddings (which transformers puts before the rope's own), the older
`rope_scaling` key with `type`; llama3 and linear for comparison.

Needs torch, transformers (scripts/requirements-reference.txt).
Run: python scripts/make_rope_fixtures.py
"""

import json
from pathlib import Path

from transformers import Qwen2Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "rope" / "scaling.json"

BASE = dict(model_type="qwen2", vocab_size=1000, hidden_size=1024, intermediate_size=2048,
            num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2)

CASES = {
    "yarn, Qwen2.5's long-context setting": dict(
        max_position_embeddings=131072, rope_parameters={
            "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
            "original_max_position_embeddings": 32768}),
    "yarn, betas 16/2, not truncated, head_dim 64": dict(
        head_dim=64, max_position_embeddings=8192, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 2048,
            "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False}),
    "yarn, explicit attention_factor": dict(
        max_position_embeddings=65536, rope_parameters={
            "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 2.0,
            "original_max_position_embeddings": 32768, "attention_factor": 1.25}),
    "yarn, mscale and mscale_all_dim": dict(
        max_position_embeddings=163840, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
            "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 0.5}),
    "yarn, top-level original_max_position_embeddings": dict(
        max_position_embeddings=16384, original_max_position_embeddings=4096, rope_parameters={
            "rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0, "original_max_position_embeddings": 2048}),
    "yarn, older rope_scaling key": dict(
        max_position_embeddings=32768, rope_theta=1000000.0,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}),
    "llama3, Llama 3.1's": dict(
        max_position_embeddings=131072, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "linear": dict(
        max_position_embeddings=8192, rope_parameters={
            "rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
}


def main() -> None:
    out = []
    for name, settings in CASES.items():
        config_json = {**BASE, **settings}
        config = Qwen2Config(**{k: v for k, v in config_json.items() if k != "model_type"})
        kind = config.rope_parameters["rope_type"]
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
        out.append({"name": name, "config": config_json,
                    "inv_freq": [float(f) for f in inv_freq.float()],
                    "attention_factor": float(attention_factor)})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(out)} cases")


if __name__ == "__main__":
    main()
