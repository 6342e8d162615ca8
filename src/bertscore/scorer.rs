//! The scorer: sentences encoded once, pairs matched in batches, P/R/F per pair.

use super::error::BertScoreError;
use super::sentences::{Idf, Pairs, Sentences, pad_floors};
use crate::model::encoder::Encoder;
use crate::results::prf::{Prf, best_of};
use candle_core::DType;
use std::collections::HashMap;
use tokenizers::Tokenizer;

/// An encoder read at one layer, with its tokenizer.
pub struct BertScorer {
    pub encoder: Encoder,
    pub tokenizer: Tokenizer,
    pub(super) special: Vec<u32>,
    /// Longer texts are cut before tokenizing (`visible_prefix`).
    prefix_bytes: usize,
}

/// An encoder model resolved, loaded up to its layer, and what identifies it.
pub struct LoadedScorer {
    pub scorer: BertScorer,
    pub model: crate::results::ModelId,
    /// The scoring layer (the last one loaded).
    pub layer: usize,
}

/// How deep to load an encoder.
#[derive(Clone, Copy, Debug)]
pub enum Depth {
    /// Up to this layer; None: bert_score's default for the model.
    Layer(Option<usize>),
    /// Every layer (baselines are computed for all of them).
    All,
}

impl BertScorer {
    /// Load `name` (folder or hub id) for BERTScore.
    pub fn load(
        name: &str,
        depth: Depth,
        dtype: DType,
        device: &candle_core::Device,
    ) -> Result<LoadedScorer, BertScoreError> {
        use crate::model::load::source;
        use crate::model::{ModelError, encoder};
        // A layer is needed before anything loads (a Hub model is not fetched to be told so):
        // bert_score's table knows the model by name. A local path is looked for first.
        let local = source::is_path_only(name) || std::path::Path::new(name).exists();
        if local {
            source::resolve(name)?;
        }
        // bert_score's bare names (roberta-large) are Hub repositories under an organisation.
        let repository = if local {
            None
        } else {
            let (id, revision) = match name.split_once('@') {
                Some((id, rev)) => (id, Some(rev)),
                None => (name, None),
            };
            super::defaults::hub_repository(id).map(|repo| match revision {
                Some(rev) => format!("{repo}@{rev}"),
                None => repo.to_string(),
            })
        };
        let name = repository.as_deref().unwrap_or(name);
        if let Depth::Layer(None) = depth
            && super::defaults::default_layer(name).is_none()
        {
            return Err(ModelError::Setting {
                flag: "--layer".into(),
                message: format!(
                    "bert_score has no default layer for {name}: give one, N from 0 (the embeddings) to the model's num_hidden_layers"
                ),
            }
            .into());
        }
        let files = source::resolve(name)?;
        if files.format != source::Format::Safetensors {
            return Err(ModelError::Unsupported {
                origin: name.into(),
                what: "GGUF encoders (BERTScore needs a safetensors folder)".into(),
            }
            .into());
        }
        let keep = match depth {
            Depth::All => None,
            Depth::Layer(layer) => Some(
                layer
                    .or_else(|| super::defaults::default_layer(name))
                    .ok_or_else(|| ModelError::Config {
                        origin: name.into(),
                        field: "layer".into(),
                        message: "bert_score has no default layer for this model: pass --layer N"
                            .into(),
                    })?,
            ),
        };
        let enc = encoder::load_encoder_dir(&files.path, keep, dtype, device)?;
        let tokenizer = crate::model::load_tokenizer(&files.path, None)?;
        let max_len = std::fs::read_to_string(files.path.join("tokenizer_config.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["model_max_length"].as_f64())
            .filter(|n| *n >= 1.0 && *n < 1e9)
            .map(|n| n as usize);
        let sha256 = source::sha256_file(&crate::model::checkpoint_id_file(&files.path)?)?;
        let model = crate::results::ModelId {
            name: files.name.clone(),
            revision: files.revision.clone(),
            description: crate::model::load::known_copies::description(&sha256).map(str::to_string),
            sha256,
            arch: enc.cfg.model_type.clone(),
            chat_template: None,
        };
        let layer = enc.layers();
        Ok(LoadedScorer {
            scorer: BertScorer::new(enc, tokenizer, max_len)?,
            model,
            layer,
        })
    }

    pub fn new(
        encoder: Encoder,
        mut tokenizer: Tokenizer,
        model_max_length: Option<usize>,
    ) -> Result<Self, BertScoreError> {
        let max_length = model_max_length
            .unwrap_or(usize::MAX)
            .min(encoder.cfg.max_tokens());
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(|e| BertScoreError::Tokenizer(e.to_string()))?;
        tokenizer.with_padding(None);
        // Visible text that more tokens than are kept cannot cover (see `visible_prefix`).
        let prefix_bytes =
            crate::model::tokenizer::bytes_beyond(&tokenizer, max_length.saturating_add(1));
        let special = ["[CLS]", "[SEP]", "<s>", "</s>"]
            .iter()
            .filter_map(|t| tokenizer.token_to_id(t))
            .collect();
        Ok(BertScorer {
            encoder,
            tokenizer,
            special,
            prefix_bytes,
        })
    }

    /// bert_score's `sent_encode`: stripped, with special tokens, truncated. Only the part of a
    /// long text its first `max_length` tokens can come from is tokenized: a 50 MB response
    /// took 15 s and 4.9 GB to tokenize whole, for 512 tokens.
    pub fn encode(&self, sentence: &str) -> Result<Vec<u32>, BertScoreError> {
        let enc = self
            .tokenizer
            .encode(visible_prefix(sentence.trim(), self.prefix_bytes), true)
            .map_err(|e| BertScoreError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Tokenize every distinct sentence of the items once, and pair them up.
    pub fn pairs(
        &self,
        candidates: &[&str],
        references: &[Vec<&str>],
    ) -> Result<(Sentences, Pairs), BertScoreError> {
        let mut s = Sentences {
            ids: Vec::new(),
            index: HashMap::new(),
        };
        let mut add = |t: &str| -> Result<usize, BertScoreError> {
            if let Some(&i) = s.index.get(t) {
                return Ok(i);
            }
            s.index.insert(t.to_string(), s.ids.len());
            s.ids.push(self.encode(t)?);
            Ok(s.ids.len() - 1)
        };
        let mut pairs = Pairs {
            pairs: Vec::new(),
            items: Vec::with_capacity(candidates.len()),
        };
        for (c, refs) in candidates.iter().zip(references) {
            let ci = add(c)?;
            let start = pairs.pairs.len();
            for r in refs {
                pairs.pairs.push((ci, add(r)?));
            }
            pairs.items.push(start..pairs.pairs.len());
        }
        Ok((s, pairs))
    }

    /// Token weights; with `use_idf`, from the pairs' references, each pair's reference one
    /// document (bert_score flattens several references per item the same way).
    pub fn idf(&self, use_idf: bool, sentences: &Sentences, pairs: &[(usize, usize)]) -> Idf {
        if !use_idf {
            return Idf {
                weights: self.special.iter().map(|&t| (t, 0.0)).collect(),
                unseen: 1.0,
            };
        }
        let mut df: HashMap<u32, usize> = HashMap::new();
        for &(_, r) in pairs {
            let mut ids = sentences.ids[r].clone();
            ids.sort_unstable();
            ids.dedup();
            for id in ids {
                *df.entry(id).or_default() += 1;
            }
        }
        let m = pairs.len() as f64 + 1.0;
        Idf {
            weights: df
                .into_iter()
                .map(|(t, n)| (t, (m / (n as f64 + 1.0)).ln() as f32))
                .collect(),
            unseen: m.ln() as f32,
        }
    }

    /// P/R/F of these pairs at the scoring layer: embeds the sentences they use, then matches.
    /// `floors`: per pair, from `pad_floors`.
    pub fn score_pairs(
        &self,
        sentences: &Sentences,
        pairs: &[(usize, usize)],
        idf: &Idf,
        floors: &[(bool, bool)],
        batch_tokens: usize,
    ) -> Result<Vec<Prf>, BertScoreError> {
        let mut used: Vec<usize> = pairs.iter().flat_map(|&(c, r)| [c, r]).collect();
        used.sort_unstable();
        used.dedup();
        let emb = self.embed(sentences, &used, batch_tokens, false)?;
        Ok(self
            .match_pairs(sentences, &emb, idf, pairs, floors, batch_tokens * 64)?
            .remove(0))
    }

    /// BERTScore of each candidate against its references (max per column over them), at the
    /// scoring layer; `use_idf`: idf from all references. `group`: bert_score's batch_size (64
    /// by default) for its padding behaviour, None for none.
    pub fn score(
        &self,
        candidates: &[&str],
        references: &[Vec<&str>],
        use_idf: bool,
        batch_tokens: usize,
        group: Option<usize>,
    ) -> Result<Vec<Prf>, BertScoreError> {
        let (sentences, pairs) = self.pairs(candidates, references)?;
        let idf = self.idf(use_idf, &sentences, &pairs.pairs);
        let floors = pad_floors(&sentences, &pairs.pairs, group);
        let prfs = self.score_pairs(&sentences, &pairs.pairs, &idf, &floors, batch_tokens)?;
        Ok(pairs
            .items
            .iter()
            .map(|r| best_of(&prfs[r.clone()]))
            .collect())
    }
}

/// The start of `text` that holds every token a truncation to `max_length` keeps, given
/// `limit` = bytes_beyond(max_length + 1): it ends `limit` visible bytes in (not
/// whitespace or control characters, which tokenizers may drop), more than max_length tokens
/// can cover, then runs on to the end of that word — pre-tokenizers cut words apart at
/// whitespace, so the words kept tokenize as in the whole text. In a run without spaces
/// (Japanese), it runs on up to `limit` more bytes: a cut there can only change the pieces
/// next to it, far past the last token kept. Shorter texts are returned whole.
fn visible_prefix(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut visible = 0usize;
    let mut reached: Option<usize> = None;
    for (at, c) in text.char_indices() {
        match reached {
            None => {
                if !c.is_whitespace() && !c.is_control() {
                    visible += c.len_utf8();
                    if visible >= limit {
                        reached = Some(at);
                    }
                }
            }
            Some(start) => {
                if c.is_whitespace() || at - start >= limit {
                    return &text[..at];
                }
            }
        }
    }
    text
}

#[cfg(test)]
mod prefix_tests {
    use super::visible_prefix;

    #[test]
    fn long_texts_are_cut_after_enough_visible_bytes_at_a_word_end() {
        assert_eq!(visible_prefix("short", 10), "short");
        assert_eq!(visible_prefix("short text", 4), "short");
        // Whitespace does not count: the cut comes 8 visible bytes in, at the word's end.
        let text = format!("{}abcd efgh ijkl mnop", " ".repeat(100));
        assert_eq!(visible_prefix(&text, 8), &text[..109]);
        // No spaces: `limit` more bytes after the point.
        let text = "あ".repeat(100);
        assert_eq!(visible_prefix(&text, 30), "あ".repeat(19));
    }
}
