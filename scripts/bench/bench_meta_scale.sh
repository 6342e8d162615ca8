#!/usr/bin/env bash
# `hyoka meta` at scale: N synthetic items (10 systems, dialogues of 10 turns, five raters, two
# human aspects) with a judge's and BERTScore's results lines, then `hyoka meta` with the default
# 1,000 bootstrap resamples; wall time and peak RSS (/usr/bin/time -v), and the same with
# --bootstrap 0 (HYOKA_META_RESAMPLES: the resample counts to run, default "1000 0"). The lines
# carry no input_sha256 (they are not scored from the items), hence
# --accept-unhashed.
# Usage: scripts/bench/bench_meta_scale.sh [N] [HYOKA]   (default 1000000, target/release/hyoka)
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-1000000}"
bin="${2:-target/release/hyoka}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work" "$n" <<'PY'
import json, random, sys
work, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(0)
prov_j = {"hyoka": "bench", "task": "judge", "rubric": {"name": "bench", "source": "bench", "hash": "0"},
          "models": [{"name": "bench-judge", "sha256": "0", "arch": "llama"}], "dtype": "f32", "device": "cpu"}
prov_b = {"hyoka": "bench", "task": "bertscore", "models": [{"name": "bench-encoder", "sha256": "0", "arch": "bert"}],
          "dtype": "f32", "device": "cpu", "settings": {"layer": 6}}
with open(f"{work}/items.jsonl", "w") as items, open(f"{work}/judge.jsonl", "w") as judge, \
        open(f"{work}/bertscore.jsonl", "w") as bert:
    for k in range(n):
        system, dialogue, turn = f"S{k % 10}", str(k // 100), (k // 10) % 10
        iid = f"{system}/{dialogue}/{turn}"
        quality = rng.random()
        coherence = [int(rng.random() < quality) for _ in range(5)]
        overall = [min(5, max(1, round(1 + 4 * quality + rng.gauss(0, 0.7)))) for _ in range(5)]
        items.write(json.dumps({"id": iid, "context": [{"speaker": "U", "text": "こんにちは"}],
                                "response": {"speaker": "S", "text": f"応答{k}"}, "system": system,
                                "dialogue": dialogue, "human": {"coherence": coherence, "overall": overall}},
                               ensure_ascii=False) + "\n")
        p = min(0.99, max(0.01, quality + rng.gauss(0, 0.3)))
        o = [rng.random() for _ in range(5)]
        o = [x / sum(o) for x in o]
        judge.write(json.dumps({"id": iid, "scores": {
            "coherence": {"score": int(p > 0.5), "expected": p, "distribution": {"0": 1 - p, "1": p}, "off_scale": 0.0},
            "overall": {"score": 1 + o.index(max(o)), "expected": sum((i + 1) * x for i, x in enumerate(o)),
                        "distribution": {str(i + 1): x for i, x in enumerate(o)}, "off_scale": 0.0}},
            "provenance": prov_j}) + "\n")
        f = 0.5 + 0.3 * quality + rng.gauss(0, 0.1)
        bert.write(json.dumps({"id": iid, "bertscore": {"P": f, "R": f, "F": f}, "provenance": prov_b}) + "\n")
PY
for boot in ${HYOKA_META_RESAMPLES:-1000 0}; do
  /usr/bin/time -v "$bin" meta -i "$work/items.jsonl" -s "$work/judge.jsonl" -s "$work/bertscore.jsonl" \
    --accept-unhashed --bootstrap "$boot" --json "$work/summary.json" 2> "$work/time.log" > /dev/null || {
    cat "$work/time.log"; exit 1; }
  wall=$(grep "Elapsed (wall clock)" "$work/time.log" | awk '{print $NF}')
  rss=$(grep "Maximum resident set size" "$work/time.log" | awk '{print $NF}')
  echo "meta on $n items, --bootstrap $boot: wall $wall, peak RSS $((rss / 1024)) MiB ($(nproc) threads)"
done
/usr/bin/time -v "$bin" validate "$work/items.jsonl" 2> "$work/time.log" > /dev/null
echo "validate on $n items: wall $(grep "Elapsed (wall clock)" "$work/time.log" | awk '{print $NF}'), peak RSS $(( $(grep "Maximum resident set size" "$work/time.log" | awk '{print $NF}') / 1024 )) MiB; file $(( $(stat -c %s "$work/items.jsonl") / 1048576 )) MiB"
