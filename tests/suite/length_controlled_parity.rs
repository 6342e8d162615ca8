//! AlpacaEval 2's length-controlled win rate against AlpacaEval itself (fixture:
//! scripts/fixtures/make_length_controlled_fixtures.py): the L1 logistic regression with its
//! penalty chosen by cross-validation against `fit_LogisticRegressionCV`, and whole baseline
//! runs summarised by `hyoka meta`'s pairwise path against `get_length_controlled_winrate`.

use crate::common;
use hyoka::meta::logistic::{Row, cross_validated, default_penalties};
use hyoka::meta::pairwise::{PairwiseOptions, join, summarize};
use hyoka::results::Record;
use hyoka::results::verdicts::{PairVerdict, VerdictProbs};
use serde_json::Value;

pub(crate) fn fixture() -> Value {
    let path = common::fixtures().join("meta/length_controlled.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn close(ours: f64, theirs: f64, tolerance: f64, what: &str) {
    assert!(
        (ours - theirs).abs() <= tolerance * (1.0 + theirs.abs()),
        "{what}: hyoka {ours}, AlpacaEval {theirs}"
    );
}

#[test]
fn cross_validated_l1_fit_matches_alpaca_evals() {
    for (n, case) in fixture()["logistic"].as_array().unwrap().iter().enumerate() {
        let rows: Vec<Row> = (case["rows"].as_array().unwrap().iter())
            .map(|r| std::array::from_fn(|k| r[k].as_f64().unwrap()))
            .collect();
        let targets: Vec<f64> = (case["targets"].as_array().unwrap().iter())
            .map(|t| t.as_f64().unwrap())
            .collect();
        let fit = cross_validated(&rows, &targets, 5, &default_penalties()).unwrap();
        close(
            fit.penalty,
            case["penalty"].as_f64().unwrap(),
            1e-12,
            &format!("case {n}: C"),
        );
        for (k, theirs) in case["coefficients"].as_array().unwrap().iter().enumerate() {
            close(
                fit.coefficients[k],
                theirs.as_f64().unwrap(),
                1e-6,
                &format!("case {n}: coefficient {k}"),
            );
        }
    }
}

fn probs(v: &Value) -> VerdictProbs {
    VerdictProbs {
        first: v["first"].as_f64().unwrap(),
        second: v["second"].as_f64().unwrap(),
        tie: v["tie"].as_f64().unwrap(),
        off_scale: 0.0,
    }
}

/// A fixture run as items and pairwise results of `hyoka compare --baseline base` (each
/// system first, the baseline second).
pub(crate) fn baseline_run(run: &Value) -> (Vec<hyoka::data::Item>, Vec<(usize, Record)>) {
    let context_id = |c: u64| format!("c{c:02}");
    let mut items = Vec::new();
    for (system, texts) in run["responses"].as_object().unwrap() {
        for (c, text) in texts.as_array().unwrap().iter().enumerate() {
            let id = context_id(c as u64);
            items.push(crate::pairwise::item(
                &id,
                "質問",
                system,
                text.as_str().unwrap(),
            ));
        }
    }
    let mut settings = serde_json::Map::new();
    settings.insert("pairing".to_string(), Value::from("baseline:base"));
    let provenance = crate::pairwise::compare_provenance(settings);
    let records = (run["pairs"].as_array().unwrap().iter().enumerate())
        .map(|(n, p)| {
            let context = context_id(p["context"].as_u64().unwrap());
            let verdict = PairVerdict {
                first_shown_first: probs(&p["first_shown_first"]),
                second_shown_first: probs(&p["second_shown_first"]),
            };
            let system = p["system"].as_str().unwrap();
            let record =
                crate::pairwise::compare_record(&context, system, "base", verdict, &provenance);
            (n + 1, record)
        })
        .collect();
    (items, records)
}

#[test]
fn length_controlled_win_rates_match_alpaca_evals() {
    for run in fixture()["runs"].as_array().unwrap() {
        let (items, records) = baseline_run(run);
        let frame = join(&items, records, std::path::Path::new("pairs.jsonl")).unwrap();
        let opts = PairwiseOptions {
            bootstrap: 200,
            ..PairwiseOptions::default()
        };
        let summary = summarize(&frame, &opts);
        let lc = summary.aspects[0].length_controlled.as_ref().unwrap();
        assert_eq!(lc.baseline, "base");
        let systems = run["systems"].as_array().unwrap();
        assert_eq!(lc.difficulty_from_other_systems, systems.len() > 1);
        assert_eq!(lc.systems.len(), systems.len());
        for rate in &lc.systems {
            let expected = &run["expected"][&rate.system];
            let what = |k: &str| format!("{}: {k}", rate.system);
            assert_eq!(rate.pairs as u64, run["contexts"].as_u64().unwrap());
            assert!(rate.error.is_none(), "{:?}", rate.error);
            close(
                rate.win_rate,
                expected["win_rate"].as_f64().unwrap(),
                1e-12,
                &what("win rate"),
            );
            close(
                rate.length_controlled_win_rate.unwrap(),
                expected["length_controlled_win_rate"].as_f64().unwrap(),
                1e-6,
                &what("length-controlled win rate"),
            );
            close(
                rate.penalty.unwrap(),
                expected["penalty"].as_f64().unwrap(),
                1e-12,
                &what("C"),
            );
            let c = rate.coefficients.as_ref().unwrap();
            for (ours, key) in [
                (c.length, "length"),
                (c.difficulty, "difficulty"),
                (c.intercept, "intercept"),
            ] {
                close(
                    ours,
                    expected["coefficients"][key].as_f64().unwrap(),
                    1e-6,
                    &what(key),
                );
            }
            let [lo, hi] = rate.interval.unwrap();
            let controlled = rate.length_controlled_win_rate.unwrap();
            assert!(
                lo <= controlled && controlled <= hi,
                "{}: {lo} {controlled} {hi}",
                rate.system
            );
            // AlpacaEval's warning: 68.6 % raw against 2.8 % controlled for the verbose system.
            let raw = 100.0 * rate.win_rate;
            let far = 100.0 * controlled < (raw - raw / 4.0).min(raw - 10.0)
                || 100.0 * controlled > (raw + (100.0 - raw) / 4.0).max(raw + 10.0);
            assert_eq!(rate.extreme_change, far, "{}", rate.system);
        }
        let md = hyoka::meta::pairwise::markdown(&summary);
        assert!(
            md.contains("Length-controlled win rates against base"),
            "{md}"
        );
    }
}

/// A run that compared every two systems has no baseline: no length-controlled rates.
#[test]
fn runs_without_a_baseline_have_no_length_controlled_rates() {
    let (items, records) = crate::pairwise::hand_made_verdicts();
    let frame = join(&items, records, std::path::Path::new("pairs.jsonl")).unwrap();
    let summary = summarize(&frame, &PairwiseOptions::default());
    assert!(summary.aspects[0].length_controlled.is_none());
}
