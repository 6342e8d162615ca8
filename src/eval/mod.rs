//! The main job, end to end into one folder: items → judge (and BERTScore, likelihood scorers,
//! a translated route) → scores.jsonl → meta-evaluation → summary.md, summary.json,
//! report.html. One call, `run(&EvalSpec, items, progress)`, that `hyoka eval` and Python's
//! `hyoka.eval` both make: the faces turn their flags or keywords into an `EvalSpec` and say
//! what the run reports (`Reporter`) their own way.

mod error;
mod folder;
mod pairwise;
mod reporter;
mod routes;
mod run;
pub mod shard_set;
mod spec;

pub use error::EvalError;
pub use folder::{
    BERTSCORE, ITEMS, JUDGE, OUTPUTS, PAIRS, Report, refuse_input_as_output, scores_report,
    write_all,
};
pub use pairwise::pairwise_report;
pub use reporter::Reporter;
pub use run::run;
pub use spec::{EncoderChoice, EvalItems, EvalSpec, Evaluated, Sample, TranslateSpec};
