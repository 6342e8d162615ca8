//! Breakdown detection with the DBDC challenge's metrics against an independent reference:
//! scipy's jensenshannon (base 2, squared), numpy and scipy.optimize, in fixtures written by
//! scripts/fixtures/make_dbdc_fixtures.py; `hyoka meta` and `hyoka export dbdc3` on the same turns.

use crate::common;

use hyoka::data::dbdc3;
use hyoka::meta::breakdown::{
    BreakdownMetrics, Distribution, LevelLabels, evaluate, raters_distribution,
};
use hyoka::meta::calibrate::fit;
use hyoka::meta::{Bootstrap, BreakdownOptions, Frame, MetaOptions, Predictor, Summary, TurnSet};
use serde_json::Value;

fn load(name: &str) -> Value {
    let path = common::fixtures().join("dbdc").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture exists"))
        .expect("fixture is JSON")
}

fn gold(raters: &Value) -> Vec<Distribution> {
    raters
        .as_array()
        .expect("turns")
        .iter()
        .map(|labels| {
            let ratings: Vec<f64> = labels
                .as_array()
                .expect("labels")
                .iter()
                .map(|l| match l.as_str().expect("a label") {
                    "O" => dbdc3::O,
                    "T" => dbdc3::T,
                    "X" => dbdc3::X,
                    other => panic!("label {other}"),
                })
                .collect();
            raters_distribution(&ratings).expect("labels")
        })
        .collect()
}

fn distributions(v: &Value) -> Vec<Distribution> {
    v.as_array()
        .expect("turns")
        .iter()
        .map(|d| {
            let d: Vec<f64> = d
                .as_array()
                .expect("three")
                .iter()
                .map(|x| x.as_f64().expect("a probability"))
                .collect();
            [d[0], d[1], d[2]]
        })
        .collect()
}

/// Every figure within `tol`; the label counts exactly.
fn check(ours: &BreakdownMetrics, expected: &Value, tol: f64, what: &str) {
    let ours_json = serde_json::to_value(ours).expect("metrics serialise");
    let expected = expected.as_object().expect("metrics");
    assert_eq!(
        ours_json.as_object().expect("metrics").len(),
        expected.len(),
        "{what}: fields"
    );
    for (k, want) in expected {
        let got = &ours_json[k];
        if let Some(want) = want.as_f64() {
            let got = got
                .as_f64()
                .unwrap_or_else(|| panic!("{what}: {k} missing"));
            assert!(
                (got - want).abs() <= tol,
                "{what}: {k} = {got}, reference {want}"
            );
        } else {
            assert_eq!(got, want, "{what}: {k}");
        }
    }
}

#[test]
fn metrics_match_the_reference() {
    let cases = load("cases.json");
    let cases = cases.as_array().expect("cases");
    assert!(cases.len() >= 6);
    for case in cases {
        let name = case["name"].as_str().expect("named");
        let gold = gold(&case["raters"]);
        let predicted = distributions(&case["predicted"]);
        let threshold = case["threshold"].as_f64().expect("threshold");
        let ours = evaluate(&predicted, &gold, threshold).expect("turns");
        check(&ours, &case["expected"], 1e-9, name);
    }
}

#[test]
fn calibration_finds_scipys_optimum() {
    for c in load("calibration.json").as_array().expect("calibrations") {
        let name = c["name"].as_str().expect("named");
        let labels: Vec<usize> = c["labels"]
            .as_array()
            .expect("labels")
            .iter()
            .map(|l| l.as_u64().expect("an index") as usize)
            .collect();
        let fitted = fit(
            &distributions(&c["dev_predicted"]),
            &gold(&c["dev_raters"]),
            &labels,
        )
        .expect("fitted");
        let want = &c["fitted"];
        let close = |got: f64, want: f64, tol: f64, what: &str| {
            assert!(
                (got - want).abs() <= tol * (1.0 + want.abs()),
                "{name}: {what} = {got}, scipy {want}"
            );
        };
        close(
            fitted.temperature,
            want["temperature"].as_f64().unwrap(),
            1e-6,
            "temperature",
        );
        for (k, b) in fitted.bias.iter().enumerate() {
            close(*b, want["bias"][k].as_f64().unwrap(), 1e-6, "bias");
        }
        close(
            fitted.dev_cross_entropy_before,
            want["before"].as_f64().unwrap(),
            1e-12,
            "loss before",
        );
        close(
            fitted.dev_cross_entropy_after,
            want["after"].as_f64().unwrap(),
            1e-10,
            "loss after",
        );
        let test_predicted = distributions(&c["test_predicted"]);
        let calibrated: Vec<Distribution> =
            test_predicted.iter().map(|q| fitted.apply(q)).collect();
        for (ours, theirs) in calibrated.iter().zip(distributions(&c["test_calibrated"])) {
            for k in 0..3 {
                close(ours[k], theirs[k], 1e-6, "calibrated probability");
            }
        }
        let metrics = evaluate(&calibrated, &gold(&c["test_raters"]), 0.0).expect("turns");
        check(&metrics, &c["expected_test_calibrated"], 1e-6, name);
    }
}

