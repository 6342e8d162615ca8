//! A decoding step's runs of several tokens (json's `",\n  "<key>": `) through 8-bit integer
//! products with sixteen tokens in the lanes: Q4_0, Q5_0 and Q8_0 (most of Qwen2.5-0.5B's
//! weights, whose 896 columns take no K-quant), Q4_K and Q6_K (Q4_K_M files of the 7–13B
//! judges).
//!
//! The f32 products on expanded weight rows (`expanded_dots`) multiply sixteen values per
//! instruction; one VNNI instruction here multiplies four weights by four activations of each
//! of sixteen tokens (64 products), and the weight's four bytes are read once for all sixteen.
//! Measured on 16 items of roleplay8-ja with Qwen2.5-0.5B: see the README. Prompts' products
//! take them too under `--prefill-gemm int8` (`prefill_gemm`): llama.cpp's arithmetic, with
//! VNNI's four times the FMA's multiply-adds an instruction.
//!
//! The numbers are those of the integer kernels for single tokens up to the order of the f32
//! sums: activations rounded to 8 bits per 32 values (`Q8Rows`, llama.cpp's Q8_0); weights as
//! unsigned bytes (their integer plus an offset) with an f32 scale per 32 values (per 16 for
//! Q6_K) and for Q4_K a min; each unit's integer dot exact (the offset's part taken off with
//! the activations' sums), and per (token, weight row) one f32 chain over the units in order:
//! acc = fma(scale·d_x, dot, acc) (and acc −= min·d_x·Σx for Q4_K). A token's result depends on
//! its own activations only, not on the other tokens of its group or the tile.

use super::block_dots::{self, BLOCK, BlockKind, Q8Rows};
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
/// per `unit` values (32, or 16 for Q6_K), one min per 32 values (Q4_K only).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    Blocks(BlockKind),
    Q4K,
    Q6K,
}

impl Form {
    fn of(kernels: &RowKernels) -> Option<Self> {
        match kernels {
            RowKernels::Blocks(kind, _) if !kind.has_min() => Some(Form::Blocks(*kind)),
            RowKernels::KQuants(KQuantKind::Q4K, _) => Some(Form::Q4K),
            RowKernels::KQuants(KQuantKind::Q6K, _) => Some(Form::Q6K),
            _ => None,
        }
    }

    fn offset(self) -> i32 {
        match self {
            Form::Blocks(_) => 128,
            Form::Q4K => 0,
            Form::Q6K => 32,
        }
    }

    /// Scales per 32 values: two where they change every 16.
    fn halves(self) -> bool {
        self == Form::Q6K
    }

    fn has_min(self) -> bool {
        self == Form::Q4K
    }

    /// Values and bytes per block.
    fn block(self) -> (usize, usize) {
        match self {
            Form::Blocks(kind) => (BLOCK, kind.block_bytes()),
            Form::Q4K => (256, KQuantKind::Q4K.block_bytes()),
            Form::Q6K => (256, KQuantKind::Q6K.block_bytes()),
        }
    }
}

/// Whether `products` runs for these weights here.
pub fn applies(kernels: &RowKernels) -> bool {
    Form::of(kernels).is_some() && available()
}

/// Whether this CPU has the instructions (AVX-512 with VNNI, and AVX2/FMA/F16C).
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

/// xs (n, k) · Wᵀ for the `out` rows of the weights: y (n, out). Call only where `applies`.
pub fn products(kernels: &RowKernels, out: usize, k: usize, xs: &[f32]) -> Result<Vec<f32>> {
    let (Some(form), RowKernels::Blocks(_, data) | RowKernels::KQuants(_, data)) =
        (Form::of(kernels), kernels)
    else {
        bail!("8-bit run products of weights they do not take");
    };
    let n = xs.len() / k.max(1);
    let (values, bytes) = form.block();
    let row_bytes = k / values * bytes;
    if !k.is_multiple_of(values) || xs.len() != n * k || data.len() != out * row_bytes {
        bail!(
            "8-bit run products: {out}×{k} {form:?} weights for {} values",
            xs.len()
        );
    }
    let lanes = Lanes::new(&Q8Rows::quantize(xs, k, false), n, k, form);
    by_weight_columns(out, n, TASK_ROWS, |columns| {
        let rows = columns.rows();
        let weights = Unpacked::new(form, &data[rows.start * row_bytes..rows.end * row_bytes], k);
        // SAFETY: `applies` detected the features before any call.
        unsafe { weights.times(&lanes, columns) };
        Ok(())
    })
}

