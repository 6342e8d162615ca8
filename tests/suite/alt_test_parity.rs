//! The alternative annotator test against its authors' reference implementation (nitaytech/
//! AltTest's `alt_test`, scipy's one-sided t-test, their Benjamini–Yekutieli procedure), run by
//! scripts/fixtures/make_alt_test_fixtures.py into tests/fixtures/meta/alt_test.json: on random
//! rating sets with gaps and unscored items, and in `hyoka meta`'s summary of the DBDC fixture.

use crate::common;
use hyoka::meta::alt_test::{Alignment, AltTestOptions, alt_test};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

fn fixture() -> Value {
    let text = std::fs::read_to_string(common::fixtures().join("meta/alt_test.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn close(ours: Option<f64>, theirs: &Value, what: &str) {
    match (ours, theirs.as_f64()) {
        (None, None) => {}
        (Some(a), Some(b)) => assert!(
            (a - b).abs() <= 1e-9 * b.abs().max(1e-300) || (a - b).abs() < 1e-15,
            "{what}: {a} against {b}"
        ),
        (a, _) => panic!("{what}: {a:?} against {theirs}"),
    }
}

/// Ours against the reference's ω, ρ, each tested rater's p-value and the raters replaced.
fn agrees(outcome: &hyoka::meta::alt_test::AltTestOutcome, reference: &Value, what: &str) {
    close(
        outcome.winning_rate,
        &reference["winning_rate"],
        &format!("{what}: ω"),
    );
    close(
        outcome.advantage_probability,
        &reference["advantage_probability"],
        &format!("{what}: ρ"),
    );
    let p = reference["p"].as_object().unwrap();
    let tested: Vec<&str> = outcome.per_rater.iter().map(|r| r.rater.as_str()).collect();
    let mut theirs: Vec<&str> = p.keys().map(String::as_str).collect();
    let mut ours = tested.clone();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "{what}: the raters tested");
    for r in &outcome.per_rater {
        close(r.p, &p[&r.rater], &format!("{what}: p of {}", r.rater));
    }
    let mut replaced: Vec<&str> = (outcome.per_rater.iter())
        .filter(|r| r.replaced)
        .map(|r| r.rater.as_str())
        .collect();
    replaced.sort();
    let theirs: Vec<&str> = (reference["replaced"].as_array().unwrap().iter())
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(replaced, theirs, "{what}: the raters replaced");
}

#[test]
fn alt_test_matches_the_reference_implementation() {
    let fx = fixture();
    let mut decided = BTreeMap::new();
    for (n, case) in fx["cases"].as_array().unwrap().iter().enumerate() {
        let items = case["items"].as_array().unwrap();
        let judge: Vec<Option<f64>> = items.iter().map(|i| i["judge"].as_f64()).collect();
        let ratings: Vec<Vec<(&str, f64)>> = (items.iter())
            .map(|i| {
                (i["ratings"].as_array().unwrap().iter())
                    .map(|r| (r[0].as_str().unwrap(), r[1].as_f64().unwrap()))
                    .collect()
            })
            .collect();
        let options = AltTestOptions {
            epsilon: case["epsilon"].as_f64().unwrap(),
            alignment: Alignment::parse(case["alignment"].as_str().unwrap()).unwrap(),
            q: 0.05,
        };
        let outcome = alt_test(&judge, &ratings, &options);
        agrees(&outcome, &case["reference"], &format!("case {n}"));
        let w = outcome.winning_rate.map(|w| w >= 0.5);
        *decided.entry(format!("{w:?}")).or_insert(0) += 1;
    }
    // The cases reach every verdict: passed, failed, and not applicable (no rater with 30 items).
    assert_eq!(decided.len(), 3, "{decided:?}");
}

/// `hyoka meta` on the DBDC fixture: once as it is (its items name no raters: each slot is a
/// rater, said as a caution) and once with the slots named as rater ids.
#[test]
fn meta_reports_the_alt_test_of_the_judge() {
    let fx = fixture();
    let dir = common::fixtures().join("dbdc");
    let out = tempfile::tempdir().unwrap();
    let named = out.path().join("items-named.jsonl");
    let text = std::fs::read_to_string(dir.join("items.jsonl")).unwrap();
    let mut lines = String::new();
    for line in text.lines() {
        let mut item: Value = serde_json::from_str(line).unwrap();
        let n = item["human"]["breakdown"].as_array().unwrap().len();
        item["raters"] = (0..n).map(|s| Value::from(format!("#{s}"))).collect();
        lines.push_str(&format!("{item}\n"));
    }
    std::fs::write(&named, lines).unwrap();
    for (items, alignment, by_slot) in [
        (dir.join("items.jsonl"), "neg_rmse", true),
        (named.clone(), "accuracy", false),
    ] {
        let json = out.path().join(format!("summary-{alignment}.json"));
        let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .current_dir(&dir)
            .args(["meta", "--accept-unhashed", "--bootstrap", "0", "-i"])
            .arg(&items)
            .args(["-s", "judge.jsonl", "--alt-test-epsilon", "0.1"])
            .args([
                "--alt-test-alignment",
                &alignment.replace('_', "-"),
                "--json",
            ])
            .arg(&json)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains("## Can the judge replace a rater?"),
            "{stdout}"
        );
        let s: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let tests = s["alt_test"].as_array().unwrap();
        let e = (tests.iter())
            .find(|e| e["column"] == "judge argmax" && e["human"] == "breakdown")
            .unwrap_or_else(|| panic!("{tests:?}"));
        assert_eq!(e["judge_values"], "levels");
        assert_eq!(e["alignment"], alignment);
        assert_eq!(e["epsilon"], 0.1);
        let outcome: hyoka::meta::alt_test::AltTestOutcome =
            serde_json::from_value(e.clone()).unwrap();
        agrees(&outcome, &fx["dbdc"][alignment], alignment);
        let w = outcome.winning_rate.unwrap();
        assert_eq!(e["passed"], w >= 0.5);
        let slot_caution = (e["cautions"].as_array().unwrap().iter())
            .any(|c| c.as_str().unwrap().contains("name no raters"));
        assert_eq!(slot_caution, by_slot, "{}", e["cautions"]);
    }
}
