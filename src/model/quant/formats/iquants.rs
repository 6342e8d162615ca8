//! llama.cpp's i-quants (IQ1_S … IQ4_XS) decoded; on a GPU read into Q8_0 or Q5_0 blocks.
//!
//! Japanese judges are published in these types too (an IQ4_XS 8B is 4.4 GB against a Q4_K_M's
//! 4.9), but candle has neither their blocks nor their kernels. Each block is decoded here
//! exactly as ggml's `dequantize_row_iq*` decodes it (ggml-quants.c, tables from ggml-common.h in
//! `iquant_grids`): the values of `--weights expanded`, and of i-quant matrices on the CPU,
//! which stay in their blocks (`iq_rows`). On a GPU every i-quant matrix is held as Q8_0, the
//! block type every CUDA path of hyoka takes: 8.5 bits a weight in memory instead of the file's
//! 1.6–4.5 — or, where its integers fit in 5 bits (IQ3_S, IQ1_S: `IQuant::held_as`), as Q5_0,
//! 5.5 bits, the same values.
//!
//! Every i-quant value is a scale times a small integer: a level of IQ4's non-linear table, a
//! signed grid magnitude, or (IQ1) eight times a grid value plus or minus one. Where one scale
//! covers a Q8_0 block's 32 values (IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ1_S), the block
//! keeps those integers and the scale rounded to f16: IQ4_NL's scale is an f16 already, so its
//! values are kept exactly; the others' scales (the block's f16 times a 4–6 bit sub-scale) move
//! by at most 2⁻¹² of themselves. Where two scales share 32 values (IQ2_XS, IQ2_S, IQ1_M: one
//! per 16), the integers would not fit in 8 bits under one scale: those blocks are quantized
//! again from the decoded values as llama.cpp quantizes Q8_0 (`quantize_row_q8_0_ref`), an error
//! of at most half a step, 1/254 of the block's largest value.

use crate::model::quant::formats::iquant_grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
    KVALUES_IQ4NL,
};
use candle_core::quantized::GgmlDType;
use half::f16;

/// Values in a Q8_0 block, and in each group an i-quant block decodes into.
pub(crate) const GROUP: usize = 32;

/// An i-quant GGML type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IQuant {
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    Iq1M,
}

impl IQuant {
    pub const ALL: [IQuant; 9] = [
        IQuant::Iq2Xxs,
        IQuant::Iq2Xs,
        IQuant::Iq3Xxs,
        IQuant::Iq1S,
        IQuant::Iq4Nl,
        IQuant::Iq3S,
        IQuant::Iq2S,
        IQuant::Iq4Xs,
        IQuant::Iq1M,
    ];

    /// The i-quant of GGML type number `id` (ggml.h's `enum ggml_type`).
    pub fn from_type_id(id: u32) -> Option<Self> {
        Some(match id {
            16 => IQuant::Iq2Xxs,
            17 => IQuant::Iq2Xs,
            18 => IQuant::Iq3Xxs,
            19 => IQuant::Iq1S,
            20 => IQuant::Iq4Nl,
            21 => IQuant::Iq3S,
            22 => IQuant::Iq2S,
            23 => IQuant::Iq4Xs,
            29 => IQuant::Iq1M,
            _ => return None,
        })
    }

