//! Scoring batches of laid-out items with one model.

use super::error::JudgeError;
use super::json;
use super::layout::ItemLayout;
use crate::model::decoder::generate::greedy_batch;
use crate::model::decoder::log_probs::{Columns, log_probs_at};
use crate::model::{Batch, PrefixKv, Products, Transformer};
use crate::results::scores::AspectScore;

/// Memory the keys and values of one json decoding batch may take unless told otherwise
/// (`hyoka judge --json-cache-gib`): every row holds its own item's and answer's, beside the
/// header's kept once (an 8B model in f32: 0.25 MB per token, so rows of 500 tokens after the
/// header take 128 MB each), so a larger chunk of items is decoded a few rows at a time.
pub const JSON_CACHE_BYTES: usize = 2 << 30;

/// Scores batches of laid-out items with one model, reusing the rubric header's keys/values.
pub struct Scorer<'m> {
    model: &'m Transformer,
    header: usize,
    header_kv: Option<PrefixKv>,
}

impl<'m> Scorer<'m> {
    /// `header` tokens (shared by every item, see `layout::common_header`) are computed now, once.
    pub fn new(model: &'m Transformer, header_tokens: &[u32]) -> Result<Self, JudgeError> {
        let header_kv = if header_tokens.is_empty() {
            None
        } else {
            let kv = model.prefix(header_tokens)?;
            // The header's prefill temporaries, kept in the heap, fit the items' batches badly.
            crate::heap::release_freed_memory();
            Some(kv)
        };
        Ok(Scorer {
            model,
            header: header_tokens.len(),
            header_kv,
        })
    }

    pub fn header_len(&self) -> usize {
        self.header
    }

    /// One forward pass over these items; per item, per aspect, the result, or why the item
    /// has none (the model's output there is not a number).
    pub fn score(&self, items: &[&ItemLayout]) -> Result<Vec<ItemScores>, JudgeError> {
        let rows: Vec<_> = items.iter().map(|l| l.row(self.header)).collect();
        let mut at = Vec::new();
        let positions: Vec<Vec<Vec<usize>>> = items
            .iter()
            .map(|l| l.query_positions(self.header))
            .collect();
        for (r, per_aspect) in positions.iter().enumerate() {
            for p in per_aspect.iter().flatten() {
                at.push((r, *p));
            }
        }
        // Prefill products whatever the rows: an item's bits are the same alone (a few rows
        // read in the last layer) as in a batch (many).
        let batch = Batch::from_rows(&rows, self.header, self.model.device())?
            .with_products(Products::Prefill)
            .reading(&at)?;
        // Each stage starts from the heap's free pages handed back (`heap`): the blocks a
        // batch's layers freed do not fit the output head's nor a shorter next batch's, whose
        // temporaries would then touch fresh pages on top of the old ones (without the release,
        // a 13B's last 4 of 24 items peak 0.06 GiB above the 20 before them).
        crate::heap::release_freed_memory();
        let hidden = self.model.forward(&batch, self.header_kv.as_ref())?;
        crate::heap::release_freed_memory();
        let logits = self.model.logits_at(&hidden, &at, None)?;
        drop(hidden);
        // Normalised over the vocabulary on the device; only the columns the scores read come
        // back (a few per aspect, not queries × vocabulary).
        let mut columns: Vec<u32> = items
            .iter()
            .flat_map(|l| l.aspects.iter().flat_map(|t| t.tokens()))
            .collect();
        columns.sort_unstable();
        columns.dedup();
        let log_probs = log_probs_at(&logits, Columns::Same(&columns))?;
        let column = |t: u32| {
            columns
                .binary_search(&t)
                .expect("a column per target token")
        };
        let mut next = 0;
        let mut out = Vec::with_capacity(items.len());
        for (layout, per_aspect) in items.iter().zip(&positions) {
            let read = per_aspect.iter().map(Vec::len).sum::<usize>();
            let rows = &log_probs[next..next + read];
            if rows.iter().flatten().any(|v| !v.is_finite()) {
                next += read;
                out.push(Err(super::error::NOT_A_NUMBER.to_string()));
                continue;
            }
            let mut aspects = Vec::with_capacity(layout.aspects.len());
            for (targets, pos) in layout.aspects.iter().zip(per_aspect) {
                let lp = &log_probs[next..next + pos.len()];
                next += pos.len();
                let (dist, off) = targets.distribution(|q, t| lp[q][column(t)] as f64);
                aspects.push(AspectScore::from_distribution(&targets.scores, &dist, off));
            }
            out.push(Ok(aspects));
        }
        Ok(out)
    }
}

/// An item's scores per aspect, or why it has none.
pub type ItemScores = Result<Vec<AspectScore>, String>;

impl Scorer<'_> {
    /// json mode: the objects this judge writes for several items (see `json`); `seeds` one
    /// per item. The items are decoded together (`JsonFormat::decode_batch`), as many at once
    /// as their keys and values fit in `cache_bytes` (at least one); each object is the one
    /// decoding that item alone writes, whatever that number.
    pub fn write_json(
        &self,
        format: &json::JsonFormat,
        layouts: &[&ItemLayout],
        decoding: json::Decoding,
        seeds: &[u64],
        cache_bytes: usize,
    ) -> Result<Vec<json::WrittenJson>, JudgeError> {
        // The header's keys and values are kept once, not per row (`KvCache`).
        let longest = layouts
            .iter()
            .map(|l| l.trunk.len() - self.header)
            .max()
            .unwrap_or(0);
        let row_bytes = self.model.kv_bytes_per_slot() * (longest + format.reserve());
        let rows = (cache_bytes / row_bytes.max(1)).max(1);
        let mut out = Vec::with_capacity(layouts.len());
        for (chunk, seeds) in layouts.chunks(rows).zip(seeds.chunks(rows)) {
            let prompts: Vec<&[u32]> = chunk.iter().map(|l| &l.trunk[self.header..]).collect();
            let header = self.header_kv.as_ref();
            // As before each scored batch (`score`): its first step is a prompt's prefill.
            crate::heap::release_freed_memory();
            out.extend(format.decode_batch(self.model, header, &prompts, decoding, seeds)?);
        }
        Ok(out)
    }

    /// The peers' method, for comparison: greedy generation of up to `max_new` tokens after an
    /// aspect's answer prefix (stopping at `stop` tokens), through the decoding loop that writes
    /// json answers and translations (its tie rule: the first of equal logits); the caller
    /// parses the text. One row at a time: a row's cache holds its whole prompt after the
    /// header, and the baseline is a comparison, not the judge's hot path.
    pub fn greedy(
        &self,
        layout: &ItemLayout,
        aspect: usize,
        max_new: usize,
        stop: &[u32],
    ) -> Result<Vec<u32>, JudgeError> {
        let mut prompt = layout.trunk[self.header..].to_vec();
        prompt.extend_from_slice(&layout.aspects[aspect].stem);
        let header = self.header_kv.as_ref();
        let generated = greedy_batch(self.model, header, &[&prompt], &[max_new], stop)?;
        Ok(generated
            .into_iter()
            .next()
            .map_or_else(Vec::new, |g| g.tokens))
    }
}

/// The first integer in a generated answer, if it is a valid score (the peers' regex parse).
pub fn parse_score(text: &str, scores: &[i64]) -> Option<i64> {
    let digits: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_digit() {
                c
            } else if ('０'..='９').contains(&c) {
                char::from(b'0' + (c as u32 - '０' as u32) as u8)
            } else {
                ' '
            }
        })
        .collect();
    let first: i64 = digits.split_whitespace().next()?.parse().ok()?;
    scores.contains(&first).then_some(first)
}
