//! Decoding products of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 matrices in integers, on activations rounded
//! to 8 bits: llama.cpp's and candle's quantized products, for several sequences at once.
//!
//! A decoding step multiplies a handful of activation rows by every weight row. Expanding the
//! weights to f32 costs a conversion per value and four bytes of cache traffic per product;
//! llama.cpp instead rounds each activation row to 8-bit blocks (`Q8_0`, or `Q8_1` with the
//! block sums for the types with a minimum) and multiplies 32 integer pairs per instruction.
//! These are those kernels, with AVX2 bodies for every type (candle's Q4_1/Q5_0/Q5_1 products
//! are scalar loops) and an AVX-512 VNNI body where the CPU has one (`avx2`). One activation row
//! (a batch-1 step) is multiplied by eight weight rows at once, one per lane, each activation
//! block loaded once for the eight — llama.cpp gets there by repacking eight rows' blocks
//! together; here they stay as stored; several activation rows by one weight row at a time,
//! each weight block unpacked once for up to eight of them. Whatever the body and the other
//! rows, every pair of rows gets candle's reference loop (`vec_dot_unopt`) to the bit: per
//! block the exact integer sum, then sum += sumi·d·dₓ (+ m·sₓ).

mod blocks;
mod portable;

pub use blocks::Q8Rows;
pub(crate) use blocks::read_f16;
pub use portable::dot_rows_portable;

use crate::model::quant::formats::legacy::BlockKind;

/// Appends w_v · x_r for every weight row v of `w` (whole rows of `xs`' columns, one after
/// another) and every row r of `xs`, in (v, r) order, to `out`.
pub type LegacyDotRows = fn(BlockKind, &[u8], &Q8Rows, &mut Vec<f32>);