    /// ggml's name of the type (`type_traits`).
    pub fn ggml_name(self) -> &'static str {
        match self {
            IQuant::Iq2Xxs => "iq2_xxs",
            IQuant::Iq2Xs => "iq2_xs",
            IQuant::Iq3Xxs => "iq3_xxs",
            IQuant::Iq1S => "iq1_s",
            IQuant::Iq4Nl => "iq4_nl",
            IQuant::Iq3S => "iq3_s",
            IQuant::Iq2S => "iq2_s",
            IQuant::Iq4Xs => "iq4_xs",
            IQuant::Iq1M => "iq1_m",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IQuant::Iq2Xxs => "IQ2_XXS",
            IQuant::Iq2Xs => "IQ2_XS",
            IQuant::Iq3Xxs => "IQ3_XXS",
            IQuant::Iq1S => "IQ1_S",
            IQuant::Iq4Nl => "IQ4_NL",
            IQuant::Iq3S => "IQ3_S",
            IQuant::Iq2S => "IQ2_S",
            IQuant::Iq4Xs => "IQ4_XS",
            IQuant::Iq1M => "IQ1_M",
        }
    }

    /// Values a block holds.
    pub fn block_values(self) -> usize {
        match self {
            IQuant::Iq4Nl => 32,
            _ => 256,
        }
    }

    /// Bytes of a block (ggml-common.h's `block_iq*`).
    pub fn block_bytes(self) -> usize {
        match self {
            IQuant::Iq2Xxs => 66,
            IQuant::Iq2Xs => 74,
            IQuant::Iq3Xxs => 98,
            IQuant::Iq1S => 50,
            IQuant::Iq4Nl => 18,
            IQuant::Iq3S => 110,
            IQuant::Iq2S => 82,
            IQuant::Iq4Xs => 136,
            IQuant::Iq1M => 56,
        }
    }

    /// Groups of 32 values per block, and bytes per block.
    pub(crate) fn block_shape(self) -> (usize, usize) {
        (self.block_values() / GROUP, self.block_bytes())
    }

    /// Bytes of a row of `cols` values (a whole number of blocks).
    pub fn row_bytes(self, cols: usize) -> usize {
        cols / self.block_values() * self.block_bytes()
    }

    /// Whether its values are kept as read (an f16 scale per 32), not quantized again.
    pub fn exact(self) -> bool {
        self == IQuant::Iq4Nl
    }

    /// Whether one scale covers each 32 values (the integers are kept, the scale rounded to f16).
    pub fn one_scale_per_group(self) -> bool {
        !matches!(self, IQuant::Iq2Xs | IQuant::Iq2S | IQuant::Iq1M)
    }

    /// The largest |integer| of its values (`Group::q`): IQ4's table, the grids' magnitudes,
    /// IQ1's 8 + 1.
    pub fn largest_integer(self) -> usize {
        match self {
            IQuant::Iq4Nl | IQuant::Iq4Xs => 127,
            IQuant::Iq3Xxs => 62,
            IQuant::Iq3S => 15,
            IQuant::Iq2Xxs | IQuant::Iq2Xs | IQuant::Iq2S => 43,
            IQuant::Iq1S | IQuant::Iq1M => 9,
        }
    }

    /// The block type its matrices are held in where they are not kept in their own (`iq_rows`
    /// keeps them on the CPU; this is for a GPU): Q5_0 (5.5 bits a weight)
    /// where every 32 values are one scale times integers in −16..=15 (IQ3_S: odd magnitudes up
    /// to 15; IQ1_S: eight times a grid value ± 1, up to 9 in magnitude), which Q5_0 holds as
    /// exactly as Q8_0 does; Q8_0 (8.5 bits) for the others.
    pub fn held_as(self) -> GgmlDType {
        match self {
            IQuant::Iq3S | IQuant::Iq1S => GgmlDType::Q5_0,
            _ => GgmlDType::Q8_0,
        }
    }
}

/// 32 decoded values: value j is `scales[j / 16] * q[j]`, in f32, as ggml computes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Group {
    pub scales: [f32; 2],
    pub q: [i8; GROUP],
}

impl Group {
    const ZERO: Group = Group {
        scales: [0.0; 2],
        q: [0; GROUP],
    };

    fn one_scale(scale: f32) -> Group {
        Group {
            scales: [scale; 2],
            q: [0; GROUP],
        }
    }

    pub fn values(&self) -> [f32; GROUP] {
        std::array::from_fn(|j| self.scales[j / 16] * f32::from(self.q[j]))
    }
}

