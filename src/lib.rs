//! hyoka (評価): evaluate dialogue responses — Japanese first — with models that run in-process.
//!
//! The pipeline, one module per stage:
//! data (items, JSONL, importers) → rubric (aspects, scales, templates) → prompt (rubric + item →
//! messages, through the model's chat template) → … → report.

pub mod bertscore;
pub mod data;
pub mod heap;
pub mod judge;
pub mod meta;
pub mod model;
pub mod prompt;
pub mod report;
pub mod results;
pub mod rng;
pub mod rubric;

/// hyoka's version, recorded in every output.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
