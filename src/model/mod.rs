//! Stage 5 — the judge model: a batched causal-LM runtime in candle for llama, mistral, qwen2,
//! qwen3, gemma2 and gemma3 checkpoints (safetensors or GGUF).

mod act_rounding;
mod attention_products;
pub mod batch;
pub mod bf16_gemm;
pub mod block_dots;
pub mod config;
pub mod cuda_expand;
pub mod decode;
pub mod decode_attention;
mod dense_rows;
pub mod device;
pub mod encoder;
mod expanded_dots;
mod expf_lanes;
pub mod few_queries;
pub mod fused;
pub mod fused_attention;
mod gated_mlp;
pub mod gguf_files;
mod gguf_types;
mod int8_runs;
pub mod iq_dots;
pub mod iq_rows;
mod iquant_grids;
pub mod iquants;
pub mod kquant_dots;
mod kquant_expand;
mod layers;
mod masked_softmax;
pub mod matrix;
#[cfg(feature = "cuda")]
mod nvrtc;
mod prefill_attention;
pub mod prefill_gemm;
mod q8_0_blocks;
pub mod rope;
mod row_tasks;
mod runs;
mod safetensors_reads;
pub mod source;
mod spm_gguf;
pub mod stage_times;
mod swiglu;
pub mod tokenizer;
pub mod transformer;
pub mod weights;

pub use batch::{Batch, Row};
pub use config::{Arch, TransformerConfig};
pub use decode::KvCache;
pub use matrix::{Products, WeightsMode};
pub use tokenizer::load_tokenizer;
pub use transformer::{PrefixKv, Transformer};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};
use gguf_files::GgufFiles;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: {field}: {message}")]
    Config {
        origin: String,
        field: String,
        message: String,
    },
    #[error("{origin}: unsupported {what}")]
    Unsupported { origin: String, what: String },
    #[error("{origin}: {message}")]
    Missing { origin: String, message: String },
    #[error("{origin}: sha256 {got}, expected {expected}")]
    Checksum {
        origin: String,
        expected: String,
        got: String,
    },
    #[error("--device {spec}: {message}")]
    Device { spec: String, message: String },
    #[error("--dtype {spec}: {message}")]
    Dtype { spec: String, message: String },
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Template(#[from] crate::prompt::TemplateError),
}

/// A judge model ready to run: weights, tokenizer, chat template and what identifies them.
pub struct LoadedModel {
    pub transformer: Transformer,
    pub tokenizer: tokenizers::Tokenizer,
    pub chat_template: crate::prompt::ChatTemplate,
    pub files: source::ModelFiles,
    /// sha256 of the weights file (GGUF; a split GGUF's shards in order, as one stream) or of
    /// model.safetensors / the shard index.
    pub sha256: String,
    /// The GGUF's i-quant types held in other blocks (`IQuant::held_as`: Q8_0 or Q5_0, their
    /// values slightly rounded: `iquants`), with their tensor counts; empty when none is.
    pub iquants_converted: Vec<(iquants::IQuant, usize)>,
}