/// The values of i-quant blocks (`kind`, whole blocks) in f32, as ggml's `dequantize_row_*`.
pub fn dequantize(kind: IQuant, bytes: &[u8]) -> Vec<f32> {
    let mut groups = vec![Group::ZERO; bytes.len() / kind.block_bytes() * kind.block_values() / 32];
    decode(kind, bytes, &mut groups);
    groups.iter().flat_map(|g| g.values()).collect()
}

/// One block of `kind` as its groups of 32 values (the first `block_values / 32` of them).
pub(crate) fn block_groups(kind: IQuant, block: &[u8]) -> [Group; 8] {
    let mut groups = [Group::ZERO; 8];
    decode(kind, block, &mut groups[..kind.block_values() / GROUP]);
    groups
}

/// Blocks of `kind` into groups of 32 values (`groups.len()` = blocks × values a block / 32).
fn decode(kind: IQuant, bytes: &[u8], groups: &mut [Group]) {
    let per_block = kind.block_values() / GROUP;
    for (block, groups) in bytes
        .chunks_exact(kind.block_bytes())
        .zip(groups.chunks_exact_mut(per_block))
    {
        match kind {
            IQuant::Iq4Nl => iq4_nl(block, &mut groups[0]),
            IQuant::Iq4Xs => iq4_xs(block, groups),
            IQuant::Iq3Xxs => iq3_xxs(block, groups),
            IQuant::Iq3S => iq3_s(block, groups),
            IQuant::Iq2Xxs => iq2_xxs(block, groups),
            IQuant::Iq2Xs => iq2_xs(block, groups),
            IQuant::Iq2S => iq2_s(block, groups),
            IQuant::Iq1S => iq1_s(block, groups),
            IQuant::Iq1M => iq1_m(block, groups),
        }
    }
}

fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// The little-endian u16 at `at`: read as one slice, one load (byte by byte, LLVM left two
/// loads, a shift and an or in the AVX2 products' group loops).
#[inline]
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("a slice of 2"))
}

/// The little-endian u32 at `at`, one load (as `u16_at`).
#[inline]
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("a slice of 4"))
}

/// Byte `j` of a grid entry.
fn byte(entry: u64, j: usize) -> u8 {
    (entry >> (8 * j)) as u8
}

/// `magnitude` negated where bit `j` of `signs` is set.
fn signed(magnitude: u8, signs: u8, j: usize) -> i8 {
    let m = magnitude as i8;
    if signs >> j & 1 == 1 { -m } else { m }
}

/// Eight values of a grid entry with their signs into `q`.
fn put8(q: &mut [i8], entry: u64, signs: u8) {
    for (j, q) in q[..8].iter_mut().enumerate() {
        *q = signed(byte(entry, j), signs, j);
    }
}

/// 16 bytes of nibbles: low nibbles are values 0..16, high ones 16..32, levels of IQ4's table.
fn iq4_levels(qs: &[u8], g: &mut Group) {
    for (j, &b) in qs[..16].iter().enumerate() {
        g.q[j] = KVALUES_IQ4NL[usize::from(b & 0xf)];
        g.q[j + 16] = KVALUES_IQ4NL[usize::from(b >> 4)];
    }
}

/// d (f16), 16 bytes of nibbles.
fn iq4_nl(b: &[u8], g: &mut Group) {
    *g = Group::one_scale(half_at(b, 0));
    iq4_levels(&b[2..18], g);
}

/// d (f16), scales_h (u16: the high 2 bits of eight 6-bit scales), scales_l (4 bytes: their low
/// nibbles), 128 bytes of nibbles; a group's scale is d·(ls − 32).
fn iq4_xs(b: &[u8], groups: &mut [Group]) {
    let d = half_at(b, 0);
    for ((ib, g), ls) in groups.iter_mut().enumerate().zip(iq4_xs_sub_scales(b)) {
        *g = Group::one_scale(d * ls as f32);
        iq4_levels(&b[8 + 16 * ib..], g);
    }
}

