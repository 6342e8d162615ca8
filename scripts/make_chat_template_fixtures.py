#!/usr/bin/env python3
"""Write tests/fixtures/chat_templates/*.json: expected chat-template renderings by HF transformers.

For each test model (Qwen2.5 and SmolLM2 GGUF files, Gemma 3 tokenizer folder) this loads the
tokenizer with transformers exactly as a user would, and records `apply_chat_template(messages,
tokenize=False, add_generation_prompt=...)` for a few Japanese conversations, together with the
template source and the special tokens transformers passed to it.

Needs: transformers, gguf, jinja2 (see scripts/requirements-reference.txt) and the test models
(scripts/fetch_test_models.py). Run: python scripts/make_chat_template_fixtures.py
"""

import json
import os
from pathlib import Path

from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("HYOKA_TEST_MODELS", Path.home() / ".cache" / "hyoka" / "test-models"))
OUT = ROOT / "tests" / "fixtures" / "chat_templates"

JUDGE_SYSTEM = "あなたは日本語の対話を評価する専門家です。"
JUDGE_USER = (
    "これから示す対話について、Aさんの応答文を評価して下さい。\n\n"
    "Aさん「こんにちは！お元気でしたか？」\n"
    "Bさん「ああ、久しぶりです。こないだ成人しましたよ。」\n"
    "Aさんの応答 (評価対象) 「おめでとうございます！」\n\n"
    "評価結果は必ず以下の形式で出力してください。\n自然さ: 「」"
)

CONVERSATIONS = [
    ("user_only", [{"role": "user", "content": "日本の首都はどこですか？"}], True),
    ("system_user", [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": JUDGE_USER}], True),
    (
        "multi_turn",
        [
            {"role": "system", "content": "あなたは親切なアシスタントです。"},
            {"role": "user", "content": "おなかがすいてきましたね。"},
            {"role": "assistant", "content": "そうですね。何か食べたいものはありますか？"},
            {"role": "user", "content": "  お寿司が食べたいです。\n"},
        ],
        True,
    ),
    (
        "no_generation_prompt",
        [
            {"role": "user", "content": "週末は何をして過ごしましたか？"},
            {"role": "assistant", "content": "友達と映画を見に行きました。"},
        ],
        False,
    ),
]

MODELS = [
    ("qwen2.5", lambda: AutoTokenizer.from_pretrained(str(CACHE), gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
     "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    ("smollm2", lambda: AutoTokenizer.from_pretrained(str(CACHE), gguf_file="smollm2-135m-instruct-q4_1.gguf"),
     "smollm2-135m-instruct-q4_1.gguf"),
    ("gemma3", lambda: AutoTokenizer.from_pretrained(str(CACHE / "gemma-3-tokenizer")), "gemma-3-tokenizer"),
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, load, source in MODELS:
        tok = load()
        cases = []
        for case, messages, gen in CONVERSATIONS:
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
            cases.append({"name": case, "messages": messages, "add_generation_prompt": gen, "expected": text})
        special = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
        fixture = {
            "model": source,
            "generated_by": "transformers " + __import__("transformers").__version__,
            "template": tok.chat_template,
            "special_tokens": special,
            "cases": cases,
        }
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
