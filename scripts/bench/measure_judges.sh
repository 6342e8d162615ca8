#!/usr/bin/env bash
# Which small judge and rubric follow DBDC3-ja's raters best (docs/judges-on-dbdc3.md).
#
# On N dialogues of the shipped DBDC3-ja data (every system turn that has a context), for each
# judge × rubric: the judge's scores, then `hyoka meta` on the held-out half of the dialogues
# (Spearman against the raters' mean breakdown, the challenge's JSD/MSE/F, raw and calibrated on
# the development half, the dev-half prior as a baseline), BERTScore against the last turn beside
# it, and the judging time per item. Writes OUT/table.md.
#
# Usage: scripts/bench/measure_judges.sh [OUT] [DIALOGUES] [PREFILL_GEMM]
#   defaults: measure-judges 40 int8 (int8: llama.cpp's 8-bit activation products; f32 is exact)
# Needs: scripts/fetch_test_models.py --only qwen2.5-coder-0.5b-instruct-q4km \
#          qwen2.5-coder-1.5b-instruct-q4km multilingual-e5-small
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-measure-judges}
dialogues=${2:-40}
gemm=${3:-int8}
models=${HYOKA_TEST_MODELS:-$HOME/.cache/hyoka/test-models}
cargo build --release --locked --quiet
hyoka=target/release/hyoka
mkdir -p "$out"

# Items with a context (a first turn has nothing to be coherent with).
$hyoka import dbdc3 data/dbdc3-ja.tar.gz --sample-dialogues "$dialogues" -o "$out/all.jsonl"
python3 - "$out/all.jsonl" "$out/items.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], encoding="utf-8") as src, open(sys.argv[2], "w", encoding="utf-8") as dst:
    for line in src:
        if json.loads(line)["context"]:
            dst.write(line)
EOF
$hyoka bertscore --model "$models/multilingual-e5-small" --lang ja --against last-turn -i "$out/items.jsonl" -o "$out/bertscore.jsonl" 2> "$out/bertscore.log"

judges=(qwen2.5-coder-0.5b-instruct-q4_k_m qwen2.5-coder-1.5b-instruct-q4_k_m)
rubrics=(breakdown3-ja examples/breakdown-ja.toml dialogue6-ja)
{
  echo "| judge | rubric · aspect | ρ judge | ρ BERTScore | JSD judge | JSD calibrated | JSD prior | s/item |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$out/table.md"
for judge in "${judges[@]}"; do
  for rubric in "${rubrics[@]}"; do
    tag="${judge%%-instruct*}.$(basename "$rubric" .toml)"
    levels=()
    case $rubric in
      breakdown3-ja) aspect=breakdown ;;
      examples/breakdown-ja.toml) aspect=coherence ;;
      dialogue6-ja) aspect=coherence; levels=(--breakdown-levels "coherence:1=O,0=X") ;;
    esac
    # A finished run is kept (its log holds the time per item).
    if ! grep -q "; 0 already in .*; 0 failed" "$out/$tag.judge.log" 2>/dev/null; then
      $hyoka judge --rubric "$rubric" --model "$models/$judge.gguf" --prefill-gemm "$gemm" \
        -i "$out/items.jsonl" -o "$out/$tag.judge.jsonl" --overwrite 2> "$out/$tag.judge.log"
    fi
    $hyoka meta -i "$out/items.jsonl" -s "$out/$tag.judge.jsonl" -s "$out/bertscore.jsonl" \
      --half held-out "${levels[@]}" --json "$out/$tag.rho.json" > "$out/$tag.rho.md"
    $hyoka meta -i "$out/items.jsonl" -s "$out/$tag.judge.jsonl" --calibrate "${levels[@]}" \
      --json "$out/$tag.breakdown.json" > "$out/$tag.breakdown.md"
    python3 scripts/bench/judge_table_row.py "$judge" "$rubric" "$aspect" "$out/$tag" >> "$out/table.md"
  done
done
cat "$out/table.md"
