//! The 32-weight blocks of the legacy GGUF formats (Q4_0 … Q8_0) and the 8-bit activation rows
//! their products read.

use crate::model::quant::cpu::act_rounding::Rounding;
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
    pub(super) fn layout(self) -> (Option<usize>, Option<usize>, usize) {
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
    pub(super) cols: usize,
    pub(super) qs: Vec<i8>,
    /// Per block: d as f32 (an f16 value).
    pub(super) d: Vec<f32>,
    /// Per block: s as f32 (an f16 value); empty for Q8_0.
    pub(super) s: Vec<f32>,
    /// Per block: Σq, exact.
    pub(super) sum: Vec<i32>,
}

impl Q8Rows {
    /// `xs`: rows of `cols` values, `cols` a multiple of 32. `with_sums` for Q8_1.
    pub fn quantize(xs: &[f32], cols: usize, with_sums: bool) -> Self {
        Self::quantize_with(xs, cols, with_sums, Rounding::for_machine())
    }

    pub(super) fn quantize_with(
        xs: &[f32],
        cols: usize,
        with_sums: bool,
        rounding: Rounding,
    ) -> Self {
        assert!(cols.is_multiple_of(BLOCK) && xs.len().is_multiple_of(cols));
        let blocks = xs.len() / BLOCK;
        let mut rows = Q8Rows {
            cols,
            qs: vec![0; xs.len()],
            d: Vec::with_capacity(blocks),
            s: Vec::with_capacity(if with_sums { blocks } else { 0 }),
            sum: Vec::with_capacity(blocks),
        };
        for (x, q) in xs.chunks_exact(BLOCK).zip(rows.qs.chunks_exact_mut(BLOCK)) {
            let amax = (rounding.max_abs)(x);
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let d16 = f16::from_f32(d);
            let sum = (rounding.round)(x, id, q);
            rows.d.push(d16.to_f32());
            rows.sum.push(sum);
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
    pub(crate) fn sums(&self) -> &[f32] {
        &self.s
    }

    pub fn is_empty(&self) -> bool {
        self.qs.is_empty()
    }

    pub(super) fn row(&self, r: usize) -> Q8Row<'_> {
        let blocks = self.cols / BLOCK;
        let at = r * blocks;
        Q8Row {
            qs: &self.qs[r * self.cols..(r + 1) * self.cols],
            d: &self.d[at..at + blocks],
            s: self.s.get(at..at + blocks).unwrap_or(&[]),
            sum: &self.sum[at..at + blocks],
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct Q8Row<'a> {
    pub(super) qs: &'a [i8],
    pub(super) d: &'a [f32],
    pub(super) s: &'a [f32],
    pub(super) sum: &'a [i32],
}

pub(crate) fn read_f16(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

pub(super) fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
