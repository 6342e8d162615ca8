//! I-quant matrices (all nine types) kept in their blocks (`model::iq_rows`): their values
//! against gguf-py's decoding of the same blocks (llama.cpp's NumPy code; fixtures:
//! scripts/fixtures/make_iquant_fixtures.py), their decoding products (`model::iq_dots`) against those
//! values times the activations rounded as ggml rounds them for each type (computed here, in
//! f64: `quantize_row_q8_0_ref` for IQ4_NL, `quantize_row_q8_K_ref` for the others),
//! and the matrix's products through `Matrix` against the same matrix given as its f32 values.

use crate::common;

use candle_core::{DType, Device, Tensor};
use half::f16;
use hyoka::model::quant::IqMatrix;
use hyoka::model::quant::cpu::iq_dots::{self, Activations};
use hyoka::model::quant::formats::iquants::IQuant;
use hyoka::model::quant::matrix::{Matrix, Products};
use std::sync::Arc;

const KINDS: [IQuant; 9] = IQuant::ALL;

/// (blocks' bytes, gguf-py's values) of one type: 64 blocks.
fn blocks(kind: IQuant) -> (Vec<u8>, Vec<f32>) {
    let path = common::fixtures().join("iquants/blocks.safetensors");
    let all = candle_core::safetensors::load(path, &Device::Cpu).unwrap();
    let name = kind.name();
    let get = |what: &str| all[&format!("{name}.{what}")].flatten_all().unwrap();
    (
        get("blocks").to_vec1().unwrap(),
        get("values").to_vec1().unwrap(),
    )
}

/// The fixture's blocks as a matrix of `rows` rows.
fn matrix(kind: IQuant, rows: usize) -> (IqMatrix, Vec<f32>) {
    let (bytes, values) = blocks(kind);
    let cols = values.len() / rows;
    (IqMatrix::new(kind, rows, cols, bytes).unwrap(), values)
}

/// Activations of varied sizes: rows whose magnitudes differ by 10⁴ across blocks.
fn activations(n: usize, cols: usize) -> Vec<f32> {
    let mut rng = hyoka::rng::SplitMix64(7);
    let xs = rng.symmetric_f32s(n * cols);
    xs.iter()
        .enumerate()
        .map(|(i, x)| x * [1.0f32, 1e-2, 30.0, 0.5][(i / 32) % 4])
        .collect()
}

