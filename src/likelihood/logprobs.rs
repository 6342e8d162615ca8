//! Per-token log-probabilities of scored texts: one prefill of a batch of item rows, the output
//! head at each position read (once, however many tokens are read there), a log-softmax over
//! the vocabulary per position.

use super::layout::ItemRows;
use crate::model::{Batch, Products, Transformer};
use candle_core::{D, DType, Tensor};
use std::collections::HashMap;

/// Positions whose logits are computed at a time: the output head is expanded once per call
/// (a quantized head: its whole matrix), so fewer, larger calls; 512 × a 152k vocabulary × 4
/// bytes is 311 MB.
const POSITIONS_AT_ONCE: usize = 512;

/// Positions normalised over the vocabulary at a time: candle's log-softmax holds about three
/// tensors of its input's size (32 × 152k × 4 bytes × 3: 58 MB).
const SOFTMAX_ROWS: usize = 32;

/// For each item, for each of its sequences, the log-probability of each scored token.
pub fn log_probs(
    model: &Transformer,
    items: &[&ItemRows],
) -> candle_core::Result<Vec<Vec<Vec<f64>>>> {
    let rows: Vec<_> = items.iter().map(|i| i.row.clone()).collect();
    // Each (row, position) read once, with every token read there.
    let mut positions: Vec<(usize, usize)> = Vec::new();
    let mut index: HashMap<(usize, usize), usize> = HashMap::new();
    let mut wanted: Vec<Vec<u32>> = Vec::new();
    for (r, item) in items.iter().enumerate() {
        for &(p, t) in item.reads.iter().flatten() {
            let k = *index.entry((r, p)).or_insert_with(|| {
                positions.push((r, p));
                wanted.push(Vec::new());
                positions.len() - 1
            });
            if !wanted[k].contains(&t) {
                wanted[k].push(t);
            }
        }
    }
    // Prefill products whatever the rows: an item's numbers are the same alone as in a batch.
    let batch = Batch::from_rows(&rows, 0, model.device())?
        .with_products(Products::Prefill)
        .reading(&positions)?;
    crate::heap::release_freed_memory();
    let hidden = model.forward(&batch, None)?;
    crate::heap::release_freed_memory();
    let mut values: HashMap<(usize, u32), f64> = HashMap::new();
    for (block, at) in positions.chunks(POSITIONS_AT_ONCE).enumerate() {
        let logits = model.logits_at(&hidden, at, None)?.to_dtype(DType::F32)?;
        let vocab = logits.dim(1)?;
        for start in (0..at.len()).step_by(SOFTMAX_ROWS) {
            let n = SOFTMAX_ROWS.min(at.len() - start);
            let lp = candle_nn::ops::log_softmax(&logits.narrow(0, start, n)?, D::Minus1)?;
            let mut pairs = Vec::new();
            for i in 0..n {
                let k = block * POSITIONS_AT_ONCE + start + i;
                pairs.extend(wanted[k].iter().map(|&t| (k, i, t)));
            }
            let flat: Vec<u32> = (pairs.iter())
                .map(|&(_, i, t)| (i * vocab) as u32 + t)
                .collect();
            let idx = Tensor::from_vec(flat, pairs.len(), lp.device())?;
            let picked = lp.flatten_all()?.index_select(&idx, 0)?.to_vec1::<f32>()?;
            for (&(k, _, t), v) in pairs.iter().zip(picked) {
                values.insert((k, t), f64::from(v));
            }
        }
    }
    Ok(items
        .iter()
        .enumerate()
        .map(|(r, item)| {
            (item.reads.iter())
                .map(|read| {
                    (read.iter())
                        .map(|&(p, t)| values[&(index[&(r, p)], t)])
                        .collect()
                })
                .collect()
        })
        .collect())
}
