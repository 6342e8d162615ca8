//! The one runner: a scorer plans and scores, the runner owns the output file — locked,
//! appended to and synced chunk by chunk, resumed after the last finished item, error lines of
//! an earlier run scored again, a run with other settings refused.

use super::ResultsError;
use super::file::ResultsFile;
pub use super::inputs::Unit;
use super::provenance::Provenance;
use super::record::{self, Body};
use std::collections::HashMap;
use std::path::Path;

/// A scorer, as the runner sees it.
pub trait ScoreTask {
    type Error: std::error::Error + Send + Sync + 'static;
    /// What it scores one line for.
    type Unit: Unit;

    /// Every setting that changes a number (a rerun with any other is refused).
    fn provenance(&self) -> Provenance;

    /// Prepare to score `todo` (indices into `items`, the items not yet in the output; all of
    /// `items` may matter, e.g. a shared prompt header or idf weights) and return the chunks to
    /// score, in order: each is written (and synced) as soon as it is scored.
    fn plan(
        &mut self,
        items: &[Self::Unit],
        todo: &[usize],
    ) -> Result<Vec<Vec<usize>>, Self::Error>;

    /// Score one chunk: one outcome per index of `chunk`, in its order.
    fn score(&mut self, items: &[Self::Unit], chunk: &[usize])
    -> Result<Vec<Outcome>, Self::Error>;
}

