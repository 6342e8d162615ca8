//! Every GGUF block format hyoka's kernels read, as one type: which family describes it
//! (`legacy`, `kquants`, `iquants`: layouts and sizes, each format in one place) and its name.

use candle_core::quantized::GgmlDType;

use crate::model::quant::formats::iquants::IQuant;
use crate::model::quant::formats::kquants::{KQuantKind, QK_K};
use crate::model::quant::formats::legacy::{BLOCK, BlockKind};

/// A GGUF block format, by the family whose kernels read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockFormat {
    /// 32 values a block, one scale (and a minimum): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
    Legacy(BlockKind),
    /// 256 values a block in sub-blocks with their own scales: Q2_K … Q6_K.
    KQuant(KQuantKind),
    /// Values from a grid or a non-linear table: IQ1_S … IQ4_XS.
    IQuant(IQuant),
}

impl BlockFormat {
    /// The format of candle's block type; None for types hyoka has no kernels of its own for
    /// (f32, f16, bf16, Q8_1, Q8_K). candle has no i-quant types: `of_type_id` finds those.
    pub fn of(dtype: GgmlDType) -> Option<Self> {
        BlockKind::of(dtype)
            .map(BlockFormat::Legacy)
            .or_else(|| KQuantKind::of(dtype).map(BlockFormat::KQuant))
    }

    /// The format of a GGUF tensor type id (ggml.h's `ggml_type`).
    pub fn of_type_id(id: u32) -> Option<Self> {
        let candle = match id {
            2 => Some(GgmlDType::Q4_0),
            3 => Some(GgmlDType::Q4_1),
            6 => Some(GgmlDType::Q5_0),
            7 => Some(GgmlDType::Q5_1),
            8 => Some(GgmlDType::Q8_0),
            10 => Some(GgmlDType::Q2K),
            11 => Some(GgmlDType::Q3K),
            12 => Some(GgmlDType::Q4K),
            13 => Some(GgmlDType::Q5K),
            14 => Some(GgmlDType::Q6K),
            _ => None,
        };
        match candle {
            Some(dtype) => Self::of(dtype),
            None => IQuant::from_type_id(id).map(BlockFormat::IQuant),
        }
    }

    /// ggml's name of the type (its `type_traits`), as hyoka's CUDA kernels are named.
    pub fn ggml_name(self) -> &'static str {
        match self {
            BlockFormat::Legacy(kind) => kind.ggml_name(),
            BlockFormat::KQuant(kind) => kind.ggml_name(),
            BlockFormat::IQuant(kind) => kind.ggml_name(),
        }
    }

    /// Values a block holds.
    pub fn block_values(self) -> usize {
        match self {
            BlockFormat::Legacy(_) => BLOCK,
            BlockFormat::KQuant(_) => QK_K,
            BlockFormat::IQuant(kind) => kind.block_values(),
        }
    }

    /// Bytes of a block.
    pub fn block_bytes(self) -> usize {
        match self {
            BlockFormat::Legacy(kind) => kind.block_bytes(),
            BlockFormat::KQuant(kind) => kind.block_bytes(),
            BlockFormat::IQuant(kind) => kind.block_bytes(),
        }
    }

    /// Bytes of a row of `cols` values (a whole number of blocks).
    pub fn row_bytes(self, cols: usize) -> usize {
        cols / self.block_values() * self.block_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each format's sizes and name are ggml's (ggml-common.h's `block_*`, ggml.c's
    /// `type_traits`), as candle's block types have them where candle has the type.
    #[test]
    fn sizes_and_names_are_ggmls() {
        for id in 0..40 {
            let Some(format) = BlockFormat::of_type_id(id) else {
                continue;
            };
            let name = crate::model::load::gguf_types::type_name(id).unwrap();
            assert_eq!(format.ggml_name().to_ascii_uppercase(), name, "type {id}");
            if let BlockFormat::Legacy(_) | BlockFormat::KQuant(_) = format {
                let candle = [
                    GgmlDType::Q4_0,
                    GgmlDType::Q4_1,
                    GgmlDType::Q5_0,
                    GgmlDType::Q5_1,
                    GgmlDType::Q8_0,
                    GgmlDType::Q2K,
                    GgmlDType::Q3K,
                    GgmlDType::Q4K,
                    GgmlDType::Q5K,
                    GgmlDType::Q6K,
                ]
                .into_iter()
                .find(|&d| BlockFormat::of(d) == Some(format))
                .unwrap();
                assert_eq!(format.block_bytes(), candle.type_size(), "{name}");
                assert_eq!(format.block_values(), candle.block_size(), "{name}");
            }
        }
        let iq4_xs = BlockFormat::of_type_id(23).unwrap();
        assert_eq!((iq4_xs.block_values(), iq4_xs.block_bytes()), (256, 136));
    }
}