/// An IQ4_XS block's eight group scales without d: ls − 32, ls the 6-bit scale (low nibble
/// from bytes 4..8, high 2 bits from the u16 at 2). A group's scale is d·(ls − 32) in f32.
#[inline]
pub(crate) fn iq4_xs_sub_scales(b: &[u8]) -> [i32; 8] {
    let (high, low) = (u16_at(b, 2), u32_at(b, 4));
    std::array::from_fn(|ib| {
        ((low >> (4 * ib)) & 0xf) as i32 | ((i32::from(high) >> (2 * ib)) & 3) << 4
    })
    .map(|ls| ls - 32)
}

/// An IQ3_S block's eight group scales without d: 1 + 2s, s the group's 4-bit scale (low
/// nibble of byte 106 + g/2 for even g, high for odd). A group's scale is d·(1 + 2s) in f32.
#[inline]
pub(crate) fn iq3_s_sub_scales(b: &[u8]) -> [i32; 8] {
    std::array::from_fn(|ib| 1 + 2 * i32::from((b[106 + ib / 2] >> (4 * (ib % 2))) & 0xf))
}

/// An IQ3_XXS block's eight group scales without d/4: 2s + 1, s the top 4 bits of the group's
/// u32 at 66 + 4g. ggml's scale d·(0.5 + s)·0.5 is (d·0.25)·(2s + 1) to the bit: both round
/// the same product once, the factors of 2 being exact in f32.
#[inline]
pub(crate) fn iq3_xxs_sub_scales(b: &[u8]) -> [i32; 8] {
    std::array::from_fn(|ib| 2 * (u32_at(b, 66 + 4 * ib) >> 28) as i32 + 1)
}

/// What a block's sub-scales multiply: its d (an f16; IQ1_M's spread over its scales' top
/// nibbles) times 1, 1/4 (IQ3_XXS) or 1/8 (IQ2_*, IQ1_*): exact in f32, so that unit times
/// sub-scale rounds once, as ggml's d·(0.5 + s)·0.25 or d·(2s + 1)/8 do.
#[inline]
pub(crate) fn unit_scale(kind: IQuant, block: &[u8]) -> f32 {
    if kind == IQuant::Iq1M {
        return iq1_m_d(block) * 0.125;
    }
    f16::from_le_bytes([block[0], block[1]]).to_f32() * unit_factor(kind)
}

/// The power of two that makes d a block's unit (`unit_scale`).
#[inline]
pub(crate) fn unit_factor(kind: IQuant) -> f32 {
    match kind {
        IQuant::Iq4Nl | IQuant::Iq4Xs | IQuant::Iq3S => 1.0,
        IQuant::Iq3Xxs => 0.25,
        IQuant::Iq2Xxs | IQuant::Iq2Xs | IQuant::Iq2S | IQuant::Iq1S | IQuant::Iq1M => 0.125,
    }
}

/// d (f16), 64 grid indices (bytes), then per group a u32: four 7-bit sign sets and a 4-bit
/// scale; scale d·(0.5 + s)·0.5.
fn iq3_xxs(b: &[u8], groups: &mut [Group]) {
    let unit = unit_scale(IQuant::Iq3Xxs, b);
    for ((ib, g), s) in groups.iter_mut().enumerate().zip(iq3_xxs_sub_scales(b)) {
        let aux = u32_at(b, 66 + 4 * ib);
        *g = Group::one_scale(unit * s as f32);
        let qs = &b[2 + 8 * ib..];
        for l in 0..4 {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            let grid1 = u64::from(IQ3XXS_GRID[usize::from(qs[2 * l])]);
            let grid2 = u64::from(IQ3XXS_GRID[usize::from(qs[2 * l + 1])]);
            put8(&mut g.q[8 * l..], grid1 | grid2 << 32, signs);
        }
    }
}

