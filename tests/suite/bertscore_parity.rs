//! BERTScore against bert_score 0.3.13 (fast tokenizer): expected values written by
//! scripts/fixtures/make_bertscore_fixtures.py on all-MiniLM-L6-v2 and multilingual-e5-small (real
//! weights; Japanese and English, idf on and off, several references, rescaling — with hyoka's
//! shipped Japanese baseline for e5 —, and 200 DBDC3-ja pairs for e5) and tiny random BERT,
//! DistilBERT and XLM-RoBERTa encoders. Also: the same scores whatever the batching and the order.

use crate::common;

use candle_core::{DType, Device};
use hyoka::bertscore::{BertScorer, Depth, baseline};
use hyoka::results::prf::Prf;
use serde_json::Value;
use std::path::PathBuf;

/// Against bert_score in f32; bf16/f16 runs (HYOKA_TEST_DTYPE) get their formats' slack.
fn tol() -> f64 {
    common::tol(1e-5, 0.02, 0.003)
}

/// An encoder as the environment asks: device, dtype, and with HYOKA_TEST_ENCODER=padded the
/// GPUs' padded path on the CPU.
fn load(dir: &std::path::Path, depth: Depth) -> hyoka::bertscore::LoadedScorer {
    let mut loaded = BertScorer::load(
        dir.to_str().unwrap(),
        depth,
        common::dtype(),
        &common::device(),
    )
    .unwrap();
    if common::encoder_padded() {
        loaded.scorer.encoder.use_padded_rows();
    }
    loaded
}

