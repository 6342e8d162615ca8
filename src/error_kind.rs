//! What kind of failure an error is: the one classification that the command line turns into
//! its exit code and the Python package into its exception class.

use crate::data::DataError;
use crate::judge::JudgeError;
use crate::likelihood::LikelihoodError;
use crate::meta::MetaError;
use crate::model::ModelError;
use crate::model::load::default_model::HoldsModelError;
use crate::report::dbdc3::ExportError;
use crate::results::{ResultsError, RunError};
use crate::rubric::RubricError;
use crate::translate::TranslateError;
use crate::usage_error::UsageError;
use std::error::Error;

/// A failure's kind, decided by the first link of its chain that says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// I/O, a model that cannot load, an internal error.
    Failure,
    /// A setting that cannot be used as given: a value this build or machine cannot use, an
    /// output that is also an input.
    Usage,
    /// An items, rubric or results file (or item) that fails validation, or an output written
    /// by another run.
    InvalidInput,
    /// A failure whose cause is a file, folder or model that is not there.
    NotFound,
}

impl ErrorKind {
    /// The kind of `err`, walking its chain of sources: the first link that is one of hyoka's
    /// errors of a known kind decides; a failure caused by something missing is `NotFound`.
    pub fn of(err: &(dyn Error + 'static)) -> ErrorKind {
        let kind = chain(err)
            .find_map(kind_of_link)
            .unwrap_or(ErrorKind::Failure);
        if kind == ErrorKind::Failure && chain(err).any(is_missing) {
            ErrorKind::NotFound
        } else {
            kind
        }
    }
}

fn chain<'a>(err: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(err), |e: &&'a (dyn Error + 'static)| (*e).source())
}

/// A model error, also where a scorer's error holds it transparently (not a link of the chain).
fn model_error<'a>(cause: &'a (dyn Error + 'static)) -> Option<&'a ModelError> {
    cause
        .downcast_ref::<ModelError>()
        .or_else(|| {
            (cause.downcast_ref::<crate::bertscore::BertScoreError>())
                .and_then(HoldsModelError::model_error)
        })
        .or_else(|| judge_error(cause).and_then(HoldsModelError::model_error))
        .or_else(|| translate_error(cause).and_then(HoldsModelError::model_error))
        .or_else(|| likelihood_error(cause).and_then(HoldsModelError::model_error))
}

/// A judge's error, also inside a run's (`RunError::Task` holds it transparently).
fn judge_error<'a>(cause: &'a (dyn Error + 'static)) -> Option<&'a JudgeError> {
    cause
        .downcast_ref::<JudgeError>()
        .or(match cause.downcast_ref::<RunError<JudgeError>>() {
            Some(RunError::Task(e)) => Some(e),
            _ => None,
        })
}

/// A translation's error, also inside a run's.
fn translate_error<'a>(cause: &'a (dyn Error + 'static)) -> Option<&'a TranslateError> {
    cause.downcast_ref::<TranslateError>().or(
        match cause.downcast_ref::<RunError<TranslateError>>() {
            Some(RunError::Task(e)) => Some(e),
            _ => None,
        },
    )
}

/// A likelihood scorer's error, also inside a run's.
fn likelihood_error<'a>(cause: &'a (dyn Error + 'static)) -> Option<&'a LikelihoodError> {
    cause.downcast_ref::<LikelihoodError>().or(
        match cause.downcast_ref::<RunError<LikelihoodError>>() {
            Some(RunError::Task(e)) => Some(e),
            _ => None,
        },
    )
}

/// A file or folder that is not there, or a model whose files cannot be had.
fn is_missing(cause: &(dyn Error + 'static)) -> bool {
    cause
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        || model_error(cause).is_some_and(ModelError::is_missing)
}

/// What one link of a chain says of the kind, if anything. Data, rubric, results and meta
/// errors are invalid input except their I/O; a device, dtype or setting that cannot be used is
/// a usage error.
fn kind_of_link(cause: &(dyn Error + 'static)) -> Option<ErrorKind> {
    use ErrorKind::{Failure, InvalidInput, Usage};
    let io_or_invalid = |io: bool| Some(if io { Failure } else { InvalidInput });
    if cause.downcast_ref::<UsageError>().is_some() {
        return Some(Usage);
    }
    if let Some(e) = cause.downcast_ref::<DataError>() {
        return io_or_invalid(matches!(e, DataError::Io { .. }));
    }
    // A run's results-file errors are in the chain (`RunError` names them as its source);
    // `meta` wraps them transparently.
    let results =
        cause
            .downcast_ref::<ResultsError>()
            .or(match cause.downcast_ref::<MetaError>() {
                Some(MetaError::Results(e)) => Some(e),
                _ => None,
            });
    if let Some(e) = results {
        return io_or_invalid(matches!(e, ResultsError::Io { .. }));
    }
    if let Some(e) = cause.downcast_ref::<crate::files::ClaimError>() {
        return io_or_invalid(matches!(e, crate::files::ClaimError::Io { .. }));
    }
    if let Some(e) = cause.downcast_ref::<ExportError>() {
        return io_or_invalid(matches!(
            e,
            ExportError::Results(ResultsError::Io { .. }) | ExportError::Write { .. }
        ));
    }
    if let Some(e) = cause.downcast_ref::<MetaError>() {
        return match e {
            MetaError::Usage(_) => Some(Usage),
            _ => io_or_invalid(matches!(
                e,
                MetaError::Io { .. } | MetaError::Data(DataError::Io { .. })
            )),
        };
    }
    if let Some(ModelError::Device { .. } | ModelError::Dtype { .. } | ModelError::Setting { .. }) =
        model_error(cause)
    {
        return Some(Usage);
    }
    if let Some(JudgeError::PromptLimit { .. } | JudgeError::RubricKind(_)) = judge_error(cause) {
        return Some(Usage);
    }
    if judge_error(cause).is_some_and(JudgeError::template_at_fault) {
        return Some(InvalidInput);
    }
    // A model's header or config whose numbers describe no model that can be built.
    if let Some(ModelError::Config { .. }) = model_error(cause) {
        return Some(InvalidInput);
    }
    if let Some(LikelihoodError::Scorer { .. }) = likelihood_error(cause) {
        return Some(InvalidInput);
    }
    match translate_error(cause) {
        Some(TranslateError::Items(_) | TranslateError::Languages(_)) => return Some(Usage),
        Some(TranslateError::Prompt { .. }) => return Some(InvalidInput),
        _ => {}
    }
    if let Some(e) = cause.downcast_ref::<RubricError>() {
        return io_or_invalid(matches!(e, RubricError::Io { .. }));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_link_that_says_decides_and_missing_things_are_not_found() {
        let usage = UsageError("x".into());
        assert_eq!(ErrorKind::of(&usage), ErrorKind::Usage);
        let invalid = DataError::Invalid {
            file: "items.jsonl".into(),
            line: 3,
            field: "id".into(),
            message: "missing".into(),
        };
        assert_eq!(ErrorKind::of(&invalid), ErrorKind::InvalidInput);
        let gone = ModelError::Io {
            path: "m.gguf".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(ErrorKind::of(&gone), ErrorKind::NotFound);
        let denied = ModelError::Io {
            path: "m.gguf".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert_eq!(ErrorKind::of(&denied), ErrorKind::Failure);
        let device = ModelError::Device {
            spec: "cuda".into(),
            message: "no CUDA in this build".into(),
        };
        assert_eq!(ErrorKind::of(&device), ErrorKind::Usage);
        // Wrapped transparently by a scorer: still the model's kind.
        let held = JudgeError::Model(ModelError::Missing {
            origin: "judge".into(),
            message: "no copy".into(),
        });
        assert_eq!(ErrorKind::of(&held), ErrorKind::NotFound);
    }
}
