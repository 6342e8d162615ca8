//! Decoding products of IQ4_NL and IQ4_XS matrices kept in their blocks (`iq4_rows`), with up
//! to four activation rows per pass over the weights.
//!
//! The activations are rounded to 8 bits as llama.cpp rounds them for each type (its
//! `vec_dot_type`): per 32 values (Q8_0, `block_dots::Q8Rows`) for IQ4_NL, per 256 (Q8_K,
//! `kquant_dots::Q8KRows`) for IQ4_XS. A group's 32 levels are looked up in one instruction from
//! the 16-entry table and multiplied in integers (`maddubs`, the levels' signs moved onto the
//! activations, as llama.cpp's `ggml_vec_dot_iq4_*`).
//! - IQ4_NL: a group's products summed in eight i32 lanes of four, then one fused multiply-add
//!   of (d·dₓ) into eight f32 lanes per group.
//! - IQ4_XS: the groups' integer scales (ls − 32) multiply their products in integers too (one
//!   `madd`), the eight groups of a 256-value block sum in i32 lanes, and one fused
//!   multiply-add of (d·dₓ) per block does the float work: llama.cpp's `ggml_vec_dot_iq4_xs_q8_K`
//!   operation for operation. Through Q8_0 activations each group needed its own float scale
//!   and conversion; this way decoding takes about two thirds of the instructions.
//!
//! The f32 lanes are summed in a fixed order at the end. The portable body does the very same
//! lane operations, so every body gives the same bits, and a row's result never depends on the
//! other rows.

use super::block_dots::{BLOCK, Q8Rows};
use super::iq4_rows::{Iq4Kind, block_scales};
use super::iquant_grids::KVALUES_IQ4NL;
use super::iquants::iq4_xs_sub_scales;
use super::kquant_dots::{Q8KRows, QK_K};
use half::f16;

/// Activation rows rounded to 8 bits the way a kind's products take them.
pub enum Activations {
    /// For IQ4_NL: per 32 values.
    Q8_0(Q8Rows),
    /// For IQ4_XS: per 256 values.
    Q8K(Q8KRows),
}

