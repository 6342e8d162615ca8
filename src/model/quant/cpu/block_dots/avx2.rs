use crate::model::quant::cpu::block_dots::blocks::{Q8Row, Q8Rows, read_u32};
use crate::model::quant::formats::legacy::{BLOCK, BlockKind};
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
/// accumulator, so each block's scale would wait for the previous block's sum (perf, batch
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
    unpack_with(kind, block, true)
}

/// The block's 32 values as stored, before Q4_0's − 8 and Q5_0's − 16: unsigned but for Q8_0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_stored(kind: BlockKind, block: &[u8]) -> __m256i {
    unpack_with(kind, block, false)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_with(kind: BlockKind, block: &[u8], offset: bool) -> __m256i {
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
        (BlockKind::Q5_0, Some(at)) if offset => {
            let high = bytes_from_bits(read_u32(block, at));
            _mm256_or_si256(nibbles, _mm256_andnot_si256(high, _mm256_set1_epi8(-16)))
        }
        (_, Some(at)) => {
            let high = bytes_from_bits(read_u32(block, at));
            _mm256_or_si256(nibbles, _mm256_and_si256(high, _mm256_set1_epi8(0x10)))
        }
        (BlockKind::Q4_0, _) if offset => _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8)),
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

/// Rows per vector of results, one per lane: eight weight rows against one activation row
/// (`$across`), or up to eight activation rows against one weight row (`$dots`).
const ACROSS: usize = 8;

