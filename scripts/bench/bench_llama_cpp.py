#!/usr/bin/env python3
"""Prefill speed of llama.cpp (llama-cpp-python) on token ids written by `hyoka bench --dump-tokens`.

Usage: bench_llama_cpp.py MODEL.gguf TOKENS.json [--threads N] [--decode-tokens T]
Prints JSON: prompts, tokens, tok/s (batch 1 per prompt, n_batch=512, as measurements.md did), and
decoding tok/s: T greedy tokens after the first prompt, one per call (as `hyoka bench`
measures its batch-1 decoding; llama-cpp-python's API decodes one sequence at a time).
Install: CMAKE_ARGS=-DGGML_NATIVE=ON pip install llama-cpp-python
"""

import argparse
import json
import time

import numpy as np

import llama_cpp
from llama_cpp import Llama


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=64)
    args = ap.parse_args()
    prompts = json.load(open(args.tokens))["prompts"]
    n_ctx = max(len(p) for p in prompts) + 17 + args.decode_tokens
    llm = Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads, n_batch=512,
                n_ctx=n_ctx, verbose=False)
    llm.reset()
    llm.eval(prompts[0][:32])  # warm-up
    total = sum(len(p) for p in prompts)
    start = time.perf_counter()
    for p in prompts:
        llm.reset()
        llm.eval(p)
    secs = time.perf_counter() - start
    decode = None
    if args.decode_tokens > 0:
        llm.reset()
        llm.eval(prompts[0])
        vocab = llm.n_vocab()
        # One untimed token first, as `hyoka bench` does (a first step's one-time costs).
        for step in range(args.decode_tokens + 1):
            if step == 1:
                start = time.perf_counter()
            # The last evaluated token's logits, straight from llama.cpp's context.
            last = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(vocab,))
            llm.eval([int(np.argmax(last))])
        decode = args.decode_tokens / (time.perf_counter() - start)
    print(json.dumps({"engine": "llama.cpp", "threads": args.threads, "prompts": len(prompts), "tokens": total,
                      "prefill_tok_s": total / secs, "decode_tokens": args.decode_tokens,
                      "decode_batch1_tok_s": decode}))


if __name__ == "__main__":
    main()
