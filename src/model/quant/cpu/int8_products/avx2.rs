//! The AVX2 body, for CPUs without AVX-512 VNNI (Intel before Ice Lake and its client cores
//! since Alder Lake, AMD before Zen 4): `vpmaddubsw` multiplies a weight row's four bytes,
//! broadcast, by four activations of each of eight tokens and adds the products pairwise into
//! i16; `vpmaddwd` by ones adds the pairs into each token's i32. A group of sixteen tokens is
//! two halves of eight.
//!
//! The i16 sums take `layout::i16_run` steps of four values before they are widened: each step
//! adds at most 2 · 127 · `BlockFormat::largest_integer` to a lane, and a run stays within i16.
//! Signed forms (their integer + 128 under VNNI) are kept as the signed integers
//! (`Unpacked::signed`) and multiply as |w| times x with w's sign (`vpsignb`), as llama.cpp's
//! AVX2 kernels do: the unsigned operand |w| ≤ 128, the signed one |x| ≤ 127.
//!
//! Each unit's dot is the same integer as VNNI's and the float work is the same operations in
//! the same order, so both bodies give the same bits
//! (`tests::each_product_is_one_chain_over_the_units`).

// Register tiles are indexed by row; iterators would hide that.
#![allow(clippy::needless_range_loop)]

use crate::model::quant::cpu::int8_products::layout::{Lanes, TASK_ROWS, TOKENS, Unpacked};
use crate::model::quant::cpu::int8_products::operands::{Groups, Rows};
use crate::model::quant::cpu::row_tasks::Columns;
use crate::model::quant::formats::legacy::BLOCK;
use std::arch::x86_64::*;
use std::ops::Range;

/// Weight rows per tile: their chains in flight together, each activation vector read once for
/// the four.
const ROWS: usize = crate::model::quant::cpu::int8_products::layout::TILE;

/// Tokens per register (eight i32): a group's half.
const HALF: usize = TOKENS / 2;

/// Blocks of 32 values per pass over the task's tiles: a group's activations for a span are
/// 8 KiB, the task's weight bytes 16 KiB.
const SPAN: usize = 16;

/// A tile's f32 chains for one half, one register per row: carried from span to span.
type Sums = [__m256; ROWS];

/// y[token][first + r] = weight row r · token, for each of the task's rows `w` (its columns
/// from `first`) and each token.
#[target_feature(enable = "avx2,fma")]
pub fn times(w: &Unpacked, lanes: &Lanes, columns: &Columns) {
    let run = crate::model::quant::cpu::int8_products::layout::i16_run(w.form);
    match (w.form.scales_per_16(), w.form.has_unit_min(), w.signed) {
        (true, true, true) => times_as::<true, true, true>(w, lanes, columns, run),
        (true, true, false) => times_as::<true, true, false>(w, lanes, columns, run),
        (true, false, true) => times_as::<true, false, true>(w, lanes, columns, run),
        (true, false, false) => times_as::<true, false, false>(w, lanes, columns, run),
        (false, true, true) => times_as::<false, true, true>(w, lanes, columns, run),
        (false, true, false) => times_as::<false, true, false>(w, lanes, columns, run),
        (false, false, true) => times_as::<false, false, true>(w, lanes, columns, run),
        (false, false, false) => times_as::<false, false, false>(w, lanes, columns, run),
    }
}

/// One token group at a time, through the task's rows four at a time and each half of the
/// group, over `SPAN` blocks of k at a time (the group's span of activations stays in L1 for
/// all the rows, as in the VNNI body).
#[target_feature(enable = "avx2,fma")]
fn times_as<const HALVES: bool, const MIN: bool, const SIGNED: bool>(
    w: &Unpacked,
    lanes: &Lanes,
    columns: &Columns,
    run: usize,
) {
    let (rows, n) = (w.rows(), columns.tokens());
    assert!(rows <= TASK_ROWS, "a task's weight rows");
    let first = columns.rows().start;
    // The last tile's rows past the last are zeros; their sums are dropped.
    let tiles: Vec<Rows> = (0..rows.div_ceil(ROWS)).map(|t| Rows::new(w, t)).collect();
    let mut staged = [[0f32; TOKENS]; TASK_ROWS];
    for group in 0..lanes.groups() {
        columns.prefetch(group * TOKENS..(group + 1) * TOKENS);
        let x = Groups::<1>::new(lanes, group, w.form);
        let mut sums = [[[_mm256_setzero_ps(); ROWS]; 2]; TASK_ROWS / ROWS];
        for from in (0..lanes.blocks).step_by(SPAN) {
            let span = from..(from + SPAN).min(lanes.blocks);
            for (tile, acc) in tiles.iter().zip(sums.iter_mut()) {
                for (half, acc) in acc.iter_mut().enumerate() {
                    *acc =
                        tile_half::<HALVES, MIN, SIGNED>(tile, &x, half, run, span.clone(), *acc);
                }
            }
        }
        for (t, acc) in sums.iter().enumerate().take(tiles.len()) {
            for i in 0..ROWS.min(rows - t * ROWS) {
                for (half, acc) in acc.iter().enumerate() {
                    let out = &mut staged[t * ROWS + i][half * HALF..(half + 1) * HALF];
                    // SAFETY: 8 values into a slice of 8.
                    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc[i]) };
                }
            }
        }
        let tokens = (n - group * TOKENS).min(TOKENS);
        columns.put_tile((group * TOKENS, tokens), (first, rows), &staged);
    }
}

