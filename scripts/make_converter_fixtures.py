#!/usr/bin/env python3
"""Write tests/fixtures/converter/<name>/: tiny random models turned into GGUF by llama.cpp's own
converter, and what HF transformers computes with the original checkpoint.

llama.cpp's `convert_hf_to_gguf.py` (with its `conversion/` package and gguf-py) comes from the
llama-cpp-python sdist on PyPI, which vendors llama.cpp: pass the unpacked sdist's
`vendor/llama.cpp` folder with --llama-cpp (the script downloads and unpacks the sdist into
--work when it is not given). Nothing of llama.cpp is committed, only the small GGUF files it
writes.

Models (2 layers, hidden 64, intermediate 256, except Gemma 3's 6 layers):
- `llama3-rope`: Llama with Llama 3.1's `llama3` rope scaling (original context 64, so the
  scaling matters at the positions tested). The converter stores the scaling as the
  `rope_freqs.weight` tensor.
- `mistral` (no sliding window: GGUF cannot carry it), `gemma2` (soft-capping, sliding window),
  `gemma3` (its 5 sliding : 1 full layer pattern, two rope bases, q/k norms).
- `qwen2` (q/k/v biases, untied head), `qwen3` (q/k norms, tied head).
- `qwen2-yarn`: Qwen2 with YaRN rope scaling as Qwen2.5 documents it for long contexts (factor
  4, original context 64 here so that it matters), stored by the converter as
  `rope.scaling.type = yarn` with its factor and original context.

Vocabularies, both trained here on Japanese sentences:
- SentencePiece BPE with byte fallback (tokenizer.model; llama, mistral, gemma2, gemma3),
  converted as llama.cpp converts llm-jp / ELYZA-Llama-2 / Swallow-Llama-2 / Gemma tokenizers
  (`tokenizer.ggml.model = llama`); tokens.json: the sentencepiece library's ids.
- Byte-level BPE with Qwen2.5's own pre-tokenizer (NFC, its split pattern, byte level) and chat
  special tokens (tokenizer.json; qwen2, qwen3), converted as llama.cpp converts Qwen2.5 and Qwen3
  (`gpt2`, pre-tokenizer `qwen2`); tokens.qwen2.json: transformers' ids. The converter names a
  BPE pre-tokenizer by hashing the ids of a check string, which only a real vocabulary of a known
  family reproduces: for this trained one the name is given (`qwen2`, what it finds for Qwen2.5).

Types, each written by llama.cpp: f16 and q8_0 by convert_hf_to_gguf.py, the others from the
f16 file by llama.cpp's quantizer (`llama_model_quantize` through llama-cpp-python, built from
the same sdist). As llama.cpp does for real models whose row length is no multiple of 256
(Qwen2.5-0.5B's 896), q4_k_m keeps Q4_K/Q6_K for ffn_down (256 columns) and falls back to
Q5_0/Q8_0 elsewhere; q5_k_m keeps Q5_K/Q6_K there and falls back to Q5_1/Q8_0; q3_k_s (llama.cpp's
Q3_K_S mix) keeps Q3_K there and falls back to Q4_0. The i-quant mixes (llama.cpp's IQ4_XS,
IQ3_S, IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_M, IQ1_S and IQ1_M; made for llama3-rope and qwen2 only,
but iq4_xs) keep their type there (IQ2_M: IQ2_S) and fall back to IQ4_NL, Q4_0 or Q8_0
elsewhere; the last six need an importance matrix, given as all ones (no column preferred).
q2_k is quantized `pure` (llama-quantize's
--pure: every tensor Q2_K, no per-tensor mix): Q2_K in ffn_down, Q4_0 elsewhere — llama.cpp's Q2_K
mix would give ffn_down Q3_K, and its Q2_K_S needs an importance matrix.

For each model and type: <type>.gguf and expected.<type>.safetensors with token ids and
logits (`ids.N`, `logits.N`; the last 16 positions of the long prompt) computed by transformers
in float32 with eager attention on the checkpoint holding the weights transformers dequantizes
from that GGUF; for the quantized types also llama.cpp's own logits on the prompts of at most 8
tokens (`llama_cpp.logits.N`), where quantized kernels run.

Needs torch, transformers, sentencepiece, tokenizers, safetensors (scripts/requirements-reference.txt) and
llama-cpp-python 0.3.36 built from source (`pip install llama-cpp-python==0.3.36`).
Run: python scripts/make_converter_fixtures.py [--llama-cpp DIR] [--only NAME ...] [--types T ...]
(--only: remake those models' folders, leaving the others and the vocabularies' token files;
--types: write only these types' files into the folders, leaving the others: the model is made
again and, without f16 among them, its f16 GGUF must hold the committed one's tensors and
metadata but for the name, or nothing is written)
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
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

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


def train_sentencepiece(folder: Path) -> None:
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
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": False,
    }))


# Qwen2.5's tokenizer.json split pattern (digits one by one).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_qwen2_bpe(folder: Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    english = ["The weather is nice today, isn't it?", "I've been told he's there: 3 cats & 12 dogs."]
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((SENTENCES + english) * 4, trainer)
    # Qwen's special tokens follow the vocabulary, as in Qwen2.5 (ids 151643…).
    tok.add_special_tokens(QWEN2_SPECIALS)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False, "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
    }))


def models() -> dict:
    """name -> (vocabulary, model class, config without vocab_size)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM
    from transformers import Qwen3Config, Qwen3ForCausalLM
    # intermediate 256: ffn_down rows are whole K-quant blocks, the other rows (64) are not. Hidden
    # 64, not 32: candle's Q5_0 product asserts (in debug builds) an even number of 32-value blocks.
    common = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6)
    spm_ids = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return {
        # Llama 3.1's scaling, with an original context of 64 so that it matters here.
        "llama3-rope": ("spm", LlamaForCausalLM, lambda v: LlamaConfig(
            **common, **spm_ids, vocab_size=v, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
        # No sliding window: llama.cpp's converter does not store Mistral's (7B v0.1's 4,096), so
        # llama.cpp and hyoka compute GGUF Mistrals without one; v0.2 and later have none.
        "mistral": ("spm", MistralForCausalLM, lambda v: MistralConfig(
            **common, **spm_ids, vocab_size=v, rope_theta=10000.0, sliding_window=None, tie_word_embeddings=False)),
        "gemma2": ("spm", Gemma2ForCausalLM, lambda v: Gemma2Config(
            **common, **spm_ids, vocab_size=v, head_dim=16, query_pre_attn_scalar=16, sliding_window=6,
            attn_logit_softcapping=50.0, final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh")),
        # Gemma 3's own layer pattern (5 sliding, 1 full): GGUF stores no pattern, llama.cpp
        # assumes this one.
        "gemma3": ("spm", Gemma3ForCausalLM, lambda v: Gemma3TextConfig(
            **{**common, "num_hidden_layers": 6}, **spm_ids, vocab_size=v, head_dim=16, query_pre_attn_scalar=16,
            sliding_window=6, rope_local_base_freq=20000.0, rope_theta=1000000.0,
            hidden_activation="gelu_pytorch_tanh")),
        # Qwen2.5: biases on q/k/v, untied head (as the 7B/14B judges).
        "qwen2": ("qwen2", Qwen2ForCausalLM, lambda v: Qwen2Config(
            **common, vocab_size=v, rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False,
            eos_token_id=v - 1, pad_token_id=v - 3)),
        # Qwen3: q/k norms, no biases, head_dim apart from hidden / heads, tied head.
        "qwen3": ("qwen2", Qwen3ForCausalLM, lambda v: Qwen3Config(
            **common, vocab_size=v, head_dim=16, rope_theta=1000000.0, tie_word_embeddings=True,
            use_sliding_window=False, eos_token_id=v - 1, pad_token_id=v - 3)),
        # Qwen2.5's long-context YaRN, with an original context of 64 so that it matters here.
        "qwen2-yarn": ("qwen2", Qwen2ForCausalLM, lambda v: Qwen2Config(
            **common, vocab_size=v, tie_word_embeddings=False, use_sliding_window=False,
            eos_token_id=v - 1, pad_token_id=v - 3,
            rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                             "original_max_position_embeddings": 64})),
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


# The converter run as a script, with the BPE pre-tokenizer name given rather than found by hash
# (argv: llama.cpp folder, name, then the converter's own arguments).
CONVERT_NAMING_PRE = (
    "import runpy, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "import conversion.base as base\n"
    "name = sys.argv[2]\n"
    "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: name\n"
    "script = sys.argv[1] + '/convert_hf_to_gguf.py'\n"
    "sys.argv = [script] + sys.argv[3:]\n"
    "runpy.run_path(script, run_name='__main__')\n"
)


def convert(llama_cpp: Path, hf: Path, outtype: str, gguf: Path, pre: str | None, env: dict) -> None:
    args = [str(hf), "--outtype", outtype, "--outfile", str(gguf)]
    if pre is None:
        cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), *args]
    else:
        cmd = [sys.executable, "-c", CONVERT_NAMING_PRE, str(llama_cpp), pre, *args]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)


TYPES = ("f16", "q8_0", "q4_k_m", "q5_k_m", "q3_k_s", "q2_k", "iq4_xs", "iq3_s",
         "iq3_xxs", "iq2_xxs", "iq2_xs", "iq2_m", "iq1_s", "iq1_m")
QUANTIZED = TYPES[2:]
# The mixes whose types llama.cpp quantizes only with an importance matrix.
NEEDS_IMATRIX = TYPES[8:]
# The types every model gets; the i-quant mixes after iq4_xs are made for these models only.
EVERY_MODEL = TYPES[:7]
ALL_TYPES_FOR = ("llama3-rope", "qwen2")


def importance_matrix(source: Path):
    """An importance matrix of ones for every matrix of `source` (one weight per column: no
    column preferred), as llama_model_quantize takes it: a NULL-terminated array of
    llama_model_imatrix_data, with the arrays it points into (to be kept alive)."""
    import ctypes
    import llama_cpp
    import numpy as np
    from gguf import GGUFReader
    names = [t.name for t in GGUFReader(str(source)).tensors if len(t.shape) == 2]
    cols = {t.name: int(t.shape[0]) for t in GGUFReader(str(source)).tensors}
    keep = [(name.encode(), np.ones(cols[name], dtype=np.float32)) for name in names]
    entries = (llama_cpp.llama_model_imatrix_data * (len(keep) + 1))()
    for entry, (name, data) in zip(entries, keep):
        entry.name = name
        entry.data = data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        entry.size = data.size
    return entries, keep


def quantize(source: Path, target: Path, outtype: str) -> None:
    import ctypes
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
                    "q5_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
                    "q3_k_s": llama_cpp.LLAMA_FTYPE_MOSTLY_Q3_K_S,
                    "q2_k": llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K,
                    "iq4_xs": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ4_XS,
                    "iq3_s": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ3_S,
                    "iq3_xxs": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ3_XXS,
                    "iq2_xxs": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ2_XXS,
                    "iq2_xs": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ2_XS,
                    "iq2_m": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ2_M,
                    "iq1_s": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ1_S,
                    "iq1_m": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ1_M}[outtype]
    params.pure = outtype == "q2_k"
    params.nthread = 1
    if outtype in NEEDS_IMATRIX:
        entries, _keep = importance_matrix(source)
        params.imatrix = ctypes.cast(entries, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize failed on {source}")


def same_model(a: Path, b: Path) -> bool:
    """Whether two GGUFs hold the same tensors and metadata, but for `general.*` (the converter
    names the model after its temporary folder)."""
    import numpy as np
    from gguf import GGUFReader
    ra, rb = GGUFReader(str(a)), GGUFReader(str(b))

    def fields(r):
        return {k: [bytes(p) for p in f.parts] for k, f in r.fields.items()
                if not k.startswith(("general.", "GGUF."))}

    def tensors(r):
        return {t.name: (int(t.tensor_type), tuple(t.shape), np.asarray(t.data).tobytes()) for t in r.tensors}

    return fields(ra) == fields(rb) and tensors(ra) == tensors(rb)


def dequantized_model(cls, config, folder: Path, gguf: str):
    """The checkpoint holding the weights transformers' GGUF loader dequantizes from `gguf`."""
    # Qwen3 with the checkpoint's config: transformers' GGUF config reader misses its head_dim
    # (key_length). The others with the GGUF's, as transformers reads it (Mistral is `llama` there).
    given = config if config.model_type == "qwen3" else None
    weights = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf, config=given,
                                                   dtype=torch.float32).state_dict()
    model = cls(config).eval().to(torch.float32)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and all("rotary" in m or "lm_head" in m for m in missing), (missing, unexpected)
    if any("lm_head" in m for m in missing):
        model.tie_weights()
    return model