/// d (f16), 64 low bytes of 9-bit grid indices, 8 bytes of their high bits, 32 bytes of signs,
/// 4 bytes of 4-bit scales; scale d·(1 + 2s).
fn iq3_s(b: &[u8], groups: &mut [Group]) {
    let d = half_at(b, 0);
    for ((ib, g), s) in groups.iter_mut().enumerate().zip(iq3_s_sub_scales(b)) {
        *g = Group::one_scale(d * s as f32);
        let (qs, qh) = (&b[2 + 8 * ib..], u32::from(b[66 + ib]));
        for l in 0..4 {
            let i1 = u32::from(qs[2 * l]) | ((qh << (8 - 2 * l)) & 256);
            let i2 = u32::from(qs[2 * l + 1]) | ((qh << (7 - 2 * l)) & 256);
            let entry = u64::from(IQ3S_GRID[i1 as usize]) | u64::from(IQ3S_GRID[i2 as usize]) << 32;
            put8(&mut g.q[8 * l..], entry, b[74 + 4 * ib + l]);
        }
    }
}

/// d (f16), then per group two u32: four grid indices (bytes); four 7-bit sign sets and a
/// 4-bit scale. Scale d·(0.5 + s)·0.25.
fn iq2_xxs(b: &[u8], groups: &mut [Group]) {
    let unit = unit_scale(IQuant::Iq2Xxs, b);
    for ((ib, g), s) in groups.iter_mut().enumerate().zip(iq2_xxs_sub_scales(b)) {
        let at = 2 + 8 * ib;
        let aux = u32_at(b, at + 4);
        *g = Group::one_scale(unit * s as f32);
        for l in 0..4 {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            put8(
                &mut g.q[8 * l..],
                IQ2XXS_GRID[usize::from(b[at + l])],
                signs,
            );
        }
    }
}

/// An IQ2_XXS block's eight group scales without d/8: 2s + 1, s the top 4 bits of the group's
/// second u32 (at 6 + 8g). ggml's d·(0.5 + s)·0.25 is (d·0.125)·(2s + 1) to the bit.
#[inline]
pub(crate) fn iq2_xxs_sub_scales(b: &[u8]) -> [i32; 8] {
    std::array::from_fn(|ib| 2 * (u32_at(b, 6 + 8 * ib) >> 28) as i32 + 1)
}

/// The sub-scales of IQ2_XS (bytes from 66) and IQ2_S (from 74) without d/8: per group a byte
/// of two 4-bit scales s, 2s + 1 for values 0..16 (low nibble) and 16..32 (high). ggml's
/// d·(0.5 + s)·0.25 is (d·0.125)·(2s + 1) to the bit.
#[inline]
pub(crate) fn iq2_half_sub_scales(b: &[u8], at: usize) -> [[i32; 2]; 8] {
    std::array::from_fn(|ib| {
        let s = b[at + ib];
        [2 * i32::from(s & 0xf) + 1, 2 * i32::from(s >> 4) + 1]
    })
}

/// d (f16), 32 u16 (a 9-bit grid index and a 7-bit sign set), 8 bytes of two 4-bit scales.
fn iq2_xs(b: &[u8], groups: &mut [Group]) {
    let unit = unit_scale(IQuant::Iq2Xs, b);
    let subs = iq2_half_sub_scales(b, 66);
    for (ib, g) in groups.iter_mut().enumerate() {
        g.scales = subs[ib].map(|s| unit * s as f32);
        for l in 0..4 {
            let v = u16_at(b, 2 + 2 * (4 * ib + l));
            let signs = KSIGNS_IQ2XS[usize::from(v >> 9)];
            put8(&mut g.q[8 * l..], IQ2XS_GRID[usize::from(v & 511)], signs);
        }
    }
}