impl LoadedModel {
    /// Resolve `name` (path or hub id), load it on `device`, and check `expect_sha256` if given.
    /// `chat_template` (a .jinja file, tokenizer_config.json, GGUF or folder) replaces the
    /// model's own template, for models that carry none or a wrong one.
    pub fn load(
        name: &str,
        tokenizer: Option<&Path>,
        chat_template: Option<&Path>,
        dtype: DType,
        device: &Device,
        mode: WeightsMode,
        expect_sha256: Option<&str>,
    ) -> Result<Self, ModelError> {
        let files = source::resolve(name)?;
        // The template given with --chat-template; else one a tokenizer folder given with
        // --tokenizer carries (tokenizer_config.json); else the model's own.
        let override_template = chat_template.map(Path::to_path_buf).or_else(|| {
            tokenizer
                .filter(|p| p.is_dir())
                .map(|p| p.join("tokenizer_config.json"))
                .filter(|p| p.is_file())
        });
        use crate::prompt::{ChatTemplate, TemplateError, chat_template};
        type Specials = std::collections::BTreeMap<String, String>;
        let template_from =
            |own: &dyn Fn() -> Result<ChatTemplate, TemplateError>,
             model_specials: &dyn Fn() -> Result<Specials, TemplateError>| {
                match &override_template {
                    Some(path) => {
                        Ok(ChatTemplate::load(path)?.with_model_special_tokens(model_specials()?))
                    }
                    None => own(),
                }
            };
        let (transformer, chat_template, tokenizer, weights_files, iquants_converted) = match files
            .format
        {
            source::Format::Gguf => {
                // The header (vocabulary, template, config) is read once for all three.
                let gguf = GgufFiles::open(&files.path)?;
                let origin = files.path.display().to_string();
                let chat_template = template_from(
                    &|| ChatTemplate::from_gguf_content(&gguf.content, &origin),
                    &|| Ok(chat_template::special_tokens_from_gguf(&gguf.content)),
                )?;
                let tok =
                    tokenizer::load_tokenizer_with(&files.path, tokenizer, Some(&gguf.content))?;
                let paths = gguf.paths();
                let (transformer, held) = load_gguf_files(gguf, dtype, device, mode)?;
                (transformer, chat_template, tok, paths, held)
            }
            source::Format::Safetensors => {
                let id_file = checkpoint_id_file(&files.path)?;
                let chat_template = template_from(&|| ChatTemplate::load(&files.path), &|| {
                    chat_template::special_tokens_of_folder(&files.path)
                })?;
                let tok = load_tokenizer(&files.path, tokenizer)?;
                (
                    load_safetensors_dir(&files.path, dtype, device, mode)?,
                    chat_template,
                    tok,
                    vec![id_file],
                    Vec::new(),
                )
            }
        };
        let sha256 = match expect_sha256 {
            Some(expected) => source::verify_sha256_files(&weights_files, expected)?,
            None => source::sha256_files(&weights_files)?,
        };
        Ok(LoadedModel {
            transformer,
            tokenizer,
            chat_template,
            files,
            sha256,
            iquants_converted,
        })
    }
}

/// Load a Hugging Face checkpoint folder: config.json plus model.safetensors or the shards of
/// model.safetensors.index.json, computing in `dtype` with the weights held as `mode` says.
pub fn load_safetensors_dir(
    dir: &Path,
    dtype: DType,
    device: &Device,
    mode: WeightsMode,
) -> Result<Transformer, ModelError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelError::Io { path, source }
    };
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(io(&config_path))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Config {
        origin: config_path.display().to_string(),
        field: String::new(),
        message: format!("not valid JSON: {e}"),
    })?;
    let cfg = TransformerConfig::from_hf(&json, &config_path.display().to_string())?;
    let files = safetensors_files(dir)?;
    let weights = weights::Weights::safetensors(&files, dtype, device, mode)?;
    Ok(Transformer::load(&weights, cfg)?)
}

/// The file whose sha256 identifies a checkpoint folder: model.safetensors, or the shard index.
pub fn checkpoint_id_file(dir: &Path) -> Result<PathBuf, ModelError> {
    let main = safetensors_files(dir)?;
    Ok(if main.len() == 1 {
        main[0].clone()
    } else {
        dir.join("model.safetensors.index.json")
    })
}

/// The safetensors files of a checkpoint folder (single file or sharded).
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).map_err(|_| ModelError::Missing {
        origin: dir.display().to_string(),
        message: "no model.safetensors or model.safetensors.index.json".into(),
    })?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Config {
        origin: index.display().to_string(),
        field: String::new(),
        message: format!("not valid JSON: {e}"),
    })?;
    let mut files: Vec<PathBuf> = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| ModelError::Config {
            origin: index.display().to_string(),
            field: "weight_map".into(),
            message: "missing".into(),
        })?
        .values()
        .filter_map(|v| v.as_str())
        .map(|f| dir.join(f))
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Read a GGUF model's header: metadata and tensor descriptions (of every shard of a split one).
pub fn read_gguf(path: &Path) -> Result<gguf_file::Content, ModelError> {
    Ok(GgufFiles::open(path)?.content)
}