/// ggml's `quantize_row_q8_0_ref` of one row: per 32 values d = max|x| / 127 kept as f16,
/// q = round(x / d); returned as the values q·f16(d) in f64.
fn q8_0_values(x: &[f32]) -> Vec<f64> {
    x.chunks(32)
        .flat_map(|b| {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let d16 = f64::from(f16::from_f32(d).to_f32());
            b.iter()
                .map(move |&v| (v * id).round() as f64 * d16)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// ggml's `quantize_row_q8_K_ref` of one row: per 256 values, m the first value of largest
/// magnitude, q = min(127, nearest_int(−127/m · x)) (ties to even), d = 1 / (−127/m); returned
/// as the values q·d in f64.
fn q8_k_values(x: &[f32]) -> Vec<f64> {
    x.chunks(256)
        .flat_map(|b| {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let max = b.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0);
            if amax == 0.0 {
                return vec![0.0; b.len()];
            }
            let iscale = -127f32 / max;
            let d = f64::from(1.0 / iscale);
            b.iter()
                .map(|&v| ((iscale * v).round_ties_even().min(127.0)) as f64 * d)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The activations as `kind`'s products take them, in f64.
fn rounded_values(kind: IQuant, x: &[f32]) -> Vec<f64> {
    match kind {
        IQuant::Iq4Nl => q8_0_values(x),
        _ => q8_k_values(x),
    }
}

/// Expanding a row gives gguf-py's values to the bit, by row and through the whole matrix.
#[test]
fn expansion_is_gguf_pys_values() {
    for kind in KINDS {
        let (m, want) = matrix(kind, 4);
        let mut got = vec![0f32; want.len()];
        m.expand_into(&mut got).unwrap();
        let wrong = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(wrong, 0, "{kind:?}: {wrong} values differ from gguf-py's");
        let (_, cols) = m.dims();
        let row2 = m.rows_f32(&[2]).unwrap();
        assert_eq!(row2, want[2 * cols..3 * cols].to_vec(), "{kind:?} row 2");
    }
}

/// Decoding products: each is Σ w·x̂ over gguf-py's values w and the activations x̂ as ggml rounds
/// them to 8 bits for the type (f64 here), within the f32 summation's rounding; the SIMD body gives the
/// portable body's bits; and a row's result is the same alone or among others.
#[test]
fn products_are_the_values_times_rounded_activations() {
    for kind in KINDS {
        for rows in [2usize, 8] {
            let (m, w) = matrix(kind, rows);
            let (_, cols) = m.dims();
            let n = 6;
            let xs = activations(n, cols);
            let acts = Activations::quantize(kind, &xs, cols);
            let row_bytes = kind.row_bytes(cols);
            let kernel = iq_dots::dot_rows_kernel();
            for v in 0..rows {
                let wrow = &m.data()[v * row_bytes..(v + 1) * row_bytes];
                let (mut fast, mut portable) = (Vec::new(), Vec::new());
                kernel(kind, wrow, &acts, &mut fast);
                iq_dots::dot_rows_portable(kind, wrow, &acts, &mut portable);
                assert_eq!(fast.len(), n);
                let same = fast
                    .iter()
                    .zip(&portable)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{kind:?} row {v}: {fast:?} against {portable:?}");
                for r in 0..n {
                    let x = rounded_values(kind, &xs[r * cols..(r + 1) * cols]);
                    let wv = &w[v * cols..(v + 1) * cols];
                    let want: f64 = wv.iter().zip(&x).map(|(&a, b)| a as f64 * b).sum();
                    let size: f64 = wv.iter().zip(&x).map(|(&a, b)| (a as f64 * b).abs()).sum();
                    let err = (fast[r] as f64 - want).abs();
                    assert!(
                        err <= 1e-5 * size + 1e-30,
                        "{kind:?} row {v} × {r}: {} against {want} (Σ|w·x| {size})",
                        fast[r]
                    );
                    let alone = Activations::quantize(kind, &xs[r * cols..(r + 1) * cols], cols);
                    let mut one = Vec::new();
                    kernel(kind, wrow, &alone, &mut one);
                    assert_eq!(
                        one[0].to_bits(),
                        fast[r].to_bits(),
                        "{kind:?} {v} × {r} alone"
                    );
                }
            }
        }
    }
}

/// Through `Matrix`: many rows (prefill) give exactly the product of the same values held as an
/// f32 matrix; few rows and row-wise products give `dots_t`'s integer products, within the
/// activations' rounding of the f32 product; embedding rows are the values.
#[test]
fn matrix_products_match_the_f32_matrix() {
    let dev = Device::Cpu;
    for kind in KINDS {
        let (m, w) = matrix(kind, 8);
        let (rows, cols) = m.dims();
        let stored = Matrix::Iq(Arc::new(m));
        let dense = Matrix::Dense(Tensor::from_vec(w.clone(), (rows, cols), &dev).unwrap());
        let x = Tensor::from_vec(activations(40, cols), (40, cols), &dev).unwrap();
        let many = |m: &Matrix| -> Vec<f32> {
            m.matmul_t(&x)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap()
        };
        assert_eq!(many(&stored), many(&dense), "{kind:?}: prefill products");
        let few = x.narrow(0, 0, 3).unwrap();
        let want: Vec<f32> = dense
            .matmul_t(&few)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for products in [Products::ByRowCount, Products::RowWise] {
            let got: Vec<f32> = stored
                .product(&few, products.into())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                // 8-bit activations: half a step of max|x| / 127 per value.
                let v = i % rows;
                let bound: f32 = (0..cols)
                    .map(|j| w[v * cols + j].abs() * 30.0 / 127.0)
                    .sum::<f32>()
                    * 0.5;
                assert!(
                    (g - e).abs() <= bound,
                    "{kind:?} {products:?} {i}: {g} against {e}"
                );
            }
        }
        let ids = Tensor::new(&[5u32, 1], &dev).unwrap();
        let got: Vec<f32> = stored
            .rows(&ids, DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let want: Vec<f32> = [&w[5 * cols..6 * cols], &w[cols..2 * cols]].concat();
        assert_eq!(got, want, "{kind:?}: rows");
    }
}

/// Sizes that are not whole blocks are refused, not read past.
#[test]
fn partial_blocks_are_refused() {
    let (bytes, _) = blocks(IQuant::Iq4Xs);
    assert!(IqMatrix::new(IQuant::Iq4Xs, 4, 8192, bytes.clone()).is_err());
    assert!(IqMatrix::new(IQuant::Iq4Xs, 4, 100, bytes).is_err());
}