fn fixtures() -> Value {
    let path = common::fixtures().join("bert/expected.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn model_dir(name: &str) -> Option<PathBuf> {
    if name == "all-MiniLM-L6-v2" || name == "multilingual-e5-small" {
        common::test_model(name)
    } else {
        Some(common::fixtures().join("bert").join(name))
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// A fixture case's candidates and, per candidate, its references.
fn case_texts(case: &Value) -> (Vec<String>, Vec<Vec<String>>) {
    let refs = case["refs"]
        .as_array()
        .unwrap()
        .iter()
        .map(strings)
        .collect();
    (strings(&case["cands"]), refs)
}

#[test]
fn scores_match_bert_score() {
    let fx = fixtures();
    let mut worst: f64 = 0.0;
    for case in fx["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let Some(dir) = model_dir(case["model"].as_str().unwrap()) else {
            return;
        };
        let layer = case["layer"].as_u64().unwrap() as usize;
        let loaded = load(&dir, Depth::Layer(Some(layer)));
        assert_eq!(loaded.layer, layer);
        let (cands, refs) = case_texts(case);
        let cand_refs: Vec<&str> = cands.iter().map(String::as_str).collect();
        let ref_refs: Vec<Vec<&str>> = refs
            .iter()
            .map(|r| r.iter().map(String::as_str).collect())
            .collect();
        let mut got = loaded
            .scorer
            .score(
                &cand_refs,
                &ref_refs,
                case["idf"].as_bool().unwrap(),
                4096,
                Some(4),
            )
            .unwrap();
        if let Some(b) = case["baseline"].as_str() {
            let base =
                baseline::read_layer(&common::fixtures().join("bert").join(b), layer).unwrap();
            got = got.iter().map(|s| s.rescale(&base)).collect();
        }
        for (col, pick) in [
            ("P", (|s: &Prf| s.p) as fn(&Prf) -> f64),
            ("R", |s| s.r),
            ("F", |s| s.f),
        ] {
            for (i, (g, e)) in got.iter().zip(case[col].as_array().unwrap()).enumerate() {
                let d = (pick(g) - e.as_f64().unwrap()).abs();
                worst = worst.max(d);
                assert!(
                    d <= tol(),
                    "{name} {col}[{i}]: {} vs bert_score {e} (Δ {d:.2e})",
                    pick(g)
                );
            }
        }
    }
    eprintln!("max |Δ| vs bert_score: {worst:.2e}");
}

#[test]
fn baseline_means_match_bert_score_all_layers() {
    let fx = fixtures();
    let Some(dir) = model_dir("all-MiniLM-L6-v2") else {
        return;
    };
    let loaded = load(&dir, Depth::All);
    let cands = strings(&fx["baseline"]["cands"]);
    let refs = strings(&fx["baseline"]["refs"]);
    let c: Vec<&str> = cands.iter().map(String::as_str).collect();
    let r: Vec<&str> = refs.iter().map(String::as_str).collect();
    let rows = baseline::compute(&loaded.scorer, &c, &r, 4096, Some(4)).unwrap();
    let expected = fx["baseline"]["layers"].as_array().unwrap();
    assert_eq!(rows.len(), expected.len(), "layers 0..=6");
    for ((l, got), e) in rows.iter().zip(expected) {
        let e: Vec<f64> = e
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        for (g, x) in [got.p, got.r, got.f].iter().zip(&e) {
            assert!((g - x).abs() <= tol(), "layer {l}: {g} vs {x}");
        }
    }
    // Written and read back in bert_score's format.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.tsv");
    baseline::write(&path, &rows).unwrap();
    assert_eq!(baseline::read_layer(&path, 3).unwrap(), rows[3].1);
}

#[test]
fn batching_and_order_do_not_change_scores() {
    let fx = fixtures();
    let case = &fx["cases"][2]; // MiniLM with idf
    let Some(dir) = model_dir(case["model"].as_str().unwrap()) else {
        return;
    };
    let loaded = load(&dir, Depth::Layer(Some(4)));
    let cands = strings(&case["cands"]);
    let refs: Vec<String> = case["refs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap().to_string())
        .collect();
    let c: Vec<&str> = cands.iter().map(String::as_str).collect();
    let r: Vec<Vec<&str>> = refs.iter().map(|s| vec![s.as_str()]).collect();
    let base = loaded.scorer.score(&c, &r, true, 100_000, Some(4)).unwrap();
    let one = loaded.scorer.score(&c, &r, true, 1, Some(4)).unwrap();
    let rev_c: Vec<&str> = c.iter().rev().copied().collect();
    let rev_r: Vec<Vec<&str>> = r.iter().rev().cloned().collect();
    // Reversed input, without bert_score's padding (which depends on the order by design).
    let mut rev = loaded.scorer.score(&rev_c, &rev_r, true, 64, None).unwrap();
    rev.reverse();
    let base_np = loaded.scorer.score(&c, &r, true, 100_000, None).unwrap();
    for (((a, b), d), e) in base.iter().zip(&one).zip(&rev).zip(&base_np) {
        for (x, y) in [
            (a.p, b.p),
            (a.r, b.r),
            (a.f, b.f),
            (e.f, d.f),
            (e.p, d.p),
            (e.r, d.r),
        ] {
            assert!((x - y).abs() <= 1e-6, "{x} vs {y}");
        }
    }
}

/// The GPUs' path (right-padded rows, candle's ops, f32 masks) run on the CPU gives the packed
/// path's scores within 1e-5 on both real encoders, every fixture case.
#[test]
fn padded_rows_match_packed_rows() {
    if common::dtype() != DType::F32 || !common::device().is_cpu() {
        return; // elsewhere both sides would take the padded path
    }
    let fx = fixtures();
    let mut worst: f64 = 0.0;
    for case in fx["cases"].as_array().unwrap() {
        let Some(dir) = model_dir(case["model"].as_str().unwrap()) else {
            return;
        };
        let layer = case["layer"].as_u64().unwrap() as usize;
        let packed = BertScorer::load(
            dir.to_str().unwrap(),
            Depth::Layer(Some(layer)),
            DType::F32,
            &Device::Cpu,
        )
        .unwrap();
        let mut padded = BertScorer::load(
            dir.to_str().unwrap(),
            Depth::Layer(Some(layer)),
            DType::F32,
            &Device::Cpu,
        )
        .unwrap();
        padded.scorer.encoder.use_padded_rows();
        let (cands, refs) = case_texts(case);
        let c: Vec<&str> = cands.iter().map(String::as_str).collect();
        let r: Vec<Vec<&str>> = refs
            .iter()
            .map(|r| r.iter().map(String::as_str).collect())
            .collect();
        let idf = case["idf"].as_bool().unwrap();
        let a = packed.scorer.score(&c, &r, idf, 4096, Some(4)).unwrap();
        let b = padded.scorer.score(&c, &r, idf, 4096, Some(4)).unwrap();
        for (x, y) in a.iter().zip(&b) {
            for (u, v) in [(x.p, y.p), (x.r, y.r), (x.f, y.f)] {
                worst = worst.max((u - v).abs());
                assert!((u - v).abs() <= 1e-5, "{}: {u} vs {v}", case["name"]);
            }
        }
    }
    eprintln!("max |Δ| padded vs packed: {worst:.2e}");
}
