//! I-quant blocks as the blocks candle multiplies them in (Q8_0, or Q5_0 where every group is one
//! scale times small integers): what a GPU holds of an i-quant GGUF.

use crate::model::quant::formats::iquants::{GROUP, Group, IQuant, block_groups};
use candle_core::quantized::GgmlType;
use candle_core::quantized::k_quants::BlockQ8_0;
use half::f16;

/// i-quant blocks (`kind`, whole blocks) as Q8_0 blocks into `out` (one per 32 values): a
/// group of one scale as its integers and that scale, one of two scales through candle's
/// `BlockQ8_0::from_float` (ggml's `quantize_row_q8_0_ref`). Err: a group whose scale is beyond
/// f16's range (no real model's).
pub fn to_q8_0(kind: IQuant, bytes: &[u8], out: &mut [BlockQ8_0]) -> Result<(), ConversionError> {
    convert_groups(kind, bytes, out.iter_mut(), |group, out| {
        if group.scales[0] == group.scales[1] {
            let raw = block_bytes(out);
            raw[..2].copy_from_slice(&f16::from_f32(group.scales[0]).to_le_bytes());
            for (o, q) in raw[2..].iter_mut().zip(group.q) {
                *o = q as u8;
            }
        } else {
            BlockQ8_0::from_float(&group.values(), std::slice::from_mut(out));
        }
        let d = f16::from_le_bytes([block_bytes(out)[0], block_bytes(out)[1]]);
        finite_scale(d, group)
    })
}

/// Bytes of a Q5_0 block: d (f16), the fifth bits of its 32 values (u32), their low nibbles
/// (value j in byte j's low nibble, value j + 16 in its high one).
pub const Q5_0_BYTES: usize = 22;

/// i-quant blocks (`kind`, whole blocks, `held_as` Q5_0) as Q5_0 blocks' bytes into `out`
/// (22 per 32 values): each group's integers q as q + 16, and its scale rounded to f16, the
/// values of `to_q8_0`'s blocks. Err: a group whose scale is beyond f16's range (no real
/// model's), or whose values Q5_0 cannot hold (two scales, an integer outside −16..=15).
pub fn to_q5_0(kind: IQuant, bytes: &[u8], out: &mut [u8]) -> Result<(), ConversionError> {
    convert_groups(
        kind,
        bytes,
        out.chunks_exact_mut(Q5_0_BYTES),
        |group, out| {
            let fits = group.q.iter().all(|q| (-16..=15).contains(q));
            if group.scales[0] != group.scales[1] || !fits {
                return Err(ConversionError::NotQ5_0);
            }
            let d = f16::from_f32(group.scales[0]);
            finite_scale(d, group)?;
            let u: [u8; GROUP] = std::array::from_fn(|j| (group.q[j] + 16) as u8);
            let high: u32 = (0..GROUP).map(|j| u32::from(u[j] >> 4) << j).sum();
            out[..2].copy_from_slice(&d.to_le_bytes());
            out[2..6].copy_from_slice(&high.to_le_bytes());
            for (j, o) in out[6..].iter_mut().enumerate() {
                *o = (u[j] & 0xf) | (u[j + 16] & 0xf) << 4;
            }
            Ok(())
        },
    )
}

/// Decodes whole `kind` blocks and calls `put(group, out)` for each 32-value group with the
/// next of `outs`; an error is returned naming the block and values it came from.
fn convert_groups<B>(
    kind: IQuant,
    bytes: &[u8],
    mut outs: impl Iterator<Item = B>,
    mut put: impl FnMut(&Group, B) -> Result<(), ConversionError>,
) -> Result<(), ConversionError> {
    let per_block = kind.block_values() / GROUP;
    for (b, block) in bytes.chunks_exact(kind.block_bytes()).enumerate() {
        for (g, group) in block_groups(kind, block)[..per_block].iter().enumerate() {
            let Some(out) = outs.next() else {
                return Ok(());
            };
            put(group, out).map_err(|e| ConversionError::InGroup {
                kind: kind.name(),
                block: b,
                values: g * GROUP..(g + 1) * GROUP,
                reason: Box::new(e),
            })?;
        }
    }
    Ok(())
}

/// Err where a group's f16 scale `d` overflowed.
fn finite_scale(d: f16, group: &Group) -> Result<(), ConversionError> {
    if d.is_finite() {
        return Ok(());
    }
    let scale = group.scales[0].abs().max(group.scales[1].abs());
    Err(ConversionError::ScaleBeyondF16(scale))
}

/// A group that the blocks an i-quant is held in cannot hold.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    #[error("scale {0} is beyond f16's range")]
    ScaleBeyondF16(f32),
    #[error("not one scale times integers in -16..=15")]
    NotQ5_0,
    #[error("{kind} block {block}, values {}..{}: {reason}", values.start, values.end)]
    InGroup {
        kind: &'static str,
        block: usize,
        values: std::ops::Range<usize>,
        reason: Box<ConversionError>,
    },
}

/// A Q8_0 block's bytes in ggml's layout: its f16 scale, then 32 signed bytes.
fn block_bytes(block: &mut BlockQ8_0) -> &mut [u8; 34] {
    const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
    // SAFETY: BlockQ8_0 is repr(C) { f16, [i8; 32] }, 34 bytes with no padding (asserted), so
    // its memory is those bytes; any bytes are a valid f16 and i8s. candle keeps the fields
    // crate-private.
    unsafe { &mut *(block as *mut BlockQ8_0).cast::<[u8; 34]>() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Q8_0 block from a group of one scale holds its integers; from two, ggml's rounding
    /// (candle's `QTensor::quantize` of the decoded values, whole-tensor, bit for bit).
    #[test]
    fn requantized_blocks_round_as_ggml() {
        use candle_core::quantized::{GgmlDType, QTensor};
        use candle_core::{Device, Tensor};
        let block: Vec<u8> = (0..IQuant::Iq2Xs.block_bytes())
            .map(|i| (i * 37 + 11) as u8)
            .collect();
        let mut block = block;
        block[..2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
        let values = crate::model::quant::formats::iquants::dequantize(IQuant::Iq2Xs, &block);
        let mut ours = vec![BlockQ8_0::zeros(); 8];
        to_q8_0(IQuant::Iq2Xs, &block, &mut ours).unwrap();
        let theirs = QTensor::quantize(
            &Tensor::from_vec(values, 256, &Device::Cpu).unwrap(),
            GgmlDType::Q8_0,
        )
        .unwrap();
        let ours: Vec<u8> = ours.iter_mut().flat_map(|b| *block_bytes(b)).collect();
        assert_eq!(ours, theirs.data().unwrap().to_vec());
    }
}
