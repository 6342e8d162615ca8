#!/usr/bin/env python3
"""Expected values for bert_score's default encoder read from a Hugging Face cache, for
tests/suite/bertscore_defaults.rs and python/tests/test_bertscore.py.

bert_score.score(cands, refs, lang="ja") picks bert-base-multilingual-cased and its layer 9 by
itself; here that name is a tiny random 10-layer BERT (WordPiece tokenizer of
tests/fixtures/bert/bert) placed in a Hugging Face cache laid out as huggingface_hub writes it,
read with HF_HUB_OFFLINE=1. Writes tests/fixtures/bert/hub-default/ (the model's files) and
tests/fixtures/bert/hub-default.json. Run with the reference venv
(scripts/requirements-reference.txt):
    python scripts/make_hub_cache_fixtures.py
"""
import hashlib
import json
import os
import shutil
import tempfile

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
bert_dir = os.path.join(root, "tests", "fixtures", "bert")
out_dir = os.path.join(bert_dir, "hub-default")
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# huggingface_hub reads these when it is imported.
hf_home = tempfile.mkdtemp()
os.environ["HF_HOME"] = hf_home
os.environ["HF_HUB_OFFLINE"] = "1"


def lay_out_cache(hub, repo, files):
    """A snapshot of `repo` as huggingface_hub stores it: blobs by hash, links under snapshots."""
    folder = os.path.join(hub, "models--" + repo.replace("/", "--"))
    os.makedirs(os.path.join(folder, "refs"), exist_ok=True)
    os.makedirs(os.path.join(folder, "blobs"), exist_ok=True)
    snapshot = os.path.join(folder, "snapshots", COMMIT)
    os.makedirs(snapshot, exist_ok=True)
    with open(os.path.join(folder, "refs", "main"), "w") as f:
        f.write(COMMIT)
    for path in files:
        data = open(path, "rb").read()
        blob = hashlib.sha256(data).hexdigest()
        with open(os.path.join(folder, "blobs", blob), "wb") as f:
            f.write(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snapshot, os.path.basename(path)))


def make_model():
    import torch
    from transformers import BertConfig, BertModel

    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(4)
    m = BertModel(BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=10, num_attention_heads=2,
                             intermediate_size=32, max_position_embeddings=128))
    m.eval()
    m.save_pretrained(out_dir, safe_serialization=True)
    shutil.copy(os.path.join(bert_dir, "bert", "tokenizer.json"), out_dir)
    shutil.copy(os.path.join(bert_dir, "bert", "tokenizer_config.json"), out_dir)


def main():
    make_model()
    files = [os.path.join(out_dir, f) for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")]
    # transformers asks for the bare name; hyoka for the repository the Hub keeps it under.
    for repo in ("bert-base-multilingual-cased", "google-bert/bert-base-multilingual-cased"):
        lay_out_cache(os.path.join(hf_home, "hub"), repo, files)
    import bert_score
    from bert_score.utils import lang2model, model2layers
    from importlib.metadata import version

    assert version("bert-score") == "0.3.13", version("bert-score")
    assert lang2model["ja"] == "bert-base-multilingual-cased" and model2layers["bert-base-multilingual-cased"] == 9
    cands = ["私はお寿司が食べたいです。", "はい、猫が好きです。", "I run twice a week.", "The crab was wonderful."]
    refs = ["お寿司がいいですね。", "週末は何をしていましたか？", "Do you exercise?", "How was the trip to Hokkaido?"]
    P, R, F = bert_score.score(cands, refs, lang="ja", use_fast_tokenizer=True, device="cpu")
    with open(os.path.join(bert_dir, "hub-default.json"), "w") as f:
        json.dump({"bert_score": version("bert-score"), "lang": "ja", "model": lang2model["ja"],
                   "layer": model2layers[lang2model["ja"]], "commit": COMMIT, "cands": cands, "refs": refs,
                   "P": P.tolist(), "R": R.tolist(), "F": F.tolist()}, f, ensure_ascii=False, indent=1)
    shutil.rmtree(hf_home)
    print("wrote", os.path.join(bert_dir, "hub-default.json"))


main()