impl Activations {
    /// `xs`: rows of `cols` values, `cols` a whole number of the kind's blocks.
    pub fn quantize(kind: Iq4Kind, xs: &[f32], cols: usize) -> Self {
        match kind {
            Iq4Kind::Nl => Activations::Q8_0(Q8Rows::quantize(xs, cols, false)),
            Iq4Kind::Xs => Activations::Q8K(Q8KRows::quantize(xs, cols)),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Activations::Q8_0(a) => a.len(),
            Activations::Q8K(a) => a.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Appends w · x_r for every row of `xs` (in order) to `out`; `w` is one weight row's blocks and
/// `xs` quantized for its kind (`Activations::quantize`).
pub type DotRows = fn(Iq4Kind, &[u8], &Activations, &mut Vec<f32>);

/// The kernel for this machine, chosen once per product.
pub fn dot_rows_kernel() -> DotRows {
    #[cfg(target_arch = "x86_64")]
    if super::block_dots::has_avx2_fma_f16c() {
        // SAFETY: the features the kernel is compiled for were just detected.
        return |kind, w, xs, out| unsafe { avx2::dot_rows(kind, w, xs, out) };
    }
    dot_rows_portable
}

/// The kernel without SIMD: the AVX2 body's operations one lane at a time.
pub fn dot_rows_portable(kind: Iq4Kind, w: &[u8], xs: &Activations, out: &mut Vec<f32>) {
    match (kind, xs) {
        (Iq4Kind::Nl, Activations::Q8_0(a)) => {
            let cols = a.values().len() / a.len().max(1);
            for r in 0..a.len() {
                let q = &a.values()[r * cols..(r + 1) * cols];
                let d = &a.scales()[r * cols / BLOCK..(r + 1) * cols / BLOCK];
                let mut acc = [0f32; 8];
                for (g, block) in w.chunks_exact(18).enumerate() {
                    let sum = group_lanes(&block[2..18], &q[g * BLOCK..]);
                    let sd = block_scales(kind, block)[0] * d[g];
                    for (acc, p) in acc.iter_mut().zip(sum) {
                        *acc = sd.mul_add(p as f32, *acc);
                    }
                }
                out.push(lanes_sum(acc));
            }
        }
        (Iq4Kind::Xs, Activations::Q8K(a)) => {
            let blocks = a.cols() / QK_K;
            for r in 0..a.len() {
                let mut acc = [0f32; 8];
                for (b, block) in w.chunks_exact(136).enumerate() {
                    let at = r * blocks + b;
                    let q = &a.values()[at * QK_K..(at + 1) * QK_K];
                    let mut sumi = [0i32; 8];
                    for (ib, ls) in iq4_xs_sub_scales(block).into_iter().enumerate() {
                        let sum = group_lanes(&block[8 + 16 * ib..], &q[ib * BLOCK..]);
                        for (s, p) in sumi.iter_mut().zip(sum) {
                            *s += ls * p;
                        }
                    }
                    let d = f16::from_le_bytes([block[0], block[1]]).to_f32() * a.scales()[at];
                    for (acc, s) in acc.iter_mut().zip(sumi) {
                        *acc = d.mul_add(s as f32, *acc);
                    }
                }
                out.push(lanes_sum(acc));
            }
        }
        _ => panic!("{kind:?} products given activations rounded for the other kind"),
    }
}

/// A group's level·activation products summed in eight lanes of four consecutive values (the
/// i32 lanes of `maddubs` then `madd`); `nibbles`: its 16 bytes, `q`: its 32 activations.
fn group_lanes(nibbles: &[u8], q: &[i8]) -> [i32; 8] {
    let level = |j: usize| {
        let b = nibbles[j % 16];
        i32::from(KVALUES_IQ4NL[usize::from(if j < 16 { b & 0xf } else { b >> 4 })])
    };
    std::array::from_fn(|l| (4 * l..4 * l + 4).map(|j| level(j) * i32::from(q[j])).sum())
}

/// Eight lanes summed as `avx2::lanes_sum` sums them.
fn lanes_sum(a: [f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Activations, BLOCK, Iq4Kind, Q8KRows, Q8Rows, QK_K};
    use crate::model::block_dots::avx2::{PREFETCH_BYTES, f16_lanes};
    use crate::model::iq4_rows::avx2::{levels, table};
    use crate::model::iquants::iq4_xs_sub_scales;
    use crate::model::kquant_dots::avx2::prefetch_ahead;
    use std::arch::x86_64::*;

    /// Activation rows that share one unpacking of a weight block.
    const ROWS_PER_LOAD: usize = 4;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn dot_rows(kind: Iq4Kind, w: &[u8], xs: &Activations, out: &mut Vec<f32>) {
        let mut r = 0;
        while r < xs.len() {
            let take = (xs.len() - r).min(ROWS_PER_LOAD);
            let sums = match (kind, xs, take) {
                (Iq4Kind::Nl, Activations::Q8_0(a), 4) => nl::<4>(w, a, r),
                (Iq4Kind::Nl, Activations::Q8_0(a), 3) => nl::<3>(w, a, r),
                (Iq4Kind::Nl, Activations::Q8_0(a), 2) => nl::<2>(w, a, r),
                (Iq4Kind::Nl, Activations::Q8_0(a), _) => nl::<1>(w, a, r),
                (Iq4Kind::Xs, Activations::Q8K(a), 4) => xs_rows::<4>(w, a, r),
                (Iq4Kind::Xs, Activations::Q8K(a), 3) => xs_rows::<3>(w, a, r),
                (Iq4Kind::Xs, Activations::Q8K(a), 2) => xs_rows::<2>(w, a, r),
                (Iq4Kind::Xs, Activations::Q8K(a), _) => xs_rows::<1>(w, a, r),
                _ => panic!("{kind:?} products given activations rounded for the other kind"),
            };
            out.extend_from_slice(&sums[..take]);
            r += take;
        }
    }

    /// Σ over a group of level·y in eight i32 lanes of four (before any scale): `maddubs`
    /// multiplies unsigned by signed bytes, so the levels give it their magnitudes and move
    /// their signs onto the activations.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn products(magnitudes: __m256i, levels: __m256i, y: &[i8]) -> __m256i {
        assert!(y.len() >= BLOCK);
        // SAFETY: 32 readable bytes (asserted).
        let y = unsafe { _mm256_loadu_si256(y.as_ptr() as *const __m256i) };
        _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(y, levels))
    }

    /// Each row's eight lanes summed as `super::lanes_sum` sums them.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn row_sums<const R: usize>(acc: [__m256; R]) -> [f32; ROWS_PER_LOAD] {
        let mut out = [0f32; ROWS_PER_LOAD];
        for (o, a) in out.iter_mut().zip(acc) {
            let mut lanes = [0f32; 8];
            // SAFETY: eight floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
            *o = super::lanes_sum(lanes);
        }
        out
    }

