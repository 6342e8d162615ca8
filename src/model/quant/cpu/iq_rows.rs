//! I-quant matrices kept in their blocks on the CPU — all nine of llama.cpp's i-quants, IQ1_S to
//! IQ4_XS — and their expansion.
//!
//! Read into Q8_0 (`iquants`), an IQ4_XS matrix takes 8.5 bits a weight instead of 4.25: the
//! synthetic IQ4_XS Llama-3.1-8B judged 10 items in 9.96 GB, 2.9 GB over the budget for
//! its file; an IQ2_S or IQ1_M one takes 8.5 bits instead of 2.56 or 1.75. Here those matrices
//! stay as the file stores them. Every 16 values of them are one f32 scale times signed 8-bit
//! integers: a level of IQ4's non-linear table, a magnitude of an IQ3 or IQ2 grid with its
//! sign, or IQ1's eight times a grid value in −1..=1 plus or minus one (its ±1/8 shift). The
//! scale is a per-block unit (d; d/4 for IQ3_XXS, d/8 for the IQ2s and IQ1s) times a small
//! integer sub-scale — per 32 values, or per 16 for IQ2_XS, IQ2_S and IQ1_M — the very f32 ggml
//! computes. Prefill expands a matrix into those values, ggml's `dequantize_row_iq*` to the bit:
//! the expanded model's numbers. Decoding multiplies the integers (`iq_dots`).
//!
//! On a GPU the i-quants stay read into Q8_0 (IQ3_S and IQ1_S Q5_0): `IQuant::held_as`.

use crate::model::quant::formats::iquant_matrix::IqMatrix;
use crate::model::quant::formats::iquants::{
    self, IQuant, iq1_m_sub_scales, iq1_s_sub_scales, iq2_half_sub_scales, iq2_xxs_sub_scales,
    iq3_s_sub_scales, iq3_xxs_sub_scales, iq4_xs_sub_scales, unit_scale,
};
use crate::model::quant::formats::legacy::BLOCK;
use candle_core::{Result, bail};
use rayon::prelude::*;

/// The integer sub-scales of a block's groups, one for each 16 values (the same two where one
/// covers 32): IQ4_XS ls − 32, IQ3_S 1 + 2s, the others 2s + 1 (eight groups), IQ4_NL 1 (its
/// one group). A half-group's scale is the block's `iquants::unit_scale` times its own, in f32.
#[inline]
pub(crate) fn sub_scales(kind: IQuant, block: &[u8]) -> [[i32; 2]; 8] {
    let both = |s: [i32; 8]| s.map(|s| [s; 2]);
    match kind {
        IQuant::Iq4Nl => [[1; 2]; 8],
        IQuant::Iq4Xs => both(iq4_xs_sub_scales(block)),
        IQuant::Iq3S => both(iq3_s_sub_scales(block)),
        IQuant::Iq3Xxs => both(iq3_xxs_sub_scales(block)),
        IQuant::Iq2Xxs => both(iq2_xxs_sub_scales(block)),
        IQuant::Iq2Xs => iq2_half_sub_scales(block, 66),
        IQuant::Iq2S => iq2_half_sub_scales(block, 74),
        IQuant::Iq1S => both(iq1_s_sub_scales(block)),
        IQuant::Iq1M => iq1_m_sub_scales(block),
    }
}

/// The scales of a block's half-groups in f32 as ggml computes them (IQ4_NL: d·1 = d).
#[inline]
pub(crate) fn block_scales(kind: IQuant, block: &[u8]) -> [[f32; 2]; 8] {
    let unit = unit_scale(kind, block);
    sub_scales(kind, block).map(|s| s.map(|s| unit * s as f32))
}