fn options(levels: Vec<(String, LevelLabels)>, calibrate: bool) -> MetaOptions {
    MetaOptions {
        w: None,
        combine_with: "F".into(),
        fit_w: false,
        bootstrap: Bootstrap {
            resamples: 0,
            seed: 0,
            confidence: 0.95,
        },
        breakdown: BreakdownOptions {
            threshold: 0.0,
            calibrate,
            levels,
            seed: 0,
        },
        alt_test: Default::default(),
    }
}

fn summary(judge: &str, opts: &MetaOptions) -> Summary {
    let dir = common::fixtures().join("dbdc");
    let items = hyoka::data::read_items(&dir.join("items.jsonl"), false)
        .expect("items")
        .items;
    let mut frame = Frame::new(items);
    frame.add_results(&dir.join(judge), None).expect("results");
    Summary::compute(&mut frame, opts).expect("summary")
}

#[test]
fn meta_scores_a_mapped_judge_aspect_with_the_challenges_metrics() {
    let expected = &load("cases.json")[0]["expected"];
    // The rubric's own level map (from the results' provenance).
    let s = summary("judge.jsonl", &options(Vec::new(), true));
    assert_eq!(s.breakdown.len(), 1);
    let e = &s.breakdown[0];
    assert_eq!(
        (e.column.as_str(), e.levels.as_str()),
        ("judge · breakdown", "0=X,1=T,2=O")
    );
    let row = |p: Predictor, t: TurnSet| {
        e.rows
            .iter()
            .find(|r| r.predictor == p && r.turns == t)
            .unwrap_or_else(|| panic!("{p:?} {t:?}"))
    };
    check(
        &row(Predictor::Judge, TurnSet::All).metrics,
        expected,
        1e-9,
        "meta, judge, all",
    );
    assert_eq!(e.dev_turns + e.held_out_turns, 200);
    assert!(
        e.dev_turns >= 60 && e.held_out_turns >= 60,
        "{} / {}",
        e.dev_turns,
        e.held_out_turns
    );
    // The prior is the development half's mean, the same for every turn.
    let prior = e.prior.expect("a prior");
    assert!((prior.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    let held_out = row(Predictor::Judge, TurnSet::HeldOut).metrics.turns;
    assert_eq!(held_out, e.held_out_turns);
    assert_eq!(
        row(Predictor::Calibrated, TurnSet::HeldOut).metrics.turns,
        held_out
    );
    assert_eq!(
        row(Predictor::Prior, TurnSet::HeldOut).metrics.turns,
        held_out
    );
    assert!(e.calibration.is_some());
    let md = s.markdown();
    assert!(
        md.contains("## Breakdown detection (DBDC metrics): judge · breakdown against breakdown")
    );
    assert!(md.contains(&format!("{:.4}", expected["jsd_o_t_x"].as_f64().unwrap())));

    // A rubric without a map: none, unless --breakdown-levels gives one for the aspect.
    let s = summary("judge-nomap.jsonl", &options(Vec::new(), false));
    assert!(s.breakdown.is_empty());
    let map = vec![(
        "coherence".to_string(),
        LevelLabels::parse("2=O,1=T,0=X").unwrap(),
    )];
    let s = summary("judge-nomap.jsonl", &options(map, false));
    assert_eq!(s.breakdown.len(), 1);
    assert_eq!(
        s.breakdown[0].rows.len(),
        2,
        "judge and prior over all turns"
    );
    check(
        &s.breakdown[0].rows[0].metrics,
        expected,
        1e-9,
        "meta, --breakdown-levels",
    );
}

#[test]
fn export_writes_the_challenges_run_format() {
    let dir = common::fixtures().join("dbdc");
    let out = tempfile::tempdir().unwrap();
    let written =
        hyoka::report::dbdc3::export(&dir.join("judge.jsonl"), out.path(), None, None).unwrap();
    assert_eq!((written.dialogues, written.turns), (20, 200));
    let predicted = distributions(&load("cases.json")[0]["predicted"]);
    // Turn i of the fixture: system SYS{i/100}, dialogue 1500000000 + i/10, turn index 2·(i%10).
    for (i, p) in predicted.iter().enumerate() {
        let path = out
            .path()
            .join(format!("SYS{}", i / 100))
            .join(format!("{}.labels.json", 1_500_000_000 + i / 10));
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(doc["dialogue-id"], format!("{}", 1_500_000_000 + i / 10));
        let turn = &doc["turns"][i % 10];
        assert_eq!(turn["turn-index"], 2 * (i % 10));
        let label = &turn["labels"][0];
        // serde_json's float parsing is not always correctly rounded: the last bit may move.
        for (k, name) in ["prob-O", "prob-T", "prob-X"].iter().enumerate() {
            let got = label[name].as_f64().unwrap();
            assert!(
                (got - p[k]).abs() <= 1e-15 * p[k].abs(),
                "turn {i} {name}: {got} vs {}",
                p[k]
            );
        }
        // The most probable label, ties to O then T.
        let best = (0..3).fold(0, |b, k| if p[k] > p[b] { k } else { b });
        assert_eq!(label["breakdown"], ["O", "T", "X"][best], "turn {i}");
    }
    // No map in the rubric and none given: refused, naming what to pass.
    let err = hyoka::report::dbdc3::export(&dir.join("judge-nomap.jsonl"), out.path(), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("judge-nomap.jsonl:1") && err.contains("--levels"),
        "{err}"
    );
    let map = LevelLabels::parse("2=O,1=T,0=X").unwrap();
    let written = hyoka::report::dbdc3::export(
        &dir.join("judge-nomap.jsonl"),
        &out.path().join("nomap"),
        Some("coherence"),
        Some(&map),
    )
    .unwrap();
    assert_eq!(written.turns, 200);
}

#[test]
fn breakdown3_levels_are_the_importers_labels() {
    // The built-in rubrics' levels mean X, T and O as `hyoka import dbdc3` reads the raters'
    // label strings.
    let dialogue = r#"{"dialogue-id": "d1", "turns": [
        {"turn-index": 0, "speaker": "S", "utterance": "こんにちは", "annotations": [
            {"annotator-id": "a", "breakdown": "O", "ungrammatical-sentence": "O"},
            {"annotator-id": "b", "breakdown": "T", "ungrammatical-sentence": "O"},
            {"annotator-id": "c", "breakdown": "X", "ungrammatical-sentence": "O"}]}]}"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("d1.log.json"), dialogue).unwrap();
    let items = dbdc3::import(dir.path(), &Default::default())
        .unwrap()
        .items;
    let hyoka::data::HumanRating::PerRater(o_t_x) = &items[0].human[dbdc3::BREAKDOWN] else {
        panic!("per-rater ratings");
    };
    for name in ["breakdown3-ja", "breakdown3-en"] {
        let (rubric, _) = hyoka::rubric::Rubric::resolve(name).unwrap();
        let levels: Vec<(i64, f64)> = rubric.aspects[0]
            .levels
            .iter()
            .map(|l| (l.score, l.human.expect("mapped")))
            .collect();
        // Score 2 = O, 1 = T, 0 = X.
        assert_eq!(
            levels,
            vec![(0, o_t_x[2]), (1, o_t_x[1]), (2, o_t_x[0])],
            "{name}"
        );
        assert_eq!(rubric.aspects[0].key, dbdc3::BREAKDOWN);
    }
}
