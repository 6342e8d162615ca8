//! Decoding products of Q2_K … Q6_K matrices (what Q2_K, Q3_K_M, Q4_K_M and Q5_K_M files hold)
//! with several activation rows per pass over the weights.
//!
//! candle's quantized product gives a row the same result alone or among others only one row
//! at a time (its kernels for several rows use repacked tiles that sum differently), so a
//! batch of decoding rows read an 8B judge's 4.9 GB of K-quant weights once per row per step.
//! These kernels are candle's AVX2 `vec_dot_q{2,3,4,5,6}k_q8k`, operation for
//! operation, with the weight block's unpacking (nibbles, high bits, scales) hoisted out of
//! the loop over up to [`ROWS_PER_LOAD`] activation rows: a row's product is candle's single-row
//! product to the bit. Activations are rounded to 8 bits as candle's `BlockQ8K::from_float`
//! does. x86-64 with AVX2, FMA and F16C only; elsewhere the caller keeps candle's kernels.

use crate::model::quant::cpu::act_rounding::Rounding;
pub use crate::model::quant::formats::activations::Q8KRows;
pub use crate::model::quant::formats::kquants::{KQuantKind, QK_K};

/// Whether this CPU runs the K-quant products here (AVX2, FMA and F16C).
pub fn available() -> bool {
    crate::model::backend::cpu::features().avx2_fma_f16c
}

/// Activation rows that share one unpacking of a weight super-block.
pub const ROWS_PER_LOAD: usize = 4;

impl Q8KRows {
    /// `xs`: rows of `cols` values, `cols` a multiple of 256.
    pub fn quantize(xs: &[f32], cols: usize) -> Self {
        Self::quantize_with(xs, cols, Rounding::for_machine())
    }

    fn quantize_with(xs: &[f32], cols: usize, rounding: Rounding) -> Self {
        assert!(cols.is_multiple_of(QK_K) && xs.len().is_multiple_of(cols));
        let mut rows = Q8KRows {
            cols,
            qs: vec![0; xs.len()],
            d: Vec::with_capacity(xs.len() / QK_K),
            bsums: vec![0; xs.len() / 16],
        };
        let blocks = xs
            .chunks_exact(QK_K)
            .zip(rows.qs.chunks_exact_mut(QK_K))
            .zip(rows.bsums.chunks_exact_mut(QK_K / 16));
        for ((x, q), bsums) in blocks {
            // The value of largest magnitude, the first of them (llama.cpp's scan): the
            // magnitude, then where it first occurs.
            let amax = (rounding.max_abs)(x);
            let Some(&max) = x.iter().find(|v| v.abs() == amax).filter(|_| amax > 0.0) else {
                rows.d.push(0.0);
                continue;
            };
            let iscale = -127f32 / max;
            let groups = x.chunks_exact(16).zip(q.chunks_exact_mut(16));
            for (s, (x16, q16)) in bsums.iter_mut().zip(groups) {
                *s = (rounding.round)(x16, iscale, q16) as i16;
            }
            rows.d.push(1.0 / iscale);
        }
        rows
    }

    pub fn len(&self) -> usize {
        self.qs.len() / self.cols.max(1)
    }

    /// Values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The rounded values, row after row.
    pub fn values(&self) -> &[i8] {
        &self.qs
    }

    /// Each block's d, row after row.
    pub fn scales(&self) -> &[f32] {
        &self.d
    }

    pub fn is_empty(&self) -> bool {
        self.qs.is_empty()
    }
}

/// Appends w · x_r for every row of `xs` (in order) to `out`; `w` is one weight row's blocks.
pub type KQuantDotRows = fn(KQuantKind, &[u8], &Q8KRows, &mut Vec<f32>);

