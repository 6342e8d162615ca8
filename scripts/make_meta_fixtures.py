#!/usr/bin/env python3
"""Expected meta-evaluation values from scipy.stats, for tests/suite/meta_parity.rs.

Writes tests/fixtures/meta/:
  stats.json       pearsonr / spearmanr / kendalltau (method="auto") on raw vectors, incl. ties,
                   small n (Kendall's exact p), perfect and constant columns (undefined = null)
  items.jsonl      synthetic items: 3 systems, 12 dialogues, 2 human aspects with 5 raters each
  judge.jsonl      judge results lines (aspects "coherence" and "overall"), one error line
  bertscore.jsonl  BERTScore results lines
  expected.json    item / system / within-dialogue correlations, rater agreement, aspect
                   matrix and the combined score, all computed here with numpy + scipy
Run with the reference venv (scripts/requirements-reference.txt):
    python scripts/make_meta_fixtures.py
"""
import json
import os

import numpy as np
from scipy import stats

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
out = os.path.join(root, "tests", "fixtures", "meta")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(20261122)


def corr(x, y):
    """scipy's three coefficients; None where scipy says NaN (undefined)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    res = {}
    if len(x) < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return {"pearson": None, "spearman": None, "kendall": None}
    for name, f in [("pearson", stats.pearsonr), ("spearman", stats.spearmanr), ("kendall", stats.kendalltau)]:
        r = f(x, y)
        res[name] = None if np.isnan(r.statistic) else [float(r.statistic), float(r.pvalue)]
    return res


# --- raw vectors -----------------------------------------------------------------------------
cases = []
def case(name, x, y):
    cases.append({"name": name, "x": [float(v) for v in x], "y": [float(v) for v in y], **corr(x, y)})

x = rng.normal(size=60); case("normal n=60", x, 0.4 * x + rng.normal(size=60))
x = rng.normal(size=20); case("no ties n=20 (exact Kendall)", x, x + rng.normal(size=20))
x = rng.normal(size=33); case("no ties n=33 (exact Kendall)", x, -x + 2 * rng.normal(size=33))
x = rng.normal(size=34); case("no ties n=34 (asymptotic)", x, x + rng.normal(size=34))
case("ties: 3-point vs 5-point scale n=120", rng.integers(0, 3, 120), rng.integers(1, 6, 120))
a = rng.integers(0, 2, 200); case("heavy ties, binary vs mean of raters", a, a * 0.3 + rng.integers(0, 5, 200) / 4)
case("n=3", [1, 2, 3], [1, 3, 2])
case("n=4 with a tie", [1, 2, 2, 4], [3, 1, 2, 5])
case("perfect n=10", np.arange(10), np.arange(10) * 2 + 1)
case("perfect n=40 (Kendall exact: one-sided tail)", np.arange(40), np.arange(40))
x = rng.normal(size=500); case("strong n=500 (tiny p)", x, x + 0.3 * rng.normal(size=500))
case("constant x", [2, 2, 2, 2, 2], [1, 2, 3, 4, 5])
case("constant y", [1, 2, 3, 4, 5], [0.5, 0.5, 0.5, 0.5, 0.5])
case("n=2", [1, 2], [2, 1])
with open(os.path.join(out, "stats.json"), "w") as f:
    json.dump(cases, f, indent=1)

# --- a synthetic evaluation ----------------------------------------------------------------
systems = ["A", "B", "C"]
items, judge, bert = [], [], []
prov_j = {"hyoka": "fixture", "task": "judge", "rubric": {"name": "fixture", "source": "fixture", "hash": "0"},
          "models": [{"name": "fixture-judge", "sha256": "0", "arch": "llama"}], "dtype": "f32", "device": "cpu"}
prov_b = {"hyoka": "fixture", "task": "bertscore", "models": [{"name": "fixture-encoder", "sha256": "0", "arch": "bert"}],
          "dtype": "f32", "device": "cpu", "settings": {"layer": 6}}
rater_pool = [f"r{k}" for k in range(9)]
for d in range(12):
    system = systems[d % 3]
    quality = {"A": 0.2, "B": 0.0, "C": -0.3}[system]
    raters = list(rng.choice(rater_pool, 5, replace=False))
    for t in range(6):
        latent = quality + rng.normal()
        coh = [int(np.clip(round(latent + 0.5 + 0.6 * rng.normal()), 0, 1)) for _ in raters]
        ovr = [int(np.clip(round(3 + latent + 0.8 * rng.normal()), 1, 5)) for _ in raters]
        if d == 5:  # a dialogue where every rater gives the same coherence: constant within it
            coh = [1] * 5
        iid = f"{system}/{d}/{t}"
        items.append({"id": iid, "context": [{"speaker": "U", "text": "こんにちは"}], "response": {"speaker": "S", "text": f"応答{d}-{t}"},
                      "system": system, "dialogue": str(d), "human": {"coherence": coh, "overall": ovr}, "raters": raters})
        if d == 7 and t == 2:
            judge.append({"id": iid, "error": "fixture failure", "provenance": prov_j})
        else:
            scores = {}
            for aspect, lo, hi in [("coherence", 0, 1), ("overall", 1, 5)]:
                logits = rng.normal(size=hi - lo + 1) + np.linspace(-1, 1, hi - lo + 1) * latent * 2
                p = np.exp(logits) / np.exp(logits).sum()
                dist = {str(lo + k): float(v) for k, v in enumerate(p)}
                scores[aspect] = {"score": lo + int(np.argmax(p)), "expected": float(sum((lo + k) * v for k, v in enumerate(p))),
                                  "distribution": dist, "off_scale": 0.0}
            judge.append({"id": iid, "scores": scores, "provenance": prov_j})
        f1 = float(np.clip(0.6 + 0.05 * latent + 0.05 * rng.normal(), 0, 1))
        bert.append({"id": iid, "bertscore": {"P": f1 + 0.01, "R": f1 - 0.01, "F": f1}, "provenance": prov_b})
# An item whose judge line is missing entirely (never scored).
items.append({"id": "C/99/0", "context": [], "response": {"speaker": "S", "text": "x"}, "system": "C", "dialogue": "99",
              "human": {"coherence": [1, 0, 1, 1, 0], "overall": [3, 3, 4, 2, 3]}, "raters": ["r0", "r1", "r2", "r3", "r4"]})

for name, rows in [("items.jsonl", items), ("judge.jsonl", judge), ("bertscore.jsonl", bert)]:
    with open(os.path.join(out, name), "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")

jmap = {r["id"]: r for r in judge if "scores" in r}
bmap = {r["id"]: r["bertscore"] for r in bert}
human = {k: {it["id"]: float(np.mean(it["human"][k])) for it in items} for k in ["coherence", "overall"]}
mean_f = float(np.mean([b["F"] for b in bmap.values()]))
W = 10.0


def column(kind, aspect):
    vals = {}
    for it in items:
        i = it["id"]
        if kind == "bertscore F":
            if i in bmap:
                vals[i] = bmap[i]["F"]
            continue
        if i not in jmap:
            continue
        s = jmap[i]["scores"][aspect]
        c = s["score"] if "argmax" in kind else s["expected"]
        if kind.startswith("combined"):
            if i not in bmap:
                continue
            c = c + W * (bmap[i]["F"] - mean_f)
        vals[i] = float(c)
    return vals


def levels(vals, key):
    ids = [it["id"] for it in items if it["id"] in vals]
    x = [vals[i] for i in ids]
    y = [human[key][i] for i in ids]
    res = {"item": {"n": len(ids), **corr(x, y)}}
    sys_of = {it["id"]: it["system"] for it in items}
    xs = [np.mean([vals[i] for i in ids if sys_of[i] == s]) for s in systems]
    ys = [np.mean([human[key][i] for i in ids if sys_of[i] == s]) for s in systems]
    res["system"] = {"n": 3, **corr(xs, ys)}
    dia_of = {it["id"]: it["dialogue"] for it in items}
    within = {}
    for m in ["pearson", "spearman", "kendall"]:
        rs = []
        for d in sorted(set(dia_of[i] for i in ids)):
            di = [i for i in ids if dia_of[i] == d]
            c = corr([vals[i] for i in di], [human[key][i] for i in di])[m]
            if c is not None:
                rs.append(c[0])
        within[m] = [float(np.mean(rs)), len(rs)] if rs else None
    res["dialogue"] = within
    return res


expected = {"w": W, "mean_f": mean_f, "columns": {}}
for kind in ["judge argmax", "judge expected", "combined argmax", "combined expected"]:
    for aspect in ["coherence", "overall"]:
        expected["columns"][f"{kind}|{aspect}"] = {"human": aspect, **levels(column(kind, aspect), aspect)}
for key in ["coherence", "overall"]:
    expected["columns"][f"bertscore F|{key}"] = {"human": key, **levels(column("bertscore F", None), key)}

# Table 4: each rater (by id) against the mean of the other raters of the same items.
agreement = {}
for key in ["coherence", "overall"]:
    per = {}
    for it in items:
        r = it["human"][key]
        for k, who in enumerate(it["raters"]):
            others = (sum(r) - r[k]) / (len(r) - 1)
            per.setdefault(who, ([], []))
            per[who][0].append(r[k]); per[who][1].append(others)
    sp = [stats.spearmanr(a, b).statistic for a, b in per.values() if len(a) >= 3 and len(set(a)) > 1 and len(set(b)) > 1]
    pe = [stats.pearsonr(a, b).statistic for a, b in per.values() if len(a) >= 3 and len(set(a)) > 1 and len(set(b)) > 1]
    means = np.array([np.mean(it["human"][key]) for it in items])
    agreement[key] = {"spearman": float(np.mean(sp)), "pearson": float(np.mean(pe)), "raters": len(sp),
                      "mean": float(means.mean()), "std": float(means.std(ddof=1))}
expected["agreement"] = agreement
hc = [human["coherence"][it["id"]] for it in items]
ho = [human["overall"][it["id"]] for it in items]
expected["human_matrix"] = float(stats.spearmanr(hc, ho).statistic)
with open(os.path.join(out, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1)
print(f"wrote {len(cases)} stats cases, {len(items)} items to {out}")
