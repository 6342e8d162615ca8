//! What can stop an evaluation: a setting that cannot be used (a usage error), a file that cannot
//! be written, or any stage's own error, kept whole so that `ErrorKind` reads its kind.

use crate::usage_error::UsageError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0}")]
    Usage(#[from] UsageError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A stage's error (items, rubric, model, judge, scorers, results, meta-evaluation), as it
    /// said it.
    #[error("{0}")]
    Stage(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl EvalError {
    pub fn usage(message: impl Into<String>) -> Self {
        EvalError::Usage(UsageError(message.into()))
    }

    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        EvalError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

macro_rules! stage_errors {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for EvalError {
            fn from(e: $t) -> Self {
                EvalError::Stage(Box::new(e))
            }
        })*
    };
}

use crate::results::RunError;
stage_errors!(
    crate::data::DataError,
    crate::rubric::RubricError,
    crate::model::ModelError,
    crate::judge::JudgeError,
    RunError<crate::judge::JudgeError>,
    crate::bertscore::BertScoreError,
    RunError<crate::bertscore::BertScoreError>,
    crate::likelihood::LikelihoodError,
    RunError<crate::likelihood::LikelihoodError>,
    crate::translate::TranslateError,
    RunError<crate::translate::TranslateError>,
    crate::results::ResultsError,
    crate::meta::MetaError,
    crate::files::ClaimError,
);
