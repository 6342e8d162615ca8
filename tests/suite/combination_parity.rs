//! The combination of every score column against scikit-learn's RidgeCV and scipy's spearmanr
//! (tests/fixtures/meta/combination.json, from scripts/fixtures/make_combination_fixtures.py):
//! the ridge fit and its leave-one-out choice of penalty on random correlated columns, and
//! `hyoka meta --fit-w`'s combination of the meta fixture rebuilt independently (the same
//! development half, standardisation, fit and held-out Spearman, and the best single column).

use crate::common;
use hyoka::meta::ridge::{ALPHAS, ridge_loo};
use serde_json::Value;
use std::process::Command;

fn fixture() -> Value {
    let text = std::fs::read_to_string(common::fixtures().join("meta/combination.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn numbers(v: &Value) -> Vec<f64> {
    (v.as_array().unwrap().iter())
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// Equal to 1e-9, or relatively to 1e-9.
fn close(ours: f64, theirs: f64, what: &str) {
    let tolerance = 1e-9f64.max(theirs.abs() * 1e-9);
    assert!(
        (ours - theirs).abs() <= tolerance,
        "{what}: {ours} against {theirs}"
    );
}

#[test]
fn ridge_matches_scikit_learn_ridge_cv() {
    for (n, case) in fixture()["ridge"].as_array().unwrap().iter().enumerate() {
        let x: Vec<Vec<f64>> = case["x"].as_array().unwrap().iter().map(numbers).collect();
        let y = numbers(&case["y"]);
        let fit = ridge_loo(&x, &y, &ALPHAS).unwrap();
        let want = &case["fit"];
        assert_eq!(fit.alpha, want["alpha"].as_f64().unwrap(), "case {n}");
        for (k, (ours, theirs)) in (fit.coefficients.iter())
            .zip(numbers(&want["coefficients"]))
            .enumerate()
        {
            close(*ours, theirs, &format!("case {n}, coefficient {k}"));
        }
        close(
            fit.intercept,
            want["intercept"].as_f64().unwrap(),
            "intercept",
        );
        close(
            fit.loo_mse,
            want["loo_mse"].as_f64().unwrap(),
            "leave-one-out error",
        );
    }
}

#[test]
fn meta_combines_every_column_as_rebuilt_independently() {
    let dir = common::fixtures().join("meta");
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("summary.json");
    let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .current_dir(&dir)
        .args(["meta", "--accept-unhashed", "--bootstrap", "0", "--fit-w"])
        .args([
            "-i",
            "items.jsonl",
            "-s",
            "judge.jsonl",
            "-s",
            "bertscore.jsonl",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("## A combination of every score column"),
        "{stdout}"
    );
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ours = s["combination"].as_array().unwrap();
    let want = fixture()["meta"].as_array().unwrap().clone();
    assert_eq!(ours.len(), want.len(), "{ours:?}");
    for w in &want {
        let human = w["human"].as_str().unwrap();
        let e = (ours.iter())
            .find(|e| e["human"] == human)
            .unwrap_or_else(|| panic!("{human}: {ours:?}"));
        for key in ["alpha", "dev_items", "test_items"] {
            assert_eq!(e[key], w[key], "{human}: {key}");
        }
        // Coefficients by column name (the column order is each side's own).
        let names: Vec<&str> = (e["columns"].as_array().unwrap().iter())
            .map(|c| c.as_str().unwrap())
            .collect();
        let mut want_names: Vec<&str> = (w["columns"].as_array().unwrap().iter())
            .map(|c| c.as_str().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        want_names.sort_unstable();
        assert_eq!(sorted, want_names, "{human}");
        for (name, coefficient) in names.iter().zip(numbers(&e["coefficients"])) {
            let at = (w["columns"].as_array().unwrap().iter())
                .position(|c| c == name)
                .unwrap();
            let theirs = numbers(&w["coefficients"])[at];
            close(coefficient, theirs, &format!("{human}: {name}"));
        }
        close(
            e["intercept"].as_f64().unwrap(),
            w["intercept"].as_f64().unwrap(),
            "intercept",
        );
        for key in ["r", "p"] {
            close(
                e["test"][key].as_f64().unwrap(),
                w["test"][key].as_f64().unwrap(),
                &format!("{human}: held-out {key}"),
            );
            close(
                e["best_single"]["test"][key].as_f64().unwrap(),
                w["best_single"]["test"][key].as_f64().unwrap(),
                &format!("{human}: best single held-out {key}"),
            );
        }
        assert_eq!(e["best_single"]["column"], w["best_single"]["column"]);
        let beats = e["test"]["r"].as_f64() > e["best_single"]["test"]["r"].as_f64();
        assert_eq!(e["beats_best_single"], beats, "{human}");
    }
}
