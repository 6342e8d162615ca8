#!/usr/bin/env python3
"""Correlation of judge scores with human ratings (until `hyoka meta` exists): Spearman (scipy)
of the expected score, of the argmax score and of the greedy-parsed score (peers' method,
`hyoka judge --greedy-baseline`) against the mean human rating of each item.

Usage: quality_bar.py ITEMS.jsonl SCORES.jsonl ASPECT_KEY HUMAN_KEY
"""

import json
import sys
from collections import Counter

from scipy.stats import spearmanr


def main() -> None:
    items_path, scores_path, aspect, human = sys.argv[1:5]
    items = {}
    for line in open(items_path, encoding="utf-8"):
        it = json.loads(line)
        r = it["human"][human]
        items[it["id"]] = sum(r) / len(r) if isinstance(r, list) else r
    rows = [json.loads(l) for l in open(scores_path, encoding="utf-8")]
    rows = [r for r in rows if "scores" in r]
    h = [items[r["id"]] for r in rows]
    a = [r["scores"][aspect] for r in rows]
    out = {"items": len(rows)}
    out["spearman_expected"] = spearmanr([x["expected"] for x in a], h).statistic
    out["spearman_argmax"] = spearmanr([x["score"] for x in a], h).statistic
    out["argmax_counts"] = dict(Counter(x["score"] for x in a))
    out["mean_off_scale"] = sum(x["off_scale"] for x in a) / len(a)
    if a and "greedy" in a[0]:
        g = [x["greedy"]["score"] for x in a]
        out["greedy_counts"] = dict(Counter(str(v) for v in g))
        out["greedy_parse_failures"] = sum(v is None for v in g)
        parsed = [(v, y) for v, y in zip(g, h) if v is not None]
        if len({v for v, _ in parsed}) > 1:
            out["spearman_greedy"] = spearmanr([v for v, _ in parsed], [y for _, y in parsed]).statistic
        else:
            out["spearman_greedy"] = None  # constant answers: undefined (no signal)
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
