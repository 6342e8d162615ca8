#!/usr/bin/env python3
"""Write tests/fixtures/gguf/<model>.json: what HF transformers computes on the real GGUF test models.

transformers loads each GGUF file with `gguf_file=` (dequantized to float32) and its tokenizer;
for a few fixed Japanese prompts this records the prompt text, its token ids, the 64 largest
next-token logits with their ids, the log-sum-exp of all next-token logits, and the greedy
continuation of 8 tokens. Only those small values are committed, never weights.

Needs torch, transformers, gguf, accelerate (scripts/requirements-reference.txt) and the test
models (scripts/fetch_test_models.py). Run: python scripts/make_gguf_fixtures.py [NAME ...]
(default: every model below but the optional 1.5B judge, which is fetched with
`scripts/fetch_test_models.py --only qwen2.5-coder-1.5b-instruct-q4km`).
"""

import json
import sys
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("HYOKA_TEST_MODELS", Path.home() / ".cache" / "hyoka" / "test-models"))
OUT = ROOT / "tests" / "fixtures" / "gguf"

CHATS = [
    [{"role": "user", "content": "日本の首都はどこですか？一言で答えてください。"}],
    [{"role": "system", "content": "あなたは日本語の対話を評価する専門家です。"},
     {"role": "user", "content": "Bさん「おなかがすいてきましたね。」\nAさんの応答 (評価対象) 「私はお寿司が食べたいです。」\n"
                                 "応答文が対話文脈と噛み合っている場合は1、そうでない場合は0で答えてください。"}],
]
TEXTS = ["日本の首都は", "こんにちは。今日はいい天気ですね。明日は"]

MODELS = [
    ("qwen2.5", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", None, True),
    ("smollm2", "smollm2-135m-instruct-q4_1.gguf", None, True),
    ("gemma3", "gemma-3-270m-q4_k_m.gguf", "gemma-3-tokenizer", False),
    ("qwen2.5-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", None, True),
]
OPTIONAL = {"qwen2.5-1.5b"}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    wanted = set(sys.argv[1:]) or {m[0] for m in MODELS} - OPTIONAL
    for name, gguf, tokenizer_dir, chat in MODELS:
        if name not in wanted:
            continue
        tok = (AutoTokenizer.from_pretrained(str(CACHE / tokenizer_dir)) if tokenizer_dir
               else AutoTokenizer.from_pretrained(str(CACHE), gguf_file=gguf))
        model = AutoModelForCausalLM.from_pretrained(str(CACHE), gguf_file=gguf, torch_dtype=torch.float32).eval()
        prompts = ([tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in CHATS]
                   if chat else TEXTS)
        cases = []
        for text in prompts:
            ids = tok(text, add_special_tokens=not chat, return_tensors="pt").input_ids
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, -1].to(torch.float64)
                greedy = model.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1]:]
            top = torch.topk(logits, 64)
            cases.append({
                "text": text,
                "ids": ids[0].tolist(),
                "top_ids": top.indices.tolist(),
                "top_logits": top.values.tolist(),
                "logsumexp": torch.logsumexp(logits, 0).item(),
                "greedy": greedy.tolist(),
            })
        fixture = {"model": gguf, "tokenizer": tokenizer_dir or gguf,
                   "generated_by": "transformers " + __import__("transformers").__version__, "cases": cases}
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
