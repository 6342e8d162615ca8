//! Per-token log-probabilities of scored texts: one prefill of a batch of item rows, the output
//! head at the positions read, a log-softmax over the vocabulary per position.

use super::layout::ItemRows;
use crate::model::{Batch, Products, Transformer};
use candle_core::{D, DType, Tensor};

/// Positions whose logits are computed and normalised at a time: 64 × a 152k vocabulary × 4
/// bytes × 3 tensors (logits, log-softmax, its temporaries) is 117 MB.
const POSITIONS_AT_ONCE: usize = 64;

/// For each item, for each of its sequences, the log-probability of each scored token.
pub fn log_probs(
    model: &Transformer,
    items: &[&ItemRows],
) -> candle_core::Result<Vec<Vec<Vec<f64>>>> {
    let rows: Vec<_> = items.iter().map(|i| i.row.clone()).collect();
    let mut at = Vec::new();
    let mut targets = Vec::new();
    for (r, item) in items.iter().enumerate() {
        for (p, t) in item.reads.iter().flatten() {
            at.push((r, *p));
            targets.push(*t);
        }
    }
    // Prefill products whatever the rows: an item's numbers are the same alone as in a batch.
    let batch = Batch::from_rows(&rows, 0, model.device())?
        .with_products(Products::Prefill)
        .reading(&at)?;
    crate::heap::release_freed_memory();
    let hidden = model.forward(&batch, None)?;
    crate::heap::release_freed_memory();
    let mut values = Vec::with_capacity(at.len());
    for (at, targets) in at
        .chunks(POSITIONS_AT_ONCE)
        .zip(targets.chunks(POSITIONS_AT_ONCE))
    {
        let logits = model.logits_at(&hidden, at, None)?;
        let log_probs = candle_nn::ops::log_softmax(&logits.to_dtype(DType::F32)?, D::Minus1)?;
        let idx = Tensor::from_slice(targets, (targets.len(), 1), log_probs.device())?;
        let picked = log_probs.gather(&idx, 1)?.flatten_all()?.to_vec1::<f32>()?;
        values.extend(picked.into_iter().map(f64::from));
    }
    let mut next = values.into_iter();
    Ok(items
        .iter()
        .map(|item| {
            item.reads
                .iter()
                .map(|r| next.by_ref().take(r.len()).collect())
                .collect()
        })
        .collect())
}
