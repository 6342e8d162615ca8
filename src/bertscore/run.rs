//! A whole BERTScore run: items → (candidate, references) pairs → scores.jsonl, resumable.

use super::{BertScoreError, BertScorer, Prf};
use crate::data::Item;
use crate::results::{ModelId, Provenance, ResultsError, ResultsFile};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

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
    /// Baseline file and its row for `layer`.
    pub baseline: Option<(PathBuf, Prf)>,
    pub against: Against,
    pub batch_tokens: usize,
    /// bert_score's batch_size whose padding behaviour is reproduced (None: not reproduced).
    pub emulate_batch: Option<usize>,
}

#[derive(Debug, Default)]
pub struct RunSummary {
    pub scored: usize,
    pub skipped_finished: usize,
    pub failed: Vec<String>,
}

impl BertScoreRun<'_> {
    pub fn provenance(&self) -> Provenance {
        let mut settings = Map::new();
        settings.insert("layer".into(), json!(self.layer));
        settings.insert("idf".into(), json!(self.idf));
        settings.insert("bert_score_batch".into(), json!(self.emulate_batch));
        settings.insert("against".into(), json!(match self.against { Against::Reference => "reference", Against::LastTurn => "last-turn" }));
        if let Some((path, b)) = &self.baseline {
            settings.insert("baseline".into(), json!({"file": path.display().to_string(), "P": b.p, "R": b.r, "F": b.f}));
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
            Against::Reference if item.reference.is_empty() => Err("no `reference` (use --against last-turn to compare with the last context turn)".into()),
            Against::Reference => Ok(item.reference.iter().map(String::as_str).collect()),
            Against::LastTurn => item.context.last().map(|t| vec![t.text.as_str()]).ok_or_else(|| "no context turn to compare with".into()),
        }
    }

    pub fn run(&self, items: &[Item], output: &Path, overwrite: bool, progress: &mut dyn FnMut(usize, usize)) -> Result<RunSummary, RunError> {
        let provenance = self.provenance();
        let provenance_value = serde_json::to_value(&provenance).expect("provenance serialises");
        let mut file = ResultsFile::open(output, &provenance, overwrite)?;
        // idf comes from every item's references, finished or not: a resumed run scores the
        // rest exactly as an uninterrupted one would.
        let all_refs: Vec<&str> = items.iter().filter_map(|i| self.references(i).ok()).flatten().collect();
        let idf = self.scorer.idf(self.idf, &all_refs)?;
        // Padding floors as bert_score would have them on the whole input, by item id.
        let valid: Vec<(&Item, Vec<&str>)> = items.iter().filter_map(|i| self.references(i).ok().map(|r| (i, r))).collect();
        let floors_flat = self.scorer.pad_floors(
            &valid.iter().map(|(i, _)| i.response.text.as_str()).collect::<Vec<_>>(),
            &valid.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
            self.emulate_batch,
        )?;
        let mut floors: std::collections::HashMap<&str, Vec<(bool, bool)>> = std::collections::HashMap::new();
        let mut next = 0;
        for (item, refs) in &valid {
            floors.insert(item.id.as_str(), floors_flat[next..next + refs.len()].to_vec());
            next += refs.len();
        }
        let mut summary = RunSummary::default();
        let mut todo: Vec<(&Item, Vec<&str>)> = Vec::new();
        let mut lines = Vec::new();
        for item in items {
            if file.finished.contains(&item.id) {
                summary.skipped_finished += 1;
                continue;
            }
            match self.references(item) {
                Ok(refs) => todo.push((item, refs)),
                Err(e) => {
                    summary.failed.push(format!("{}: {e}", item.id));
                    lines.push(json!({"id": item.id, "error": e, "provenance": provenance_value}).to_string());
                }
            }
        }
        file.append(&lines)?;
        // Chunks of items, each appended when done: a killed run loses at most one chunk.
        let total = todo.len();
        let mut done = 0;
        for chunk in todo.chunks(CHUNK_ITEMS) {
            let candidates: Vec<&str> = chunk.iter().map(|(i, _)| i.response.text.as_str()).collect();
            let references: Vec<Vec<&str>> = chunk.iter().map(|(_, r)| r.clone()).collect();
            let chunk_floors: Vec<(bool, bool)> = chunk.iter().flat_map(|(i, _)| floors[i.id.as_str()].clone()).collect();
            let scores = self.scorer.score_with_idf(&candidates, &references, &idf, &chunk_floors, self.batch_tokens, &mut |_, _| {})?;
            let mut lines = Vec::with_capacity(chunk.len());
            for ((item, _), s) in chunk.iter().zip(scores) {
                let s = match &self.baseline {
                    Some((_, b)) => s.rescale(b),
                    None => s,
                };
                let mut line = Map::new();
                line.insert("id".into(), json!(item.id));
                line.insert("bertscore".into(), serde_json::to_value(s).expect("numbers serialise"));
                line.insert("provenance".into(), provenance_value.clone());
                lines.push(Value::Object(line).to_string());
                summary.scored += 1;
            }
            file.append(&lines)?;
            done += chunk.len();
            progress(done, total);
        }
        Ok(summary)
    }
}
