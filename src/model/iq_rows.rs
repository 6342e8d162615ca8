//! I-quant matrices kept in their blocks on the CPU — IQ4_NL, IQ4_XS, IQ3_S and IQ3_XXS — and
//! their expansion.
//!
//! Read into Q8_0 (`iquants`), an IQ4_XS matrix takes 8.5 bits a weight instead of 4.25: the
//! synthetic IQ4_XS Llama-3.1-8B judged 10 items in 9.96 GB, 2.9 GB over the budget for
//! its file; IQ3_S held as Q5_0 takes 5.5 bits instead of 3.44 (an IQ3_M 8B: 7.29 GB against a
//! budget of 6.22). Here those matrices stay as the file stores them. Every 32 values of them
//! are one f32 scale times signed 8-bit integers: a level of IQ4's non-linear table (scale d, or
//! d·(ls − 32)), or a magnitude of IQ3_S's or IQ3_XXS's grid with its sign (scale d·(1 + 2s),
//! d·(0.5 + s)·0.5). Prefill expands a matrix into those values, ggml's
//! `dequantize_row_iq4_{nl,xs}` / `dequantize_row_iq3_{s,xxs}` to the bit: the expanded
//! model's numbers. Decoding multiplies the integers (`iq_dots`).
//!
//! The other i-quants (IQ2_*, IQ1_*: two scales per 32, or files that need an importance matrix
//! to be made) stay read into Q8_0 (IQ1_S Q5_0); all of them do on a GPU (IQ3_S Q5_0).

use super::block_dots::BLOCK;
use super::iquants::{self, IQuant, iq3_s_sub_scales, iq3_xxs_sub_scales, iq4_xs_sub_scales};
use candle_core::{Result, bail};
use half::f16;
use rayon::prelude::*;

/// The i-quants whose matrices are kept in their blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IqKind {
    /// 18 bytes per 32 values: d (f16), 16 bytes of nibbles.
    Iq4Nl,
    /// 136 bytes per 256 values: d (f16), the high bits of eight 6-bit scales (u16), their low
    /// nibbles (4 bytes), 128 bytes of nibbles; group i's scale is d·(lsᵢ − 32).
    Iq4Xs,
    /// 110 bytes per 256 values: d (f16), 64 low bytes of 9-bit grid indices, 8 bytes of their
    /// high bits, 32 bytes of signs, 4 bytes of 4-bit scales; group i's scale is d·(1 + 2sᵢ).
    Iq3S,
    /// 98 bytes per 256 values: d (f16), 64 bytes of 8-bit grid indices, then per group a u32
    /// of four 7-bit sign sets and a 4-bit scale s; group i's scale is d·(0.5 + sᵢ)·0.5.
    Iq3Xxs,
}

impl IqKind {
    pub fn of(kind: IQuant) -> Option<Self> {
        match kind {
            IQuant::Iq4Nl => Some(IqKind::Iq4Nl),
            IQuant::Iq4Xs => Some(IqKind::Iq4Xs),
            IQuant::Iq3S => Some(IqKind::Iq3S),
            IQuant::Iq3Xxs => Some(IqKind::Iq3Xxs),
            _ => None,
        }
    }

    pub fn iquant(self) -> IQuant {
        match self {
            IqKind::Iq4Nl => IQuant::Iq4Nl,
            IqKind::Iq4Xs => IQuant::Iq4Xs,
            IqKind::Iq3S => IQuant::Iq3S,
            IqKind::Iq3Xxs => IQuant::Iq3Xxs,
        }
    }

    /// Groups of 32 values per block, and bytes per block.
    pub(super) fn block_shape(self) -> (usize, usize) {
        let kind = self.iquant();
        (kind.block_values() / BLOCK, kind.block_bytes())
    }

    /// Bytes of a row of `cols` values (a whole number of blocks).
    pub fn row_bytes(self, cols: usize) -> usize {
        let kind = self.iquant();
        cols / kind.block_values() * kind.block_bytes()
    }
}

