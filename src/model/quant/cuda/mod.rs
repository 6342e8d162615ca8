//! The CUDA kernels of the weight formats.

pub mod cuda_expand;
