//! BERTScore as bert_score 0.3.13 defines it (fast tokenizer): sentences stripped and encoded
//! with special tokens, one layer's token embeddings, cosine greedy matching with idf weights
//! (special tokens take part in the matching but weigh 0), P/R/F, several references per item
//! (max per column), baseline rescaling.
//!
//! What is done differently, for speed and batch invariance: sentences are deduplicated and
//! batched by token count under a token budget (bert_score sorts by whitespace words, which does
//! nothing for Japanese); token embeddings of all sentences stay in one device tensor and pairs
//! are matched there in batches, so only P and R come back to the host.
//!
//! One bert_score behaviour is reproduced on purpose: it matches pairs in batches of 64 (its
//! `batch_size`) in input order, padded, and a padding cell scores 0, so a token whose real
//! similarities are all negative gets 0 instead of its best one — when the other sentence of its
//! pair is shorter than the longest in that batch of 64. `pad_floors` computes which pairs that
//! hits from token counts alone (over the whole input, so a resumed run agrees), and matching
//! floors those tokens' maxima at 0. Our own batching never changes a score.

pub mod baseline;
pub mod run;

use crate::model::encoder::Encoder;
use candle_core::{DType, Tensor, D};
use std::collections::HashMap;
use tokenizers::Tokenizer;

#[derive(Debug, thiserror::Error)]
pub enum BertScoreError {
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error("{path}: {message}")]
    Baseline { path: String, message: String },
}

/// Precision, recall and F1 of one candidate against its reference(s).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Prf {
    #[serde(rename = "P")]
    pub p: f64,
    #[serde(rename = "R")]
    pub r: f64,
    #[serde(rename = "F")]
    pub f: f64,
}

impl Prf {
    fn from_pr(p: f32, r: f32) -> Self {
        // In f32 like bert_score; 0/0 (an empty side) is 0.
        let f = 2.0 * p * r / (p + r);
        Prf { p: p as f64, r: r as f64, f: if f.is_nan() { 0.0 } else { f as f64 } }
    }

    fn max(self, o: Prf) -> Prf {
        Prf { p: self.p.max(o.p), r: self.r.max(o.r), f: self.f.max(o.f) }
    }

    /// (x − b) / (1 − b) per column.
    pub fn rescale(self, b: &Prf) -> Prf {
        Prf { p: (self.p - b.p) / (1.0 - b.p), r: (self.r - b.r) / (1.0 - b.r), f: (self.f - b.f) / (1.0 - b.f) }
    }
}

/// Inverse document frequencies from the references: log((M+1)/(df+1)), log(M+1) for tokens no
/// reference has. Without idf every token weighs 1 and the special tokens 0.
#[derive(Clone, Debug)]
pub enum Idf {
    Uniform { zero: Vec<u32> },
    FromReferences { df: HashMap<u32, usize>, docs: usize },
}

impl Idf {
    pub fn weight(&self, token: u32) -> f32 {
        match self {
            Idf::Uniform { zero } => if zero.contains(&token) { 0.0 } else { 1.0 },
            Idf::FromReferences { df, docs } => ((*docs as f64 + 1.0) / (df.get(&token).copied().unwrap_or(0) as f64 + 1.0)).ln() as f32,
        }
    }
}

/// An encoder read at one layer, with its tokenizer.
pub struct BertScorer {
    pub encoder: Encoder,
    pub tokenizer: Tokenizer,
    special: Vec<u32>,
}

/// The sentences of a scoring job, tokenized once each.
pub struct Sentences {
    pub ids: Vec<Vec<u32>>,
    index: HashMap<String, usize>,
}

impl Sentences {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn get(&self, text: &str) -> usize {
        self.index[text]
    }
}

/// Token embeddings of every sentence, L2-normalised, in one (tokens + 1, hidden) tensor per
/// layer (the last row is zeros, for padding); `offsets[i]..offsets[i+1]` are sentence i's rows.
pub struct Embeddings {
    pub layers: Vec<Tensor>,
    pub offsets: Vec<usize>,
}

/// An encoder model resolved, loaded up to its layer, and what identifies it.
pub struct LoadedScorer {
    pub scorer: BertScorer,
    pub model: crate::results::ModelId,
    pub layer: usize,
}