/// The integer sub-scales of a block's groups: IQ4_XS ls − 32, IQ3_S 1 + 2s, IQ3_XXS 2s + 1
/// (eight groups), IQ4_NL 1 (its one group). A group's scale is the block's [`unit_scale`]
/// times its own, in f32.
#[inline]
pub(super) fn sub_scales(kind: IqKind, block: &[u8]) -> [i32; 8] {
    match kind {
        IqKind::Iq4Nl => [1; 8],
        IqKind::Iq4Xs => iq4_xs_sub_scales(block),
        IqKind::Iq3S => iq3_s_sub_scales(block),
        IqKind::Iq3Xxs => iq3_xxs_sub_scales(block),
    }
}

/// What a block's sub-scales multiply: its f16 d, a quarter of it for IQ3_XXS (exact in f32).
#[inline]
pub(super) fn unit_scale(kind: IqKind, block: &[u8]) -> f32 {
    let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
    if kind == IqKind::Iq3Xxs { d * 0.25 } else { d }
}

/// The scales of a block's groups in f32 as ggml computes them (IQ4_NL: d·1 = d).
#[inline]
pub(super) fn block_scales(kind: IqKind, block: &[u8]) -> [f32; 8] {
    let unit = unit_scale(kind, block);
    sub_scales(kind, block).map(|s| unit * s as f32)
}

