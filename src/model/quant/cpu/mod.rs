//! The CPU kernels of the weight formats' products.

pub(crate) mod act_rounding;
pub mod bf16_gemm;
pub mod block_dots;
pub(crate) mod dense_rows;
pub(crate) mod expand_blocks;
pub(crate) mod expanded_dots;
pub(crate) mod f32_dots;
pub(crate) mod int8_products;
pub mod iq_dots;
pub mod iq_rows;
pub mod kernels;
pub mod kquant_dots;
pub(crate) mod kquant_expand;
pub mod prefill_gemm;
pub(crate) mod row_tasks;
pub(crate) mod token_runs;
