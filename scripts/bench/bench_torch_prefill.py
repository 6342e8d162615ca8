#!/usr/bin/env python3
"""GPU reference for `hyoka bench`: transformers on the token ids that `hyoka bench --dump-tokens` wrote.

Usage: bench_torch_prefill.py MODEL.gguf TOKENS.json [--device cuda] [--dtype bf16|f16|f32] [--decode-tokens T]
                              [--profile N]
The model is a transformers LlamaForCausalLM / Qwen2ForCausalLM of the GGUF's shapes (read from its
metadata), with random weights in --dtype: speed depends on the shapes, not on the values, and the
GGUF may be a synthetic one (scripts/fixtures/synthetic_gguf.py) whose blocks transformers would spend minutes
dequantizing. Prints JSON as bench_llama_cpp.py does: prefill tok/s, one prompt at a time (as
`hyoka bench`'s batch-1 figure), and T greedy tokens after the first prompt, one per forward pass
with the KV cache. Needs torch, transformers and gguf. --profile N: also the N kernels that took the
most device time over the prefill of the first prompt (torch.profiler), to set beside
`hyoka bench --stage-times`.
"""

import argparse
import json
import time

import torch
import transformers
from gguf import GGUFReader


def field(reader, key):
    f = reader.fields[key]
    return f.parts[f.data[0]].tolist()[0] if len(f.data) == 1 else len(f.data)


def config_of(path):
    r = GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    get = lambda k: field(r, f"{arch}.{k}")  # noqa: E731
    kw = dict(
        hidden_size=get("embedding_length"),
        intermediate_size=get("feed_forward_length"),
        num_hidden_layers=get("block_count"),
        num_attention_heads=get("attention.head_count"),
        num_key_value_heads=get("attention.head_count_kv"),
        rms_norm_eps=get("attention.layer_norm_rms_epsilon"),
        rope_theta=get("rope.freq_base"),
        vocab_size=field(r, "tokenizer.ggml.tokens"),
        max_position_embeddings=8192,
        # No output matrix in the file: the output head is the embedding (Qwen2.5-0.5B).
        tie_word_embeddings=not any(t.name == "output.weight" for t in r.tensors),
    )
    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[arch]
    return arch, cls(**kw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], help="default: hyoka's, bf16 on a GPU, f32 on the CPU")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    args = ap.parse_args()
    args.dtype = args.dtype or ("f32" if args.device == "cpu" else "bf16")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    arch, cfg = config_of(args.model)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    prompts = json.load(open(args.tokens))["prompts"]
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    with torch.inference_mode():
        model(torch.tensor([prompts[0][:32]], device=args.device))  # warm-up
        sync()
        start = time.perf_counter()
        for p in prompts:
            model(torch.tensor([p], device=args.device), logits_to_keep=1)
        sync()
        secs = time.perf_counter() - start
        decode = None
        if args.decode_tokens > 0:
            out = model(torch.tensor([prompts[0]], device=args.device), use_cache=True, logits_to_keep=1)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            sync()
            start = time.perf_counter()
            for _ in range(args.decode_tokens):
                out = model(nxt, past_key_values=past, use_cache=True)
                past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            sync()
            decode = args.decode_tokens / (time.perf_counter() - start)
        profile = kernels(model, prompts[0], args) if args.profile > 0 else None
    total = sum(len(p) for p in prompts)
    on_gpu = args.device.startswith("cuda")
    print(json.dumps({"engine": f"transformers {transformers.__version__} ({arch}, random weights, {args.dtype}, "
                      f"{args.device})", "parameters": sum(p.numel() for p in model.parameters()),
                      "prompts": len(prompts), "tokens": total, "prefill_tok_s": total / secs,
                      "decode_tokens": args.decode_tokens, "decode_batch1_tok_s": decode,
                      "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if on_gpu else None,
                      **({"profile": profile} if profile else {})}))


def kernels(model, prompt, args):
    """The kernels that took the most device time over one prefill of `prompt`: name, ms, calls."""
    from torch.profiler import ProfilerActivity, profile

    cuda = args.device.startswith("cuda")
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        model(torch.tensor([prompt], device=args.device), logits_to_keep=1)
        if cuda:
            torch.cuda.synchronize()
    # Kernels carry their own device time; the operators that launch them carry none of it.
    totals = {e.key: [(e.self_device_time_total if cuda else e.self_cpu_time_total) / 1000, e.count]
              for e in prof.key_averages()}
    totals = {k: t for k, t in totals.items() if t[0] > 0}
    top = sorted(totals.items(), key=lambda kv: -kv[1][0])[: args.profile]
    return {"tokens": len(prompt), "device_ms": sum(t[0] for t in totals.values()),
            "top": [{"kernel": k[:120], "ms": round(t[0], 3), "calls": t[1]} for k, t in top]}


if __name__ == "__main__":
    main()
