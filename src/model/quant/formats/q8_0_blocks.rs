//! Q8_0 blocks from a safetensors matrix's bytes, row by row on all threads (`--weights q8_0`).
//!
//! Each block is candle's `BlockQ8_0::from_float` (ggml's reference `quantize_row_q8_0_ref` on
//! x86: per 32 values d = max|x| / 127 stored as f16, q = round(x / d)). candle's
//! `QTensor::quantize` does the same on one thread after converting the whole matrix to f32 — an
//! 8B's embedding is 2 GB in f32 beside its 1 GB of bf16 — so a checkpoint is quantized here
//! instead, a few rows at a time from their file bytes, into blocks that become the QTensor.

use candle_core::DType;
use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::k_quants::BlockQ8_0;
use candle_core::quantized::{GgmlDType, GgmlType, QStorage, QTensor};
use half::{bf16, f16};
use rayon::prelude::*;

/// Values per block.
pub const BLOCK: usize = 32;

/// Quantize rows of `cols` values stored as `dtype` little-endian bytes in `src` into `out`
/// (`cols / 32` blocks per row), rows shared among rayon's threads. `cols` must be a multiple of
/// 32, `src` whole rows, and `out` as many rows.
pub fn quantize_rows(src: &[u8], dtype: DType, cols: usize, out: &mut [BlockQ8_0]) {
    assert!(cols.is_multiple_of(BLOCK), "{cols} values a row");
    let (in_row, out_row) = (cols * dtype.size_in_bytes(), cols / BLOCK);
    assert_eq!(src.len() / in_row, out.len() / out_row, "rows in and out");
    // Tasks of ~2,000 blocks (64 KiB of output), so that short rows still keep threads busy.
    let rows_per_task = (2048 / out_row).max(1);
    out.par_chunks_mut(out_row * rows_per_task)
        .zip(src.par_chunks(in_row * rows_per_task))
        .for_each_init(
            || vec![0f32; cols],
            |row, (out, src)| {
                for (o, s) in out.chunks_exact_mut(out_row).zip(src.chunks_exact(in_row)) {
                    to_f32(s, dtype, row);
                    BlockQ8_0::from_float(row, o);
                }
            },
        );
}

/// Q8_0 blocks made on the host as a QTensor of shape `dims` on `device`: kept as they are on
/// the CPU, their bytes uploaded once elsewhere (no second host copy).
pub fn onto(
    blocks: Vec<BlockQ8_0>,
    dims: Vec<usize>,
    device: &candle_core::Device,
) -> candle_core::Result<QTensor> {
    let q = QTensor::new(QStorage::Cpu(Box::new(blocks)), dims.clone())?;
    if device.is_cpu() {
        return Ok(q);
    }
    qtensor_from_ggml(GgmlDType::Q8_0, &q.data()?, dims, device)
}

fn to_f32(src: &[u8], dtype: DType, dst: &mut [f32]) {
    match dtype {
        DType::BF16 => {
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        DType::F16 => {
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        DType::F32 => {
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        // `safetensors_reads` only lists these three.
        other => unreachable!("no Q8_0 from {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QStorage, QTensor};
    use candle_core::{Device, Tensor};

    /// The blocks of `QTensor::quantize` on the whole matrix in f32, from each file dtype's
    /// bytes, on rows with an all-zero block, a block of one value, huge and tiny values, and
    /// rows spread over several tasks.
    #[test]
    fn blocks_are_those_of_candles_quantize() {
        let (rows, cols) = (700, 96);
        let mut v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i as f32 * 0.7311).sin() * 3.0).powi(3))
            .collect();
        v[..32].fill(0.0);
        v[32..64].fill(-2.5);
        v[100] = 6.0e4;
        v[200] = 1.0e-30;
        let t = Tensor::from_vec(v, (rows, cols), &Device::Cpu).unwrap();
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let t = t.to_dtype(dtype).unwrap();
            let f = t.flatten_all().unwrap();
            let bytes: Vec<u8> = match dtype {
                DType::F32 => le_bytes(f.to_vec1::<f32>().unwrap(), f32::to_le_bytes),
                DType::BF16 => le_bytes(f.to_vec1::<bf16>().unwrap(), bf16::to_le_bytes),
                _ => le_bytes(f.to_vec1::<f16>().unwrap(), f16::to_le_bytes),
            };
            let mut out = vec![BlockQ8_0::zeros(); rows * cols / BLOCK];
            quantize_rows(&bytes, dtype, cols, &mut out);
            let got = QTensor::new(QStorage::Cpu(Box::new(out)), (rows, cols)).unwrap();
            let want =
                QTensor::quantize(&t.to_dtype(DType::F32).unwrap(), GgmlDType::Q8_0).unwrap();
            assert_eq!(got.data().unwrap(), want.data().unwrap(), "{dtype:?}");
        }
    }

    fn le_bytes<T: Copy, const N: usize>(xs: Vec<T>, f: fn(T) -> [u8; N]) -> Vec<u8> {
        xs.into_iter().flat_map(f).collect()
    }
}
