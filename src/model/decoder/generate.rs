//! One decoding loop for the rows hyoka writes together (json answers, translations): one
//! forward pass per step for every row that still writes, on one preallocated cache
//! (`KvCache`), each row computed as when it is decoded alone (the cache's segments keep rows
//! apart), so what a row writes does not depend on which rows share its batch. What a row writes
//! next is its writer's choice (`RowWriter`): greedy here (`Greedy`, `greedy_batch`: translations), under a
//! grammar in `judge::json`.

use super::batch::Row;
use super::decode::{KvCache, LiveRows};
use super::transformer::{PrefixKv, Transformer};
use crate::model::Products;
use candle_core::{DType, Tensor};

/// What a row feeds at a step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Feed {
    pub tokens: Vec<u32>,
    /// Branches after `tokens` whose next-token log-probabilities are read too (the paths of a
    /// score written in several tokens); they are not part of what is written.
    pub probes: Vec<Vec<u32>>,
    /// Log-probabilities are read (a score's distribution), else logits (a token to choose).
    pub log_probs: bool,
}

impl Feed {
    /// Tokens whose logits after the last are read.
    pub fn tokens(tokens: Vec<u32>) -> Feed {
        Feed {
            tokens,
            ..Feed::default()
        }
    }
}

/// What a feed gave: the logits after its last token, or the log-probabilities after it and
/// after each probe.
#[derive(Clone, Debug)]
pub enum Read {
    Logits(Vec<f32>),
    LogProbs(Vec<Vec<f32>>),
}

/// One row's writer: what it reads decides what it feeds next.
pub trait RowWriter {
    type Error: From<candle_core::Error>;

    /// The row's next feed after reading `read`; None once it has written all it writes.
    fn advance(&mut self, read: Read) -> Result<Option<Feed>, Self::Error>;
}

/// Decode every row to its end: `prompts[i]` (the tokens after `header`'s) is row i's first
/// feed (None: nothing to write), `writers[i]` chooses its next. The cache holds `slots`
/// positions per row after the header: at least the most any row feeds in all.
///
/// A row that reads log-probabilities waits while another still chooses tokens from logits:
/// every step that feeds runs of fixed text expands every weight matrix (`Matrix::by_runs`), so
/// such runs are fed in the same steps rather than each in steps of its own (16 items of
/// roleplay8-ja on Qwen2.5-0.5B: 16 such steps instead of 48). A row is fed the same tokens, and
/// gets the same numbers; only later.
pub fn decode_rows<W: RowWriter>(
    model: &Transformer,
    header: Option<&PrefixKv>,
    prompts: Vec<Option<Feed>>,
    writers: &mut [W],
    slots: usize,
) -> Result<(), W::Error> {
    assert_eq!(prompts.len(), writers.len(), "one writer per row");
    let mut feeds = prompts;
    let mut cache = KvCache::new(model, feeds.len(), header, slots)?;
    let mut live = LiveRows::all(feeds.len());
    let mut products = Products::ByRowCount;
    while live.sequences().iter().any(|&i| feeds[i].is_some()) {
        let choosing =
            (live.sequences().iter()).any(|&i| feeds[i].as_ref().is_some_and(|f| !f.log_probs));
        let waiting: Vec<bool> = (feeds.iter())
            .map(|f| choosing && f.as_ref().is_some_and(|f| f.log_probs))
            .collect();
        let rows: Vec<Row> = (live.sequences().iter())
            .map(|&i| match &feeds[i] {
                Some(f) if !waiting[i] => Row {
                    trunk: f.tokens.clone(),
                    branches: f.probes.clone(),
                },
                _ => Row::default(),
            })
            .collect();
        let hidden = model.step(&mut cache, &rows, products)?;
        products = Products::RowWise;
        let (mut logits_at, mut log_probs_at) = (Vec::new(), Vec::new());
        for (r, (row, &i)) in rows.iter().zip(live.sequences()).enumerate() {
            let (Some(f), Some(end)) = (&feeds[i], row.trunk_end()) else {
                continue;
            };
            if f.log_probs {
                log_probs_at.extend(row.ends().map(|p| (r, p)));
            } else {
                logits_at.push((r, end));
            }
        }
        // One pass over the output head for every position read this step.
        let (mut logits, mut log_probs) = (Vec::new().into_iter(), Vec::new().into_iter());
        if !logits_at.is_empty() || !log_probs_at.is_empty() {
            let n = logits_at.len();
            logits_at.append(&mut log_probs_at);
            let all = model.decode_logits(&hidden, &logits_at)?;
            if n > 0 {
                logits = host_rows(&all.narrow(0, 0, n)?)?.into_iter();
            }
            if logits_at.len() > n {
                let rest = all.narrow(0, n, logits_at.len() - n)?;
                log_probs = log_softmax_rows(&rest)?.into_iter();
            }
        }
        for &i in live.sequences() {
            let Some(f) = &feeds[i] else { continue };
            if waiting[i] {
                continue;
            }
            let read = if f.log_probs {
                Read::LogProbs(log_probs.by_ref().take(1 + f.probes.len()).collect())
            } else {
                Read::Logits(logits.next().expect("one reading per choosing row"))
            };
            feeds[i] = writers[i].advance(read)?;
        }
        live.drop_done(&mut cache, |i| feeds[i].is_some())?;
    }
    Ok(())
}

