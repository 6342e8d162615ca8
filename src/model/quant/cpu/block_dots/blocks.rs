//! The 8-bit activation rows the products of the 32-value block formats (Q4_0 … Q8_0) read.

use crate::model::quant::cpu::act_rounding::Rounding;
use crate::model::quant::formats::legacy::BLOCK;
use half::f16;

pub use crate::model::quant::formats::activations::Q8Rows;

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
