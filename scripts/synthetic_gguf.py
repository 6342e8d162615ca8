#!/usr/bin/env python3
"""Random-weight GGUF files of real judge shapes, to prove hyoka's memory at scale.

No model over 0.5B can be fetched here; the memory a judge needs depends on its shapes and
quantization, not on its weights. This writes a GGUF of a real architecture's exact shapes with
random quantized blocks (finite scales, so every value is finite), tensor by tensor — the whole
file is never in memory, and no f32 copy is ever made:

  llama-8b  Llama-3.1-8B: 32 layers, hidden 4096, ffn 14336, 32/8 heads, vocab 128256,
            Llama-3's tokenizer (byte-level BPE, pre-tokenizer `llama-bpe`, as llama.cpp writes it)
  qwen-14b  Qwen2.5-14B: 48 layers, hidden 5120, ffn 13824, 40/8 heads, q/k/v biases,
            vocab 152064, Qwen2.5's tokenizer (`qwen2`)
  llm-jp-13b  llm-jp-3-13b's layers: 40 layers, hidden 5120, ffn 13824, 40/40 heads (no
            grouped-query attention: its keys and values are 5× an 8B's per token), rope base
            10000; Llama-3's tokenizer and vocab 128256 (llm-jp-3's own SentencePiece vocab of
            99,487 is not in a registry package: the embeddings and output are 0.3 GB larger)

--quant q4_k_m lays the types out as llama.cpp's Q4_K_M does (Q4_K, with Q6_K for the output,
and for attn_v / ffn_down in the first and last eighth of the layers and every third between);
q5_k_m as Q5_K_M (the same with Q5_K); q4_k all Q4_K but the output; q3_k_m as Q3_K_M (Q3_K, with
Q4_K for attn_output, attn_v and ffn_down — Q5_K for attn_v in the first two layers and ffn_down
in the first sixteenth); q2_k as Q2_K (Q2_K, with Q3_K for attn_output and ffn_down, Q4_K for
attn_v where 4+ query heads share a key head); iq4_xs as IQ4_XS without an importance matrix
(IQ4_XS, with Q6_K for the output, Q5_K for attn_v where 4+ query heads share a key head and for
ffn_down in the first eighth of the layers); iq3_m as IQ3_M (IQ3_S, with Q4_K for attn_v,
attn_output and ffn_down in the first eighth of the layers, Q6_K output); iq2_m as IQ2_M (IQ2_S,
with IQ3_S for token_embd, attn_output and ffn_down in the first eighth of the layers, Q4_K for
attn_v where 4+ query heads share a key head, else IQ3_S, Q5_K output); iq1_m as IQ1_M (IQ1_M,
with Q2_K for token_embd and ffn_down in the first eighth, IQ2_XXS for attn_output, Q4_K for
attn_v where 4+ query heads share a key head, else Q2_K, Q5_K output); q4_0 as Q4_0 (Q4_0, Q6_K
output). llama.cpp's rules:
src/llama-quant.cpp.

Usage: python scripts/synthetic_gguf.py --shape llama-8b --quant q4_k_m -o llama-8b.gguf
       [--models DIR]   (the test-model cache: Llama-3 tokenizer folder, Qwen GGUF)
Needs the `gguf` and `numpy` packages (scripts/requirements-reference.txt).
"""
import argparse
import json
import os
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter, TokenType

SHAPES = {
    "llama-8b": dict(arch="llama", layers=32, hidden=4096, ffn=14336, heads=32, kv=8, vocab=128256,
                     rope_base=500000.0, eps=1e-5, ctx=131072, bias=False, tokenizer="llama3"),
    "qwen-14b": dict(arch="qwen2", layers=48, hidden=5120, ffn=13824, heads=40, kv=8, vocab=152064,
                     rope_base=1000000.0, eps=1e-6, ctx=32768, bias=True, tokenizer="qwen2"),
    "llm-jp-13b": dict(arch="llama", layers=40, hidden=5120, ffn=13824, heads=40, kv=40, vocab=128256,
                       rope_base=10000.0, eps=1e-5, ctx=4096, bias=False, tokenizer="llama3"),
}
# Bytes per block of 256 values, and how to fill one block with finite random values.
BLOCK_BYTES = {Q.Q4_0: 8 * 18, Q.Q2_K: 84, Q.Q3_K: 110, Q.Q4_K: 144, Q.Q5_K: 176, Q.Q6_K: 210, Q.IQ4_XS: 136, Q.IQ3_S: 110,
               Q.IQ2_XXS: 66, Q.IQ2_S: 82, Q.IQ1_M: 56}


# Each --quant's llama_ftype (llama.h).
FILE_TYPES = {"q4_0": 2, "q4_k_m": 15, "q5_k_m": 17, "q4_k": 14, "q3_k_m": 12, "q2_k": 10, "iq4_xs": 30, "iq3_m": 27,
              "iq2_m": 29, "iq1_m": 31}


