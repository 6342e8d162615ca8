//! A whole BERTScore run: items → (candidate, references) pairs → scores.jsonl, resumable.

use super::{BertScoreError, BertScorer};
use crate::data::Item;
use crate::results::prf::{Prf, best_of};
use crate::results::runner::{self, Outcome, RunError, RunSummary, ScoreTask};
use crate::results::{Body, ModelId, Provenance, Task};
use serde_json::{Map, json};
use std::path::Path;

/// Items per chunk: large enough to batch well on a GPU, small enough to lose little to a kill.
const CHUNK_ITEMS: usize = 8192;

/// What the response is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Against {
    /// The item's `reference` list (max over several, per column).
    Reference,
    /// The last context turn (the paper's setting).
    LastTurn,
}

pub struct BertScoreRun<'a> {
    pub scorer: &'a BertScorer,
    pub model: ModelId,
    pub layer: usize,
    pub idf: bool,
    /// Where the baseline came from (a file, or `builtin:LANG/MODEL.tsv`) and its row for `layer`.
    pub baseline: Option<(String, Prf)>,
    pub against: Against,
    pub batch_tokens: usize,
    /// bert_score's batch_size whose padding behaviour is reproduced (None: not reproduced).
    pub emulate_batch: Option<usize>,
}

/// Padded tokens per encoder batch by default (a speed setting: scores do not depend on it).
/// On CPU a batch's activations stay in the last-level cache at 2,048 tokens (MiniLM's
/// intermediate layer: 12 MB; medians of 3 runs 90.0 vs 83.5 pairs/s at 16,384, with an
/// eighth of the memory); a GPU wants large batches.
pub fn default_batch_tokens(device: &candle_core::Device) -> usize {
    if device.is_cpu() { 2048 } else { 16384 }
}
/// bert_score's default batch size, whose padding floors hyoka reproduces by default.
pub const BERT_SCORE_BATCH: usize = 64;

impl BertScoreRun<'_> {
    pub fn provenance(&self) -> Provenance {
        let mut settings = Map::new();
        settings.insert("layer".into(), json!(self.layer));
        settings.insert("idf".into(), json!(self.idf));
        settings.insert("bert_score_batch".into(), json!(self.emulate_batch));
        settings.insert(
            "against".into(),
            json!(match self.against {
                Against::Reference => "reference",
                Against::LastTurn => "last-turn",
            }),
        );
        let encoder = &self.scorer.encoder;
        if encoder.dtype() == candle_core::DType::F32
            && !encoder.device().is_cpu()
            && crate::model::backend::device::tf32()
        {
            settings.insert("tf32".into(), json!(true));
        }
        if let Some((path, b)) = &self.baseline {
            settings.insert(
                "baseline".into(),
                json!({"file": path, "P": b.p, "R": b.r, "F": b.f}),
            );
        }
        Provenance::new(
            Task::BertScore,
            None,
            vec![self.model.clone()],
            encoder.dtype(),
            encoder.device(),
            settings,
        )
    }

    /// The references of an item, or why it has none.
    fn references<'i>(&self, item: &'i Item) -> Result<Vec<&'i str>, String> {
        if item.scope == crate::data::Scope::Dialogue {
            return Err(
                "a whole dialogue (scope \"dialogue\"): BERTScore compares one response with references, and a dialogue-level rating is not one response's"
                    .into(),
            );
        }
        match self.against {
            Against::Reference if item.reference.is_empty() => Err(
                "no `reference` (use --against last-turn to compare with the last context turn)"
                    .into(),
            ),
            Against::Reference => Ok(item.reference.iter().map(String::as_str).collect()),
            Against::LastTurn => item
                .context
                .last()
                .map(|t| vec![t.text.as_str()])
                .ok_or_else(|| "no context turn to compare with".into()),
        }
    }

    /// Score every item not yet in `output`, appending one line per item (`results::runner`).
    pub fn run(
        &self,
        items: &[Item],
        output: &Path,
        overwrite: bool,
        progress: &mut crate::results::Progress<'_>,
    ) -> Result<RunSummary, RunError<BertScoreError>> {
        let mut task = BertScoreTask {
            run: self,
            plan: None,
        };
        runner::run(&mut task, items, output, overwrite, progress)
    }
}

