//! The device: placement, the CPU's features and its tensors' data, NVRTC compilation, stage
//! timing.

pub mod cpu;
pub(crate) mod cpu_tensor;
pub mod device;
pub mod gpu_kernels;
#[cfg(feature = "cuda")]
pub(crate) mod nvrtc;
pub mod stage_times;
