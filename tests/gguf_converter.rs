//! GGUF files written by llama.cpp's own converter (convert_hf_to_gguf.py from the llama-cpp-python
//! sdist; fixtures: scripts/make_converter_fixtures.py), f32 and q8_0, of llama (llama3 rope),
//! mistral, gemma2 and gemma3, against HF transformers: every position's logits, in both
//! weights modes.

mod common;

use candle_core::{DType, Device};
use hyoka::model::{Batch, Transformer, WeightsMode, load_gguf};

const TOL: f32 = 1e-4;
/// Stored quantized weights run llama.cpp's quantized kernels for passes of at most 8 tokens,
/// which round activations to 8 bits: within this share of the row's logit range.
const QUANTIZED_KERNELS_TOL: f32 = 0.02;

struct Case {
    ids: Vec<u32>,
    /// Expected logits of the last `logits.len()` positions.
    logits: Vec<Vec<f32>>,
}

fn cases(name: &str, kind: &str) -> Vec<Case> {
    let dir = common::fixtures().join("converter").join(name);
    let expected = candle_core::safetensors::load(
        dir.join(format!("expected.{kind}.safetensors")),
        &Device::Cpu,
    )
    .unwrap();
    (0..)
        .map_while(|n| {
            let ids = expected.get(&format!("ids.{n}"))?;
            Some(Case {
                ids: ids
                    .to_vec1::<i64>()
                    .unwrap()
                    .into_iter()
                    .map(|i| i as u32)
                    .collect(),
                logits: expected[&format!("logits.{n}")].to_vec2::<f32>().unwrap(),
            })
        })
        .collect()
}

fn logits(model: &Transformer, ids: &[u32]) -> Vec<Vec<f32>> {
    let rows = [ids.to_vec()];
    let batch = Batch::new(&rows, 0, model.device()).unwrap();
    let (hidden, _) = model.forward(&batch, None).unwrap();
    let at: Vec<(usize, usize)> = (0..ids.len()).map(|i| (0, i)).collect();
    model
        .logits_at(&hidden, &at, None)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap()
}

/// Every position's logits of `name`'s `kind` GGUF (f32, q8_0) against transformers, in both
/// weights modes: the f32 file against the checkpoint it was converted from, the q8_0 file
/// against the checkpoint holding the weights transformers dequantizes from it.
fn check(name: &str, kind: &str) {
    let path = common::fixtures()
        .join("converter")
        .join(name)
        .join(format!("{kind}.gguf"));
    let cases = cases(name, kind);
    assert!(cases.iter().any(|c| c.ids.len() > 256));
    for mode in [WeightsMode::Stored, WeightsMode::Expanded] {
        let model = load_gguf(&path, DType::F32, &Device::Cpu, mode).unwrap();
        for (n, case) in cases.iter().enumerate() {
            let got = logits(&model, &case.ids);
            let first = case.ids.len() - case.logits.len();
            let quantized_kernels =
                kind != "f32" && mode == WeightsMode::Stored && case.ids.len() <= 8;
            for (i, e) in case.logits.iter().enumerate() {
                let d = got[first + i]
                    .iter()
                    .zip(e)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0f32, f32::max);
                let tol = if quantized_kernels {
                    let (lo, hi) = e
                        .iter()
                        .fold((f32::MAX, f32::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
                    QUANTIZED_KERNELS_TOL * (hi - lo)
                } else {
                    TOL
                };
                assert!(
                    d <= tol,
                    "{name} {kind} {mode:?} prompt {n} position {}: max |diff| {d} > {tol}",
                    first + i
                );
            }
        }
    }
}

/// Llama 3.1's rope scaling reaches hyoka from GGUF only as llama.cpp's `rope_freqs.weight`
/// (the metadata says "no scaling"): positions past the original context (64 here) only match
/// transformers with it.
#[test]
fn llama_with_llama3_rope_scaling() {
    check("llama3-rope", "f32");
    check("llama3-rope", "q8_0");
}

#[test]
fn mistral() {
    check("mistral", "f32");
    check("mistral", "q8_0");
}

/// Gemma 2: soft-capping, sliding windows, norms stored as 1 + w by the converter.
#[test]
fn gemma2() {
    check("gemma2", "f32");
    check("gemma2", "q8_0");
}

/// Gemma 3: sliding and full layers with their own rope bases, q/k norms.
#[test]
fn gemma3() {
    check("gemma3", "f32");
    check("gemma3", "q8_0");
}