/// Activations of n tokens in groups of 16, interleaved for the lanes: per group and block of
/// 32, bytes 4g..4g + 4 of token t at `[(g·16 + t)·4..]`; each token's block scale d; the
/// weights' offset times the token's sum over each unit (what the offset adds to the dot);
/// for Q4_K the sums as f32. Zeros for tokens past n.
struct Lanes {
    blocks: usize,
    qs: Vec<i8>,
    d: Vec<f32>,
    offsets: Vec<i32>,
    sums: Vec<f32>,
}

impl Lanes {
    fn new(acts: &Q8Rows, n: usize, k: usize, form: Form) -> Self {
        let blocks = k / BLOCK;
        let groups = n.div_ceil(TOKENS);
        let units = if form.halves() { 2 } else { 1 };
        let min = form.has_min();
        let mut lanes = Lanes {
            blocks,
            qs: vec![0; groups * blocks * BLOCK * TOKENS],
            d: vec![0.0; groups * blocks * TOKENS],
            offsets: vec![0; groups * blocks * units * TOKENS],
            // Kept for every form (a value per token and block), filled only with a min.
            sums: vec![0.0; groups * blocks * TOKENS],
        };
        let (values, scales) = (acts.values(), acts.scales());
        let sum = |x: &[i8]| x.iter().map(|&q| q as i32).sum::<i32>();
        // Group by group on the threads: a prompt's products interleave thousands of tokens.
        // (max(1): chunks must not be empty; with k = 0 every vector is.)
        let per_group = (blocks * TOKENS).max(1);
        lanes
            .qs
            .par_chunks_mut(per_group * BLOCK)
            .zip(lanes.d.par_chunks_mut(per_group))
            .zip(lanes.offsets.par_chunks_mut(per_group * units))
            .zip(lanes.sums.par_chunks_mut(per_group))
            .enumerate()
            .for_each(|(group, (((qs, d), offsets), sums))| {
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
                        d[b * TOKENS + t] = scales[token * blocks + b];
                        for (u, unit) in x.chunks_exact(BLOCK / units).enumerate() {
                            offsets[(b * units + u) * TOKENS + t] = form.offset() * sum(unit);
                        }
                        if min {
                            sums[b * TOKENS + t] = sum(x) as f32;
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
/// per unit and, for Q4_K, a min per 32 values: value = scale·(byte − offset) − min, the
/// scale and min as candle's `to_float` computes them.
struct Unpacked {
    form: Form,
    k: usize,
    bytes: Vec<u8>,
    scales: Vec<f32>,
    mins: Vec<f32>,
}

impl Unpacked {
    fn new(form: Form, data: &[u8], k: usize) -> Self {
        let (values, block_bytes) = form.block();
        let blocks = data.len() / block_bytes;
        let mut w = Unpacked {
            form,
            k,
            bytes: vec![0; blocks * values],
            scales: Vec::with_capacity(blocks * values / 16),
            mins: Vec::new(),
        };
        let blocks = data.chunks_exact(block_bytes);
        match form {
            Form::Blocks(kind) => {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `applies` detected AVX2 before any call.
                unsafe {
                    avx2::unpack_blocks(kind, data, &mut w.bytes)
                };
                w.scales
                    .extend(blocks.map(|block| block_dots::read_f16(block, 0)));
            }
            Form::Q4K => {
                for (block, out) in blocks.zip(w.bytes.chunks_exact_mut(256)) {
                    let (d, dmin) = (
                        block_dots::read_f16(block, 0),
                        block_dots::read_f16(block, 2),
                    );
                    for j in 0..8 {
                        let (sc, m) = super::kquant_expand::scale_min(j, &block[4..16]);
                        w.scales.push(d * sc as f32);
                        w.mins.push(dmin * m as f32);
                    }
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above.
                    unsafe {
                        avx2::unpack_q4k(&block[16..144], out)
                    };
                }
            }
            Form::Q6K => {
                for (block, out) in blocks.zip(w.bytes.chunks_exact_mut(256)) {
                    let d = block_dots::read_f16(block, 208);
                    w.scales
                        .extend(block[192..208].iter().map(|&sc| d * sc as i8 as f32));
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above.
                    unsafe {
                        avx2::unpack_q6k(&block[..192], out)
                    };
                }
            }
        }
        w
    }

    fn rows(&self) -> usize {
        self.bytes.len() / self.k.max(1)
    }

    /// y[token][first + r] = weight row r · token, for each of these rows (the task's columns
    /// from `first`) and each token.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn times(&self, lanes: &Lanes, columns: &Columns) {
        let (rows, n) = (self.rows(), columns.tokens());
        assert!(rows <= TASK_ROWS, "a task's weight rows");
        let first = columns.rows().start;
        // A group's outputs gathered here (2 KiB, in L1), then written as one run of the task's
        // columns per token: 16-byte stores tile by tile, each to another token's row of y, took
        // more CPU time than the part-and-gather they replaced (perf, Qwen2.5-0.5B prefill).
        let mut staged = [[0f32; TOKENS]; TASK_ROWS];
        for group in 0..lanes.groups() {
            let tokens = (n - group * TOKENS).min(TOKENS);
            for r0 in (0..rows).step_by(avx512::ROWS) {
                let rn = (rows - r0).min(avx512::ROWS);
                // A tile past the last row repeats it; its sums are dropped.
                let tile: [usize; avx512::ROWS] = std::array::from_fn(|i| r0 + i.min(rn - 1));
                let sums = match (self.form.halves(), self.form.has_min()) {
                    (true, _) => avx512::tile::<true, false>(self, tile, lanes, group),
                    (false, true) => avx512::tile::<false, true>(self, tile, lanes, group),
                    (false, false) => avx512::tile::<false, false>(self, tile, lanes, group),
                };
                staged[r0..r0 + rn].copy_from_slice(&sums[..rn]);
            }
            columns.put_tile((group * TOKENS, tokens), (first, rows), &staged);
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn times(&self, _: &Lanes, _: &Columns) {
        unreachable!("`applies` is false off x86_64")
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{BLOCK, BlockKind, block_dots};
    use std::arch::x86_64::*;

    /// Every block's 32 values as bytes w + 128.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn unpack_blocks(kind: BlockKind, data: &[u8], bytes: &mut [u8]) {
        let blocks = data.chunks_exact(kind.block_bytes());
        assert!(bytes.len() >= blocks.len() * BLOCK);
        for (block, out) in blocks.zip(bytes.chunks_exact_mut(BLOCK)) {
            let q = block_dots::avx2::unpack(kind, block);
            let q = _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN));
            // SAFETY: 32 bytes into a chunk of 32.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, q) };
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

    /// A Q4_K block's 128 bytes of values: 32 bytes give the low nibbles of 32 values, then
    /// the high nibbles of the next 32 (candle's `to_float` order).
    #[target_feature(enable = "avx2")]
    pub fn unpack_q4k(qs: &[u8], out: &mut [u8]) {
        assert!(qs.len() == 128 && out.len() == 256);
        let low = _mm256_set1_epi8(0x0F);
        for c in 0..4 {
            let q = load(&qs[32 * c..]);
            store(&mut out[64 * c..], _mm256_and_si256(q, low));
            store(
                &mut out[64 * c + 32..],
                _mm256_and_si256(_mm256_srli_epi16::<4>(q), low),
            );
        }
    }

    /// A Q6_K block's low bits (128 bytes) and high bits (64) as 256 bytes of 6-bit values
    /// (candle's `to_float` order: per half, four runs of 32 from ql's low then high nibbles
    /// and qh's bit pairs 0, 1, 2, 3).
    #[target_feature(enable = "avx2")]
    pub fn unpack_q6k(block: &[u8], out: &mut [u8]) {
        assert!(block.len() >= 192 && out.len() == 256);
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
                store(&mut out[128 * half + 32 * r..], run);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
// Register tiles are indexed by row and by group together; iterators would hide that.
#[allow(clippy::needless_range_loop)]
mod avx512 {
    use super::{BLOCK, Lanes, TOKENS, Unpacked};
    use std::arch::x86_64::*;

    /// Weight rows per tile: their block chains in flight together.
    pub const ROWS: usize = 4;

    /// Rows `tile` of w times the 16 tokens of `group`: per token and row, the f32 chain over
    /// the units (`HALVES`: two scales per 32 values; `MIN`: a min per 32).
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub fn tile<const HALVES: bool, const MIN: bool>(
        w: &Unpacked,
        tile: [usize; ROWS],
        lanes: &Lanes,
        group: usize,
    ) -> [[f32; TOKENS]; ROWS] {
        let blocks = lanes.blocks;
        let units = if HALVES { 2 } else { 1 };
        assert!(w.k == blocks * BLOCK && group < lanes.groups());
        assert!(tile.iter().all(|&r| r < w.rows()));
        assert!(w.scales.len() >= w.rows() * blocks * units);
        assert!(!MIN || (w.mins.len() >= w.rows() * blocks && !lanes.sums.is_empty()));
        let mut acc = [_mm512_setzero_ps(); ROWS];
        for b in 0..blocks {
            let at = (group * blocks + b) * TOKENS;
            let base = at * BLOCK;
            let unit_at = (group * blocks + b) * units * TOKENS;
            // SAFETY: the group's block b lies in the lanes (group < groups, b < blocks): 512
            // bytes of values, 16 scales, 16 offsets per unit and 16 sums where kept.
            let (x, dx, offsets, sums) = unsafe {
                let x: [__m512i; 8] = std::array::from_fn(|g| {
                    _mm512_loadu_si512(lanes.qs.as_ptr().add(base + g * 64) as *const _)
                });
                let dx = _mm512_loadu_ps(lanes.d.as_ptr().add(at));
                let offsets: [__m512i; 2] = std::array::from_fn(|u| {
                    let u = u.min(units - 1);
                    let p = lanes.offsets.as_ptr().add(unit_at + u * TOKENS);
                    _mm512_loadu_si512(p as *const _)
                });
                let sums = if MIN {
                    _mm512_loadu_ps(lanes.sums.as_ptr().add(at))
                } else {
                    _mm512_setzero_ps()
                };
                (x, dx, offsets, sums)
            };
            for i in 0..ROWS {
                let row = tile[i] * w.k + b * BLOCK;
                // The dots of values 0..16 and 16..32, each a chain of four.
                let mut dots = [_mm512_setzero_si512(); 2];
                for g in 0..8 {
                    // SAFETY: row + 4g + 4 ≤ (tile[i] + 1)·k, within the unpacked rows.
                    let a = unsafe {
                        let p = w.bytes.as_ptr().add(row + 4 * g) as *const i32;
                        _mm512_set1_epi32(p.read_unaligned())
                    };
                    dots[g / 4] = _mm512_dpbusd_epi32(dots[g / 4], a, x[g]);
                }
                let unit = (tile[i] * blocks + b) * units;
                if HALVES {
                    for u in 0..2 {
                        let dot = _mm512_sub_epi32(dots[u], offsets[u]);
                        let scale = _mm512_mul_ps(_mm512_set1_ps(w.scales[unit + u]), dx);
                        acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc[i]);
                    }
                } else {
                    let dot = _mm512_sub_epi32(_mm512_add_epi32(dots[0], dots[1]), offsets[0]);
                    let scale = _mm512_mul_ps(_mm512_set1_ps(w.scales[unit]), dx);
                    acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc[i]);
                }
                if MIN {
                    let min = _mm512_mul_ps(_mm512_set1_ps(w.mins[tile[i] * blocks + b]), dx);
                    acc[i] = _mm512_fnmadd_ps(min, sums, acc[i]);
                }
            }
        }
        let mut sums = [[0f32; TOKENS]; ROWS];
        for i in 0..ROWS {
            // SAFETY: 16 values into an array of 16.
            unsafe { _mm512_storeu_ps(sums[i].as_mut_ptr(), acc[i]) };
        }
        sums
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

    const FORMS: [(GgmlDType, Form); 5] = [
        (GgmlDType::Q4_0, Form::Blocks(BlockKind::Q4_0)),
        (GgmlDType::Q5_0, Form::Blocks(BlockKind::Q5_0)),
        (GgmlDType::Q8_0, Form::Blocks(BlockKind::Q8_0)),
        (GgmlDType::Q4K, Form::Q4K),
        (GgmlDType::Q6K, Form::Q6K),
    ];

    /// `out` random rows of k values (offset by 0.3, so that Q4_K's mins matter), quantized by
    /// candle: its bytes and its dequantized values.
    fn weights(dtype: GgmlDType, out: usize, k: usize) -> anyhow::Result<(Vec<u8>, Vec<f32>)> {
        let w: Vec<f32> = random(out, k, 1).iter().map(|v| v + 0.3).collect();
        let q = QTensor::quantize(&Tensor::from_vec(w, (out, k), &Device::Cpu)?, dtype)?;
        let values = q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1()?;
        Ok((q.data()?.to_vec(), values))
    }

    fn unit(form: Form) -> usize {
        if form.halves() { 16 } else { 32 }
    }

    /// Each weight read back from its byte, scale and min is candle's value to the bit.
    #[test]
    fn the_bytes_are_candles_values() -> anyhow::Result<()> {
        if !block_dots::has_avx2_fma_f16c() {
            return Ok(());
        }
        let (out, k) = (6, 512);
        for (dtype, form) in FORMS {
            let (data, values) = weights(dtype, out, k)?;
            let w = Unpacked::new(form, &data, k);
            for (j, &want) in values.iter().enumerate() {
                let scale = w.scales[j / unit(form)];
                let mut got = scale * (w.bytes[j] as i32 - form.offset()) as f32;
                if form.has_min() {
                    got -= w.mins[j / 32];
                }
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{form:?} value {j}: {got} for {want}"
                );
            }
        }
        Ok(())
    }

    /// Each product is the chain over the units of fma(scale·d_x, Σ (byte − offset)·x, ·)
    /// from zero (then − min·d_x·Σx), with the activations rounded as for single tokens,
    /// whatever the token's lane and the row's tile: 37 tokens (a partial group), 45 rows
    /// (partial tiles and tasks).
    #[test]
    fn each_product_is_one_chain_over_the_units() -> anyhow::Result<()> {
        let (out, k, n) = (45, 512, 37);
        for (dtype, form) in FORMS {
            let (data, _) = weights(dtype, out, k)?;
            let kernels = match form {
                Form::Blocks(kind) => RowKernels::Blocks(kind, std::borrow::Cow::from(&data[..])),
                Form::Q4K => {
                    RowKernels::KQuants(KQuantKind::Q4K, std::borrow::Cow::from(&data[..]))
                }
                Form::Q6K => {
                    RowKernels::KQuants(KQuantKind::Q6K, std::borrow::Cow::from(&data[..]))
                }
            };
            if !applies(&kernels) {
                return Ok(());
            }
            let xs = random(n, k, 2);
            let got = products(&kernels, out, k, &xs)?;
            let w = Unpacked::new(form, &data, k);
            let acts = Q8Rows::quantize(&xs, k, false);
            let size = unit(form);
            for t in 0..n {
                let x = &acts.values()[t * k..(t + 1) * k];
                for r in 0..out {
                    let mut acc = 0f32;
                    for b in 0..k / BLOCK {
                        let dx = acts.scales()[t * (k / BLOCK) + b];
                        for u in (b * BLOCK..(b + 1) * BLOCK).step_by(size) {
                            let dot: i32 = (u..u + size)
                                .map(|j| (w.bytes[r * k + j] as i32 - form.offset()) * x[j] as i32)
                                .sum();
                            let scale = w.scales[(r * k + u) / size];
                            acc = (scale * dx).mul_add(dot as f32, acc);
                        }
                        if form.has_min() {
                            let sum: i32 = x[b * BLOCK..(b + 1) * BLOCK]
                                .iter()
                                .map(|&q| q as i32)
                                .sum();
                            let min = w.mins[(r * k) / BLOCK + b];
                            acc = (-(min * dx)).mul_add(sum as f32, acc);
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
