//! Products in f32 with weight rows expanded a few at a time: the kernels behind `token_runs` (a
//! decoding step's runs of several tokens).
//!
//! A task expands a handful of weight rows into a buffer that stays in cache (candle's
//! `to_float` values: what `Matrix::expand` gives; the block types eight values per
//! instruction) and multiplies them with every activation row, tiles of rows × weight rows held
//! in registers. Each product is one chain of fused multiply-adds in 16 (AVX-512) or 8 lanes
//! over the inner dimension, summed across lanes in a fixed order: the same operations whatever
//! the tile, so a row's result does not depend on the other rows.

use crate::model::quant::cpu::iq_rows;
use crate::model::quant::cpu::kquant_dots::KQuantKind;
use crate::model::quant::formats::block_format::BlockFormat;
use crate::model::quant::formats::legacy::{BLOCK, BlockKind};
use candle_core::quantized::k_quants::{self, GgmlType};
use candle_core::{Result, bail};

/// One weight row's values in f32 (`bytes`: the row's blocks of `format`), exactly candle's
/// `to_float` of its blocks.
pub fn expand_row(format: BlockFormat, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    match format {
        BlockFormat::Legacy(kind) => {
            if bytes.len() != kind.row_bytes(out.len()) || !out.len().is_multiple_of(BLOCK) {
                bail!(
                    "a {kind:?} row of {} bytes for {} values",
                    bytes.len(),
                    out.len()
                );
            }
            #[cfg(target_arch = "x86_64")]
            if crate::model::backend::cpu::features().avx2_fma_f16c {
                // SAFETY: the features it is compiled for were just detected; the sizes match.
                unsafe { crate::model::quant::cpu::block_dots::avx2::expand(kind, bytes, out) };
                return Ok(());
            }
            match kind {
                BlockKind::Q4_0 => candle_row::<k_quants::BlockQ4_0>(bytes, out),
                BlockKind::Q4_1 => candle_row::<k_quants::BlockQ4_1>(bytes, out),
                BlockKind::Q5_0 => candle_row::<k_quants::BlockQ5_0>(bytes, out),
                BlockKind::Q5_1 => candle_row::<k_quants::BlockQ5_1>(bytes, out),
                BlockKind::Q8_0 => candle_row::<k_quants::BlockQ8_0>(bytes, out),
            }
        }
        BlockFormat::IQuant(kind) => iq_rows::expand_row(kind, bytes, out),
        BlockFormat::KQuant(kind)
            if crate::model::quant::cpu::kquant_expand::expand(kind, bytes, out) =>
        {
            Ok(())
        }
        BlockFormat::KQuant(kind) => match kind {
            KQuantKind::Q2K => candle_row::<k_quants::BlockQ2K>(bytes, out),
            KQuantKind::Q3K => candle_row::<k_quants::BlockQ3K>(bytes, out),
            KQuantKind::Q4K => candle_row::<k_quants::BlockQ4K>(bytes, out),
            KQuantKind::Q5K => candle_row::<k_quants::BlockQ5K>(bytes, out),
            KQuantKind::Q6K => candle_row::<k_quants::BlockQ6K>(bytes, out),
        },
    }
}

/// candle's own conversion of a row's blocks (`bytes`: a slice of its `Vec<T>` storage).
fn candle_row<T: GgmlType>(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let size = std::mem::size_of::<T>();
    let blocks = out.len() / T::BLCK_SIZE;
    if !out.len().is_multiple_of(T::BLCK_SIZE)
        || bytes.len() != blocks * size
        || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    {
        bail!(
            "{:?}: a row of {} bytes for {} values",
            T::DTYPE,
            bytes.len(),
            out.len()
        );
    }
    // SAFETY: whole aligned blocks of candle's storage (checked above); its block types are
    // plain numbers, valid for any bits.
    let blocks: &[T] = unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, blocks) };
    T::to_float(blocks, out);
    Ok(())
}

/// `part[c·n + r] = x_r · w_c` for the n rows of k values in `xs` and the rows of `ws`.
pub type Dots = fn(xs: &[f32], ws: &[f32], k: usize, part: &mut [f32]);

/// The kernel for this machine (the table of `kernels` asks once per process).
pub fn kernel() -> Dots {
    #[cfg(target_arch = "x86_64")]
    {
        let cpu = crate::model::backend::cpu::features();
        if cpu.avx512 {
            // SAFETY (both): the features the kernels are compiled for were just detected.
            return |xs, ws, k, part| unsafe { avx512::dots(xs, ws, k, part) };
        }
        if cpu.avx2_fma {
            return |xs, ws, k, part| unsafe { avx2::dots(xs, ws, k, part) };
        }
    }
    portable
}

