//! Stage 7 — typed results. A scorer (`runner::ScoreTask`) declares its provenance and returns
//! typed records (`record::Record`); one runner owns the output file (`file::ResultsFile`:
//! locked, append-only, resumable, error lines retried); `reader` reads results back for
//! `meta`, `merge` and `eval`, refusing a second line for an item and lines of another run.
//! The scorers' results are typed here: `scores::AspectScore` (a judge's aspect), `prf::Prf`
//! (BERTScore), `verdicts::PairVerdict` (a pairwise judge's aspect).

mod compare_lines;
mod file;
pub mod inputs;
mod judge_lines;
pub mod likelihoods;
mod line_fields;
pub mod prf;
mod provenance;
pub mod reader;
pub mod record;
pub mod runner;
pub mod scores;
pub mod verdicts;

pub use file::ResultsFile;
pub use provenance::{AspectTargets, Expected, ModelId, Provenance, RubricId, Task};
pub use record::{
    AspectLikelihood, Body, CompareRecord, JudgeRecord, LikelihoodRecord, Record, TranslationRecord,
};
pub use runner::{Outcome, Progress, RunError, RunSummary, ScoreTask};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: {message}", path.display())]
    Corrupt {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{}:{line}: written by a different run ({what} differs: {theirs} vs now {ours}); use another output file or --overwrite", path.display())]
    Mismatch {
        path: PathBuf,
        line: usize,
        what: String,
        theirs: String,
        ours: String,
    },
    #[error("{}: another hyoka run is writing this file (it is locked); wait for it, or write to another file", path.display())]
    Locked { path: PathBuf },
    #[error("{}:{line}: cannot be merged with the first input: another run ({what} differs: {theirs} vs {ours})", path.display())]
    Incompatible {
        path: PathBuf,
        line: usize,
        what: String,
        theirs: String,
        ours: String,
    },
}
