//! One configuration for every decoder architecture hyoka runs, read from a Hugging Face
//! `config.json` (both the classic keys and transformers 5's `rope_parameters`) or from GGUF
//! metadata. The architectures differ only in the switches below.

use crate::model::error::ModelError;
use crate::model::load::rope::{Rope, RopeScaling, gguf_yarn, rope_scaling};
use candle_core::quantized::gguf_file;
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Gemma2,
    Gemma3,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Mistral => "mistral",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
        }
    }

    pub fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma2 | Arch::Gemma3)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Silu,
    /// gelu with the tanh approximation (`gelu_pytorch_tanh`).
    GeluTanh,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LayerKind {
    /// Keys at most this many positions back (the query's own included) are visible.
    pub sliding_window: Option<usize>,
    /// Index into `TransformerConfig::ropes`.
    pub rope: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TransformerConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f64,
    pub activation: Activation,
    /// Biases on the q, k and v projections (Qwen2).
    pub qkv_bias: bool,
    /// RMS norms on queries and keys per head (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Norms after attention and around the MLP too (Gemma 2/3), with weights stored as w - 1.
    pub gemma_blocks: bool,
    /// Multiplies the embeddings (Gemma: sqrt(hidden_size)).
    pub embed_scale: Option<f64>,
    /// Scale of q·k (1/sqrt(head_dim), or Gemma's query_pre_attn_scalar).
    pub attn_scale: f64,
    pub attn_softcap: Option<f64>,
    pub final_softcap: Option<f64>,
    pub tie_embeddings: bool,
    pub ropes: Vec<Rope>,
    pub layers: Vec<LayerKind>,
    pub max_position: usize,
}

