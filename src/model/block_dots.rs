//! Decoding products of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 matrices in integers, on activations rounded
//! to 8 bits: llama.cpp's and candle's quantized products, for several sequences at once.
//!
//! A decoding step multiplies a handful of activation rows by every weight row. Expanding the
//! weights to f32 costs a conversion per value and four bytes of cache traffic per product;
//! llama.cpp instead rounds each activation row to 8-bit blocks (`Q8_0`, or `Q8_1` with the
//! block sums for the types with a minimum) and multiplies 32 integer pairs per instruction.
//! These are those kernels, with two differences from candle's: they have AVX2 bodies for
//! every type (candle's Q4_1/Q5_0/Q5_1 products are scalar loops, and an AVX-512 VNNI body
//! where the CPU has one), and each weight block is unpacked once for up to four activation rows
//! (eight with VNNI). A row's arithmetic is the same whatever the other rows: with AVX2, llama.cpp's (each block's products in eight integer
//! lanes, scaled into eight float lanes); without, candle's reference loop (`vec_dot_unopt`),
//! whose results it reproduces to the bit.

use super::act_rounding::Rounding;
use candle_core::quantized::GgmlDType;
use half::f16;

/// Values per block of these types and of the 8-bit activations.
pub const BLOCK: usize = 32;

/// The block types multiplied here: what llama.cpp writes for matrices whose rows are no whole
/// number of 256-value K-quant blocks (Qwen2.5-0.5B's 896 columns, Gemma 3 270m's 640), and
/// Q8_0, common for output heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// d: f16, 16 bytes of 4-bit values: d·(q − 8).
    Q4_0,
    /// d: f16, m: f16, 16 bytes of 4-bit values: d·q + m.
    Q4_1,
    /// d: f16, 4 bytes of fifth bits, 16 bytes of 4-bit values: d·(q − 16).
    Q5_0,
    /// d: f16, m: f16, 4 bytes of fifth bits, 16 bytes of 4-bit values: d·q + m.
    Q5_1,
    /// d: f16, 32 signed bytes: d·q.
    Q8_0,
}

impl BlockKind {
    pub fn of(dtype: GgmlDType) -> Option<Self> {
        match dtype {
            GgmlDType::Q4_0 => Some(BlockKind::Q4_0),
            GgmlDType::Q4_1 => Some(BlockKind::Q4_1),
            GgmlDType::Q5_0 => Some(BlockKind::Q5_0),
            GgmlDType::Q5_1 => Some(BlockKind::Q5_1),
            GgmlDType::Q8_0 => Some(BlockKind::Q8_0),
            _ => None,
        }
    }

    /// Bytes of one block.
    pub fn block_bytes(self) -> usize {
        match self {
            BlockKind::Q4_0 => 18,
            BlockKind::Q4_1 => 20,
            BlockKind::Q5_0 => 22,
            BlockKind::Q5_1 => 24,
            BlockKind::Q8_0 => 34,
        }
    }

    /// Bytes of one row of `cols` values.
    pub fn row_bytes(self, cols: usize) -> usize {
        cols / BLOCK * self.block_bytes()
    }

    /// Offsets in a block of its min (if any), fifth bits (if any) and values.
    fn layout(self) -> (Option<usize>, Option<usize>, usize) {
        match self {
            BlockKind::Q4_0 => (None, None, 2),
            BlockKind::Q4_1 => (Some(2), None, 4),
            BlockKind::Q5_0 => (None, Some(2), 6),
            BlockKind::Q5_1 => (Some(2), Some(4), 8),
            BlockKind::Q8_0 => (None, None, 2),
        }
    }

    /// Whether the block has a minimum (its activations then carry their block sums: Q8_1).
    pub fn has_min(self) -> bool {
        self.layout().0.is_some()
    }
}

