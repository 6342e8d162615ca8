//! Meta-evaluation against scipy.stats and numpy: fixtures from scripts/fixtures/make_meta_fixtures.py.

use crate::common;

use hyoka::meta::stats::Method;
use serde_json::Value;
use std::process::Command;

fn load(name: &str) -> Value {
    let path = common::fixtures().join("meta").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture exists"))
        .expect("fixture is JSON")
}

fn close_r(ours: f64, theirs: f64, what: &str) {
    assert!(
        (ours - theirs).abs() <= 1e-12,
        "{what}: r {ours} vs scipy {theirs}"
    );
}

/// p-values span hundreds of orders of magnitude: relative 1e-6, or below 1e-12 absolute.
fn close_p(ours: f64, theirs: f64, what: &str) {
    assert!(
        (ours - theirs).abs() <= 1e-12 + 1e-6 * theirs.abs(),
        "{what}: p {ours:e} vs scipy {theirs:e}"
    );
}

#[test]
fn coefficients_and_p_values_match_scipy() {
    let cases = load("stats.json");
    let cases = cases.as_array().expect("a list");
    assert!(cases.len() >= 14);
    for case in cases {
        let name = case["name"].as_str().expect("named");
        let v = |k: &str| -> Vec<f64> {
            case[k]
                .as_array()
                .expect("numbers")
                .iter()
                .map(|x| x.as_f64().expect("number"))
                .collect()
        };
        let (x, y) = (v("x"), v("y"));
        for method in Method::ALL {
            let ours = method.correlate(&x, &y);
            let what = format!("{name} / {}", method.name());
            match (&case[method.name()], ours) {
                (Value::Null, None) => {}
                (Value::Array(ref_), Some(c)) => {
                    close_r(c.r, ref_[0].as_f64().expect("r"), &what);
                    close_p(c.p, ref_[1].as_f64().expect("p"), &what);
                }
                (theirs, ours) => {
                    panic!("{what}: defined differently: scipy {theirs} vs ours {ours:?}")
                }
            }
        }
    }
}

fn run_meta(extra: &[&str]) -> Value {
    let dir = common::fixtures().join("meta");
    let out = tempfile::tempdir().expect("temp dir");
    let json = out.path().join("summary.json");
    let md = out.path().join("summary.md");
    // The reference script writes no input_sha256: its lines are another tool's.
    let mut args = vec![
        "meta",
        "--accept-unhashed",
        "-i",
        "items.jsonl",
        "-s",
        "judge.jsonl",
        "-s",
        "bertscore.jsonl",
        "--json",
    ];
    let json_s = json.to_string_lossy().into_owned();
    let md_s = md.to_string_lossy().into_owned();
    args.push(&json_s);
    args.extend(["--markdown", &md_s]);
    args.extend(extra);
    let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .current_dir(&dir)
        .args(&args)
        .output()
        .expect("hyoka runs");
    assert!(
        o.status.success(),
        "hyoka meta failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(&md).expect("markdown written");
    assert!(
        text.contains("| judge expected |"),
        "markdown has the method rows:\n{text}"
    );
    serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
        .expect("summary is JSON")
}

fn entry<'a>(summary: &'a Value, row: &str, human: &str, level: &str) -> &'a Value {
    summary["correlations"]
        .as_array()
        .expect("list")
        .iter()
        .find(|e| e["row"] == row && e["human"] == human && e["level"] == level)
        .unwrap_or_else(|| panic!("no cell {row} / {human} / {level}"))
}