/// Load a GGUF model (a file, or any shard of a split one), computing in `dtype` with the
/// weights held as `mode` says.
pub fn load_gguf(
    path: &Path,
    dtype: DType,
    device: &Device,
    mode: WeightsMode,
) -> Result<Transformer, ModelError> {
    load_gguf_files(GgufFiles::open(path)?, dtype, device, mode).map(|(t, _)| t)
}

/// The per-frequency rope divisors llama.cpp's converter stores for llama3 scaling (Llama 3.1
/// and later), one per pair of head dimensions; None without them.
fn rope_factors(gguf: &GgufFiles, head_dim: usize) -> Result<Option<Vec<f64>>, ModelError> {
    const NAME: &str = "rope_freqs.weight";
    if !gguf.content.tensor_infos.contains_key(NAME) {
        return Ok(None);
    }
    let bad = |message: String| ModelError::Missing {
        origin: gguf.path().display().to_string(),
        message: format!("{NAME}: {message}"),
    };
    let factors: Vec<f64> = gguf
        .tensor(NAME, &Device::Cpu)
        .and_then(|t| t.dequantize(&Device::Cpu))
        .and_then(|t| t.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>())
        .map_err(|e| bad(e.to_string()))?;
    if factors.len() != head_dim / 2 {
        return Err(bad(format!(
            "{} factors for a head dimension of {head_dim} (needs {})",
            factors.len(),
            head_dim / 2
        )));
    }
    if let Some(f) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        return Err(bad(format!("a factor of {f}: must be finite and > 0")));
    }
    Ok(Some(factors))
}

/// Load a GGUF model whose headers were already read; with it, the i-quant types held in other
/// blocks and their tensor counts (`Weights::iquants_converted`).
pub fn load_gguf_files(
    gguf: GgufFiles,
    dtype: DType,
    device: &Device,
    mode: WeightsMode,
) -> Result<(Transformer, Vec<(iquants::IQuant, usize)>), ModelError> {
    let origin = gguf.path().display().to_string();
    let vocab = gguf
        .content
        .tensor_infos
        .get("token_embd.weight")
        .map(|t| t.shape.dims()[0])
        .ok_or_else(|| ModelError::Missing {
            origin: origin.clone(),
            message: "no token_embd.weight tensor".into(),
        })?;
    let mut cfg = TransformerConfig::from_gguf(&gguf.content, vocab, &origin)?;
    if let Some(factors) = rope_factors(&gguf, cfg.head_dim)? {
        cfg.ropes[0].scaling = rope::RopeScaling::Factors(factors);
    }
    let weights = weights::Weights::gguf(
        gguf,
        cfg.arch,
        cfg.num_heads,
        cfg.num_kv_heads,
        dtype,
        device,
        mode,
    );
    Ok((
        Transformer::load(&weights, cfg)?,
        weights.iquants_converted(),
    ))
}

/// `HYOKA_GPU_KERNELS`: `hyoka` (the default) or `candle`. On CUDA, prefill attention runs
/// in hyoka's fused kernel (`fused_attention`) and GGUF blocks are expanded to bf16 by hyoka's
/// (`cuda_expand`); `candle` puts both back on candle's ops, to compare or to get around a fault
/// in a kernel. Read once; the value, when set, is in a judge's provenance (it changes numbers
/// in their last bits), and one not understood is refused when a GPU is opened
/// (`device::parse_device`).
pub fn gpu_kernels() -> Option<&'static str> {
    static ON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let on = ON.get_or_init(|| std::env::var(GPU_KERNELS).unwrap_or_default());
    (!on.is_empty()).then_some(on.as_str())
}

pub const GPU_KERNELS: &str = "HYOKA_GPU_KERNELS";

/// Whether hyoka's own CUDA kernels are in use where they apply (`gpu_kernels`).
pub(crate) fn hyoka_gpu_kernels() -> bool {
    gpu_kernels() != Some("candle")
}