/// Activation rows rounded to 8 bits as candle's `BlockQ8_0` / `BlockQ8_1::from_float` do:
/// per 32 values, d = max|x| / 127 (kept as f16), q = round(x / d) (halves away from zero) and,
/// for Q8_1, s = f16(Σq)·d in f16.
pub struct Q8Rows {
    cols: usize,
    qs: Vec<i8>,
    /// Per block: d as f32 (an f16 value).
    d: Vec<f32>,
    /// Per block: s as f32 (an f16 value); empty for Q8_0.
    s: Vec<f32>,
}

impl Q8Rows {
    /// `xs`: rows of `cols` values, `cols` a multiple of 32. `with_sums` for Q8_1.
    pub fn quantize(xs: &[f32], cols: usize, with_sums: bool) -> Self {
        Self::quantize_with(xs, cols, with_sums, Rounding::for_machine())
    }

    fn quantize_with(xs: &[f32], cols: usize, with_sums: bool, rounding: Rounding) -> Self {
        assert!(cols.is_multiple_of(BLOCK) && xs.len().is_multiple_of(cols));
        let blocks = xs.len() / BLOCK;
        let mut rows = Q8Rows {
            cols,
            qs: vec![0; xs.len()],
            d: Vec::with_capacity(blocks),
            s: Vec::with_capacity(if with_sums { blocks } else { 0 }),
        };
        for (x, q) in xs.chunks_exact(BLOCK).zip(rows.qs.chunks_exact_mut(BLOCK)) {
            let amax = (rounding.max_abs)(x);
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let d16 = f16::from_f32(d);
            let sum = (rounding.round)(x, id, q);
            rows.d.push(d16.to_f32());
            if with_sums {
                rows.s.push((f16::from_f32(sum as f32) * d16).to_f32());
            }
        }
        rows
    }

    pub fn len(&self) -> usize {
        self.d.len() * BLOCK / self.cols.max(1)
    }

    /// The rounded values, row after row.
    pub fn values(&self) -> &[i8] {
        &self.qs
    }

    /// Each block's d, row after row.
    pub fn scales(&self) -> &[f32] {
        &self.d
    }

    /// Each block's s (Q8_1: quantized `with_sums`), row after row; empty for Q8_0.
    pub(super) fn sums(&self) -> &[f32] {
        &self.s
    }

    pub fn is_empty(&self) -> bool {
        self.qs.is_empty()
    }

    fn row(&self, r: usize) -> Q8Row<'_> {
        let blocks = self.cols / BLOCK;
        let at = r * blocks;
        Q8Row {
            qs: &self.qs[r * self.cols..(r + 1) * self.cols],
            d: &self.d[at..at + blocks],
            s: self.s.get(at..at + blocks).unwrap_or(&[]),
        }
    }
}

#[derive(Clone, Copy)]
struct Q8Row<'a> {
    qs: &'a [i8],
    d: &'a [f32],
    s: &'a [f32],
}

/// Appends w · x_r for every row of `xs` (in order) to `out`; `w` is one weight row's blocks.
pub type DotRows = fn(BlockKind, &[u8], &Q8Rows, &mut Vec<f32>);

