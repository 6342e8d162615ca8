//! GGUF blocks expanded to f32 by candle's own block conversion (`GgmlType::to_float`, the
//! values `QTensor::dequantize` gives), rows spread over the threads.

use crate::model::quant::cpu::expanded_dots;
use crate::model::quant::formats::block_format::BlockFormat;
use crate::model::quant::formats::kquants::KQuantKind;
use crate::model::quant::formats::legacy::BlockKind;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Result, Tensor};
use rayon::prelude::*;
use std::ops::Range;

/// A CPU matrix expanded to f32 by candle's own block conversion (`GgmlType::to_float`, the
/// values `QTensor::dequantize` gives), rows spread over the threads: candle's runs on one
/// thread, 2.8% of an 8B prefill with the other thread idle. None for other devices and types.
pub(crate) fn expand_on_threads(q: &QTensor) -> Result<Option<Tensor>> {
    if !expands_on_cpu(q) {
        return Ok(None);
    }
    let (rows, cols) = q.shape().dims2()?;
    let mut ys = vec![0f32; rows * cols];
    expand_into(q, &mut ys)?;
    Ok(Some(Tensor::from_vec(ys, (rows, cols), &Device::Cpu)?))
}

/// Whether `expand_into` takes this matrix: CPU blocks of a type candle converts.
pub(crate) fn expands_on_cpu(q: &QTensor) -> bool {
    q.device().is_cpu() && block_expansion(q.dtype()).is_some()
}

/// The (rows, cols) matrix `q` in f32 into `out` (rows × cols values) by candle's own block
/// conversion, rows spread over the threads (see `expand_on_threads`).
pub(crate) fn expand_into(q: &QTensor, out: &mut [f32]) -> Result<()> {
    let (rows, _) = q.shape().dims2()?;
    expand_rows_into(q, 0..rows, out)
}

/// Rows `range` of the matrix `q` in f32 into `out` (their count × cols values), as
/// `expand_into` expands them.
pub(crate) fn expand_rows_into(q: &QTensor, range: Range<usize>, out: &mut [f32]) -> Result<()> {
    let (rows, cols) = q.shape().dims2()?;
    if range.start > range.end || range.end > rows || out.len() != range.len() * cols {
        candle_core::bail!("rows {range:?} of {rows}×{cols} into {} values", out.len());
    }
    let Some(expand) = block_expansion(q.dtype()) else {
        candle_core::bail!("no CPU expansion for {:?}", q.dtype());
    };
    let row_bytes = cols / q.dtype().block_size() * q.dtype().type_size();
    let data = q.data()?;
    let bytes = &data[range.start * row_bytes..range.end * row_bytes];
    expand(bytes, range.len(), cols, out)
}

/// Expands a (rows, cols) matrix's blocks into f32 values.
type BlockExpansion = fn(&[u8], usize, usize, &mut [f32]) -> Result<()>;

/// candle's block conversion for a block type, if it has one.
fn block_expansion(dtype: GgmlDType) -> Option<BlockExpansion> {
    use candle_core::quantized::k_quants::*;
    Some(match dtype {
        GgmlDType::Q4_0 => expand_blocks::<BlockQ4_0>,
        GgmlDType::Q4_1 => expand_blocks::<BlockQ4_1>,
        GgmlDType::Q5_0 => expand_blocks::<BlockQ5_0>,
        GgmlDType::Q5_1 => expand_blocks::<BlockQ5_1>,
        GgmlDType::Q8_0 => expand_blocks::<BlockQ8_0>,
        GgmlDType::Q2K => expand_blocks::<BlockQ2K>,
        GgmlDType::Q3K => expand_blocks::<BlockQ3K>,
        GgmlDType::Q4K => expand_blocks::<BlockQ4K>,
        GgmlDType::Q5K => expand_blocks::<BlockQ5K>,
        GgmlDType::Q6K => expand_blocks::<BlockQ6K>,
        _ => return None,
    })
}

/// `data`: the blocks of a (rows, cols) matrix as candle's CPU storage holds them (a `Vec<T>`
/// seen as bytes), expanded into `ys` (rows × cols).
fn expand_blocks<T: candle_core::quantized::k_quants::GgmlType>(
    data: &[u8],
    rows: usize,
    cols: usize,
    ys: &mut [f32],
) -> Result<()> {
    let size = std::mem::size_of::<T>();
    let per_row = cols / T::BLCK_SIZE;
    if !cols.is_multiple_of(T::BLCK_SIZE)
        || data.len() != rows * per_row * size
        || !(data.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    {
        candle_core::bail!(
            "{:?} storage of {rows}×{cols} is not whole aligned blocks",
            T::DTYPE
        );
    }
    // SAFETY: the bytes are candle's Vec<T> (length and alignment checked above); its block
    // types are plain numbers, valid for any bits.
    let blocks: &[T] =
        unsafe { std::slice::from_raw_parts(data.as_ptr() as *const T, rows * per_row) };
    // About 256 KB of f32 per task.
    let task_rows = (65_536 / cols.max(1)).max(1);
    let (kquant, block) = (KQuantKind::of(T::DTYPE), BlockKind::of(T::DTYPE));
    ys.par_chunks_mut(task_rows * cols)
        .zip(data.par_chunks(task_rows * per_row * size))
        .zip(blocks.par_chunks(task_rows * per_row))
        .try_for_each(|((y, bytes), b)| {
            // Candle's values, the K-quants sixteen at a time and the 32-value blocks eight
            // at a time where the CPU can (Q5_0's scalar loop would cost 1% of a json run).
            if let Some(kind) = block {
                return expanded_dots::expand_row(BlockFormat::Legacy(kind), bytes, y);
            }
            if !kquant
                .is_some_and(|kind| crate::model::quant::cpu::kquant_expand::expand(kind, bytes, y))
            {
                T::to_float(b, y)
            }
            Ok(())
        })
}
