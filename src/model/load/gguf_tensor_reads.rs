//! Reading a GGUF's tensors: blocks read from the file straight into the storage they are held
//! in, and i-quant tensors read as stored, then held as the blocks candle multiplies.

use crate::model::quant::{IQuant, iquant_held, q8_0_blocks};
use candle_core::quantized::k_quants::BlockQ8_0;
use candle_core::quantized::{GgmlDType, GgmlType, QStorage, QTensor, QuantizedType, gguf_file};
use candle_core::{Device, Error, Result};
use rayon::prelude::*;
use std::io::{Read, Seek, SeekFrom};

/// An i-quant tensor as its file stores it.
pub struct IQuantBlocks {
    pub kind: IQuant,
    /// The tensor's shape, rows first (the file's dimensions reversed, as candle gives them).
    pub dims: Vec<usize>,
    pub bytes: Vec<u8>,
}

/// A tensor on the CPU as stored, read from the file straight into the blocks it is held in.
/// candle's reader reads the bytes, then copies them into blocks: for a moment every tensor is
/// held twice, and the freed copies stay in the heap (`heap::keep_freed_memory`), so a 13B
/// judge ended its load 1.35 GiB higher.
pub(super) fn read_in_place(
    file: &mut std::fs::File,
    tensor_data_offset: u64,
    info: &gguf_file::TensorInfo,
) -> Result<QTensor> {
    use candle_core::quantized::k_quants::*;
    let dtype = info.ggml_dtype;
    let elems = info.shape.elem_count();
    if !elems.is_multiple_of(dtype.block_size()) {
        return Err(Error::Msg(format!(
            "{elems} values: not whole {}-value blocks of {dtype:?}",
            dtype.block_size()
        )));
    }
    let size = elems / dtype.block_size() * dtype.type_size();
    seek_tensor(file, tensor_data_offset, info, size)?;
    let blocks = match dtype {
        GgmlDType::F32 => read_blocks::<f32>(file, size)?,
        GgmlDType::F16 => read_blocks::<half::f16>(file, size)?,
        GgmlDType::BF16 => read_blocks::<half::bf16>(file, size)?,
        GgmlDType::Q4_0 => read_blocks::<BlockQ4_0>(file, size)?,
        GgmlDType::Q4_1 => read_blocks::<BlockQ4_1>(file, size)?,
        GgmlDType::Q5_0 => read_blocks::<BlockQ5_0>(file, size)?,
        GgmlDType::Q5_1 => read_blocks::<BlockQ5_1>(file, size)?,
        GgmlDType::Q8_0 => read_blocks::<BlockQ8_0>(file, size)?,
        GgmlDType::Q2K => read_blocks::<BlockQ2K>(file, size)?,
        GgmlDType::Q3K => read_blocks::<BlockQ3K>(file, size)?,
        GgmlDType::Q4K => read_blocks::<BlockQ4K>(file, size)?,
        GgmlDType::Q5K => read_blocks::<BlockQ5K>(file, size)?,
        GgmlDType::Q6K => read_blocks::<BlockQ6K>(file, size)?,
        // As candle's reader: Q8_1 and Q8_K are llama.cpp's types for activations, not weights.
        GgmlDType::Q8_1 | GgmlDType::Q8K => {
            return Err(Error::Msg(format!(
                "quantized type {dtype:?} is not supported"
            )));
        }
    };
    QTensor::new(QStorage::Cpu(blocks), info.shape.dims().to_vec())
}

/// `bytes` of the file, from where it stands, as blocks of type `T`.
pub(super) fn read_blocks<T: GgmlType + Send + Sync + 'static>(
    file: &mut std::fs::File,
    bytes: usize,
) -> Result<Box<dyn QuantizedType>> {
    let count = bytes / std::mem::size_of::<T>();
    let mut blocks = vec![T::zeros(); count];
    // Safety: the slice covers exactly the vector's initialised blocks, and a GGML block is
    // plain data (integers and floats, laid out as the file stores it: candle reinterprets the
    // file's bytes the same way), so any bytes written into it make valid blocks.
    let raw = unsafe {
        std::slice::from_raw_parts_mut(
            blocks.as_mut_ptr().cast::<u8>(),
            count * std::mem::size_of::<T>(),
        )
    };
    file.read_exact(raw)?;
    Ok(Box::new(blocks))
}

