//! What attention is given: a layer's keys and values, how a batch is split into blocks of
//! rows and queries, and the additive mask value.

use candle_core::{Result, Tensor};

/// Keys and values of one layer: (1 or batch, kv_heads, seq, head_dim).
pub type LayerKv = (Tensor, Tensor);

/// How attention scores are formed from q·kᵀ: multiplied by `scale`, then soft-capped,
/// cap·tanh(s / cap), where the model says so (Gemma 2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreScaling {
    pub scale: f64,
    pub softcap: Option<f64>,
}

/// The additive mask value: the most negative f32, as transformers uses. Masks are added to f32
/// scores (whatever the model dtype), where it stays finite: f16's −65504 plus a negative score
/// rounded to −inf, and a row with every key masked gave NaN.
pub const MASKED: f32 = f32::MIN;

/// Queries per block: keys after a block's last query are masked for every query of the block,
/// so they are never computed (causal attention does about half the work of full attention).
const QUERY_BLOCK: usize = 256;

/// How attention splits a batch: `rows` batch rows and `queries` queries at a time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionPlan {
    pub rows: usize,
    pub queries: usize,
    batch: usize,
    len: usize,
}

impl AttentionPlan {
    /// For `batch` rows of `len` queries over at most `keys` keys each, `heads` query heads,
    /// blocks of at most `limit` scores. Fails only when one query's scores over every head
    /// exceed the limit (tens of millions of keys).
    pub fn new(batch: usize, heads: usize, len: usize, keys: usize, limit: usize) -> Result<Self> {
        let per_query = heads * keys.max(1);
        let queries = QUERY_BLOCK.min(len.max(1)).min(limit / per_query);
        if queries == 0 {
            candle_core::bail!(
                "attention over {keys} keys with {heads} heads needs more than {limit} scores for one query"
            );
        }
        let rows = (limit / (per_query * queries)).clamp(1, batch.max(1));
        Ok(AttentionPlan {
            rows,
            queries,
            batch,
            len,
        })
    }

    pub fn row_chunks(&self) -> impl Iterator<Item = std::ops::Range<usize>> + use<> {
        let (step, end) = (self.rows, self.batch);
        (0..end).step_by(step).map(move |s| s..(s + step).min(end))
    }

    pub fn query_blocks(&self) -> impl Iterator<Item = std::ops::Range<usize>> + use<> {
        let (step, end) = (self.queries, self.len);
        (0..end).step_by(step).map(move |s| s..(s + step).min(end))
    }
}