    /// Rows first.. first + R of activations held as `values` (`cols` a row) and `scales`
    /// (`per_row` a row).
    #[allow(clippy::type_complexity)]
    fn rows<'a, const R: usize>(
        values: &'a [i8],
        scales: &'a [f32],
        cols: usize,
        per_row: usize,
        first: usize,
    ) -> ([&'a [i8]; R], [&'a [f32]; R]) {
        (
            std::array::from_fn(|r| &values[(first + r) * cols..][..cols]),
            std::array::from_fn(|r| &scales[(first + r) * per_row..][..per_row]),
        )
    }

    /// Rows first.. first + R of `xs` times an IQ4_NL weight row (Q8_0 activations).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn nl<const R: usize>(w: &[u8], xs: &Q8Rows, first: usize) -> [f32; ROWS_PER_LOAD] {
        let cols = xs.values().len() / xs.len().max(1);
        let groups = cols / BLOCK;
        assert_eq!(
            w.len(),
            Iq4Kind::Nl.row_bytes(cols),
            "a row of the activations' length"
        );
        let (q, d) = rows::<R>(xs.values(), xs.scales(), cols, groups, first);
        let table = table();
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        for (g, block) in w.chunks_exact(18).enumerate() {
            // One line ahead per block: blocks are read one after another.
            _mm_prefetch::<_MM_HINT_T0>(block.as_ptr().wrapping_add(PREFETCH_BYTES) as *const i8);
            // d in eight lanes (`f16_lanes`: a scalar read would wait for the accumulator).
            let dw = f16_lanes(block, 0);
            let levels = levels(table, &block[2..]);
            let magnitudes = _mm256_sign_epi8(levels, levels);
            for r in 0..R {
                let p = products(magnitudes, levels, &q[r][g * BLOCK..]);
                let p = _mm256_madd_epi16(p, ones);
                let sd = _mm256_mul_ps(dw, _mm256_set1_ps(d[r][g]));
                acc[r] = _mm256_fmadd_ps(sd, _mm256_cvtepi32_ps(p), acc[r]);
            }
        }
        row_sums(acc)
    }

    /// Rows first.. first + R of `xs` times an IQ4_XS weight row (Q8_K activations).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn xs_rows<const R: usize>(w: &[u8], xs: &Q8KRows, first: usize) -> [f32; ROWS_PER_LOAD] {
        let (cols, blocks) = (xs.cols(), xs.cols() / QK_K);
        assert_eq!(
            w.len(),
            Iq4Kind::Xs.row_bytes(cols),
            "a row of the activations' length"
        );
        let (q, d) = rows::<R>(xs.values(), xs.scales(), cols, blocks, first);
        let table = table();
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, block) in w.chunks_exact(136).enumerate() {
            prefetch_ahead(block);
            let ls = iq4_xs_sub_scales(block);
            let mut sumi = [_mm256_setzero_si256(); R];
            for (ib, &ls) in ls.iter().enumerate() {
                let levels = levels(table, &block[8 + 16 * ib..]);
                let magnitudes = _mm256_sign_epi8(levels, levels);
                let scale = _mm256_set1_epi16(ls as i16);
                for r in 0..R {
                    let p = products(magnitudes, levels, &q[r][b * QK_K + ib * BLOCK..]);
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, scale));
                }
            }
            let dw = f16_lanes(block, 0);
            for r in 0..R {
                let dd = _mm256_mul_ps(dw, _mm256_set1_ps(d[r][b]));
                acc[r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            }
        }
        row_sums(acc)
    }
}
