#!/usr/bin/env bash
# The Japanese rescaling baseline shipped in models/rescale_baseline/ja/ (used by --rescale):
# every distinct utterance of DBDC3-ja (MIT; data/dbdc3-ja.tar.gz, system and user turns
# of all 150 dialogues) as the corpus, 100,000 random pairs (seed 0), every layer, the way
# bert_score's get_rescale_baseline.py computes its baselines.
#
# Usage: scripts/bench/make_ja_baseline.sh [MODEL_DIR]   (default: the offline multilingual-e5-small)
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-${HYOKA_TEST_MODELS:-$HOME/.cache/hyoka/test-models}/multilingual-e5-small}
corpus=target/dbdc3-ja-utterances.txt
python3 - "$corpus" <<'PY'
import sys
sys.path.insert(0, "scripts")
from dbdc3_data import dialogues
seen, out = set(), []
for _, dialogue in dialogues():
    for turn in dialogue["turns"]:
        text = " ".join(turn["utterance"].split())
        if text and text not in seen:
            seen.add(text)
            out.append(text)
open(sys.argv[1], "w", encoding="utf-8").write("\n".join(out) + "\n")
print(f"{len(out)} distinct utterances", file=sys.stderr)
PY
mkdir -p models/rescale_baseline/ja
target/release/hyoka bertscore baseline --model "$model" --corpus "$corpus" --pairs 100000 --seed 0 \
  -o "models/rescale_baseline/ja/$(basename "$model").tsv"