/// The kernel for this machine, chosen once per product.
pub fn dot_rows_kernel() -> DotRows {
    #[cfg(target_arch = "x86_64")]
    if has_avx512_vnni() {
        // SAFETY: the features the kernel is compiled for were just detected.
        return |kind, w, xs, out| unsafe { avx2::dot_rows_vnni(kind, w, xs, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma_f16c() {
        // SAFETY: the features the kernel is compiled for were just detected.
        return |kind, w, xs, out| unsafe { avx2::dot_rows(kind, w, xs, out) };
    }
    dot_rows_portable
}

/// Whether the CPU also runs the AVX-512 VNNI body (on 256-bit registers).
#[cfg(target_arch = "x86_64")]
fn has_avx512_vnni() -> bool {
    has_avx2_fma_f16c()
        && std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

/// Whether the CPU runs the AVX2 kernels here and in `kquant_dots` (AVX2, FMA, F16C).
pub fn has_avx2_fma_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The kernel without SIMD (any CPU).
pub fn dot_rows_portable(kind: BlockKind, w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
    let (min_at, high_at, qs_at) = kind.layout();
    let mut sums = vec![0f32; xs.len()];
    for (b, block) in w.chunks_exact(kind.block_bytes()).enumerate() {
        let d = read_f16(block, 0);
        let m = min_at.map_or(0.0, |at| read_f16(block, at));
        let high = high_at.map_or(0, |at| read_u32(block, at));
        let mut q = [0i32; BLOCK];
        for (j, q) in q.iter_mut().enumerate() {
            *q = if kind == BlockKind::Q8_0 {
                block[qs_at + j] as i8 as i32
            } else {
                let byte = block[qs_at + j % 16];
                let nibble = if j < 16 { byte & 0x0F } else { byte >> 4 };
                let v = (nibble | (((high >> j) & 1) << 4) as u8) as i32;
                match kind {
                    BlockKind::Q4_0 => v - 8,
                    BlockKind::Q5_0 => v - 16,
                    _ => v,
                }
            };
        }
        for (r, sum) in sums.iter_mut().enumerate() {
            let x = xs.row(r);
            let xq = &x.qs[b * BLOCK..(b + 1) * BLOCK];
            let sumi: i32 = q.iter().zip(xq).map(|(&a, &b)| a * b as i32).sum();
            *sum += scaled(kind, sumi, d, m, x, b);
        }
    }
    out.extend(sums);
}

/// A block's contribution, in candle's `vec_dot_unopt` order: sumi·d·dₓ (+ m·sₓ).
#[inline(always)]
fn scaled(kind: BlockKind, sumi: i32, d: f32, m: f32, x: Q8Row, b: usize) -> f32 {
    if kind.has_min() {
        sumi as f32 * d * x.d[b] + m * x.s[b]
    } else {
        sumi as f32 * d * x.d[b]
    }
}

pub(super) fn read_f16(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{BLOCK, BlockKind, Q8Row, Q8Rows, read_u32};
    use std::arch::x86_64::*;

    /// The f16 at byte `at` of `b` as f32, in the caller's registers (a call to the `half`
    /// crate's converter spills every vector register around it).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn read_f16(b: &[u8], at: usize) -> f32 {
        let bits = u16::from_le_bytes([b[at], b[at + 1]]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    /// The f16 at `at` in all eight lanes. A scalar conversion, whatever the intrinsics
    /// (`read_f16`), compiles to `vpinsrw` into a register left as it was, often the kernel's
    /// accumulator: each block's scale then waited for the previous block's sum (perf, batch
    /// 1). Eight lanes asked for make LLVM load the value whole.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn f16_lanes(b: &[u8], at: usize) -> __m256 {
        let bits = u16::from_le_bytes([b[at], b[at + 1]]);
        _mm256_cvtph_ps(_mm_set1_epi16(bits as i16))
    }

    /// 32 bytes: 0xFF where bit i of `bits` is set (llama.cpp's `bytes_from_bits_32`).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn bytes_from_bits(bits: u32) -> __m256i {
        let shuffle = _mm256_set_epi64x(
            0x0303030303030303,
            0x0202020202020202,
            0x0101010101010101,
            0x0000000000000000,
        );
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuffle);
        let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
        _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
    }

    /// The block's 32 values as bytes: signed for Q4_0, Q5_0 and Q8_0, unsigned for Q4_1 and
    /// Q5_1.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn unpack(kind: BlockKind, block: &[u8]) -> __m256i {
        let (_, high_at, qs_at) = kind.layout();
        assert!(block.len() >= qs_at + 16);
        if kind == BlockKind::Q8_0 {
            assert!(block.len() >= qs_at + 32);
            // SAFETY: 32 bytes from qs_at lie in the block (asserted).
            return unsafe { _mm256_loadu_si256(block.as_ptr().add(qs_at) as *const __m256i) };
        }
        // SAFETY: 16 bytes from qs_at lie in the block (asserted).
        let qs = unsafe { _mm_loadu_si128(block.as_ptr().add(qs_at) as *const __m128i) };
        let nibbles = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
            _mm256_set1_epi8(0x0F),
        );
        match (kind, high_at) {
            // q − 16: the fifth bit clear means the value is negative.
            (BlockKind::Q5_0, Some(at)) => {
                let high = bytes_from_bits(read_u32(block, at));
                _mm256_or_si256(nibbles, _mm256_andnot_si256(high, _mm256_set1_epi8(-16)))
            }
            (_, Some(at)) => {
                let high = bytes_from_bits(read_u32(block, at));
                _mm256_or_si256(nibbles, _mm256_and_si256(high, _mm256_set1_epi8(0x10)))
            }
            (BlockKind::Q4_0, _) => _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8)),
            _ => nibbles,
        }
    }

    /// A row's blocks as f32, each value candle's `to_float` gives: q·d (+ m), the integer
    /// converted exactly and then one multiply (and one add: never fused).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn expand(kind: BlockKind, row: &[u8], out: &mut [f32]) {
        let (min_at, _, _) = kind.layout();
        let signed = !kind.has_min();
        assert!(out.len() >= row.len() / kind.block_bytes() * BLOCK);
        for (block, y) in row
            .chunks_exact(kind.block_bytes())
            .zip(out.chunks_exact_mut(BLOCK))
        {
            let q = unpack(kind, block);
            let d = f16_lanes(block, 0);
            let m = min_at.map(|at| f16_lanes(block, at));
            let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
            for (h, half) in halves.into_iter().enumerate() {
                for (e, bytes) in [half, _mm_srli_si128::<8>(half)].into_iter().enumerate() {
                    let ints = if signed {
                        _mm256_cvtepi8_epi32(bytes)
                    } else {
                        _mm256_cvtepu8_epi32(bytes)
                    };
                    let mut v = _mm256_mul_ps(_mm256_cvtepi32_ps(ints), d);
                    if let Some(m) = m {
                        v = _mm256_add_ps(v, m);
                    }
                    // SAFETY: h·16 + e·8 + 8 ≤ 32, the length of y.
                    unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(h * 16 + e * 8), v) };
                }
            }
        }
    }

    /// The kinds by index, so that each kernel is compiled for one kind.
    const KINDS: [BlockKind; 5] = [
        BlockKind::Q4_0,
        BlockKind::Q4_1,
        BlockKind::Q5_0,
        BlockKind::Q5_1,
        BlockKind::Q8_0,
    ];

    /// The products for one instruction set: `$pair_sums` gives, for 32 unsigned × 32 signed
    /// bytes, the eight lanes of four adjacent products summed (exact in every body: no pair
    /// reaches i16's limit, 2 × 128 × 127 < 2^15), so every body gives every bit the same.
    macro_rules! products {
        (
            $features:literal, $pair_sums:ident, [$($r:literal)+],
            $dot_rows:ident, $by_rows:ident, $dots:ident
        ) => {
            #[target_feature(enable = $features)]
            pub fn $dot_rows(kind: BlockKind, w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
                // The rows of a load, most first.
                const MOST: usize = [$($r),+][0];
                let n = xs.len();
                let mut r = 0;
                while r < n {
                    let take = (n - r).min(MOST);
                    match kind {
                        BlockKind::Q4_0 => $by_rows::<0>(take, w, xs, r, out),
                        BlockKind::Q4_1 => $by_rows::<1>(take, w, xs, r, out),
                        BlockKind::Q5_0 => $by_rows::<2>(take, w, xs, r, out),
                        BlockKind::Q5_1 => $by_rows::<3>(take, w, xs, r, out),
                        BlockKind::Q8_0 => $by_rows::<4>(take, w, xs, r, out),
                    }
                    r += take;
                }
            }

            /// Rows first.. first + take of xs (take at most the list's first), each load's rows
            /// gathered for exactly its size.
            #[target_feature(enable = $features)]
            fn $by_rows<const K: usize>(
                take: usize,
                w: &[u8],
                xs: &Q8Rows,
                first: usize,
                out: &mut Vec<f32>,
            ) {
                match take {
                    $($r => {
                        let rows: [Q8Row; $r] = std::array::from_fn(|i| xs.row(first + i));
                        out.extend_from_slice(&$dots::<K, $r>(w, &rows));
                    })+
                    _ => out.extend_from_slice(&$dots::<K, 1>(w, &[xs.row(first)])),
                }
            }

            /// w · x for the first R of `rows`: each weight block unpacked once; per row, per block,
            /// the 32 products summed in eight i32 lanes and added, scaled, to eight f32 lanes
            /// (llama.cpp's order), summed across lanes at the end — the same operations whatever R.
            #[target_feature(enable = $features)]
            fn $dots<const K: usize, const R: usize>(w: &[u8], rows: &[Q8Row; R]) -> [f32; R] {
                let kind = KINDS[K];
                let (min_at, _, _) = kind.layout();
                let signed = !kind.has_min();
                let bytes = kind.block_bytes();
                let blocks = w.len() / bytes;
                for x in rows {
                    assert!(x.qs.len() >= blocks * BLOCK && x.d.len() >= blocks);
                    assert!(!kind.has_min() || x.s.len() >= blocks);
                }
                let mut acc = [_mm256_setzero_ps(); R];
                // The minimum's part, m·s summed block by block (every lane the same).
                let mut offsets = [_mm256_setzero_ps(); R];
                for (b, block) in w.chunks_exact(bytes).enumerate() {
                    // A block is at most 34 bytes: one line asked for per block covers every line.
                    // (A prefetch never faults, whatever the address; the pointer is not read.)
                    _mm_prefetch::<_MM_HINT_T0>(
                        block.as_ptr().wrapping_add(PREFETCH_BYTES) as *const i8
                    );
                    _mm_prefetch::<_MM_HINT_T1>(
                        block.as_ptr().wrapping_add(PREFETCH_BYTES + L2_PREFETCH_BYTES) as *const i8,
                    );
                    let q = unpack(kind, block);
                    // maddubs multiplies unsigned by signed bytes: signed weights give it their
                    // magnitudes and move their signs onto the activations.
                    let magnitudes = if signed { _mm256_sign_epi8(q, q) } else { q };
                    let d = f16_lanes(block, 0);
                    let m = min_at.map_or(_mm256_setzero_ps(), |at| f16_lanes(block, at));
                    for r in 0..R {
                        let x = &rows[r];
                        // SAFETY: b < blocks, and every row holds `blocks` blocks (asserted above).
                        let (y, dx) = unsafe {
                            let y =
                                _mm256_loadu_si256(x.qs.as_ptr().add(b * BLOCK) as *const __m256i);
                            (y, *x.d.get_unchecked(b))
                        };
                        let y = if signed { _mm256_sign_epi8(y, q) } else { y };
                        let p = _mm256_cvtepi32_ps($pair_sums(magnitudes, y));
                        // d·dx in every lane: the scalar product, rounded the same.
                        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), p, acc[r]);
                        if kind.has_min() {
                            // SAFETY: as above; the rows carry their block sums (asserted).
                            let s = unsafe { *x.s.get_unchecked(b) };
                            offsets[r] =
                                _mm256_add_ps(offsets[r], _mm256_mul_ps(m, _mm256_set1_ps(s)));
                        }
                    }
                }
                let mut sums = [0f32; R];
                for r in 0..R {
                    sums[r] = hsum_float_8(acc[r]) + _mm256_cvtss_f32(offsets[r]);
                }
                sums
            }
        };
    }

    // AVX2 has 16 vector registers: four rows' accumulators and offsets leave room for the
    // block's values. AVX-512 has 32: eight rows unpack each block once for twice the rows.
    products!(
        "avx2,fma,f16c",
        pair_sums,
        [4 3 2],
        dot_rows,
        by_rows,
        dots
    );
    products!(
        "avx2,fma,f16c,avx512vnni,avx512vl",
        pair_sums_vnni,
        [8 7 6 5 4 3 2],
        dot_rows_vnni,
        by_rows_vnni,
        dots_vnni
    );

    /// maddubs (pairs into i16) then madd with ones (pairs of those into i32): llama.cpp's AVX2.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn pair_sums(magnitudes: __m256i, y: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, y), _mm256_set1_epi16(1))
    }

    /// The same sums in one instruction (AVX-512 VNNI on 256 bits, as llama.cpp's
    /// `mul_sum_us8_pairs_float` where the CPU has it).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    fn pair_sums_vnni(magnitudes: __m256i, y: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), magnitudes, y)
    }

    /// How far ahead of the block being multiplied the kernels here and in `kquant_dots` ask
    /// for the weights' cache lines. Decoding streams every weight once per step, and with the
    /// hardware prefetcher alone the kernels waited on each block's first line (perf: most
    /// samples on the loads of a block's scales). Measured on an AVX-512 Xeon, 2 threads,
    /// batch-1 decoding: none / 512 / 1,024 / 2,048 / 8,192 bytes gave 2.15 / 3.55 / 3.89 /
    /// 4.03 / 3.55 tok/s on the synthetic Llama-3.1-8B Q4_K_M; Qwen2.5-0.5B's Q5_0/Q8_0
    /// matrices 18.1 at 1,024, 20.0 at 2,048, 20.3 at 4,096.
    pub(crate) const PREFETCH_BYTES: usize = 2048;

    /// How far beyond `PREFETCH_BYTES` the kernels here and in `kquant_dots` also ask for the
    /// weights' lines into L2 only (`_MM_HINT_T1`): a core keeps more requests to memory in
    /// flight for L2 than for L1, and with L1's alone two threads of decoding products read
    /// 21–25 GB/s of the 35 a plain read reaches on a Zen 4. Measured there, 2 threads,
    /// `examples/bench_decode_products.rs`, runs alternating (session 50): Q4_K 20.6–25.0 →
    /// 26.0–28.6 GB/s, Q6_K 20.5–26.2 → 24.4–35.1, Q8_0 23.4–26.4 → 26.7–31.4, Q4_0 and the
    /// i-quants (through `prefetch_ahead`) unchanged; 4,096 and 16,384 were no better than
    /// 8,192; L2 alone (no L1 request) was worse, 15 GB/s.
    pub(crate) const L2_PREFETCH_BYTES: usize = 8192;

    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum_float_8(x: __m256) -> f32 {
        let res = _mm256_extractf128_ps(x, 1);
        let res = _mm_add_ps(res, _mm256_castps256_ps128(x));
        let res = _mm_add_ps(res, _mm_movehl_ps(res, res));
        let res = _mm_add_ss(res, _mm_movehdup_ps(res));
        _mm_cvtss_f32(res)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::matrix::candle_product_by_row;
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};

    /// Random weights (offset, so that Q4_1/Q5_1's minimum matters), quantized by candle: each
    /// row's products are those of candle's own quantized matrix product on that row alone (its
    /// 8-bit activations and kernels), for 1 to 9 rows at once (a load of eight where VNNI runs,
    /// and one more), on rows of 4 and 6 blocks
    /// (candle's debug builds refuse odd block counts for Q4_1): to the bit on the portable
    /// kernel where candle runs its reference loop (Q4_1/Q5_0/Q5_1), within float rounding
    /// otherwise (AVX2 sums the blocks in eight lanes, as llama.cpp and candle's AVX kernels).
    /// Every body this CPU runs is checked, not only the one it picks; and a row's products do
    /// not change by a bit with the other rows.
    #[test]
    fn products_are_candles_row_by_row() {
        let mut kernels = vec![
            ("machine", dot_rows_kernel()),
            ("portable", dot_rows_portable as DotRows),
        ];
        #[cfg(target_arch = "x86_64")]
        if has_avx2_fma_f16c() {
            // SAFETY: the features the kernel is compiled for were just detected.
            kernels.push(("avx2", |kind, w, xs, out| unsafe {
                avx2::dot_rows(kind, w, xs, out)
            }));
        }
        #[cfg(target_arch = "x86_64")]
        if has_avx512_vnni() {
            // SAFETY: as above.
            kernels.push(("vnni", |kind, w, xs, out| unsafe {
                avx2::dot_rows_vnni(kind, w, xs, out)
            }));
        }
        for cols in [128, 192] {
            products_match_candle(cols, &kernels);
        }
    }

    /// The VNNI body gives the AVX2 body's bits (the same integer lanes, the same float
    /// operations), every type, 1 to 9 rows; with the pairs at their extreme for Q8_0 (weight
    /// bytes −128 and 127, which no quantizer writes but a file may hold, against activations
    /// ±127): a body whose pair sums saturated or summed other lanes would differ.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_vnni_body_gives_the_avx2_bits() {
        if !has_avx512_vnni() {
            eprintln!("no AVX-512 VNNI on this CPU: nothing to compare");
            return;
        }
        let (cols, out) = (256, 5);
        let mut xs = awkward_rows(cols, 9);
        // The last row: ±127 everywhere (its scale is 1).
        for (i, v) in xs[8 * cols..].iter_mut().enumerate() {
            *v = if i % 3 == 0 { -127.0 } else { 127.0 };
        }
        let w = Tensor::randn(0f32, 1.0, (out, cols), &Device::Cpu).unwrap();
        for dtype in BLOCK_TYPES {
            let kind = BlockKind::of(dtype).unwrap();
            let mut data = QTensor::quantize(&w, dtype)
                .unwrap()
                .data()
                .unwrap()
                .to_vec();
            let row_bytes = kind.row_bytes(cols);
            if kind == BlockKind::Q8_0 {
                // Weight row 0's quantized bytes (after each block's f16 scale): −128 then 127
                // in alternate blocks.
                for (b, block) in data[..row_bytes]
                    .chunks_exact_mut(kind.block_bytes())
                    .enumerate()
                {
                    block[2..].fill(if b % 2 == 0 { 0x80 } else { 0x7F });
                }
            }
            // Up to nine rows: a whole load of eight and one left, and every smaller load.
            for n in 1..=9 {
                let rows = Q8Rows::quantize(&xs[(9 - n) * cols..], cols, kind.has_min());
                for v in 0..out {
                    let weights = &data[v * row_bytes..(v + 1) * row_bytes];
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    // SAFETY: both bodies' features were detected (has_avx512_vnni).
                    unsafe {
                        avx2::dot_rows(kind, weights, &rows, &mut a);
                        avx2::dot_rows_vnni(kind, weights, &rows, &mut b);
                    }
                    let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&a), bits(&b), "{dtype:?} n={n} weight row {v}");
                }
            }
        }
    }

    /// The block types multiplied here, as candle names them.
    pub(crate) const BLOCK_TYPES: [GgmlDType; 5] = [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
    ];

    /// Activation rows with the cases rounding gets wrong: values exactly halfway between two
    /// integers once scaled (amax 127: the scale is 1), ties of magnitude of either sign, an
    /// all-zero block, and random rows.
    pub(crate) fn awkward_rows(cols: usize, rows: usize) -> Vec<f32> {
        let mut xs: Vec<f32> = Tensor::randn(0f32, 1.0, rows * cols, &Device::Cpu)
            .unwrap()
            .to_vec1()
            .unwrap();
        for (i, v) in xs[..cols].iter_mut().enumerate() {
            *v = match i % 32 {
                0 => 127.0,
                j => (j as f32 - 16.0) * 4.0 + 0.5,
            };
        }
        if rows > 1 {
            for (i, v) in xs[cols..2 * cols].iter_mut().enumerate() {
                let sign = if i < cols / 2 { 1.0 } else { -1.0 };
                *v = sign
                    * match i % 7 {
                        0 => -3.0,
                        3 => 3.0,
                        _ => (i % 5) as f32 * 0.25 - 0.5,
                    };
            }
            xs[cols..cols + 32].fill(0.0);
        }
        xs
    }

    /// The activations' bytes are candle's `BlockQ8_0` / `BlockQ8_1` (its reference
    /// `from_float`), on the kernel this machine runs and on the portable loop.
    #[test]
    fn activations_round_as_candles() {
        let (cols, n) = (256, 4);
        let xs = awkward_rows(cols, n);
        let t = Tensor::from_vec(xs.clone(), (n, cols), &Device::Cpu).unwrap();
        for (dtype, sums) in [(GgmlDType::Q8_0, false), (GgmlDType::Q8_1, true)] {
            let want = QTensor::quantize(&t, dtype)
                .unwrap()
                .data()
                .unwrap()
                .to_vec();
            let bytes = if sums { 36 } else { 34 };
            for (name, rows) in [
                ("machine", Q8Rows::quantize(&xs, cols, sums)),
                (
                    "portable",
                    Q8Rows::quantize_with(&xs, cols, sums, Rounding::PORTABLE),
                ),
            ] {
                for (b, block) in want.chunks_exact(bytes).enumerate() {
                    let at = |i: usize| f16::from_le_bytes([block[i], block[i + 1]]).to_f32();
                    let qs: Vec<i8> = block[bytes - 32..].iter().map(|&q| q as i8).collect();
                    assert_eq!(
                        &rows.qs[b * 32..(b + 1) * 32],
                        &qs[..],
                        "{dtype:?} {name} {b}"
                    );
                    assert_eq!(
                        rows.d[b].to_bits(),
                        at(0).to_bits(),
                        "{dtype:?} {name} d {b}"
                    );
                    if sums {
                        assert_eq!(rows.s[b].to_bits(), at(2).to_bits(), "{name} s {b}");
                    }
                }
            }
        }
    }

    fn products_match_candle(cols: usize, kernels: &[(&str, DotRows)]) {
        let out = 9;
        let dev = Device::Cpu;
        let w = (Tensor::randn(0f32, 1.0, (out, cols), &dev).unwrap() + 0.3).unwrap();
        let x = Tensor::randn(0f32, 1.0, (9, cols), &dev).unwrap();
        let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        for dtype in BLOCK_TYPES {
            let q = std::sync::Arc::new(QTensor::quantize(&w, dtype).unwrap());
            let kind = BlockKind::of(dtype).unwrap();
            let data = q.data().unwrap();
            let row_bytes = kind.row_bytes(cols);
            assert_eq!(data.len(), out * row_bytes);
            let want = candle_product_by_row(&q, &x);
            for n in 1..=9 {
                let rows = Q8Rows::quantize(&xs[..n * cols], cols, kind.has_min());
                for &(name, kernel) in kernels {
                    for v in 0..out {
                        let mut got = Vec::new();
                        kernel(
                            kind,
                            &data[v * row_bytes..(v + 1) * row_bytes],
                            &rows,
                            &mut got,
                        );
                        for (r, &g) in got.iter().enumerate() {
                            let e = want[r][v];
                            let exact = name == "portable"
                                && matches!(
                                    kind,
                                    BlockKind::Q4_1 | BlockKind::Q5_0 | BlockKind::Q5_1
                                );
                            let tol = if exact { 0.0 } else { 1e-4 + 1e-5 * e.abs() };
                            assert!(
                                (g - e).abs() <= tol,
                                "{dtype:?} {name} cols={cols} n={n} row {r} out {v}: {g} vs {e}"
                            );
                            // A row gets exactly what it gets alone (batching changes no bit).
                            let alone = Q8Rows::quantize(
                                &xs[r * cols..(r + 1) * cols],
                                cols,
                                kind.has_min(),
                            );
                            let mut one = Vec::new();
                            kernel(
                                kind,
                                &data[v * row_bytes..(v + 1) * row_bytes],
                                &alone,
                                &mut one,
                            );
                            assert_eq!(g.to_bits(), one[0].to_bits(), "{dtype:?} {name} n={n}");
                        }
                    }
                }
            }
        }
    }
}
