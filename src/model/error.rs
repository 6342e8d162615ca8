//! What can go wrong while loading or running a model.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: {field}: {message}")]
    Config {
        origin: String,
        field: String,
        message: String,
    },
    #[error("{origin}: unsupported {what}")]
    Unsupported { origin: String, what: String },
    #[error("{origin}: {message}")]
    Missing { origin: String, message: String },
    #[error("{origin}: sha256 {got}, expected {expected}")]
    Checksum {
        origin: String,
        expected: String,
        got: String,
    },
    /// A setting the model cannot take (a layer it does not have): a usage error.
    #[error("{flag}: {message}")]
    Setting { flag: String, message: String },
    #[error("--device {spec}: {message}")]
    Device { spec: String, message: String },
    #[error("--dtype {spec}: {message}")]
    Dtype { spec: String, message: String },
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Template(#[from] crate::prompt::TemplateError),
}

impl ModelError {
    /// The model's files are not there.
    pub fn is_missing(&self) -> bool {
        matches!(self, ModelError::Missing { .. })
    }
}