/// Rows `w` times the eight tokens of half `half` of group `x`, over `blocks`, carried on from
/// `acc`: the VNNI body's f32 chain per token and row (`vnni::tile`), its integer dots made `run`
/// steps of i16 sums at a time. Not inlined, as `vnni::tile`.
#[inline(never)]
#[target_feature(enable = "avx2,fma")]
fn tile_half<const HALVES: bool, const MIN: bool, const SIGNED: bool>(
    w: &Rows,
    x: &Groups<1>,
    half: usize,
    run: usize,
    blocks: Range<usize>,
    mut acc: Sums,
) -> Sums {
    let units = if HALVES { 2 } else { 1 };
    let steps = 8 / units;
    assert!(blocks.end <= w.blocks && w.blocks == x.blocks && x.units == units);
    assert!(!MIN || x.min);
    assert!(half < 2 && run >= 1 && steps.is_multiple_of(run));
    let (lane, ones) = (half * HALF, _mm256_set1_epi16(1));
    // SAFETY (every read below): b < blocks of both, as `Rows::new` and `Groups::new` checked
    // their lengths: per block 128 bytes, 4 scales and 4 mins (MIN) per unit; per group and
    // block 512 bytes, 16 scales, 16 starts and 16 d·Σx (MIN) per unit, of which this half's 8.
    for b in blocks {
        let dx = unsafe { _mm256_loadu_ps(x.d[0].add(b * TOKENS + lane)) };
        let mut part = [_mm256_setzero_ps(); ROWS];
        for u in 0..units {
            // Signed forms' bytes are the integers themselves: their dots start at zero.
            let start = if SIGNED {
                _mm256_setzero_si256()
            } else {
                unsafe {
                    _mm256_loadu_si256(x.starts[0].add((b * units + u) * TOKENS + lane) as *const _)
                }
            };
            let mut dots = [start; ROWS];
            for from in (u * steps..(u + 1) * steps).step_by(run) {
                let mut pairs = products::<SIGNED>(w, x, b, from, lane);
                for s in from + 1..from + run {
                    let more = products::<SIGNED>(w, x, b, s, lane);
                    for i in 0..ROWS {
                        pairs[i] = _mm256_add_epi16(pairs[i], more[i]);
                    }
                }
                for i in 0..ROWS {
                    dots[i] = _mm256_add_epi32(dots[i], _mm256_madd_epi16(pairs[i], ones));
                }
            }
            for i in 0..ROWS {
                let scale = _mm256_set1_ps(unsafe { *w.scales.add((b * units + u) * ROWS + i) });
                let dot = _mm256_cvtepi32_ps(dots[i]);
                if !HALVES {
                    acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(scale, dx), dot, acc[i]);
                } else if u == 0 {
                    part[i] = _mm256_mul_ps(dot, scale);
                } else {
                    part[i] = _mm256_fmadd_ps(dot, scale, part[i]);
                }
            }
        }
        if HALVES {
            for i in 0..ROWS {
                acc[i] = _mm256_fmadd_ps(part[i], dx, acc[i]);
            }
        }
        for u in 0..if MIN { units } else { 0 } {
            let d_sums =
                unsafe { _mm256_loadu_ps(x.d_sums[0].add((b * units + u) * TOKENS + lane)) };
            for i in 0..ROWS {
                let min = _mm256_set1_ps(unsafe { *w.mins.add((b * units + u) * ROWS + i) });
                acc[i] = _mm256_fnmadd_ps(min, d_sums, acc[i]);
            }
        }
    }
    acc
}

/// Four values (step s of block b) of the tile's rows times those of the half's eight tokens,
/// as i16 sums of pairs. Inlined into `tile_half`, whose features its intrinsics take.
#[inline(always)]
fn products<const SIGNED: bool>(
    w: &Rows,
    x: &Groups<1>,
    b: usize,
    s: usize,
    lane: usize,
) -> [__m256i; ROWS] {
    // SAFETY: AVX2, as in the caller; its reads: b < blocks of both, s < 8, lane + 8 ≤ 16
    // tokens.
    unsafe {
        let xs = _mm256_loadu_si256(x.qs[0].add(((b * 8 + s) * TOKENS + lane) * 4) as *const _);
        let mut pairs = [_mm256_setzero_si256(); ROWS];
        for i in 0..ROWS {
            let p = w.bytes.add((b * ROWS + i) * BLOCK + 4 * s) as *const i32;
            let word = _mm256_set1_epi32(p.read_unaligned());
            pairs[i] = if SIGNED {
                _mm256_maddubs_epi16(_mm256_abs_epi8(word), _mm256_sign_epi8(xs, word))
            } else {
                _mm256_maddubs_epi16(word, xs)
            };
        }
        pairs
    }
}
