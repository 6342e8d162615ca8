//! The encoders BERTScore reads: BERT, RoBERTa / XLM-RoBERTa and DistilBERT (post-norm blocks,
//! bidirectional attention over a padded batch). `load` keeps only the layers up to the one
//! BERTScore reads, so nothing after it is computed.

pub mod fused;

use crate::model::encoder::fused::{Dense, Epilogue, LayerNorm, TokenLayout};
use crate::model::error::ModelError;
use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarBuilder;
use serde_json::Value;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncoderKind {
    Bert,
    /// RoBERTa and XLM-RoBERTa: positions count real tokens from padding_idx + 1.
    Roberta,
    DistilBert,
}

#[derive(Clone, Debug)]
pub struct EncoderConfig {
    pub kind: EncoderKind,
    pub model_type: String,
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub eps: f64,
    pub max_position: usize,
    pub pad_token_id: u32,
}

impl EncoderConfig {
    pub fn from_json(v: &Value, origin: &str) -> std::result::Result<Self, ModelError> {
        let model_type = v["model_type"].as_str().unwrap_or_default().to_string();
        let kind = match model_type.as_str() {
            "bert" => EncoderKind::Bert,
            "roberta" | "xlm-roberta" => EncoderKind::Roberta,
            "distilbert" => EncoderKind::DistilBert,
            other => {
                return Err(ModelError::Unsupported {
                    origin: origin.into(),
                    what: format!(
                        "encoder model_type {other:?} (BERTScore supports bert, roberta, xlm-roberta, distilbert)"
                    ),
                });
            }
        };
        let get = |keys: &[&str]| -> std::result::Result<usize, ModelError> {
            keys.iter()
                .find_map(|k| v[*k].as_u64())
                .map(|n| n as usize)
                .ok_or_else(|| ModelError::Config {
                    origin: origin.into(),
                    field: keys[0].into(),
                    message: "missing".into(),
                })
        };
        let (hidden, heads, layers, intermediate) = if kind == EncoderKind::DistilBert {
            (
                get(&["dim"])?,
                get(&["n_heads"])?,
                get(&["n_layers"])?,
                get(&["hidden_dim"])?,
            )
        } else {
            (
                get(&["hidden_size"])?,
                get(&["num_attention_heads"])?,
                get(&["num_hidden_layers"])?,
                get(&["intermediate_size"])?,
            )
        };
        if let Some(act) = v["hidden_act"].as_str().or(v["activation"].as_str())
            && act != "gelu"
        {
            return Err(ModelError::Unsupported {
                origin: origin.into(),
                what: format!("activation {act:?}"),
            });
        }
        if v["position_embedding_type"]
            .as_str()
            .is_some_and(|p| p != "absolute")
        {
            return Err(ModelError::Unsupported {
                origin: origin.into(),
                what: "position_embedding_type other than absolute".into(),
            });
        }
        Ok(EncoderConfig {
            kind,
            model_type,
            hidden,
            heads,
            layers,
            intermediate,
            eps: v["layer_norm_eps"].as_f64().unwrap_or(1e-12),
            max_position: get(&["max_position_embeddings"])?,
            pad_token_id: v["pad_token_id"]
                .as_u64()
                .unwrap_or(if kind == EncoderKind::Roberta { 1 } else { 0 })
                as u32,
        })
    }

    /// Longest input the position table allows (RoBERTa spends padding_idx + 1 entries).
    pub fn max_tokens(&self) -> usize {
        match self.kind {
            EncoderKind::Roberta => self.max_position - self.pad_token_id as usize - 1,
            _ => self.max_position,
        }
    }
}

struct Block {
    /// Query, key and value projections as one layer.
    qkv: Dense,
    o: Dense,
    attn_norm: LayerNorm,
    up: Dense,
    down: Dense,
    out_norm: LayerNorm,
}

impl Block {
    fn load(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let (h, i, eps) = (cfg.hidden, cfg.intermediate, cfg.eps);
        // The same block under two naming schemes: q, k, v, o, attention norm, up, down, out norm.
        let names = match cfg.kind {
            EncoderKind::DistilBert => [
                "attention.q_lin",
                "attention.k_lin",
                "attention.v_lin",
                "attention.out_lin",
                "sa_layer_norm",
                "ffn.lin1",
                "ffn.lin2",
                "output_layer_norm",
            ],
            _ => [
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
                "attention.output.LayerNorm",
                "intermediate.dense",
                "output.dense",
                "output.LayerNorm",
            ],
        };
        let dense = |k: usize, a, b| Dense::load(vb.pp(names[k]), a, b);
        Ok(Block {
            qkv: Dense::concat(&[dense(0, h, h)?, dense(1, h, h)?, dense(2, h, h)?])?,
            o: dense(3, h, h)?,
            attn_norm: LayerNorm::load(vb.pp(names[4]), h, eps)?,
            up: dense(5, h, i)?,
            down: dense(6, i, h)?,
            out_norm: LayerNorm::load(vb.pp(names[7]), h, eps)?,
        })
    }

    fn forward(&self, x: &Tensor, layout: &TokenLayout, heads: usize) -> Result<Tensor> {
        let qkv = self.qkv.forward(x, layout, Epilogue::None)?;
        let ctx = fused::attention(&qkv, layout, heads)?;
        let x = self
            .o
            .forward(&ctx, layout, Epilogue::AddNorm(x, &self.attn_norm))?;
        let up = self.up.forward(&x, layout, Epilogue::Gelu)?;
        self.down
            .forward(&up, layout, Epilogue::AddNorm(&x, &self.out_norm))
    }
}

