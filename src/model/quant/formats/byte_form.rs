//! How each weight format's values read as bytes for the 8-bit products: value = scale·(byte −
//! offset) − min, one scale per 32 values (or per 16), a min per unit where the format has one —
//! the facts `int8_products` builds its operands and kernels on, one description per format
//! (as llama.cpp's type traits).

use super::block_format::BlockFormat;
use super::kquants::KQuantKind;
use super::legacy::BlockKind;

impl BlockFormat {
    /// What is added to a weight's integer to hold it as a byte (128: the byte is the signed
    /// integer + 128).
    pub fn byte_offset(self) -> i32 {
        match self {
            BlockFormat::Legacy(kind) if !kind.has_min() => 128,
            BlockFormat::IQuant(_) => 128,
            BlockFormat::Legacy(_)
            | BlockFormat::KQuant(KQuantKind::Q2K | KQuantKind::Q4K | KQuantKind::Q5K) => 0,
            BlockFormat::KQuant(KQuantKind::Q3K) => 4,
            BlockFormat::KQuant(KQuantKind::Q6K) => 32,
        }
    }

    /// Scales change every 16 values (two per 32).
    pub fn scales_per_16(self) -> bool {
        match self {
            BlockFormat::KQuant(KQuantKind::Q2K | KQuantKind::Q3K | KQuantKind::Q6K) => true,
            BlockFormat::IQuant(kind) => !kind.one_scale_per_group(),
            BlockFormat::Legacy(_) | BlockFormat::KQuant(KQuantKind::Q4K | KQuantKind::Q5K) => {
                false
            }
        }
    }

    /// Units (scales) per 32 values.
    pub fn scale_units(self) -> usize {
        if self.scales_per_16() { 2 } else { 1 }
    }

    /// A min per unit (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K).
    pub fn has_unit_min(self) -> bool {
        match self {
            BlockFormat::Legacy(kind) => kind.has_min(),
            BlockFormat::KQuant(KQuantKind::Q2K | KQuantKind::Q4K | KQuantKind::Q5K) => true,
            BlockFormat::KQuant(KQuantKind::Q3K | KQuantKind::Q6K) | BlockFormat::IQuant(_) => {
                false
            }
        }
    }

    /// Whether a min multiplies llama.cpp's Q8_1 block sum s = f16(f16(Σx)·d_x), as the
    /// single-token kernels of these blocks take it, rather than d_x·Σx in f32.
    pub fn takes_q8_1_sums(self) -> bool {
        matches!(self, BlockFormat::Legacy(kind) if kind.has_min())
    }

    /// The largest magnitude a weight's integer takes: the byte for formats with an offset
    /// below 128, |integer| for the others (Q8_0's −128: 128).
    pub fn largest_integer(self) -> usize {
        match self {
            BlockFormat::Legacy(BlockKind::Q4_0) => 8,
            BlockFormat::Legacy(BlockKind::Q4_1) => 15,
            BlockFormat::Legacy(BlockKind::Q5_0) => 16,
            BlockFormat::Legacy(BlockKind::Q5_1) => 31,
            BlockFormat::Legacy(BlockKind::Q8_0) => 128,
            BlockFormat::KQuant(KQuantKind::Q2K) => 3,
            BlockFormat::KQuant(KQuantKind::Q3K) => 7,
            BlockFormat::KQuant(KQuantKind::Q4K) => 15,
            BlockFormat::KQuant(KQuantKind::Q5K) => 31,
            BlockFormat::KQuant(KQuantKind::Q6K) => 63,
            BlockFormat::IQuant(kind) => kind.largest_integer(),
        }
    }

    /// Values and bytes per block.
    pub fn block_shape(self) -> (usize, usize) {
        (self.block_values(), self.block_bytes())
    }
}
