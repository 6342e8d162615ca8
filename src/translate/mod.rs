//! Before the pipeline: items translated into another language (`hyoka translate`), so that a
//! judge and BERTScore can read them in it — the English route of Terauchi et al. (2024).
//!
//! Every distinct text of the items (context turns, responses, references, settings) is one
//! unit of the results layer (`Text`, keyed by its hash): a context turn shared by many items
//! is translated once, a killed run continues after the last texts written to its store, and
//! every store line carries the run's provenance. The translated items are written once every
//! text has its translation, each with the texts it came from (`data::Translation`).

pub mod prompt;
mod run;
mod task;
mod texts;

pub use crate::model::decoder::generate::{Generated, greedy_batch};
pub use prompt::TranslatePrompt;
pub use run::{TranslationRun, translate_in_memory, translate_items};
pub use task::{DEFAULT_CACHE_BYTES, TranslateOptions, Translator};
pub use texts::{Text, describe_failures, distinct_texts, read_store, translated_items};

use crate::model::ModelError;
use crate::model::load::default_model::HoldsModelError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    /// A translation prompt file that cannot be used.
    #[error("translation prompt {origin}: {message}")]
    Prompt { origin: String, message: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A prompt for other languages than those asked for, or none for them.
    #[error("{0}")]
    Languages(String),
    /// Items that cannot be translated as asked (already translated ones).
    #[error("{0}")]
    Items(String),
    #[error(transparent)]
    Template(#[from] crate::prompt::TemplateError),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl HoldsModelError for TranslateError {
    fn model_error(&self) -> Option<&ModelError> {
        match self {
            TranslateError::Model(e) => Some(e),
            _ => None,
        }
    }
}
