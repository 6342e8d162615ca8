//! Q2_K … Q6_K blocks expanded to f32 sixteen values per instruction (AVX-512), each value
//! candle's `to_float` to the bit: the same scale products (`d · scale`, `dmin · min`) in f32
//! and the same multiply, then subtract (Q2_K, Q4_K, Q5_K) or multiply (Q3_K, Q6_K), with no
//! fused operation.
//!
//! candle's loops run a value at a time: expanding the weights a json step's forced runs
//! multiply (every matrix, once per step) spent 3.6% of such a step in them on Qwen2.5-0.5B's
//! Q4_K_M file, where the Q5_0 matrices' eight-wide body (`block_dots::avx2::expand`) took 3.3%
//! for three times the values.

use crate::model::quant::formats::kquants::{KQuantKind, QK_K};

/// Expand `bytes` (whole blocks of `kind`) into `out` (256 values per block) when this CPU has
/// a body for the kind; false (nothing written) otherwise.
pub fn expand(kind: KQuantKind, bytes: &[u8], out: &mut [f32]) -> bool {
    let blocks = bytes.len() / kind.block_bytes();
    if bytes.len() != blocks * kind.block_bytes() || out.len() != blocks * QK_K {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::model::backend::cpu::features().avx512 {
        match kind {
            // SAFETY (all): avx512f was detected; whole blocks into as many values.
            KQuantKind::Q2K => unsafe { avx512::q2k(bytes, out) },
            KQuantKind::Q3K => unsafe { avx512::q3k(bytes, out) },
            KQuantKind::Q4K => unsafe { avx512::q4k(bytes, out) },
            KQuantKind::Q5K => unsafe { avx512::q5k(bytes, out) },
            KQuantKind::Q6K => unsafe { avx512::q6k(bytes, out) },
        }
        return true;
    }
    false
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use crate::model::quant::formats::kquants::{QK_K, f16_at, q3k_scales, scale_min};
    use std::arch::x86_64::*;

    /// 16 bytes from `bytes[at..]` as 16 lanes of i32.
    #[target_feature(enable = "avx512f")]
    fn bytes16(bytes: &[u8], at: usize) -> __m512i {
        let b = &bytes[at..at + 16];
        // SAFETY: 16 bytes (sliced above).
        _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(b.as_ptr() as *const __m128i) })
    }

    /// out[at..at + 16] = lanes.
    #[target_feature(enable = "avx512f")]
    fn store(out: &mut [f32], at: usize, lanes: __m512) {
        let o = &mut out[at..at + 16];
        // SAFETY: 16 values (sliced above).
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), lanes) };
    }

    /// The 2-bit fields at `shift` of 16 bytes from `bytes[at..]`, as 16 lanes of i32.
    #[target_feature(enable = "avx512f")]
    fn crumbs16(bytes: &[u8], at: usize, shift: u32) -> __m512i {
        let q = _mm512_srlv_epi32(bytes16(bytes, at), _mm512_set1_epi32(shift as i32));
        _mm512_and_si512(q, _mm512_set1_epi32(3))
    }

    /// Q2_K. Layout: 16 bytes of scales (low nibble) and mins (high), 64 bytes of 2-bit values,
    /// d, dmin (f16); per 128 values n and shift 2i, 32 values from bits 2i of bytes 32n..,
    /// each 16 of them (d · scale) · q − dmin · min with their own scale byte (in order).
    #[target_feature(enable = "avx512f")]
    pub fn q2k(bytes: &[u8], out: &mut [f32]) {
        for (b, ys) in bytes.chunks_exact(84).zip(out.chunks_exact_mut(QK_K)) {
            let (d, min, qs) = (f16_at(b, 80), f16_at(b, 82), &b[16..80]);
            for n in 0..2 {
                for i in 0..4 {
                    for h in 0..2 {
                        let sc = b[8 * n + 2 * i + h];
                        let dl = _mm512_set1_ps(d * (sc & 0xF) as f32);
                        let ml = _mm512_set1_ps(min * (sc >> 4) as f32);
                        let q = _mm512_cvtepi32_ps(crumbs16(qs, 32 * n + 16 * h, 2 * i as u32));
                        store(
                            ys,
                            128 * n + 32 * i + 16 * h,
                            _mm512_sub_ps(_mm512_mul_ps(dl, q), ml),
                        );
                    }
                }
            }
        }
    }

    /// Q3_K. Layout: 32 bytes of high bits, 64 of 2-bit values, 12 of packed scales, d (f16);
    /// per 128 values n and shift 2i, 32 values from bits 2i of bytes 32n.. minus 4 where bit
    /// 4n + i of their high-bit byte is clear, each 16 times d · (scale − 32).
    #[target_feature(enable = "avx512f")]
    pub fn q3k(bytes: &[u8], out: &mut [f32]) {
        let (one, four) = (_mm512_set1_epi32(1), _mm512_set1_epi32(4));
        for (b, ys) in bytes.chunks_exact(110).zip(out.chunks_exact_mut(QK_K)) {
            let (hmask, qs, d) = (&b[..32], &b[32..96], f16_at(b, 108));
            let scales = q3k_scales(&b[96..108]);
            for n in 0..2 {
                for i in 0..4 {
                    let bit = _mm512_set1_epi32((4 * n + i) as i32);
                    for h in 0..2 {
                        let dl = _mm512_set1_ps(d * scales[8 * n + 2 * i + h] as f32);
                        let high =
                            _mm512_and_si512(_mm512_srlv_epi32(bytes16(hmask, 16 * h), bit), one);
                        let q = crumbs16(qs, 32 * n + 16 * h, 2 * i as u32);
                        // q − 4 + 4·high: the value with 4 taken off where the high bit is clear.
                        let q = _mm512_sub_epi32(
                            _mm512_add_epi32(q, _mm512_slli_epi32::<2>(high)),
                            four,
                        );
                        store(
                            ys,
                            128 * n + 32 * i + 16 * h,
                            _mm512_mul_ps(dl, _mm512_cvtepi32_ps(q)),
                        );
                    }
                }
            }
        }
    }

    /// Q4_K. Layout: d, dmin (f16), 12 bytes of scales and mins, 128 bytes of nibbles.
    #[target_feature(enable = "avx512f")]
    pub fn q4k(bytes: &[u8], out: &mut [f32]) {
        for (b, ys) in bytes.chunks_exact(144).zip(out.chunks_exact_mut(QK_K)) {
            nibble_block(b, None, &b[16..144], ys);
        }
    }

    /// Q5_K. Layout: as Q4_K's with 32 bytes of fifth bits before the nibbles.
    #[target_feature(enable = "avx512f")]
    pub fn q5k(bytes: &[u8], out: &mut [f32]) {
        for (b, ys) in bytes.chunks_exact(176).zip(out.chunks_exact_mut(QK_K)) {
            nibble_block(b, Some(&b[16..48]), &b[48..176], ys);
        }
    }

    /// One Q4_K or Q5_K block `b` (d, dmin, 12 bytes of scales and mins first): per 64 values
    /// j, the low nibbles of 32 bytes of `qs` — plus 16 where bit 2j of the matching byte of
    /// `fifth` is set (Q5_K) — times d·scale(2j) minus dmin·min(2j); then their high nibbles
    /// with bit and pair 2j + 1. (candle adds Q5_K's 16 in f32: both terms are small integers,
    /// so the integer sum converts to the same float.)
    #[target_feature(enable = "avx512f")]
    fn nibble_block(b: &[u8], fifth: Option<&[u8]>, qs: &[u8], ys: &mut [f32]) {
        let (low, one) = (_mm512_set1_epi32(0xF), _mm512_set1_epi32(1));
        let (d, min, scales) = (f16_at(b, 0), f16_at(b, 2), &b[4..16]);
        let fifth = fifth.map(|qh| [bytes16(qh, 0), bytes16(qh, 16)]);
        for j in 0..4 {
            for (s, high) in [(2 * j, false), (2 * j + 1, true)] {
                let (sc, m) = scale_min(s, scales);
                let (dv, mv) = (d * sc as f32, min * m as f32);
                let (dv, mv) = (_mm512_set1_ps(dv), _mm512_set1_ps(mv));
                for h in 0..2 {
                    let q = bytes16(qs, 32 * j + 16 * h);
                    let mut q = if high {
                        _mm512_srli_epi32::<4>(q)
                    } else {
                        _mm512_and_si512(q, low)
                    };
                    if let Some(bits) = &fifth {
                        let bit = _mm512_srlv_epi32(bits[h], _mm512_set1_epi32(s as i32));
                        q = _mm512_or_si512(q, _mm512_slli_epi32::<4>(_mm512_and_si512(bit, one)));
                    }
                    let y = _mm512_sub_ps(_mm512_mul_ps(dv, _mm512_cvtepi32_ps(q)), mv);
                    store(ys, 64 * j + 32 * usize::from(high) + 16 * h, y);
                }
            }
        }
    }

    /// Layout: 128 bytes of low 4 bits, 64 of high 2 bits, 16 signed scales, d (f16); per 128
    /// values n and 32 positions l, four values (l, l + 32, l + 64, l + 96), each
    /// (d · scale) · (its 6 bits − 32).
    #[target_feature(enable = "avx512f")]
    pub fn q6k(bytes: &[u8], out: &mut [f32]) {
        let (f, three, bias) = (
            _mm512_set1_epi32(0xF),
            _mm512_set1_epi32(3),
            _mm512_set1_epi32(32),
        );
        for (b, ys) in bytes.chunks_exact(210).zip(out.chunks_exact_mut(QK_K)) {
            let d = f16_at(b, 208);
            for n in 0..2 {
                let (ql, qh) = (&b[64 * n..64 * n + 64], &b[128 + 32 * n..128 + 32 * n + 32]);
                let sc = &b[192 + 8 * n..192 + 8 * n + 8];
                for half in 0..2 {
                    let l = 16 * half;
                    let (a, c, h) = (bytes16(ql, l), bytes16(ql, l + 32), bytes16(qh, l));
                    let high = |s: u32| {
                        let bits = _mm512_and_si512(
                            _mm512_srlv_epi32(h, _mm512_set1_epi32(s as i32)),
                            three,
                        );
                        _mm512_slli_epi32::<4>(bits)
                    };
                    let qs = [
                        _mm512_or_si512(_mm512_and_si512(a, f), high(0)),
                        _mm512_or_si512(_mm512_and_si512(c, f), high(2)),
                        _mm512_or_si512(_mm512_srli_epi32::<4>(a), high(4)),
                        _mm512_or_si512(_mm512_srli_epi32::<4>(c), high(6)),
                    ];
                    for (k, q) in qs.into_iter().enumerate() {
                        let scale = d * (sc[half + 2 * k] as i8) as f32;
                        let q = _mm512_cvtepi32_ps(_mm512_sub_epi32(q, bias));
                        store(
                            ys,
                            128 * n + 32 * k + l,
                            _mm512_mul_ps(_mm512_set1_ps(scale), q),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor, k_quants};
    use candle_core::{Device, Tensor};

    /// Blocks of random bytes (every scale, min and value pattern, negative Q6_K scales) with
    /// finite d and dmin, expanded as candle's `to_float` does, to the bit.
    #[test]
    fn random_blocks_expand_to_candles_values() {
        let mut rng = crate::rng::SplitMix64(11);
        for kind in [
            KQuantKind::Q2K,
            KQuantKind::Q3K,
            KQuantKind::Q4K,
            KQuantKind::Q5K,
            KQuantKind::Q6K,
        ] {
            let blocks = 37;
            let mut bytes: Vec<u8> = (0..blocks * kind.block_bytes())
                .map(|_| rng.next_u64() as u8)
                .collect();
            for b in bytes.chunks_exact_mut(kind.block_bytes()) {
                let ds = match kind {
                    KQuantKind::Q2K => vec![80, 82],
                    KQuantKind::Q3K => vec![108],
                    KQuantKind::Q6K => vec![208],
                    KQuantKind::Q4K | KQuantKind::Q5K => vec![0, 2],
                };
                for at in ds {
                    let d = half::f16::from_f32((rng.next_f64() as f32 - 0.5) * 0.02);
                    b[at..at + 2].copy_from_slice(&d.to_le_bytes());
                }
            }
            let mut got = vec![0f32; blocks * QK_K];
            if !expand(kind, &bytes, &mut got) {
                return; // no body on this CPU: candle's own loops run
            }
            let mut want = vec![0f32; blocks * QK_K];
            match kind {
                KQuantKind::Q2K => candle_blocks::<k_quants::BlockQ2K>(&bytes, &mut want),
                KQuantKind::Q3K => candle_blocks::<k_quants::BlockQ3K>(&bytes, &mut want),
                KQuantKind::Q4K => candle_blocks::<k_quants::BlockQ4K>(&bytes, &mut want),
                KQuantKind::Q5K => candle_blocks::<k_quants::BlockQ5K>(&bytes, &mut want),
                KQuantKind::Q6K => candle_blocks::<k_quants::BlockQ6K>(&bytes, &mut want),
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{kind:?}");
        }
    }

    /// candle's `to_float` over blocks held as bytes (copied into its block type).
    fn candle_blocks<T: k_quants::GgmlType + Clone>(bytes: &[u8], out: &mut [f32]) {
        let size = std::mem::size_of::<T>();
        let blocks: Vec<T> = bytes
            .chunks_exact(size)
            // SAFETY: `size` bytes of a block type made of plain numbers (any bits valid),
            // read unaligned.
            .map(|b| unsafe { std::ptr::read_unaligned(b.as_ptr() as *const T) })
            .collect();
        T::to_float(&blocks, out);
    }

    /// A quantized matrix's rows, as `QTensor::dequantize` gives them.
    #[test]
    fn quantized_rows_expand_to_dequantize() -> anyhow::Result<()> {
        let mut rng = crate::rng::SplitMix64(12);
        let (rows, cols) = (3, 512);
        let w = Tensor::from_vec(rng.symmetric_f32s(rows * cols), (rows, cols), &Device::Cpu)?;
        for (dtype, kind) in [
            (GgmlDType::Q2K, KQuantKind::Q2K),
            (GgmlDType::Q3K, KQuantKind::Q3K),
            (GgmlDType::Q4K, KQuantKind::Q4K),
            (GgmlDType::Q5K, KQuantKind::Q5K),
            (GgmlDType::Q6K, KQuantKind::Q6K),
        ] {
            let q = QTensor::quantize(&w, dtype)?;
            let want: Vec<f32> = q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1()?;
            let mut got = vec![0f32; rows * cols];
            if !expand(kind, &q.data()?, &mut got) {
                return Ok(());
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{dtype:?}");
        }
        Ok(())
    }
}
