#!/usr/bin/env python3
"""Write tests/fixtures/converter/unigram/: a SentencePiece *unigram* vocabulary (its default
model type, common among Japanese models that trained their own) trained on half of the DBDC3-ja utterances, written to a
vocab-only GGUF by llama.cpp's own converter (`tokenizer.ggml.model = llama`, as for BPE
vocabularies: the file does not say which algorithm the vocabulary is for), and the sentencepiece
library's ids for the other half and for hand-written texts (digits, spaces, characters the
vocabulary lacks, which fall back to bytes).

Needs sentencepiece, transformers and torch (the converter reads a checkpoint folder), and the
llama-cpp-python sdist as make_converter_fixtures.py does.
Run: python scripts/make_unigram_fixtures.py [--llama-cpp DIR]
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_converter_fixtures import ROOT, llama_cpp_from_args  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "converter" / "unigram"
sys.path.insert(0, str(ROOT / "scripts"))
from dbdc3_data import dialogues  # noqa: E402
EXTRA = ["未知の語：鰻丼と麒麟🍣", "Hello, world! 123 4567", "  二つの空白", "改行\nのある文",
         "全角の「１２３」と半角の123、記号！？…", "ｶﾀｶﾅ と ひらがな", "2024年11月25日"]


def utterances() -> list[str]:
    out = []
    for _, dialogue in dialogues():
        out.extend(t["utterance"] for t in dialogue["turns"])
    return out


def main() -> None:
    import sentencepiece as spm
    from transformers import LlamaConfig, LlamaForCausalLM
    llama_cpp, work, env, _ = llama_cpp_from_args()

    texts = utterances()
    assert len(texts) > 3000, len(texts)
    train, held_out = texts[::2], texts[1::2]
    folder = work / "unigram-hf"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "corpus.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(folder / "corpus.txt"), model_prefix=str(folder / "tokenizer"), vocab_size=3000,
        model_type="unigram", byte_fallback=True, character_coverage=0.9995, split_digits=True,
        bos_id=1, eos_id=2, unk_id=0, pad_id=-1, normalization_rule_name="identity",
        remove_extra_whitespaces=False, num_threads=1, minloglevel=2)
    for stray in ("corpus.txt", "tokenizer.vocab"):
        (folder / stray).unlink()
    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    # The converter reads a checkpoint folder; only the vocabulary is written (--vocab-only).
    LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=sp.vocab_size(), bos_token_id=1,
                                 eos_token_id=2)).save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "legacy": False}))
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    subprocess.run([sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(folder), "--vocab-only",
                    "--outfile", str(OUT / "vocab.gguf")], check=True, env=env, stdout=subprocess.DEVNULL)
    cases = [{"text": t, "ids": sp.encode(t)} for t in held_out + EXTRA]
    lines = ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases)
    (OUT / "tokens.json").write_text(f"[\n{lines}\n]\n", encoding="utf-8")
    shutil.rmtree(folder)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(cases)} texts")


if __name__ == "__main__":
    main()
