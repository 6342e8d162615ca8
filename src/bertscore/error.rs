//! What can go wrong while scoring.

#[derive(Debug, thiserror::Error)]
pub enum BertScoreError {
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error("{path}: {message}")]
    Baseline { path: String, message: String },
    #[error(
        "no baseline is shipped for {model} in {lang} (shipped: {shipped}): make one with `hyoka bertscore baseline` and pass --baseline FILE"
    )]
    NoBaseline {
        model: String,
        lang: String,
        shipped: String,
    },
}