/// d (f16), 32 low bytes of 10-bit grid indices, 32 bytes of signs, 8 bytes of their high
/// bits, 8 bytes of two 4-bit scales.
fn iq2_s(b: &[u8], groups: &mut [Group]) {
    let unit = unit_scale(IQuant::Iq2S, b);
    let subs = iq2_half_sub_scales(b, 74);
    for (ib, g) in groups.iter_mut().enumerate() {
        g.scales = subs[ib].map(|s| unit * s as f32);
        let qh = u32::from(b[66 + ib]);
        for l in 0..4 {
            let i = u32::from(b[2 + 4 * ib + l]) | ((qh << (8 - 2 * l)) & 0x300);
            put8(&mut g.q[8 * l..], IQ2S_GRID[i as usize], b[34 + 4 * ib + l]);
        }
    }
}

/// Eight IQ1 values, grid ∈ {−1, 0, 1} plus or minus 1/8, as integers 8·grid ± 1 (the
/// group's scale is then dl / 8).
fn put8_iq1(q: &mut [i8], entry: u64, minus: bool) {
    for (j, q) in q[..8].iter_mut().enumerate() {
        *q = 8 * (byte(entry, j) as i8) + if minus { -1 } else { 1 };
    }
}

/// An IQ1_S block's eight group scales without d/8: 2s + 1, s bits 12..15 of the group's u16
/// at 34 + 2g. ggml's values dl·(grid ± 1/8), dl = d·(2s + 1) (exact in f32: 11 bits times
/// 4), are (d/8)·(2s + 1) times the integers 8·grid ± 1 to the bit.
#[inline]
pub(crate) fn iq1_s_sub_scales(b: &[u8]) -> [i32; 8] {
    std::array::from_fn(|ib| 2 * i32::from((u16_at(b, 34 + 2 * ib) >> 12) & 7) + 1)
}

/// d (f16), 32 low bytes of 11-bit grid indices, 8 u16: their high bits (3 per index), a 3-bit
/// scale and the sign of the shift. dl = d·(2s + 1).
fn iq1_s(b: &[u8], groups: &mut [Group]) {
    let unit = unit_scale(IQuant::Iq1S, b);
    for ((ib, g), s) in groups.iter_mut().enumerate().zip(iq1_s_sub_scales(b)) {
        let qh = u16_at(b, 34 + 2 * ib);
        *g = Group::one_scale(unit * s as f32);
        for l in 0..4 {
            let i = usize::from(b[2 + 4 * ib + l]) | usize::from((qh >> (3 * l)) & 7) << 8;
            put8_iq1(&mut g.q[8 * l..], IQ1S_GRID[i], qh & 0x8000 != 0);
        }
    }
}

/// An IQ1_M block's d: the top nibbles of its four u16 scales (at 48), an f16.
#[inline]
fn iq1_m_d(b: &[u8]) -> f32 {
    f16::from_bits(iq1_m_d_bits(b)).to_f32()
}

/// IQ1_M's d as f16 bits: the top nibbles of its four scale u16 (at 48), lowest first.
#[inline]
pub(crate) fn iq1_m_d_bits(b: &[u8]) -> u16 {
    let sc: [u16; 4] = std::array::from_fn(|i| u16_at(b, 48 + 2 * i));
    (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)
}

/// An IQ1_M block's sub-scales without d/8: per group two 3-bit scales s (values 0..16 and
/// 16..32; six bits of the u16 at 48 + 2·(g/2), from bit 6·(g % 2)), 2s + 1.
#[inline]
pub(crate) fn iq1_m_sub_scales(b: &[u8]) -> [[i32; 2]; 8] {
    std::array::from_fn(|ib| {
        let s = u16_at(b, 48 + 2 * (ib / 2)) >> (6 * (ib % 2));
        [2 * i32::from(s & 7) + 1, 2 * i32::from((s >> 3) & 7) + 1]
    })
}

/// The high bits and the shift's sign of an IQ1_M group's four sets of eight values (its two
/// bytes at 32 + 2g: a nibble per set, 3 high bits of the grid index and the sign).
fn iq1_m_high(b: &[u8], ib: usize) -> [(usize, bool); 4] {
    std::array::from_fn(|l| {
        let h = usize::from(b[32 + 2 * ib + l / 2]) >> (4 * (l % 2));
        ((h & 7) << 8, h & 8 != 0)
    })
}

