#!/usr/bin/env python3
"""Write tests/fixtures/converter/<name>/: tiny random models turned into GGUF by llama.cpp's own
converter, and what HF transformers computes with the original checkpoint.

llama.cpp's `convert_hf_to_gguf.py` (with its `conversion/` package and gguf-py) comes from the
llama-cpp-python sdist on PyPI, which vendors llama.cpp: pass the unpacked sdist's
`vendor/llama.cpp` folder with --llama-cpp (the script downloads and unpacks the sdist into
--work when it is not given). Nothing of llama.cpp is committed, only the small GGUF files it
writes.

Models:
- `llama3-rope`: Llama with Llama 3.1's `llama3` rope scaling (original context 64, so the
  scaling matters at the positions tested). The converter stores the scaling as the
  `rope_freqs.weight` tensor. Its vocabulary is a SentencePiece BPE model with byte fallback
  trained here on Japanese sentences (tokenizer.model), converted as llama.cpp converts
  llm-jp / ELYZA-Llama-2 / Swallow-Llama-2 tokenizers (`tokenizer.ggml.model = llama`).

For each: model.gguf (f32, so that logits compare at 1e-4), and expected.safetensors with the
token ids and every position's logits (`ids.N`, `logits.N`; the last 16 positions of the long
prompt), from transformers in float32 with eager attention.

Needs torch, transformers, sentencepiece, safetensors (scripts/requirements-reference.txt).
Run: python scripts/make_converter_fixtures.py [--llama-cpp DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "converter"
SDIST = "llama_cpp_python-0.3.36"
SDIST_URL = ("https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca"
             "773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz")
# Lengths: short, unequal; then 300 positions, far past the rope's original context of 64.
PROMPT_LENGTHS = [7, 1, 23, 300]
KEEP_LAST = 16

SENTENCES = [
    "おなかがすいてきましたね。何か食べたいものはありますか？",
    "私はお寿司が食べたいです。",
    "週末は何をしていましたか？",
    "北海道の旅行はどうでしたか？カニがとてもおいしかったです。",
    "毎朝六時に起きて、三十分ほど走っています。",
    "東京から大阪まで新幹線で二時間半かかります。",
    "「こんにちは」と言ってから、彼は静かに座った。",
    "この映画は１９９５年に公開されました。",
    "明日は雨が降るそうなので、傘を持って行きましょう。",
    "猫が好きですか、それとも犬が好きですか？",
]


def llama_cpp_dir(work: Path) -> Path:
    target = work / SDIST / "vendor" / "llama.cpp"
    if target.is_dir():
        return target
    archive = work / f"{SDIST}.tar.gz"
    if not archive.exists():
        print(f"downloading {SDIST_URL}", file=sys.stderr)
        urllib.request.urlretrieve(SDIST_URL, archive)
    prefix = f"{SDIST}/vendor/llama.cpp/"
    wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.startswith(prefix) and m.name[len(prefix):].startswith(wanted)]
        tar.extractall(work, members=members, filter="data")
    return target


def train_tokenizer(folder: Path) -> None:
    import sentencepiece as spm
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 4) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "tokenizer"), vocab_size=480, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, split_digits=True, add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        bos_id=1, eos_id=2, unk_id=0, pad_id=-1, normalization_rule_name="identity",
        num_threads=1, minloglevel=2,
    )
    corpus.unlink()
    (folder / "tokenizer.vocab").unlink()


def models(vocab: int) -> dict:
    from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig
    from transformers import MistralConfig, MistralForCausalLM
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=1,
                  eos_token_id=2, pad_token_id=0)
    return {
        # Llama 3.1's scaling, with an original context of 64 so that it matters here.
        "llama3-rope": (LlamaForCausalLM, LlamaConfig(
            **common, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
        # No sliding window: llama.cpp's converter does not store Mistral's (7B v0.1's 4,096), so
        # llama.cpp and hyoka compute GGUF Mistrals without one; v0.2 and later have none.
        "mistral": (MistralForCausalLM, MistralConfig(**common, rope_theta=10000.0, sliding_window=None,
                                                      tie_word_embeddings=False)),
        "gemma2": (Gemma2ForCausalLM, Gemma2Config(**common, head_dim=16, query_pre_attn_scalar=16, sliding_window=6,
                                                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                                   hidden_activation="gelu_pytorch_tanh")),
        # Gemma 3's own layer pattern (5 sliding, 1 full): GGUF stores no pattern, llama.cpp
        # assumes this one.
        "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig(
            **{**common, "num_hidden_layers": 6}, head_dim=16, query_pre_attn_scalar=16, sliding_window=6,
            rope_local_base_freq=20000.0, rope_theta=1000000.0, hidden_activation="gelu_pytorch_tanh")),
    }


def expected_logits(model, vocab: int) -> dict:
    gen = torch.Generator().manual_seed(77)
    expected = {}
    for n, length in enumerate(PROMPT_LENGTHS):
        ids = torch.randint(3, vocab, (1, length), generator=gen)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]
        expected[f"ids.{n}"] = ids[0].to(torch.int64).contiguous()
        if length > 100:
            logits = logits[-KEEP_LAST:]
        expected[f"logits.{n}"] = logits.to(torch.float32).contiguous()
    return expected


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", type=Path, help="llama.cpp source folder (the sdist's vendor/llama.cpp)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "hyoka-llama-cpp")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    llama_cpp = args.llama_cpp or llama_cpp_dir(args.work)
    env = {**os.environ, "PYTHONPATH": str(llama_cpp / "gguf-py")}

    tokenizer_dir = Path(tempfile.mkdtemp(prefix="hyoka-spm-"))
    train_tokenizer(tokenizer_dir)
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_dir / "tokenizer.model"))
    vocab = sp.get_piece_size()

    for index, (name, (cls, config)) in enumerate(models(vocab).items()):
        out = OUT / name
        out.mkdir(parents=True, exist_ok=True)
        hf = Path(tempfile.mkdtemp(prefix="hyoka-hf-"))
        config._attn_implementation = "eager"
        torch.manual_seed(4321 + index)
        model = cls(config).eval().to(torch.float32)
        # Perturb every parameter: norm weights, biases and Gemma's (1 + w) all matter.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        model.save_pretrained(hf, safe_serialization=True)
        shutil.copy(tokenizer_dir / "tokenizer.model", hf / "tokenizer.model")
        (hf / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
            "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": False,
        }))
        # f32: the checkpoint's own logits are the reference. q8_0: the checkpoint with the
        # weights the GGUF holds, dequantized by transformers' GGUF loader.
        save_file(expected_logits(model, vocab), out / "expected.f32.safetensors")
        for outtype in ("f32", "q8_0"):
            gguf = out / f"{outtype}.gguf"
            subprocess.run([sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(hf), "--outtype", outtype,
                            "--outfile", str(gguf)], check=True, env=env, stdout=subprocess.DEVNULL)
        from transformers import AutoModelForCausalLM
        dequantized = AutoModelForCausalLM.from_pretrained(str(out), gguf_file="q8_0.gguf",
                                                           dtype=torch.float32).state_dict()
        quantized = cls(config).eval().to(torch.float32)
        missing, unexpected = quantized.load_state_dict(dequantized, strict=False)
        assert not unexpected and all("rotary" in m or "lm_head" in m for m in missing), (missing, unexpected)
        if any("lm_head" in m for m in missing):
            quantized.tie_weights()
        save_file(expected_logits(quantized, vocab), out / "expected.q8_0.safetensors")
        for stray in out.glob("*.json"):
            stray.unlink()
        shutil.rmtree(hf)
        print(f"wrote {out.relative_to(ROOT)}")

    # The SentencePiece tokenizer itself (whitespace kept as written, as in Llama 2's
    # tokenizer.model): token ids of Japanese text (with BOS, as the Llama-2 family's
    # tokenizers add it), by the sentencepiece library; every GGUF above carries it.
    texts = SENTENCES + ["未知の語：鰻丼と麒麟", "Hello, world! 123", "  二つの空白", "改行\nのある文"]
    (OUT / "tokens.json").write_text(json.dumps(
        [{"text": t, "ids": [1] + sp.encode(t)} for t in texts], ensure_ascii=False, indent=0) + "\n",
        encoding="utf-8")
    shutil.rmtree(tokenizer_dir)


if __name__ == "__main__":
    main()
