//! Score distributions against HF transformers on the real SmolLM2 GGUF (fixture:
//! scripts/fixtures/make_judge_fixtures.py), including a 0..10 scale whose "10" takes two tokens; the
//! same numbers whether items are scored together or alone, with or without the shared header.

use crate::common;

use hyoka::data::{Item, Turn};
use hyoka::judge::Scorer;
use hyoka::judge::layout::{ItemLayout, common_header, layout_item};
use hyoka::model::LoadedModel;
use hyoka::model::plan_batches;
use hyoka::model::tokenizer::TextFit;
use hyoka::prompt::PromptBuilder;
use hyoka::results::scores::AspectScore;
use hyoka::rubric::Rubric;
use serde_json::Value;

const RUBRIC: &str = r#"
name = "test"
description = "parity"
output = "score"
[prompt]
user = "{{ response.text }}"
answer = "{{ aspect.name }}: "
[[aspects]]
key = "naturalness"
name = "Naturalness"
min = 1
max = 3
definition = "natural"
[[aspects]]
key = "coherence"
name = "Coherence"
min = 0
max = 1
definition = "coherent"
[[aspects]]
key = "overall"
name = "Overall"
min = 0
max = 10
definition = "overall"
"#;

fn item(id: &str, text: &str) -> Item {
    Item {
        id: id.into(),
        context: vec![],
        response: Turn {
            speaker: "A".into(),
            text: text.into(),
        },
        reference: vec![],
        setting: None,
        system: None,
        dialogue: None,
        scope: Default::default(),
        context_id: None,
        human: Default::default(),
        raters: vec![],
        meta: None,
        translation: None,
        numeric_id: false,
    }
}

/// Tolerances against transformers in f32: (probability, expected score) per dtype.
fn tols() -> (f64, f64) {
    (common::tol(1e-4, 0.05, 0.01), common::tol(1e-3, 0.15, 0.03))
}

fn check(fx: &Value, got: &[Vec<AspectScore>], what: &str) {
    let (p_tol, e_tol) = tols();
    let (mut worst_p, mut worst_e) = (0f64, 0f64);
    for (case, scores) in fx["cases"].as_array().unwrap().iter().zip(got) {
        for (name, s) in ["Naturalness", "Coherence", "Overall"].iter().zip(scores) {
            let want = &case["aspects"][name];
            let dist: Vec<f64> = want["distribution"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let got_p = s.probabilities();
            let sum: f64 = got_p.iter().sum();
            assert!(
                (sum - 1.0).abs() < 1e-9,
                "{what}: distribution sums to {sum}"
            );
            for (g, w) in got_p.iter().zip(&dist) {
                worst_p = worst_p.max((g - w).abs());
                assert!(
                    (g - w).abs() <= p_tol,
                    "{what}: {} {name}: {got_p:?} vs {dist:?}",
                    case["id"]
                );
            }
            let de = (s.expected - want["expected"].as_f64().unwrap()).abs();
            worst_e = worst_e.max(de);
            assert!(de <= e_tol, "{what}: {} {name} expected", case["id"]);
            assert!(
                (s.off_scale - want["off_scale"].as_f64().unwrap()).abs() <= p_tol,
                "{what}: {} {name} off_scale",
                case["id"]
            );
        }
    }
    eprintln!("{what}: worst |Δp| {worst_p:.2e}, worst |Δ expected| {worst_e:.2e}");
}

#[test]
fn distributions_match_transformers_in_any_batching() {
    let fx: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixtures().join("judge/smollm2.json")).unwrap(),
    )
    .unwrap();
    let Some(path) = common::test_model(fx["model"].as_str().unwrap()) else {
        return;
    };
    let model = LoadedModel::load(
        &hyoka::model::ModelRequest::new(path.to_str().unwrap()),
        &common::device(),
        &hyoka::model::RuntimeSettings::new(common::dtype()),
    )
    .unwrap();
    let rubric = Rubric::from_toml(RUBRIC, "test").unwrap();
    let builder = PromptBuilder::new(&rubric).unwrap();
    let items: Vec<Item> = fx["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| item(c["id"].as_str().unwrap(), c["text"].as_str().unwrap()))
        .collect();
    let layouts: Vec<ItemLayout> = items
        .iter()
        .map(|it| {
            let fit = TextFit::new(&model.tokenizer, 8192);
            layout_item(&builder, &model.chat_template, &model.tokenizer, it, &fit).unwrap()
        })
        .collect();
    assert!(
        layouts
            .iter()
            .all(|l| l.aspects[2].paths.iter().any(|p| p.len() > 1)),
        "\"10\" should take two tokens"
    );
    let refs: Vec<&ItemLayout> = layouts.iter().collect();

    // All items in one batch, continuing the header they share.
    let header = common_header(&refs);
    for l in &refs {
        assert_eq!(l.row_tokens(header), l.row(header).len());
    }
    assert!(
        header > 10,
        "the chat template's system prompt is shared: {header}"
    );
    let scorer = Scorer::new(&model.transformer, &layouts[0].trunk[..header]).unwrap();
    let batched: Vec<Vec<AspectScore>> = (scorer.score(&refs).unwrap().into_iter())
        .map(|r| r.expect("finite scores"))
        .collect();
    check(&fx, &batched, "one batch");

    // One item at a time, no header.
    let plain = Scorer::new(&model.transformer, &[]).unwrap();
    let alone: Vec<Vec<AspectScore>> = refs
        .iter()
        .map(|l| plain.score(&[l]).unwrap().remove(0).expect("finite scores"))
        .collect();
    check(&fx, &alone, "alone");
}

#[test]
fn batches_respect_the_token_budget() {
    let lens = [10, 300, 50, 300, 20];
    let plan = plan_batches(&lens, 600);
    assert_eq!(plan, vec![vec![1, 3], vec![2, 4, 0]]);
    let all: usize = plan.iter().map(Vec::len).sum();
    assert_eq!(all, lens.len());
    // A row longer than the budget still gets a batch of its own.
    assert_eq!(plan_batches(&[1000, 5], 100), vec![vec![0], vec![1]]);
}