/// Without SIMD: each product in eight lanes (`dot_lanes`).
pub fn portable(xs: &[f32], ws: &[f32], k: usize, part: &mut [f32]) {
    let n = xs.len() / k;
    for (c, w) in ws.chunks_exact(k).enumerate() {
        for (r, x) in xs.chunks_exact(k).enumerate() {
            part[c * n + r] = crate::model::quant::cpu::f32_dots::dot_lanes(x, w);
        }
    }
}

/// Activation rows per pass over a task's weight rows: about 512 KB of them, so that they and
/// the weight rows stay in a core's L2 cache.
fn rows_per_pass(k: usize) -> usize {
    (131_072 / k.max(1)).max(4)
}

/// Tiles of R activation rows × C weight rows, over every row and weight row; `tile` gives one
/// tile's products (each the same whatever R and C).
macro_rules! tiled {
    ($xs:expr, $ws:expr, $k:expr, $part:expr, $r:literal, $c:literal, $tile:ident) => {{
        let (xs, ws, k, part): (&[f32], &[f32], usize, &mut [f32]) = ($xs, $ws, $k, $part);
        let n = xs.len() / k;
        let w_rows = ws.len() / k;
        assert!(k.is_multiple_of(16) && part.len() >= n * w_rows);
        for pass in (0..n).step_by(crate::model::quant::cpu::expanded_dots::rows_per_pass(k)) {
            let pass_end =
                (pass + crate::model::quant::cpu::expanded_dots::rows_per_pass(k)).min(n);
            for c0 in (0..w_rows).step_by($c) {
                let cs = (w_rows - c0).min($c);
                for r0 in (pass..pass_end).step_by($r) {
                    let rs = (pass_end - r0).min($r);
                    let mut x: [&[f32]; $r] = [&[]; $r];
                    for (i, x) in x.iter_mut().enumerate() {
                        *x = &xs[(r0 + i.min(rs - 1)) * k..][..k];
                    }
                    let mut w: [&[f32]; $c] = [&[]; $c];
                    for (j, w) in w.iter_mut().enumerate() {
                        *w = &ws[(c0 + j.min(cs - 1)) * k..][..k];
                    }
                    let sums = $tile(x, w);
                    for j in 0..cs {
                        for i in 0..rs {
                            part[(c0 + j) * n + r0 + i] = sums[i][j];
                        }
                    }
                }
            }
        }
    }};
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;
    use std::cell::RefCell;

    /// A tile: R activation rows × C weight rows, 24 accumulators in registers.
    const R: usize = 4;
    const C: usize = 6;
    /// Inner values per chunk: a tile's weight rows (C × 2 KB) stay in L1 while every
    /// activation row of the pass goes by; the activation rows' chunk (rows × 2 KB) in L2.
    /// Held whole, a row of the MLP's down projection (4,864 values, 19 KB) left neither in
    /// L1, and the kernel waited on L2 (216 of 420 GFLOP/s on the Zen 5 class EPYC).
    const KC: usize = 512;
    /// Activation rows per pass: their chunks (256 KB) and accumulators (192 KB with 24
    /// weight rows) stay in L2.
    const PASS: usize = 128;

    thread_local! {
        /// The accumulators of a pass between chunks, kept per thread across calls.
        static LANES: RefCell<Vec<__m512>> = const { RefCell::new(Vec::new()) };
    }

    /// Every product is one chain of 16-lane fused multiply-adds over k, in order, summed
    /// across lanes at the end: the accumulators are stored between chunks as they are, so
    /// the chunks change what is in cache, not the arithmetic.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub fn dots(xs: &[f32], ws: &[f32], k: usize, part: &mut [f32]) {
        let n = xs.len() / k;
        let w_rows = ws.len() / k;
        assert!(k.is_multiple_of(16) && part.len() >= n * w_rows && w_rows > 0);
        let groups = w_rows.div_ceil(C);
        LANES.with_borrow_mut(|lanes| {
            for pass in (0..n).step_by(PASS) {
                let pass_end = (pass + PASS).min(n);
                let tiles = (pass_end - pass).div_ceil(R);
                // Not cleared: the first chunk starts every accumulator from zero.
                if lanes.len() < tiles * groups * R * C {
                    lanes.resize(tiles * groups * R * C, _mm512_setzero_ps());
                }
                for k0 in (0..k).step_by(KC) {
                    let k1 = (k0 + KC).min(k);
                    for g in 0..groups {
                        let c0 = g * C;
                        let cs = (w_rows - c0).min(C);
                        let mut w: [&[f32]; C] = [&[]; C];
                        for (j, w) in w.iter_mut().enumerate() {
                            *w = &ws[(c0 + j.min(cs - 1)) * k..][k0..k1];
                        }
                        for t in 0..tiles {
                            let r0 = pass + t * R;
                            let rs = (pass_end - r0).min(R);
                            let mut x: [&[f32]; R] = [&[]; R];
                            for (i, x) in x.iter_mut().enumerate() {
                                *x = &xs[(r0 + i.min(rs - 1)) * k..][k0..k1];
                            }
                            let at = (t * groups + g) * R * C;
                            tile(x, w, &mut lanes[at..at + R * C], k0 == 0);
                        }
                    }
                }
                for t in 0..tiles {
                    let r0 = pass + t * R;
                    let rs = (pass_end - r0).min(R);
                    for g in 0..groups {
                        let c0 = g * C;
                        let cs = (w_rows - c0).min(C);
                        let at = (t * groups + g) * R * C;
                        for i in 0..rs {
                            for j in 0..cs {
                                part[(c0 + j) * n + r0 + i] = sum_lanes(lanes[at + i * C + j]);
                            }
                        }
                    }
                }
            }
        });
    }

    /// acc[i·C + j] += x_i · w_j lane by lane over one chunk (from zero for the first);
    /// edge tiles repeat their last row (the same operations, results not kept).
    #[target_feature(enable = "avx512f,avx2,fma")]
    fn tile(xs: [&[f32]; R], ws: [&[f32]; C], lanes: &mut [__m512], first: bool) {
        let len = ws[0].len();
        assert!(xs.iter().chain(&ws).all(|v| v.len() == len) && len.is_multiple_of(16));
        assert_eq!(lanes.len(), R * C);
        // Plain loops: a closure would not inherit the target features (nor inline them).
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        if !first {
            for i in 0..R {
                for j in 0..C {
                    acc[i][j] = lanes[i * C + j];
                }
            }
        }
        let mut at = 0;
        while at < len {
            let mut x = [_mm512_setzero_ps(); R];
            for i in 0..R {
                // SAFETY: at + 16 ≤ len, the length of every row (asserted).
                x[i] = unsafe { _mm512_loadu_ps(xs[i].as_ptr().add(at)) };
            }
            for j in 0..C {
                // SAFETY: as above.
                let w = unsafe { _mm512_loadu_ps(ws[j].as_ptr().add(at)) };
                for i in 0..R {
                    acc[i][j] = _mm512_fmadd_ps(x[i], w, acc[i][j]);
                }
            }
            at += 16;
        }
        for i in 0..R {
            for j in 0..C {
                lanes[i * C + j] = acc[i][j];
            }
        }
    }

    /// The 16 lanes summed in a fixed order: the high eight added to the low eight, then
    /// `avx2::hsum`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    fn sum_lanes(a: __m512) -> f32 {
        let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a)));
        super::avx2::hsum(_mm256_add_ps(_mm512_castps512_ps256(a), high))
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    const R: usize = 4;
    const C: usize = 3;

    #[target_feature(enable = "avx2,fma")]
    pub fn dots(xs: &[f32], ws: &[f32], k: usize, part: &mut [f32]) {
        tiled!(xs, ws, k, part, 4, 3, tile)
    }

    #[target_feature(enable = "avx2,fma")]
    fn tile(xs: [&[f32]; R], ws: [&[f32]; C]) -> [[f32; C]; R] {
        let k = ws[0].len();
        assert!(xs.iter().chain(&ws).all(|v| v.len() == k) && k.is_multiple_of(8));
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut at = 0;
        while at < k {
            let mut w = [_mm256_setzero_ps(); C];
            for j in 0..C {
                // SAFETY: at + 8 ≤ k, the length of every row (asserted).
                w[j] = unsafe { _mm256_loadu_ps(ws[j].as_ptr().add(at)) };
            }
            for i in 0..R {
                // SAFETY: as above.
                let x = unsafe { _mm256_loadu_ps(xs[i].as_ptr().add(at)) };
                for j in 0..C {
                    acc[i][j] = _mm256_fmadd_ps(x, w[j], acc[i][j]);
                }
            }
            at += 8;
        }
        let mut sums = [[0f32; C]; R];
        for i in 0..R {
            for j in 0..C {
                sums[i][j] = hsum(acc[i][j]);
            }
        }
        sums
    }

    /// The eight lanes summed in a fixed order.
    #[target_feature(enable = "avx2,fma")]
    pub fn hsum(x: __m256) -> f32 {
        let res = _mm_add_ps(_mm256_extractf128_ps::<1>(x), _mm256_castps256_ps128(x));
        let res = _mm_add_ps(res, _mm_movehl_ps(res, res));
        let res = _mm_add_ss(res, _mm_movehdup_ps(res));
        _mm_cvtss_f32(res)
    }
}

