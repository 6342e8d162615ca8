//! Length and language biases against pingouin's partial_corr and scipy's spearmanr, binomtest
//! and minimize (tests/fixtures/meta/bias.json, from scripts/fixtures/make_bias_fixtures.py): on
//! random columns with ties, in `hyoka meta`'s summary of the DBDC fixture, the style-controlled
//! Bradley–Terry fit on random outcomes with covariates, and the pairwise flip rate and
//! longer-response share on hand-made verdicts.

use crate::common;
use hyoka::meta::bias::{japanese_share, partial_spearman, response_length};
use hyoka::meta::pairwise::biases::binomial_test_half;
use serde_json::Value;
use std::process::Command;

fn fixture() -> Value {
    let text = std::fs::read_to_string(common::fixtures().join("meta/bias.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn numbers(v: &Value) -> Vec<f64> {
    (v.as_array().unwrap().iter())
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// Equal to 1e-12, or relatively to 1e-9 (p-values far below 1).
fn close(ours: f64, theirs: &Value, what: &str) {
    let theirs = theirs
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {theirs}"));
    let tolerance = 1e-12f64.max(theirs.abs() * 1e-9);
    assert!(
        (ours - theirs).abs() <= tolerance,
        "{what}: {ours} against {theirs}"
    );
}

#[test]
fn partial_spearman_matches_pingouin() {
    for (n, case) in fixture()["partial"].as_array().unwrap().iter().enumerate() {
        let (x, y, z) = (
            numbers(&case["x"]),
            numbers(&case["y"]),
            numbers(&case["z"]),
        );
        let got = partial_spearman(&x, &y, &z).unwrap_or_else(|| panic!("case {n}"));
        close(got.r, &case["partial"]["r"], &format!("case {n}: r"));
        close(got.p, &case["partial"]["p"], &format!("case {n}: p"));
    }
    // Undefined, never 0: too few units, or a constant column.
    assert!(partial_spearman(&[1.0, 2.0, 3.0], &[1.0, 3.0, 2.0], &[1.0, 1.0, 2.0]).is_none());
    let constant = [1.0; 6];
    let ramp = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    assert!(partial_spearman(&constant, &ramp, &ramp).is_none());
}

/// Davidson's model with covariates, maximised by Newton's method here and by scipy's BFGS and
/// Nelder–Mead in the fixture: the same strengths, tie parameter and coefficients.
#[test]
fn style_controlled_fit_matches_scipy() {
    use hyoka::meta::pairwise::davidson::{Outcome, fit_controlled};
    for (n, case) in fixture()["controlled"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let outcomes: Vec<Outcome> = (case["outcomes"].as_array().unwrap().iter())
            .map(|o| Outcome {
                i: o[0].as_u64().unwrap() as usize,
                j: o[1].as_u64().unwrap() as usize,
                wins_i: o[2].as_f64().unwrap(),
                wins_j: o[3].as_f64().unwrap(),
                ties: o[4].as_f64().unwrap(),
            })
            .collect();
        let covariates: Vec<Vec<f64>> = (case["covariates"].as_array().unwrap().iter())
            .map(numbers)
            .collect();
        let systems = case["systems"].as_u64().unwrap() as usize;
        let fit = fit_controlled(systems, &outcomes, &covariates).unwrap();
        let want = &case["fit"];
        let pairs = (fit.strengths.iter().zip(numbers(&want["strengths"])))
            .chain(fit.coefficients.iter().zip(numbers(&want["coefficients"])))
            .chain([(&fit.tie, want["tie"].as_f64().unwrap())]);
        for (ours, theirs) in pairs {
            assert!(
                (ours - theirs).abs() < 1e-6,
                "case {n}: {ours} against {theirs}: {fit:?}"
            );
        }
    }
}

#[test]
fn binomial_test_matches_scipy() {
    for case in fixture()["binomial"].as_array().unwrap() {
        let (k, n) = (case["k"].as_u64().unwrap(), case["n"].as_u64().unwrap());
        let ours = binomial_test_half(k as usize, n as usize);
        close(ours, &case["p"], &format!("binomtest({k}, {n})"));
    }
}

#[test]
fn script_shares_and_lengths_match_unicode_names() {
    for case in fixture()["script"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(japanese_share(text), case["share"].as_f64(), "{text}");
        assert_eq!(
            response_length(text) as u64,
            case["length"].as_u64().unwrap(),
            "{text}"
        );
    }
}

#[test]
fn meta_reports_length_bias_and_script_of_the_dbdc_fixture() {
    let expected = &fixture()["dbdc"];
    let dir = common::fixtures().join("dbdc");
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("summary.json");
    let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .current_dir(&dir)
        .args(["meta", "--accept-unhashed", "--bootstrap", "0"])
        .args(["-i", "items.jsonl", "-s", "judge.jsonl", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("## Length bias"), "{stdout}");
    assert!(stdout.contains("## Language of the responses"), "{stdout}");
    assert!(!stdout.contains("**Warning:**"), "{stdout}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let biases = s["length_bias"].as_array().unwrap();
    let b = (biases.iter())
        .find(|b| b["column"] == "judge expected")
        .unwrap_or_else(|| panic!("{biases:?}"));
    assert_eq!(b["items"], expected["items"]);
    for key in ["r", "p"] {
        close(
            b["with_length"][key].as_f64().unwrap(),
            &expected["with_length"][key],
            &format!("ρ with length, {key}"),
        );
    }
    let h = &b["human"][0];
    assert_eq!(
        (&h["human"], &h["items"]),
        (&"breakdown".into(), &expected["rated"])
    );
    for (ours, theirs) in [
        ("spearman", "spearman"),
        ("partial", "partial"),
        ("human_with_length", "human_with_length"),
    ] {
        for key in ["r", "p"] {
            close(
                h[ours][key].as_f64().unwrap(),
                &expected[theirs][key],
                &format!("{ours}, {key}"),
            );
        }
    }
    let script = &s["script"];
    assert_eq!(script["with_letters"], expected["with_letters"]);
    assert_eq!(script["mostly_japanese"], expected["mostly_japanese"]);
    close(
        script["mean_japanese_share"].as_f64().unwrap(),
        &expected["mean_japanese_share"],
        "mean share",
    );
    assert_eq!(script["english_scorers"], serde_json::json!([]));
}

/// The hand-made verdicts (tests/suite/pairwise.rs) with responses of different lengths: in c1
/// the longer response (a) wins in both orders; in c2 each order prefers the response shown
/// first, a flip, and the averaged verdict is a tie (not a decided pair).
#[test]
fn pairwise_flip_rate_and_longer_wins_count_as_by_hand() {
    use hyoka::meta::pairwise::{PairwiseOptions, join, summarize};
    let (mut items, records) = crate::pairwise::hand_made_verdicts();
    crate::pairwise::with_different_lengths(&mut items);
    let frame = join(&items, records, std::path::Path::new("pairs.jsonl")).unwrap();
    let opts = PairwiseOptions {
        bootstrap: 0,
        ..PairwiseOptions::default()
    };
    let a = &summarize(&frame, &opts).aspects[0];
    assert_eq!(a.flip_rate, 0.5);
    let l = &a.longer_wins;
    assert_eq!(
        (l.decided, l.longer_won, l.share, l.p),
        (1, 1, Some(1.0), Some(1.0))
    );
    let md = hyoka::meta::pairwise::markdown(&summarize(&frame, &opts));
    assert!(md.contains("flip rate 0.500"), "{md}");
    assert!(md.contains("the longer response wins 1 of 1"), "{md}");
}
