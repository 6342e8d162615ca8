//! A whole BERTScore run: items → (candidate, references) pairs → scores.jsonl, resumable.

use super::{BertScoreError, BertScorer, Prf};
use crate::data::Item;
use crate::results::{ModelId, Provenance, ResultsError, ResultsFile};
use serde_json::{Map, Value, json};
use std::path::Path;

/// Items per chunk: large enough to batch well on a GPU, small enough to lose little to a kill.
const CHUNK_ITEMS: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Score(#[from] BertScoreError),
    #[error(transparent)]
    Results(#[from] ResultsError),
}

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

#[derive(Debug, Default)]
pub struct RunSummary {
    pub scored: usize,
    pub skipped_finished: usize,
    /// Error lines of an earlier run taken out of the file, their items scored again.
    pub retried: usize,
    pub failed: Vec<String>,
    /// Items with nothing to compare with (no reference, or no context turn): error lines.
    pub unpaired: Vec<String>,
}

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
        if let Some((path, b)) = &self.baseline {
            settings.insert(
                "baseline".into(),
                json!({"file": path, "P": b.p, "R": b.r, "F": b.f}),
            );
        }
        Provenance {
            hyoka: crate::VERSION.into(),
            task: "bertscore".into(),
            rubric: None,
            models: vec![self.model.clone()],
            dtype: crate::model::device::dtype_name(self.scorer.encoder.dtype()).into(),
            device: crate::model::device::device_name(self.scorer.encoder.device()),
            settings,
        }
    }

    /// The references of an item, or why it has none.
    fn references<'i>(&self, item: &'i Item) -> Result<Vec<&'i str>, String> {
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

    pub fn run(
        &self,
        items: &[Item],
        output: &Path,
        overwrite: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<RunSummary, RunError> {
        let provenance = self.provenance();
        let provenance_value = serde_json::to_value(&provenance).expect("provenance serialises");
        let mut file = ResultsFile::open(output, &provenance, overwrite)?;
        let mut summary = RunSummary::default();
        // Every item with references is tokenized and paired up front: idf and bert_score's
        // padding floors come from all of them, finished or not, so a resumed run scores the
        // rest exactly as an uninterrupted one would.
        let mut valid: Vec<&Item> = Vec::new();
        let mut references: Vec<Vec<&str>> = Vec::new();
        let mut lines = Vec::new();
        for item in items {
            match self.references(item) {
                Ok(refs) => {
                    valid.push(item);
                    references.push(refs);
                }
                Err(_) if file.finished.contains(&item.id) => {}
                Err(e) => {
                    summary.unpaired.push(format!("{}: {e}", item.id));
                    lines.push(
                        json!({"id": item.id, "error": e, "provenance": provenance_value})
                            .to_string(),
                    );
                }
            }
        }
        file.append(&lines)?;
        let candidates: Vec<&str> = valid.iter().map(|i| i.response.text.as_str()).collect();
        let (sentences, pairs) = self.scorer.pairs(&candidates, &references)?;
        let idf = self.scorer.idf(self.idf, &sentences, &pairs.pairs);
        let floors = super::pad_floors(&sentences, &pairs.pairs, self.emulate_batch);
        let todo: Vec<usize> = (0..valid.len())
            .filter(|&k| !file.finished.contains(&valid[k].id))
            .collect();
        summary.skipped_finished = items
            .iter()
            .filter(|i| file.finished.contains(&i.id))
            .count();
        summary.retried = file.retried();

        // Chunks of items, each appended when done: a killed run loses at most one chunk.
        let mut done = 0;
        for chunk in todo.chunks(CHUNK_ITEMS) {
            let ranges: Vec<std::ops::Range<usize>> =
                chunk.iter().map(|&k| pairs.items[k].clone()).collect();
            let chunk_pairs: Vec<(usize, usize)> = ranges
                .iter()
                .flat_map(|r| pairs.pairs[r.clone()].iter().copied())
                .collect();
            let chunk_floors: Vec<(bool, bool)> = ranges
                .iter()
                .flat_map(|r| floors[r.clone()].iter().copied())
                .collect();
            let prfs = self.scorer.score_pairs(
                &sentences,
                &chunk_pairs,
                &idf,
                &chunk_floors,
                self.batch_tokens,
            )?;
            let mut lines = Vec::with_capacity(chunk.len());
            let mut next = 0;
            for (&k, r) in chunk.iter().zip(&ranges) {
                let best = super::best_of(&prfs[next..next + r.len()]);
                next += r.len();
                let s = match &self.baseline {
                    Some((_, b)) => best.rescale(b),
                    None => best,
                };
                let mut line = Map::new();
                line.insert("id".into(), json!(valid[k].id));
                line.insert(
                    "bertscore".into(),
                    serde_json::to_value(s).expect("numbers serialise"),
                );
                line.insert("provenance".into(), provenance_value.clone());
                lines.push(Value::Object(line).to_string());
                summary.scored += 1;
            }
            file.append(&lines)?;
            done += chunk.len();
            progress(done, todo.len());
        }
        Ok(summary)
    }
}
