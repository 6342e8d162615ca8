//! Stages 5–7 of BERTScore: sentences in token-budget batches through the encoder, token
//! embeddings kept on the device, and greedy matching of pairs there.

use super::error::BertScoreError;
use super::scorer::BertScorer;
use super::sentences::{Idf, Sentences};
use crate::results::prf::Prf;
use candle_core::{D, DType, Tensor};
use rayon::prelude::*;

/// Token embeddings, L2-normalised, in one (tokens + 1, hidden) tensor per layer (the last row
/// is zeros, for padding); sentence i's rows start at `offsets[i]` (None: not embedded).
pub struct Embeddings {
    pub layers: Vec<Tensor>,
    pub offsets: Vec<Option<usize>>,
    pad: u32,
}

impl BertScorer {
    /// Embed the sentences `which`: longest first, batches of at most `batch_tokens` padded
    /// tokens; every layer from the embeddings up with `all_layers`, else the scoring layer.
    pub fn embed(
        &self,
        sentences: &Sentences,
        which: &[usize],
        batch_tokens: usize,
        all_layers: bool,
    ) -> Result<Embeddings, BertScoreError> {
        let n = which.len();
        let mut order: Vec<usize> = which.to_vec();
        order.sort_by(|&a, &b| {
            sentences.ids[b]
                .len()
                .cmp(&sentences.ids[a].len())
                .then(a.cmp(&b))
        });
        let layers = if all_layers {
            self.encoder.layers() + 1
        } else {
            1
        };
        // Per layer, per sentence (in `order`), its rows.
        let mut parts: Vec<Vec<(usize, Tensor)>> = vec![Vec::with_capacity(n); layers];
        let mut plan: Vec<&[usize]> = Vec::new();
        let mut start = 0;
        while start < n {
            let longest = sentences.ids[order[start]].len().max(1);
            let rows = (batch_tokens / longest).max(1).min(n - start);
            plan.push(&order[start..start + rows]);
            start += rows;
        }
        let run = |batch: &&[usize]| -> Result<Vec<Tensor>, BertScoreError> {
            let ids: Vec<Vec<u32>> = batch.iter().map(|&i| sentences.ids[i].clone()).collect();
            let hidden = self.encoder.forward(&ids, all_layers)?;
            Ok(hidden
                .iter()
                .map(|h| normalise(&h.to_dtype(DType::F32)?))
                .collect::<candle_core::Result<Vec<_>>>()?)
        };
        // On CPU the batches run side by side, one per core with single-threaded GEMMs: about
        // 10% more GEMM throughput than every core on each GEMM, and no waiting between ops.
        let hidden: Vec<Vec<Tensor>> = if self.encoder.device().is_cpu() {
            plan.par_iter().map(run).collect::<Result<_, _>>()?
        } else {
            plan.iter().map(run).collect::<Result<_, _>>()?
        };
        for (batch, layers) in plan.iter().zip(hidden) {
            for (l, h) in layers.into_iter().enumerate() {
                let mut at = 0;
                for &i in batch.iter() {
                    let len = sentences.ids[i].len();
                    parts[l].push((i, h.narrow(0, at, len)?));
                    at += len;
                }
            }
        }
        // Rows in sentence-index order (`parts` are sorted so below).
        let mut sorted = which.to_vec();
        sorted.sort_unstable();
        let mut offsets = vec![None; sentences.len()];
        let mut next = 0;
        for &i in &sorted {
            offsets[i] = Some(next);
            next += sentences.ids[i].len();
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
        Ok(Embeddings {
            layers,
            offsets,
            pad: next as u32,
        })
    }

    /// P/R/F of candidate `pairs[k].0` against reference `pairs[k].1` (sentence indices), at
    /// every embedded layer: result[layer][k].
    /// `floors[k]`: whether pair k's candidate tokens / reference tokens have their best match
    /// floored at 0 (see `pad_floors`).
    pub fn match_pairs(
        &self,
        sentences: &Sentences,
        emb: &Embeddings,
        idf: &Idf,
        pairs: &[(usize, usize)],
        floors: &[(bool, bool)],
        batch_cells: usize,
    ) -> Result<Vec<Vec<Prf>>, BertScoreError> {
        let mut out = vec![Vec::with_capacity(pairs.len()); emb.layers.len()];
        let pad = emb.pad;
        let device = self.encoder.device();
        let mut start = 0;
        while start < pairs.len() {
            // Grow the batch while its (pairs × longest cand × longest ref) cells fit.
            let (mut lh, mut lr, mut end) = (0, 0, start);
            while end < pairs.len() {
                let (h, r) = pairs[end];
                let (nh, nr) = (
                    lh.max(sentences.ids[h].len()),
                    lr.max(sentences.ids[r].len()),
                );
                if end > start && (end - start + 1) * nh * nr > batch_cells {
                    break;
                }
                (lh, lr, end) = (nh, nr, end + 1);
            }
            let batch = &pairs[start..end];
            let b = batch.len();
            let side = |pick: fn(&(usize, usize)) -> usize,
                        len: usize|
             -> Result<(Tensor, Tensor, Vec<bool>), BertScoreError> {
                let mut idx = Vec::with_capacity(b * len);
                let mut weights = Vec::with_capacity(b * len);
                let mut empty = Vec::with_capacity(b);
                for pair in batch {
                    let s = pick(pair);
                    let ids = &sentences.ids[s];
                    let w: Vec<f32> = ids.iter().map(|&t| idf.weight(t)).collect();
                    let total: f32 = w.iter().sum();
                    for j in 0..len {
                        idx.push(if j < ids.len() {
                            (emb.offsets[s].expect("pairs use embedded sentences") + j) as u32
                        } else {
                            pad
                        });
                        weights.push(match w.get(j) {
                            Some(x) if total > 0.0 => x / total,
                            _ => 0.0,
                        });
                    }
                    // Only the special tokens: bert_score sets P and R to 0.
                    empty.push(ids.iter().all(|t| self.special.contains(t)));
                }
                Ok((
                    Tensor::from_vec(idx, b * len, device)?,
                    Tensor::from_vec(weights, (b, len), device)?,
                    empty,
                ))
            };
            let (h_idx, h_w, h_empty) = side(|p| p.0, lh)?;
            let (r_idx, r_w, r_empty) = side(|p| p.1, lr)?;
            // Cells outside either sentence get −2, below any cosine, so they never win a max.
            let valid = |pick: fn(&(usize, usize)) -> usize, len: usize| -> Vec<f32> {
                batch
                    .iter()
                    .flat_map(|p| {
                        (0..len).map(move |j| {
                            if j < sentences.ids[pick(p)].len() {
                                1.0
                            } else {
                                0.0
                            }
                        })
                    })
                    .collect()
            };
            let hv = Tensor::from_vec(valid(|p| p.0, lh), (b, lh, 1), device)?;
            let rv = Tensor::from_vec(valid(|p| p.1, lr), (b, 1, lr), device)?;
            let keep = hv.broadcast_mul(&rv)?;
            let penalty = ((keep.ones_like()? - &keep)? * 3.0)?;
            let floor = |pick: fn(&(bool, bool)) -> bool| -> candle_core::Result<Tensor> {
                let v: Vec<f32> = floors[start..end]
                    .iter()
                    .map(|f| if pick(f) { 0.0 } else { -3.0 })
                    .collect();
                Tensor::from_vec(v, (b, 1), device)
            };
            let (h_floor, r_floor) = (floor(|f| f.0)?, floor(|f| f.1)?);
            // P and R of every layer stay on the device and come back in one transfer.
            let mut per_layer = Vec::with_capacity(emb.layers.len());
            for table in &emb.layers {
                let h = table.index_select(&h_idx, 0)?.reshape((b, lh, ()))?;
                let r = table.index_select(&r_idx, 0)?.reshape((b, lr, ()))?;
                let sim = (h.matmul(&r.t()?.contiguous()?)?.broadcast_mul(&keep)? - &penalty)?;
                let p =
                    (sim.max(D::Minus1)?.broadcast_maximum(&h_floor)? * &h_w)?.sum(D::Minus1)?;
                let r = (sim.max(1)?.broadcast_maximum(&r_floor)? * &r_w)?.sum(D::Minus1)?;
                per_layer.push(Tensor::stack(&[p, r], 0)?);
            }
            let pr: Vec<Vec<Vec<f32>>> = Tensor::stack(&per_layer, 0)?.to_vec3()?;
            for (l, pr) in pr.iter().enumerate() {
                for k in 0..b {
                    let zero = h_empty[k] || r_empty[k];
                    let (pk, rk) = if zero {
                        (0.0, 0.0)
                    } else {
                        (pr[0][k], pr[1][k])
                    };
                    out[l].push(Prf::from_pr(pk, rk));
                }
            }
            start = end;
        }
        Ok(out)
    }
}

fn normalise(h: &Tensor) -> candle_core::Result<Tensor> {
    let norm = h.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?;
    h.broadcast_div(&norm)
}
