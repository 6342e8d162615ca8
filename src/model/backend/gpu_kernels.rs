//! Which kernels run on CUDA (`--gpu-kernels`).

/// On CUDA, prefill attention runs in hyoka's fused kernel (`fused_attention`), a decoding
/// step's attention in hyoka's (`decode_attention`), GGUF blocks are expanded to bf16 by hyoka's
/// (`cuda_expand`), and devices open without cudarc's per-allocation events; `Candle` puts all
/// of these back on candle's ops, to compare or to get around a fault in a kernel. It changes
/// numbers in their last bits on a GPU, so a judge records it in its provenance when it is not
/// the default. Nothing changes on the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuKernels {
    #[default]
    Hyoka,
    Candle,
}

impl GpuKernels {
    pub fn name(self) -> &'static str {
        match self {
            GpuKernels::Hyoka => "hyoka",
            GpuKernels::Candle => "candle",
        }
    }

    /// Whether hyoka's own CUDA kernels run where they apply.
    pub fn hyoka(self) -> bool {
        self == GpuKernels::Hyoka
    }
}
