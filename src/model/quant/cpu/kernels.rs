//! The CPU's product kernels for every weight format, in one table chosen once per process
//! from the CPU's features (`backend::cpu::features`), as llama.cpp's `type_traits_cpu`: each
//! family's bodies per ISA live in their own files, and each family says here, once, which of
//! them this CPU runs. Adding a weight format is its facts in `quant/formats/`, its kernels in
//! a family's files, and its entry here. (The activations' rounding to 8 bits, which the
//! integer kernels' operands go through, is chosen once by `act_rounding` itself.)

use super::{block_dots, expanded_dots, f32_dots, iq_dots, kquant_dots};
use crate::model::quant::formats::block_format::BlockFormat;
use std::sync::OnceLock;

/// Every product kernel of the CPU, for this CPU.
pub struct CpuKernels {
    /// Q4_0 … Q8_0 rows times 8-bit activations (`block_dots`).
    pub legacy_rows: block_dots::LegacyDotRows,
    /// Q2_K … Q6_K rows times Q8_K activations (`kquant_dots`); None: no body on this CPU
    /// (candle's kernels multiply them).
    pub kquant_rows: Option<kquant_dots::KQuantDotRows>,
    /// i-quant rows times their activations (`iq_dots`).
    pub iquant_rows: iq_dots::IQuantDotRows,
    /// f32 rows (expanded weights) times f32 rows, a fixed summation order (`f32_dots`).
    pub f32_rows: f32_dots::F32DotRows,
    /// Blocks of expanded weights times activations (`expanded_dots`).
    pub expanded: expanded_dots::Dots,
}

impl CpuKernels {
    fn for_this_cpu() -> Self {
        CpuKernels {
            legacy_rows: block_dots::dot_rows_kernel(),
            kquant_rows: kquant_dots::dot_rows_kernel(),
            iquant_rows: iq_dots::dot_rows_kernel(),
            f32_rows: f32_dots::dot_kernel(),
            expanded: expanded_dots::kernel(),
        }
    }

    /// Whether a matrix of `format` is multiplied in integers here (several rows per pass over
    /// the weights) rather than by candle's kernels.
    pub fn integer_rows(&self, format: BlockFormat) -> bool {
        match format {
            BlockFormat::Legacy(_) => true,
            BlockFormat::KQuant(_) => self.kquant_rows.is_some(),
            BlockFormat::IQuant(_) => false,
        }
    }
}

/// The table for this CPU, chosen on first use.
pub fn kernels() -> &'static CpuKernels {
    static KERNELS: OnceLock<CpuKernels> = OnceLock::new();
    KERNELS.get_or_init(CpuKernels::for_this_cpu)
}
