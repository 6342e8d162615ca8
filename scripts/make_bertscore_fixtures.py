#!/usr/bin/env python3
"""Expected BERTScore values from bert_score 0.3.13 (use_fast_tokenizer=True), for tests/suite/bertscore_parity.rs.

Writes tests/fixtures/bert/expected.json and tiny random encoders (BERT, DistilBERT, XLM-RoBERTa)
under tests/fixtures/bert/<arch>/. The real encoder is all-MiniLM-L6-v2 from the test-model cache
(scripts/fetch_test_models.py). Run with the reference venv (scripts/requirements-reference.txt):
    python scripts/make_bertscore_fixtures.py [TEST_MODELS_DIR]
"""
import glob
import json
import os
import shutil
import sys

import torch
import bert_score
from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel, XLMRobertaConfig, XLMRobertaModel

from importlib.metadata import version
# The 0.3.13 release still says __version__ = "0.3.12"; the package metadata is right.
assert version("bert-score") == "0.3.13", version("bert-score")
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
out_dir = os.path.join(root, "tests", "fixtures", "bert")
models = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/hyoka/test-models")
minilm = os.path.join(models, "all-MiniLM-L6-v2")

JA = [
    ("私はお寿司が食べたいです。", "おなかがすいてきましたね。なにか食べたいものはありますか？"),
    ("はい、猫が好きです。", "週末は何をしていましたか？"),
    ("週に二回走っています。", "運動はしていますか？"),
    ("  北海道のカニは最高でした！  ", "北海道旅行はどうでしたか？"),
    ("そうですね", "そうですね"),
    ("熱中症に気をつけてください。水分補給が大切です。", "最近とても暑いですね。"),
]
EN = [
    ("I'd like sushi.", "I'm getting hungry. Anything you'd like to eat?"),
    ("Yes, I like cats.", "What did you do at the weekend?"),
    ("I run twice a week.", "Do you exercise?"),
    ("The crab was wonderful, and it snowed every day.", "How was the trip to Hokkaido?"),
]
# No empty sentence: bert_score 0.3.13 calls build_inputs_with_special_tokens for it, which
# transformers 5 tokenizers no longer have.
PAIRS = JA + EN
cands = [c for c, _ in PAIRS]
refs = [r for _, r in PAIRS]
multi_refs = [[r, "それはいいですね。"] if i % 2 == 0 else [r] for i, r in enumerate(refs)]
# bert_score takes multi-reference input only with the same number of references per item.
multi_refs2 = [[r, "それはいいですね。"] for r in refs]

cases = []


def case(name, model_dir, layer, idf, cands, refs, baseline=None):
    kw = dict(model_type=model_dir, num_layers=layer, idf=idf, use_fast_tokenizer=True, device="cpu", batch_size=4)
    if baseline:
        kw.update(rescale_with_baseline=True, baseline_path=os.path.join(out_dir, baseline), lang="ja")
    P, R, F = bert_score.score(cands, refs, **kw)
    cases.append({
        "name": name, "model": os.path.relpath(model_dir, out_dir) if model_dir.startswith(out_dir) else os.path.basename(model_dir),
        "layer": layer, "idf": idf, "baseline": baseline, "cands": cands, "refs": [r if isinstance(r, list) else [r] for r in refs],
        "P": P.tolist(), "R": R.tolist(), "F": F.tolist(),
    })


# A baseline file in bert_score's format (values made up; the rescaling is what is tested).
with open(os.path.join(out_dir, "baseline-minilm.tsv"), "w") as f:
    f.write("LAYER,P,R,F\n")
    for layer in range(7):
        f.write(f"{layer},{0.30 + layer / 100},{0.31 + layer / 100},{0.305 + layer / 100}\n")

torch.manual_seed(0)
for layer in (4, 6):
    case(f"minilm-L{layer}", minilm, layer, False, cands, refs)
case("minilm-idf", minilm, 4, True, cands, refs)
case("minilm-multiref", minilm, 4, False, cands, multi_refs2)
case("minilm-multiref-idf", minilm, 4, True, cands, multi_refs2)
case("minilm-rescaled", minilm, 4, True, cands, refs, baseline="baseline-minilm.tsv")

# multilingual-e5-small as fetch_test_models.py assembles it (XLM-R SentencePiece vocabulary):
# the registry copy of multilingual-e5-small (named by path), at its default layer (12) and another, idf, several references,
# hyoka's shipped Japanese baseline, and 200 DBDC3-ja responses against their previous turn.
e5 = os.path.join(models, "multilingual-e5-small")
case("e5-L12", e5, 12, False, cands, refs)
case("e5-L9-idf", e5, 9, True, cands, refs)
case("e5-multiref-idf", e5, 12, True, cands, multi_refs2)
case("e5-rescaled", e5, 12, False, cands, refs, baseline="../../../models/rescale_baseline/ja/multilingual-e5-small.tsv")
dbdc3_pairs = []
sys.path.insert(0, os.path.join(root, "scripts"))
from dbdc3_data import dialogues  # noqa: E402

for _, dialogue in dialogues():
    turns = dialogue["turns"]
    dbdc3_pairs += [(t["utterance"], p["utterance"]) for p, t in zip(turns, turns[1:]) if t["speaker"] == "S"]
dbdc3_pairs = dbdc3_pairs[::8][:200]
case("e5-dbdc3", e5, 12, False, [c for c, _ in dbdc3_pairs], [r for _, r in dbdc3_pairs])


def tiny(arch):
    d = os.path.join(out_dir, arch)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed({"bert": 1, "distilbert": 2, "xlm-roberta": 3}[arch])
    if arch == "bert":
        m = BertModel(BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32, max_position_embeddings=128))
    elif arch == "distilbert":
        m = DistilBertModel(DistilBertConfig(vocab_size=30522, dim=16, n_layers=3, n_heads=2, hidden_dim=32, max_position_embeddings=128))
    else:
        # The WordPiece tokenizer's [PAD] is 0: positions count from padding_idx + 1 = 1.
        m = XLMRobertaModel(XLMRobertaConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32, max_position_embeddings=130, pad_token_id=0, type_vocab_size=1))
    m.eval()
    m.save_pretrained(d, safe_serialization=True)
    shutil.copy(os.path.join(minilm, "tokenizer.json"), d)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "BertTokenizer", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "unk_token": "[UNK]", "mask_token": "[MASK]", "model_max_length": 128, "do_lower_case": True}, f)
    return d


for arch in ("bert", "distilbert", "xlm-roberta"):
    d = tiny(arch)
    case(f"tiny-{arch}", d, 2, True, cands, refs)

# Baseline computation: mean P/R/F per layer over pairs, every layer (bert_score all_layers).
P, R, F = bert_score.score(cands, refs, model_type=minilm, num_layers=6, all_layers=True, use_fast_tokenizer=True, device="cpu", batch_size=4)
baseline_layers = [[float(P[l].mean()), float(R[l].mean()), float(F[l].mean())] for l in range(P.shape[0])]

with open(os.path.join(out_dir, "expected.json"), "w") as f:
    json.dump({"bert_score": version("bert-score"), "cases": cases,
               "baseline": {"cands": cands, "refs": refs, "layers": baseline_layers}}, f, ensure_ascii=False, indent=1)
print("wrote", len(cases), "cases")
