//! The 32-value block formats of GGUF (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): their layouts and sizes.

use candle_core::quantized::GgmlDType;

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

    /// ggml's name of the type (`type_traits`).
    pub fn ggml_name(self) -> &'static str {
        match self {
            BlockKind::Q4_0 => "q4_0",
            BlockKind::Q4_1 => "q4_1",
            BlockKind::Q5_0 => "q5_0",
            BlockKind::Q5_1 => "q5_1",
            BlockKind::Q8_0 => "q8_0",
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
    pub(crate) fn layout(self) -> (Option<usize>, Option<usize>, usize) {
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