/// Blocks of an i-quant tensor converted at a time (each thread takes whole chunks).
pub(super) const IQUANT_CHUNK_BLOCKS: usize = 256;

/// The file bytes of an i-quant tensor: whole blocks along its rows.
pub(super) fn read_iquant_bytes(
    file: &mut std::fs::File,
    tensor_data_offset: u64,
    info: &gguf_file::TensorInfo,
    kind: IQuant,
) -> Result<Vec<u8>> {
    let row = info.shape.dims().last().copied().unwrap_or(0);
    if !row.is_multiple_of(kind.block_values()) {
        return Err(Error::Msg(format!(
            "{} rows of {row} values: not whole {}-value blocks",
            kind.name(),
            kind.block_values()
        )));
    }
    let size = info.shape.elem_count() / kind.block_values() * kind.block_bytes();
    seek_tensor(file, tensor_data_offset, info, size)?;
    let mut bytes = vec![0u8; size];
    file.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// The file set at a tensor's first byte, once its `size` bytes are known to be in it.
pub(super) fn seek_tensor(
    file: &mut std::fs::File,
    tensor_data_offset: u64,
    info: &gguf_file::TensorInfo,
    size: usize,
) -> Result<()> {
    let start = tensor_data_offset.saturating_add(info.offset);
    let file_size = file.seek(SeekFrom::End(0))?;
    if start.saturating_add(size as u64) > file_size {
        return Err(Error::Msg(format!(
            "needs {size} bytes at offset {start}, the file has {file_size}"
        )));
    }
    file.seek(SeekFrom::Start(start))?;
    Ok(())
}

/// An i-quant tensor's blocks as the blocks it is held in (`IQuant::held_as`: Q8_0 or Q5_0),
/// converted on all threads, onto `device`: only the file bytes and the new blocks are held.
pub(super) fn iquant_to_held(
    bytes: &[u8],
    info: &gguf_file::TensorInfo,
    kind: IQuant,
    device: &Device,
) -> Result<QTensor> {
    if kind.held_as() == GgmlDType::Q5_0 {
        let groups_per_chunk = IQUANT_CHUNK_BLOCKS * kind.block_values() / 32;
        let mut out = vec![0u8; info.shape.elem_count() / 32 * iquant_held::Q5_0_BYTES];
        bytes
            .par_chunks(IQUANT_CHUNK_BLOCKS * kind.block_bytes())
            .zip(out.par_chunks_mut(groups_per_chunk * iquant_held::Q5_0_BYTES))
            .try_for_each(|(src, dst)| iquant_held::to_q5_0(kind, src, dst))
            .map_err(|e| Error::Msg(e.to_string()))?;
        let dims = info.shape.dims().to_vec();
        return candle_core::quantized::ggml_file::qtensor_from_ggml(
            GgmlDType::Q5_0,
            &out,
            dims,
            device,
        );
    }
    let mut out = vec![BlockQ8_0::zeros(); info.shape.elem_count() / 32];
    let per_block = kind.block_values() / 32;
    bytes
        .par_chunks(IQUANT_CHUNK_BLOCKS * kind.block_bytes())
        .zip(out.par_chunks_mut(IQUANT_CHUNK_BLOCKS * per_block))
        .try_for_each(|(src, dst)| iquant_held::to_q8_0(kind, src, dst))
        .map_err(|e| Error::Msg(e.to_string()))?;
    q8_0_blocks::onto(out, info.shape.dims().to_vec(), device)
}