impl TransformerConfig {
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// From a Hugging Face `config.json`.
    pub fn from_hf(cfg: &Value, origin: &str) -> Result<Self, ModelError> {
        let bad = |field: &str, message: String| ModelError::Config {
            origin: origin.to_string(),
            field: field.to_string(),
            message,
        };
        let model_type = cfg.get("model_type").and_then(Value::as_str).unwrap_or("");
        let arch = match model_type {
            "llama" => Arch::Llama,
            "mistral" => Arch::Mistral,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma2" => Arch::Gemma2,
            "gemma3_text" | "gemma3" => Arch::Gemma3,
            other => {
                return Err(ModelError::Unsupported {
                    origin: origin.to_string(),
                    what: format!(
                        "architecture {other:?} (supported: llama, mistral, qwen2, qwen3, gemma2, gemma3)"
                    ),
                });
            }
        };
        // Gemma 3 multimodal checkpoints nest the language model's config.
        let cfg = if model_type == "gemma3" {
            cfg.get("text_config").unwrap_or(cfg)
        } else {
            cfg
        };
        let usize_of = |k: &str| cfg.get(k).and_then(Value::as_u64).map(|v| v as usize);
        let f64_of = |k: &str| cfg.get(k).and_then(Value::as_f64);
        let need =
            |k: &str| usize_of(k).ok_or_else(|| bad(k, "missing or not a positive integer".into()));
        let hidden_size = need("hidden_size")?;
        let num_heads = need("num_attention_heads")?;
        let num_layers = need("num_hidden_layers")?;
        check_counts(
            origin,
            &[
                ("hidden_size", hidden_size, MAX_COUNT),
                ("num_attention_heads", num_heads, MAX_COUNT),
                ("num_hidden_layers", num_layers, MAX_LAYERS),
            ],
        )?;
        let head_dim = usize_of("head_dim").unwrap_or(hidden_size / num_heads);
        let gemma = arch.is_gemma();
        let act = cfg
            .get("hidden_activation")
            .or_else(|| cfg.get("hidden_act"))
            .and_then(Value::as_str)
            .unwrap_or("silu");
        let activation = match act {
            "silu" | "swish" => Activation::Silu,
            "gelu_pytorch_tanh" | "gelu_tanh" | "gelu_new" => Activation::GeluTanh,
            other => {
                return Err(bad(
                    "hidden_act",
                    format!("unsupported activation {other:?}"),
                ));
            }
        };
        let sliding_window = usize_of("sliding_window");
        let layer_types: Option<Vec<String>> = cfg
            .get("layer_types")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let sliding: Vec<bool> = (0..num_layers)
            .map(|i| match arch {
                Arch::Mistral => sliding_window.is_some(),
                Arch::Qwen2 | Arch::Qwen3 => {
                    cfg.get("use_sliding_window")
                        .and_then(Value::as_bool)
                        .unwrap_or(false)
                        && layer_types
                            .as_ref()
                            .is_some_and(|t| t.get(i).is_some_and(|t| t == "sliding_attention"))
                }
                Arch::Llama => false,
                Arch::Gemma2 => layer_types.as_ref().map_or(i % 2 == 0, |t| {
                    t.get(i).is_some_and(|t| t == "sliding_attention")
                }),
                Arch::Gemma3 => layer_types.as_ref().map_or_else(
                    || (i + 1) % usize_of("sliding_window_pattern").unwrap_or(6) != 0,
                    |t| t.get(i).is_some_and(|t| t == "sliding_attention"),
                ),
            })
            .collect();
        if sliding.iter().any(|s| *s) && sliding_window.is_none() {
            return Err(bad(
                "sliding_window",
                "sliding layers need a sliding_window".into(),
            ));
        }
        // transformers 5 nests rope settings (per layer type for Gemma 3); older configs use
        // rope_theta / rope_scaling / rope_local_base_freq at the top level.
        let context = (
            f64_of("original_max_position_embeddings"),
            f64_of("max_position_embeddings"),
        );
        let rope_from = |p: &Value, default_theta: f64| -> Result<Rope, ModelError> {
            let theta = p
                .get("rope_theta")
                .and_then(Value::as_f64)
                .unwrap_or(default_theta);
            Ok(Rope {
                theta,
                scaling: rope_scaling(p, context, origin)?,
            })
        };
        let default_theta = f64_of("rope_theta").unwrap_or(10000.0);
        let params = cfg.get("rope_parameters");
        let full = match params {
            Some(p) if p.get("full_attention").is_some() => {
                rope_from(&p["full_attention"], default_theta)?
            }
            Some(p) => rope_from(p, default_theta)?,
            None => Rope {
                theta: default_theta,
                scaling: cfg
                    .get("rope_scaling")
                    .map_or(Ok(RopeScaling::None), |s| rope_scaling(s, context, origin))?,
            },
        };
        let mut ropes = vec![full];
        if arch == Arch::Gemma3 {
            let local = match params.and_then(|p| p.get("sliding_attention")) {
                Some(p) => rope_from(p, 10000.0)?,
                None => Rope {
                    theta: f64_of("rope_local_base_freq").unwrap_or(10000.0),
                    scaling: RopeScaling::None,
                },
            };
            ropes.push(local);
        }
        let layers = sliding
            .iter()
            .map(|&s| LayerKind {
                sliding_window: if s { sliding_window } else { None },
                rope: if s && arch == Arch::Gemma3 { 1 } else { 0 },
            })
            .collect();
        let attn_scale = match f64_of("query_pre_attn_scalar") {
            Some(s) if gemma => 1.0 / s.sqrt(),
            _ => 1.0 / (head_dim as f64).sqrt(),
        };
        let config = TransformerConfig {
            arch,
            vocab_size: need("vocab_size")?,
            hidden_size,
            intermediate_size: need("intermediate_size")?,
            num_heads,
            num_kv_heads: usize_of("num_key_value_heads").unwrap_or(num_heads),
            head_dim,
            rms_eps: f64_of("rms_norm_eps").unwrap_or(1e-6),
            activation,
            qkv_bias: arch == Arch::Qwen2
                || cfg
                    .get("attention_bias")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3),
            gemma_blocks: gemma,
            embed_scale: gemma.then(|| (hidden_size as f64).sqrt()),
            attn_scale,
            attn_softcap: if gemma {
                f64_of("attn_logit_softcapping")
            } else {
                None
            },
            final_softcap: if gemma {
                f64_of("final_logit_softcapping")
            } else {
                None
            },
            tie_embeddings: cfg
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(gemma),
            ropes,
            layers,
            max_position: usize_of("max_position_embeddings").unwrap_or(4096),
        };
        config.check(
            origin,
            &Names {
                kv_heads: "num_key_value_heads".into(),
                head_dim: "head_dim".into(),
                ffn: "intermediate_size".into(),
                vocab: "vocab_size".into(),
                eps: "rms_norm_eps".into(),
                theta: "rope_theta".into(),
                max_position: "max_position_embeddings".into(),
            },
        )?;
        Ok(config)
    }

    /// From GGUF metadata (`general.architecture` and `<arch>.*` keys, as llama.cpp writes them).
    pub fn from_gguf(
        ct: &gguf_file::Content,
        vocab_size: usize,
        origin: &str,
    ) -> Result<Self, ModelError> {
        let arch_name = meta_str(ct, "general.architecture").unwrap_or_default();
        let arch = match arch_name.as_str() {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma2" => Arch::Gemma2,
            "gemma3" => Arch::Gemma3,
            other => {
                return Err(ModelError::Unsupported {
                    origin: origin.to_string(),
                    what: format!(
                        "GGUF architecture {other:?} (supported: llama, qwen2, qwen3, gemma2, gemma3)"
                    ),
                });
            }
        };
        let a = arch_name.as_str();
        let bad = |field: &str| ModelError::Config {
            origin: origin.to_string(),
            field: field.to_string(),
            message: "missing from the GGUF metadata".into(),
        };
        let get_u = |k: &str| {
            ct.metadata
                .get(&format!("{a}.{k}"))
                .and_then(|v| v.to_u64().ok().or_else(|| v.to_u32().ok().map(u64::from)))
                .map(|v| v as usize)
        };
        // A number of any type (converters write some float settings as integers).
        let get_f = |k: &str| {
            ct.metadata.get(&format!("{a}.{k}")).and_then(|v| {
                (v.to_f32().ok().map(f64::from))
                    .or_else(|| v.to_f64().ok())
                    .or_else(|| v.to_u32().ok().map(f64::from))
                    .or_else(|| v.to_i32().ok().map(f64::from))
                    .or_else(|| v.to_u64().ok().map(|u| u as f64))
            })
        };
        let hidden_size = get_u("embedding_length").ok_or_else(|| bad("embedding_length"))?;
        let num_heads = get_u("attention.head_count").ok_or_else(|| bad("attention.head_count"))?;
        let num_layers = get_u("block_count").ok_or_else(|| bad("block_count"))?;
        check_counts(
            origin,
            &[
                (&format!("{a}.embedding_length"), hidden_size, MAX_COUNT),
                (&format!("{a}.attention.head_count"), num_heads, MAX_COUNT),
                (&format!("{a}.block_count"), num_layers, MAX_LAYERS),
            ],
        )?;
        let head_dim = get_u("attention.key_length").unwrap_or(hidden_size / num_heads);
        let gemma = arch.is_gemma();
        let sliding_window = get_u("attention.sliding_window");
        let layers: Vec<LayerKind> = (0..num_layers)
            .map(|i| {
                let sliding = match arch {
                    Arch::Gemma2 => i % 2 == 0,
                    Arch::Gemma3 => (i + 1) % 6 != 0,
                    _ => false,
                } && sliding_window.is_some();
                LayerKind {
                    sliding_window: if sliding { sliding_window } else { None },
                    rope: usize::from(sliding && arch == Arch::Gemma3),
                }
            })
            .collect();
        let theta = get_f("rope.freq_base").unwrap_or(10000.0);
        // llama.cpp writes rope.scaling.type none | linear | yarn | longrope; llama3 scaling
        // comes as a `rope_freqs.weight` tensor instead (read with the weights, `load_gguf`).
        let unsupported = |what: String| ModelError::Unsupported {
            origin: origin.to_string(),
            what,
        };
        let factor = || match get_f("rope.scaling.factor") {
            Some(f) if f.is_finite() && f > 0.0 => Ok(Some(f)),
            Some(f) => Err(unsupported(format!("rope.scaling.factor {f}"))),
            None => Ok(None),
        };
        let scaling = match meta_str(ct, &format!("{a}.rope.scaling.type")).as_deref() {
            None | Some("none") => RopeScaling::None,
            Some("linear") => match factor()? {
                None => RopeScaling::None,
                Some(factor) => RopeScaling::Linear { factor },
            },
            Some("yarn") => {
                gguf_yarn(factor()?, &get_f, get_u("context_length")).map_err(unsupported)?
            }
            Some(other) => {
                return Err(unsupported(format!(
                    "rope scaling {other:?} in the GGUF metadata (supported: none, linear, yarn, and llama3 frequency factors in rope_freqs.weight)"
                )));
            }
        };
        if scaling != RopeScaling::None && ct.tensor_infos.contains_key("rope_freqs.weight") {
            return Err(unsupported(
                "rope_freqs.weight together with rope scaling in the metadata".into(),
            ));
        }
        let mut ropes = vec![Rope { theta, scaling }];
        if arch == Arch::Gemma3 {
            ropes.push(Rope {
                theta: get_f("rope.freq_base_swa").unwrap_or(10000.0),
                scaling: RopeScaling::None,
            });
        }
        let key_length = head_dim as f64;
        let config = TransformerConfig {
            arch,
            vocab_size,
            hidden_size,
            intermediate_size: get_u("feed_forward_length")
                .ok_or_else(|| bad("feed_forward_length"))?,
            num_heads,
            num_kv_heads: get_u("attention.head_count_kv").unwrap_or(num_heads),
            head_dim,
            rms_eps: get_f("attention.layer_norm_rms_epsilon").unwrap_or(1e-6),
            activation: if gemma {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            qkv_bias: arch == Arch::Qwen2,
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3),
            gemma_blocks: gemma,
            embed_scale: gemma.then(|| (hidden_size as f64).sqrt()),
            // llama.cpp's Gemma uses 1/sqrt(head_dim), which is query_pre_attn_scalar for the
            // released Gemma 2/3 sizes it converts.
            attn_scale: 1.0 / key_length.sqrt(),
            attn_softcap: if arch == Arch::Gemma2 {
                get_f("attn_logit_softcapping").or(Some(50.0))
            } else {
                None
            },
            final_softcap: if arch == Arch::Gemma2 {
                get_f("final_logit_softcapping").or(Some(30.0))
            } else {
                None
            },
            tie_embeddings: !ct.tensor_infos.contains_key("output.weight"),
            ropes,
            layers,
            max_position: get_u("context_length").unwrap_or(4096),
        };
        let key = |k: &str| format!("{a}.{k}");
        config.check(
            origin,
            &Names {
                kv_heads: key("attention.head_count_kv"),
                head_dim: key("attention.key_length"),
                ffn: key("feed_forward_length"),
                vocab: "token_embd.weight".into(),
                eps: key("attention.layer_norm_rms_epsilon"),
                theta: key("rope.freq_base"),
                max_position: key("context_length"),
            },
        )?;
        Ok(config)
    }

    /// Every number a model's shapes and arithmetic are made from, checked against the limits
    /// of [`check_counts`] and for what the arithmetic needs (heads that share keys evenly, an
    /// even rotary width, a positive finite norm epsilon and rope base): a header from
    /// elsewhere is believed only once it describes a model that can be built.
    fn check(&self, origin: &str, names: &Names) -> Result<(), ModelError> {
        let bad = |field: &str, message: String| {
            Err(ModelError::Config {
                origin: origin.to_string(),
                field: field.to_string(),
                message,
            })
        };
        check_counts(
            origin,
            &[
                (&names.kv_heads, self.num_kv_heads, MAX_COUNT),
                (&names.head_dim, self.head_dim, MAX_COUNT),
                (&names.ffn, self.intermediate_size, MAX_COUNT),
                (&names.vocab, self.vocab_size, MAX_COUNT),
                (&names.max_position, self.max_position, usize::MAX),
            ],
        )?;
        if self.num_kv_heads > self.num_heads || !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(
                &names.kv_heads,
                format!(
                    "{} key/value heads cannot be shared evenly by {} query heads",
                    self.num_kv_heads, self.num_heads
                ),
            );
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(
                &names.head_dim,
                format!(
                    "{}: rotary embeddings need an even head width",
                    self.head_dim
                ),
            );
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0) {
            return bad(
                &names.eps,
                format!("{}: must be a positive finite number", self.rms_eps),
            );
        }
        if let Some(rope) = self
            .ropes
            .iter()
            .find(|r| !(r.theta.is_finite() && r.theta > 0.0))
        {
            return bad(
                &names.theta,
                format!("{}: must be a positive finite number", rope.theta),
            );
        }
        Ok(())
    }
}

