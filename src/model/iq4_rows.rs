//! IQ4_NL and IQ4_XS matrices kept in their blocks on the CPU, with their own products.
//!
//! Read into Q8_0 (`iquants`), an IQ4_XS matrix takes 8.5 bits a weight instead of 4.25: the
//! synthetic IQ4_XS Llama-3.1-8B judged 10 items in 9.96 GB, 2.9 GB over the budget for
//! its file. Here those matrices stay as the file stores them, and:
//! - prefill expands a matrix into f32 values that are ggml's `dequantize_row_iq4_{nl,xs}` to the
//!   bit (a group's scale — d, or d·(ls − 32) in f32 — times a level of the non-linear table):
//!   the expanded model's numbers;
//! - decoding multiplies the levels in integers with the activations rounded to 8 bits per 32
//!   (Q8_0, `block_dots::Q8Rows`), the 32 levels of a group looked up in one instruction from the
//!   16-entry table (the shuffle of llama.cpp's `ggml_vec_dot_iq4_*`). A group's 32 products are
//!   summed in eight i32 lanes of four, scaled by (scale·dₓ) into eight f32 lanes with one fused
//!   multiply-add, and the lanes summed in a fixed order at the end. The portable body does
//!   those very operations, so every body gives the same bits and a row's result never depends
//!   on the other rows.
//!
//! The other i-quants (grids of 3–9 bit indices and sign sets) stay read into Q8_0; so do IQ4
//! matrices on a GPU.

use super::block_dots::{BLOCK, Q8Rows};
use super::iquant_grids::KVALUES_IQ4NL;
use super::iquants::IQuant;
use candle_core::{Result, bail};
use half::f16;
use rayon::prelude::*;

/// The two i-quants whose values are a scale per 32 times a level of IQ4's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Iq4Kind {
    /// 18 bytes per 32 values: d (f16), 16 bytes of nibbles.
    Nl,
    /// 136 bytes per 256 values: d (f16), the high bits of eight 6-bit scales (u16), their low
    /// nibbles (4 bytes), 128 bytes of nibbles; group i's scale is d·(lsᵢ − 32).
    Xs,
}

impl Iq4Kind {
    pub fn of(kind: IQuant) -> Option<Self> {
        match kind {
            IQuant::Iq4Nl => Some(Iq4Kind::Nl),
            IQuant::Iq4Xs => Some(Iq4Kind::Xs),
            _ => None,
        }
    }

    pub fn iquant(self) -> IQuant {
        match self {
            Iq4Kind::Nl => IQuant::Iq4Nl,
            Iq4Kind::Xs => IQuant::Iq4Xs,
        }
    }

    /// Bytes of a row of `cols` values (a whole number of blocks).
    pub fn row_bytes(self, cols: usize) -> usize {
        let kind = self.iquant();
        cols / kind.block_values() * kind.block_bytes()
    }
}

