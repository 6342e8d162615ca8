//! Greedy generation of many prompts together (`model::decoder::generate`): a translation does
//! not depend on which other texts share its batch.

use crate::model::decoder::generate::greedy_rows;
use crate::model::{PrefixKv, Transformer};

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
    Ok(greedy_rows(model, header, prompts, limits, stop)?
        .into_iter()
        .map(|g| Generated {
            tokens: g.tokens,
            finished: g.finished,
        })
        .collect())
}
