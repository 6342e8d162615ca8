//! Rows of Q4_1 / Q5_0 / Q5_1 / Q8_0 matrices expanded to f32 straight from their GGUF blocks.
//!
//! Decoding products with these types (`Matrix::dots_t`) expand each weight row once per step
//! and take its dot product with every sequence's activations. Going through candle's
//! dequantization meant a scalar loop per value and a 256-row f32 tensor per call (for a 0.5B
//! model, ~2 GB written and read back per step). Here one row at a time lands in a scratch
//! buffer that stays in cache, with AVX2 where the CPU has it. The values are candle's to the
//! bit: d·q is exact in f32 (an f16 scale times an integer below 32), so d·q + m rounds once
//! whether computed as a multiply and an add or as a fused multiply-add.

use candle_core::quantized::GgmlDType;
use half::f16;

/// Values per block of these types.
const BLOCK: usize = 32;

/// The block types expanded here: what llama.cpp writes for matrices whose rows are no whole
/// number of 256-value K-quant blocks (Qwen2.5-0.5B's 896 columns, Gemma 3 270m's 640), and
/// Q8_0, common for output heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// d: f16, m: f16, 16 bytes of 4-bit values: d·q + m.
    Q4_1,
    /// d: f16, 4 bytes of fifth bits, 16 bytes of 4-bit values: d·(q − 16).
    Q5_0,
    /// d: f16, m: f16, 4 bytes of fifth bits, 16 bytes of 4-bit values: d·q + m.
    Q5_1,
    /// d: f16, 32 signed bytes: d·q.
    Q8_0,
}

/// Expands one row: its whole blocks in, 32 values per block out.
pub type ExpandRow = fn(&[u8], &mut [f32]);

impl BlockKind {
    pub fn of(dtype: GgmlDType) -> Option<Self> {
        match dtype {
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
            BlockKind::Q4_1 => (Some(2), None, 4),
            BlockKind::Q5_0 => (None, Some(2), 6),
            BlockKind::Q5_1 => (Some(2), Some(4), 8),
            BlockKind::Q8_0 => (None, None, 2),
        }
    }

    /// The row expander for this machine, chosen once per product.
    pub fn expander(self) -> ExpandRow {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features the functions are compiled for were just detected.
            return match self {
                BlockKind::Q4_1 => |b, o| unsafe { avx2::expand(BlockKind::Q4_1, b, o) },
                BlockKind::Q5_0 => |b, o| unsafe { avx2::expand(BlockKind::Q5_0, b, o) },
                BlockKind::Q5_1 => |b, o| unsafe { avx2::expand(BlockKind::Q5_1, b, o) },
                BlockKind::Q8_0 => |b, o| unsafe { avx2::expand_q8_0(b, o) },
            };
        }
        self.portable()
    }

    /// The row expander without SIMD (any CPU).
    pub fn portable(self) -> ExpandRow {
        match self {
            BlockKind::Q4_1 => |b, o| expand_scalar(BlockKind::Q4_1, b, o),
            BlockKind::Q5_0 => |b, o| expand_scalar(BlockKind::Q5_0, b, o),
            BlockKind::Q5_1 => |b, o| expand_scalar(BlockKind::Q5_1, b, o),
            BlockKind::Q8_0 => |b, o| expand_scalar(BlockKind::Q8_0, b, o),
        }
    }
}