/// What a run computes once from all items: per item its (candidate, references) pairs or why
/// it has none; the distinct sentences, idf weights and bert_score's padding floors.
struct Planned {
    /// Per item: its index among the paired items, or why it has nothing to compare with.
    paired: Vec<Result<usize, String>>,
    sentences: super::Sentences,
    pairs: super::Pairs,
    idf: super::Idf,
    floors: Vec<(bool, bool)>,
}

struct BertScoreTask<'r, 'a> {
    run: &'r BertScoreRun<'a>,
    plan: Option<Planned>,
}

impl ScoreTask for BertScoreTask<'_, '_> {
    type Error = BertScoreError;
    type Unit = Item;

    fn provenance(&self) -> Provenance {
        self.run.provenance()
    }

    fn plan(&mut self, items: &[Item], todo: &[usize]) -> Result<Vec<Vec<usize>>, BertScoreError> {
        // Every item with references is tokenized and paired up front: idf and bert_score's
        // padding floors come from all of them, finished or not, so a resumed run scores the
        // rest exactly as an uninterrupted one would.
        let mut candidates: Vec<&str> = Vec::new();
        let mut references: Vec<Vec<&str>> = Vec::new();
        let paired = items
            .iter()
            .map(|item| {
                self.run.references(item).map(|refs| {
                    candidates.push(item.response.text.as_str());
                    references.push(refs);
                    candidates.len() - 1
                })
            })
            .collect();
        let (sentences, pairs) = self.run.scorer.pairs(&candidates, &references)?;
        let idf = self.run.scorer.idf(self.run.idf, &sentences, &pairs.pairs);
        let floors = super::pad_floors(&sentences, &pairs.pairs, self.run.emulate_batch);
        self.plan = Some(Planned {
            paired,
            sentences,
            pairs,
            idf,
            floors,
        });
        // Chunks of items, each appended when done: a killed run loses at most one chunk.
        Ok(todo.chunks(CHUNK_ITEMS).map(<[usize]>::to_vec).collect())
    }

    fn score(&mut self, _items: &[Item], chunk: &[usize]) -> Result<Vec<Outcome>, BertScoreError> {
        let plan = self.plan.as_ref().expect("planned before scoring");
        let ranges: Vec<std::ops::Range<usize>> = chunk
            .iter()
            .filter_map(|&i| plan.paired[i].as_ref().ok())
            .map(|&k| plan.pairs.items[k].clone())
            .collect();
        let chunk_pairs: Vec<(usize, usize)> = ranges
            .iter()
            .flat_map(|r| plan.pairs.pairs[r.clone()].iter().copied())
            .collect();
        let chunk_floors: Vec<(bool, bool)> = ranges
            .iter()
            .flat_map(|r| plan.floors[r.clone()].iter().copied())
            .collect();
        let prfs = if chunk_pairs.is_empty() {
            Vec::new()
        } else {
            self.run.scorer.score_pairs(
                &plan.sentences,
                &chunk_pairs,
                &plan.idf,
                &chunk_floors,
                self.run.batch_tokens,
            )?
        };
        let mut ranges = ranges.iter();
        let mut next = 0;
        Ok(chunk
            .iter()
            .map(|&i| match &plan.paired[i] {
                Err(why) => Outcome::NotApplicable(why.clone()),
                Ok(_) => {
                    let r = ranges.next().expect("one range per paired item");
                    let best = best_of(&prfs[next..next + r.len()]);
                    next += r.len();
                    Outcome::Scored(Body::BertScore(match &self.run.baseline {
                        Some((_, b)) => best.rescale(b),
                        None => best,
                    }))
                }
            })
            .collect())
    }
}
