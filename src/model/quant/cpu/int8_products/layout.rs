//! How the 8-bit products hold a run of weight rows: each type's form, the lanes of a tile,
//! and the unpacked integers and scales a tile multiplies.

use crate::model::quant::cpu::block_dots::Q8Rows;
use crate::model::quant::cpu::kquant_dots::KQuantKind;
use crate::model::quant::formats::block_format::BlockFormat;
use crate::model::quant::formats::iquants::IQuant;
use crate::model::quant::formats::legacy::{BLOCK, BlockKind};
use crate::model::quant::matrix::RowKernels;
use rayon::prelude::*;

/// Tokens per lane group: one AVX-512 register of i32 (two AVX2 registers, `avx2`).
pub(super) const TOKENS: usize = 16;

/// Weight rows per task: unpacked to bytes once, then multiplied with every token group.
pub(super) const TASK_ROWS: usize = 32;

/// How a weight type's values read as bytes: value = scale·(byte − offset) − min, one scale
/// per `unit` values (32, or 16 for Q2_K, Q3_K and Q6_K), one min per unit (Q4_1, Q5_1, Q2_K,
/// Q4_K, Q5_K).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Form {
    Blocks(BlockKind),
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    /// An i-quant: a group's integers (IQ4's levels, IQ3's and IQ2's signed grid magnitudes,
    /// IQ1's 8·grid ± 1) + 128, a scale per 32 (IQ2_XS, IQ2_S, IQ1_M: per 16) (`iq_rows`).
    Iq(IQuant),
}

impl Form {
    /// Every type with row kernels has a form: a type added there must be given one here.
    pub(super) fn of(kernels: &RowKernels) -> Self {
        match kernels.format {
            BlockFormat::Legacy(kind) => Form::Blocks(kind),
            BlockFormat::KQuant(KQuantKind::Q2K) => Form::Q2K,
            BlockFormat::KQuant(KQuantKind::Q3K) => Form::Q3K,
            BlockFormat::KQuant(KQuantKind::Q4K) => Form::Q4K,
            BlockFormat::KQuant(KQuantKind::Q5K) => Form::Q5K,
            BlockFormat::KQuant(KQuantKind::Q6K) => Form::Q6K,
            BlockFormat::IQuant(kind) => Form::Iq(kind),
        }
    }

    pub(super) fn offset(self) -> i32 {
        match self {
            Form::Blocks(kind) if !kind.has_min() => 128,
            Form::Iq(_) => 128,
            Form::Blocks(_) | Form::Q2K | Form::Q4K | Form::Q5K => 0,
            Form::Q3K => 4,
            Form::Q6K => 32,
        }
    }

    /// Scales per 32 values: two where they change every 16.
    pub(super) fn halves(self) -> bool {
        match self {
            Form::Q2K | Form::Q3K | Form::Q6K => true,
            Form::Iq(kind) => !kind.one_scale_per_group(),
            Form::Blocks(_) | Form::Q4K | Form::Q5K => false,
        }
    }

    pub(super) fn has_min(self) -> bool {
        match self {
            Form::Blocks(kind) => kind.has_min(),
            Form::Q2K | Form::Q4K | Form::Q5K => true,
            Form::Q3K | Form::Q6K | Form::Iq(_) => false,
        }
    }

    /// Whether a min multiplies llama.cpp's Q8_1 block sum s = f16(f16(Σx)·d_x), as the
    /// single-token kernels of these blocks take it, rather than d_x·Σx in f32.
    pub(super) fn takes_q8_1_sums(self) -> bool {
        matches!(self, Form::Blocks(kind) if kind.has_min())
    }

    /// Units (scales) per 32 values.
    pub(super) fn units(self) -> usize {
        if self.halves() { 2 } else { 1 }
    }

    /// The largest magnitude a weight's integer takes in the AVX2 body's multiply: the byte
    /// for forms with a smaller offset than 128, |integer| for the others (Q8_0's −128: 128).
    pub(super) fn largest_integer(self) -> usize {
        match self {
            Form::Blocks(BlockKind::Q4_0) => 8,
            Form::Blocks(BlockKind::Q4_1) => 15,
            Form::Blocks(BlockKind::Q5_0) => 16,
            Form::Blocks(BlockKind::Q5_1) => 31,
            Form::Blocks(BlockKind::Q8_0) => 128,
            Form::Q2K => 3,
            Form::Q3K => 7,
            Form::Q4K => 15,
            Form::Q5K => 31,
            Form::Q6K => 63,
            Form::Iq(kind) => kind.largest_integer(),
        }
    }

    /// Steps of four values whose pair sums (`vpmaddubsw`, at most 2 · 127 · `largest_integer`
    /// each) the AVX2 body adds in i16 before widening them: the most, a power of two within a
    /// unit, that cannot pass 32767.
    pub(super) fn i16_run(self) -> usize {
        let (steps, per_step) = (8 / self.units(), 2 * 127 * self.largest_integer());
        [8, 4, 2, 1]
            .into_iter()
            .find(|&run| run <= steps && run * per_step <= i16::MAX as usize)
            .unwrap_or(1)
    }

