//! Weight products of every GGUF block type on the test device (HYOKA_TEST_DEVICE, dtype
//! HYOKA_TEST_DTYPE), each output held to a bound derived from the arithmetic, against the
//! exact product — the role of llama.cpp's `test-backend-ops` for MUL_MAT, on hyoka's `Matrix`.
//!
//! Few rows (decoding, prompts of ≤ `DECODE_ROWS` tokens) go through quantized kernels that
//! round the activations to 8 bits per block: hyoka's own on the CPU (Q8_0 / Q8_K activations,
//! as llama.cpp's CPU backend), candle's on a GPU (Q8_1, as llama.cpp's CUDA backend). Many
//! rows expand the weights to the compute dtype and run a GEMM. For output i, with the exact
//! product y_i = Σ_j w_ij x_j (f64, on the dequantized weights):
//!   8-bit activations: |Δ| ≤ Σ_j |w_ij| · amax_256(x)_j / 254 (a symmetric 8-bit step is
//!     amax/127 for a block of 32 or 256 values; the 256-value block's amax bounds both), plus
//!     Σ_j |w_ij x_j| · 2^-11 (the Q8_1 scale is an f16);
//!   the compute dtype: x rounded to it, the weights too when expanded, the output rounded:
//!     Σ_j |w_ij x_j| · 2ε + |y_i| · ε (ε = 2^-8 bf16, 2^-11 f16, 0 f32);
//!   summation in f32: Σ_j |w_ij x_j| · K · 2^-24.
//! These bounds hold for every output whatever the data, so they are loose (a kernel uses 5–12%
//! of them on the CPU). The RMS error over all outputs is held to twice what that rounding
//! gives on average (each rounding error uniform over its step: variance step²/12; on the CPU
//! 1.0–1.1× for the K-quants, whose activations are rounded per 256 values as modelled,
//! 0.5–0.7× for the 32-value blocks). A wrong block, sign, scale or min term (errors of the
//! order of the product) fails both; a kernel 2× less exact than the rounding model fails the
//! second; a 1% scale error in the 8-bit products passes (it gives RMS 1.07–1.3×). Both shares
//! are printed per type: on a GPU they say which kernel is less exact than the CPU's. On an
//! H200 (f32/bf16/f16): K-quants 0.5–0.7× (32-value activation blocks: finer than
//! the CPU's 256), Q8_0 0.6–0.7×, but Q4_0/Q5_0 1.3–1.65× and Q4_1/Q5_1 0.9–1.1×, about twice
//! the CPU's: candle's `quantize_q8_1` (llama.cpp's CUDA format) keeps with each block the sum
//! of the activations *before* rounding, and the offset formats apply their offset through that
//! sum, so each activation's rounding error is weighted by the unsigned quant (0..15, 0..31)
//! instead of the centred one (√(E q²/E (q−16)²) = 1.95 for uniform 5-bit quants).

use crate::common;

use candle_core::quantized::{GgmlDType, QTensor, ggml_file::qtensor_from_ggml};
use candle_core::{DType, Device, Tensor};
use hyoka::model::quant::matrix::{DECODE_ROWS, Matrix};
use hyoka::rng::SplitMix64;

const OUT: usize = 64;
const K: usize = 512;
const TYPES: [GgmlDType; 10] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

/// Activations as a model's are: mostly small, a few channels far larger.
fn activations(rows: usize, seed: u64) -> Vec<f32> {
    let mut x = SplitMix64(seed).symmetric_f32s(rows * K);
    for (i, v) in x.iter_mut().enumerate() {
        if i % 97 == 0 {
            *v *= 4.0;
        }
    }
    x
}

/// A random (OUT, K) matrix in `ty`'s blocks: on the CPU, and as a `Matrix` on `device`.
fn random_matrix(ty: GgmlDType, seed: u64, device: &Device) -> (QTensor, Matrix) {
    let w = SplitMix64(seed).symmetric_f32s(OUT * K);
    let w = Tensor::from_vec(w, (OUT, K), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&w, ty).unwrap();
    let on_device = qtensor_from_ggml(ty, &q.data().unwrap(), vec![OUT, K], device).unwrap();
    (q, Matrix::from_qtensor(on_device).unwrap())
}

fn epsilon(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        _ => 0.0,
    }
}

