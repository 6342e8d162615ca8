//! Decoding products of i-quant matrices kept in their blocks (`iq_rows`: all nine i-quants),
//! with up to four activation rows per pass over the weights.
//!
//! The activations are rounded to 8 bits as llama.cpp rounds them for each type (its
//! `vec_dot_type`): per 32 values (Q8_0, `block_dots::Q8Rows`) for IQ4_NL, per 256 (Q8_K,
//! `kquant_dots::Q8KRows`) for the others. A group's 32 weights are unpacked into magnitudes
//! and signs — IQ4's levels looked up in one instruction from the 16-entry table, IQ3's eight
//! grid entries of four magnitudes (IQ2's four of eight) read by index with their 32 sign bits
//! spread over the bytes, IQ1's integers 8·grid ± 1 — and multiplied in integers (`maddubs`, the
//! signs moved onto the activations, as llama.cpp's `ggml_vec_dot_iq*_q8_*`).
//! - IQ4_NL: a group's products summed in eight i32 lanes of four, then one fused multiply-add
//!   of (d·dₓ) into eight f32 lanes per group.
//! - The others: the groups' integer sub-scales (ls − 32; 1 + 2s; 2s + 1 — for IQ2_XS, IQ2_S
//!   and IQ1_M one for each 16 values) multiply their products in integers too (one `madd`),
//!   the eight groups of a 256-value block sum in i32 lanes, and one fused multiply-add of
//!   (unit·dₓ: d, d/4 or d/8, `iquants::unit_scale`) per block does the float work: llama.cpp's
//!   kernels operation for operation (but IQ1's ±1/8 shift, inside its integers here, not a
//!   second sum). Through Q8_0 activations each group needed its own float scale and
//!   conversion; this way decoding takes about two thirds of the instructions.
//!
//! What the groups of a block share is read once a block: their sub-scales, unpacked in vector
//! lanes into one vector of sixteen i16 from which a `vpshufb` takes each group's pair
//! (`iq_rows::avx2::sub_scale_halves`), IQ1_M's indices and shift signs
//! (`iq_rows::avx2::BlockIndex`) and d; the parity-completed sign sets of IQ3_XXS, IQ2_XXS and
//! IQ2_XS come whole from a table of 128 (llama.cpp's `keven_signs_q2xs`), and the groups are
//! taken two at a time. One thread, one activation row, against llama.cpp's own kernels in the
//! same run (`scripts/bench/bench_iq_kernels.sh`): 0.82–1.29× its speed, IQ1_S and IQ1_M the
//! slowest.
//!
//! The f32 lanes are summed in a fixed order at the end. The portable body does the very same
//! lane operations, so every body gives the same bits, and a row's result never depends on the
//! other rows.

use crate::model::quant::cpu::block_dots::Q8Rows;
use crate::model::quant::cpu::iq_rows::sub_scales;
use crate::model::quant::cpu::kquant_dots::{Q8KRows, QK_K};
use crate::model::quant::formats::iquants::{IQuant, block_groups, unit_scale};
use crate::model::quant::formats::legacy::BLOCK;

pub use crate::model::quant::formats::activations::Activations;

