//! What can go wrong while judging.

use crate::model::ModelError;

/// Why an item whose score positions hold NaN or infinite log-probabilities has no score: a
/// broken model would otherwise give every item the same flat distribution.
pub const NOT_A_NUMBER: &str = "the model's output at the score positions is not a number (NaN \
    or infinite logits): its weights are broken (NaN or infinite values) or overflow the dtype \
    (try --dtype f32)";

#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error(transparent)]
    Prompt(#[from] crate::prompt::PromptError),
    #[error(transparent)]
    Template(#[from] crate::prompt::TemplateError),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("json output: {0}")]
    Grammar(String),
    #[error(
        "item {item}: the prompt needs {tokens} tokens even without context, more than the limit of {max}"
    )]
    TooLong {
        item: String,
        tokens: usize,
        max: usize,
    },
    #[error(
        "item {item}: the response is {bytes} bytes, more than any prompt of {max} tokens can hold ({max_bytes} bytes at the vocabulary's longest token); not tokenized"
    )]
    TextTooLong {
        item: String,
        bytes: usize,
        max_bytes: usize,
        max: usize,
    },
    /// `--max-prompt-tokens` below what the rubric's own prompt needs: no item could fit.
    #[error(
        "--max-prompt-tokens {max}: the rubric's prompt alone, with a one-line response and no context, needs more ({why}); give at least a few hundred tokens"
    )]
    PromptLimit { max: usize, why: String },
    /// A rubric used by the other kind of judge (pairwise by `judge`, absolute by `compare`).
    #[error("{0}")]
    RubricKind(String),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl JudgeError {
    /// A fault of the rubric's or chat template's, whatever the item: it ran out of its bounded
    /// work or output, or the chat template drops the messages. The run stops rather than
    /// writing the same failure for every item.
    pub fn template_at_fault(&self) -> bool {
        use crate::prompt::{PromptError, TemplateError};
        let chat =
            |t: &TemplateError| t.exhausted() || matches!(t, TemplateError::DropsMessage { .. });
        match self {
            JudgeError::Prompt(PromptError::Render { source, .. }) => {
                crate::prompt::exhausted(source)
            }
            JudgeError::Prompt(PromptError::ChatTemplate(t)) | JudgeError::Template(t) => chat(t),
            _ => false,
        }
    }
}
