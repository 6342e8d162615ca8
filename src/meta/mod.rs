//! Stage 8 — metrics: how well score columns (judge argmax / expected score, BERTScore,
//! their combination) agree with human ratings, at item, system and within-dialogue level, with
//! p-values and seeded bootstrap intervals; rater agreement and the aspect-by-aspect matrix;
//! judge distributions against the raters' breakdown labels with the DBDC challenge's metrics.

mod agreement;
pub mod alt_test;
pub mod bias;
pub mod breakdown;
pub mod calibrate;
pub mod chance;
pub mod combination;
mod combine;
mod detection;
mod evaluate;
mod frame;
mod inputs;
mod levels;
pub mod logistic;
pub mod markdown;
pub mod options;
pub mod pairwise;
mod resample;
pub mod ridge;
pub mod routes;
pub mod stats;
mod summary;

pub use agreement::{AspectMatrix, HumanAspect, RaterBasis, aspect_matrix, rater_agreement};
pub use alt_test::{Alignment, AltTest, AltTestOptions};
pub use combine::{FitW, W_GRID, add_combined, fit_w, in_dev_half, item_in_dev_half};
pub use detection::{BreakdownEntry, BreakdownOptions, BreakdownRow, Predictor, TurnSet};
pub use evaluate::{Evaluation, MetaRequest, Naming, evaluate};
pub use frame::{Added, Column, Distributions, Family, Frame, Statistic};
pub use inputs::{Half, JoinRules, Joined, join, select_half};
pub use levels::{Bootstrap, Cell, FEW_UNITS, Level, Stat, correlate};
pub use markdown::format_r;
pub use options::parse_aspect_levels;
pub use summary::{MetaOptions, Summary};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: {field}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        field: String,
        message: String,
    },
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    #[error(transparent)]
    Results(#[from] crate::results::ResultsError),
    #[error("{0}")]
    Input(String),
    /// A setting or a set of inputs that cannot be used as given (one file given twice, a
    /// half with no item): a usage error.
    #[error("{0}")]
    Usage(String),
}