/// Calls `f(g, scale, nibbles)` for each 32-value group g of a row, in order: value j of the
/// group is `scale · KVALUES_IQ4NL[nibble]`, the low nibble of byte j for j < 16, the high one of
/// byte j − 16 after. The scale is ggml's float: d, or d·(ls − 32).
#[inline(always)]
pub(super) fn for_groups(kind: Iq4Kind, row: &[u8], mut f: impl FnMut(usize, f32, &[u8; 16])) {
    let half = |b: &[u8], at: usize| f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
    let nibbles = |b: &[u8], at: usize| -> [u8; 16] {
        b[at..at + 16].try_into().expect("16 bytes of nibbles")
    };
    match kind {
        Iq4Kind::Nl => {
            for (g, block) in row.chunks_exact(18).enumerate() {
                f(g, half(block, 0), &nibbles(block, 2));
            }
        }
        Iq4Kind::Xs => {
            for (b, block) in row.chunks_exact(136).enumerate() {
                let (d, scales_h) = (half(block, 0), u16::from_le_bytes([block[2], block[3]]));
                for ib in 0..8 {
                    let low = (block[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
                    let high = ((scales_h >> (2 * ib)) & 3) as u8;
                    let ls = i32::from(low | high << 4);
                    f(
                        8 * b + ib,
                        d * (ls - 32) as f32,
                        &nibbles(block, 8 + 16 * ib),
                    );
                }
            }
        }
    }
}

/// A row's values in f32 (`out`: the row's length), ggml's to the bit.
pub fn expand_row(kind: Iq4Kind, row: &[u8], out: &mut [f32]) -> Result<()> {
    if row.len() != kind.row_bytes(out.len()) || !out.len().is_multiple_of(BLOCK) {
        bail!(
            "an {} row of {} bytes for {} values",
            kind.iquant().name(),
            row.len(),
            out.len()
        );
    }
    #[cfg(target_arch = "x86_64")]
    if super::block_dots::has_avx2_fma_f16c() {
        // SAFETY: the features it is compiled for were just detected; the sizes match.
        unsafe { avx2::expand(kind, row, out) };
        return Ok(());
    }
    for_groups(kind, row, |g, scale, nibbles| {
        let y = &mut out[g * BLOCK..(g + 1) * BLOCK];
        for (j, &b) in nibbles.iter().enumerate() {
            y[j] = scale * f32::from(KVALUES_IQ4NL[usize::from(b & 0xf)]);
            y[j + 16] = scale * f32::from(KVALUES_IQ4NL[usize::from(b >> 4)]);
        }
    });
    Ok(())
}

/// A (rows, cols) IQ4_NL or IQ4_XS matrix in its blocks, row after row, in host memory.
pub struct Iq4Matrix {
    kind: Iq4Kind,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl Iq4Matrix {
    pub fn new(kind: Iq4Kind, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self> {
        let block = kind.iquant().block_values();
        if !cols.is_multiple_of(block) || data.len() != rows * kind.row_bytes(cols) {
            bail!(
                "{} matrix {rows}×{cols}: {} bytes are not its whole {block}-value blocks",
                kind.iquant().name(),
                data.len()
            );
        }
        Ok(Iq4Matrix {
            kind,
            rows,
            cols,
            data,
        })
    }

    pub fn kind(&self) -> Iq4Kind {
        self.kind
    }

    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    fn row(&self, r: usize) -> &[u8] {
        let b = self.kind.row_bytes(self.cols);
        &self.data[r * b..(r + 1) * b]
    }

    /// The whole matrix in f32 into `out` (rows × cols), rows spread over the threads.
    pub fn expand_into(&self, out: &mut [f32]) -> Result<()> {
        if out.len() != self.rows * self.cols {
            bail!("{}×{} values into {}", self.rows, self.cols, out.len());
        }
        // About 256 KB of f32 per task.
        let task_rows = (65_536 / self.cols.max(1)).max(1);
        out.par_chunks_mut(task_rows * self.cols)
            .enumerate()
            .try_for_each(|(t, y)| {
                for (i, y) in y.chunks_exact_mut(self.cols).enumerate() {
                    expand_row(self.kind, self.row(t * task_rows + i), y)?;
                }
                Ok(())
            })
    }

    /// Rows `ids` in f32, one after the other.
    pub fn rows_f32(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let mut out = vec![0f32; ids.len() * self.cols];
        for (&r, y) in ids.iter().zip(out.chunks_exact_mut(self.cols.max(1))) {
            if r as usize >= self.rows {
                bail!("row {r} of a {}-row matrix", self.rows);
            }
            expand_row(self.kind, self.row(r as usize), y)?;
        }
        Ok(out)
    }

    /// The matrix with its rows reordered: row i of the result is row `order[i]` of this one.
    pub fn permute_rows(&self, order: &[usize]) -> Result<Self> {
        let mut data = Vec::with_capacity(order.len() * self.kind.row_bytes(self.cols));
        for &r in order {
            if r >= self.rows {
                bail!("row {r} of a {}-row matrix", self.rows);
            }
            data.extend_from_slice(self.row(r));
        }
        Iq4Matrix::new(self.kind, order.len(), self.cols, data)
    }
}

/// Appends w · x_r for every row of `xs` (in order) to `out`; `w` is one weight row's blocks.
pub type DotRows = fn(Iq4Kind, &[u8], &Q8Rows, &mut Vec<f32>);

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
pub fn dot_rows_portable(kind: Iq4Kind, w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
    let cols = xs.values().len() / xs.len().max(1);
    for r in 0..xs.len() {
        let q = &xs.values()[r * cols..(r + 1) * cols];
        let d = &xs.scales()[r * cols / BLOCK..(r + 1) * cols / BLOCK];
        let mut acc = [0f32; 8];
        for_groups(kind, w, |g, scale, nibbles| {
            let level = |j: usize| {
                let b = nibbles[j % 16];
                i32::from(KVALUES_IQ4NL[usize::from(if j < 16 { b & 0xf } else { b >> 4 })])
            };
            let sd = scale * d[g];
            for (l, acc) in acc.iter_mut().enumerate() {
                let p: i32 = (4 * l..4 * l + 4)
                    .map(|j| level(j) * i32::from(q[g * BLOCK + j]))
                    .sum();
                *acc = sd.mul_add(p as f32, *acc);
            }
        });
        out.push(lanes_sum(acc));
    }
}

/// Eight lanes summed as `avx2::hsum` sums them.
fn lanes_sum(a: [f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::{BLOCK, Iq4Kind, KVALUES_IQ4NL, Q8Rows};
    use crate::model::block_dots::avx2::{PREFETCH_BYTES, read_f16};
    use std::arch::x86_64::*;

    /// The table in both 128-bit lanes, for `_mm256_shuffle_epi8`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn table() -> __m256i {
        // SAFETY: the table is 16 bytes.
        let t = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i) };
        _mm256_set_m128i(t, t)
    }

    /// Group `ib` of a block (ib = 0 for IQ4_NL): its scale as `for_groups` computes it, and its
    /// 32 levels as signed bytes, value j in byte j: one `vpshufb` on the group's nibbles.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn group(
        kind: Iq4Kind,
        table: __m256i,
        block: &[u8],
        d: f32,
        ib: usize,
    ) -> (f32, __m256i) {
        let (scale, at) = match kind {
            Iq4Kind::Nl => (d, 2),
            Iq4Kind::Xs => {
                let low = (block[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
                let high = ((u16::from_le_bytes([block[2], block[3]]) >> (2 * ib)) & 3) as u8;
                (d * (i32::from(low | high << 4) - 32) as f32, 8 + 16 * ib)
            }
        };
        assert!(block.len() >= at + 16);
        // SAFETY: 16 bytes from `at` lie in the block (asserted).
        let qs = unsafe { _mm_loadu_si128(block.as_ptr().add(at) as *const __m128i) };
        let idx = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
            _mm256_set1_epi8(0x0F),
        );
        (scale, _mm256_shuffle_epi8(table, idx))
    }

    /// The scales of a block's groups (IQ4_NL: one), as `for_groups` computes them.
    #[inline]
    fn block_scales(kind: Iq4Kind, block: &[u8], d: f32) -> [f32; 8] {
        let mut scales = [d; 8];
        if kind == Iq4Kind::Xs {
            let high = u16::from_le_bytes([block[2], block[3]]);
            let low = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
            for (ib, s) in scales.iter_mut().enumerate() {
                let ls =
                    ((low >> (4 * ib)) & 0xf) as i32 | ((i32::from(high) >> (2 * ib)) & 3) << 4;
                *s = d * (ls - 32) as f32;
            }
        }
        scales
    }

    /// Groups per block and bytes per block.
    fn shape(kind: Iq4Kind) -> (usize, usize) {
        match kind {
            Iq4Kind::Nl => (1, 18),
            Iq4Kind::Xs => (8, 136),
        }
    }

    /// A row's values: the levels' groups widened and multiplied by their scale.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn expand(kind: Iq4Kind, row: &[u8], out: &mut [f32]) {
        let table = table();
        let (per_block, bytes) = shape(kind);
        for (b, block) in row.chunks_exact(bytes).enumerate() {
            let d = read_f16(block, 0);
            for ib in 0..per_block {
                let (scale, q) = group(kind, table, block, d, ib);
                let s = _mm256_set1_ps(scale);
                let g = b * per_block + ib;
                let y = &mut out[g * BLOCK..(g + 1) * BLOCK];
                let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
                for (h, half) in halves.into_iter().enumerate() {
                    for (e, bytes) in [half, _mm_srli_si128::<8>(half)].into_iter().enumerate() {
                        let v = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)));
                        // SAFETY: h·16 + e·8 + 8 ≤ 32, the length of y.
                        unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(h * 16 + e * 8), v) };
                    }
                }
            }
        }
    }

    /// `put(g, scale, bytes)` for each group g of a row: its levels + 128 (`int8_runs`' unsigned
    /// form) and its scale.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn biased_levels(
        kind: Iq4Kind,
        row: &[u8],
        mut put: impl FnMut(usize, f32, &[u8; 32]),
    ) {
        let table = table();
        let (per_block, bytes) = shape(kind);
        let mut out = [0u8; 32];
        for (b, block) in row.chunks_exact(bytes).enumerate() {
            let d = read_f16(block, 0);
            for ib in 0..per_block {
                let (scale, q) = group(kind, table, block, d, ib);
                let biased = _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN));
                // SAFETY: 32 bytes into an array of 32.
                unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, biased) };
                put(b * per_block + ib, scale, &out);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn dot_rows(kind: Iq4Kind, w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
        let n = xs.len();
        let mut r = 0;
        while r < n {
            let take = (n - r).min(4);
            match take {
                4 => out.extend_from_slice(&dots::<4>(kind, w, xs, r)),
                3 => out.extend_from_slice(&dots::<3>(kind, w, xs, r)),
                2 => out.extend_from_slice(&dots::<2>(kind, w, xs, r)),
                _ => out.extend_from_slice(&dots::<1>(kind, w, xs, r)),
            }
            r += take;
        }
    }

    /// w · x for rows first.. first + R of xs: each group's levels looked up once for all of
    /// them; per row the operations of `dot_rows_portable`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dots<const R: usize>(kind: Iq4Kind, w: &[u8], xs: &Q8Rows, first: usize) -> [f32; R] {
        let cols = xs.values().len() / xs.len().max(1);
        let groups = cols / BLOCK;
        assert_eq!(
            w.len(),
            kind.row_bytes(cols),
            "a weight row of the activations' length"
        );
        let q: [&[i8]; R] = std::array::from_fn(|i| {
            let r = first + i;
            &xs.values()[r * cols..(r + 1) * cols]
        });
        let d: [&[f32]; R] = std::array::from_fn(|i| {
            let r = first + i;
            &xs.scales()[r * groups..(r + 1) * groups]
        });
        let table = table();
        let (per_block, bytes) = shape(kind);
        let mut acc = [_mm256_setzero_ps(); R];
        let ones = _mm256_set1_epi16(1);
        for (b, block) in w.chunks_exact(bytes).enumerate() {
            // A prefetch never faults, whatever the address; the pointer is not read.
            _mm_prefetch::<_MM_HINT_T0>(block.as_ptr().wrapping_add(PREFETCH_BYTES) as *const i8);
            if per_block > 1 {
                _mm_prefetch::<_MM_HINT_T0>(
                    block.as_ptr().wrapping_add(PREFETCH_BYTES + 64) as *const i8
                );
                _mm_prefetch::<_MM_HINT_T0>(
                    block.as_ptr().wrapping_add(PREFETCH_BYTES + 128) as *const i8
                );
            }
            let dw = read_f16(block, 0);
            let scales = block_scales(kind, block, dw);
            for (ib, &scale) in scales.iter().enumerate().take(per_block) {
                let g = b * per_block + ib;
                let at = if per_block == 1 { 2 } else { 8 + 16 * ib };
                // SAFETY: 16 bytes from `at` lie in the block (18 or 136 bytes).
                let qs = unsafe { _mm_loadu_si128(block.as_ptr().add(at) as *const __m128i) };
                let idx = _mm256_and_si256(
                    _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
                    _mm256_set1_epi8(0x0F),
                );
                let levels = _mm256_shuffle_epi8(table, idx);
                // maddubs multiplies unsigned by signed bytes: the levels give it their
                // magnitudes and move their signs onto the activations.
                let magnitudes = _mm256_sign_epi8(levels, levels);
                for r in 0..R {
                    assert!(q[r].len() >= (g + 1) * BLOCK && d[r].len() > g);
                    // SAFETY: 32 values of group g lie in the row (asserted).
                    let y = unsafe {
                        _mm256_loadu_si256(q[r].as_ptr().add(g * BLOCK) as *const __m256i)
                    };
                    let y = _mm256_sign_epi8(y, levels);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, y), ones);
                    let sd = _mm256_set1_ps(scale * d[r][g]);
                    acc[r] = _mm256_fmadd_ps(sd, _mm256_cvtepi32_ps(p), acc[r]);
                }
            }
        }
        acc.map(|a| {
            let mut lanes = [0f32; 8];
            // SAFETY: eight floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
            super::lanes_sum(lanes)
        })
    }
}
