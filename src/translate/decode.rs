//! Greedy generation of many prompts together: one forward pass per step for every row that
//! still writes, on one preallocated cache (`model::KvCache`), each row computed as when it is
//! decoded alone (the cache's segments keep rows apart), so a translation does not depend on
//! which other texts share its batch.

use crate::model::{KvCache, LiveRows, PrefixKv, Products, Row, Transformer};

/// What greedy decoding wrote after one prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// The tokens written, the stop token left out.
    pub tokens: Vec<u32>,
    /// Whether a stop token ended it (false: it reached its limit first).
    pub finished: bool,
}

/// Greedy continuations of `prompts` (each the tokens after `header`'s), each until one of
/// `stop` or `limits[i]` tokens. The most probable token is taken, the first of equal ones
/// (as `torch.argmax`).
pub fn greedy_batch(
    model: &Transformer,
    header: Option<&PrefixKv>,
    prompts: &[&[u32]],
    limits: &[usize],
    stop: &[u32],
) -> candle_core::Result<Vec<Generated>> {
    assert_eq!(prompts.len(), limits.len(), "one limit per prompt");
    let mut out: Vec<Generated> = prompts
        .iter()
        .map(|_| Generated {
            tokens: Vec::new(),
            finished: false,
        })
        .collect();
    // What each prompt feeds next; None once it is done.
    let mut feeds: Vec<Option<Vec<u32>>> = prompts
        .iter()
        .zip(limits)
        .map(|(p, &limit)| (limit > 0 && !p.is_empty()).then(|| p.to_vec()))
        .collect();
    let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
    let most = limits.iter().copied().max().unwrap_or(0);
    let mut cache = KvCache::new(model, prompts.len(), header, longest + most)?;
    let mut live = LiveRows::all(prompts.len());
    let mut products = Products::ByRowCount;
    while live.sequences().iter().any(|&i| feeds[i].is_some()) {
        let rows: Vec<Row> = live
            .sequences()
            .iter()
            .map(|&i| feeds[i].clone().map(Row::plain).unwrap_or_default())
            .collect();
        let hidden = model.step(&mut cache, &rows, products)?;
        products = Products::RowWise;
        let at: Vec<(usize, usize)> = rows
            .iter()
            .enumerate()
            .filter_map(|(r, row)| row.trunk_end().map(|p| (r, p)))
            .collect();
        let logits = model.decode_logits(&hidden, &at)?.to_vec2::<f32>()?;
        let mut read = logits.iter();
        for &i in live.sequences() {
            if feeds[i].is_none() {
                continue;
            }
            let next = first_argmax(read.next().expect("one reading per writing row"));
            if stop.contains(&next) {
                out[i].finished = true;
                feeds[i] = None;
                continue;
            }
            out[i].tokens.push(next);
            feeds[i] = (out[i].tokens.len() < limits[i]).then(|| vec![next]);
        }
        live.drop_done(&mut cache, |i| feeds[i].is_some())?;
    }
    Ok(out)
}

/// The index of the largest value, the first of equal ones; NaN is never taken.
fn first_argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] || values[best].is_nan() {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::first_argmax;

    #[test]
    fn the_first_of_equal_maxima_is_taken() {
        assert_eq!(first_argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(first_argmax(&[f32::NAN, 0.5, 0.5]), 1);
        assert_eq!(first_argmax(&[-1.0]), 0);
    }
}