impl BertScorer {
    /// Load `name` (folder or hub id) for BERTScore at `layer` (default: bert_score's layer for
    /// the models it knows; required otherwise).
    pub fn load(name: &str, layer: Option<usize>, dtype: DType, device: &candle_core::Device) -> Result<LoadedScorer, BertScoreError> {
        use crate::model::{encoder, source, ModelError};
        let files = source::resolve(name)?;
        if files.format != source::Format::Safetensors {
            return Err(ModelError::Unsupported { origin: name.into(), what: "GGUF encoders (BERTScore needs a safetensors folder)".into() }.into());
        }
        // usize::MAX: every layer (baselines).
        let layer = match layer.or_else(|| encoder::default_layer(name)) {
            Some(l) => l,
            None => {
                return Err(ModelError::Config {
                    origin: name.into(),
                    field: "layer".into(),
                    message: "bert_score has no default layer for this model: pass --layer N".into(),
                }
                .into())
            }
        };
        let enc = encoder::load_encoder_dir(&files.path, Some(layer), dtype, device)?;
        let layer = enc.layers();
        let tokenizer = crate::model::load_tokenizer(&files.path, None)?;
        let max_len = std::fs::read_to_string(files.path.join("tokenizer_config.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["model_max_length"].as_f64())
            .filter(|n| *n >= 1.0 && *n < 1e9)
            .map(|n| n as usize);
        let arch = enc.cfg.model_type.clone();
        let weights = crate::model::safetensors_files(&files.path)?;
        let id_file = if weights.len() == 1 { weights[0].clone() } else { files.path.join("model.safetensors.index.json") };
        let sha256 = source::sha256_file(&id_file)?;
        let model = crate::results::ModelId { name: files.name.clone(), revision: files.revision.clone(), sha256, arch, chat_template: None };
        Ok(LoadedScorer { scorer: BertScorer::new(enc, tokenizer, max_len)?, model, layer })
    }

    pub fn new(encoder: Encoder, mut tokenizer: Tokenizer, model_max_length: Option<usize>) -> Result<Self, BertScoreError> {
        let max_length = model_max_length.unwrap_or(usize::MAX).min(encoder.cfg.max_tokens());
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams { max_length, ..Default::default() }))
            .map_err(|e| BertScoreError::Tokenizer(e.to_string()))?;
        tokenizer.with_padding(None);
        let special = ["[CLS]", "[SEP]", "<s>", "</s>"].iter().filter_map(|t| tokenizer.token_to_id(t)).collect();
        Ok(BertScorer { encoder, tokenizer, special })
    }