def llama_cpp_logits(gguf: Path, expected: dict) -> dict:
    """llama.cpp's own logits (f32 cache, no flash attention) for the prompts of at most 8 tokens,
    every position: its quantized kernels round activations to 8 bits, as candle's do, so these
    show the size of that rounding on this file (`llama_cpp.logits.N`)."""
    import llama_cpp
    model = llama_cpp.Llama(str(gguf), logits_all=True, n_ctx=512, n_threads=2, verbose=False,
                            type_k=0, type_v=0, flash_attn=False)
    out = {}
    for n in range(len(PROMPT_LENGTHS)):
        ids = [int(i) for i in expected[f"ids.{n}"]]
        if len(ids) > 8:
            continue
        model.reset()
        model.eval(ids)
        out[f"llama_cpp.logits.{n}"] = torch.tensor(model.scores[:len(ids)], dtype=torch.float32).contiguous()
    return out


def llama_cpp_from_args(ap: argparse.ArgumentParser | None = None) -> tuple[Path, Path, dict, argparse.Namespace]:
    """The fixture scripts' options (`ap`: a script's own, to which these are added): llama.cpp's
    folder (--llama-cpp, or the sdist unpacked into --work), the work folder, the environment
    the converter runs in, and all the parsed options."""
    ap = ap or argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", type=Path, help="llama.cpp source folder (the sdist's vendor/llama.cpp)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "hyoka-llama-cpp")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    llama_cpp = args.llama_cpp or llama_cpp_dir(args.work)
    return llama_cpp, args.work, {**os.environ, "PYTHONPATH": str(llama_cpp / "gguf-py")}, args


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="+", choices=list(models()), help="remake only these models")
    ap.add_argument("--types", nargs="+", choices=TYPES, default=list(TYPES),
                    help="write only these types' files (the others are left as they are)")
    llama_cpp, _, env, args = llama_cpp_from_args(ap)

    vocabularies = {"spm": Path(tempfile.mkdtemp(prefix="hyoka-spm-")),
                    "qwen2": Path(tempfile.mkdtemp(prefix="hyoka-bpe-"))}
    train_sentencepiece(vocabularies["spm"])
    train_qwen2_bpe(vocabularies["qwen2"])
    tokenizers = {kind: AutoTokenizer.from_pretrained(str(folder)) for kind, folder in vocabularies.items()}

    every_type = set(args.types) == set(TYPES)
    for index, (name, (kind, cls, make_config)) in enumerate(models().items()):
        if args.only and name not in args.only:
            continue
        out = OUT / name
        types = [t for t in args.types if t in EVERY_MODEL or name in ALL_TYPES_FOR]
        if every_type:
            # Only this script's own files: make_split_gguf_fixtures.py keeps its own beside
            # them (qwen2's split/ shards and tq2_0.gguf, made from f16.gguf: run it after).
            for t in TYPES:
                (out / f"{t}.gguf").unlink(missing_ok=True)
                (out / f"expected.{t}.safetensors").unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        hf = Path(tempfile.mkdtemp(prefix="hyoka-hf-"))
        vocab = len(tokenizers[kind])
        config = make_config(vocab)
        config._attn_implementation = "eager"
        torch.manual_seed(4321 + index)
        model = cls(config).eval().to(torch.float32)
        # Perturb every parameter: norm weights, biases and Gemma's (1 + w) all matter.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        model.save_pretrained(hf, safe_serialization=True)
        for f in vocabularies[kind].iterdir():
            shutil.copy(f, hf / f.name)
        pre = None if kind == "spm" else kind
        f16 = out / "f16.gguf"
        if "f16" in types:
            convert(llama_cpp, hf, "f16", f16, pre, env)
        else:
            # The other types are made from the committed f16 file: it must be this model's.
            again = hf / "again.f16.gguf"
            convert(llama_cpp, hf, "f16", again, pre, env)
            if not same_model(again, f16):
                raise SystemExit(f"{f16}: not the model made again here; remake every type")
        if "q8_0" in types:
            convert(llama_cpp, hf, "q8_0", out / "q8_0.gguf", pre, env)
        for outtype in QUANTIZED:
            if outtype in types:
                quantize(f16, out / f"{outtype}.gguf", outtype)
        for outtype in types:
            reference = dequantized_model(cls, config, out, f"{outtype}.gguf")
            expected = expected_logits(reference, vocab)
            if outtype != "f16":
                expected |= llama_cpp_logits(out / f"{outtype}.gguf", expected)
            save_file(expected, out / f"expected.{outtype}.safetensors")
        for stray in out.glob("*.json"):
            stray.unlink()
        shutil.rmtree(hf)
        print(f"wrote {out.relative_to(ROOT)}")

    if args.only or not every_type:
        return
    # The vocabularies themselves: token ids of Japanese text. SentencePiece: by the
    # sentencepiece library, with BOS as the Llama-2 family's tokenizers add it. Qwen2 BPE: by
    # transformers (no BOS), including chat special tokens.
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(vocabularies["spm"] / "tokenizer.model"))
    texts = SENTENCES + ["未知の語：鰻丼と麒麟", "Hello, world! 123", "  二つの空白", "改行\nのある文"]
    (OUT / "tokens.json").write_text(json.dumps(
        [{"text": t, "ids": [1] + sp.encode(t)} for t in texts], ensure_ascii=False, indent=0) + "\n",
        encoding="utf-8")
    qwen = tokenizers["qwen2"]
    texts += ["<|im_start|>user\nこんにちは<|im_end|>\n<|im_start|>assistant\n", "か\u3099ぎ（NFC で「がぎ」）", "I've 33333 cats"]
    (OUT / "tokens.qwen2.json").write_text(json.dumps(
        [{"text": t, "ids": qwen.encode(t)} for t in texts], ensure_ascii=False, indent=0) + "\n",
        encoding="utf-8")
    for folder in vocabularies.values():
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
