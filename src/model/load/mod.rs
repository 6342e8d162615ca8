//! Reading a checkpoint: where its files are, GGUF and safetensors reads, the weights, the
//! architecture's configuration and rope.

pub mod checkpoint_files;
pub mod config;
pub mod default_model;
pub mod gguf_files;
pub mod gguf_tensor_reads;
pub(crate) mod gguf_types;
pub mod known_copies;
pub mod rope;
pub(crate) mod safetensors_reads;
pub mod source;
pub mod weights;
