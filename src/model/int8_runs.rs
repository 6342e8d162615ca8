//! A decoding step's runs of several tokens (json's `",\n  "<key>": `) through 8-bit integer
//! products with sixteen tokens in the lanes: Q4_0, Q5_0 and Q8_0 (most of Qwen2.5-0.5B's
//! weights, whose 896 columns take no K-quant), Q4_1 and Q5_1 (Q5_K_M's fallback there), and
//! Q2_K … Q6_K (Q2_K, Q3_K_M, Q4_K_M and Q5_K_M files of the 7–13B judges), and the i-quants
//! (their integers, `iq_rows`).
//!
//! The f32 products on expanded weight rows (`expanded_dots`) multiply sixteen values per
//! instruction; one VNNI instruction here multiplies four weights by four activations of each
//! of sixteen tokens (64 products), and the weight's four bytes are read once for all sixteen.
//! Measured on 16 items of roleplay8-ja with Qwen2.5-0.5B: see the README. Prompts' products
//! take them too under `--prefill-gemm int8` (`prefill_gemm`): llama.cpp's arithmetic, with
//! VNNI's four times the FMA's multiply-adds an instruction.
//!
//! The numbers are those of the integer kernels for single tokens up to the order of the f32
//! sums: activations rounded to 8 bits per 32 values (`Q8Rows`, llama.cpp's Q8_0; finer than
//! the Q8_K, per 256 values, of the single-token K-quant kernels: on a real Q4_K_M judge
//! Q8_K's rounding moved expected scores about 1.5× as far from f32's, README); weights as
//! unsigned bytes (their integer plus an offset) with an f32 scale per 32 values (per 16 for
//! Q2_K, Q3_K and Q6_K) and for Q4_1, Q5_1, Q4_K and Q5_K a min per 32 values (Q2_K: per 16);
//! each unit's integer dot exact (the offset's part taken off with the activations' sums), and
//! per (token, weight row) one f32 chain over the blocks in order: acc = fma(scale·d_x, dot,
//! acc) (and acc −= min·(d_x·Σx) per min, d_x·Σx rounded once per token and unit of the min —
//! for Q4_1/Q5_1 the f16 s of llama.cpp's Q8_1, as their single-token kernels take it, with
//! min = −m; with two units of 16, acc = fma(scale₀·dot₀ + scale₁·dot₁, d_x, acc)). A
//! token's result depends on its own activations only, not on the other tokens of its group or
//! the tile.

use super::block_dots::{self, BLOCK, BlockKind, Q8Rows};
use super::iquants::IQuant;
use super::kquant_dots::KQuantKind;
use super::matrix::RowKernels;
use super::row_tasks::{Columns, by_weight_columns};
use candle_core::{Result, bail};
use rayon::prelude::*;

/// Tokens per lane group: one AVX-512 register of i32.
const TOKENS: usize = 16;

/// Weight rows per task: unpacked to bytes once, then multiplied with every token group.
const TASK_ROWS: usize = 32;