/// 32 low bytes of 11-bit grid indices, 16 bytes (per 8 values: 3 high bits, a shift sign), 8
/// bytes of 3-bit scales (two per group) whose top nibbles make up d (f16).
fn iq1_m(b: &[u8], groups: &mut [Group]) {
    let unit = unit_scale(IQuant::Iq1M, b);
    for ((ib, g), subs) in groups.iter_mut().enumerate().zip(iq1_m_sub_scales(b)) {
        g.scales = subs.map(|s| unit * s as f32);
        for (l, (high, minus)) in iq1_m_high(b, ib).into_iter().enumerate() {
            put8_iq1(
                &mut g.q[8 * l..],
                IQ1S_GRID[usize::from(b[4 * ib + l]) | high],
                minus,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `largest_integer` is the largest magnitude of each kind's table: the AVX2 8-bit
    /// products' i16 sums rest on it (`int8_products::layout::i16_run`).
    #[test]
    fn largest_integers_are_the_tables() {
        let bytes = |table: &[u64]| -> usize {
            let all = table.iter().flat_map(|e| e.to_le_bytes());
            all.map(|b| (b as i8).unsigned_abs() as usize)
                .max()
                .unwrap_or(0)
        };
        let words = |table: &[u32]| -> usize {
            let all = table.iter().flat_map(|e| e.to_le_bytes());
            all.map(|b| b as usize).max().unwrap_or(0)
        };
        let iq4 = KVALUES_IQ4NL
            .iter()
            .map(|v| v.unsigned_abs() as usize)
            .max();
        for kind in IQuant::ALL {
            let table = match kind {
                IQuant::Iq4Nl | IQuant::Iq4Xs => iq4.unwrap_or(0),
                IQuant::Iq3Xxs => words(&IQ3XXS_GRID),
                IQuant::Iq3S => words(&IQ3S_GRID),
                IQuant::Iq2Xxs => bytes(&IQ2XXS_GRID),
                IQuant::Iq2Xs => bytes(&IQ2XS_GRID),
                IQuant::Iq2S => bytes(&IQ2S_GRID),
                // 8·grid ± 1, grid ∈ {−1, 0, 1}.
                IQuant::Iq1S | IQuant::Iq1M => 8 * bytes(&IQ1S_GRID) + 1,
            };
            assert_eq!(kind.largest_integer(), table, "{}", kind.name());
        }
    }

    /// Every GGML type number of an i-quant names one, with the bits a weight ggml-common.h
    /// gives its blocks.
    #[test]
    fn types_follow_ggml_h() {
        let bits = [
            ("IQ2_XXS", 2.0625),
            ("IQ2_XS", 2.3125),
            ("IQ3_XXS", 3.0625),
            ("IQ1_S", 1.5625),
            ("IQ4_NL", 4.5),
            ("IQ3_S", 3.4375),
            ("IQ2_S", 2.5625),
            ("IQ4_XS", 4.25),
            ("IQ1_M", 1.75),
        ];
        let mut seen = 0;
        for id in 0..64 {
            if let Some(kind) = IQuant::from_type_id(id) {
                assert_eq!(
                    crate::model::quant::formats::ggml_types::type_name(id),
                    Some(kind.name())
                );
                let (_, want) = bits.iter().find(|(n, _)| *n == kind.name()).unwrap();
                let got = (kind.block_bytes() * 8) as f64 / kind.block_values() as f64;
                assert_eq!(got, *want, "{kind:?}");
                seen += 1;
            }
        }
        assert_eq!(seen, bits.len());
    }

    /// The sign table is its definition: seven bits and their parity.
    #[test]
    fn sign_table_is_seven_bits_and_parity() {
        for (i, &s) in KSIGNS_IQ2XS.iter().enumerate() {
            let parity = (i as u32).count_ones() as usize & 1;
            assert_eq!(usize::from(s), i | parity << 7, "{i}");
        }
    }
}
