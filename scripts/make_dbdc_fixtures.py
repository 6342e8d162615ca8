#!/usr/bin/env python3
"""Expected DBDC breakdown-detection metrics, for tests/suite/breakdown_parity.rs.

Computed here independently of hyoka: JS divergence with scipy.spatial.distance.jensenshannon
(base 2, squared: the challenge reports the divergence in bits), mean squared error, accuracy and
precision/recall/F with numpy, following the definitions of the DBDC3 challenge
(docs/evaluation_metrics.md and prog/eval/eval.py of dbd-challenge/dbdc3: gold label = the first
of O, T, X that is a maximum of the raters' distribution and reaches the threshold, else O; the
lenient gold label is "breakdown" when T+X exceeds O and reaches the threshold; a predicted
label is the prediction's gold label at threshold 0). The calibration's optimum (temperature and
per-label bias minimising the mean cross-entropy) comes from scipy.optimize.minimize.

Writes tests/fixtures/dbdc/:
  cases.json       metric cases: raters' labels and predicted O/T/X distributions per turn, the
                   threshold, and the expected metrics
  calibration.json development and held-out turns, the fitted calibration and the held-out
                   metrics of the calibrated predictions
  items.jsonl      the first case's turns as items (DBDC3 import layout: per-rater breakdown
                   ratings O=1, T=0.5, X=0), 20 dialogues of 10 turns
  judge.jsonl      judge results for them: aspect "breakdown", levels 0/1/2 = X/T/O in the
                   rubric's provenance
  judge-nomap.jsonl the same scores under aspect "coherence" with no level map (for
                   --breakdown-levels)
Run with the reference venv (scripts/requirements-reference.txt):
    python scripts/make_dbdc_fixtures.py
"""
import json
import os

import numpy as np
from scipy import optimize
from scipy.spatial.distance import jensenshannon

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
out = os.path.join(root, "tests", "fixtures", "dbdc")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(20261202)
LABELS = "OTX"


def gold_label(p, t):
    m = max(p)
    for k in range(3):
        if p[k] == m and p[k] >= t:
            return k
    return 0


def lenient_breakdown(p, t):
    b = p[1] + p[2]
    return b > p[0] and b >= t


def jsd(p, q):
    return float(jensenshannon(p, q, base=2) ** 2)


def metrics(pred, gold, t):
    pred, gold = np.asarray(pred, float), np.asarray(gold, float)
    g = np.array([gold_label(p, t) for p in gold])
    y = np.array([gold_label(p, 0.0) for p in pred])
    gl = np.array([lenient_breakdown(p, t) for p in gold])

    def prf(predicted, actual):
        tp = int(np.sum(predicted & actual))
        p = tp / int(np.sum(predicted)) if tp > 0 else 0.0
        r = tp / int(np.sum(actual)) if tp > 0 else 0.0
        return p, r, (2 * p * r / (p + r) if p > 0 and r > 0 else 0.0)

    px, rx, fx = prf(y == 2, g == 2)
    ptx, rtx, ftx = prf(y != 0, gl)
    o_tx = lambda d: np.stack([d[:, 0], d[:, 1] + d[:, 2]], axis=1)
    ot_x = lambda d: np.stack([d[:, 0] + d[:, 1], d[:, 2]], axis=1)
    views = [(lambda d: d), o_tx, ot_x]
    js = [float(np.mean([jsd(a, b) for a, b in zip(v(gold), v(pred))])) for v in views]
    ms = [float(np.mean(np.mean((v(gold) - v(pred)) ** 2, axis=1))) for v in views]
    return {
        "turns": len(pred),
        "gold": [int(np.sum(g == k)) for k in range(3)],
        "accuracy": float(np.mean(g == y)),
        "precision_x": px, "recall_x": rx, "f_x": fx,
        "precision_tx": ptx, "recall_tx": rtx, "f_tx": ftx,
        "jsd_o_t_x": js[0], "jsd_o_tx": js[1], "jsd_ot_x": js[2],
        "mse_o_t_x": ms[0], "mse_o_tx": ms[1], "mse_ot_x": ms[2],
    }


def raters(n_turns, low=5, high=30):
    out = []
    for _ in range(n_turns):
        n = int(rng.integers(low, high + 1))
        p = rng.dirichlet([2.0, 1.0, 1.2])
        out.append([LABELS[k] for k in rng.choice(3, size=n, p=p)])
    return out


def distribution(labels):
    return [labels.count(c) / len(labels) for c in LABELS]


def predictions(gold, noise=3.0):
    """Judge-like predictions that follow the gold distributions loosely."""
    return [list(rng.dirichlet(np.asarray(g) * noise + 0.3)) for g in gold]


cases = []
def case(name, rater_labels, pred, t):
    gold = [distribution(r) for r in rater_labels]
    cases.append({"name": name, "threshold": t, "raters": rater_labels,
                  "predicted": [[float(v) for v in p] for p in pred],
                  "expected": metrics(pred, gold, t)})

main_raters = raters(200)
main_pred = predictions([distribution(r) for r in main_raters])
case("random, 5-30 raters", main_raters, main_pred, 0.0)
case("random, threshold 0.4", main_raters, main_pred, 0.4)
two = [[p[0] / (p[0] + p[2]), 0.0, p[2] / (p[0] + p[2])] for p in main_pred]
case("a two-level judge (no T)", main_raters, two, 0.0)
tie_raters = [list("OOOOTTTTXX"), list("OOTTXX"), list("OTX"), list("TTXX"), list("OOXX"), list("X")] * 3
tie_pred = [[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5], [0.2, 0.4, 0.4], [0.0, 0.0, 1.0]] * 3
case("ties in gold and predicted", tie_raters, tie_pred, 0.0)
case("ties, threshold 0.5", tie_raters, tie_pred, 0.5)
case("never X predicted", main_raters[:50], [[0.6, 0.4, 0.0]] * 50, 0.0)
with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump(cases, f, indent=1)


