//! Attention: one door (`door::run_attention`) to prefill, few-query and decoding attention on
//! the CPU and CUDA, and the softmax lanes they share.

pub(crate) mod attention_products;
pub mod decode_attention;
pub mod door;
pub(crate) mod expf_lanes;
pub mod few_queries;
pub mod fused_attention;
pub(crate) mod masked_softmax;
pub mod plan;
pub(crate) mod prefill_attention;