/// The products for one instruction set: `$pair_sums` gives, for 32 unsigned × 32 signed
/// bytes, the eight lanes of four adjacent products summed (exact in every body: no pair
/// reaches i16's limit, 2 × 128 × 127 < 2^15). Every (weight row, activation row) pair then
/// takes candle's reference loop, to the bit: per block the exact integer Σ q·y, then
/// sum += sumi·d·dₓ (+ m·sₓ), block after block. The integer sums are exact whichever way
/// they are formed, so the bodies may form them differently: one activation row against
/// eight weight rows (`$across`: a batch-1 step), or several activation rows against one
/// weight row (`$dots`).
macro_rules! products {
    (
        $features:literal, $pair_sums:ident,
        $dot_rows:ident, $by_rows:ident, $dots:ident, $across:ident
    ) => {
        /// Appends w_v · x_r for every weight row v of `w` (whole rows of `xs.cols` values) and
        /// every row r of `xs`, in (v, r) order.
        #[target_feature(enable = $features)]
        pub fn $dot_rows(kind: BlockKind, w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
            let row_bytes = kind.row_bytes(xs.cols);
            assert!(
                row_bytes > 0 && w.len().is_multiple_of(row_bytes),
                "whole weight rows of {} values",
                xs.cols
            );
            if xs.len() == 1 {
                let x = xs.row(0);
                for group in w.chunks(ACROSS * row_bytes) {
                    let n = group.len() / row_bytes;
                    // The last row again in the lanes past the group's end (results dropped).
                    let rows: [&[u8]; ACROSS] =
                        std::array::from_fn(|i| &group[i.min(n - 1) * row_bytes..][..row_bytes]);
                    // The rows after these, read next (asked for into L2 meanwhile).
                    let next = group.as_ptr_range().end;
                    let sums = match kind {
                        BlockKind::Q4_0 => $across::<0>(&rows, &x, next),
                        BlockKind::Q4_1 => $across::<1>(&rows, &x, next),
                        BlockKind::Q5_0 => $across::<2>(&rows, &x, next),
                        BlockKind::Q5_1 => $across::<3>(&rows, &x, next),
                        BlockKind::Q8_0 => $across::<4>(&rows, &x, next),
                    };
                    out.extend_from_slice(&sums[..n]);
                }
                return;
            }
            for row in w.chunks_exact(row_bytes) {
                match kind {
                    BlockKind::Q4_0 => $by_rows::<0>(row, xs, out),
                    BlockKind::Q4_1 => $by_rows::<1>(row, xs, out),
                    BlockKind::Q5_0 => $by_rows::<2>(row, xs, out),
                    BlockKind::Q5_1 => $by_rows::<3>(row, xs, out),
                    BlockKind::Q8_0 => $by_rows::<4>(row, xs, out),
                }
            }
        }

        /// One weight row times every row of xs, eight activation rows per load.
        #[target_feature(enable = $features)]
        fn $by_rows<const K: usize>(w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
            let n = xs.len();
            let mut first = 0;
            while first < n {
                let take = (n - first).min(ACROSS);
                let rows: [Q8Row; ACROSS] =
                    std::array::from_fn(|i| xs.row(first + i.min(take - 1)));
                out.extend_from_slice(&$dots::<K>(w, &rows, take)[..take]);
                first += take;
            }
        }

        /// w · x for the first `take` of `rows`, one per lane: each weight block unpacked once
        /// for all of them.
        #[target_feature(enable = $features)]
        fn $dots<const K: usize>(w: &[u8], rows: &[Q8Row; ACROSS], take: usize) -> [f32; ACROSS] {
            let kind = KINDS[K];
            let (min_at, _, _) = kind.layout();
            let signed = !kind.has_min();
            let bytes = kind.block_bytes();
            let blocks = w.len() / bytes;
            for x in rows {
                assert!(x.qs.len() >= blocks * BLOCK && x.d.len() >= blocks);
                assert!(!kind.has_min() || x.s.len() >= blocks);
            }
            let mut acc = _mm256_setzero_ps();
            for (b, block) in w.chunks_exact(bytes).enumerate() {
                prefetch_ahead(block);
                let q = unpack(kind, block);
                // maddubs multiplies unsigned by signed bytes: signed weights give it their
                // magnitudes and move their signs onto the activations.
                let magnitudes = if signed { _mm256_sign_epi8(q, q) } else { q };
                let mut p = [_mm256_setzero_si256(); ACROSS];
                for r in 0..take {
                    // SAFETY: b < blocks, and every row holds `blocks` blocks (asserted above).
                    let y = unsafe {
                        _mm256_loadu_si256(rows[r].qs.as_ptr().add(b * BLOCK) as *const __m256i)
                    };
                    let y = if signed { _mm256_sign_epi8(y, q) } else { y };
                    p[r] = $pair_sums(magnitudes, y);
                }
                // SAFETY (both): as above; the rows carry their block sums (asserted).
                let dx = unsafe { lanes_of(rows, |x| *x.d.get_unchecked(b)) };
                let mut t = _mm256_mul_ps(
                    _mm256_mul_ps(_mm256_cvtepi32_ps(lane_sums(&p)), f16_lanes(block, 0)),
                    dx,
                );
                if let Some(at) = min_at {
                    let s = unsafe { lanes_of(rows, |x| *x.s.get_unchecked(b)) };
                    t = _mm256_add_ps(t, _mm256_mul_ps(f16_lanes(block, at), s));
                }
                acc = _mm256_add_ps(acc, t);
            }
            let mut sums = [0f32; ACROSS];
            // SAFETY: eight values into an array of eight.
            unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), acc) };
            sums
        }

        /// w_i · x for the eight weight rows `rows` (each at least x's blocks), one per lane:
        /// each activation block loaded once for all of them. Q4_0's and Q5_0's values are
        /// multiplied as stored (unsigned, 0..15 and 0..31) and their offsets (8, 16) times
        /// the activation block's sum subtracted once for the eight rows.
        #[target_feature(enable = $features)]
        fn $across<const K: usize>(
            rows: &[&[u8]; ACROSS],
            x: &Q8Row,
            next: *const u8,
        ) -> [f32; ACROSS] {
            let kind = KINDS[K];
            let (min_at, _, _) = kind.layout();
            let bytes = kind.block_bytes();
            let blocks = x.d.len();
            assert!(x.qs.len() >= blocks * BLOCK && x.sum.len() >= blocks);
            assert!(!kind.has_min() || x.s.len() >= blocks);
            assert!(rows.iter().all(|w| w.len() >= blocks * bytes));
            let offset = match kind {
                BlockKind::Q4_0 => 8,
                BlockKind::Q5_0 => 16,
                _ => 0,
            };
            // Each row's lines into L1 a few blocks ahead, once per line; the eight rows after
            // these (as many bytes as a step here reads) into L2, in order.
            let l1_every = (64 / bytes).max(1);
            let step = ACROSS * bytes;
            let mut acc = _mm256_setzero_ps();
            for b in 0..blocks {
                for line in (0..step).step_by(64) {
                    // (A prefetch never faults, whatever the address; the pointer is not read.)
                    _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(b * step + line) as *const i8);
                }
                if b % l1_every == 0 {
                    for w in rows {
                        _mm_prefetch::<_MM_HINT_T0>(
                            w.as_ptr().wrapping_add(b * bytes + PREFETCH_BYTES) as *const i8,
                        );
                    }
                }
                // SAFETY: b < blocks, the activation row's blocks (asserted).
                let y =
                    unsafe { _mm256_loadu_si256(x.qs.as_ptr().add(b * BLOCK) as *const __m256i) };
                let mut p = [_mm256_setzero_si256(); ACROSS];
                for i in 0..ACROSS {
                    // SAFETY: (b + 1)·bytes ≤ every row's length (asserted).
                    let block = unsafe { rows[i].get_unchecked(b * bytes..(b + 1) * bytes) };
                    let q = unpack_stored(kind, block);
                    p[i] = if kind == BlockKind::Q8_0 {
                        $pair_sums(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q))
                    } else {
                        $pair_sums(q, y)
                    };
                }
                let mut sumi = lane_sums(&p);
                if offset != 0 {
                    // SAFETY: b < blocks (asserted).
                    let sum = unsafe { *x.sum.get_unchecked(b) };
                    sumi = _mm256_sub_epi32(sumi, _mm256_set1_epi32(offset * sum));
                }
                // SAFETY (all three): b < blocks; every row holds `blocks` blocks (asserted),
                // and d (at 0) and m (at min_at) lie in a block.
                let (dx, s) = unsafe { (*x.d.get_unchecked(b), x.s.get(b).copied()) };
                let d = unsafe { f16_of_rows(rows, b * bytes) };
                let mut t = _mm256_mul_ps(
                    _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), d),
                    _mm256_set1_ps(dx),
                );
                if let (Some(at), Some(s)) = (min_at, s) {
                    let m = unsafe { f16_of_rows(rows, b * bytes + at) };
                    t = _mm256_add_ps(t, _mm256_mul_ps(m, _mm256_set1_ps(s)));
                }
                acc = _mm256_add_ps(acc, t);
            }
            let mut sums = [0f32; ACROSS];
            // SAFETY: eight values into an array of eight.
            unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), acc) };
            sums
        }
    };
}

