//! Weight formats and their products: the stored matrix and its dispatch (`matrix`), one
//! description per block format (`formats`), the kernels per ISA (`cpu`, their one table
//! `cpu::kernels`) and for CUDA (`cuda`).
//!
//! The rest of the model reaches weight formats through the names re-exported here (its one
//! door): the matrix and how its products are planned, the prefill products' setting and its
//! checks, the block formats a loader reads, the pieces of the prefill products the fused MLP
//! runs, and the lane sums attention's products share.

pub(crate) mod candle_products;
pub mod cpu;
pub mod cuda;
pub mod formats;
pub mod matrix;
pub mod products;

pub use cpu::prefill_gemm::{advice, check_prefill_gemm, int8_body, int8_body_override};
pub use formats::ggml_types::type_name as ggml_type_name;
pub use formats::iquant_held;
pub use formats::iquant_matrix::IqMatrix;
pub use formats::iquants::{self, IQuant};
pub(crate) use formats::q8_0_blocks;
pub use matrix::{DECODE_ROWS, Matrix, Plan, PrefillGemm, Products, WeightsMode};
// The prefill products' pieces that the fused MLP (`decoder::gated_mlp`) runs.
pub(crate) use cpu::prefill_gemm::{
    EXPANDED_VALUES, Operand, equal_blocks, on_real_rows, packed_product, takes as prefill_takes,
    weight_blocks,
};
// The f32 dot products' lane sums that attention's products share.
#[cfg(target_arch = "x86_64")]
pub(crate) use cpu::expanded_dots::avx2::hsum;
pub(crate) use cpu::f32_dots::dot_lanes;