    /// bert_score's `sent_encode`: stripped, with special tokens, truncated.
    pub fn encode(&self, sentence: &str) -> Result<Vec<u32>, BertScoreError> {
        let enc = self.tokenizer.encode(sentence.trim(), true).map_err(|e| BertScoreError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn sentences<'a>(&self, texts: impl IntoIterator<Item = &'a str>) -> Result<Sentences, BertScoreError> {
        let mut s = Sentences { ids: Vec::new(), index: HashMap::new() };
        for t in texts {
            if !s.index.contains_key(t) {
                s.index.insert(t.to_string(), s.ids.len());
                s.ids.push(self.encode(t)?);
            }
        }
        Ok(s)
    }

    pub fn idf(&self, use_idf: bool, references: &[&str]) -> Result<Idf, BertScoreError> {
        if !use_idf {
            return Ok(Idf::Uniform { zero: self.special.clone() });
        }
        let mut df: HashMap<u32, usize> = HashMap::new();
        for r in references {
            let mut ids = self.encode(r)?;
            ids.sort_unstable();
            ids.dedup();
            for id in ids {
                *df.entry(id).or_default() += 1;
            }
        }
        Ok(Idf::FromReferences { df, docs: references.len() })
    }

    /// Embed every sentence: longest first, batches of at most `batch_tokens` padded tokens.
    pub fn embed(&self, sentences: &Sentences, batch_tokens: usize, all_layers: bool, progress: &mut dyn FnMut(usize)) -> Result<Embeddings, BertScoreError> {
        let n = sentences.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| sentences.ids[b].len().cmp(&sentences.ids[a].len()).then(a.cmp(&b)));
        let layers = if all_layers { self.encoder.layers() + 1 } else { 1 };
        // Per layer, per sentence (in `order`), its rows.
        let mut parts: Vec<Vec<(usize, Tensor)>> = vec![Vec::with_capacity(n); layers];
        let mut start = 0;
        while start < n {
            let longest = sentences.ids[order[start]].len().max(1);
            let rows = (batch_tokens / longest).max(1).min(n - start);
            let batch: Vec<usize> = order[start..start + rows].to_vec();
            let ids: Vec<Vec<u32>> = batch.iter().map(|&i| sentences.ids[i].clone()).collect();
            let hidden = self.encoder.forward(&ids, all_layers)?;
            for (l, h) in hidden.into_iter().enumerate() {
                let h = normalise(&h.to_dtype(DType::F32)?)?;
                for (row, &i) in batch.iter().enumerate() {
                    parts[l].push((i, h.get(row)?.narrow(0, 0, sentences.ids[i].len())?));
                }
            }
            start += rows;
            progress(start);
        }
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        for ids in &sentences.ids {
            offsets.push(offsets.last().copied().unwrap_or(0) + ids.len());
        }
        let hidden = self.encoder.cfg.hidden;
        let device = self.encoder.device().clone();
        let layers = parts
            .into_iter()
            .map(|mut p| {
                p.sort_by_key(|(i, _)| *i);
                let mut rows: Vec<Tensor> = p.into_iter().map(|(_, t)| t).collect();
                rows.push(Tensor::zeros((1, hidden), DType::F32, &device)?);
                Tensor::cat(&rows, 0)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Embeddings { layers, offsets })
    }

    /// P/R/F of candidate `pairs[k].0` against reference `pairs[k].1` (sentence indices), at
    /// every embedded layer: result[layer][k].
    /// `floors[k]`: whether pair k's candidate tokens / reference tokens have their best match
    /// floored at 0 (see `pad_floors`).
    pub fn match_pairs(&self, sentences: &Sentences, emb: &Embeddings, idf: &Idf, pairs: &[(usize, usize)], floors: &[(bool, bool)], batch_cells: usize) -> Result<Vec<Vec<Prf>>, BertScoreError> {
        let mut out = vec![Vec::with_capacity(pairs.len()); emb.layers.len()];
        let pad = *emb.offsets.last().expect("offsets start with 0") as u32;
        let device = self.encoder.device();
        let mut start = 0;
        while start < pairs.len() {
            // Grow the batch while its (pairs × longest cand × longest ref) cells fit.
            let (mut lh, mut lr, mut end) = (0, 0, start);
            while end < pairs.len() {
                let (h, r) = pairs[end];
                let (nh, nr) = (lh.max(sentences.ids[h].len()), lr.max(sentences.ids[r].len()));
                if end > start && (end - start + 1) * nh * nr > batch_cells {
                    break;
                }
                (lh, lr, end) = (nh, nr, end + 1);
            }
            let batch = &pairs[start..end];
            let b = batch.len();
            let side = |pick: fn(&(usize, usize)) -> usize, len: usize| -> Result<(Tensor, Tensor, Vec<bool>), BertScoreError> {
                let mut idx = Vec::with_capacity(b * len);
                let mut weights = Vec::with_capacity(b * len);
                let mut empty = Vec::with_capacity(b);
                for pair in batch {
                    let s = pick(pair);
                    let ids = &sentences.ids[s];
                    let w: Vec<f32> = ids.iter().map(|&t| idf.weight(t)).collect();
                    let total: f32 = w.iter().sum();
                    for j in 0..len {
                        idx.push(if j < ids.len() { (emb.offsets[s] + j) as u32 } else { pad });
                        weights.push(if j < ids.len() && total > 0.0 { w[j] / total } else { 0.0 });
                    }
                    // Only the special tokens: bert_score sets P and R to 0.
                    empty.push(ids.iter().all(|t| self.special.contains(t)));
                }
                Ok((Tensor::from_vec(idx, b * len, device)?, Tensor::from_vec(weights, (b, len), device)?, empty))
            };
            let (h_idx, h_w, h_empty) = side(|p| p.0, lh)?;
            let (r_idx, r_w, r_empty) = side(|p| p.1, lr)?;
            // Cells outside either sentence get −2, below any cosine, so they never win a max.
            let valid = |pick: fn(&(usize, usize)) -> usize, len: usize| -> Vec<f32> {
                batch.iter().flat_map(|p| (0..len).map(move |j| if j < sentences.ids[pick(p)].len() { 1.0 } else { 0.0 })).collect()
            };
            let hv = Tensor::from_vec(valid(|p| p.0, lh), (b, lh, 1), device)?;
            let rv = Tensor::from_vec(valid(|p| p.1, lr), (b, 1, lr), device)?;
            let keep = hv.broadcast_mul(&rv)?;
            let penalty = ((keep.ones_like()? - &keep)? * 3.0)?;
            let floor = |pick: fn(&(bool, bool)) -> bool| -> candle_core::Result<Tensor> {
                let v: Vec<f32> = floors[start..end].iter().map(|f| if pick(f) { 0.0 } else { -3.0 }).collect();
                Tensor::from_vec(v, (b, 1), device)
            };
            let (h_floor, r_floor) = (floor(|f| f.0)?, floor(|f| f.1)?);
            for (l, table) in emb.layers.iter().enumerate() {
                let h = table.index_select(&h_idx, 0)?.reshape((b, lh, ()))?;
                let r = table.index_select(&r_idx, 0)?.reshape((b, lr, ()))?;
                let sim = (h.matmul(&r.t()?.contiguous()?)?.broadcast_mul(&keep)? - &penalty)?;
                let p = (sim.max(D::Minus1)?.broadcast_maximum(&h_floor)? * &h_w)?.sum(D::Minus1)?;
                let r = (sim.max(1)?.broadcast_maximum(&r_floor)? * &r_w)?.sum(D::Minus1)?;
                let p: Vec<f32> = p.to_vec1()?;
                let r: Vec<f32> = r.to_vec1()?;
                for k in 0..b {
                    let zero = h_empty[k] || r_empty[k];
                    let (pk, rk) = if zero { (0.0, 0.0) } else { (p[k], r[k]) };
                    out[l].push(Prf::from_pr(pk, rk));
                }
            }
            start = end;
        }
        Ok(out)
    }

    /// BERTScore of each candidate against its references (max per column over them), at the
    /// encoder's last loaded layer. `use_idf`: idf from all references (flattened, as bert_score).
    /// `group`: bert_score's batch_size (64 by default) for its padding behaviour, None for none.
    pub fn score(&self, candidates: &[&str], references: &[Vec<&str>], use_idf: bool, batch_tokens: usize, group: Option<usize>) -> Result<Vec<Prf>, BertScoreError> {
        let flat: Vec<&str> = references.iter().flatten().copied().collect();
        let idf = self.idf(use_idf, &flat)?;
        let floors = self.pad_floors(candidates, references, group)?;
        self.score_with_idf(candidates, references, &idf, &floors, batch_tokens, &mut |_, _| {})
    }

    /// Per flattened (candidate, reference) pair, in bert_score's order, whether padding in its
    /// batch of `group` pairs floors the candidate's / the reference's token maxima at 0.
    pub fn pad_floors(&self, candidates: &[&str], references: &[Vec<&str>], group: Option<usize>) -> Result<Vec<(bool, bool)>, BertScoreError> {
        let mut lens = Vec::new();
        for (c, refs) in candidates.iter().zip(references) {
            let lc = self.encode(c)?.len();
            for r in refs {
                lens.push((lc, self.encode(r)?.len()));
            }
        }
        let Some(group) = group.filter(|g| *g > 0) else { return Ok(vec![(false, false); lens.len()]) };
        let mut out = Vec::with_capacity(lens.len());
        for chunk in lens.chunks(group) {
            let max_c = chunk.iter().map(|l| l.0).max().unwrap_or(0);
            let max_r = chunk.iter().map(|l| l.1).max().unwrap_or(0);
            out.extend(chunk.iter().map(|&(lc, lr)| (lr < max_r, lc < max_c)));
        }
        Ok(out)
    }

    /// `score` with the idf given (a resumed run computes it from all items, scores only some).
    /// `progress(done, total)` counts sentences embedded.
    /// `floors`: per flattened pair, from `pad_floors`.
    pub fn score_with_idf(&self, candidates: &[&str], references: &[Vec<&str>], idf: &Idf, floors: &[(bool, bool)], batch_tokens: usize, progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<Prf>, BertScoreError> {
        let sentences = self.sentences(candidates.iter().copied().chain(references.iter().flatten().copied()))?;
        let total = sentences.len();
        let emb = self.embed(&sentences, batch_tokens, false, &mut |done| progress(done, total))?;
        let mut pairs = Vec::new();
        let mut owner = Vec::new();
        for (i, (c, refs)) in candidates.iter().zip(references).enumerate() {
            for r in refs {
                pairs.push((sentences.get(c), sentences.get(r)));
                owner.push(i);
            }
        }
        let per_pair = self.match_pairs(&sentences, &emb, idf, &pairs, floors, batch_tokens * 64)?.remove(0);
        let mut out: Vec<Option<Prf>> = vec![None; candidates.len()];
        for (prf, i) in per_pair.into_iter().zip(owner) {
            out[i] = Some(out[i].map_or(prf, |o: Prf| o.max(prf)));
        }
        Ok(out.into_iter().map(|o| o.unwrap_or(Prf { p: 0.0, r: 0.0, f: 0.0 })).collect())
    }
}

fn normalise(h: &Tensor) -> candle_core::Result<Tensor> {
    let norm = h.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?;
    h.broadcast_div(&norm)
}
