//! Stage 5 — the judge model: a batched causal-LM runtime in candle for llama, mistral, qwen2,
//! qwen3, gemma2 and gemma3 checkpoints (safetensors or GGUF), and the BERTScore encoder.
//!
//! `loaded_model`: a judge model ready to run (its files, decoder, tokenizer and chat template),
//! above the parts it joins. By concern: `load` (checkpoint files, GGUF and safetensors,
//! weights, configuration),
//! `tokenizer`, `quant` (weight formats and their products), `attention`, `decoder`
//! (transformer, MLP, batch, KV cache), `encoder`, `backend` (device, NVRTC, stage timing);
//! `settings`, the runtime settings as one value.

pub mod attention;
pub mod backend;
pub mod decoder;
pub mod encoder;
pub mod error;
pub mod load;
pub mod loaded_model;
pub mod quant;
pub mod runtime_options;
pub mod settings;
pub mod tokenizer;

pub use decoder::batch::{Batch, Row, plan_batches};
pub use decoder::decode::{KvCache, LiveRows};
pub use decoder::transformer::{PrefixKv, Transformer};
pub use error::ModelError;
pub use load::checkpoint_files::{checkpoint_id_file, read_gguf, safetensors_files};
pub use load::config::{Arch, TransformerConfig};
pub use loaded_model::{
    LoadedModel, ModelRequest, load_gguf, load_gguf_files, load_safetensors_dir,
};
pub use quant::matrix::{Products, WeightsMode};
pub use runtime_options::RuntimeOptions;
pub use settings::RuntimeSettings;
pub use tokenizer::load_tokenizer;