def random_blocks(rng, qtype: Q, rows: int, cols: int) -> np.ndarray:
    n = rows * cols // 256
    raw = rng.integers(0, 256, size=(n, BLOCK_BYTES[qtype]), dtype=np.uint8)
    if qtype == Q.Q4_0:  # eight blocks of 32, each d (f16) first: d * (q - 8), |w| ≲ 0.16
        for b in range(8):
            raw[:, 18 * b:18 * b + 2] = np.frombuffer(np.float16(0.02).tobytes(), np.uint8)
    elif qtype in (Q.Q4_K, Q.Q5_K):  # d, dmin (f16) first: (q * scale) * d - m * dmin, |w| ≲ 0.2
        d = 2e-4 if qtype == Q.Q4_K else 1e-4
        raw[:, 0:2] = np.frombuffer(np.float16(d).tobytes(), np.uint8)
        raw[:, 2:4] = np.frombuffer(np.float16(1e-4).tobytes(), np.uint8)
    elif qtype == Q.Q3_K:  # d (f16) last: d * (scale - 32) * q, q in -4..3, |w| ≲ 0.13
        raw[:, 108:110] = np.frombuffer(np.float16(1e-3).tobytes(), np.uint8)
    elif qtype == Q.IQ4_XS:  # d (f16) first: d * (scale - 32) * level, levels -127..113, |w| ≲ 0.2
        raw[:, 0:2] = np.frombuffer(np.float16(5e-5).tobytes(), np.uint8)
    elif qtype == Q.IQ3_S:  # d (f16) first: d * (1 + 2 * scale) * grid value (odd, ≤ 15), |w| ≲ 0.19
        raw[:, 0:2] = np.frombuffer(np.float16(4e-4).tobytes(), np.uint8)
    elif qtype in (Q.IQ2_XXS, Q.IQ2_S):  # d (f16) first: d * (0.5 + scale) / 4 * grid (≤ 43), |w| ≲ 0.17
        raw[:, 0:2] = np.frombuffer(np.float16(1e-3).tobytes(), np.uint8)
    elif qtype == Q.IQ1_M:  # d (f16) in the top nibbles of the last four u16: d * (2s + 1) * (grid ± 1/8), |w| ≲ 0.17
        d = int(np.frombuffer(np.float16(1e-2).tobytes(), np.uint16)[0])
        sc = raw[:, 48:56].copy().view(np.uint16)
        for i in range(4):
            sc[:, i] = (sc[:, i] & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12)
        raw[:, 48:56] = sc.view(np.uint8)
    elif qtype == Q.Q2_K:  # d, dmin (f16) last: d * scale * q - dmin * m, |w| ≲ 0.09
        raw[:, 80:82] = np.frombuffer(np.float16(2e-3).tobytes(), np.uint8)
        raw[:, 82:84] = np.frombuffer(np.float16(2e-3).tobytes(), np.uint8)
    else:  # Q6_K: d (f16) last: d * scale(int8) * (q - 32), |w| ≲ 0.1
        raw[:, 208:210] = np.frombuffer(np.float16(2e-5).tobytes(), np.uint8)
    return raw.reshape(rows, cols // 256 * BLOCK_BYTES[qtype])


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: which layers get Q6_K for attn_v / ffn_down in Q4_K_M."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensors(s: dict, quant: str):
    """(name, shape (rows, cols) or (n,), type) in llama.cpp's order."""
    h, f, hd, n = s["hidden"], s["ffn"], s["hidden"] // s["heads"], s["layers"]
    base = {"q4_0": Q.Q4_0, "q5_k_m": Q.Q5_K, "q3_k_m": Q.Q3_K, "q2_k": Q.Q2_K, "iq4_xs": Q.IQ4_XS,
            "iq3_m": Q.IQ3_S, "iq2_m": Q.IQ2_S, "iq1_m": Q.IQ1_M}.get(quant, Q.Q4_K)
    # IQ2_M and IQ1_M: the type of attn_v where few query heads share a key head, and of the
    # first eighth's ffn_down.
    low_bits_more = {"iq2_m": Q.IQ3_S, "iq1_m": Q.Q2_K}.get(quant)

    def attn_v(i: int) -> Q:
        if quant in ("q4_k_m", "q5_k_m"):
            return Q.Q6_K if more_bits(i, n) else base
        if quant == "q3_k_m":
            return Q.Q5_K if i < 2 else Q.Q4_K
        if quant == "q2_k":
            return Q.Q4_K if s["heads"] // s["kv"] >= 4 else Q.Q3_K
        if quant == "iq4_xs":
            return Q.Q5_K if s["heads"] // s["kv"] >= 4 else base
        if quant == "iq3_m":
            return Q.Q4_K
        if low_bits_more:
            return Q.Q4_K if s["heads"] // s["kv"] >= 4 else low_bits_more
        return base

    def ffn_down(i: int) -> Q:
        if quant in ("q4_k_m", "q5_k_m"):
            return Q.Q6_K if more_bits(i, n) else base
        if quant == "q3_k_m":
            return Q.Q5_K if i < n // 16 else Q.Q4_K
        if quant == "iq4_xs":
            return Q.Q5_K if i < n // 8 else base
        if quant == "iq3_m":
            return Q.Q4_K if i < n // 8 else base
        if low_bits_more:
            return low_bits_more if i < n // 8 else base
        return Q.Q3_K if quant == "q2_k" else base

    attn_output = {"q3_k_m": Q.Q4_K, "q2_k": Q.Q3_K, "iq3_m": Q.Q4_K, "iq2_m": Q.IQ3_S,
                   "iq1_m": Q.IQ2_XXS}.get(quant, base)
    token_embd = {"iq2_m": Q.IQ3_S, "iq1_m": Q.Q2_K}.get(quant, base)
    output = Q.Q5_K if quant in ("iq2_m", "iq1_m") else Q.Q6_K
    out = [("token_embd.weight", (s["vocab"], h), token_embd)]
    for i in range(n):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (h,), None),
                (p + "attn_q.weight", (s["heads"] * hd, h), base),
                (p + "attn_k.weight", (s["kv"] * hd, h), base),
                (p + "attn_v.weight", (s["kv"] * hd, h), attn_v(i))]
        if s["bias"]:
            out += [(p + "attn_q.bias", (s["heads"] * hd,), None), (p + "attn_k.bias", (s["kv"] * hd,), None),
                    (p + "attn_v.bias", (s["kv"] * hd,), None)]
        out += [(p + "attn_output.weight", (h, s["heads"] * hd), attn_output),
                (p + "ffn_norm.weight", (h,), None),
                (p + "ffn_gate.weight", (f, h), base),
                (p + "ffn_up.weight", (f, h), base),
                (p + "ffn_down.weight", (h, f), ffn_down(i))]
    out += [("output_norm.weight", (h,), None), ("output.weight", (s["vocab"], h), output)]
    return out


