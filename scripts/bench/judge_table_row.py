#!/usr/bin/env python3
"""One row of scripts/bench/measure_judges.sh's table from the files it wrote for one judge × rubric.

Usage: judge_table_row.py JUDGE RUBRIC ASPECT PREFIX
Reads PREFIX.rho.json (meta --half held-out), PREFIX.breakdown.json (meta --calibrate) and
PREFIX.judge.log (the judge's "scored N items in Xs" line); prints a Markdown table row.
"""

import json
import re
import sys


def spearman(summary: dict, *labels: str) -> float | None:
    """The first of `labels` that is a row (a one-aspect rubric's rows carry no aspect name)."""
    for label in labels:
        for c in summary["correlations"]:
            if c["row"] == label and c["human"] == "breakdown" and c["level"] == "item":
                return c["spearman"] and c["spearman"]["r"]
    raise SystemExit(f"no item-level Spearman of {labels} against breakdown")


def held_out_jsd(summary: dict, column: str) -> dict:
    for table in summary["breakdown"]:
        if table["column"] == column:
            return {r["predictor"]: r["metrics"]["jsd_o_t_x"] for r in table["rows"] if r["turns"] == "held-out"}
    raise SystemExit(f"no breakdown table for {column!r}")


def seconds_per_item(log: str) -> float:
    m = re.search(r"scored (\d+) items in ([0-9.]+)s", log)
    if not m:
        raise SystemExit("no 'scored N items in Xs' line in the judge's log")
    return float(m.group(2)) / int(m.group(1))


def fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def main() -> None:
    judge, rubric, aspect, prefix = sys.argv[1:5]
    rho = json.load(open(prefix + ".rho.json", encoding="utf-8"))
    bd = json.load(open(prefix + ".breakdown.json", encoding="utf-8"))
    jsd = held_out_jsd(bd, f"judge · {aspect}")
    log = open(prefix + ".judge.log", encoding="utf-8").read()
    print(f"| {judge} | {rubric} · {aspect} | {fmt(spearman(rho, f'judge expected · {aspect}', 'judge expected'))} "
          f"| {fmt(spearman(rho, 'BERTScore F'))} | {fmt(jsd['judge'], 4)} | {fmt(jsd.get('calibrated'), 4)} "
          f"| {fmt(jsd['prior'], 4)} | {seconds_per_item(log):.2f} |")


if __name__ == "__main__":
    main()