/// The names a model's format gives the numbers [`TransformerConfig::check`] checks.
struct Names {
    kv_heads: String,
    head_dim: String,
    ffn: String,
    vocab: String,
    eps: String,
    theta: String,
    max_position: String,
}

/// The largest width, head count or vocabulary a model's header may give: far above any
/// released model's, far below what would exhaust memory when believed.
const MAX_COUNT: usize = 1 << 24;
/// The most layers: each is described before any weight is read.
const MAX_LAYERS: usize = 4096;

/// Each (field, value, most) is at least 1 and at most `most`.
fn check_counts(origin: &str, counts: &[(&str, usize, usize)]) -> Result<(), ModelError> {
    match counts.iter().find(|(_, v, most)| *v == 0 || v > most) {
        Some((field, v, most)) => Err(ModelError::Config {
            origin: origin.to_string(),
            field: field.to_string(),
            message: format!("{v}: must be between 1 and {most}"),
        }),
        None => Ok(()),
    }
}

pub(crate) fn meta_str(ct: &gguf_file::Content, key: &str) -> Option<String> {
    ct.metadata
        .get(key)
        .and_then(|v| v.to_string().ok())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::TransformerConfig;
    use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
    use std::collections::HashMap;

    /// A Llama header of a small real shape, with `edit` applied to its metadata.
    fn header(edit: &[(&str, Value)]) -> Content {
        let mut metadata: HashMap<String, Value> = [
            ("general.architecture", Value::String("llama".into())),
            ("llama.embedding_length", Value::U32(64)),
            ("llama.attention.head_count", Value::U32(4)),
            ("llama.attention.head_count_kv", Value::U32(2)),
            ("llama.block_count", Value::U32(2)),
            ("llama.feed_forward_length", Value::U32(128)),
            ("llama.rope.freq_base", Value::F32(10000.0)),
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (k, v) in edit {
            metadata.insert(k.to_string(), v.clone());
        }
        Content {
            magic: VersionedMagic::GgufV3,
            metadata,
            tensor_infos: HashMap::new(),
            tensor_data_offset: 0,
        }
    }

    /// Numbers from a hostile header that would divide by zero, allocate without bound or make
    /// every logit NaN are refused with the key that holds them, before anything is built.
    #[test]
    fn hostile_header_numbers_are_refused_by_key() {
        assert!(TransformerConfig::from_gguf(&header(&[]), 100, "m.gguf").is_ok());
        for (key, value, says) in [
            ("llama.attention.head_count", Value::U32(0), "between 1 and"),
            (
                "llama.attention.head_count_kv",
                Value::U32(0),
                "between 1 and",
            ),
            (
                "llama.attention.head_count_kv",
                Value::U32(3),
                "shared evenly",
            ),
            (
                "llama.block_count",
                Value::U64(1 << 31),
                "between 1 and 4096",
            ),
            ("llama.embedding_length", Value::U32(0), "between 1 and"),
            (
                "llama.feed_forward_length",
                Value::U64(u64::MAX),
                "between 1 and",
            ),
            (
                "llama.attention.key_length",
                Value::U32(7),
                "even head width",
            ),
            (
                "llama.rope.freq_base",
                Value::F32(f32::NAN),
                "positive finite",
            ),
            (
                "llama.attention.layer_norm_rms_epsilon",
                Value::F32(-1.0),
                "positive finite",
            ),
        ] {
            let err = TransformerConfig::from_gguf(&header(&[(key, value)]), 100, "m.gguf")
                .expect_err(key)
                .to_string();
            assert!(
                err.starts_with(&format!("m.gguf: {key}: ")) && err.contains(says),
                "{key}: {err}"
            );
        }
        let err = TransformerConfig::from_gguf(&header(&[]), 0, "m.gguf")
            .unwrap_err()
            .to_string();
        assert!(err.contains("token_embd.weight"), "{err}");
    }
}
