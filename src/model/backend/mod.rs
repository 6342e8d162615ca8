//! The device: placement, NVRTC compilation, stage timing.

pub mod cpu;
pub mod device;
pub mod gpu_kernels;
#[cfg(feature = "cuda")]
pub(crate) mod nvrtc;
pub mod stage_times;