/// The kernel for this machine (the table of `kernels` asks once per process).
pub fn dot_rows_kernel() -> LegacyDotRows {
    #[cfg(target_arch = "x86_64")]
    if crate::model::backend::cpu::features().avx512_vnni {
        // SAFETY: the features the kernel is compiled for were just detected.
        return |kind, w, xs, out| unsafe { avx2::dot_rows_vnni(kind, w, xs, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::model::backend::cpu::features().avx2_fma_f16c {
        // SAFETY: the features the kernel is compiled for were just detected.
        return |kind, w, xs, out| unsafe { avx2::dot_rows(kind, w, xs, out) };
    }
    dot_rows_portable
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::quant::candle_products::candle_product_by_row;
    use crate::model::quant::cpu::act_rounding::Rounding;
    use crate::model::quant::formats::legacy::BLOCK;
    use candle_core::quantized::GgmlDType;
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};
    use half::f16;

    /// Random weights (offset, so that Q4_1/Q5_1's minimum matters), quantized by candle: each
    /// row's products are those of candle's own quantized matrix product on that row alone (its
    /// 8-bit activations and kernels), for 1 to 9 rows at once (a load of eight where VNNI runs,
    /// and one more), on rows of 4 and 6 blocks
    /// (candle's debug builds refuse odd block counts for Q4_1): to the bit on the portable
    /// kernel where candle runs its reference loop (Q4_1/Q5_0/Q5_1), within float rounding
    /// otherwise (AVX2 sums the blocks in eight lanes, as llama.cpp and candle's AVX kernels).
    /// Every body this CPU runs is checked, not only the one it picks; and a row's products do
    /// not change by a bit with the other rows.
    #[test]
    fn products_are_candles_row_by_row() {
        for cols in [128, 192] {
            products_match_candle(cols, &bodies());
        }
    }

    /// Every body this CPU runs, not only the one it picks.
    fn bodies() -> Vec<(&'static str, LegacyDotRows)> {
        let mut kernels = vec![
            ("machine", dot_rows_kernel()),
            ("portable", dot_rows_portable as LegacyDotRows),
        ];
        #[cfg(target_arch = "x86_64")]
        if crate::model::backend::cpu::features().avx2_fma_f16c {
            // SAFETY: the features the kernel is compiled for were just detected.
            kernels.push(("avx2", |kind, w, xs, out| unsafe {
                avx2::dot_rows(kind, w, xs, out)
            }));
        }
        #[cfg(target_arch = "x86_64")]
        if crate::model::backend::cpu::features().avx512_vnni {
            // SAFETY: as above.
            kernels.push(("vnni", |kind, w, xs, out| unsafe {
                avx2::dot_rows_vnni(kind, w, xs, out)
            }));
        }
        kernels
    }

    /// Every body, for a task's weight rows at once (two groups of eight and three more) and 1
    /// to 9 activation rows, gives for each pair of rows exactly what candle's reference loop
    /// (`GgmlType::vec_dot_unopt`, called here on candle's own blocks) gives: one activation
    /// row takes the kernel across eight weight rows, several the kernel across activation
    /// rows, and neither may change a bit. Weights of 2·randn + 0.4 put values at both ends of
    /// every type's range; the activations include `awkward_rows`' ±127 and zero blocks.
    #[test]
    fn every_body_is_candles_reference_loop_to_the_bit() {
        use candle_core::quantized::k_quants::{
            BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, GgmlType,
        };
        fn check<T: GgmlType>(kind: BlockKind, kernels: &[(&str, LegacyDotRows)]) {
            let (cols, out) = (256, 19);
            let w: Vec<f32> = Tensor::randn(0.2f32, 2.0, out * cols, &Device::Cpu)
                .unwrap()
                .to_vec1()
                .unwrap();
            let xs = awkward_rows(cols, 9);
            let blocks = cols / BLOCK;
            let mut w_blocks = vec![T::zeros(); out * blocks];
            for (row, b) in w.chunks_exact(cols).zip(w_blocks.chunks_exact_mut(blocks)) {
                T::from_float(row, b);
            }
            assert_eq!(std::mem::size_of::<T>(), kind.block_bytes());
            // SAFETY: candle's blocks are plain bytes (repr(C), sizes asserted by candle and
            // above); read as u8, whose alignment any address has.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    w_blocks.as_ptr() as *const u8,
                    w_blocks.len() * kind.block_bytes(),
                )
            };
            let want: Vec<Vec<f32>> = xs
                .chunks_exact(cols)
                .map(|x| {
                    let mut ys = vec![T::VecDotType::zeros(); blocks];
                    T::VecDotType::from_float(x, &mut ys);
                    w_blocks
                        .chunks_exact(blocks)
                        .map(|wb| T::vec_dot_unopt(cols, wb, &ys))
                        .collect()
                })
                .collect();
            for n in 1..=9 {
                let first = 9 - n;
                let rows = Q8Rows::quantize(&xs[first * cols..], cols, kind.has_min());
                for &(name, kernel) in kernels {
                    let mut got = Vec::new();
                    kernel(kind, bytes, &rows, &mut got);
                    assert_eq!(got.len(), out * n, "{kind:?} {name}");
                    for v in 0..out {
                        for r in 0..n {
                            let (g, e) = (got[v * n + r], want[first + r][v]);
                            assert_eq!(
                                g.to_bits(),
                                e.to_bits(),
                                "{kind:?} {name}, {n} rows: weight row {v}, row {r}: {g} for {e}"
                            );
                        }
                    }
                }
            }
        }
        let kernels = bodies();
        check::<BlockQ4_0>(BlockKind::Q4_0, &kernels);
        check::<BlockQ4_1>(BlockKind::Q4_1, &kernels);
        check::<BlockQ5_0>(BlockKind::Q5_0, &kernels);
        check::<BlockQ5_1>(BlockKind::Q5_1, &kernels);
        check::<BlockQ8_0>(BlockKind::Q8_0, &kernels);
    }

    /// The VNNI body gives the AVX2 body's bits (the same integer lanes, the same float
    /// operations), every type, 1 to 9 rows; with the pairs at their extreme for Q8_0 (weight
    /// bytes −128 and 127, which no quantizer writes but a file may hold, against activations
    /// ±127): a body whose pair sums saturated or summed other lanes would differ.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_vnni_body_gives_the_avx2_bits() {
        if !crate::model::backend::cpu::features().avx512_vnni {
            eprintln!("no AVX-512 VNNI on this CPU: nothing to compare");
            return;
        }
        let (cols, out) = (256, 5);
        let mut xs = awkward_rows(cols, 9);
        // The last row: ±127 everywhere (its scale is 1).
        for (i, v) in xs[8 * cols..].iter_mut().enumerate() {
            *v = if i % 3 == 0 { -127.0 } else { 127.0 };
        }
        let w = Tensor::randn(0f32, 1.0, (out, cols), &Device::Cpu).unwrap();
        for dtype in BLOCK_TYPES {
            let kind = BlockKind::of(dtype).unwrap();
            let mut data = QTensor::quantize(&w, dtype)
                .unwrap()
                .data()
                .unwrap()
                .to_vec();
            let row_bytes = kind.row_bytes(cols);
            if kind == BlockKind::Q8_0 {
                // Weight row 0's quantized bytes (after each block's f16 scale): −128 then 127
                // in alternate blocks.
                for (b, block) in data[..row_bytes]
                    .chunks_exact_mut(kind.block_bytes())
                    .enumerate()
                {
                    block[2..].fill(if b % 2 == 0 { 0x80 } else { 0x7F });
                }
            }
            // Up to nine rows: a whole load of eight and one left, and every smaller load.
            for n in 1..=9 {
                let rows = Q8Rows::quantize(&xs[(9 - n) * cols..], cols, kind.has_min());
                for v in 0..out {
                    let weights = &data[v * row_bytes..(v + 1) * row_bytes];
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    // SAFETY: both bodies' features were detected (`avx512_vnni`).
                    unsafe {
                        avx2::dot_rows(kind, weights, &rows, &mut a);
                        avx2::dot_rows_vnni(kind, weights, &rows, &mut b);
                    }
                    let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&a), bits(&b), "{dtype:?} n={n} weight row {v}");
                }
            }
        }
    }

    /// The block types multiplied here, as candle names them.
    pub(crate) const BLOCK_TYPES: [GgmlDType; 5] = [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
    ];

    /// Activation rows with the cases rounding gets wrong: values exactly halfway between two
    /// integers once scaled (amax 127: the scale is 1), ties of magnitude of either sign, an
    /// all-zero block, and random rows.
    pub(crate) fn awkward_rows(cols: usize, rows: usize) -> Vec<f32> {
        let mut xs: Vec<f32> = Tensor::randn(0f32, 1.0, rows * cols, &Device::Cpu)
            .unwrap()
            .to_vec1()
            .unwrap();
        for (i, v) in xs[..cols].iter_mut().enumerate() {
            *v = match i % 32 {
                0 => 127.0,
                j => (j as f32 - 16.0) * 4.0 + 0.5,
            };
        }
        if rows > 1 {
            for (i, v) in xs[cols..2 * cols].iter_mut().enumerate() {
                let sign = if i < cols / 2 { 1.0 } else { -1.0 };
                *v = sign
                    * match i % 7 {
                        0 => -3.0,
                        3 => 3.0,
                        _ => (i % 5) as f32 * 0.25 - 0.5,
                    };
            }
            xs[cols..cols + 32].fill(0.0);
        }
        xs
    }

    /// The activations' bytes are candle's `BlockQ8_0` / `BlockQ8_1` (its reference
    /// `from_float`), on the kernel this machine runs and on the portable loop.
    #[test]
    fn activations_round_as_candles() {
        let (cols, n) = (256, 4);
        let xs = awkward_rows(cols, n);
        let t = Tensor::from_vec(xs.clone(), (n, cols), &Device::Cpu).unwrap();
        for (dtype, sums) in [(GgmlDType::Q8_0, false), (GgmlDType::Q8_1, true)] {
            let want = QTensor::quantize(&t, dtype)
                .unwrap()
                .data()
                .unwrap()
                .to_vec();
            let bytes = if sums { 36 } else { 34 };
            for (name, rows) in [
                ("machine", Q8Rows::quantize(&xs, cols, sums)),
                (
                    "portable",
                    Q8Rows::quantize_with(&xs, cols, sums, Rounding::PORTABLE),
                ),
            ] {
                for (b, block) in want.chunks_exact(bytes).enumerate() {
                    let at = |i: usize| f16::from_le_bytes([block[i], block[i + 1]]).to_f32();
                    let qs: Vec<i8> = block[bytes - 32..].iter().map(|&q| q as i8).collect();
                    assert_eq!(
                        &rows.qs[b * 32..(b + 1) * 32],
                        &qs[..],
                        "{dtype:?} {name} {b}"
                    );
                    assert_eq!(
                        rows.d[b].to_bits(),
                        at(0).to_bits(),
                        "{dtype:?} {name} d {b}"
                    );
                    if sums {
                        assert_eq!(rows.s[b].to_bits(), at(2).to_bits(), "{name} s {b}");
                    }
                }
            }
        }
    }

    fn products_match_candle(cols: usize, kernels: &[(&str, LegacyDotRows)]) {
        let out = 9;
        let dev = Device::Cpu;
        let w = (Tensor::randn(0f32, 1.0, (out, cols), &dev).unwrap() + 0.3).unwrap();
        let x = Tensor::randn(0f32, 1.0, (9, cols), &dev).unwrap();
        let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        for dtype in BLOCK_TYPES {
            let q = std::sync::Arc::new(QTensor::quantize(&w, dtype).unwrap());
            let kind = BlockKind::of(dtype).unwrap();
            let data = q.data().unwrap();
            let row_bytes = kind.row_bytes(cols);
            assert_eq!(data.len(), out * row_bytes);
            let want = candle_product_by_row(&q, &x);
            // Each activation row rounded alone, once.
            let alone: Vec<Q8Rows> = (0..9)
                .map(|r| Q8Rows::quantize(&xs[r * cols..(r + 1) * cols], cols, kind.has_min()))
                .collect();
            for n in 1..=9 {
                let rows = Q8Rows::quantize(&xs[..n * cols], cols, kind.has_min());
                for &(name, kernel) in kernels {
                    let product = |v: usize, rows: &Q8Rows| {
                        let mut got = Vec::new();
                        kernel(
                            kind,
                            &data[v * row_bytes..(v + 1) * row_bytes],
                            rows,
                            &mut got,
                        );
                        got
                    };
                    // v indexes the weight rows and the reference's columns alike.
                    #[allow(clippy::needless_range_loop)]
                    for v in 0..out {
                        let got = product(v, &rows);
                        for (r, &g) in got.iter().enumerate() {
                            let e = want[r][v];
                            // Every body is candle's reference loop, which candle runs
                            // for these (it has AVX2 products for Q4_0 and Q8_0).
                            let exact =
                                matches!(kind, BlockKind::Q4_1 | BlockKind::Q5_0 | BlockKind::Q5_1);
                            let tol = if exact { 0.0 } else { 1e-4 + 1e-5 * e.abs() };
                            assert!(
                                (g - e).abs() <= tol,
                                "{dtype:?} {name} cols={cols} n={n} row {r} out {v}: {g} vs {e}"
                            );
                            // A row gets exactly what it gets alone (batching changes no bit).
                            let one = product(v, &alone[r]);
                            assert_eq!(g.to_bits(), one[0].to_bits(), "{dtype:?} {name} n={n}");
                        }
                    }
                }
            }
        }
    }
}
