#!/usr/bin/env python3
"""Write tests/fixtures/judge/smollm2.json: score distributions computed by HF transformers.

The judge prompt of each case is a chat (rendered with the model's own template, add_generation_
prompt) followed by an answer prefix; for every valid score s the full text prompt + prefix + s
is tokenized, and the probability of s is read by running the model on that sequence: the
product of the probabilities of s's tokens after the point where the scores' tokenizations part
ways, times — when s's tokens are the beginning of another valid score's ("1" of "10") — the
probability of not continuing with a valid token. Normalising over the valid scores gives the
distribution; 1 - the sum before normalising is the off-scale mass.

Needs torch, transformers, gguf (scripts/requirements-reference.txt) and the test models.
Run: python scripts/make_judge_fixtures.py
"""

import json
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("HYOKA_TEST_MODELS", Path.home() / ".cache" / "hyoka" / "test-models"))
GGUF = "smollm2-135m-instruct-q4_1.gguf"

# (aspect name, min, max): scores are read after "<name>: ".
ASPECTS = [("Naturalness", 1, 3), ("Coherence", 0, 1), ("Overall", 0, 10)]
ITEMS = [
    ("a", "B: I'm getting hungry. Is there anything you'd like to eat?\nA: I'd like to eat sushi."),
    ("b", "B: What did you do over the weekend?\nA: Yes, I like cats."),
    ("c", "B: こんにちは！お元気でしたか？\nA: はい、週に数回ジムに行って、ランニングや水泳をしています。\nB: すごいですね。"
          "\nA: 最近はマラソン大会にも出ました。"),
]
INSTRUCTION = "Rate the last response of A for each aspect.\n\n"


def lcp(seqs):
    n = 0
    while all(len(s) > n for s in seqs) and all(s[n] == seqs[0][n] for s in seqs):
        n += 1
    return n


def main() -> None:
    tok = AutoTokenizer.from_pretrained(str(CACHE), gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(str(CACHE), gguf_file=GGUF, dtype=torch.float32).eval()
    cases = []
    for item_id, dialogue in ITEMS:
        shared = tok.apply_chat_template([{"role": "user", "content": INSTRUCTION + dialogue}], tokenize=False,
                                         add_generation_prompt=True)
        aspects = {}
        for name, lo, hi in ASPECTS:
            scores = list(range(lo, hi + 1))
            seqs = [tok(f"{shared}{name}: {s}", add_special_tokens=False).input_ids for s in scores]
            root = min(lcp(seqs), min(len(s) for s in seqs) - 1)
            paths = [s[root:] for s in seqs]
            raw = []
            for seq, path in zip(seqs, paths):
                with torch.no_grad():
                    logp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0].double(), -1)
                total = sum(logp[root + j - 1, path[j]].item() for j in range(len(path)))
                longer = {p[len(path)] for p in paths if len(p) > len(path) and p[:len(path)] == path}
                if longer:
                    cont = sum(logp[len(seq) - 1, t].exp().item() for t in longer)
                    total += torch.log(torch.tensor(max(1.0 - cont, 0.0), dtype=torch.float64)).item()
                raw.append(torch.tensor(total, dtype=torch.float64).exp().item())
            z = sum(raw)
            dist = [r / z for r in raw]
            aspects[name] = {
                "scores": scores,
                "distribution": dist,
                "expected": sum(s * p for s, p in zip(scores, dist)),
                "off_scale": 1.0 - z,
                "multi_token": any(len(p) > 1 for p in paths),
            }
        cases.append({"id": item_id, "text": INSTRUCTION + dialogue, "aspects": aspects})
    out = ROOT / "tests" / "fixtures" / "judge"
    out.mkdir(parents=True, exist_ok=True)
    fixture = {"model": GGUF, "generated_by": "transformers " + __import__("transformers").__version__,
               "answer": "{name}: {score}", "cases": cases}
    (out / "smollm2.json").write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print("wrote tests/fixtures/judge/smollm2.json")


if __name__ == "__main__":
    main()
