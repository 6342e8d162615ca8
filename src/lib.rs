//! hyoka (評価): evaluate dialogue responses — Japanese first — with models that run in-process.
//!
//! The pipeline, one module per stage, numbered as their module docs number them:
//! 1 `data` (items, JSONL, importers) → 2 `rubric` (aspects, scales, templates) → 3 `prompt`
//! (rubric + item → messages, through the model's chat template) → 4 tokens and batches
//! (`judge::layout`, `model::tokenizer::TextFit`, `model::decoder::batch`) → 5 `model` (the
//! causal-LM runtime; `bertscore` runs its encoder beside it) → 6 score distributions (`judge`) →
//! 7 typed results (`results`) → 8 metrics (`meta`) → 9 `report`; `eval` runs them as the main
//! job. `translate` turns items into items in another language before stage 3; `likelihood`
//! (FED, GPTScore) is a stage-6 scorer beside the judge.
//!
//! A module uses only modules below it (scripts/ci/check_modules.py): `results`, the records and
//! runner the scorers write through, stands below them; the scorers do not use each other.

pub mod bertscore;
pub mod checksum;
pub mod cli;
pub mod data;
pub mod definition;
pub mod error_kind;
pub mod error_text;
pub mod eval;
pub mod files;
pub mod heap;
pub mod judge;
pub mod likelihood;
pub mod meta;
pub mod model;
pub mod prompt;
pub mod report;
pub mod results;
pub mod rng;
pub mod rubric;
pub mod translate;
pub mod usage_error;
pub mod version;

pub use error_kind::ErrorKind;
pub use usage_error::UsageError;
pub use version::VERSION;
