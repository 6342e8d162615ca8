use crate::model::quant::cpu::block_dots;
use crate::model::quant::cpu::int8_products::layout::TILE;
use crate::model::quant::cpu::kquant_dots;
use crate::model::quant::formats::legacy::{BLOCK, BlockKind};
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
