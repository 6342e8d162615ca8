//! A judge model loaded: weights, tokenizer, chat template and what identifies them.

use candle_core::{DType, Device};
use std::path::Path;

use crate::model::decoder::transformer::Transformer;
use crate::model::error::ModelError;
use crate::model::load::checkpoint_files::{checkpoint_id_file, safetensors_files};
use crate::model::load::config::TransformerConfig;
use crate::model::load::gguf_files::GgufFiles;
use crate::model::load::{rope, source, weights};
use crate::model::quant::WeightsMode;
use crate::model::quant::iquants;
use crate::model::settings::RuntimeSettings;
use crate::model::tokenizer::{self, load_tokenizer};

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

/// Which judge model to load: a path or hub id, and what replaces or checks parts of it.
#[derive(Clone, Copy, Debug)]
pub struct ModelRequest<'a> {
    /// A GGUF file, a checkpoint folder, or a hub id (`owner/name`, `owner/name:file.gguf`).
    pub name: &'a str,
    /// tokenizer.json, or a folder with tokenizer.json and tokenizer_config.json, for models
    /// that lack one.
    pub tokenizer: Option<&'a Path>,
    /// A .jinja file, tokenizer_config.json, GGUF or folder whose chat template replaces the
    /// model's own, for models that carry none or a wrong one.
    pub chat_template: Option<&'a Path>,
    /// The weights' sha256 to check (`ModelError` when they differ).
    pub expect_sha256: Option<&'a str>,
}

impl<'a> ModelRequest<'a> {
    /// The model `name` with its own tokenizer and chat template, unchecked.
    pub fn new(name: &'a str) -> Self {
        ModelRequest {
            name,
            tokenizer: None,
            chat_template: None,
            expect_sha256: None,
        }
    }
}

