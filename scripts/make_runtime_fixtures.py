#!/usr/bin/env python3
"""Write tests/fixtures/tiny/<arch>/: tiny random-weight causal LMs and their logits by HF transformers.

For each architecture hyoka runs (llama, mistral, qwen2, qwen3, gemma2, gemma3) this builds a
tiny model with transformers (seeded random weights, float32, eager attention), saves
config.json + model.safetensors as a Hugging Face checkpoint, and records the logits of every
position for a few prompts of different lengths in expected.safetensors (`ids.N`, `logits.N`).
Sliding windows are made shorter than the longer prompts so that they matter.

Needs torch, transformers, safetensors (scripts/requirements-reference.txt).
Run: python scripts/make_runtime_fixtures.py
"""

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import (
    Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
    MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "tiny"
VOCAB = 96
COMMON = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
    pad_token_id=0,
)
# Lengths 1..23: longer than the sliding windows below, and unequal so batches need padding; then
# a 5-token and a 2,000-token prompt (for the long one only the last 16 positions are kept).
PROMPT_LENGTHS = [7, 1, 23, 12, 5, 2000]
KEEP_LAST = 16

MODELS = {
    "llama": (LlamaForCausalLM, LlamaConfig(**COMMON, rope_theta=10000.0, tie_word_embeddings=False)),
    "mistral": (MistralForCausalLM, MistralConfig(**COMMON, rope_theta=10000.0, sliding_window=8,
                                                  tie_word_embeddings=False)),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(**COMMON, rope_theta=1000000.0, tie_word_embeddings=True,
                                            use_sliding_window=False)),
    "qwen3": (Qwen3ForCausalLM, Qwen3Config(**COMMON, head_dim=16, rope_theta=1000000.0,
                                            tie_word_embeddings=True)),
    "gemma2": (Gemma2ForCausalLM, Gemma2Config(**COMMON, head_dim=16, query_pre_attn_scalar=16,
                                               sliding_window=6, attn_logit_softcapping=50.0,
                                               final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh")),
    "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig(**{**COMMON, "num_hidden_layers": 3}, head_dim=16,
                                                   query_pre_attn_scalar=16, sliding_window=6,
                                                   layer_types=["sliding_attention", "sliding_attention",
                                                                "full_attention"],
                                                   rope_local_base_freq=10000.0, rope_theta=1000000.0,
                                                   hidden_activation="gelu_pytorch_tanh")),
}


def main() -> None:
    for index, (arch, (cls, config)) in enumerate(MODELS.items()):
        torch.manual_seed(1234 + index)
        config._attn_implementation = "eager"
        model = cls(config).eval().to(torch.float32)
        # Random init leaves norms at their neutral value; perturb every parameter so that norm
        # weights, biases and the (1 + w) convention of Gemma are all exercised.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        out = OUT / arch
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        gen = torch.Generator().manual_seed(99)
        expected = {}
        for n, length in enumerate(PROMPT_LENGTHS):
            ids = torch.randint(3, VOCAB, (1, length), generator=gen)
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0]
            expected[f"ids.{n}"] = ids[0].to(torch.int64).contiguous()
            if length > 100:
                logits = logits[-KEEP_LAST:]
            expected[f"logits.{n}"] = logits.to(torch.float32).contiguous()
        save_file(expected, out / "expected.safetensors")
        for stray in ("generation_config.json",):
            (out / stray).unlink(missing_ok=True)
        print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
