//! The real GGUF test models against HF transformers loading the same files (dequantized to
//! float32): tokenization, next-token logits and greedy continuations on Japanese prompts
//! (fixtures: scripts/fixtures/make_gguf_fixtures.py).

use crate::common;

use hyoka::model::{Batch, Products, Transformer, WeightsMode, load_gguf, load_tokenizer};
use serde_json::Value;

/// Both sides dequantize the same blocks to f32; what differs is the order of float sums
/// (measured: at most 2.5e-5 on these prompts).
/// Logits against transformers in f32; bf16/f16 runs (HYOKA_TEST_DTYPE) get their formats' slack.
fn logit_tol() -> f64 {
    common::tol(2e-4, 0.4, 0.1)
}

fn fixture(name: &str) -> Value {
    let path = common::fixtures().join("gguf").join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Greedy continuation reusing the prompt's keys and values; stops at the model's eos.
fn greedy(model: &Transformer, prompt: &[u32], steps: usize, eos: &[u32]) -> Vec<u32> {
    let (mut kv, mut logits) = model.extend(None, prompt, Products::ByRowCount).unwrap();
    let mut out: Vec<u32> = Vec::new();
    for _ in 0..steps {
        let next = logits.argmax(1).unwrap().to_vec1::<u32>().unwrap()[0];
        out.push(next);
        if eos.contains(&next) {
            break;
        }
        (kv, logits) = model.extend(Some(&kv), &[next], Products::RowWise).unwrap();
    }
    out
}

fn check(name: &str, eos: &[u32]) {
    let fx = fixture(name);
    let Some(path) = common::test_model(fx["model"].as_str().unwrap()) else {
        return;
    };
    check_file(name, &fx, path, eos);
}

fn check_file(name: &str, fx: &Value, path: std::path::PathBuf, eos: &[u32]) {
    let Some(tok_path) = common::test_model(fx["tokenizer"].as_str().unwrap()) else {
        return;
    };
    // Expanded: the model's arithmetic against transformers' (tests/suite/stored_weights.rs compares
    // the weights kept as stored with this).
    let model = load_gguf(
        &path,
        common::dtype(),
        &common::device(),
        WeightsMode::Expanded,
    )
    .unwrap();
    let tokenizer = load_tokenizer(
        &tok_path,
        if tok_path.is_dir() {
            Some(&tok_path)
        } else {
            None
        },
    )
    .unwrap();
    for (n, case) in fx["cases"].as_array().unwrap().iter().enumerate() {
        let expect_ids = ids(&case["ids"]);
        // Chat-templated prompts carry their special tokens as text; raw text gets the BOS.
        let add_special = !case["text"].as_str().unwrap().contains("<|im_start|>");
        let enc = tokenizer
            .encode(case["text"].as_str().unwrap(), add_special)
            .unwrap();
        assert_eq!(
            enc.get_ids(),
            expect_ids.as_slice(),
            "{name} case {n}: token ids"
        );

        let b = Batch::new(std::slice::from_ref(&expect_ids), 0, model.device()).unwrap();
        let h = model.forward(&b, None).unwrap();
        let logits = model
            .logits_at(&h, &[(0, expect_ids.len() - 1)], None)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap()
            .remove(0);
        let mut worst = 0f64;
        for (id, want) in ids(&case["top_ids"])
            .iter()
            .zip(case["top_logits"].as_array().unwrap())
        {
            worst = worst.max((logits[*id as usize] as f64 - want.as_f64().unwrap()).abs());
        }
        let max = logits.iter().fold(f32::MIN, |a, &b| a.max(b)) as f64;
        let lse = max
            + logits
                .iter()
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln();
        eprintln!(
            "{name} case {n}: max |Δlogit| over top-64 = {worst:.2e}, Δlogsumexp = {:.2e}",
            (lse - case["logsumexp"].as_f64().unwrap()).abs()
        );
        assert!(
            worst <= logit_tol(),
            "{name} case {n}: top-64 logits differ by {worst}"
        );
        assert!(
            (lse - case["logsumexp"].as_f64().unwrap()).abs() <= logit_tol(),
            "{name} case {n}: logsumexp"
        );
        let want = ids(&case["greedy"]);
        if common::dtype() == candle_core::DType::F32 {
            assert_eq!(
                greedy(&model, &expect_ids, want.len(), eos),
                want,
                "{name} case {n}: greedy continuation"
            );
        } else {
            // bf16/f16 may flip a near-tie: the token picked must be within the tolerance of
            // transformers' best at this position (a continuation then follows another path).
            let picked = greedy(&model, &expect_ids, 1, eos);
            let top: Vec<u32> = ids(&case["top_ids"]);
            let at = top.iter().position(|t| Some(t) == picked.first());
            let logit = |k: usize| case["top_logits"][k].as_f64().unwrap();
            assert!(
                at.is_some_and(|k| logit(0) - logit(k) <= logit_tol()),
                "{name} case {n}: first greedy token {picked:?} is no near-tie of {}",
                top[0]
            );
        }
    }
}

#[test]
fn qwen25_gguf_matches_transformers() {
    check("qwen2.5", &[151645, 151643]);
}

/// The larger optional judge (scripts/fetch_test_models.py --only qwen2.5-coder-1.5b-instruct-q4km);
/// skipped when it has not been fetched.
#[test]
fn qwen25_1_5b_gguf_matches_transformers() {
    let fx = fixture("qwen2.5-1.5b");
    if let Some(path) = common::optional_test_model(fx["model"].as_str().unwrap()) {
        check_file("qwen2.5-1.5b", &fx, path, &[151645, 151643]);
    }
}

#[test]
fn smollm2_gguf_matches_transformers() {
    check("smollm2", &[2]);
}

#[test]
fn gemma3_gguf_matches_transformers() {
    check("gemma3", &[1, 106]);
}