impl Activations {
    /// `xs`: rows of `cols` values, `cols` a whole number of the kind's blocks.
    pub fn quantize(kind: IQuant, xs: &[f32], cols: usize) -> Self {
        match kind {
            IQuant::Iq4Nl => Activations::Q8_0(Q8Rows::quantize(xs, cols, false)),
            _ => Activations::Q8K(Q8KRows::quantize(xs, cols)),
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
pub type IQuantDotRows = fn(IQuant, &[u8], &Activations, &mut Vec<f32>);

/// The kernel for this machine (the table of `kernels` asks once per process).
pub fn dot_rows_kernel() -> IQuantDotRows {
    #[cfg(target_arch = "x86_64")]
    if crate::model::backend::cpu::features().avx2_fma_f16c {
        // SAFETY: the features the kernel is compiled for were just detected.
        return |kind, w, xs, out| unsafe { avx2::dot_rows(kind, w, xs, out) };
    }
    dot_rows_portable
}

/// The kernel without SIMD: the AVX2 body's operations one lane at a time.
pub fn dot_rows_portable(kind: IQuant, w: &[u8], xs: &Activations, out: &mut Vec<f32>) {
    let (_, bytes) = kind.block_shape();
    let mut acc = vec![[0f32; 8]; xs.len()];
    match (kind, xs) {
        (IQuant::Iq4Nl, Activations::Q8_0(a)) => {
            let cols = a.values().len() / a.len().max(1);
            for (g, block) in w.chunks_exact(bytes).enumerate() {
                let weights = &block_groups(kind, block)[0].q;
                let dw = unit_scale(kind, block);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let sum = group_lanes(weights, &a.values()[r * cols + g * BLOCK..]);
                    let sd = dw * a.scales()[r * cols / BLOCK + g];
                    for (acc, p) in acc.iter_mut().zip(sum) {
                        *acc = sd.mul_add(p as f32, *acc);
                    }
                }
            }
        }
        (_, Activations::Q8K(a)) if kind != IQuant::Iq4Nl => {
            let blocks = a.cols() / QK_K;
            for (b, block) in w.chunks_exact(bytes).enumerate() {
                let groups = block_groups(kind, block);
                let subs = sub_scales(kind, block);
                let dw = unit_scale(kind, block);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let at = r * blocks + b;
                    let q = &a.values()[at * QK_K..(at + 1) * QK_K];
                    let mut sumi = [0i32; 8];
                    for (ib, (group, s)) in groups.iter().zip(subs).enumerate() {
                        let sum = group_lanes(&group.q, &q[ib * BLOCK..]);
                        // Lanes 0..4 hold values 0..16, lanes 4..8 values 16..32.
                        for (l, (sumi, p)) in sumi.iter_mut().zip(sum).enumerate() {
                            *sumi += s[l / 4] * p;
                        }
                    }
                    let d = dw * a.scales()[at];
                    for (acc, s) in acc.iter_mut().zip(sumi) {
                        *acc = d.mul_add(s as f32, *acc);
                    }
                }
            }
        }
        _ => panic!("{kind:?} products given activations rounded for another kind"),
    }
    out.extend(acc.into_iter().map(lanes_sum));
}

/// A group's weight·activation products summed in eight lanes of four consecutive values (the
/// i32 lanes of `maddubs` then `madd`); `weights`: its 32 integers, `q`: its 32 activations.
fn group_lanes(weights: &[i8; 32], q: &[i8]) -> [i32; 8] {
    std::array::from_fn(|l| {
        (4 * l..4 * l + 4)
            .map(|j| i32::from(weights[j]) * i32::from(q[j]))
            .sum()
    })
}

/// Eight lanes summed as `avx2::lanes_sum` sums them.
fn lanes_sum(a: [f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Activations, BLOCK, IQuant, Q8KRows, Q8Rows, QK_K};
    use crate::model::quant::cpu::block_dots::avx2::{PREFETCH_BYTES, prefetch_ahead};
    use crate::model::quant::cpu::iq_rows::avx2::{
        BlockIndex, group_factors, sub_scale_halves, table, unit_lanes,
    };
    use std::arch::x86_64::*;

    /// Activation rows that share one unpacking of a weight block.
    const ROWS_PER_LOAD: usize = 4;

    /// `f::<take>` (`f::<take, K>`) of the arguments, `take` a number of rows up to four.
    macro_rules! by_rows {
        ($take:expr, $f:ident, ($($arg:expr),*)) => {
            match $take {
                4 => $f::<4>($($arg),*),
                3 => $f::<3>($($arg),*),
                2 => $f::<2>($($arg),*),
                _ => $f::<1>($($arg),*),
            }
        };
        ($take:expr, $f:ident, $k:literal, ($($arg:expr),*)) => {
            match $take {
                4 => $f::<4, $k>($($arg),*),
                3 => $f::<3, $k>($($arg),*),
                2 => $f::<2, $k>($($arg),*),
                _ => $f::<1, $k>($($arg),*),
            }
        };
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn dot_rows(kind: IQuant, w: &[u8], xs: &Activations, out: &mut Vec<f32>) {
        let mut r = 0;
        while r < xs.len() {
            let take = (xs.len() - r).min(ROWS_PER_LOAD);
            let sums = match (xs, kind) {
                (Activations::Q8_0(a), IQuant::Iq4Nl) => by_rows!(take, nl, (w, a, r)),
                (Activations::Q8K(a), IQuant::Iq4Xs) => by_rows!(take, k_rows, 0, (w, a, r)),
                (Activations::Q8K(a), IQuant::Iq3S) => by_rows!(take, k_rows, 1, (w, a, r)),
                (Activations::Q8K(a), IQuant::Iq3Xxs) => by_rows!(take, k_rows, 2, (w, a, r)),
                (Activations::Q8K(a), IQuant::Iq2Xxs) => by_rows!(take, k_rows, 3, (w, a, r)),
                (Activations::Q8K(a), IQuant::Iq2Xs) => by_rows!(take, k_rows, 4, (w, a, r)),
                (Activations::Q8K(a), IQuant::Iq2S) => by_rows!(take, k_rows, 5, (w, a, r)),
                (Activations::Q8K(a), IQuant::Iq1S) => by_rows!(take, k_rows, 6, (w, a, r)),
                (Activations::Q8K(a), IQuant::Iq1M) => by_rows!(take, k_rows, 7, (w, a, r)),
                _ => panic!("{kind:?} products given activations rounded for another kind"),
            };
            out.extend_from_slice(&sums[..take]);
            r += take;
        }
    }

    /// Σ over a group of weight·y in eight i32 lanes of four (before any scale): `maddubs`
    /// multiplies unsigned by signed bytes, so the weights give it their magnitudes and move
    /// their signs (`signs`: bytes of the weights' signs, none zero) onto the activations.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn products(magnitudes: __m256i, signs: __m256i, y: &[i8]) -> __m256i {
        assert!(y.len() >= BLOCK);
        // SAFETY: 32 readable bytes (asserted).
        let y = unsafe { _mm256_loadu_si256(y.as_ptr() as *const __m256i) };
        _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(y, signs))
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
            IQuant::Iq4Nl.row_bytes(cols),
            "a row of the activations' length"
        );
        let (q, d) = rows::<R>(xs.values(), xs.scales(), cols, groups, first);
        let table = table();
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        for (g, block) in w.chunks_exact(18).enumerate() {
            // One line ahead per block: blocks are read one after another.
            _mm_prefetch::<_MM_HINT_T0>(block.as_ptr().wrapping_add(PREFETCH_BYTES) as *const i8);
            let dw = unit_lanes(IQuant::Iq4Nl, block);
            let none = &BlockIndex::NONE;
            let (magnitudes, signs) = group_factors(IQuant::Iq4Nl, table, block, none, 0);
            for r in 0..R {
                let p = products(magnitudes, signs, &q[r][g * BLOCK..]);
                let p = _mm256_madd_epi16(p, ones);
                let sd = _mm256_mul_ps(dw, _mm256_set1_ps(d[r][g]));
                acc[r] = _mm256_fmadd_ps(sd, _mm256_cvtepi32_ps(p), acc[r]);
            }
        }
        row_sums(acc)
    }

    /// The kinds `k_rows` takes, by number (a const parameter cannot be an enum).
    const KINDS: [IQuant; 8] = [
        IQuant::Iq4Xs,
        IQuant::Iq3S,
        IQuant::Iq3Xxs,
        IQuant::Iq2Xxs,
        IQuant::Iq2Xs,
        IQuant::Iq2S,
        IQuant::Iq1S,
        IQuant::Iq1M,
    ];

    /// Rows first.. first + R of `xs` times a weight row of `KINDS[K]` (Q8_K activations). Each
    /// its own function (not inlined into `dot_rows`): the figures below were measured so.
    #[inline(never)]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn k_rows<const R: usize, const K: usize>(
        w: &[u8],
        xs: &Q8KRows,
        first: usize,
    ) -> [f32; ROWS_PER_LOAD] {
        let kind = KINDS[K];
        let (_, bytes) = kind.block_shape();
        let (cols, blocks) = (xs.cols(), xs.cols() / QK_K);
        assert_eq!(
            w.len(),
            kind.row_bytes(cols),
            "a row of the activations' length"
        );
        let (q, d) = rows::<R>(xs.values(), xs.scales(), cols, blocks, first);
        let table = table();
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, block) in w.chunks_exact(bytes).enumerate() {
            prefetch_ahead(block);
            let halves = sub_scale_halves(kind, block);
            let y: [&[i8; QK_K]; R] = std::array::from_fn(|r| {
                q[r][b * QK_K..][..QK_K]
                    .try_into()
                    .expect("a block of activations")
            });
            let prepared = BlockIndex::of(kind, block);
            let mut sumi = [_mm256_setzero_si256(); R];
            let mut group = |ib: usize| {
                let (magnitudes, signs) = group_factors(kind, table, block, &prepared, ib);
                // i16 lanes 0..8 are the pair sums of values 0..16, lanes 8..16 of 16..32.
                let pick = _mm256_set1_epi16((0x0202 * ib + 0x0100) as i16);
                let scale = _mm256_shuffle_epi8(halves, pick);
                for r in 0..R {
                    let p = products(magnitudes, signs, &y[r][ib * BLOCK..]);
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, scale));
                }
            };
            // Two groups at a time, their table reads overlapping: 1.2–1.5× faster for 4 rows
            // (0.21–0.29 ns a weight) — but for IQ3_XXS, whose four rows then took 0.63 ns a
            // weight against 0.35 one at a time (one thread, 4096 × 14336).
            if kind == IQuant::Iq3Xxs {
                for ib in 0..8 {
                    group(ib);
                }
            } else {
                for ib in (0..8).step_by(2) {
                    group(ib);
                    group(ib + 1);
                }
            }
            let dw = unit_lanes(kind, block);
            for r in 0..R {
                let dd = _mm256_mul_ps(dw, _mm256_set1_ps(d[r][b]));
                acc[r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            }
        }
        row_sums(acc)
    }
}