#[test]
fn levels_agreement_matrix_and_combination_match_numpy_scipy() {
    let expected = load("expected.json");
    let summary = run_meta(&["--bootstrap", "200"]);
    assert!(
        (summary["combined"]["mean_b"].as_f64().expect("mean_b")
            - expected["mean_f"].as_f64().expect("mean_f"))
        .abs()
            < 1e-12
    );
    let mut checked = 0;
    for (key, want) in expected["columns"].as_object().expect("columns") {
        let (kind, _) = key.split_once('|').expect("kind|aspect");
        let human = want["human"].as_str().expect("human");
        let row = match kind {
            "bertscore F" => "BERTScore F".to_string(),
            k if k.starts_with("combined") => format!("{k} (w=10)"),
            k => k.to_string(),
        };
        for level in ["item", "system"] {
            let got = entry(&summary, &row, human, level);
            assert_eq!(got["n"], want[level]["n"], "{key} {level} n");
            for m in ["pearson", "spearman", "kendall"] {
                let what = format!("{key} {level} {m}");
                match (&want[level][m], &got[m]) {
                    (Value::Null, Value::Null) => {}
                    (Value::Array(w), g) if g.is_object() => {
                        close_r(
                            g["r"].as_f64().expect("r"),
                            w[0].as_f64().expect("r"),
                            &what,
                        );
                        close_p(
                            g["p"].as_f64().expect("p"),
                            w[1].as_f64().expect("p"),
                            &what,
                        );
                        checked += 1;
                    }
                    (w, g) => panic!("{what}: {w} vs {g}"),
                }
            }
        }
        let got = entry(&summary, &row, human, "dialogue");
        for m in ["pearson", "spearman", "kendall"] {
            let w = &want["dialogue"][m];
            close_r(
                got[m]["r"].as_f64().expect("r"),
                w[0].as_f64().expect("mean r"),
                &format!("{key} dialogue {m}"),
            );
            assert!(
                got[m]["p"].is_null(),
                "an average of coefficients has no p-value"
            );
            checked += 1;
        }
        // The dialogue with constant coherence ratings is left out, not counted as 0.
        if human == "coherence" {
            assert_eq!(
                got["n"].as_u64(),
                want["dialogue"]["spearman"][1].as_u64(),
                "{key}: dialogues with a defined correlation"
            );
        }
    }
    assert!(checked >= 90, "{checked} values compared");
    for h in summary["human"].as_array().expect("human") {
        let key = h["key"].as_str().expect("key");
        let want = &expected["agreement"][key];
        for (ours, theirs) in [
            ("agreement_spearman", "spearman"),
            ("agreement_pearson", "pearson"),
            ("mean", "mean"),
            ("std", "std"),
        ] {
            close_r(
                h[ours].as_f64().expect(ours),
                want[theirs].as_f64().expect(theirs),
                &format!("{key} {ours}"),
            );
        }
        assert_eq!(h["raters_used"], want["raters"]);
        assert_eq!(h["basis"], "ids");
    }
    close_r(
        summary["human_matrix"]["spearman"][0][1]
            .as_f64()
            .expect("matrix"),
        expected["human_matrix"].as_f64().expect("matrix"),
        "aspect matrix",
    );
}

#[test]
fn bootstrap_intervals_are_seeded_and_cover_the_estimate() {
    let a = run_meta(&["--bootstrap", "300", "--seed", "5"]);
    let b = run_meta(&["--bootstrap", "300", "--seed", "5"]);
    let c = run_meta(&["--bootstrap", "300", "--seed", "6"]);
    assert_eq!(
        a["correlations"], b["correlations"],
        "same seed, same intervals"
    );
    assert_ne!(
        a["correlations"], c["correlations"],
        "another seed, other intervals"
    );
    for e in a["correlations"].as_array().expect("list") {
        for m in ["pearson", "spearman", "kendall"] {
            let s = &e[m];
            if s.is_null() || s["ci"].is_null() {
                continue;
            }
            let (lo, hi, r) = (
                s["ci"][0].as_f64().expect("lo"),
                s["ci"][1].as_f64().expect("hi"),
                s["r"].as_f64().expect("r"),
            );
            assert!(lo <= hi && lo >= -1.0 && hi <= 1.0, "{e}");
            if e["level"] == "item" {
                assert!(
                    lo <= r && r <= hi,
                    "item-level interval covers the estimate: {e}"
                );
            }
        }
    }
    let item = entry(&a, "judge expected", "overall", "item");
    let ci = &item["spearman"]["ci"];
    assert!(
        ci[1].as_f64().expect("hi") - ci[0].as_f64().expect("lo") > 0.01,
        "a real interval: {ci}"
    );
}

#[test]
fn fit_w_reports_held_out_figures() {
    let s = run_meta(&["--bootstrap", "0", "--fit-w"]);
    let fits = s["fit_w"].as_array().expect("fit_w");
    assert_eq!(fits.len(), 4, "judge argmax/expected × coherence/overall");
    for f in fits {
        let w = f["w"].as_f64().expect("w");
        assert!(hyoka::meta::W_GRID.contains(&w));
        assert!(
            f["dev_items"].as_u64().expect("dev") > 20
                && f["test_items"].as_u64().expect("test") > 20,
            "{f}"
        );
        assert!(
            f["test_combined"].is_number()
                && f["test_judge"].is_number()
                && f["test_bertscore"].is_number()
        );
    }
    assert!(
        s["correlations"]
            .as_array()
            .expect("list")
            .iter()
            .all(|e| e["pearson"]["ci"].is_null()),
        "--bootstrap 0: no intervals"
    );
}

#[test]
fn bad_results_line_names_file_line_and_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let items = common::fixtures().join("meta").join("items.jsonl");
    let bad = dir.path().join("bad.jsonl");
    let good = std::fs::read_to_string(common::fixtures().join("meta").join("judge.jsonl"))
        .expect("fixture");
    let mut lines: Vec<String> = good.lines().take(3).map(String::from).collect();
    // The fourth item's line (a repeat of an earlier item's would be refused for that instead).
    let fourth = good.lines().nth(3).expect("fixture has 4 lines");
    lines.push(fourth.replace("\"expected\":", "\"expectd\":"));
    std::fs::write(&bad, lines.join("\n")).expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args([
            "meta",
            "-i",
            &items.to_string_lossy(),
            "-s",
            &bad.to_string_lossy(),
        ])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(3), "invalid input → exit 3");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.jsonl:4") && err.contains("expected"),
        "{err}"
    );
}
