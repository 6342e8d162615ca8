//! Weights kept as stored (GGUF blocks stay quantized) against the same model expanded to f32
//! at load, on the real GGUF test models and the Japanese prompts of tests/suite/gguf_parity.rs
//! (whose expanded logits match transformers'):
//! - memory: the stored matrices take about the file's size, expanded ones about 6× a Q4 file;
//! - prefill is the same arithmetic: hidden states, the logits of restricted vocabulary rows,
//!   and the whole vocabulary's logits (what a judge reads) are those of the expanded model for
//!   any input longer than a decoding step;
//! - decoding steps (json answers, translations, greedy baselines; `extend` is one such step)
//!   go through candle's quantized kernels, which round the activations to 8 bits: within a
//!   stated tolerance, same argmax.

use crate::common;

use candle_core::{DType, Device, Tensor};
use hyoka::model::quant::matrix::DECODE_ROWS;
use hyoka::model::{Batch, Transformer, WeightsMode, load_gguf};
use serde_json::Value;

/// Logits through the quantized kernels vs expanded f32, as a fraction of the vocabulary's
/// logit range (max − min) at that position. Measured: Qwen2.5 Q4_K_M 0.006, SmolLM2 Q4_1
/// 0.009 (the head alone), Gemma 3 Q4_K_M 0.030 with candle's reference loop's order (0.028 in
/// another lane order of the 32-value kernels; its 640-column matrices
/// are Q5_0/Q8_0; every layer quantized: Gemma's activations reach 1e4, and the kernels round
/// them to 8 bits per block at every layer, so a last-bit change in one product moves other
/// roundings downstream: the two orders are two draws of the same rounding noise).
const DECODE_LOGIT_TOL: f32 = 0.035;

fn check(name: &str) {
    let fx: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixtures().join("gguf").join(format!("{name}.json")))
            .unwrap(),
    )
    .unwrap();
    let Some(path) = common::test_model(fx["model"].as_str().unwrap()) else {
        return;
    };
    let stored = load_gguf(&path, DType::F32, &Device::Cpu, WeightsMode::Stored).unwrap();
    let expanded = load_gguf(&path, DType::F32, &Device::Cpu, WeightsMode::Expanded).unwrap();
    let file = std::fs::metadata(&path).unwrap().len() as f64;
    let (s_bytes, e_bytes) = (stored.matrix_bytes() as f64, expanded.matrix_bytes() as f64);
    eprintln!(
        "{name}: file {:.0} MB, matrices stored {:.0} MB, expanded {:.0} MB",
        file / 1e6,
        s_bytes / 1e6,
        e_bytes / 1e6
    );
    assert!(
        s_bytes <= 1.05 * file,
        "stored matrices take about the file's size"
    );
    assert!(
        e_bytes >= 3.0 * file,
        "expanded ones take several times more"
    );

    let mut worst_decode = 0f32;
    for case in fx["cases"].as_array().unwrap() {
        let ids: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let run = |m: &Transformer| {
            let b = Batch::new(std::slice::from_ref(&ids), 0, m.device()).unwrap();
            let h = m.forward(&b, None).unwrap();
            let top: Vec<u32> = case["top_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            let rows = Tensor::new(top.as_slice(), &Device::Cpu).unwrap();
            let at = [(0, ids.len() - 1)];
            let restricted = m
                .logits_at(&h, &at, Some(&rows))
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
                .remove(0);
            let whole = m
                .logits_at(&h, &at, None)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
                .remove(0);
            // Decoding: the next-token logits of the same prompt, through `extend`.
            let decoding = m
                .extend(None, &ids, hyoka::model::Products::ByRowCount)
                .unwrap()
                .1
                .to_vec2::<f32>()
                .unwrap()
                .remove(0);
            (
                h.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                restricted,
                whole,
                decoding,
            )
        };
        let (hs, rs, whole_s, ws) = run(&stored);
        let (he, re, whole_e, we) = run(&expanded);
        let range =
            we.iter().fold(f32::MIN, |a, &b| a.max(b)) - we.iter().fold(f32::MAX, |a, &b| a.min(b));
        if ids.len() > DECODE_ROWS {
            assert_eq!(
                hs, he,
                "{name}: prefill hidden states are the expanded model's, exactly"
            );
            assert_eq!(rs, re, "{name}: restricted logits are identical");
            let d = whole_s
                .iter()
                .zip(&whole_e)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                d <= 1e-5,
                "{name}: the whole vocabulary's logits (what a judge reads) differ by {d}"
            );
        } else {
            // As short as a decoding step: the quantized kernels run every layer.
            let d = rs
                .iter()
                .zip(&re)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max)
                / range;
            eprintln!(
                "{name}: a {}-token prompt through the quantized kernels: restricted logits within {d:.4} of the vocabulary's logit range",
                ids.len()
            );
            assert!(d <= DECODE_LOGIT_TOL, "{name}: {d}");
        }
        let d = ws
            .iter()
            .zip(&we)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max)
            / range;
        worst_decode = worst_decode.max(d);
        let argmax = |v: &[f32]| {
            v.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .unwrap()
                .0
        };
        assert_eq!(
            argmax(&ws),
            argmax(&we),
            "{name}: the quantized head picks the same token"
        );
    }
    eprintln!(
        "{name}: whole-vocabulary logits, quantized kernels vs expanded: max |Δ| {worst_decode:.4} of the range"
    );
    assert!(worst_decode <= DECODE_LOGIT_TOL, "{name}: {worst_decode}");
}

