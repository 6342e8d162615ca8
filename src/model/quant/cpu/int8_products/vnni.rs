//! The AVX-512 VNNI body: one `vpdpbusd` multiplies a weight row's four bytes by four
//! activations of each of sixteen tokens and adds the four products to each token's i32.

// Register tiles are indexed by row and by group together; iterators would hide that.
#![allow(clippy::needless_range_loop)]

use crate::model::quant::cpu::int8_products::layout::{Lanes, TASK_ROWS, TOKENS, Unpacked};
use crate::model::quant::cpu::int8_products::operands::{Groups, Rows};
use crate::model::quant::cpu::row_tasks::Columns;
use crate::model::quant::formats::legacy::BLOCK;
use std::arch::x86_64::*;
use std::ops::Range;

/// Weight rows per tile: their block chains in flight together.
const ROWS: usize = crate::model::quant::cpu::int8_products::layout::TILE;

/// Token groups per tile: each broadcast weight word feeds this many instructions, each
/// group's activation vector this many rows' (4 × 2 × 2 halves: sixteen integer chains).
const GROUPS: usize = 2;

/// Blocks of 32 values per pass over a tile: two groups' activations for a span are 16 KiB.
const SPAN: usize = 16;

/// A tile's f32 chains, one register per (row, group): carried from span to span.
type Sums = [[__m512; GROUPS]; ROWS];

/// y[token][first + r] = weight row r · token, for each of the task's rows `w` (its columns
/// from `first`) and each token.
#[target_feature(enable = "avx512f,avx512vnni")]
pub fn times(w: &Unpacked, lanes: &Lanes, columns: &Columns) {
    match (w.form.scales_per_16(), w.form.has_unit_min()) {
        (true, true) => times_as::<true, true>(w, lanes, columns),
        (true, false) => times_as::<true, false>(w, lanes, columns),
        (false, true) => times_as::<false, true>(w, lanes, columns),
        (false, false) => times_as::<false, false>(w, lanes, columns),
    }
}

/// Two token groups at a time (32 tokens), through the task's rows four at a time, over
/// `SPAN` blocks of k at a time: the two groups' span of activations (16 KiB) stays in L1 for
/// all the rows. Going through all of k per tile of 4 rows and 16 tokens would read 80 KiB
/// from L2 per tile (perf: 23% of VNNI's peak on an 8B prefill).
#[target_feature(enable = "avx512f,avx512vnni")]
fn times_as<const HALVES: bool, const MIN: bool>(w: &Unpacked, lanes: &Lanes, columns: &Columns) {
    let (rows, n) = (w.rows(), columns.tokens());
    assert!(rows <= TASK_ROWS, "a task's weight rows");
    let first = columns.rows().start;
    // The last tile's rows past the last are zeros; their sums are dropped.
    let tiles: Vec<Rows> = (0..rows.div_ceil(ROWS)).map(|t| Rows::new(w, t)).collect();
    // A group's outputs gathered here (2 KiB, in L1), then written as one run of the task's
    // columns per token: 16-byte stores tile by tile, each to another token's row of y, take
    // more CPU time than this part-and-gather (perf, Qwen2.5-0.5B prefill).
    let mut staged = [[0f32; TOKENS]; TASK_ROWS];
    for pair in (0..lanes.groups()).step_by(GROUPS) {
        let groups = (lanes.groups() - pair).min(GROUPS);
        columns.prefetch(pair * TOKENS..(pair + groups) * TOKENS);
        let mut sums = [[[_mm512_setzero_ps(); GROUPS]; ROWS]; TASK_ROWS / ROWS];
        // The pair's lanes, or the last group alone.
        let two = (groups == 2).then(|| Groups::<2>::new(lanes, pair, w.form));
        let one = (groups == 1).then(|| Groups::<1>::new(lanes, pair, w.form));
        for from in (0..lanes.blocks).step_by(SPAN) {
            let span = from..(from + SPAN).min(lanes.blocks);
            for (tile, acc) in tiles.iter().zip(sums.iter_mut()) {
                let span = span.clone();
                *acc = match (&two, &one) {
                    (Some(x), _) => self::tile::<HALVES, MIN, 2>(tile, x, span, *acc),
                    (_, Some(x)) => self::tile::<HALVES, MIN, 1>(tile, x, span, *acc),
                    (None, None) => unreachable!("a pair holds one or two groups"),
                };
            }
        }
        for g in 0..groups {
            for (t, acc) in sums.iter().enumerate().take(tiles.len()) {
                for i in 0..ROWS.min(rows - t * ROWS) {
                    // SAFETY: 16 values into an array of 16.
                    unsafe { _mm512_storeu_ps(staged[t * ROWS + i].as_mut_ptr(), acc[i][g]) };
                }
            }
            let group = pair + g;
            let tokens = (n - group * TOKENS).min(TOKENS);
            columns.put_tile((group * TOKENS, tokens), (first, rows), &staged);
        }
    }
}

