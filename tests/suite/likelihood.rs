//! Likelihood scorers (FED, GPTScore): per-token log-probabilities of the built-in scorers'
//! scored texts against HF transformers on the test judges (fixture:
//! scripts/fixtures/make_likelihood_fixtures.py), the same bits in any batch, and `hyoka
//! likelihood` then `hyoka meta` end to end.

use crate::common;

use hyoka::data::{Item, Turn};
use hyoka::likelihood::layout::{layout, sequences};
use hyoka::likelihood::{LikelihoodOptions, LikelihoodRun, LikelihoodScorer, log_probs};
use hyoka::model::{LoadedModel, RuntimeOptions};
use hyoka::results::runner::run_in_memory;
use hyoka::results::{Body, Record};
use serde_json::Value;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::process::Command;

/// |Δ| allowed between a token's log-probability here (the GGUF's blocks expanded to f32 for
/// the prefill's products) and in transformers (dequantized to f32).
const TOLERANCE: f64 = 5e-4;

fn load(name: &str) -> Option<LoadedModel> {
    let path = common::test_model(name)?;
    let runtime = RuntimeOptions::default();
    let (device, settings) = runtime.settings().unwrap();
    Some(
        runtime
            .load_model(path.to_str().unwrap(), &device, &settings, None)
            .unwrap(),
    )
}

fn fixture_items(fixture: &Value) -> Vec<Item> {
    let turn = |t: &Value| Turn {
        speaker: t["speaker"].as_str().unwrap().into(),
        text: t["text"].as_str().unwrap().into(),
    };
    (fixture["items"].as_array().unwrap().iter())
        .map(|i| {
            let mut item = hyoka::prompt::sample_item();
            item.id = i["id"].as_str().unwrap().into();
            item.context = i["context"].as_array().unwrap().iter().map(turn).collect();
            item.response = turn(&i["response"]);
            item
        })
        .collect()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn log_probs_match_transformers() {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixtures().join("likelihood/logprobs.json")).unwrap(),
    )
    .unwrap();
    let items = fixture_items(&fixture);
    for m in fixture["models"].as_array().unwrap() {
        let Some(model) = load(m["model"].as_str().unwrap()) else {
            return;
        };
        let mut worst: f64 = 0.0;
        for run in m["runs"].as_array().unwrap() {
            let (scorer, source) =
                LikelihoodScorer::resolve(run["scorer"].as_str().unwrap()).unwrap();
            let item = items
                .iter()
                .find(|i| i.id == run["item"].as_str().unwrap())
                .unwrap();
            let what = format!("{} {} {}", m["model"], run["scorer"], run["item"]);
            // The texts, token for token.
            let seqs = sequences(&scorer, &model.tokenizer, item, usize::MAX).unwrap();
            let want: Vec<&Value> = (run["aspects"].as_array().unwrap().iter())
                .flat_map(|a| a["sequences"].as_array().unwrap())
                .collect();
            assert_eq!(seqs.len(), want.len(), "{what}");
            for (s, w) in seqs.iter().zip(&want) {
                let ids: Vec<u32> = [s.prefix.clone(), s.continuation.clone()].concat();
                let expect: Vec<u32> = numbers(&w["tokens"]).iter().map(|&x| x as u32).collect();
                assert_eq!(ids, expect, "{what}: tokens");
                assert_eq!(s.positive, w["positive"].as_bool().unwrap(), "{what}");
            }
            // Every token's log-probability, the item's sequences in one row.
            let rows = layout(&scorer, &model.tokenizer, item, 4096).unwrap();
            let got = log_probs(&model.transformer, &[&rows]).unwrap().remove(0);
            for (g, w) in got.iter().zip(&want) {
                let w = numbers(&w["log_probs"]);
                assert_eq!(g.len(), w.len(), "{what}");
                for (a, b) in g.iter().zip(&w) {
                    worst = worst.max((a - b).abs());
                    assert!((a - b).abs() <= TOLERANCE, "{what}: {a} vs {b}");
                }
            }
            // The scores written: FED's mean of positive minus negative means, GPTScore's mean.
            let mut task =
                LikelihoodRun::new(&model, &scorer, source, LikelihoodOptions::default());
            let (_, lines) = run_in_memory(&mut task, std::slice::from_ref(item), &mut |_, _| {
                ControlFlow::Continue(())
            })
            .unwrap();
            let Ok(Body::Likelihood(record)) = Record::parse(&lines[0]).unwrap().body else {
                panic!("{what}: not a likelihood line");
            };
            for ((key, got), a) in record.scores.iter().zip(run["aspects"].as_array().unwrap()) {
                assert_eq!(key, a["key"].as_str().unwrap());
                let side = |positive: bool| -> Vec<f64> {
                    (a["sequences"].as_array().unwrap().iter())
                        .filter(|s| s["positive"].as_bool().unwrap() == positive)
                        .map(|s| mean(&numbers(&s["log_probs"])))
                        .collect()
                };
                let (pos, neg) = (side(true), side(false));
                let part = |v: &[f64]| if v.is_empty() { 0.0 } else { mean(v) };
                let expect = if scorer.method == hyoka::likelihood::Method::FollowUps {
                    part(&pos) - part(&neg)
                } else {
                    pos[0]
                };
                assert!(
                    (got.score - expect).abs() <= TOLERANCE,
                    "{what} {key}: {} vs {expect}",
                    got.score
                );
                assert_eq!(
                    (got.positive.len(), got.negative.len()),
                    (pos.len(), neg.len())
                );
            }
        }
        eprintln!("{}: worst |Δ log p| {worst:.2e}", m["model"]);
    }
}