def llama3_tokenizer(w: GGUFWriter, folder: Path, vocab_rows: int) -> None:
    tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    pieces = {i: p for p, i in tok["model"]["vocab"].items()}
    special = {t["id"]: t["content"] for t in tok["added_tokens"]}
    pieces.update(special)
    if len(pieces) != vocab_rows:
        raise SystemExit(f"{folder}: {len(pieces)} tokens, the shape has {vocab_rows} rows")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list([pieces[i] for i in range(vocab_rows)])
    w.add_token_types([TokenType.CONTROL if i in special else TokenType.NORMAL for i in range(vocab_rows)])
    merges = tok["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(128000)
    w.add_eos_token_id(128009)
    w.add_chat_template(config["chat_template"])


def copy_tokenizer(w: GGUFWriter, source: Path) -> None:
    """Every tokenizer.* field of a real GGUF (Qwen2.5's vocabulary and chat template)."""
    r = GGUFReader(source)
    for name, field in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == GGUFValueType.STRING:
                value = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            w.add_array(name, value)
        elif vtype == GGUFValueType.STRING:
            w.add_string(name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            w.add_key_value(name, field.parts[field.data[0]].tolist()[0], vtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shape", choices=SHAPES, required=True)
    ap.add_argument("--quant", choices=list(FILE_TYPES), default="q4_k_m")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--models", type=Path, default=Path(os.environ.get("HYOKA_TEST_MODELS", Path.home() / ".cache/hyoka/test-models")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", type=Path,
                    help="qwen-14b: the GGUF whose tokenizer.* fields to copy (default: the Qwen2.5 test model in --models)")
    args = ap.parse_args()
    s = SHAPES[args.shape]
    rng = np.random.default_rng(args.seed)
    w = GGUFWriter(args.output, s["arch"])
    w.add_name(f"synthetic {args.shape} ({args.quant}, random weights)")
    w.add_block_count(s["layers"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_file_type(FILE_TYPES[args.quant])
    if s["tokenizer"] == "llama3":
        llama3_tokenizer(w, args.models / "llama-3-tokenizer", s["vocab"])
    else:
        copy_tokenizer(w, args.tokenizer_from or args.models / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    layout = tensors(s, args.quant)
    for name, shape, qtype in layout:
        if qtype is None:
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
        else:
            rows, cols = shape
            nbytes = rows * cols // 256 * BLOCK_BYTES[qtype]
            w.add_tensor_info(name, (rows, cols // 256 * BLOCK_BYTES[qtype]), np.dtype(np.uint8), nbytes, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, qtype in layout:
        if qtype is None:
            data = np.ones(shape, np.float32) if name.endswith("norm.weight") else rng.normal(0, 0.02, shape).astype(np.float32)
        else:
            data = random_blocks(rng, qtype, *shape)
        w.write_tensor_data(data)
    w.close()
    print(f"wrote {args.output} ({args.output.stat().st_size / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()