/// Rows `w` times the 16 tokens of each of the G groups `x`, over `blocks`, carried on
/// from `acc`: per token and row, the f32 chain over the blocks in order of
/// fma(scale·d_x, dot, ·) (`HALVES`, two scales per 32 values: fma(scale₀·dot₀ +
/// scale₁·dot₁, d_x, ·), one multiply by d_x a block; `MIN`: then − min·(d_x·Σx) per
/// unit). The float work shares its ports with the integer instruction, so it is kept to
/// what each block needs; one integer chain per unit, the blocks' chains overlapping in the
/// core's window (two per 32 values, then added, measure no faster). Not inlined, with its
/// operands checked by their makers: inlined into its caller's loops the chains are kept in
/// memory and the activations spilled (perf).
#[inline(never)]
#[target_feature(enable = "avx512f,avx512vnni")]
fn tile<const HALVES: bool, const MIN: bool, const G: usize>(
    w: &Rows,
    x: &Groups<G>,
    blocks: Range<usize>,
    mut acc: Sums,
) -> Sums {
    let units = if HALVES { 2 } else { 1 };
    assert!(blocks.end <= w.blocks && w.blocks == x.blocks && x.units == units);
    assert!(!MIN || x.min);
    // SAFETY (every read below): b < blocks of both, as `Rows::new` and `Groups::new`
    // checked their lengths: per block 128 bytes, 4 scales and 4 mins (MIN) per unit;
    // per group and block 512 bytes, 16 scales, 16 starts and 16 d·Σx (MIN) per unit.
    for b in blocks {
        let dx: [__m512; G] =
            std::array::from_fn(|g| unsafe { _mm512_loadu_ps(x.d[g].add(b * TOKENS)) });
        // HALVES: the block's two units summed, then times d_x once.
        let mut part = [[_mm512_setzero_ps(); G]; ROWS];
        for u in 0..units {
            // Each unit's dot starts at minus the offset's part (`Lanes`).
            let start: [__m512i; G] = std::array::from_fn(|g| unsafe {
                _mm512_loadu_si512(x.starts[g].add((b * units + u) * TOKENS) as *const _)
            });
            let mut dots = [start; ROWS];
            for s in u * 8 / units..(u + 1) * 8 / units {
                products(w, x, b, s, &mut dots);
            }
            for i in 0..ROWS {
                let scale = unsafe { *w.scales.add((b * units + u) * ROWS + i) };
                let scale = _mm512_set1_ps(scale);
                for g in 0..G {
                    let dot = _mm512_cvtepi32_ps(dots[i][g]);
                    if !HALVES {
                        let scaled = _mm512_mul_ps(scale, dx[g]);
                        acc[i][g] = _mm512_fmadd_ps(scaled, dot, acc[i][g]);
                    } else if u == 0 {
                        part[i][g] = _mm512_mul_ps(dot, scale);
                    } else {
                        part[i][g] = _mm512_fmadd_ps(dot, scale, part[i][g]);
                    }
                }
            }
        }
        if HALVES {
            for i in 0..ROWS {
                for g in 0..G {
                    acc[i][g] = _mm512_fmadd_ps(part[i][g], dx[g], acc[i][g]);
                }
            }
        }
        for u in 0..if MIN { units } else { 0 } {
            let d_sums: [__m512; G] = std::array::from_fn(|g| unsafe {
                _mm512_loadu_ps(x.d_sums[g].add((b * units + u) * TOKENS))
            });
            for i in 0..ROWS {
                let min = _mm512_set1_ps(unsafe { *w.mins.add((b * units + u) * ROWS + i) });
                for g in 0..G {
                    acc[i][g] = _mm512_fnmadd_ps(min, d_sums[g], acc[i][g]);
                }
            }
        }
    }
    acc
}

/// Four values (step s of block b) of the tile's rows times those of the groups' tokens,
/// into `dots`.
#[inline(always)]
fn products<const G: usize>(
    w: &Rows,
    x: &Groups<G>,
    b: usize,
    s: usize,
    dots: &mut [[__m512i; G]; ROWS],
) {
    // SAFETY: as in the callers: b < blocks of both, s < 8.
    let xs: [__m512i; G] = std::array::from_fn(|g| unsafe {
        _mm512_loadu_si512(x.qs[g].add((b * 8 + s) * TOKENS * 4) as *const _)
    });
    for i in 0..ROWS {
        let a = unsafe {
            let p = w.bytes.add((b * ROWS + i) * BLOCK + 4 * s) as *const i32;
            _mm512_set1_epi32(p.read_unaligned())
        };
        for g in 0..G {
            dots[i][g] = unsafe { _mm512_dpbusd_epi32(dots[i][g], a, xs[g]) };
        }
    }
}
