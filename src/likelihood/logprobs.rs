//! Per-token log-probabilities of scored texts: one prefill of a batch of item rows, the output
//! head at each position read (once, however many tokens are read there), a log-softmax over
//! the vocabulary per position.

use super::layout::ItemRows;
use crate::model::decoder::log_probs::{Columns, log_probs_at};
use crate::model::{Batch, Products, Transformer};
use std::collections::HashMap;

/// Positions whose logits are computed at a time: the output head is expanded once per call
/// (a quantized head: its whole matrix), so fewer, larger calls; 512 × a 152k vocabulary × 4
/// bytes is 311 MB.
const POSITIONS_AT_ONCE: usize = 512;

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
        let logits = model.logits_at(&hidden, at, None)?;
        let first = block * POSITIONS_AT_ONCE;
        let read = &wanted[first..first + at.len()];
        for (i, row) in log_probs_at(&logits, Columns::PerRow(read))?
            .into_iter()
            .enumerate()
        {
            for (&t, v) in read[i].iter().zip(row) {
                values.insert((first + i, t), f64::from(v));
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