/// A row's values in f32 (`out`: the row's length), ggml's to the bit.
pub fn expand_row(kind: IQuant, row: &[u8], out: &mut [f32]) -> Result<()> {
    let block_values = kind.block_values();
    if row.len() != kind.row_bytes(out.len()) || !out.len().is_multiple_of(block_values) {
        bail!(
            "an {} row of {} bytes for {} values",
            kind.name(),
            row.len(),
            out.len()
        );
    }
    #[cfg(target_arch = "x86_64")]
    if crate::model::backend::cpu::features().avx2_fma_f16c {
        // SAFETY: the features it is compiled for were just detected; the sizes match.
        unsafe { avx2::expand(kind, row, out) };
        return Ok(());
    }
    let (_, bytes) = kind.block_shape();
    for (block, y) in row
        .chunks_exact(bytes)
        .zip(out.chunks_exact_mut(block_values))
    {
        let groups = iquants::block_groups(kind, block);
        for (group, y) in groups.iter().zip(y.chunks_exact_mut(BLOCK)) {
            y.copy_from_slice(&group.values());
        }
    }
    Ok(())
}

impl IqMatrix {
    /// The whole matrix in f32 into `out` (rows × cols), rows spread over the threads.
    pub fn expand_into(&self, out: &mut [f32]) -> Result<()> {
        self.expand_rows_into(0..self.dims().0, out)
    }

    /// Rows `range` in f32 into `out` (their count × cols), rows spread over the threads.
    pub fn expand_rows_into(&self, range: std::ops::Range<usize>, out: &mut [f32]) -> Result<()> {
        let (rows, cols) = self.dims();
        if range.start > range.end || range.end > rows || out.len() != range.len() * cols {
            bail!("rows {range:?} of {rows}×{cols} into {} values", out.len());
        }
        // About 256 KB of f32 per task.
        let task_rows = (65_536 / cols.max(1)).max(1);
        out.par_chunks_mut(task_rows * cols)
            .enumerate()
            .try_for_each(|(t, y)| {
                for (i, y) in y.chunks_exact_mut(cols).enumerate() {
                    expand_row(self.kind(), self.row(range.start + t * task_rows + i), y)?;
                }
                Ok(())
            })
    }

    /// Rows `ids` in f32, one after the other.
    pub fn rows_f32(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let (rows, cols) = self.dims();
        let mut out = vec![0f32; ids.len() * cols];
        for (&r, y) in ids.iter().zip(out.chunks_exact_mut(cols.max(1))) {
            if r as usize >= rows {
                bail!("row {r} of a {rows}-row matrix");
            }
            expand_row(self.kind(), self.row(r as usize), y)?;
        }
        Ok(out)
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{BLOCK, IQuant, block_scales};
    use crate::model::quant::cpu::block_dots::avx2::{bytes_from_bits, f16_lanes};
    use crate::model::quant::formats::iquant_grids::{
        IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
        KVALUES_IQ4NL,
    };
    use crate::model::quant::formats::iquants::{iq1_m_d_bits, u16_at, u32_at, unit_factor};
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
    /// products spread them.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn sign_bytes(signs: u32) -> __m256i {
        _mm256_or_si256(bytes_from_bits(signs), _mm256_set1_epi8(1))
    }

    /// Each 7-bit sign set made eight bits by its parity (`KSIGNS_IQ2XS`), as eight bytes of ±1
    /// (byte j −1 where bit j is set): llama.cpp's `keven_signs_q2xs`, one read a set.
    static EVEN_SIGNS: [u64; 128] = even_signs();

    const fn even_signs() -> [u64; 128] {
        let mut table = [0u64; 128];
        let mut set = 0;
        while set < 128 {
            let bits = KSIGNS_IQ2XS[set];
            let mut j = 0;
            while j < 8 {
                let byte: u64 = if bits >> j & 1 == 1 { 0xFF } else { 0x01 };
                table[set] |= byte << (8 * j);
                j += 1;
            }
            set += 1;
        }
        table
    }