products!("avx2,fma,f16c", pair_sums, dot_rows, by_rows, dots, across);
products!(
    "avx2,fma,f16c,avx512vnni,avx512vl",
    pair_sums_vnni,
    dot_rows_vnni,
    by_rows_vnni,
    dots_vnni,
    across_vnni
);

/// Asks for the lines `PREFETCH_BYTES` after the block `at` (into L1) and
/// `PREFETCH_BYTES + L2_PREFETCH_BYTES` after it (into L2), one per 64 of its bytes: with
/// blocks read one after another, that reaches every line of the stream (a 32-value block, at
/// most 34 bytes, asks for one line of each). Here and in the K-quant and i-quant kernels.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::model) fn prefetch_ahead(at: &[u8]) {
    let p = at.as_ptr().wrapping_add(PREFETCH_BYTES);
    for line in (0..at.len()).step_by(64) {
        // (A prefetch never faults, whatever the address; the pointer is not read.)
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line) as *const i8);
        _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(line + L2_PREFETCH_BYTES) as *const i8);
    }
}

/// Lane i: the sum of the eight i32 lanes of `p[i]` (exact: integers).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lane_sums(p: &[__m256i; ACROSS]) -> __m256i {
    // Within each 128-bit half, pairs of lanes, then pairs of pairs: [0, 1, 2, 3] in the low
    // half of `low` (from each vector's low half) and in its high half (from their high halves).
    let low = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    let high = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(low, high),
        _mm256_permute2x128_si256::<0x31>(low, high),
    )
}

/// The f32 `f(row)` of each activation row in its lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lanes_of(rows: &[Q8Row; ACROSS], f: impl Fn(&Q8Row) -> f32) -> __m256 {
    _mm256_setr_ps(
        f(&rows[0]),
        f(&rows[1]),
        f(&rows[2]),
        f(&rows[3]),
        f(&rows[4]),
        f(&rows[5]),
        f(&rows[6]),
        f(&rows[7]),
    )
}

/// The f16 at byte `at` of each of the eight rows, as f32 in its lane.
///
/// # Safety
/// Every row holds at least `at + 2` bytes (checked by the caller once per row, not per
/// block: a check here would be eight compare-and-branch pairs per block).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_of_rows(rows: &[&[u8]; ACROSS], at: usize) -> __m256 {
    // SAFETY: two bytes from `at` lie in every row (the caller's guarantee).
    let bits =
        |i: usize| unsafe { (rows[i].as_ptr().add(at) as *const u16).read_unaligned() as i16 };
    _mm256_cvtph_ps(_mm_setr_epi16(
        bits(0),
        bits(1),
        bits(2),
        bits(3),
        bits(4),
        bits(5),
        bits(6),
        bits(7),
    ))
}

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
/// 21–25 GB/s of the 35 a plain read reaches on a Zen 4; with both, Q4_K 26–29 GB/s, Q6_K
/// 24–35, Q8_0 27–31 (2 threads, `examples/bench_decode_products.rs`; Q4_0 and the i-quants,
/// through `prefetch_ahead`, gain nothing). 4,096 and 16,384 bytes measure no better than
/// 8,192; L2 alone (no L1 request) measures worse, 15 GB/s.
pub(crate) const L2_PREFETCH_BYTES: usize = 8192;
