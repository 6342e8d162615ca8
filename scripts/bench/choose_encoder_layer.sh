#!/usr/bin/env bash
# Choose a BERTScore encoder's layer on DBDC3-ja as models/multilingual-e5-small.md describes:
# BERTScore F of every response against the last context turn, at each layer, correlated
# (Spearman, item level) with the raters' mean breakdown label on the development half of the
# dialogues (the split `hyoka meta --fit-w` uses, seed 0) and reported on the held-out half.
#
# Usage: scripts/bench/choose_encoder_layer.sh MODEL LAYERS [OUT_DIR]
#   e.g. scripts/bench/choose_encoder_layer.sh ~/.cache/hyoka/test-models/multilingual-e5-small "$(seq 1 12)"
# Needs a release build (cargo build --release) and data/dbdc3-ja.tar.gz.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=$1
layers=$2
out=${3:-target/choose-layer/$(basename "$model")}
hyoka=target/release/hyoka
mkdir -p "$out"
[ -f "$out/items.jsonl" ] || "$hyoka" import dbdc3 data/dbdc3-ja.tar.gz -o "$out/items.jsonl"

spearman() { # results file, half → Spearman of BERTScore F vs breakdown
  "$hyoka" meta -i "$out/items.jsonl" -s "$1" --half "$2" --bootstrap 0 --json "$out/meta.json" >/dev/null 2>&1
  python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
r = [c for c in d["correlations"] if c["row"] == "BERTScore F" and c["human"] == "breakdown" and c["level"] == "item"][0]
print("%.4f %d" % (r["spearman"]["r"], r["n"]))' "$out/meta.json"
}

printf '| layer | dev Spearman (n) | held-out Spearman (n) |\n|---|---|---|\n'
for layer in $layers; do
  # Exit 4: opening utterances have no previous turn to compare with (left out, as in eval).
  "$hyoka" bertscore --model "$model" --layer "$layer" --against last-turn \
    -i "$out/items.jsonl" -o "$out/bertscore-L$layer.jsonl" >/dev/null 2>&1 || [ $? -eq 4 ]
  read -r dev ndev < <(spearman "$out/bertscore-L$layer.jsonl" dev)
  read -r test ntest < <(spearman "$out/bertscore-L$layer.jsonl" held-out)
  printf '| %s | %s (%s) | %s (%s) |\n' "$layer" "$dev" "$ndev" "$test" "$ntest"
done