/// A row's values in f32 (`out`: the row's length), ggml's to the bit.
pub fn expand_row(kind: IqKind, row: &[u8], out: &mut [f32]) -> Result<()> {
    let block_values = kind.iquant().block_values();
    if row.len() != kind.row_bytes(out.len()) || !out.len().is_multiple_of(block_values) {
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
    let (_, bytes) = kind.block_shape();
    for (block, y) in row
        .chunks_exact(bytes)
        .zip(out.chunks_exact_mut(block_values))
    {
        let groups = iquants::block_groups(kind.iquant(), block);
        for (group, y) in groups.iter().zip(y.chunks_exact_mut(BLOCK)) {
            y.copy_from_slice(&group.values());
        }
    }
    Ok(())
}

/// A (rows, cols) matrix of an `IqKind` in its blocks, row after row, in host memory.
pub struct IqMatrix {
    kind: IqKind,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl IqMatrix {
    pub fn new(kind: IqKind, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self> {
        let block = kind.iquant().block_values();
        if !cols.is_multiple_of(block) || data.len() != rows * kind.row_bytes(cols) {
            bail!(
                "{} matrix {rows}×{cols}: {} bytes are not its whole {block}-value blocks",
                kind.iquant().name(),
                data.len()
            );
        }
        Ok(IqMatrix {
            kind,
            rows,
            cols,
            data,
        })
    }

    pub fn kind(&self) -> IqKind {
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
        IqMatrix::new(self.kind, order.len(), self.cols, data)
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::{BLOCK, IqKind, block_scales};
    use crate::model::block_dots::avx2::f16_lanes;
    use crate::model::iquant_grids::{IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS, KVALUES_IQ4NL};
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

    /// Bytes of ±1 from 32 sign bits (byte j −1 where bit j is set), as llama.cpp's i-quant
    /// products spread them: byte j takes sign byte j / 8 and keeps its bit j % 8.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn sign_bytes(signs: u32) -> __m256i {
        let which = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let spread = _mm256_shuffle_epi8(_mm256_set1_epi32(signs as i32), which);
        let negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        _mm256_or_si256(negative, _mm256_set1_epi8(1))
    }

    /// Eight grid entries of four magnitudes as 32 bytes, entry k in bytes 4k..4k + 4.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn grid_entries(entry: impl Fn(usize) -> u32) -> __m256i {
        let e = |k| entry(k) as i32;
        _mm256_set_epi32(e(7), e(6), e(5), e(4), e(3), e(2), e(1), e(0))
    }

    /// Group `ib` of `block` as what `maddubs` multiplies: its 32 magnitudes (unsigned bytes,
    /// value j in byte j) and a byte of each one's sign (±1, or for IQ4 the signed level itself:
    /// never zero), as llama.cpp's `ggml_vec_dot_iq*_q8_*` build them.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn group_factors(
        kind: IqKind,
        table: __m256i,
        block: &[u8],
        ib: usize,
    ) -> (__m256i, __m256i) {
        let level_factors = |l: __m256i| (_mm256_sign_epi8(l, l), l);
        let u32_at = |at: usize| {
            u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
        };
        match kind {
            IqKind::Iq4Nl => level_factors(levels(table, &block[2..])),
            IqKind::Iq4Xs => level_factors(levels(table, &block[8 + 16 * ib..])),
            IqKind::Iq3S => {
                let (qs, qh) = (&block[2 + 8 * ib..][..8], u32::from(block[66 + ib]));
                // Entry k's index: byte k of qs, bit k of qh as its ninth bit.
                let index = |k: usize| usize::from(qs[k]) | (((qh >> k) & 1) as usize) << 8;
                let magnitudes = grid_entries(|k| IQ3S_GRID[index(k)]);
                (magnitudes, sign_bytes(u32_at(74 + 4 * ib)))
            }
            IqKind::Iq3Xxs => {
                let qs = &block[2 + 8 * ib..][..8];
                let magnitudes = grid_entries(|k| IQ3XXS_GRID[usize::from(qs[k])]);
                // Four 7-bit sign sets, each made eight bits by its parity.
                let aux = u32_at(66 + 4 * ib);
                let set = |l: u32| u32::from(KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize]);
                let signs = set(0) | set(1) << 8 | set(2) << 16 | set(3) << 24;
                (magnitudes, sign_bytes(signs))
            }
        }
    }

    /// `unit_scale` in eight lanes: d read by `f16_lanes` (a scalar f16 read would compile to an
    /// insert into whatever register is free — in the products, the accumulator's — and wait for
    /// it), a quarter of it for IQ3_XXS (exact).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn unit_lanes(kind: IqKind, block: &[u8]) -> __m256 {
        let d = f16_lanes(block, 0);
        if kind == IqKind::Iq3Xxs {
            _mm256_mul_ps(d, _mm256_set1_ps(0.25))
        } else {
            d
        }
    }

    /// A group's 32 values as signed bytes (before its scale).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn group_integers(kind: IqKind, table: __m256i, block: &[u8], ib: usize) -> __m256i {
        let (magnitudes, signs) = group_factors(kind, table, block, ib);
        _mm256_sign_epi8(magnitudes, signs)
    }

    /// Calls `put(g, scale, integers)` for each group g of a row, in order.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn for_integer_groups(kind: IqKind, row: &[u8], mut put: impl FnMut(usize, f32, __m256i)) {
        let table = table();
        let (per_block, bytes) = kind.block_shape();
        for (b, block) in row.chunks_exact(bytes).enumerate() {
            let scales = block_scales(kind, block);
            for (ib, &scale) in scales.iter().enumerate().take(per_block) {
                put(
                    b * per_block + ib,
                    scale,
                    group_integers(kind, table, block, ib),
                );
            }
        }
    }

    /// A row's values: the groups' integers widened and multiplied by their scale.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn expand(kind: IqKind, row: &[u8], out: &mut [f32]) {
        for_integer_groups(kind, row, |g, scale, q| {
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

    /// `put(g, scale, bytes)` for each group g of a row: its integers + 128 (`int8_runs`'
    /// unsigned form) and its scale.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn biased_integers(
        kind: IqKind,
        row: &[u8],
        mut put: impl FnMut(usize, f32, &[u8; 32]),
    ) {
        let mut out = [0u8; 32];
        for_integer_groups(kind, row, |g, scale, q| {
            let biased = _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN));
            // SAFETY: 32 bytes into an array of 32.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, biased) };
            put(g, scale, &out);
        });
    }
}