impl LoadedModel {
    /// Resolve the requested model (path or hub id), load it on `device` and apply `settings`
    /// to its parts (weights, products, kernels, the template's date).
    pub fn load(
        request: &ModelRequest<'_>,
        device: &Device,
        settings: &RuntimeSettings,
    ) -> Result<Self, ModelError> {
        let ModelRequest {
            name,
            tokenizer,
            chat_template,
            expect_sha256,
        } = *request;
        let (dtype, mode) = (settings.dtype, settings.weights);
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
                    Some(path) => Ok::<_, ModelError>(
                        read_chat_template(path)?.with_model_special_tokens(model_specials()?),
                    ),
                    None => Ok(own()?),
                }
            };
        let (mut transformer, mut chat_template, tokenizer, weights_files, iquants_converted) =
            match files.format {
                source::Format::Gguf => {
                    // The header (vocabulary, template, config) is read once for all three.
                    let gguf = GgufFiles::open(&files.path)?;
                    let origin = files.path.display().to_string();
                    let chat_template = template_from(
                        &|| ChatTemplate::from_gguf_content(&gguf.content, &origin),
                        &|| Ok(chat_template::special_tokens_from_gguf(&gguf.content)),
                    )?;
                    let tok = tokenizer::load_tokenizer_with(
                        &files.path,
                        tokenizer,
                        Some(&gguf.content),
                    )?;
                    let paths = gguf.paths();
                    let (transformer, held) = load_gguf_files(gguf, dtype, device, mode)?;
                    (transformer, chat_template, tok, paths, held)
                }
                source::Format::Safetensors => {
                    let id_file = checkpoint_id_file(&files.path)?;
                    let chat_template =
                        template_from(&|| ChatTemplate::load(&files.path), &|| {
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
        check_tokenizer_fits(&tokenizer, &transformer.cfg, &files, request.tokenizer)?;
        let sha256 = match expect_sha256 {
            Some(expected) => source::verify_sha256_files(&weights_files, expected)?,
            None => source::sha256_files(&weights_files)?,
        };
        transformer.set_prefill_gemm(settings.prefill_gemm)?;
        transformer.set_gpu_kernels(settings.gpu_kernels);
        if let Some(date) = &settings.template_date {
            chat_template.set_date(date);
        }
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

impl LoadedModel {
    /// Tokens that end an answer: the model's eos and the usual end-of-turn markers.
    pub fn stop_tokens(&self) -> Vec<u32> {
        let mut names: Vec<String> = (self.chat_template.special_tokens())
            .get("eos_token")
            .cloned()
            .into_iter()
            .collect();
        names.extend(
            [
                "<|im_end|>",
                "<|endoftext|>",
                "<end_of_turn>",
                "<|eot_id|>",
                "</s>",
            ]
            .map(String::from),
        );
        (names.iter())
            .filter_map(|n| self.tokenizer.token_to_id(n))
            .collect()
    }

    /// The settings this model runs with, read from its parts (what `load` was given, and any
    /// change made to a part since).
    pub fn settings(&self) -> RuntimeSettings {
        let t = &self.transformer;
        RuntimeSettings {
            dtype: t.dtype(),
            weights: t.weights_mode(),
            prefill_gemm: t.prefill_gemm(),
            gpu_kernels: t.gpu_kernels(),
            template_date: self.chat_template.date().map(str::to_string),
        }
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
    check_gguf_shapes(&gguf.content, &cfg, &origin)?;
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

/// Every tensor the decoder reads has the shape the metadata describes, checked from the
/// header before a weight is read: a file whose numbers disagree with its tensors is named
/// with the tensor, not found out by a product of the wrong shape at the first batch.
fn check_gguf_shapes(
    content: &candle_core::quantized::gguf_file::Content,
    cfg: &TransformerConfig,
    origin: &str,
) -> Result<(), ModelError> {
    let (h, ffn, vocab) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let (q, kv) = (
        cfg.num_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
    );
    let mut expected: Vec<(String, [usize; 2])> = vec![("token_embd.weight".into(), [vocab, h])];
    if !cfg.tie_embeddings {
        expected.push(("output.weight".into(), [vocab, h]));
    }
    for i in 0..cfg.num_layers() {
        for (name, dims) in [
            ("attn_q", [q, h]),
            ("attn_k", [kv, h]),
            ("attn_v", [kv, h]),
            ("attn_output", [h, q]),
            ("ffn_gate", [ffn, h]),
            ("ffn_up", [ffn, h]),
            ("ffn_down", [h, ffn]),
        ] {
            expected.push((format!("blk.{i}.{name}.weight"), dims));
        }
    }
    for (name, dims) in expected {
        let Some(info) = content.tensor_infos.get(&name) else {
            continue; // a missing tensor is named where it is read
        };
        if info.shape.dims() != dims {
            return Err(ModelError::Config {
                origin: origin.to_string(),
                field: name,
                message: format!(
                    "shape {:?}, but the metadata describes {dims:?} (hidden {h}, {} heads and {} \
                     key/value heads of {}, feed-forward {ffn}, vocabulary {vocab})",
                    info.shape.dims(),
                    cfg.num_heads,
                    cfg.num_kv_heads,
                    cfg.head_dim
                ),
            });
        }
    }
    Ok(())
}

/// The tokenizer's ids index the embedding: an id past its rows would fail at the first batch.
/// Its vocabulary is checked, not the tokens added on top of it, which only a text holding their
/// literal strings produces (Gemma 3's tokenizer adds an image token past the 262,144 rows).
fn check_tokenizer_fits(
    tokenizer: &tokenizers::Tokenizer,
    cfg: &TransformerConfig,
    files: &source::ModelFiles,
    given: Option<&Path>,
) -> Result<(), ModelError> {
    let ids = tokenizer.get_vocab_size(false);
    if ids <= cfg.vocab_size {
        return Ok(());
    }
    let (origin, field) = match given {
        Some(path) => (path.display().to_string(), "--tokenizer".to_string()),
        None => (files.path.display().to_string(), "tokenizer".to_string()),
    };
    Err(ModelError::Config {
        origin,
        field,
        message: format!(
            "{ids} token ids, but the model's embedding has {} rows ({}): this tokenizer is not \
             the model's",
            cfg.vocab_size,
            files.path.display()
        ),
    })
}

/// A chat template from a file or folder (`--chat-template`): a GGUF's
/// `tokenizer.chat_template` (any shard of a split one: the metadata is in the first, which
/// `GgufFiles` finds and checks as a model load does), else what `ChatTemplate::load` reads.
pub fn read_chat_template(path: &Path) -> Result<crate::prompt::ChatTemplate, ModelError> {
    if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
        let files = GgufFiles::open(path)?;
        let file = files.path().display().to_string();
        return Ok(crate::prompt::ChatTemplate::from_gguf_content(
            &files.content,
            &file,
        )?);
    }
    Ok(crate::prompt::ChatTemplate::load(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shards written as llama-gguf-split writes them (the model's metadata in the first only):
    /// the second gives the first's template and special tokens; without the first beside it, an
    /// error naming the missing shard.
    #[test]
    fn a_later_shard_gives_the_first_shards_template() {
        use candle_core::quantized::gguf_file::{Value as Gv, write};
        let dir = tempfile::tempdir().unwrap();
        let shard = |no: u16, meta: &[(&str, &Gv)]| {
            let path = dir.path().join(format!("m-{:05}-of-00002.gguf", no + 1));
            let (split_no, count) = (Gv::U16(no), Gv::U16(2));
            let mut all = vec![("split.no", &split_no), ("split.count", &count)];
            all.extend_from_slice(meta);
            write(&mut std::fs::File::create(&path).unwrap(), &all, &[]).unwrap();
            path
        };
        let source = "{{ bos_token }}{% for m in messages %}[{{ m['content'] }}]{% endfor %}";
        let template = Gv::String(source.into());
        let tokens = Gv::Array(vec![Gv::String("<unk>".into()), Gv::String("<s>".into())]);
        let bos = Gv::U32(1);
        let first = shard(
            0,
            &[
                ("tokenizer.chat_template", &template),
                ("tokenizer.ggml.tokens", &tokens),
                ("tokenizer.ggml.bos_token_id", &bos),
            ],
        );
        let second = shard(1, &[]);
        let t = read_chat_template(&second).unwrap();
        let messages = [crate::prompt::chat_template::Message::new("user", "はい")];
        assert_eq!(t.render(&messages, true).unwrap(), "<s>[はい]");
        assert!(t.origin.contains("m-00001-of-00002.gguf"), "{}", t.origin);
        std::fs::remove_file(first).unwrap();
        let err = read_chat_template(&second).err().unwrap().to_string();
        assert!(
            err.contains("shard 1 of 2") && err.contains("is missing"),
            "{err}"
        );
    }
}
