#!/usr/bin/env python3
"""The same hyoka command run on two devices (or dtypes): how far apart are its outputs?

Usage: compare_outputs.py REFERENCE OTHER [--tolerance T] [--label TEXT]
REFERENCE and OTHER are two results files (JSONL) or two folders; in folders every *.jsonl file
present in both is compared (an eval's items.jsonl, judge.jsonl, bertscore.jsonl, scores.jsonl,
likelihood-*.jsonl, pairs.jsonl, the translated route's en/ …). Lines are matched by "id" (or
"pair" / "text" ids, else by line number). Every number below a line is compared (provenance,
timings and checksums left out: they name the device by design); strings are counted as equal or
not. Prints, per file, the lines matched, the worst |Δ| and where it was, and the strings that
differ. Exits 1 when a number differs by more than --tolerance (default: report only).
"""

import argparse
import json
import math
import sys
from pathlib import Path

SKIP = {"provenance", "seconds", "elapsed", "time", "input_sha256", "by"}


def key_of(line: dict, n: int) -> str:
    for k in ("id", "pair", "text_id"):
        if isinstance(line.get(k), (str, int)):
            return str(line[k])
    return f"line {n}"


def walk(a, b, path, out):
    """Collect (|Δ|, path) for numbers and (path, a, b) for differing strings."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() & b.keys():
            if k not in SKIP:
                walk(a[k], b[k], f"{path}.{k}", out)
        for k in a.keys() ^ b.keys():
            if k not in SKIP:
                out["shape"].append(f"{path}.{k} in one side only")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out["shape"].append(f"{path}: {len(a)} vs {len(b)} entries")
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]", out)
    elif isinstance(a, bool) or isinstance(b, bool):
        if a != b:
            out["strings"].append((path, a, b))
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) and math.isnan(b):
            return
        out["numbers"].append((abs(a - b), path))
    elif a != b:
        out["strings"].append((path, a, b))


def compare_file(ref: Path, other: Path):
    def lines(p):
        with open(p, encoding="utf-8") as f:
            return {key_of(line, n): line for n, line in enumerate(json.loads(t) for t in f if t.strip())}
    a, b = lines(ref), lines(other)
    out = {"numbers": [], "strings": [], "shape": []}
    for k in a.keys() & b.keys():
        walk(a[k], b[k], k, out)
    missing = len(a.keys() ^ b.keys())
    return len(a.keys() & b.keys()), missing, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("reference", type=Path)
    ap.add_argument("other", type=Path)
    ap.add_argument("--tolerance", type=float)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    if args.reference.is_dir():
        names = sorted(p.relative_to(args.reference) for p in args.reference.rglob("*.jsonl"))
        pairs = [(args.reference / n, args.other / n, str(n)) for n in names if (args.other / n).exists()]
    else:
        pairs = [(args.reference, args.other, args.reference.name)]
    worst_all = 0.0
    for ref, other, name in pairs:
        matched, missing, out = compare_file(ref, other)
        worst = max(out["numbers"], default=(0.0, "-"))
        worst_all = max(worst_all, worst[0])
        print(f"{args.label}{name}: {matched} lines matched, {missing} in one side only; "
              f"{len(out['numbers'])} numbers, max |Δ| {worst[0]:.2e} at {worst[1]}; "
              f"{len(out['strings'])} strings differ")
        for path, x, y in out["strings"][:3]:
            print(f"    {path}: {str(x)[:60]!r} vs {str(y)[:60]!r}")
        for s in out["shape"][:3]:
            print(f"    {s}")
    if not pairs:
        print(f"{args.label}nothing to compare under {args.reference} and {args.other}")
        sys.exit(1)
    if args.tolerance is not None and worst_all > args.tolerance:
        print(f"{args.label}FAIL: max |Δ| {worst_all:.2e} > {args.tolerance:g}")
        sys.exit(1)


if __name__ == "__main__":
    main()