    /// Sign bytes of 32 values from four 7-bit sign sets (`set(l)`: bits 0..7 the set of values
    /// 8l..8l + 8; higher bits ignored), each completed by its parity.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn parity_signs(set: impl Fn(usize) -> u32) -> __m256i {
        wide_entries(|l| EVEN_SIGNS[set(l) as usize & 127])
    }

    /// Eight grid entries of four magnitudes as 32 bytes, entry k in bytes 4k..4k + 4.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn grid_entries(entry: impl Fn(usize) -> u32) -> __m256i {
        let e = |k| entry(k) as i32;
        _mm256_set_epi32(e(7), e(6), e(5), e(4), e(3), e(2), e(1), e(0))
    }

    /// Four grid entries of eight bytes as 32 bytes, entry l in bytes 8l..8l + 8.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn wide_entries(entry: impl Fn(usize) -> u64) -> __m256i {
        let e = |l| entry(l) as i64;
        _mm256_set_epi64x(e(3), e(2), e(1), e(0))
    }

    /// IQ1's integers 8·g ± 1 from four grid entries of values g in −1..=1 (bytes) and bytes of
    /// each value's shift (±1).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn iq1_integers(entry: impl Fn(usize) -> u64, shifts: __m256i) -> __m256i {
        let grid = wide_entries(entry);
        _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), grid), shifts)
    }

    /// What an IQ1_M block's groups share, worked out once a block in whole registers: its 32
    /// grid indices (entry e: byte e of qs and the low three bits of nibble e of qh) and shift
    /// signs (bit e: entry e's shift is −1, the nibble's fourth bit). Entry by entry in scalars
    /// (`iquants::iq1_m_high`) IQ1_M's one-row product takes 0.31 ns a weight, this way
    /// 0.20–0.22. Empty for the other kinds: theirs are read where they lie (an index for IQ3_S
    /// and IQ2_S measures slower).
    pub(in crate::model) struct BlockIndex {
        index: [u16; 32],
        shifts: u32,
    }

    impl BlockIndex {
        /// For kinds that read their indices in place (IQ4_NL's products take it once a row).
        pub(in crate::model) const NONE: BlockIndex = BlockIndex {
            index: [0; 32],
            shifts: 0,
        };

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(in crate::model) fn of(kind: IQuant, block: &[u8]) -> Self {
            let mut index = [0u16; 32];
            let mut shifts = 0;
            if kind == IQuant::Iq1M {
                // SAFETY: 16 bytes (a bounds-checked slice).
                let qh = unsafe { _mm_loadu_si128(block[32..48].as_ptr() as *const __m128i) };
                let low = _mm_and_si128(qh, _mm_set1_epi8(0x0F));
                let high = _mm_and_si128(_mm_srli_epi16::<4>(qh), _mm_set1_epi8(0x0F));
                // Nibble e in byte e.
                let nibbles =
                    _mm256_set_m128i(_mm_unpackhi_epi8(low, high), _mm_unpacklo_epi8(low, high));
                shifts = _mm256_movemask_epi8(_mm256_slli_epi16::<4>(nibbles)) as u32;
                let bits = _mm256_and_si256(nibbles, _mm256_set1_epi8(7));
                // SAFETY: the block's first 32 bytes.
                let qs = unsafe { _mm256_loadu_si256(block[..32].as_ptr() as *const __m256i) };
                // Per 128-bit lane: entries 0..8 (16..24) in one, 8..16 (24..32) in the other.
                let a = _mm256_unpacklo_epi8(qs, bits);
                let b = _mm256_unpackhi_epi8(qs, bits);
                let out = index.as_mut_ptr() as *mut __m256i;
                // SAFETY: two runs of 16 u16, the whole of `index`.
                unsafe {
                    _mm256_storeu_si256(out, _mm256_permute2x128_si256::<0x20>(a, b));
                    _mm256_storeu_si256(out.add(1), _mm256_permute2x128_si256::<0x31>(a, b));
                }
            }
            BlockIndex { index, shifts }
        }

        /// Entry `e`'s grid index, below `limit` (a power of two: the mask costs one instruction
        /// and spares a bounds check).
        #[inline]
        fn at(&self, e: usize, limit: usize) -> usize {
            let v = self.index[e];
            usize::from(v) & (limit - 1)
        }

        /// Group `ib`'s four shifts as ±1 bytes (IQ1_M; eight per entry).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn iq1_shifts(&self, ib: usize) -> __m256i {
            shift_bytes_of(((self.shifts >> (4 * ib)) & 15) as usize)
        }
    }

    /// Four runs of eight bytes, run l −1 where bit l of `bits` (below 16) is set, else +1:
    /// one read of a table.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn shift_bytes_of(bits: usize) -> __m256i {
        let bytes = &SHIFT_BYTES[bits & 15];
        // SAFETY: 32 bytes.
        unsafe { _mm256_loadu_si256(bytes.as_ptr() as *const __m256i) }
    }

    /// For each four sign bits, four runs of eight bytes: −1 where the bit is set, else +1.
    static SHIFT_BYTES: [[u64; 4]; 16] = shift_bytes();

    const fn shift_bytes() -> [[u64; 4]; 16] {
        let mut table = [[0u64; 4]; 16];
        let mut bits = 0;
        while bits < 16 {
            let mut l = 0;
            while l < 4 {
                table[bits][l] = if bits >> l & 1 == 1 {
                    u64::MAX
                } else {
                    0x0101_0101_0101_0101
                };
                l += 1;
            }
            bits += 1;
        }
        table
    }

    /// Group `ib` of `block` as what `maddubs` multiplies: its 32 magnitudes (unsigned bytes,
    /// value j in byte j) and a byte of each one's sign (±1, or for IQ4 and IQ1 the signed
    /// integer itself: never zero), as llama.cpp's `ggml_vec_dot_iq*_q8_*` build them (IQ1's
    /// integers are this module's: llama.cpp sums the grid and the shift apart).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn group_factors(
        kind: IQuant,
        table: __m256i,
        block: &[u8],
        prepared: &BlockIndex,
        ib: usize,
    ) -> (__m256i, __m256i) {
        let signed_factors = |l: __m256i| (_mm256_sign_epi8(l, l), l);
        let u16_at = |at: usize| u16_at(block, at);
        let u32_at = |at: usize| u32_at(block, at);
        match kind {
            IQuant::Iq4Nl => signed_factors(levels(table, &block[2..])),
            IQuant::Iq4Xs => signed_factors(levels(table, &block[8 + 16 * ib..])),
            IQuant::Iq3S => {
                let (qs, qh) = (&block[2 + 8 * ib..][..8], u32::from(block[66 + ib]));
                // Entry k's index: byte k of qs, bit k of qh as its ninth bit.
                let index = |k: usize| usize::from(qs[k]) | (((qh >> k) & 1) as usize) << 8;
                let magnitudes = grid_entries(|k| IQ3S_GRID[index(k)]);
                (magnitudes, sign_bytes(u32_at(74 + 4 * ib)))
            }
            IQuant::Iq3Xxs => {
                let qs = &block[2 + 8 * ib..][..8];
                let magnitudes = grid_entries(|k| IQ3XXS_GRID[usize::from(qs[k])]);
                let aux = u32_at(66 + 4 * ib);
                let signs = parity_signs(|l| aux >> (7 * l));
                (magnitudes, signs)
            }
            IQuant::Iq2Xxs => {
                let at = 2 + 8 * ib;
                let magnitudes = wide_entries(|l| IQ2XXS_GRID[usize::from(block[at + l])]);
                let aux = u32_at(at + 4);
                (magnitudes, parity_signs(|l| aux >> (7 * l)))
            }
            IQuant::Iq2Xs => {
                // Per eight values a u16: a 9-bit grid index, a 7-bit sign set.
                let v = |l: usize| u16_at(2 + 2 * (4 * ib + l));
                let magnitudes = wide_entries(|l| IQ2XS_GRID[usize::from(v(l) & 511)]);
                (magnitudes, parity_signs(|l| u32::from(v(l) >> 9)))
            }
            IQuant::Iq2S => {
                // Entry l's index: byte l, two high bits from bits 2l.. of qh.
                let qh = usize::from(block[66 + ib]);
                let index =
                    |l: usize| usize::from(block[2 + 4 * ib + l]) | (qh >> (2 * l) & 3) << 8;
                let magnitudes = wide_entries(|l| IQ2S_GRID[index(l)]);
                (magnitudes, sign_bytes(u32_at(34 + 4 * ib)))
            }
            IQuant::Iq1S => {
                // Three high bits of each index and the shift's sign in the group's u16.
                let qh = usize::from(u16_at(34 + 2 * ib));
                let index =
                    |l: usize| usize::from(block[2 + 4 * ib + l]) | (qh >> (3 * l) & 7) << 8;
                let shifts = shift_bytes_of(15 * (qh >> 15));
                signed_factors(iq1_integers(|l| IQ1S_GRID[index(l)], shifts))
            }
            IQuant::Iq1M => {
                let entry = |l: usize| IQ1S_GRID[prepared.at(4 * ib + l, 2048)];
                signed_factors(iq1_integers(entry, prepared.iq1_shifts(ib)))
            }
        }
    }

    /// A block's integer sub-scales (`sub_scales`) as sixteen i16: lane g the scale of values
    /// 0..16 of group g, lane 8 + g of its values 16..32 — one `vpshufb` then gives a group's
    /// two in the halves its pair sums take. Unpacked in vector lanes, as llama.cpp's IQ1_M
    /// kernel unpacks its scales: built from `sub_scales`' sixteen scalars, LLVM inserted them
    /// one by one (sixteen `vpinsrw`, one chain), about a tenth of IQ1_M's instructions a block.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn sub_scale_halves(kind: IQuant, block: &[u8]) -> __m256i {
        // 2s + 1 of s in i32 lanes, s below 16.
        let odd = |s: __m256i| _mm256_add_epi32(_mm256_add_epi32(s, s), _mm256_set1_epi32(1));
        // One scale a group for both halves, in i32 lanes (within i16).
        let both = |s: __m256i| {
            // Per 128-bit lane [s0..s4, s0..s4 | s4..s8, s4..s8] as i16, then 64-bit quarters 0, 2.
            _mm256_permute4x64_epi64::<0x88>(_mm256_packs_epi32(s, s))
        };
        let load = |at: usize| {
            let bytes = &block[at..at + 32];
            // SAFETY: 32 bytes (a bounds-checked slice).
            unsafe { _mm256_loadu_si256(bytes.as_ptr() as *const __m256i) }
        };
        match kind {
            // The u32 at 66 + 4g: its top four bits.
            IQuant::Iq3Xxs => both(odd(_mm256_srli_epi32::<28>(load(66)))),
            IQuant::Iq2Xxs => {
                // The second u32 of each group's eight bytes (from 2): its top four bits.
                let (a, b) = (_mm256_castsi256_ps(load(2)), _mm256_castsi256_ps(load(34)));
                // [g0 g1 g4 g5 | g2 g3 g6 g7], then the 64-bit quarters in order.
                let words = _mm256_castps_si256(_mm256_shuffle_ps::<0xDD>(a, b));
                let words = _mm256_permute4x64_epi64::<0xD8>(words);
                both(odd(_mm256_srli_epi32::<28>(words)))
            }
            IQuant::Iq1S => {
                // Bits 12..15 of the u16 at 34 + 2g.
                let bytes = &block[34..50];
                // SAFETY: 16 bytes (a bounds-checked slice).
                let qh = unsafe { _mm_loadu_si128(bytes.as_ptr() as *const __m128i) };
                let s = _mm256_srli_epi32::<12>(_mm256_cvtepu16_epi32(qh));
                both(odd(_mm256_and_si256(s, _mm256_set1_epi32(7))))
            }
            IQuant::Iq2Xs | IQuant::Iq2S => {
                // A byte a group (from 66, IQ2_S 74): low nibble values 0..16, high 16..32.
                let at = if kind == IQuant::Iq2Xs { 66 } else { 74 };
                let bytes = &block[at..at + 8];
                // SAFETY: 8 bytes (a bounds-checked slice).
                let s = unsafe { _mm_loadl_epi64(bytes.as_ptr() as *const __m128i) };
                let nibble = _mm_set1_epi8(0x0F);
                let (low, high) = (
                    _mm_and_si128(s, nibble),
                    _mm_and_si128(_mm_srli_epi16(s, 4), nibble),
                );
                let s = _mm256_set_m128i(_mm_cvtepu8_epi16(high), _mm_cvtepu8_epi16(low));
                _mm256_add_epi16(_mm256_add_epi16(s, s), _mm256_set1_epi16(1))
            }
            IQuant::Iq1M => {
                // Three bits each in the u16 at 48 + 2·(g/2), from bit 6·(g % 2) (values 0..16)
                // and 6·(g % 2) + 3 (16..32). Shifted by 0, 6, 3 and 9 in the four 64-bit
                // quarters, i16 j of a quarter holds group 2j (or 2j + 1)'s scale in its low bits.
                let bytes = &block[48..56];
                let word = u64::from_le_bytes(bytes.try_into().expect("eight bytes"));
                let v = _mm256_srlv_epi64(
                    _mm256_set1_epi64x(word as i64),
                    _mm256_set_epi64x(9, 3, 6, 0),
                );
                // Per 128-bit lane the two quarters' i16 interleaved: groups 0..8 in order.
                let order = _mm256_set_epi8(
                    15, 14, 7, 6, 13, 12, 5, 4, 11, 10, 3, 2, 9, 8, 1, 0, 15, 14, 7, 6, 13, 12, 5,
                    4, 11, 10, 3, 2, 9, 8, 1, 0,
                );
                let s = _mm256_and_si256(_mm256_shuffle_epi8(v, order), _mm256_set1_epi16(7));
                _mm256_add_epi16(_mm256_add_epi16(s, s), _mm256_set1_epi16(1))
            }
            IQuant::Iq4Nl => _mm256_set1_epi16(1),
            // Nibble g of the u32 at 4 (IQ4_XS, its low four bits) or 106 (IQ3_S).
            IQuant::Iq4Xs | IQuant::Iq3S => {
                let at = if kind == IQuant::Iq4Xs { 4 } else { 106 };
                let word = u32_at(block, at);
                let by_nibble = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
                let low = _mm256_srlv_epi32(_mm256_set1_epi32(word as i32), by_nibble);
                let low = _mm256_and_si256(low, _mm256_set1_epi32(0x0F));
                if kind == IQuant::Iq3S {
                    return both(odd(low));
                }
                // Bits 2g, 2g + 1 of the u16 at 2 are ls' top two; ls − 32.
                let high = u16_at(block, 2);
                let by_pair = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
                let high = _mm256_srlv_epi32(_mm256_set1_epi32(i32::from(high)), by_pair);
                let high = _mm256_slli_epi32::<4>(_mm256_and_si256(high, _mm256_set1_epi32(3)));
                both(_mm256_sub_epi32(
                    _mm256_or_si256(low, high),
                    _mm256_set1_epi32(32),
                ))
            }
        }
    }

    /// `unit_scale` in eight lanes: d read by `f16_lanes` (a scalar f16 read would compile to an
    /// insert into whatever register is free — in the products, the accumulator's — and wait for
    /// it) times the kind's power of two (exact); IQ1_M's d, spread over its scales' top
    /// nibbles, put together here (a call to `unit_scale` spilled the products' registers).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn unit_lanes(kind: IQuant, block: &[u8]) -> __m256 {
        let d = if kind == IQuant::Iq1M {
            _mm256_cvtph_ps(_mm_set1_epi16(iq1_m_d_bits(block) as i16))
        } else {
            f16_lanes(block, 0)
        };
        let factor = unit_factor(kind);
        if factor == 1.0 {
            d
        } else {
            _mm256_mul_ps(d, _mm256_set1_ps(factor))
        }
    }

    /// A group's 32 values as signed bytes (before its scales).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn group_integers(
        kind: IQuant,
        table: __m256i,
        block: &[u8],
        prepared: &BlockIndex,
        ib: usize,
    ) -> __m256i {
        let (magnitudes, signs) = group_factors(kind, table, block, prepared, ib);
        _mm256_sign_epi8(magnitudes, signs)
    }

    /// Calls `put(g, scales, integers)` for each group g of a row, in order (`scales`: of its
    /// values 0..16 and 16..32).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn for_integer_groups(kind: IQuant, row: &[u8], mut put: impl FnMut(usize, [f32; 2], __m256i)) {
        let table = table();
        let (per_block, bytes) = kind.block_shape();
        for (b, block) in row.chunks_exact(bytes).enumerate() {
            let scales = block_scales(kind, block);
            let prepared = BlockIndex::of(kind, block);
            for (ib, &scales) in scales.iter().enumerate().take(per_block) {
                let integers = group_integers(kind, table, block, &prepared, ib);
                put(b * per_block + ib, scales, integers);
            }
        }
    }

    /// A row's values: the groups' integers widened and multiplied by their scales.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn expand(kind: IQuant, row: &[u8], out: &mut [f32]) {
        for_integer_groups(kind, row, |g, scales, q| {
            let y = &mut out[g * BLOCK..(g + 1) * BLOCK];
            let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
            for (h, half) in halves.into_iter().enumerate() {
                let s = _mm256_set1_ps(scales[h]);
                for (e, bytes) in [half, _mm_srli_si128::<8>(half)].into_iter().enumerate() {
                    let v = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)));
                    // SAFETY: h·16 + e·8 + 8 ≤ 32, the length of y.
                    unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(h * 16 + e * 8), v) };
                }
            }
        });
    }

    /// `put(g, scales, bytes)` for each group g of a row: its integers + 128 (`int8_products`'
    /// unsigned form) and the scales of its values 0..16 and 16..32.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn biased_integers(
        kind: IQuant,
        row: &[u8],
        mut put: impl FnMut(usize, [f32; 2], &[u8; 32]),
    ) {
        let mut out = [0u8; 32];
        for_integer_groups(kind, row, |g, scales, q| {
            let biased = _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN));
            // SAFETY: 32 bytes into an array of 32.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, biased) };
            put(g, scales, &out);
        });
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The vector unpacking of every kind's sub-scales gives `sub_scales`' integers, lane g
    /// values 0..16 of group g and lane 8 + g values 16..32, for random blocks (every bit
    /// pattern of the scale fields).
    #[test]
    fn sub_scale_lanes_are_the_scalar_sub_scales() {
        if !crate::model::backend::cpu::features().avx2_fma_f16c {
            return;
        }
        let mut rng = crate::rng::SplitMix64(11);
        for kind in IQuant::ALL {
            for _ in 0..2000 {
                let block: Vec<u8> = (0..kind.block_bytes())
                    .map(|_| (rng.next_u64() & 0xff) as u8)
                    .collect();
                let want = sub_scales(kind, &block);
                let mut got = [0i16; 16];
                // SAFETY: AVX2, FMA and F16C detected above; 32 bytes into an array of 32.
                unsafe {
                    let lanes = avx2::sub_scale_halves(kind, &block);
                    std::arch::x86_64::_mm256_storeu_si256(got.as_mut_ptr() as *mut _, lanes);
                }
                for g in 0..8 {
                    let pair = [i32::from(got[g]), i32::from(got[8 + g])];
                    assert_eq!(pair, want[g], "{kind:?} group {g} of {block:?}");
                }
            }
        }
    }
}
