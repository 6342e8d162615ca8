//! Stage 6, likelihood scorers: the reference-free baselines the seed paper cites, as scorers
//! of the results layer beside the judge and BERTScore.
//!
//! - FED (Mehri & Eskenazi, 2020): per aspect, follow-up utterances the other speaker might say
//!   next; score = mean log-likelihood per token of the positive ones minus the negative ones.
//! - GPTScore (Fu et al., 2023): per aspect, the mean log-probability per token of the response
//!   after the dialogue and an instruction asking for that quality.
//!
//! A scorer is a TOML file like a rubric (`scorer`); an item's sequences (every follow-up of
//! every aspect, or the response under every instruction) share one prefill of the dialogue
//! (`layout`), and an item's numbers are the same in any batch (`logprobs`).

pub mod layout;
mod logprobs;
pub mod scorer;
mod task;

pub use logprobs::log_probs;
pub use scorer::{LikelihoodScorer, Method};
pub use task::{LikelihoodOptions, LikelihoodRun, aggregate};

use crate::data::Item;
use crate::model::ModelError;
use crate::model::load::default_model::HoldsModelError;
use crate::results::Progress;
use crate::results::runner::{self, RunError, RunSummary};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LikelihoodError {
    /// A scorer file that cannot be used.
    #[error("likelihood scorer {origin}: {message}")]
    Scorer { origin: String, message: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl HoldsModelError for LikelihoodError {
    fn model_error(&self) -> Option<&ModelError> {
        match self {
            LikelihoodError::Model(e) => Some(e),
            _ => None,
        }
    }
}

/// Score every item of `items` not yet in `output` (continued when it holds lines of the same
/// run), one line per item.
pub fn score_items(
    run: &mut LikelihoodRun<'_>,
    items: &[Item],
    output: &Path,
    overwrite: bool,
    progress: &mut Progress<'_>,
) -> Result<RunSummary, RunError<LikelihoodError>> {
    runner::run(run, items, output, overwrite, progress)
}
