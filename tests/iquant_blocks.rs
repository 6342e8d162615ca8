//! llama.cpp's i-quant blocks decoded by hyoka (`model::iquants`) against gguf-py's decoding
//! (llama.cpp's Python package, NumPy code written apart from ggml's C; fixtures:
//! scripts/make_iquant_fixtures.py), and the Q8_0 blocks they are held in, read back by
//! candle's own Q8_0 dequantization.

mod common;

use candle_core::quantized::k_quants::BlockQ8_0;
use candle_core::quantized::{GgmlType, QStorage, QTensor};
use candle_core::{Device, Tensor};
use hyoka::model::iquants::{self, IQuant};
use std::collections::HashMap;

fn fixtures() -> HashMap<String, Tensor> {
    let path = common::fixtures().join("iquants/blocks.safetensors");
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

/// (blocks' bytes, gguf-py's values) of one type.
fn blocks(all: &HashMap<String, Tensor>, kind: IQuant) -> (Vec<u8>, Vec<f32>) {
    let bytes = all[&format!("{}.blocks", kind.name())]
        .flatten_all()
        .unwrap();
    let values = all[&format!("{}.values", kind.name())]
        .flatten_all()
        .unwrap();
    (bytes.to_vec1().unwrap(), values.to_vec1().unwrap())
}

/// Every type's values are gguf-py's, bit for bit (scales zero, subnormal, large and
/// ordinary; every byte of the rest random).
#[test]
fn values_are_gguf_pys() {
    let all = fixtures();
    for kind in IQuant::ALL {
        let (bytes, want) = blocks(&all, kind);
        assert_eq!(bytes.len() % kind.block_bytes(), 0, "{kind:?}");
        let got = iquants::dequantize(kind, &bytes);
        assert_eq!(got.len(), want.len(), "{kind:?}");
        let wrong: Vec<usize> = (0..got.len())
            .filter(|&i| got[i].to_bits() != want[i].to_bits())
            .collect();
        assert!(
            wrong.is_empty(),
            "{}: {} of {} values differ, first at {}: {} against gguf-py's {}",
            kind.name(),
            wrong.len(),
            got.len(),
            wrong[0],
            got[wrong[0]],
            want[wrong[0]]
        );
    }
}

/// The Q8_0 blocks, dequantized by candle: IQ4_NL's values exactly; types with one scale per
/// 32 values within f16's rounding of that scale (2⁻¹¹ of a value, or half of f16's smallest
/// step times the integer for a subnormal scale); types with a scale per 16 values within
/// ggml's Q8_0 rounding of the block (half a step of max|x| / 127, plus the f16 rounding of it).
#[test]
fn q8_0_blocks_hold_the_values() {
    let all = fixtures();
    for kind in IQuant::ALL {
        let (bytes, want) = blocks(&all, kind);
        let mut q8 = vec![BlockQ8_0::zeros(); want.len() / 32];
        iquants::to_q8_0(kind, &bytes, &mut q8).unwrap();
        let got: Vec<f32> = QTensor::new(QStorage::Cpu(Box::new(q8)), want.len())
            .unwrap()
            .dequantize(&Device::Cpu)
            .unwrap()
            .to_vec1()
            .unwrap();
        let mut worst = 0f64;
        for (b, (got, want)) in got.chunks(32).zip(want.chunks(32)).enumerate() {
            let amax = want.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            for (j, (&g, &w)) in got.iter().zip(want).enumerate() {
                let err = (g as f64 - w as f64).abs();
                let bound = if kind.exact() {
                    0.0
                } else if kind.one_scale_per_group() {
                    // |value| ≤ 127 steps of the scale: the subnormal case's absolute error is
                    // at most 127 × 2⁻²⁵.
                    (w.abs() as f64 * 2f64.powi(-11)).max(127.0 * 2f64.powi(-25)) * (1.0 + 1e-6)
                } else {
                    amax / 127.0 * (0.5 + 127.0 * 2f64.powi(-11)) + 127.0 * 2f64.powi(-25)
                };
                assert!(
                    err <= bound,
                    "{} group {b} value {j}: {g} from Q8_0, {w} decoded (bound {bound:e})",
                    kind.name()
                );
                if bound > 0.0 {
                    worst = worst.max(err / bound);
                }
            }
        }
        eprintln!("{}: largest error {worst:.2} of its bound", kind.name());
    }
}
