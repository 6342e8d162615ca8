//! `--prefill-gemm bf16` (`model::bf16_gemm`, AVX512-BF16) through whole models: the tiny
//! random models of every architecture against transformers' f32 logits, held to the bf16
//! tolerance of `runtime_parity`, and different from the f32 products (so the switch is what
//! ran). The choice is the model's (`Transformer::set_prefill_gemm`). Skipped on CPUs without AVX512-BF16.

use crate::common;

use candle_core::{DType, Device};
use hyoka::model::quant::cpu::prefill_gemm::{PrefillGemm, check_prefill_gemm};
use hyoka::model::quant::matrix::WeightsMode;
use hyoka::model::{Batch, Transformer, load_safetensors_dir};

const ARCHS: [&str; 6] = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"];
/// runtime_parity's tolerance for bf16 against transformers in f32.
const BF16_TOL: f32 = 0.05;

/// Every position's logits of `ids` (one row), with the products `gemm` says.
fn logits(model: &mut Transformer, ids: &[u32], gemm: PrefillGemm) -> Vec<Vec<f32>> {
    model.set_prefill_gemm(gemm).unwrap();
    let batch = Batch::new(&[ids.to_vec()], 0, &Device::Cpu).unwrap();
    let hidden = model.forward(&batch, None).unwrap();
    let at: Vec<(usize, usize)> = (0..ids.len()).map(|i| (0, i)).collect();
    let out = model.logits_at(&hidden, &at, None).unwrap();
    out.to_vec2::<f32>().unwrap()
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn bf16_products_match_transformers_within_bf16_tolerance() {
    // Refused where it does not apply, whatever the CPU.
    let err = check_prefill_gemm(
        PrefillGemm::Bf16,
        &Device::Cpu,
        DType::BF16,
        WeightsMode::Stored,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("applies to f32 on the CPU"),
        "{err}"
    );
    if !hyoka::model::quant::cpu::bf16_gemm::available() {
        let err = check_prefill_gemm(
            PrefillGemm::Bf16,
            &Device::Cpu,
            DType::F32,
            WeightsMode::Stored,
        )
        .unwrap_err();
        assert!(err.to_string().contains("AVX512-BF16"), "{err}");
        eprintln!("skipping: this CPU has no AVX512-BF16");
        return;
    }
    for arch in ARCHS {
        let dir = common::tiny_model(arch);
        let mut model =
            load_safetensors_dir(&dir, DType::F32, &Device::Cpu, Default::default()).unwrap();
        let cases = common::tiny_cases(arch);
        // The 23-token prompt and the 2,000-token one (its last positions' logits).
        let (mut worst, mut moved) = (0f32, 0f32);
        for n in [2, 5] {
            let (ids, want) = &cases[n];
            let first = ids.len() - want.len();
            let bf16 = logits(&mut model, ids, PrefillGemm::Bf16);
            assert_eq!(model.prefill_gemm(), PrefillGemm::Bf16);
            let f32 = logits(&mut model, ids, PrefillGemm::F32);
            let d = max_diff(&bf16[first..], want);
            assert!(d <= BF16_TOL, "{arch} prompt {n}: max |Δlogit| {d}");
            worst = worst.max(d);
            moved = moved.max(max_diff(&bf16, &f32));
        }
        assert!(
            moved > 0.0,
            "{arch}: bf16 products gave the f32 ones' logits"
        );
        eprintln!(
            "{arch}: worst |Δlogit| vs transformers {worst:.2e} (bf16 products vs f32 ones: {moved:.2e})"
        );
    }
}
