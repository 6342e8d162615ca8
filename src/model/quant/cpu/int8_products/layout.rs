//! How the 8-bit products hold a run of weight rows: the lanes of a tile, and the unpacked
//! integers and scales a tile multiplies (each format's bytes as `formats::byte_form` says).

use crate::model::quant::cpu::block_dots::Q8Rows;
use crate::model::quant::formats::block_format::BlockFormat;
use crate::model::quant::formats::legacy::BLOCK;
use rayon::prelude::*;

/// Tokens per lane group: one AVX-512 register of i32 (two AVX2 registers, `avx2`).
pub(super) const TOKENS: usize = 16;

/// Weight rows per task: unpacked to bytes once, then multiplied with every token group.
pub(super) const TASK_ROWS: usize = 32;

/// Steps of four values whose pair sums (`vpmaddubsw`, at most 2 · 127 · `largest_integer`
/// each) the AVX2 body adds in i16 before widening them: the most, a power of two within a
/// unit, that cannot pass 32767.
pub(super) fn i16_run(form: BlockFormat) -> usize {
    let (steps, per_step) = (8 / form.scale_units(), 2 * 127 * form.largest_integer());
    [8, 4, 2, 1]
        .into_iter()
        .find(|&run| run <= steps && run * per_step <= i16::MAX as usize)
        .unwrap_or(1)
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
    pub(super) fn new(acts: &Q8Rows, n: usize, k: usize, form: BlockFormat) -> Self {
        let blocks = k / BLOCK;
        let groups = n.div_ceil(TOKENS);
        let units = form.scale_units();
        let min = form.has_unit_min();
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
                            starts[at] = -form.byte_offset() * sum;
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
    pub(super) form: BlockFormat,
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