#[test]
fn an_item_scores_the_same_bits_in_any_batch() {
    let Some(model) = load("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let items = hyoka::data::read_items(&common::repo_root().join("examples/items.jsonl"), false)
        .unwrap()
        .items;
    for name in ["fed-ja", "gptscore-en"] {
        let (scorer, source) = LikelihoodScorer::resolve(name).unwrap();
        let lines = |items: &[Item], batch_tokens| -> HashMap<String, String> {
            let opts = LikelihoodOptions { batch_tokens };
            let mut task = LikelihoodRun::new(&model, &scorer, source.clone(), opts);
            let (_, lines) =
                run_in_memory(&mut task, items, &mut |_, _| ControlFlow::Continue(())).unwrap();
            items.iter().map(|i| i.id.clone()).zip(lines).collect()
        };
        let together = lines(&items, 1 << 20);
        let mut reversed = items.clone();
        reversed.reverse();
        assert_eq!(together, lines(&reversed, 1), "{name}");
    }
}

#[test]
fn likelihood_scores_reach_meta_as_columns() {
    let Some(model) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let dir = common::scratch_dir().join("likelihood-meta");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let items = common::repo_root().join("examples/items.jsonl");
    let out = dir.join("fed.jsonl");
    let hyoka = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args(args)
            .output()
            .unwrap()
    };
    let score = |scorer: &str| {
        hyoka(&[
            "likelihood",
            "--scorer",
            scorer,
            "--model",
            model.to_str().unwrap(),
            "-i",
            items.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
    };
    let o = score("fed-ja");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let first = std::fs::read_to_string(&out).unwrap();
    // A rerun scores nothing and leaves the file as it was.
    let o = score("fed-ja");
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), first);
    // Another scorer into the same file is refused, and writes nothing.
    let o = score("gptscore-ja");
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), first);
    let json = dir.join("summary.json");
    let o = hyoka(&[
        "meta",
        "-i",
        items.to_str().unwrap(),
        "-s",
        out.to_str().unwrap(),
        "--bootstrap",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = std::fs::read_to_string(&json).unwrap();
    assert!(summary.contains("likelihood[fed-ja] score"), "{summary}");
}
