//! GGUF files written by llama.cpp's own converter (convert_hf_to_gguf.py from the llama-cpp-python
//! sdist; fixtures: scripts/make_converter_fixtures.py) against HF transformers on the
//! checkpoint they were converted from: every position's logits, in both weights modes.

mod common;

use candle_core::{DType, Device};
use hyoka::model::{Batch, Transformer, WeightsMode, load_gguf};

const TOL: f32 = 1e-4;

struct Case {
    ids: Vec<u32>,
    /// Expected logits of the last `logits.len()` positions.
    logits: Vec<Vec<f32>>,
}

fn cases(name: &str) -> Vec<Case> {
    let dir = common::fixtures().join("converter").join(name);
    let expected =
        candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
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
    let batch = Batch::new(&rows, 0, &model.windows(), model.dtype(), model.device()).unwrap();
    let (hidden, _) = model.forward(&batch, None).unwrap();
    let at: Vec<(usize, usize)> = (0..ids.len()).map(|i| (0, i)).collect();
    model
        .logits_at(&hidden, &at, None)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap()
}

/// Llama 3.1's rope scaling reaches hyoka from GGUF only as llama.cpp's `rope_freqs.weight`
/// (the metadata says "no scaling"): positions past the original context (64 here) only match
/// transformers with it.
#[test]
fn llama3_rope_scaling_from_rope_freqs() {
    let path = common::fixtures().join("converter/llama3-rope/model.gguf");
    let cases = cases("llama3-rope");
    assert!(cases.iter().any(|c| c.ids.len() > 256));
    for mode in [WeightsMode::Stored, WeightsMode::Expanded] {
        let model = load_gguf(&path, DType::F32, &Device::Cpu, mode).unwrap();
        for (n, case) in cases.iter().enumerate() {
            let got = logits(&model, &case.ids);
            let first = case.ids.len() - case.logits.len();
            for (i, e) in case.logits.iter().enumerate() {
                let d = got[first + i]
                    .iter()
                    .zip(e)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    d <= TOL,
                    "{mode:?} prompt {n} position {}: max |diff| {d}",
                    first + i
                );
            }
        }
    }
}
