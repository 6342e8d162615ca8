//! GGUF blocks to bf16 on a GPU in one pass (`kernels/expand.cu`), for the GEMMs of weights kept
//! as stored, in bf16 on CUDA unless `--gpu-kernels candle` (`GpuKernels`). candle's
//! expansion writes f32 through blocks of 32 threads, then casts; these kernels make an 8B's
//! stored prefill on an H200 1.09× as fast alone and 1.16× with the fused attention. A thread
//! reads its group's bytes as whole words and rounds with `cvt.rn.bf16x2`: on an H100 a
//! 14,336 × 4,096 Q4_K matrix expands in 60 µs (2.5 TB/s read and written, against 2.8 for a
//! device-to-device copy), 82 µs reading a byte at a time and rounding in integer steps. Staging
//! a block's bytes in shared memory, expanding the next layer on a second stream (cuBLAS's GEMMs
//! hold every SM) or one reused buffer instead of the stream-ordered pool's would each move
//! prefill by under 1.3%, so none is done.
//! Each value is the CPU's expansion (candle's `to_float`) rounded to bf16, bit for bit
//! (tests/suite/expand_kernels.rs).

use crate::model::quant::formats::block_format::BlockFormat;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Result, Tensor};

/// The kernel for a block type: (name, bytes a block, values a block); None for the types it
/// does not take (candle's path expands those). `kernels/expand.cu` has one for each of
/// candle's block types that hyoka describes (`BlockFormat::of`), named as ggml names the type.
pub fn kernel(dtype: GgmlDType) -> Option<(&'static str, usize, usize)> {
    BlockFormat::of(dtype).map(|f| (f.ggml_name(), f.block_bytes(), f.block_values()))
}

/// `q` (on a GPU) expanded to bf16 by `kernels/expand.cu`; None where that does not apply (not
/// on CUDA, or a block type it does not take).
pub fn expand_bf16(q: &QTensor) -> Result<Option<Tensor>> {
    #[cfg(feature = "cuda")]
    if let (candle_core::Device::Cuda(dev), Some((name, _, _))) = (q.device(), kernel(q.dtype())) {
        use candle_core::cuda_backend::WrapErr;
        use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
        let values = q.shape().elem_count();
        let ptx = crate::model::backend::nvrtc::ptx(&dev, "kernels/expand.cu", EXPAND_CU)?;
        let func =
            dev.get_or_load_custom_func(&format!("expand_{name}_bf16"), "hyoka_expand", &ptx)?;
        // SAFETY: the kernel writes every value (values / 8 groups of 8).
        let out = unsafe { dev.alloc::<half::bf16>(values)? };
        let blocks = q.device_ptr()? as u64;
        let groups = values / 8;
        let cfg = LaunchConfig {
            grid_dim: (groups.div_ceil(THREADS * GROUPS_PER_THREAD) as u32, 1, 1),
            block_dim: (THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let groups = groups as i64;
        let mut b = func.builder();
        b.arg(&blocks);
        b.arg(&out);
        b.arg(&groups);
        // SAFETY: arguments as the kernel's signature; `blocks` holds values / per blocks (the
        // QTensor's shape), alive until the launch has run (the stream orders its release).
        unsafe { b.launch(cfg) }.w()?;
        let storage = candle_core::CudaStorage::wrap_cuda_slice(out, dev.clone());
        return Ok(Some(Tensor::from_storage(
            candle_core::Storage::Cuda(storage),
            q.shape().clone(),
            candle_core::op::BackpropOp::none(),
            false,
        )));
    }
    let _ = q;
    Ok(None)
}

/// Threads a block, and groups of 8 values a thread loads at once: the kernel's GROUPS (any grid
/// covers the matrix, this one has each thread load them once).
#[cfg(feature = "cuda")]
const THREADS: usize = 256;
#[cfg(feature = "cuda")]
const GROUPS_PER_THREAD: usize = 2;

#[cfg(feature = "cuda")]
const EXPAND_CU: &str = include_str!("../../../../kernels/expand.cu");
