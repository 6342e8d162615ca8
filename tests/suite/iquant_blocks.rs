//! llama.cpp's i-quant blocks decoded by hyoka (`model::iquants`) against gguf-py's decoding
//! (llama.cpp's Python package, NumPy code written apart from ggml's C; fixtures:
//! scripts/fixtures/make_iquant_fixtures.py), and the Q8_0 (or Q5_0) blocks they are held in, read back by
//! candle's own Q8_0 dequantization.

use crate::common;

use candle_core::quantized::k_quants::BlockQ8_0;
use candle_core::quantized::{GgmlType, QStorage, QTensor};
use candle_core::{Device, Tensor};
use hyoka::model::quant::formats::iquant_held;
use hyoka::model::quant::formats::iquants::{self, IQuant};
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
        iquant_held::to_q8_0(kind, &bytes, &mut q8).unwrap();
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

/// IQ3_S and IQ1_S are held as Q5_0 (`IQuant::held_as`): candle's Q5_0 dequantization of those
/// blocks gives the Q8_0 blocks' values bit for bit (the same integers and f16 scales, which the
/// test above bounds against gguf-py's), in 22 bytes per 32 values instead of 34; a type whose
/// integers do not fit is refused.
#[test]
fn q5_0_blocks_hold_the_q8_0_values() {
    use candle_core::quantized::{GgmlDType, ggml_file::qtensor_from_ggml};
    let all = fixtures();
    let held: Vec<IQuant> = IQuant::ALL
        .into_iter()
        .filter(|k| k.held_as() == GgmlDType::Q5_0)
        .collect();
    assert_eq!(held, [IQuant::Iq1S, IQuant::Iq3S]);
    for kind in held {
        let (bytes, want) = blocks(&all, kind);
        let mut q8 = vec![BlockQ8_0::zeros(); want.len() / 32];
        iquant_held::to_q8_0(kind, &bytes, &mut q8).unwrap();
        let from_q8: Vec<f32> = QTensor::new(QStorage::Cpu(Box::new(q8)), want.len())
            .unwrap()
            .dequantize(&Device::Cpu)
            .unwrap()
            .to_vec1()
            .unwrap();
        let mut q5 = vec![0u8; want.len() / 32 * iquant_held::Q5_0_BYTES];
        iquant_held::to_q5_0(kind, &bytes, &mut q5).unwrap();
        let from_q5: Vec<f32> =
            qtensor_from_ggml(GgmlDType::Q5_0, &q5, vec![want.len()], &Device::Cpu)
                .unwrap()
                .dequantize(&Device::Cpu)
                .unwrap()
                .to_vec1()
                .unwrap();
        let wrong = from_q5
            .iter()
            .zip(&from_q8)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            wrong,
            0,
            "{}: {wrong} values differ from Q8_0's",
            kind.name()
        );
    }
    let (bytes, want) = blocks(&all, IQuant::Iq3Xxs);
    let mut q5 = vec![0u8; want.len() / 32 * iquant_held::Q5_0_BYTES];
    assert!(iquant_held::to_q5_0(IQuant::Iq3Xxs, &bytes, &mut q5).is_err());
}
