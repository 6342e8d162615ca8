//! Chance-corrected agreement against scikit-learn's cohen_kappa_score and the krippendorff
//! package (tests/fixtures/meta/chance.json, from scripts/fixtures/make_chance_fixtures.py): on
//! random labels and ratings with gaps, and in `hyoka meta`'s summary of the DBDC fixture.

use crate::common;
use hyoka::meta::chance::{Metric, Weights, cohen_kappa, krippendorff_alpha};
use serde_json::Value;
use std::process::Command;

fn fixture() -> Value {
    let text = std::fs::read_to_string(common::fixtures().join("meta/chance.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn close(ours: Option<f64>, theirs: &Value, what: &str) {
    match (ours, theirs.as_f64()) {
        (None, None) => {}
        (Some(a), Some(b)) => assert!((a - b).abs() < 1e-12, "{what}: {a} against {b}"),
        (a, _) => panic!("{what}: {a:?} against {theirs}"),
    }
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn kappa_matches_scikit_learn() {
    let fx = fixture();
    for (n, case) in fx["kappa"].as_array().unwrap().iter().enumerate() {
        let (a, b) = (numbers(&case["a"]), numbers(&case["b"]));
        close(
            cohen_kappa(&a, &b, Weights::None),
            &case["kappa"],
            &format!("case {n}"),
        );
        close(
            cohen_kappa(&a, &b, Weights::Quadratic),
            &case["quadratic"],
            &format!("case {n}, quadratic"),
        );
    }
}

#[test]
fn alpha_matches_the_krippendorff_package() {
    let fx = fixture();
    for (n, case) in fx["alpha"].as_array().unwrap().iter().enumerate() {
        // Rows are raters, columns units; null: not rated.
        let rows: Vec<Vec<Option<f64>>> = (case["rows"].as_array().unwrap().iter())
            .map(|r| r.as_array().unwrap().iter().map(Value::as_f64).collect())
            .collect();
        let units: Vec<Vec<f64>> = (0..rows[0].len())
            .map(|u| rows.iter().filter_map(|r| r[u]).collect())
            .collect();
        close(
            krippendorff_alpha(&units, Metric::Nominal),
            &case["nominal"],
            &format!("case {n}, nominal"),
        );
        close(
            krippendorff_alpha(&units, Metric::Interval),
            &case["interval"],
            &format!("case {n}, interval"),
        );
    }
}

#[test]
fn meta_reports_kappa_and_alpha_of_the_judge_and_raters() {
    let expected = &fixture()["dbdc"];
    let dir = common::fixtures().join("dbdc");
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("summary.json");
    let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .current_dir(&dir)
        .args([
            "meta",
            "--accept-unhashed",
            "--bootstrap",
            "0",
            "-i",
            "items.jsonl",
        ])
        .args(["-s", "judge.jsonl", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("## Chance-corrected agreement"), "{stdout}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let human = &s["human"][0];
    close(
        human["alpha_nominal"].as_f64(),
        &expected["alpha_nominal"],
        "raters' α nominal",
    );
    close(
        human["alpha_interval"].as_f64(),
        &expected["alpha_interval"],
        "raters' α interval",
    );
    let chance = s["chance"].as_array().unwrap();
    let e = chance
        .iter()
        .find(|e| e["column"] == "judge argmax" && e["human"] == "breakdown")
        .unwrap_or_else(|| panic!("{chance:?}"));
    assert_eq!(e["judge_values"], "levels");
    for (ours, theirs) in [
        ("kappa", "kappa_mean"),
        ("weighted_kappa", "quadratic_mean"),
        ("kappa_majority", "kappa_majority"),
        ("weighted_kappa_majority", "quadratic_majority"),
        ("alpha_nominal_with_judge", "alpha_nominal_with_judge"),
        ("alpha_interval_with_judge", "alpha_interval_with_judge"),
    ] {
        close(e[ours].as_f64(), &expected[theirs], ours);
    }
    assert_eq!(e["raters"], expected["raters"]);
    assert_eq!(e["majority_items"], expected["majority_items"]);
}
