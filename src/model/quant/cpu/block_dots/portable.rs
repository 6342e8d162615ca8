//! The portable body of the legacy blocks' products: one row at a time, in scalar code.

use crate::model::quant::cpu::block_dots::blocks::{Q8Row, Q8Rows, read_f16, read_u32};
use crate::model::quant::formats::legacy::{BLOCK, BlockKind};

/// The kernel without SIMD (any CPU).
pub fn dot_rows_portable(kind: BlockKind, w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
    let row_bytes = kind.row_bytes(xs.cols);
    assert!(
        row_bytes > 0 && w.len().is_multiple_of(row_bytes),
        "whole weight rows of {} values",
        xs.cols
    );
    for row in w.chunks_exact(row_bytes) {
        row_portable(kind, row, xs, out);
    }
}

/// One weight row times every row of `xs`: candle's reference loop.
fn row_portable(kind: BlockKind, w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
    let (min_at, high_at, qs_at) = kind.layout();
    let mut sums = vec![0f32; xs.len()];
    for (b, block) in w.chunks_exact(kind.block_bytes()).enumerate() {
        let d = read_f16(block, 0);
        let m = min_at.map_or(0.0, |at| read_f16(block, at));
        let high = high_at.map_or(0, |at| read_u32(block, at));
        let mut q = [0i32; BLOCK];
        for (j, q) in q.iter_mut().enumerate() {
            *q = if kind == BlockKind::Q8_0 {
                block[qs_at + j] as i8 as i32
            } else {
                let byte = block[qs_at + j % 16];
                let nibble = if j < 16 { byte & 0x0F } else { byte >> 4 };
                let v = (nibble | (((high >> j) & 1) << 4) as u8) as i32;
                match kind {
                    BlockKind::Q4_0 => v - 8,
                    BlockKind::Q5_0 => v - 16,
                    _ => v,
                }
            };
        }
        for (r, sum) in sums.iter_mut().enumerate() {
            let x = xs.row(r);
            let xq = &x.qs[b * BLOCK..(b + 1) * BLOCK];
            let sumi: i32 = q.iter().zip(xq).map(|(&a, &b)| a * b as i32).sum();
            *sum += scaled(kind, sumi, d, m, x, b);
        }
    }
    out.extend(sums);
}

/// A block's contribution, in candle's `vec_dot_unopt` order: sumi·d·dₓ (+ m·sₓ).
#[inline(always)]
fn scaled(kind: BlockKind, sumi: i32, d: f32, m: f32, x: Q8Row, b: usize) -> f32 {
    if kind.has_min() {
        sumi as f32 * d * x.d[b] + m * x.s[b]
    } else {
        sumi as f32 * d * x.d[b]
    }
}