#[test]
fn every_block_type_is_within_its_rounding_of_the_exact_product() {
    let (device, dtype) = (common::device(), common::dtype());
    let eps = epsilon(dtype);
    for (t, &ty) in TYPES.iter().enumerate() {
        let (q, matrix) = random_matrix(ty, 1 + t as u64, &device);
        // The values the blocks hold: what every kernel multiplies.
        let held: Vec<f32> = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let mut worst = (0f64, 0usize);
        let mut worst_rms = (0f64, 0usize);
        for rows in [1, 3, DECODE_ROWS, DECODE_ROWS + 1, 40] {
            let xs = activations(rows, 100 + rows as u64);
            let x = Tensor::from_vec(xs.clone(), (rows, K), &device)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let got: Vec<Vec<f32>> = matrix
                .matmul_t(&x)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec2()
                .unwrap();
            let eight_bit = rows <= DECODE_ROWS;
            let (mut sq, mut model) = (0f64, 0f64);
            for r in 0..rows {
                let xr = &xs[r * K..(r + 1) * K];
                let amax: Vec<f64> = xr
                    .chunks(256)
                    .map(|b| b.iter().fold(0f64, |m, &v| m.max(v.abs() as f64)))
                    .collect();
                for o in 0..OUT {
                    let wr = &held[o * K..(o + 1) * K];
                    let (mut exact, mut abs, mut steps, mut var) = (0f64, 0f64, 0f64, 0f64);
                    for j in 0..K {
                        let (wv, xv) = (wr[j] as f64, xr[j] as f64);
                        exact += wv * xv;
                        abs += (wv * xv).abs();
                        steps += wv.abs() * amax[j / 256] / 254.0;
                        // x and the expanded weight rounded to the dtype, x to 8 bits.
                        var += (wv * xv).powi(2) * 2.0 * eps * eps / 3.0;
                        if eight_bit {
                            var += (wv * amax[j / 256] / 127.0).powi(2) / 12.0;
                        }
                    }
                    var += (exact * eps).powi(2) / 3.0;
                    let mut bound =
                        abs * (2.0 * eps + K as f64 * 2f64.powi(-24)) + exact.abs() * eps + 1e-6;
                    if eight_bit {
                        bound += steps + abs * 2f64.powi(-11);
                    }
                    let d = (got[r][o] as f64 - exact).abs();
                    sq += d * d;
                    model += var;
                    assert!(
                        d <= bound,
                        "{ty:?} {dtype:?} on {device:?}, {rows} rows: row {r} output {o}: |Δ| {d:.3e} > bound {bound:.3e} (exact {exact:.4})"
                    );
                    if d / bound > worst.0 {
                        worst = (d / bound, rows);
                    }
                }
            }
            // f32 with no 8-bit step: the model is ~0 and the per-output bound is the check.
            if model > 0.0 {
                let rms = (sq / model).sqrt();
                assert!(
                    rms <= 2.0,
                    "{ty:?} {dtype:?} on {device:?}, {rows} rows: RMS error {rms:.2}× what rounding gives"
                );
                if rms > worst_rms.0 {
                    worst_rms = (rms, rows);
                }
            }
        }
        eprintln!(
            "{ty:?} {dtype:?}: worst |Δ| {:.2} of its bound ({} rows); RMS {:.2}× the rounding's ({} rows)",
            worst.0, worst.1, worst_rms.0, worst_rms.1
        );
    }
}

/// Decoding several sequences at once (json mode) multiplies with `matvec_t`: on the CPU a row's
/// result must be the same bits whatever the other rows, so that batched answers equal
/// one-at-a-time ones. Not on CUDA, where rows share launches of candle's mat-vec kernel (as the
/// prefill's GEMMs share cuBLAS kernels chosen by shape); there each row is held to its rounding
/// by `every_block_type_is_within_its_rounding_of_the_exact_product` (3, 8, 9 and 40 rows).
#[test]
fn a_rows_decoding_product_does_not_depend_on_the_other_rows() {
    let (device, dtype) = (common::device(), common::dtype());
    if device.is_cuda() {
        eprintln!("skipping: on CUDA a row's decoding product depends on the rows beside it");
        return;
    }
    for (t, &ty) in TYPES.iter().enumerate() {
        let (_, matrix) = random_matrix(ty, 50 + t as u64, &device);
        let rows = 20;
        let x = Tensor::from_vec(activations(rows, 7), (rows, K), &device)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let bits = |t: Tensor| -> Vec<Vec<u32>> {
            t.to_dtype(DType::F32)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
                .into_iter()
                .map(|r| r.into_iter().map(f32::to_bits).collect())
                .collect()
        };
        let together = bits(matrix.matvec_t(&x).unwrap());
        for r in [0, 7, rows - 1] {
            let alone = bits(matrix.matvec_t(&x.narrow(0, r, 1).unwrap()).unwrap());
            assert_eq!(
                alone[0], together[r],
                "{ty:?} {dtype:?} on {device:?}: row {r}"
            );
            let pair = bits(
                matrix
                    .matvec_t(&x.narrow(0, r.min(rows - 2), 2).unwrap())
                    .unwrap(),
            );
            assert_eq!(
                pair[r - r.min(rows - 2)],
                together[r],
                "{ty:?}: row {r} among 2"
            );
        }
    }
}

/// hyoka opens CUDA devices without cudarc's per-allocation events
/// (`device::without_event_tracking`), unless opened for candle's kernels
/// (`device::parse_device_for`).
#[test]
fn cuda_devices_open_without_per_allocation_events() {
    let device = common::device();
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = &device {
        assert!(!d.is_event_tracking(), "event tracking");
        return;
    }
    eprintln!("skipping: {device:?} is not a CUDA device (HYOKA_TEST_DEVICE=cuda)");
}
