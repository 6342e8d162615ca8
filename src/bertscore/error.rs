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
}
