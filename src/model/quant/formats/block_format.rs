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
    /// (f32, f16, bf16, Q8_1, Q8_K). candle has no i-quant types (`IQuant::from_type_id`).
    pub fn of(dtype: GgmlDType) -> Option<Self> {
        BlockKind::of(dtype)
            .map(BlockFormat::Legacy)
            .or_else(|| KQuantKind::of(dtype).map(BlockFormat::KQuant))
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
    use crate::model::quant::formats::ggml_types::type_name;

    const EXPAND_CU: &str = include_str!("../../../../kernels/expand.cu");

    /// Each format's name is ggml's for its GGUF type id (ggml.h's order, `type_name`), its
    /// sizes are candle's (`type_size`, `block_size`) where candle has the type, and
    /// `kernels/expand.cu` has the kernel those name and sizes launch.
    #[test]
    fn sizes_and_names_are_ggmls() {
        let candle = [
            (2, GgmlDType::Q4_0),
            (3, GgmlDType::Q4_1),
            (6, GgmlDType::Q5_0),
            (7, GgmlDType::Q5_1),
            (8, GgmlDType::Q8_0),
            (10, GgmlDType::Q2K),
            (11, GgmlDType::Q3K),
            (12, GgmlDType::Q4K),
            (13, GgmlDType::Q5K),
            (14, GgmlDType::Q6K),
        ];
        for (id, dtype) in candle {
            let format = BlockFormat::of(dtype).unwrap();
            let name = type_name(id).unwrap();
            assert_eq!(format.ggml_name().to_ascii_uppercase(), name, "type {id}");
            assert_eq!(format.block_bytes(), dtype.type_size(), "{name}");
            assert_eq!(format.block_values(), dtype.block_size(), "{name}");
            // The CUDA expansion kernel of the type, by the name, size and count launched.
            let (bytes, values) = (format.block_bytes(), format.block_values());
            let kernel = format!("EXPAND({}, {bytes}, {values})", format.ggml_name());
            assert!(
                EXPAND_CU.contains(&kernel),
                "kernels/expand.cu lacks {kernel}"
            );
        }
        for id in 0..40 {
            if let Some(kind) = IQuant::from_type_id(id) {
                let format = BlockFormat::IQuant(kind);
                let name = type_name(id).unwrap();
                assert_eq!(format.ggml_name().to_ascii_uppercase(), name, "type {id}");
            }
        }
        let iq4_xs = BlockFormat::IQuant(IQuant::from_type_id(23).unwrap());
        assert_eq!((iq4_xs.block_values(), iq4_xs.block_bytes()), (256, 136));
        assert_eq!(BlockFormat::of(GgmlDType::F16), None);
    }
}