pub struct Encoder {
    pub cfg: EncoderConfig,
    words: Tensor,
    positions: Tensor,
    token_type: Option<Tensor>,
    emb_norm: LayerNorm,
    blocks: Vec<Block>,
    device: Device,
    /// Right-padded rows and candle's ops even where hyoka's CPU kernels could run.
    padded: bool,
}

impl Encoder {
    /// Load the embeddings and the first `layers` blocks (`layers` ≤ the model's).
    pub fn load(vb: VarBuilder, cfg: EncoderConfig, layers: usize) -> Result<Self> {
        // Checkpoints of *ForMaskedLM and friends nest the encoder under the model's name.
        let vb = ["bert", "roberta", "distilbert"]
            .iter()
            .map(|p| vb.pp(*p))
            .find(|v| v.contains_tensor("embeddings.word_embeddings.weight"))
            .unwrap_or(vb);
        let emb = vb.pp("embeddings");
        let words = emb.get_unchecked("word_embeddings.weight")?;
        let positions = emb.get_unchecked("position_embeddings.weight")?;
        let token_type = match cfg.kind {
            EncoderKind::DistilBert => None,
            _ => Some(emb.get_unchecked("token_type_embeddings.weight")?.get(0)?),
        };
        let emb_norm = LayerNorm::load(emb.pp("LayerNorm"), cfg.hidden, cfg.eps)?;
        let stack = match cfg.kind {
            EncoderKind::DistilBert => vb.pp("transformer.layer"),
            _ => vb.pp("encoder.layer"),
        };
        let blocks = (0..layers.min(cfg.layers))
            .map(|i| Block::load(stack.pp(i), &cfg))
            .collect::<Result<_>>()?;
        Ok(Encoder {
            device: words.device().clone(),
            cfg,
            words,
            positions,
            token_type,
            emb_norm,
            blocks,
            padded: false,
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        self.words.dtype()
    }

    pub fn layers(&self) -> usize {
        self.blocks.len()
    }

    /// Run the GPUs' path (right-padded rows, candle's ops) on the CPU too, to test it there.
    pub fn use_padded_rows(&mut self) {
        self.padded = true;
    }

    /// Hidden states after every loaded layer (index 0: the embeddings) for the sequences
    /// `ids`, each (tokens, hidden) with every sequence's rows back to back in order. With
    /// `all_layers` false only the last.
    pub fn forward(&self, ids: &[Vec<u32>], all_layers: bool) -> Result<Vec<Tensor>> {
        let lens = ids.iter().map(Vec::len).collect();
        let layout = if self.padded {
            TokenLayout::padded(lens, &self.device)?
        } else {
            TokenLayout::new(lens, self.dtype(), &self.device)?
        };
        let shape = layout.shape(self.cfg.hidden);
        let rows: usize = shape[..shape.len() - 1].iter().product();
        let (mut flat, mut pos) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
        for (s, row) in ids.iter().enumerate() {
            for j in 0..layout.width(s) {
                let real = j < row.len();
                flat.push(if real { row[j] } else { self.cfg.pad_token_id });
                pos.push(match self.cfg.kind {
                    EncoderKind::Roberta if real => self.cfg.pad_token_id + 1 + j as u32,
                    EncoderKind::Roberta => self.cfg.pad_token_id,
                    _ => j as u32,
                });
            }
        }
        let ids_t = Tensor::from_vec(flat, rows, &self.device)?;
        let pos_t = Tensor::from_vec(pos, rows, &self.device)?;
        let mut x =
            (self.words.index_select(&ids_t, 0)? + self.positions.index_select(&pos_t, 0)?)?;
        if let Some(tt) = &self.token_type {
            x = x.broadcast_add(tt)?;
        }
        let mut x = self.emb_norm.forward(&x.reshape(shape)?)?;
        let mut out = Vec::new();
        if all_layers {
            out.push(layout.pack(&x)?);
        }
        for block in &self.blocks {
            x = block.forward(&x, &layout, self.cfg.heads)?;
            if all_layers {
                out.push(layout.pack(&x)?);
            }
        }
        if !all_layers {
            out.push(layout.pack(&x)?);
        }
        Ok(out)
    }
}

/// Load an encoder folder (config.json + model.safetensors) keeping `layers` layers
/// (None: all of them).
pub fn load_encoder_dir(
    dir: &Path,
    layers: Option<usize>,
    dtype: DType,
    device: &Device,
) -> std::result::Result<Encoder, ModelError> {
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|source| ModelError::Io {
        path: config_path.clone(),
        source,
    })?;
    let origin = config_path.display().to_string();
    let v: Value = serde_json::from_str(&text).map_err(|e| ModelError::Config {
        origin: origin.clone(),
        field: "(file)".into(),
        message: e.to_string(),
    })?;
    let cfg = EncoderConfig::from_json(&v, &origin)?;
    let keep = layers.unwrap_or(cfg.layers);
    if keep > cfg.layers {
        return Err(ModelError::Setting {
            flag: format!("--layer {keep}"),
            message: format!(
                "{origin} has {} layers (num_hidden_layers): give a layer from 0 (the embeddings) to {}",
                cfg.layers, cfg.layers
            ),
        });
    }
    let files = crate::model::load::checkpoint_files::safetensors_files(dir)?;
    // Safety: the files are memory-mapped read-only; hyoka never writes to them while loaded.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, dtype, device)? };
    Ok(Encoder::load(vb, cfg, keep)?)
}