fn read_f16(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Value j of a block: the low nibble of byte j (j < 16) or the high nibble of byte j − 16,
/// with bit j of the fifth bits above it (candle's and llama.cpp's order).
fn expand_scalar(kind: BlockKind, bytes: &[u8], out: &mut [f32]) {
    let (min_at, high_at, qs_at) = kind.layout();
    for (block, values) in bytes
        .chunks_exact(kind.block_bytes())
        .zip(out.chunks_exact_mut(BLOCK))
    {
        let d = read_f16(block, 0);
        let m = min_at.map_or(0.0, |at| read_f16(block, at));
        let high = high_at.map_or(0, |at| {
            u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
        });
        if kind == BlockKind::Q8_0 {
            for (v, &q) in values.iter_mut().zip(&block[qs_at..]) {
                *v = q as i8 as f32 * d;
            }
            continue;
        }
        for (j, v) in values.iter_mut().enumerate() {
            let byte = block[qs_at + j % 16];
            let nibble = if j < 16 { byte & 0x0F } else { byte >> 4 };
            let q = (nibble | (((high >> j) & 1) << 4) as u8) as i32;
            *v = match kind {
                BlockKind::Q5_0 => (q - 16) as f32 * d,
                BlockKind::Q4_1 | BlockKind::Q5_1 => q as f32 * d + m,
                BlockKind::Q8_0 => unreachable!("expanded above"),
            };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{BLOCK, BlockKind, read_f16};
    use std::arch::x86_64::*;

    /// 16 bytes: 0x10 where bit i of `bits` is set (i < 16).
    #[target_feature(enable = "avx2")]
    unsafe fn fifth_bits(bits: u32) -> __m128i {
        let spread = _mm_shuffle_epi8(
            _mm_set1_epi32(bits as i32),
            _mm_set_epi8(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        );
        let mask = _mm_set_epi8(-128, 64, 32, 16, 8, 4, 2, 1, -128, 64, 32, 16, 8, 4, 2, 1);
        let set = _mm_cmpeq_epi8(_mm_and_si128(spread, mask), mask);
        _mm_and_si128(set, _mm_set1_epi8(0x10))
    }

    /// Eight unsigned bytes (the low half of `q`) as f32.
    #[target_feature(enable = "avx2")]
    unsafe fn eight(q: __m128i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q))
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn expand_q8_0(bytes: &[u8], out: &mut [f32]) {
        for (block, values) in bytes.chunks_exact(34).zip(out.chunks_exact_mut(BLOCK)) {
            let d = _mm256_set1_ps(read_f16(block, 0));
            for j in 0..4 {
                // SAFETY: 2 + 8j + 8 ≤ 34 bytes of the block; 8j + 8 ≤ 32 values.
                unsafe {
                    let q = _mm_loadl_epi64(block.as_ptr().add(2 + 8 * j) as *const __m128i);
                    let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
                    _mm256_storeu_ps(values.as_mut_ptr().add(8 * j), v);
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn expand(kind: BlockKind, bytes: &[u8], out: &mut [f32]) {
        let (min_at, high_at, qs_at) = kind.layout();
        let low_nibbles = _mm_set1_epi8(0x0F);
        let sixteen = _mm256_set1_ps(16.0);
        for (block, values) in bytes
            .chunks_exact(kind.block_bytes())
            .zip(out.chunks_exact_mut(BLOCK))
        {
            // SAFETY: qs_at + 16 ≤ block_bytes, so the 16-byte load stays in the block.
            let qs = unsafe { _mm_loadu_si128(block.as_ptr().add(qs_at) as *const __m128i) };
            let mut lo = _mm_and_si128(qs, low_nibbles);
            let mut hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low_nibbles);
            if let Some(at) = high_at {
                let bits =
                    u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]]);
                lo = _mm_or_si128(lo, unsafe { fifth_bits(bits & 0xFFFF) });
                hi = _mm_or_si128(hi, unsafe { fifth_bits(bits >> 16) });
            }
            let d = _mm256_set1_ps(read_f16(block, 0));
            let m = min_at.map(|at| _mm256_set1_ps(read_f16(block, at)));
            let quarters = [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)];
            for (j, q) in quarters.into_iter().enumerate() {
                let q = unsafe { eight(q) };
                let v = match m {
                    Some(m) => _mm256_fmadd_ps(q, d, m),
                    None => _mm256_mul_ps(_mm256_sub_ps(q, sixteen), d),
                };
                // SAFETY: values holds 32 floats; 8j + 8 ≤ 32.
                unsafe { _mm256_storeu_ps(values.as_mut_ptr().add(8 * j), v) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};

    /// Random weights (with an offset, so that Q4_1/Q5_1's minimum matters) quantized by
    /// candle, then expanded row by row here: candle's dequantization, to the bit, on this
    /// machine's kernel and on the portable one.
    #[test]
    fn rows_expand_to_candles_values() {
        let (rows, cols) = (7, 96);
        let w = (Tensor::randn(0f32, 1.0, (rows, cols), &Device::Cpu).unwrap() + 0.3).unwrap();
        for dtype in [
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
        ] {
            let q = QTensor::quantize(&w, dtype).unwrap();
            let want: Vec<f32> = q
                .dequantize(&Device::Cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let kind = BlockKind::of(dtype).unwrap();
            let data = q.data().unwrap();
            let row_bytes = kind.row_bytes(cols);
            assert_eq!(data.len(), rows * row_bytes);
            let expand_all = |expand: ExpandRow| {
                let mut got = vec![0f32; rows * cols];
                for (r, out) in got.chunks_exact_mut(cols).enumerate() {
                    expand(&data[r * row_bytes..(r + 1) * row_bytes], out);
                }
                got
            };
            assert_eq!(expand_all(kind.expander()), want, "{dtype:?}");
            assert_eq!(
                expand_all(kind.portable()),
                want,
                "{dtype:?}, portable kernel"
            );
        }
    }
}