/// The kernel for this machine; None where it has no body (AVX2, FMA and F16C).
pub fn dot_rows_kernel() -> Option<KQuantDotRows> {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: the features the kernel is compiled for were just detected.
        return Some(|kind, w, xs, out| unsafe { avx2::dot_rows(kind, w, xs, out) });
    }
    None
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{KQuantKind, Q8KRows, QK_K, ROWS_PER_LOAD};
    use crate::model::quant::cpu::block_dots::avx2::{prefetch_ahead, read_f16};
    use std::arch::x86_64::*;

    /// Byte shuffles broadcasting the scales (candle's and llama.cpp's `get_scale_shuffle*`).
    const SHUFFLE_Q6: [u8; 128] = {
        let mut t = [0u8; 128];
        let mut i = 0;
        while i < 128 {
            t[i] = (i / 8) as u8;
            i += 1;
        }
        t
    };
    const SHUFFLE_Q4: [u8; 256] = {
        let mut t = [0u8; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = (2 * (i / 32) + i % 2) as u8;
            i += 1;
        }
        t
    };

    /// Per 32 values k of a Q2_K / Q3_K block, the scale of its first 16 in the low lane and
    /// of its last 16 in the high one (candle's `get_scale_shuffle_q3k`), from 8 scales as
    /// i16 in each lane.
    const SHUFFLE_Q3: [u8; 128] = {
        let mut t = [0u8; 128];
        let mut i = 0;
        while i < 128 {
            t[i] = (2 * (i / 16) + i % 2) as u8;
            i += 1;
        }
        t
    };

    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum_float_8(x: __m256) -> f32 {
        let res = _mm256_extractf128_ps(x, 1);
        let res = _mm_add_ps(res, _mm256_castps256_ps128(x));
        let res = _mm_add_ps(res, _mm_movehl_ps(res, res));
        let res = _mm_add_ss(res, _mm_movehdup_ps(res));
        _mm_cvtss_f32(res)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn load(bytes: &[u8]) -> __m256i {
        assert!(bytes.len() >= 32);
        // SAFETY: 32 readable bytes (asserted).
        unsafe { _mm256_loadu_si256(bytes.as_ptr() as *const __m256i) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn load_i8(q: &[i8]) -> __m256i {
        assert!(q.len() >= 32);
        // SAFETY: 32 readable bytes (asserted).
        unsafe { _mm256_loadu_si256(q.as_ptr() as *const __m256i) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn dot_rows(kind: KQuantKind, w: &[u8], xs: &Q8KRows, out: &mut Vec<f32>) {
        let n = xs.len();
        let mut r = 0;
        while r < n {
            let take = (n - r).min(ROWS_PER_LOAD);
            let sums = match (kind, take) {
                (KQuantKind::Q2K, 4) => q2k::<4>(w, xs, r),
                (KQuantKind::Q2K, 3) => q2k::<3>(w, xs, r),
                (KQuantKind::Q2K, 2) => q2k::<2>(w, xs, r),
                (KQuantKind::Q2K, _) => q2k::<1>(w, xs, r),
                (KQuantKind::Q3K, 4) => q3k::<4>(w, xs, r),
                (KQuantKind::Q3K, 3) => q3k::<3>(w, xs, r),
                (KQuantKind::Q3K, 2) => q3k::<2>(w, xs, r),
                (KQuantKind::Q3K, _) => q3k::<1>(w, xs, r),
                (KQuantKind::Q4K, 4) => q4k::<4>(w, xs, r),
                (KQuantKind::Q4K, 3) => q4k::<3>(w, xs, r),
                (KQuantKind::Q4K, 2) => q4k::<2>(w, xs, r),
                (KQuantKind::Q4K, _) => q4k::<1>(w, xs, r),
                (KQuantKind::Q5K, 4) => q5k::<4>(w, xs, r),
                (KQuantKind::Q5K, 3) => q5k::<3>(w, xs, r),
                (KQuantKind::Q5K, 2) => q5k::<2>(w, xs, r),
                (KQuantKind::Q5K, _) => q5k::<1>(w, xs, r),
                (KQuantKind::Q6K, 4) => q6k::<4>(w, xs, r),
                (KQuantKind::Q6K, 3) => q6k::<3>(w, xs, r),
                (KQuantKind::Q6K, 2) => q6k::<2>(w, xs, r),
                (KQuantKind::Q6K, _) => q6k::<1>(w, xs, r),
            };
            out.extend_from_slice(&sums[..take]);
            r += take;
        }
    }

    /// A Q4_K / Q5_K block's 6-bit mins (8 × i16) and scales (16 × i16: the 8 scales twice),
    /// from its 12 bytes at offset 4: candle's `utmp` words, formed in the four lanes of one
    /// register (as scalars they would be some twenty instructions and four inserts a block, most
    /// of a batch-1 step's work on a block besides its products).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn mins_and_scales(block: &[u8]) -> (__m128i, __m256i) {
        assert!(block.len() >= 16);
        // SAFETY: 16 readable bytes (asserted): d, dmin, then the words w0, w1, w2.
        let v = unsafe { _mm_loadu_si128(block.as_ptr() as *const __m128i) };
        // utmp = [w0 & 3f, (w2 & 0f) | ((w0 >> 6) & 03) << 4, w1 & 3f,
        //         ((w2 >> 4) & 0f) | ((w1 >> 6) & 03) << 4], the masks bytewise.
        let low = _mm_and_si128(
            _mm_srlv_epi32(
                _mm_shuffle_epi32::<0b11_10_11_01>(v),
                _mm_setr_epi32(0, 0, 0, 4),
            ),
            _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f),
        );
        let high = _mm_and_si128(
            _mm_srli_epi32::<6>(_mm_shuffle_epi32::<0b10_10_01_01>(v)),
            _mm_setr_epi32(0, 0x03030303, 0, 0x03030303),
        );
        let utmp = _mm_or_si128(low, _mm_slli_epi32::<4>(high));
        let mins_and_scales = _mm256_cvtepu8_epi16(utmp);
        let sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        (
            _mm256_extracti128_si256(mins_and_scales, 1),
            _mm256_set_m128i(sc128, sc128),
        )
    }

    /// Σ mins·bsums of a Q4_K / Q5_K block for one activation block (4 × i32).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn min_products(mins: __m128i, bsums: &[i16]) -> __m128i {
        assert!(bsums.len() >= 16);
        // SAFETY: 16 i16 values are 32 readable bytes (asserted).
        let q8sums = unsafe { _mm256_loadu_si256(bsums.as_ptr() as *const __m256i) };
        let q8s = _mm_hadd_epi16(
            _mm256_extracti128_si256(q8sums, 0),
            _mm256_extracti128_si256(q8sums, 1),
        );
        _mm_madd_epi16(mins, q8s)
    }

    /// The eight scale vectors of a Q4_K / Q5_K block, one per 32 values.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn scale_vectors(scales: __m256i) -> [__m256i; 8] {
        std::array::from_fn(|k| _mm256_shuffle_epi8(scales, load(&SHUFFLE_Q4[32 * k..])))
    }

    /// The 5-bit values of a Q5_K block (fifth bits at 16..48, nibbles at 48..176), 32 per
    /// vector in `nibbles`' order: value k·32 + i is the nibble plus 16 where bit k of byte i
    /// of the fifth bits is set.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn q5k_values(block: &[u8]) -> [__m256i; 8] {
        let hbits = load(&block[16..48]);
        let low = nibbles(&block[48..]);
        std::array::from_fn(|k| {
            let mask = _mm256_set1_epi8((1u8 << k) as i8);
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(hbits, mask), mask);
            _mm256_add_epi8(low[k], _mm256_and_si256(set, _mm256_set1_epi8(16)))
        })
    }

    /// The 4-bit values of a Q4_K / Q5_K block, 32 per vector: the low nibbles of bytes
    /// 32j..32j + 32, then their high nibbles, for j = 0..4.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn nibbles(qs: &[u8]) -> [__m256i; 8] {
        let m4 = _mm256_set1_epi8(0xF);
        std::array::from_fn(|k| {
            let bits = load(&qs[32 * (k / 2)..]);
            let bits = if k % 2 == 0 {
                bits
            } else {
                _mm256_srli_epi16(bits, 4)
            };
            _mm256_and_si256(bits, m4)
        })
    }

    /// Σ over 8 × 32 values of scale · (q · y), as candle sums them (i32 lanes).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn scaled_sum(q: &[__m256i; 8], sc: &[__m256i; 8], y: &[i8]) -> __m256i {
        let mut sumi = _mm256_setzero_si256();
        for k in 0..8 {
            let p16 = _mm256_maddubs_epi16(q[k], load_i8(&y[32 * k..]));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc[k], p16));
        }
        sumi
    }

    /// The scale vectors of a Q2_K / Q3_K block's 16 scales (one per 16 values, as i8), one per
    /// 32 values.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn sixteen_scale_vectors(scales: __m128i) -> [__m256i; 8] {
        let all = _mm256_cvtepi8_epi16(scales);
        let (low, high) = (
            _mm256_extracti128_si256(all, 0),
            _mm256_extracti128_si256(all, 1),
        );
        let halves = [_mm256_set_m128i(low, low), _mm256_set_m128i(high, high)];
        std::array::from_fn(|k| {
            _mm256_shuffle_epi8(halves[k / 4], load(&SHUFFLE_Q3[32 * (k % 4)..]))
        })
    }

    /// The 2-bit fields of 64 bytes, 32 per vector: for j = 0, 1, bits 2i..2i + 2 of bytes
    /// 32j..32j + 32, i = 0..4 (values 128j + 32i..).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn crumbs(qs: &[u8]) -> [__m256i; 8] {
        let m3 = _mm256_set1_epi8(3);
        std::array::from_fn(|k| {
            let bits = load(&qs[32 * (k / 4)..]);
            let bits = match k % 4 {
                0 => bits,
                1 => _mm256_srli_epi16(bits, 2),
                2 => _mm256_srli_epi16(bits, 4),
                _ => _mm256_srli_epi16(bits, 6),
            };
            _mm256_and_si256(bits, m3)
        })
    }

    /// Rows `first..first + R` of `xs` times one Q2_K weight row: candle's `vec_dot_q2k_q8k`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn q2k<const R: usize>(w: &[u8], xs: &Q8KRows, first: usize) -> [f32; ROWS_PER_LOAD] {
        let blocks = xs.cols / QK_K;
        let m4 = _mm_set1_epi8(0xF);
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, block) in w.chunks_exact(KQuantKind::Q2K.block_bytes()).enumerate() {
            prefetch_ahead(block);
            let (xd, xdmin) = (read_f16(block, 80), read_f16(block, 82));
            assert!(block.len() >= 16);
            // SAFETY: the 16 scale bytes lie in the block (asserted).
            let packed = unsafe { _mm_loadu_si128(block.as_ptr() as *const __m128i) };
            let mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
            let sc = sixteen_scale_vectors(_mm_and_si128(packed, m4));
            let q = crumbs(&block[16..80]);
            for (r, acc) in acc.iter_mut().enumerate() {
                let at = (first + r) * blocks + b;
                let yd = xs.d[at];
                let (d, dmin) = (yd * xd, -yd * xdmin);
                let bsums = &xs.bsums[at * 16..at * 16 + 16];
                // SAFETY: 16 i16 values are 32 readable bytes.
                let bsums = unsafe { _mm256_loadu_si256(bsums.as_ptr() as *const __m256i) };
                let prod = _mm256_madd_epi16(mins, bsums);
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), *acc);
                let sumi = scaled_sum(&q, &sc, &xs.qs[at * QK_K..(at + 1) * QK_K]);
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), *acc);
            }
        }
        let mut out = [0f32; ROWS_PER_LOAD];
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = hsum_float_8(acc);
        }
        out
    }

    /// Rows `first..first + R` of `xs` times one Q3_K weight row: candle's `vec_dot_q3k_q8k`
    /// (each value's low bits times y, minus 4·y where its high bit is clear).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn q3k<const R: usize>(w: &[u8], xs: &Q8KRows, first: usize) -> [f32; ROWS_PER_LOAD] {
        let blocks = xs.cols / QK_K;
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, block) in w.chunks_exact(KQuantKind::Q3K.block_bytes()).enumerate() {
            prefetch_ahead(block);
            let xd = read_f16(block, 108);
            let scales = crate::model::quant::formats::kquants::q3k_scales(&block[96..108]);
            // SAFETY: 16 bytes of an array of 16.
            let scales = unsafe { _mm_loadu_si128(scales.as_ptr() as *const __m128i) };
            let sc = sixteen_scale_vectors(scales);
            let low = crumbs(&block[32..96]);
            let high = clear_high_bits(&block[..32]);
            for (r, acc) in acc.iter_mut().enumerate() {
                let at = (first + r) * blocks + b;
                let d = xs.d[at] * xd;
                let y = &xs.qs[at * QK_K..(at + 1) * QK_K];
                let mut sumi = _mm256_setzero_si256();
                for k in 0..8 {
                    let yk = load_i8(&y[32 * k..]);
                    let p16 = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(low[k], yk),
                        _mm256_maddubs_epi16(high[k], yk),
                    );
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc[k], p16));
                }
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), *acc);
            }
        }
        let mut out = [0f32; ROWS_PER_LOAD];
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = hsum_float_8(acc);
        }
        out
    }

    /// 4 where bit k of a Q3_K block's high-bit byte is clear, else 0, for the 32 values k
    /// (32 per vector, one byte of `hmask` per value).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::model) fn clear_high_bits(hmask: &[u8]) -> [__m256i; 8] {
        let bits = load(hmask);
        let four = _mm256_set1_epi8(4);
        std::array::from_fn(|k| {
            let mask = _mm256_set1_epi8((1u8 << k) as i8);
            let clear = _mm256_cmpeq_epi8(_mm256_and_si256(bits, mask), _mm256_setzero_si256());
            _mm256_and_si256(clear, four)
        })
    }

    /// Rows `first..first + R` of `xs` times one Q4_K weight row: candle's `vec_dot_q4k_q8k`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn q4k<const R: usize>(w: &[u8], xs: &Q8KRows, first: usize) -> [f32; ROWS_PER_LOAD] {
        let blocks = xs.cols / QK_K;
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_m = [_mm_setzero_ps(); R];
        for (b, block) in w.chunks_exact(KQuantKind::Q4K.block_bytes()).enumerate() {
            prefetch_ahead(block);
            let (xd, xdmin) = (read_f16(block, 0), read_f16(block, 2));
            let (mins, scales) = mins_and_scales(block);
            let sc = scale_vectors(scales);
            let qs = &block[16..];
            let q = nibbles(qs);
            for r in 0..R {
                let at = (first + r) * blocks + b;
                let yd = xs.d[at];
                let (d, dmin) = (yd * xd, -yd * xdmin);
                let prod = min_products(mins, &xs.bsums[at * 16..at * 16 + 16]);
                acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[r]);
                let sumi = scaled_sum(&q, &sc, &xs.qs[at * QK_K..(at + 1) * QK_K]);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
            }
        }
        let mut out = [0f32; ROWS_PER_LOAD];
        for r in 0..R {
            let m = _mm_add_ps(acc_m[r], _mm_movehl_ps(acc_m[r], acc_m[r]));
            let m = _mm_add_ss(m, _mm_movehdup_ps(m));
            out[r] = hsum_float_8(acc[r]) + _mm_cvtss_f32(m);
        }
        out
    }

    /// Rows `first..first + R` of `xs` times one Q5_K weight row: candle's `vec_dot_q5k_q8k`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn q5k<const R: usize>(w: &[u8], xs: &Q8KRows, first: usize) -> [f32; ROWS_PER_LOAD] {
        let blocks = xs.cols / QK_K;
        let mut acc = [_mm256_setzero_ps(); R];
        let mut summs = [0f32; R];
        for (b, block) in w.chunks_exact(KQuantKind::Q5K.block_bytes()).enumerate() {
            prefetch_ahead(block);
            let (xd, xdmin) = (read_f16(block, 0), read_f16(block, 2));
            let (mins, scales) = mins_and_scales(block);
            let sc = scale_vectors(scales);
            let q = q5k_values(block);
            for r in 0..R {
                let at = (first + r) * blocks + b;
                let yd = xs.d[at];
                let (d, dmin) = (yd * xd, -yd * xdmin);
                let prod = min_products(mins, &xs.bsums[at * 16..at * 16 + 16]);
                let zero = _mm_setzero_si128();
                let hsum = _mm_hadd_epi32(_mm_hadd_epi32(prod, zero), zero);
                summs[r] += dmin * _mm_extract_epi32(hsum, 0) as f32;
                let sumi = scaled_sum(&q, &sc, &xs.qs[at * QK_K..(at + 1) * QK_K]);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
            }
        }
        let mut out = [0f32; ROWS_PER_LOAD];
        for r in 0..R {
            out[r] = hsum_float_8(acc[r]) + summs[r];
        }
        out
    }

    /// Rows `first..first + R` of `xs` times one Q6_K weight row: candle's `vec_dot_q6k_q8k`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn q6k<const R: usize>(w: &[u8], xs: &Q8KRows, first: usize) -> [f32; ROWS_PER_LOAD] {
        let blocks = xs.cols / QK_K;
        let m4 = _mm256_set1_epi8(0xF);
        let m2 = _mm256_set1_epi8(3);
        let m32s = _mm256_set1_epi8(32);
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, block) in w.chunks_exact(KQuantKind::Q6K.block_bytes()).enumerate() {
            prefetch_ahead(block);
            let (ql, qh) = (&block[..128], &block[128..192]);
            assert!(block.len() >= 210);
            // SAFETY: the 16 scale bytes lie in the block (asserted).
            let scales = unsafe { _mm_loadu_si128(block.as_ptr().add(192) as *const __m128i) };
            let xd = read_f16(block, 208);
            let mut q = [_mm256_setzero_si256(); 8];
            let mut sc = [_mm256_setzero_si256(); 8];
            for j in 0..QK_K / 128 {
                for i in 0..4 {
                    let at = 16 * (4 * j + i);
                    // SAFETY: at + 16 ≤ 128 bytes of the shuffle table.
                    let shuffle =
                        unsafe { _mm_loadu_si128(SHUFFLE_Q6.as_ptr().add(at) as *const __m128i) };
                    sc[4 * j + i] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuffle));
                }
                let bits1 = load(&ql[64 * j..]);
                let bits2 = load(&ql[64 * j + 32..]);
                let bits_h = load(&qh[32 * j..]);
                let high = |shift: i32| -> __m256i {
                    let h = match shift {
                        0 => bits_h,
                        2 => _mm256_srli_epi16(bits_h, 2),
                        4 => _mm256_srli_epi16(bits_h, 4),
                        _ => _mm256_srli_epi16(bits_h, 6),
                    };
                    _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)
                };
                q[4 * j] = _mm256_or_si256(_mm256_and_si256(bits1, m4), high(0));
                q[4 * j + 1] = _mm256_or_si256(_mm256_and_si256(bits2, m4), high(2));
                q[4 * j + 2] =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4), high(4));
                q[4 * j + 3] =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4), high(6));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let at = (first + r) * blocks + b;
                let d = xs.d[at] * xd;
                let q8 = &xs.qs[at * QK_K..(at + 1) * QK_K];
                let mut sumi = _mm256_setzero_si256();
                for j in 0..QK_K / 128 {
                    let mut p = [_mm256_setzero_si256(); 4];
                    for (i, p) in p.iter_mut().enumerate() {
                        let k = 4 * j + i;
                        let y = load_i8(&q8[32 * k..]);
                        let p16 = _mm256_sub_epi16(
                            _mm256_maddubs_epi16(q[k], y),
                            _mm256_maddubs_epi16(m32s, y),
                        );
                        *p = _mm256_madd_epi16(sc[k], p16);
                    }
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[0], p[1]));
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[2], p[3]));
                }
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), *acc);
            }
        }
        let mut out = [0f32; ROWS_PER_LOAD];
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = hsum_float_8(acc);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::quant::candle_products::candle_product_by_row;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};
    use std::sync::Arc;

    /// The activations' bytes are candle's `BlockQ8K` (its `from_float`), including where two
    /// values of opposite sign share the largest magnitude (the first one sets the sign of
    /// the scale), on the kernel this machine runs and on the portable loop.
    #[test]
    fn activations_round_as_candles() {
        let (cols, n) = (512, 4);
        let xs = crate::model::quant::cpu::block_dots::tests::awkward_rows(cols, n);
        let t = Tensor::from_vec(xs.clone(), (n, cols), &Device::Cpu).unwrap();
        let want = QTensor::quantize(&t, GgmlDType::Q8K)
            .unwrap()
            .data()
            .unwrap()
            .to_vec();
        let bytes = 4 + QK_K + QK_K / 16 * 2;
        for (name, rows) in [
            ("machine", Q8KRows::quantize(&xs, cols)),
            (
                "portable",
                Q8KRows::quantize_with(&xs, cols, Rounding::PORTABLE),
            ),
        ] {
            for (b, block) in want.chunks_exact(bytes).enumerate() {
                let d = f32::from_le_bytes(block[..4].try_into().unwrap());
                let qs: Vec<i8> = block[4..4 + QK_K].iter().map(|&q| q as i8).collect();
                let bsums: Vec<i16> = block[4 + QK_K..]
                    .chunks_exact(2)
                    .map(|c| i16::from_le_bytes([c[0], c[1]]))
                    .collect();
                assert_eq!(rows.d[b].to_bits(), d.to_bits(), "{name} d {b}");
                assert_eq!(&rows.qs[b * QK_K..(b + 1) * QK_K], &qs[..], "{name} {b}");
                assert_eq!(&rows.bsums[b * 16..(b + 1) * 16], &bsums[..], "{name} {b}");
            }
        }
    }

    /// Each row's products are those of candle's quantized product on that row alone, to the
    /// bit, for 1 to 6 rows at once.
    #[test]
    fn products_are_candles_row_by_row() {
        let Some(dot) = dot_rows_kernel() else {
            return;
        };
        let (out, cols) = (7, 512);
        let dev = Device::Cpu;
        let w = (Tensor::randn(0f32, 1.0, (out, cols), &dev).unwrap() + 0.2).unwrap();
        let x = Tensor::randn(0f32, 1.0, (6, cols), &dev).unwrap();
        let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        for dtype in [
            GgmlDType::Q2K,
            GgmlDType::Q3K,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
        ] {
            let q = Arc::new(QTensor::quantize(&w, dtype).unwrap());
            let kind = KQuantKind::of(dtype).unwrap();
            let data = q.data().unwrap();
            let row_bytes = kind.row_bytes(cols);
            assert_eq!(data.len(), out * row_bytes);
            let want = candle_product_by_row(&q, &x);
            for n in 1..=6 {
                let rows = Q8KRows::quantize(&xs[..n * cols], cols);
                for v in 0..out {
                    let mut got = Vec::new();
                    dot(
                        kind,
                        &data[v * row_bytes..(v + 1) * row_bytes],
                        &rows,
                        &mut got,
                    );
                    for (r, &g) in got.iter().enumerate() {
                        assert_eq!(g, want[r][v], "{dtype:?} n={n} row {r} out {v}");
                    }
                }
            }
        }
    }
}
