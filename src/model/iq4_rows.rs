//! IQ4_NL and IQ4_XS matrices kept in their blocks on the CPU, and their expansion.
//!
//! Read into Q8_0 (`iquants`), an IQ4_XS matrix takes 8.5 bits a weight instead of 4.25: the
//! synthetic IQ4_XS Llama-3.1-8B judged 10 items in 9.96 GB, 2.9 GB over the budget for
//! its file. Here those matrices stay as the file stores them. Prefill expands a matrix into f32
//! values that are ggml's `dequantize_row_iq4_{nl,xs}` to the bit (a group's scale — d, or
//! d·(ls − 32) in f32 — times a level of the non-linear table): the expanded model's numbers.
//! Decoding multiplies the levels in integers (`iq4_dots`).
//!
//! The other i-quants (grids of 3–9 bit indices and sign sets) stay read into Q8_0; so do IQ4
//! matrices on a GPU.

use super::block_dots::BLOCK;
use super::iquant_grids::KVALUES_IQ4NL;
use super::iquants::{IQuant, iq4_xs_sub_scales};
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

    /// Groups of 32 values per block, and bytes per block.
    pub(super) fn block_shape(self) -> (usize, usize) {
        match self {
            Iq4Kind::Nl => (1, 18),
            Iq4Kind::Xs => (8, 136),
        }
    }

    /// Where group `ib`'s 16 bytes of nibbles start in its block.
    pub(super) fn nibbles_at(self, ib: usize) -> usize {
        match self {
            Iq4Kind::Nl => 2,
            Iq4Kind::Xs => 8 + 16 * ib,
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
fn for_groups(kind: Iq4Kind, row: &[u8], mut f: impl FnMut(usize, f32, &[u8; 16])) {
    let nibbles = |b: &[u8], at: usize| -> [u8; 16] {
        b[at..at + 16].try_into().expect("16 bytes of nibbles")
    };
    let (per_block, bytes) = kind.block_shape();
    for (b, block) in row.chunks_exact(bytes).enumerate() {
        let scales = block_scales(kind, block);
        for (ib, &scale) in scales.iter().enumerate().take(per_block) {
            f(
                per_block * b + ib,
                scale,
                &nibbles(block, kind.nibbles_at(ib)),
            );
        }
    }
}

/// The scales of a block's groups in f32 as ggml computes them (IQ4_NL: one, d).
#[inline]
pub(super) fn block_scales(kind: Iq4Kind, block: &[u8]) -> [f32; 8] {
    let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
    match kind {
        Iq4Kind::Nl => [d; 8],
        Iq4Kind::Xs => iq4_xs_sub_scales(block).map(|ls| d * ls as f32),
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

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::{BLOCK, Iq4Kind, KVALUES_IQ4NL, block_scales};
    use std::arch::x86_64::*;

    /// The table in both 128-bit lanes, for `_mm256_shuffle_epi8`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn table() -> __m256i {
        // SAFETY: the table is 16 bytes.
        let t = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i) };
        _mm256_set_m128i(t, t)
    }

    /// A group's 32 levels as signed bytes, value j in byte j, from its 16 bytes of nibbles
    /// (`nibbles[..16]`): one `vpshufb` of the table.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn levels(table: __m256i, nibbles: &[u8]) -> __m256i {
        assert!(nibbles.len() >= 16);
        // SAFETY: 16 readable bytes (asserted).
        let qs = unsafe { _mm_loadu_si128(nibbles.as_ptr() as *const __m128i) };
        let idx = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
            _mm256_set1_epi8(0x0F),
        );
        _mm256_shuffle_epi8(table, idx)
    }

    /// Calls `put(g, scale, levels)` for each group g of a row, in order.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn for_level_groups(kind: Iq4Kind, row: &[u8], mut put: impl FnMut(usize, f32, __m256i)) {
        let table = table();
        let (per_block, bytes) = kind.block_shape();
        for (b, block) in row.chunks_exact(bytes).enumerate() {
            let scales = block_scales(kind, block);
            for (ib, &scale) in scales.iter().enumerate().take(per_block) {
                let q = levels(table, &block[kind.nibbles_at(ib)..]);
                put(b * per_block + ib, scale, q);
            }
        }
    }

    /// A row's values: the levels' groups widened and multiplied by their scale.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn expand(kind: Iq4Kind, row: &[u8], out: &mut [f32]) {
        for_level_groups(kind, row, |g, scale, q| {
            let s = _mm256_set1_ps(scale);
            let y = &mut out[g * BLOCK..(g + 1) * BLOCK];
            let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
            for (h, half) in halves.into_iter().enumerate() {
                for (e, bytes) in [half, _mm_srli_si128::<8>(half)].into_iter().enumerate() {
                    let v = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)));
                    // SAFETY: h·16 + e·8 + 8 ≤ 32, the length of y.
                    unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(h * 16 + e * 8), v) };
                }
            }
        });
    }

    /// `put(g, scale, bytes)` for each group g of a row: its levels + 128 (`int8_runs`' unsigned
    /// form) and its scale.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn biased_levels(
        kind: Iq4Kind,
        row: &[u8],
        mut put: impl FnMut(usize, f32, &[u8; 32]),
    ) {
        let mut out = [0u8; 32];
        for_level_groups(kind, row, |g, scale, q| {
            let biased = _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN));
            // SAFETY: 32 bytes into an array of 32.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, biased) };
            put(g, scale, &out);
        });
    }
}