/// What became of one item.
#[derive(Clone, Debug)]
pub enum Outcome {
    Scored(Body),
    /// This item could not be scored (written as an error line; a rerun tries again).
    Failed(String),
    /// The item has nothing to score by definition (BERTScore of an opening turn: no previous
    /// turn). Written as an error line marked `not_applicable`, not counted as a failure, and
    /// kept by a rerun while the item is unchanged (scoring it again would find nothing again).
    NotApplicable(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RunError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Task(E),
    #[error("results file")]
    Results(#[source] ResultsError),
    /// The caller's progress callback asked to stop (Python's Ctrl-C): the lines of the items
    /// finished are in the output, and a rerun continues from them.
    #[error("interrupted after {done} of {total} items (their lines are kept: a rerun continues)")]
    Interrupted { done: usize, total: usize },
}

/// Called with (items done, items to do) after each chunk of work; `Break` stops the run there.
pub type Progress<'a> = dyn FnMut(usize, usize) -> std::ops::ControlFlow<()> + 'a;

impl<E: std::error::Error + 'static> From<ResultsError> for RunError<E> {
    fn from(e: ResultsError) -> Self {
        RunError::Results(e)
    }
}

/// What a run did, for the closing summary.
#[derive(Debug, Default)]
pub struct RunSummary {
    pub scored: usize,
    /// Items already in the output (finished by an earlier run).
    pub skipped_finished: usize,
    /// Error lines of an earlier run taken out of the file, their items scored again.
    pub retried: usize,
    /// Items changed since an earlier run scored them (same id, other text): their lines were
    /// taken out and the items scored again.
    pub changed: Vec<String>,
    /// "id: why" of each failed item.
    pub failed: Vec<String>,
    /// "id: why" of each item with nothing to score: found by this run, or kept from an
    /// earlier one (counted among `skipped_finished` too).
    pub not_applicable: Vec<String>,
}

/// Score every item of `items` not yet in `output` with `task`, writing one line per item.
/// `progress` is called with (items done, items to do) and may stop the run between chunks.
pub fn run<T: ScoreTask>(
    task: &mut T,
    items: &[T::Unit],
    output: &Path,
    overwrite: bool,
    progress: &mut Progress<'_>,
) -> Result<RunSummary, RunError<T::Error>> {
    let carried = Carried::new(task, items);
    let current: HashMap<&str, &str> = items
        .iter()
        .zip(&carried.inputs)
        .map(|(item, input)| (item.id(), input.as_str()))
        .collect();
    let mut file = ResultsFile::open(output, &carried.provenance, overwrite, &current)?;
    let todo: Vec<usize> = (0..items.len())
        .filter(|&i| !file.finished.contains(items[i].id()))
        .collect();
    let mut summary = RunSummary {
        skipped_finished: items.len() - todo.len(),
        retried: file.retried(),
        changed: file.changed().to_vec(),
        not_applicable: file.not_applicable().to_vec(),
        ..Default::default()
    };
    let result = score_into(
        task,
        items,
        &todo,
        &carried,
        &mut file,
        &mut summary,
        progress,
    );
    if result.is_err() {
        file.abandon();
    }
    result.map(|()| summary)
}

/// Score every item of `items` with `task` into memory: the line a results file would get for
/// each item, in the items' order, with no file read or written.
pub fn run_in_memory<T: ScoreTask>(
    task: &mut T,
    items: &[T::Unit],
    progress: &mut Progress<'_>,
) -> Result<(RunSummary, Vec<String>), RunError<T::Error>> {
    let carried = Carried::new(task, items);
    let todo: Vec<usize> = (0..items.len()).collect();
    let mut summary = RunSummary::default();
    let mut lines: Vec<Option<String>> = vec![None; items.len()];
    score_into(
        task,
        items,
        &todo,
        &carried,
        &mut lines,
        &mut summary,
        progress,
    )?;
    let lines = lines
        .into_iter()
        .map(|line| line.expect("every item is scored once"))
        .collect();
    Ok((summary, lines))
}

/// What every line of a run carries: the run's provenance, and each item's input hash.
struct Carried {
    provenance: super::Provenance,
    provenance_json: serde_json::Value,
    inputs: Vec<String>,
}

impl Carried {
    fn new<T: ScoreTask>(task: &T, items: &[T::Unit]) -> Self {
        let provenance = task.provenance();
        let provenance_json = serde_json::to_value(&provenance).expect("provenance serialises");
        let inputs = items
            .iter()
            .map(|item| item.input_digest(&provenance))
            .collect();
        Carried {
            provenance,
            provenance_json,
            inputs,
        }
    }
}

/// Where a run's lines go, a chunk at a time (each line with its item's index): a results
/// file, in the order they finish, or memory, in the items' order.
trait LineSink {
    fn append(&mut self, items: &[usize], lines: Vec<String>) -> Result<(), ResultsError>;
}

impl LineSink for ResultsFile {
    fn append(&mut self, _: &[usize], lines: Vec<String>) -> Result<(), ResultsError> {
        ResultsFile::append(self, &lines)
    }
}

impl LineSink for Vec<Option<String>> {
    fn append(&mut self, items: &[usize], lines: Vec<String>) -> Result<(), ResultsError> {
        for (&i, line) in items.iter().zip(lines) {
            self[i] = Some(line);
        }
        Ok(())
    }
}

/// Score the `todo` items in the task's chunks, appending each chunk's lines to `sink`.
fn score_into<T: ScoreTask>(
    task: &mut T,
    items: &[T::Unit],
    todo: &[usize],
    carried: &Carried,
    sink: &mut dyn LineSink,
    summary: &mut RunSummary,
    progress: &mut Progress<'_>,
) -> Result<(), RunError<T::Error>> {
    let chunks = task.plan(items, todo).map_err(RunError::Task)?;
    let total: usize = chunks.iter().map(Vec::len).sum();
    let mut done = 0;
    for chunk in chunks {
        if progress(done, total).is_break() {
            return Err(RunError::Interrupted { done, total });
        }
        let outcomes = task.score(items, &chunk).map_err(RunError::Task)?;
        assert_eq!(outcomes.len(), chunk.len(), "one outcome per item");
        let mut lines = Vec::with_capacity(chunk.len());
        for (&i, outcome) in chunk.iter().zip(outcomes) {
            let id = items[i].id();
            let (id_json, input) = (&items[i].id_json(), Some(carried.inputs[i].as_str()));
            let provenance = &carried.provenance_json;
            lines.push(match outcome {
                Outcome::Scored(body) => {
                    summary.scored += 1;
                    record::line(id_json, input, &Ok(body), provenance)
                }
                Outcome::Failed(why) => {
                    summary.failed.push(format!("{id}: {why}"));
                    record::line(id_json, input, &Err(why), provenance)
                }
                Outcome::NotApplicable(why) => {
                    summary.not_applicable.push(format!("{id}: {why}"));
                    record::not_applicable_line(id_json, input, &why, provenance)
                }
            });
        }
        sink.append(&chunk, lines)?;
        done += chunk.len();
    }
    let _ = progress(done, total);
    Ok(())
}