/// How a weight type's values read as bytes: value = scale·(byte − offset) − min, one scale
/// per `unit` values (32, or 16 for Q2_K, Q3_K and Q6_K), one min per unit (Q4_1, Q5_1, Q2_K,
/// Q4_K, Q5_K).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
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
    fn of(kernels: &RowKernels) -> Self {
        match kernels {
            RowKernels::Blocks(kind, _) => Form::Blocks(*kind),
            RowKernels::KQuants(KQuantKind::Q2K, _) => Form::Q2K,
            RowKernels::KQuants(KQuantKind::Q3K, _) => Form::Q3K,
            RowKernels::KQuants(KQuantKind::Q4K, _) => Form::Q4K,
            RowKernels::KQuants(KQuantKind::Q5K, _) => Form::Q5K,
            RowKernels::KQuants(KQuantKind::Q6K, _) => Form::Q6K,
            RowKernels::Iq(kind, _) => Form::Iq(*kind),
        }
    }

    fn offset(self) -> i32 {
        match self {
            Form::Blocks(kind) if !kind.has_min() => 128,
            Form::Iq(_) => 128,
            Form::Blocks(_) | Form::Q2K | Form::Q4K | Form::Q5K => 0,
            Form::Q3K => 4,
            Form::Q6K => 32,
        }
    }

    /// Scales per 32 values: two where they change every 16.
    fn halves(self) -> bool {
        match self {
            Form::Q2K | Form::Q3K | Form::Q6K => true,
            Form::Iq(kind) => !kind.one_scale_per_group(),
            Form::Blocks(_) | Form::Q4K | Form::Q5K => false,
        }
    }

    fn has_min(self) -> bool {
        match self {
            Form::Blocks(kind) => kind.has_min(),
            Form::Q2K | Form::Q4K | Form::Q5K => true,
            Form::Q3K | Form::Q6K | Form::Iq(_) => false,
        }
    }

    /// Whether a min multiplies llama.cpp's Q8_1 block sum s = f16(f16(Σx)·d_x), as the
    /// single-token kernels of these blocks take it, rather than d_x·Σx in f32.
    fn takes_q8_1_sums(self) -> bool {
        matches!(self, Form::Blocks(kind) if kind.has_min())
    }

    /// Units (scales) per 32 values.
    fn units(self) -> usize {
        if self.halves() { 2 } else { 1 }
    }

    /// Values and bytes per block.
    fn block(self) -> (usize, usize) {
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

/// Whether this CPU has the instructions (AVX-512 with VNNI, and AVX2/FMA/F16C): then
/// `products` takes every type with row kernels (all of `BlockKind` and `KQuantKind`).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        block_dots::has_avx2_fma_f16c()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// xs (n, k) · Wᵀ for the `out` rows of the weights: y (n, out); an error where not
/// `available`.
pub fn products(kernels: &RowKernels, out: usize, k: usize, xs: &[f32]) -> Result<Vec<f32>> {
    if !available() {
        bail!("8-bit run products need AVX-512 VNNI, AVX2, FMA and F16C");
    }
    let form = Form::of(kernels);
    let (RowKernels::Blocks(_, data) | RowKernels::KQuants(_, data) | RowKernels::Iq(_, data)) =
        kernels;
    let n = xs.len() / k.max(1);
    let (values, bytes) = form.block();
    let row_bytes = k / values * bytes;
    if !k.is_multiple_of(values) || xs.len() != n * k || data.len() != out * row_bytes {
        bail!(
            "8-bit run products: {out}×{k} {form:?} weights for {} values",
            xs.len()
        );
    }
    let acts = Q8Rows::quantize(xs, k, form.takes_q8_1_sums());
    let lanes = Lanes::new(&acts, n, k, form);
    by_weight_columns(out, n, TASK_ROWS, |columns| {
        let rows = columns.rows();
        let weights = Unpacked::new(form, &data[rows.start * row_bytes..rows.end * row_bytes], k);
        // SAFETY: `available` detected the features above.
        unsafe { weights.times(&lanes, columns) };
        Ok(())
    })
}

/// Activations of n tokens in groups of 16, interleaved for the lanes: per group and block of
/// 32, bytes 4g..4g + 4 of token t at `[(g·16 + t)·4..]`; each token's block scale d; minus
/// the weights' offset times the token's sum over each unit (what a unit's dot starts from, so
/// that the offset the bytes carry cancels); with a min, d times the unit's sum (what a min
/// multiplies: one product per token and unit, not per row; Q8_1's s for Q4_1/Q5_1). Zeros
/// for tokens past n.
struct Lanes {
    blocks: usize,
    qs: Vec<i8>,
    d: Vec<f32>,
    starts: Vec<i32>,
    d_sums: Vec<f32>,
}

impl Lanes {
    fn new(acts: &Q8Rows, n: usize, k: usize, form: Form) -> Self {
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

    fn groups(&self) -> usize {
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
/// instruction's rate, session 35). Rows past the last of the last tile are zeros.
struct Unpacked {
    form: Form,
    k: usize,
    rows: usize,
    bytes: Vec<u8>,
    scales: Vec<f32>,
    mins: Vec<f32>,
}

/// Weight rows per tile of the kernel (`avx512::tile`).
const TILE: usize = 4;

impl Unpacked {
    fn new(form: Form, data: &[u8], k: usize) -> Self {
        let (values, block_bytes) = form.block();
        let row_bytes = k / values * block_bytes;
        let rows = data.len() / row_bytes.max(1);
        let (blocks, units) = (k / BLOCK, form.units());
        let padded = rows.next_multiple_of(TILE);
        let mut w = Unpacked {
            form,
            k,
            rows,
            bytes: vec![0; padded * k],
            scales: vec![0.0; padded * blocks * units],
            mins: vec![
                0.0;
                if form.has_min() {
                    padded * blocks * units
                } else {
                    0
                }
            ],
        };
        for (r, row) in data.chunks_exact(row_bytes.max(1)).enumerate() {
            // Where block b of row r lies: its bytes at `byte(b)`, 128 bytes on to block b + 1.
            let (tile, i) = (r / TILE, r % TILE);
            let byte = |b: usize| ((tile * blocks + b) * TILE + i) * BLOCK;
            let scale = |b: usize, u: usize| ((tile * blocks + b) * units + u) * TILE + i;
            match form {
                Form::Blocks(kind) => {
                    for (b, block) in row.chunks_exact(block_bytes).enumerate() {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: callers detected AVX2, FMA and F16C (`products` checks
                        // `available`; the tests `has_avx2_fma_f16c`).
                        unsafe {
                            avx2::unpack_block(kind, block, &mut w.bytes[byte(b)..byte(b) + BLOCK])
                        };
                        w.scales[scale(b, 0)] = block_dots::read_f16(block, 0);
                        if kind.has_min() {
                            w.mins[scale(b, 0)] = -block_dots::read_f16(block, 2);
                        }
                    }
                }
                Form::Q2K => {
                    for (sb, block) in row.chunks_exact(block_bytes).enumerate() {
                        let (d, dmin) = (
                            block_dots::read_f16(block, 80),
                            block_dots::read_f16(block, 82),
                        );
                        // Scale byte s: values 16s..16s + 16, unit s % 2 of block s / 2.
                        for (s, &sc) in block[..16].iter().enumerate() {
                            let at = scale(sb * 8 + s / 2, s % 2);
                            w.scales[at] = d * (sc & 0xF) as f32;
                            w.mins[at] = dmin * (sc >> 4) as f32;
                        }
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        unsafe {
                            avx2::unpack_q2k(block, &mut w.bytes[byte(sb * 8)..])
                        };
                    }
                }
                Form::Q3K => {
                    for (sb, block) in row.chunks_exact(block_bytes).enumerate() {
                        let d = block_dots::read_f16(block, 108);
                        let scales = super::kquant_expand::q3k_scales(&block[96..108]);
                        for (s, &sc) in scales.iter().enumerate() {
                            w.scales[scale(sb * 8 + s / 2, s % 2)] = d * sc as f32;
                        }
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        unsafe {
                            avx2::unpack_q3k(block, &mut w.bytes[byte(sb * 8)..])
                        };
                    }
                }
                Form::Q4K | Form::Q5K => {
                    for (sb, block) in row.chunks_exact(block_bytes).enumerate() {
                        let (d, dmin) = (
                            block_dots::read_f16(block, 0),
                            block_dots::read_f16(block, 2),
                        );
                        for j in 0..8 {
                            let (sc, m) = super::kquant_expand::scale_min(j, &block[4..16]);
                            w.scales[scale(sb * 8 + j, 0)] = d * sc as f32;
                            w.mins[scale(sb * 8 + j, 0)] = dmin * m as f32;
                        }
                        let out = &mut w.bytes[byte(sb * 8)..];
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        unsafe {
                            avx2::unpack_k(block, form == Form::Q5K, out)
                        };
                    }
                }
                Form::Iq(kind) => {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above.
                    unsafe {
                        super::iq_rows::avx2::biased_integers(
                            kind,
                            row,
                            |g, group_scales, integers| {
                                w.bytes[byte(g)..byte(g) + BLOCK].copy_from_slice(integers);
                                for (u, s) in group_scales.into_iter().take(units).enumerate() {
                                    w.scales[scale(g, u)] = s;
                                }
                            },
                        )
                    };
                }
                Form::Q6K => {
                    for (sb, block) in row.chunks_exact(block_bytes).enumerate() {
                        let d = block_dots::read_f16(block, 208);
                        for (j, &sc) in block[192..208].iter().enumerate() {
                            w.scales[scale(sb * 8 + j / 2, j % 2)] = d * sc as i8 as f32;
                        }
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        unsafe {
                            avx2::unpack_q6k(&block[..192], &mut w.bytes[byte(sb * 8)..])
                        };
                    }
                }
            }
        }
        w
    }

    fn rows(&self) -> usize {
        self.rows
    }

    /// Where value j of row r lies in `bytes`.
    #[cfg(test)]
    fn byte_at(&self, r: usize, j: usize) -> usize {
        ((r / TILE * (self.k / BLOCK) + j / BLOCK) * TILE + r % TILE) * BLOCK + j % BLOCK
    }

    /// The scale of value j of row r.
    #[cfg(test)]
    fn scale_of(&self, r: usize, j: usize) -> f32 {
        let (blocks, units) = (self.k / BLOCK, self.form.units());
        let u = j % BLOCK / (BLOCK / units);
        self.scales[((r / TILE * blocks + j / BLOCK) * units + u) * TILE + r % TILE]
    }

    /// The min of value j of row r (forms with a min).
    #[cfg(test)]
    fn min_of(&self, r: usize, j: usize) -> f32 {
        let (blocks, units) = (self.k / BLOCK, self.form.units());
        let u = j % BLOCK / (BLOCK / units);
        self.mins[((r / TILE * blocks + j / BLOCK) * units + u) * TILE + r % TILE]
    }

    /// y[token][first + r] = weight row r · token, for each of these rows (the task's columns
    /// from `first`) and each token.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn times(&self, lanes: &Lanes, columns: &Columns) {
        match (self.form.halves(), self.form.has_min()) {
            (true, true) => self.times_as::<true, true>(lanes, columns),
            (true, false) => self.times_as::<true, false>(lanes, columns),
            (false, true) => self.times_as::<false, true>(lanes, columns),
            (false, false) => self.times_as::<false, false>(lanes, columns),
        }
    }

    /// Two token groups at a time (32 tokens), through the task's rows four at a time, over
    /// `avx512::SPAN` blocks of k at a time: the two groups' span of activations (16 KiB) stays
    /// in L1 for all the rows. Going through all of k per tile of 4 rows and 16 tokens, as
    /// before, read 80 KiB from L2 per tile (perf: 23% of VNNI's peak on an 8B prefill).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vnni")]
    fn times_as<const HALVES: bool, const MIN: bool>(&self, lanes: &Lanes, columns: &Columns) {
        use avx512::{GROUPS, ROWS, SPAN};
        use std::arch::x86_64::{_mm512_setzero_ps, _mm512_storeu_ps};
        let (rows, n) = (self.rows(), columns.tokens());
        assert!(rows <= TASK_ROWS, "a task's weight rows");
        let first = columns.rows().start;
        // The last tile's rows past the last are zeros; their sums are dropped.
        let tiles: Vec<avx512::Rows> = (0..rows.div_ceil(ROWS))
            .map(|t| avx512::Rows::new(self, t))
            .collect();
        // A group's outputs gathered here (2 KiB, in L1), then written as one run of the task's
        // columns per token: 16-byte stores tile by tile, each to another token's row of y, took
        // more CPU time than the part-and-gather they replaced (perf, Qwen2.5-0.5B prefill).
        let mut staged = [[0f32; TOKENS]; TASK_ROWS];
        for pair in (0..lanes.groups()).step_by(GROUPS) {
            let groups = (lanes.groups() - pair).min(GROUPS);
            columns.prefetch(pair * TOKENS..(pair + groups) * TOKENS);
            let mut sums = [[[_mm512_setzero_ps(); GROUPS]; ROWS]; TASK_ROWS / ROWS];
            // The pair's lanes, or the last group alone.
            let two = (groups == 2).then(|| avx512::Groups::<2>::new(lanes, pair, self.form));
            let one = (groups == 1).then(|| avx512::Groups::<1>::new(lanes, pair, self.form));
            for from in (0..lanes.blocks).step_by(SPAN) {
                let span = from..(from + SPAN).min(lanes.blocks);
                for (tile, acc) in tiles.iter().zip(sums.iter_mut()) {
                    let span = span.clone();
                    *acc = match (&two, &one) {
                        (Some(x), _) => avx512::tile::<HALVES, MIN, 2>(tile, x, span, *acc),
                        (_, Some(x)) => avx512::tile::<HALVES, MIN, 1>(tile, x, span, *acc),
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

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn times(&self, _: &Lanes, _: &Columns) {
        unreachable!("`available` is false off x86_64")
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::kquant_dots;
    use super::{BLOCK, BlockKind, TILE, block_dots};
    use std::arch::x86_64::*;

    /// A block's 32 values as bytes: w + 128 where w is signed, w itself (Q4_1, Q5_1).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn unpack_block(kind: BlockKind, block: &[u8], out: &mut [u8]) {
        let q = block_dots::avx2::unpack(kind, block);
        if kind.has_min() {
            store(out, q)
        } else {
            store(out, _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN)))
        }
    }

    #[target_feature(enable = "avx2")]
    fn load(bytes: &[u8]) -> __m256i {
        assert!(bytes.len() >= 32);
        // SAFETY: 32 bytes (asserted).
        unsafe { _mm256_loadu_si256(bytes.as_ptr() as *const __m256i) }
    }

    #[target_feature(enable = "avx2")]
    fn store(out: &mut [u8], v: __m256i) {
        assert!(out.len() >= 32);
        // SAFETY: 32 bytes (asserted).
        unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, v) };
    }

    /// Where run j (values 32j..32j + 32) of a super-block goes: a tile's rows lie between.
    const RUN: usize = TILE * BLOCK;

    /// A Q4_K or (`fifth`) Q5_K block's 256 values as bytes, as `kquant_dots`' decoding
    /// kernels unpack them (candle's `to_float` order): run j (values 32j..32j + 32) to
    /// `out[j·RUN..]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn unpack_k(block: &[u8], fifth: bool, out: &mut [u8]) {
        assert!(out.len() >= 7 * RUN + BLOCK);
        let runs = if fifth {
            kquant_dots::avx2::q5k_values(block)
        } else {
            kquant_dots::avx2::nibbles(&block[16..144])
        };
        for (j, run) in runs.into_iter().enumerate() {
            store(&mut out[j * RUN..], run);
        }
    }

    /// A Q2_K block's 256 2-bit values as bytes (candle's `to_float` order); run j to
    /// `out[j·RUN..]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn unpack_q2k(block: &[u8], out: &mut [u8]) {
        assert!(out.len() >= 7 * RUN + BLOCK);
        for (j, run) in kquant_dots::avx2::crumbs(&block[16..80])
            .into_iter()
            .enumerate()
        {
            store(&mut out[j * RUN..], run);
        }
    }

    /// A Q3_K block's 256 values plus 4 as bytes (0..8: the low 2 bits, plus 4 where the high
    /// bit is set; candle's `to_float` order); run j to `out[j·RUN..]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn unpack_q3k(block: &[u8], out: &mut [u8]) {
        assert!(out.len() >= 7 * RUN + BLOCK);
        let low = kquant_dots::avx2::crumbs(&block[32..96]);
        // 4 where the high bit is clear: 4 xor that is 4 where it is set.
        let clear = kquant_dots::avx2::clear_high_bits(&block[..32]);
        for j in 0..8 {
            let high = _mm256_xor_si256(clear[j], _mm256_set1_epi8(4));
            store(&mut out[j * RUN..], _mm256_add_epi8(low[j], high));
        }
    }

    /// A Q6_K block's low bits (128 bytes) and high bits (64) as 256 bytes of 6-bit values
    /// (candle's `to_float` order: per half, four runs of 32 from ql's low then high nibbles
    /// and qh's bit pairs 0, 1, 2, 3); run j to `out[j·RUN..]`.
    #[target_feature(enable = "avx2")]
    pub fn unpack_q6k(block: &[u8], out: &mut [u8]) {
        assert!(block.len() >= 192 && out.len() >= 7 * RUN + BLOCK);
        let (low, high) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        for half in 0..2 {
            let (ql0, ql1) = (load(&block[64 * half..]), load(&block[64 * half + 32..]));
            let qh = load(&block[128 + 32 * half..]);
            let runs = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, low),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(qh), high),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, low),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(qh), high),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low),
                    _mm256_and_si256(qh, high),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(qh), high),
                ),
            ];
            for (r, run) in runs.into_iter().enumerate() {
                store(&mut out[(4 * half + r) * RUN..], run);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
// Register tiles are indexed by row and by group together; iterators would hide that.
#[allow(clippy::needless_range_loop)]
mod avx512 {
    use super::{BLOCK, Form, Lanes, TOKENS, Unpacked};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Weight rows per tile: their block chains in flight together.
    pub const ROWS: usize = super::TILE;

    /// Token groups per tile: each broadcast weight word feeds this many instructions, each
    /// group's activation vector this many rows' (4 × 2 × 2 halves: sixteen integer chains).
    pub const GROUPS: usize = 2;

    /// Blocks of 32 values per pass over a tile: two groups' activations for a span are 16 KiB.
    pub const SPAN: usize = 16;

    /// A tile's f32 chains, one register per (row, group): carried from span to span.
    pub type Sums = [[__m512; GROUPS]; ROWS];

    /// A tile's weight rows from block 0 (`Unpacked`'s layout): per block their bytes, then
    /// their scales and mins (forms with one) per unit four by four. Made by `new` only, which checks
    /// that the tile lies in the weights.
    pub struct Rows {
        bytes: *const u8,
        scales: *const f32,
        mins: *const f32,
        blocks: usize,
    }

    impl Rows {
        /// Tile `t`: rows 4t..4t + 4.
        pub fn new(w: &Unpacked, t: usize) -> Self {
            let (blocks, units) = (w.k / BLOCK, w.form.units());
            let per_tile = blocks * ROWS;
            assert!(w.k == blocks * BLOCK && w.bytes.len() >= (t + 1) * per_tile * BLOCK);
            assert!(w.scales.len() >= (t + 1) * per_tile * units);
            assert!(!w.form.has_min() || w.mins.len() >= (t + 1) * per_tile * units);
            Rows {
                bytes: w.bytes[t * per_tile * BLOCK..].as_ptr(),
                scales: w.scales[t * per_tile * units..].as_ptr(),
                mins: w.mins.as_ptr().wrapping_add(t * per_tile * units),
                blocks,
            }
        }
    }

    /// G token groups' lanes from `first` on, from block 0. Made by `new` only, which checks
    /// that the groups lie in the lanes.
    pub struct Groups<const G: usize> {
        qs: [*const i8; G],
        d: [*const f32; G],
        starts: [*const i32; G],
        d_sums: [*const f32; G],
        blocks: usize,
        min: bool,
        units: usize,
    }

    impl<const G: usize> Groups<G> {
        pub fn new(lanes: &Lanes, first: usize, form: Form) -> Self {
            let units = form.units();
            assert!(G <= GROUPS && first + G <= lanes.groups());
            assert!(lanes.starts.len() == lanes.d.len() * units);
            assert!(!form.has_min() || lanes.d_sums.len() == lanes.d.len() * units);
            let at = |g: usize| (first + g) * lanes.blocks * TOKENS;
            Groups {
                qs: std::array::from_fn(|g| lanes.qs[at(g) * BLOCK..].as_ptr()),
                d: std::array::from_fn(|g| lanes.d[at(g)..].as_ptr()),
                starts: std::array::from_fn(|g| lanes.starts[at(g) * units..].as_ptr()),
                d_sums: std::array::from_fn(|g| lanes.d_sums.as_ptr().wrapping_add(at(g) * units)),
                blocks: lanes.blocks,
                min: form.has_min(),
                units,
            }
        }
    }

    /// Rows `w` times the 16 tokens of each of the G groups `x`, over `blocks`, carried on
    /// from `acc`: per token and row, the f32 chain over the blocks in order of
    /// fma(scale·d_x, dot, ·) (`HALVES`, two scales per 32 values: fma(scale₀·dot₀ +
    /// scale₁·dot₁, d_x, ·), one multiply by d_x a block; `MIN`: then − min·(d_x·Σx) per
    /// unit). The float work shares its ports with the integer instruction, so it is kept to
    /// what each block needs; one integer chain per unit, the blocks' chains overlapping in the
    /// core's window (two per 32 values, then added, were no faster). Not inlined, with its
    /// operands checked by their makers: inlined into its caller's loops the chains were kept in
    /// memory and the activations spilled (perf).
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub fn tile<const HALVES: bool, const MIN: bool, const G: usize>(
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    fn random(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
        crate::rng::SplitMix64(seed).symmetric_f32s(rows * cols)
    }

    const FORMS: [(GgmlDType, Form); 10] = [
        (GgmlDType::Q4_0, Form::Blocks(BlockKind::Q4_0)),
        (GgmlDType::Q4_1, Form::Blocks(BlockKind::Q4_1)),
        (GgmlDType::Q5_0, Form::Blocks(BlockKind::Q5_0)),
        (GgmlDType::Q5_1, Form::Blocks(BlockKind::Q5_1)),
        (GgmlDType::Q8_0, Form::Blocks(BlockKind::Q8_0)),
        (GgmlDType::Q2K, Form::Q2K),
        (GgmlDType::Q3K, Form::Q3K),
        (GgmlDType::Q4K, Form::Q4K),
        (GgmlDType::Q5K, Form::Q5K),
        (GgmlDType::Q6K, Form::Q6K),
    ];

    /// `out` random rows of k values (offset by 0.3, so that K-quants' mins matter), quantized by
    /// candle: its bytes and its dequantized values.
    fn weights(dtype: GgmlDType, out: usize, k: usize) -> anyhow::Result<(Vec<u8>, Vec<f32>)> {
        let w: Vec<f32> = random(out, k, 1).iter().map(|v| v + 0.3).collect();
        let q = QTensor::quantize(&Tensor::from_vec(w, (out, k), &Device::Cpu)?, dtype)?;
        let values = q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1()?;
        Ok((q.data()?.to_vec(), values))
    }

    /// i-quant rows made of the blocks of tests/fixtures/iquants (scales zero, subnormal, large and
    /// ordinary), cycled to fill out × k, with gguf-py's values of them.
    fn iq_weights(kind: IQuant, out: usize, k: usize) -> anyhow::Result<(Vec<u8>, Vec<f32>)> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/iquants/blocks.safetensors");
        let all = candle_core::safetensors::load(path, &Device::Cpu)?;
        let name = kind.name();
        let bytes: Vec<u8> = all[&format!("{name}.blocks")].flatten_all()?.to_vec1()?;
        let values: Vec<f32> = all[&format!("{name}.values")].flatten_all()?.to_vec1()?;
        let (bb, bv) = (kind.block_bytes(), kind.block_values());
        let have = bytes.len() / bb;
        let blocks = 0..out * k / bv;
        Ok((
            blocks
                .clone()
                .flat_map(|b| bytes[b % have * bb..][..bb].to_vec())
                .collect(),
            blocks
                .flat_map(|b| values[b % have * bv..][..bv].to_vec())
                .collect(),
        ))
    }

    /// A form, its weights' bytes and their values.
    type Case = (Form, Vec<u8>, Vec<f32>);

    /// Every form with its weights: candle's quantization of random rows, and the i-quant blocks.
    fn cases(out: usize, k: usize) -> anyhow::Result<Vec<Case>> {
        let mut cases = Vec::new();
        for (dtype, form) in FORMS {
            let (data, values) = weights(dtype, out, k)?;
            cases.push((form, data, values));
        }
        for kind in IQuant::ALL {
            let (data, values) = iq_weights(kind, out, k)?;
            cases.push((Form::Iq(kind), data, values));
        }
        Ok(cases)
    }

    fn unit(form: Form) -> usize {
        BLOCK / form.units()
    }

    /// Each weight read back from its byte, scale and min is candle's value to the bit (i-quants:
    /// gguf-py's).
    #[test]
    fn the_bytes_are_candles_values() -> anyhow::Result<()> {
        if !block_dots::has_avx2_fma_f16c() {
            return Ok(());
        }
        let (out, k) = (7, 512);
        for (form, data, values) in cases(out, k)? {
            let w = Unpacked::new(form, &data, k);
            for (at, &want) in values.iter().enumerate() {
                let (r, j) = (at / k, at % k);
                let scale = w.scale_of(r, j);
                let mut got = scale * (w.bytes[w.byte_at(r, j)] as i32 - form.offset()) as f32;
                if form.has_min() {
                    got -= w.min_of(r, j);
                }
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{form:?} row {r} value {j}: {got} for {want}"
                );
            }
        }
        Ok(())
    }

    /// Each product is the chain over the blocks of fma(scale·d_x, Σ (byte − offset)·x, ·)
    /// from zero (for two units of 16 fma(scale₀·dot₀ + scale₁·dot₁, d_x, ·); with a min then
    /// − min·(d_x·Σx) per unit, Q4_1/Q5_1's min·s), with the activations rounded as
    /// for single tokens, whatever the token's lane and the row's tile: 37 tokens (a pair of
    /// groups and a partial one), 45 rows (partial tiles and tasks), 768 values (a whole span
    /// of blocks and a part).
    #[test]
    fn each_product_is_one_chain_over_the_units() -> anyhow::Result<()> {
        let (out, k, n) = (45, 768, 37);
        for (form, data, _) in cases(out, k)? {
            let data = std::borrow::Cow::from(&data[..]);
            let kernels = match form {
                Form::Blocks(kind) => RowKernels::Blocks(kind, data.clone()),
                Form::Q2K => RowKernels::KQuants(KQuantKind::Q2K, data.clone()),
                Form::Q3K => RowKernels::KQuants(KQuantKind::Q3K, data.clone()),
                Form::Q4K => RowKernels::KQuants(KQuantKind::Q4K, data.clone()),
                Form::Q5K => RowKernels::KQuants(KQuantKind::Q5K, data.clone()),
                Form::Q6K => RowKernels::KQuants(KQuantKind::Q6K, data.clone()),
                Form::Iq(kind) => RowKernels::Iq(kind, data.clone()),
            };
            if !available() {
                return Ok(());
            }
            let xs = random(n, k, 2);
            let got = products(&kernels, out, k, &xs)?;
            let w = Unpacked::new(form, &data, k);
            let acts = Q8Rows::quantize(&xs, k, form.takes_q8_1_sums());
            let size = unit(form);
            for t in 0..n {
                let x = &acts.values()[t * k..(t + 1) * k];
                for r in 0..out {
                    let mut acc = 0f32;
                    for b in 0..k / BLOCK {
                        let dx = acts.scales()[t * (k / BLOCK) + b];
                        let dot = |u: usize| -> f32 {
                            let dot: i32 = (u..u + size)
                                .map(|j| {
                                    (w.bytes[w.byte_at(r, j)] as i32 - form.offset()) * x[j] as i32
                                })
                                .sum();
                            dot as f32
                        };
                        let (first, second) = (b * BLOCK, b * BLOCK + size);
                        if form.halves() {
                            let part = dot(first) * w.scale_of(r, first);
                            let part = dot(second).mul_add(w.scale_of(r, second), part);
                            acc = part.mul_add(dx, acc);
                        } else {
                            acc = (w.scale_of(r, first) * dx).mul_add(dot(first), acc);
                        }
                        let with_min = if form.has_min() { form.units() } else { 0 };
                        for start in [first, second].into_iter().take(with_min) {
                            let sum: i32 = x[start..start + size].iter().map(|&q| q as i32).sum();
                            let d_sum = if form.takes_q8_1_sums() {
                                acts.sums()[t * (k / BLOCK) + b]
                            } else {
                                dx * sum as f32
                            };
                            acc = (-w.min_of(r, start)).mul_add(d_sum, acc);
                        }
                    }
                    assert_eq!(
                        got[t * out + r].to_bits(),
                        acc.to_bits(),
                        "{form:?} {t} {r}"
                    );
                }
            }
        }
        Ok(())
    }
}
