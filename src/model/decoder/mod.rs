//! The decoder: transformer layers, gated MLP, the batch of rows and the KV cache.

pub mod batch;
pub mod decode;
pub(crate) mod gated_mlp;
pub mod generate;
pub(crate) mod layers;
pub mod log_probs;
pub mod segments;
pub(crate) mod swiglu;
pub mod transformer;