#[test]
fn qwen25_stored_weights() {
    check("qwen2.5");
}

#[test]
fn smollm2_stored_weights() {
    check("smollm2");
}

#[test]
fn gemma3_stored_weights() {
    check("gemma3");
}

/// `--weights q8_0` on safetensors checkpoints (the six tiny architectures): every matrix
/// quantized to Q8_0 at load, as llama.cpp's converter writes a q8_0 GGUF — 34 bytes per 32
/// weights instead of the file's 128 — and the logits transformers computes on the same
/// checkpoint with its matrices rounded by llama.cpp's Python quantizer
/// (scripts/fixtures/make_q8_0_fixtures.py): within 1e-4 at every kept position of the prompts longer
/// than a decoding step (prefill expands the blocks and multiplies in f32; shorter passes round
/// activations to 8 bits in the integer kernels, checked on llama.cpp's q8_0 GGUFs in
/// tests/suite/gguf_converter.rs). Far from the unquantized model's logits: the rounding happened.
/// Device and dtype from HYOKA_TEST_DEVICE / HYOKA_TEST_DTYPE (scripts/gpu/gpu_check.sh): on a GPU
/// the blocks are quantized on the CPU and uploaded, as a q8_0 GGUF's are.
#[test]
fn safetensors_quantized_to_q8_0_at_load_match_llama_cpps_rounding() {
    use hyoka::model::load_safetensors_dir;
    let (device, dtype) = (common::device(), common::dtype());
    // bf16 / f16: measured on the CPU, worst 0.054 / 0.0060 (gemma2 / gemma3; logits span 4–7).
    let tol = common::tol(1e-4, 0.12, 0.015) as f32;
    for arch in ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"] {
        let dir = common::tiny_model(arch);
        let q8 = load_safetensors_dir(&dir, dtype, &device, WeightsMode::Q8_0).unwrap();
        // The f32 file's matrices, as they are stored, for their size.
        let plain =
            load_safetensors_dir(&dir, DType::F32, &Device::Cpu, WeightsMode::Stored).unwrap();
        assert_eq!(
            q8.matrix_bytes() * 128,
            plain.matrix_bytes() * 34,
            "{arch}: every matrix in Q8_0 blocks"
        );
        let expected =
            candle_core::safetensors::load(dir.join("expected.q8_0.safetensors"), &Device::Cpu)
                .unwrap();
        let unquantized = common::tiny_cases(arch);
        let (mut worst, mut moved) = (0f32, 0f32);
        for ((ids, logits), (_, plain_logits)) in
            common::prompt_cases(&expected).into_iter().zip(unquantized)
        {
            if ids.len() <= DECODE_ROWS {
                continue;
            }
            let got = common::every_position_logits(&q8, &ids);
            let first = ids.len() - logits.len();
            for (i, (e, p)) in logits.iter().zip(&plain_logits).enumerate() {
                worst = worst.max(common::max_diff(&got[first + i], e));
                moved = moved.max(common::max_diff(e, p));
            }
        }
        eprintln!("{arch}: q8_0 max |Δlogit| {worst:.2e}; the rounding moved logits {moved:.2e}");
        assert!(worst <= tol, "{arch}: {worst}");
        assert!(
            moved >= 1e-3,
            "{arch}: Q8_0 rounding moved logits only {moved}"
        );
    }
}