/// Each row of (n, vocab) logits as f32 on the host.
pub(crate) fn host_rows(logits: &Tensor) -> candle_core::Result<Vec<Vec<f32>>> {
    logits.to_dtype(DType::F32)?.to_vec2()
}

/// Each row's log-softmax over the whole vocabulary, on the device (a row's values do not
/// depend on the rows read with it).
pub(crate) fn log_softmax_rows(logits: &Tensor) -> candle_core::Result<Vec<Vec<f32>>> {
    candle_nn::ops::log_softmax(&logits.to_dtype(DType::F32)?, candle_core::D::Minus1)?.to_vec2()
}

/// Greedy writing: the most probable token, the first of equal ones (as `torch.argmax`), until
/// a stop token or the row's limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Greedy<'s> {
    stop: &'s [u32],
    limit: usize,
    tokens: Vec<u32>,
    finished: bool,
}

impl<'s> Greedy<'s> {
    pub fn new(stop: &'s [u32], limit: usize) -> Self {
        Greedy {
            stop,
            limit,
            tokens: Vec::new(),
            finished: false,
        }
    }
}

impl RowWriter for Greedy<'_> {
    type Error = candle_core::Error;

    fn advance(&mut self, read: Read) -> candle_core::Result<Option<Feed>> {
        let Read::Logits(logits) = read else {
            candle_core::bail!("greedy decoding reads logits")
        };
        let next = first_argmax(&logits);
        if self.stop.contains(&next) {
            self.finished = true;
            return Ok(None);
        }
        self.tokens.push(next);
        Ok((self.tokens.len() < self.limit).then(|| Feed::tokens(vec![next])))
    }
}

/// What greedy decoding wrote after one prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// The tokens written, the stop token left out.
    pub tokens: Vec<u32>,
    /// Whether a stop token ended it (false: it reached its limit first).
    pub finished: bool,
}

/// Greedy continuations of `prompts` (each the tokens after `header`'s), each until one of
/// `stop` or `limits[i]` tokens, decoded together.
pub fn greedy_batch(
    model: &Transformer,
    header: Option<&PrefixKv>,
    prompts: &[&[u32]],
    limits: &[usize],
    stop: &[u32],
) -> candle_core::Result<Vec<Generated>> {
    assert_eq!(prompts.len(), limits.len(), "one limit per prompt");
    let mut writers: Vec<Greedy> = limits.iter().map(|&l| Greedy::new(stop, l)).collect();
    let feeds = (prompts.iter().zip(limits))
        .map(|(p, &limit)| (limit > 0 && !p.is_empty()).then(|| Feed::tokens(p.to_vec())))
        .collect();
    let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
    let most = limits.iter().copied().max().unwrap_or(0);
    decode_rows(model, header, feeds, &mut writers, longest + most)?;
    Ok((writers.into_iter())
        .map(|g| Generated {
            tokens: g.tokens,
            finished: g.finished,
        })
        .collect())
}

/// The index of the largest value, the first of equal ones; NaN is never taken.
pub fn first_argmax(values: &[f32]) -> u32 {
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