# --- calibration -----------------------------------------------------------------------------
LOG_FLOOR = -69.0


def fit(pred, gold, labels):
    logq = np.array([[max(np.log(p[k]), LOG_FLOOR) if p[k] > 0 else LOG_FLOOR for k in labels] for p in pred])
    y = np.array([[g[k] for k in labels] for g in gold])

    def z(theta):
        return theta[0] * logq + np.concatenate([[0.0], theta[1:]])

    def loss(theta):
        zz = z(theta)
        lse = np.logaddexp.reduce(zz, axis=1)
        return float(np.mean(np.sum(y * (lse[:, None] - zz), axis=1)))

    def grad(theta):
        zz = z(theta)
        s = np.exp(zz - np.logaddexp.reduce(zz, axis=1)[:, None])
        dz = s * y.sum(axis=1)[:, None] - y
        g = [np.mean(np.sum(dz * logq, axis=1))] + [np.mean(dz[:, k]) for k in range(1, len(labels))]
        return np.array(g)

    theta0 = np.concatenate([[1.0], np.zeros(len(labels) - 1)])
    res = optimize.minimize(loss, theta0, jac=grad, method="BFGS", options={"gtol": 1e-12, "maxiter": 10000})
    theta = res.x

    def apply(p):
        l = np.array([max(np.log(p[k]), LOG_FLOOR) if p[k] > 0 else LOG_FLOOR for k in labels])
        zz = theta[0] * l + np.concatenate([[0.0], theta[1:]])
        s = np.exp(zz - np.logaddexp.reduce(zz))
        d = [0.0, 0.0, 0.0]
        for k, v in zip(labels, s):
            d[k] = float(v)
        return d

    return {"temperature": float(1 / theta[0]), "bias": [0.0] + [float(b) for b in theta[1:]],
            "before": loss(theta0), "after": loss(theta)}, apply


calibrations = []
for name, labels, make in [
    ("three labels, an over-confident judge", [0, 1, 2], lambda g: list(rng.dirichlet(np.asarray(g) * 40 + 0.05))),
    ("O and X only", [0, 2], None),
]:
    dev_r, test_r = raters(150), raters(100)
    dev_g = [distribution(r) for r in dev_r]
    test_g = [distribution(r) for r in test_r]
    if make is None:
        squash = lambda p: [p[0] / (p[0] + p[2]), 0.0, p[2] / (p[0] + p[2])]
        dev_p = [squash(p) for p in predictions(dev_g, 8.0)]
        test_p = [squash(p) for p in predictions(test_g, 8.0)]
    else:
        dev_p, test_p = [make(g) for g in dev_g], [make(g) for g in test_g]
    fitted, apply = fit(dev_p, dev_g, labels)
    calibrated = [apply(p) for p in test_p]
    calibrations.append({
        "name": name, "labels": labels,
        "dev_raters": dev_r, "dev_predicted": [[float(v) for v in p] for p in dev_p],
        "test_raters": test_r, "test_predicted": [[float(v) for v in p] for p in test_p],
        "fitted": fitted,
        "test_calibrated": calibrated,
        "expected_test_calibrated": metrics(calibrated, test_g, 0.0),
    })
with open(os.path.join(out, "calibration.json"), "w") as f:
    json.dump(calibrations, f, indent=1)


# --- the first case as items and judge results -----------------------------------------------
VALUE = {"O": 1.0, "T": 0.5, "X": 0.0}
items, judge, nomap = [], [], []
rubric = {"name": "fixture", "source": "fixture", "hash": "0",
          "aspects": [{"key": "breakdown", "human": ["breakdown"], "levels": [[0, 0.0], [1, 0.5], [2, 1.0]]}]}
rubric_nomap = {"name": "fixture", "source": "fixture", "hash": "1", "aspects": [{"key": "coherence", "human": ["breakdown"]}]}
prov = lambda r: {"hyoka": "fixture", "task": "judge", "rubric": r,
                  "models": [{"name": "fixture-judge", "sha256": "0", "arch": "llama"}], "dtype": "f32", "device": "cpu"}
for i, (r, p) in enumerate(zip(main_raters, main_pred)):
    dialogue, turn = 1500000000 + i // 10, 2 * (i % 10)
    iid = f"SYS{i // 100}/{dialogue}/{turn}"
    items.append({"id": iid, "context": [{"speaker": "U", "text": "こんにちは"}],
                  "response": {"speaker": "S", "text": f"応答{i}"}, "system": f"SYS{i // 100}",
                  "dialogue": str(dialogue), "human": {"breakdown": [VALUE[c] for c in r]}})
    # Levels 0/1/2 = X/T/O: score s has the probability of label 2 - s.
    dist = {str(s): float(p[2 - s]) for s in range(3)}
    best = max(range(3), key=lambda s: (dist[str(s)], -s))
    score = {"score": best, "expected": float(sum(s * dist[str(s)] for s in range(3))),
             "distribution": dist, "off_scale": 0.0}
    judge.append({"id": iid, "scores": {"breakdown": score}, "provenance": prov(rubric)})
    nomap.append({"id": iid, "scores": {"coherence": score}, "provenance": prov(rubric_nomap)})
for name, rows in [("items.jsonl", items), ("judge.jsonl", judge), ("judge-nomap.jsonl", nomap)]:
    with open(os.path.join(out, name), "w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
print(f"wrote {len(cases)} cases, {len(calibrations)} calibrations, {len(items)} items to {out}")