/// x · w as the AVX-512 kernels compute it (here and `attention_products`), emulated with
/// `f32::mul_add`: one chain of fused multiply-adds per lane (element i in lane i mod 16), the
/// high eight lanes added to the low eight, then ((0+4)+(2+6)) + ((1+5)+(3+7)).
#[cfg(test)]
pub(crate) fn lane_chain_dot(x: &[f32], w: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    for (i, (&a, &b)) in x.iter().zip(w).enumerate() {
        lanes[i % 16] = a.mul_add(b, lanes[i % 16]);
    }
    let l: Vec<f32> = (0..8).map(|i| lanes[i] + lanes[i + 8]).collect();
    let q: Vec<f32> = (0..4).map(|i| l[i] + l[i + 4]).collect();
    (q[0] + q[2]) + (q[1] + q[3])
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    fn random(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
        let mut rng = crate::rng::SplitMix64(seed);
        (0..rows * cols)
            .map(|_| (rng.next_f64() as f32 - 0.4) * 3.0)
            .collect()
    }

    /// Every block type's rows expand to the values candle's `dequantize` gives, to the bit.
    #[test]
    fn rows_expand_to_candles_values() -> anyhow::Result<()> {
        let (rows, cols) = (5, 512);
        let w = Tensor::from_vec(random(rows, cols, 3), (rows, cols), &Device::Cpu)?;
        for dtype in [
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
        ] {
            let q = QTensor::quantize(&w, dtype)?;
            let want: Vec<f32> = q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1()?;
            let data = q.data()?;
            let row_bytes = data.len() / rows;
            let mut got = vec![0f32; rows * cols];
            for (r, out) in got.chunks_exact_mut(cols).enumerate() {
                let bytes = &data[r * row_bytes..(r + 1) * row_bytes];
                let format = BlockFormat::of(dtype).expect("a block or K-quant type");
                expand_row(format, bytes, out)?;
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{dtype:?}");
        }
        Ok(())
    }

    /// Each kernel: every product within rounding of an f64 dot product, and the same bits
    /// whether its row is multiplied alone, in a full tile, or at any place of a larger batch.
    #[test]
    fn products_do_not_depend_on_the_other_rows() {
        // Small, and (AVX-512) across chunks of the inner dimension, passes of rows and
        // partial tiles of both.
        for (k, n, w_rows) in [(160, 11, 7), (1040, 133, 13)] {
            products_of_shape_do_not_depend_on_the_other_rows(k, n, w_rows);
        }
    }

    fn products_of_shape_do_not_depend_on_the_other_rows(k: usize, n: usize, w_rows: usize) {
        let xs = random(n, k, 4);
        let ws = random(w_rows, k, 5);
        let mut kernels: Vec<(&str, Dots)> = vec![("machine", kernel()), ("portable", portable)];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            kernels.push(("avx2", |xs, ws, k, part| unsafe {
                avx2::dots(xs, ws, k, part)
            }));
        }
        for (name, dots) in kernels {
            let mut all = vec![0f32; n * w_rows];
            dots(&xs, &ws, k, &mut all);
            for r in 0..n {
                let x = &xs[r * k..(r + 1) * k];
                for c in 0..w_rows {
                    let w = &ws[c * k..(c + 1) * k];
                    let exact: f64 = x.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum();
                    let got = all[c * n + r];
                    assert!(
                        (got as f64 - exact).abs() < 1e-4,
                        "{name}: {got} vs {exact}"
                    );
                    let mut alone = [0f32];
                    dots(x, w, k, &mut alone);
                    assert_eq!(
                        alone[0].to_bits(),
                        got.to_bits(),
                        "{name}: row {r}, column {c}"
                    );
                }
            }
        }
    }

    /// The AVX-512 kernel's products are, to the bit, one chain of 16-lane fused
    /// multiply-adds over the inner dimension in order, the high eight lanes then added to the
    /// low eight, then the eight summed as `avx2::hsum` does ((0+4)+(2+6)) + ((1+5)+(3+7)):
    /// whatever the chunks, passes and tiles it is cut into (emulated here with f32::mul_add).
    #[test]
    fn the_avx512_kernel_is_one_chain_per_product() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let (k, n, w_rows) = (1040, 133, 13);
        let xs = random(n, k, 6);
        let ws = random(w_rows, k, 7);
        let mut got = vec![0f32; n * w_rows];
        // SAFETY: avx512f was just detected (the kernel also needs avx2 and fma, which it
        // implies on every CPU that has it).
        unsafe { avx512::dots(&xs, &ws, k, &mut got) };
        for r in 0..n {
            let x = &xs[r * k..(r + 1) * k];
            for c in 0..w_rows {
                let want = lane_chain_dot(x, &ws[c * k..(c + 1) * k]);
                assert_eq!(
                    got[c * n + r].to_bits(),
                    want.to_bits(),
                    "row {r}, column {c}"
                );
            }
        }
    }
}