    /// Values and bytes per block.
    pub(super) fn block(self) -> (usize, usize) {
        match self {
            Form::Blocks(kind) => (BLOCK, kind.block_bytes()),
            Form::Q2K => (256, KQuantKind::Q2K.block_bytes()),
            Form::Q3K => (256, KQuantKind::Q3K.block_bytes()),
            Form::Q4K => (256, KQuantKind::Q4K.block_bytes()),
            Form::Q5K => (256, KQuantKind::Q5K.block_bytes()),
            Form::Q6K => (256, KQuantKind::Q6K.block_bytes()),
            Form::Iq(kind) => (kind.block_values(), kind.block_bytes()),
        }
    }
}

/// Activations of n tokens in groups of 16, interleaved for the lanes: per group and block of
/// 32, bytes 4g..4g + 4 of token t at `[(g·16 + t)·4..]`; each token's block scale d; minus
/// the weights' offset times the token's sum over each unit (what a unit's dot starts from, so
/// that the offset the bytes carry cancels); with a min, d times the unit's sum (what a min
/// multiplies: one product per token and unit, not per row; Q8_1's s for Q4_1/Q5_1). Zeros
/// for tokens past n.
pub(super) struct Lanes {
    pub(super) blocks: usize,
    pub(super) qs: Vec<i8>,
    pub(super) d: Vec<f32>,
    pub(super) starts: Vec<i32>,
    pub(super) d_sums: Vec<f32>,
}

impl Lanes {
    pub(super) fn new(acts: &Q8Rows, n: usize, k: usize, form: Form) -> Self {
        let blocks = k / BLOCK;
        let groups = n.div_ceil(TOKENS);
        let units = form.units();
        let min = form.has_min();
        let mut lanes = Lanes {
            blocks,
            qs: vec![0; groups * blocks * BLOCK * TOKENS],
            d: vec![0.0; groups * blocks * TOKENS],
            starts: vec![0; groups * blocks * units * TOKENS],
            // Kept for every form (a value per token and unit), filled only with a min.
            d_sums: vec![0.0; groups * blocks * units * TOKENS],
        };
        let (values, scales, q8_1_sums) = (acts.values(), acts.scales(), acts.sums());
        let blocks_with_sums = if form.takes_q8_1_sums() {
            scales.len()
        } else {
            0
        };
        assert_eq!(q8_1_sums.len(), blocks_with_sums, "activations' Q8_1 sums");
        let sum = |x: &[i8]| x.iter().map(|&q| q as i32).sum::<i32>();
        // Group by group on the threads: a prompt's products interleave thousands of tokens.
        // (max(1): chunks must not be empty; with k = 0 every vector is.)
        let per_group = (blocks * TOKENS).max(1);
        lanes
            .qs
            .par_chunks_mut(per_group * BLOCK)
            .zip(lanes.d.par_chunks_mut(per_group))
            .zip(lanes.starts.par_chunks_mut(per_group * units))
            .zip(lanes.d_sums.par_chunks_mut(per_group * units))
            .enumerate()
            .for_each(|(group, (((qs, d), starts), d_sums))| {
                for t in 0..TOKENS.min(n - group * TOKENS) {
                    let token = group * TOKENS + t;
                    for b in 0..blocks {
                        let x = &values[token * k + b * BLOCK..token * k + (b + 1) * BLOCK];
                        let base = b * BLOCK * TOKENS;
                        for (g, four) in x.chunks_exact(4).enumerate() {
                            let to = base + (g * TOKENS + t) * 4;
                            let four: [i8; 4] = [four[0], four[1], four[2], four[3]];
                            let dst: &mut [i8; 4] = (&mut qs[to..to + 4]).try_into().unwrap();
                            *dst = four;
                        }
                        let dx = scales[token * blocks + b];
                        d[b * TOKENS + t] = dx;
                        for (u, unit) in x.chunks_exact(BLOCK / units).enumerate() {
                            let at = (b * units + u) * TOKENS + t;
                            let sum = sum(unit);
                            starts[at] = -form.offset() * sum;
                            if min {
                                d_sums[at] = if form.takes_q8_1_sums() {
                                    q8_1_sums[token * blocks + b]
                                } else {
                                    dx * sum as f32
                                };
                            }
                        }
                    }
                }
            });
        lanes
    }

    pub(super) fn groups(&self) -> usize {
        self.d.len() / (self.blocks * TOKENS).max(1)
    }
}

/// Weight rows as bytes (integer + offset, unsigned as the instruction takes them), a scale
/// per unit and, for Q4_1, Q5_1, Q2_K, Q4_K and Q5_K, a min per unit: value = scale·(byte −
/// offset) − min, the scale and min as candle's `to_float` computes them (Q4_1/Q5_1's d·q + m
/// with min = −m: the same rounding). Laid out for the kernel's tiles of
/// `TILE` rows: per tile and block of 32 values, the tile's rows' 32 bytes one after the other
/// (128 bytes), then its scales and mins likewise, so that a tile reads one sequential stream
/// (four rows apart in memory, 4 and 14 KiB, the streams from L2 ran the kernel at ~40% of the
/// instruction's rate). Rows past the last of the last tile are zeros.
pub(super) struct Unpacked {
    pub(super) form: Form,
    pub(super) k: usize,
    pub(super) rows: usize,
    /// The bytes are the integers themselves, not + 128 (`Body::signed_bytes`).
    pub(super) signed: bool,
    pub(super) bytes: Vec<u8>,
    pub(super) scales: Vec<f32>,
    pub(super) mins: Vec<f32>,
}

/// Weight rows per tile of the kernel (`avx512::tile`).
pub(super) const TILE: usize = 4;
