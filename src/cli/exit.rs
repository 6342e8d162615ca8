//! Exit codes, and which errors map to which.

use hyoka::data::DataError;
use hyoka::rubric::RubricError;

pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_INVALID_INPUT: u8 = 3;
pub const EXIT_PARTIAL: u8 = 4;

/// A flag or argument that cannot be used as given (exit 2), found after parsing: e.g. an
/// output that is also an input.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `Err(UsageError)` as an anyhow error.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

/// The exit codes, as `--help` shows them; the tables in README.md and README.ja.md are
/// tested against it.
pub const EXIT_CODES: &str = "Exit codes:
  0  success: every item scored (or nothing left to do, said on stderr: an empty file, a
     shard whose share holds no dialogue)
  1  failure: I/O, a model that cannot load, an internal error
  2  usage: a bad flag or flag value, including one this build or machine cannot use
     (--dtype f64, --device cuda without CUDA, --prefill-gemm bf16 without AVX512-BF16,
     --layer beyond the encoder's layers), or an output that is also an input
  3  invalid input: an items, rubric or results file that fails validation (named as
     FILE:LINE: FIELD: bad UTF-8, a line over 64 MiB, a rating beyond ±2^53, a repeated
     item, lines of another run, a line scored from another version of its item, a score
     off its scale), or an output written by another run or locked by a running one;
     `validate` returns 3 when any line is invalid, --skip-invalid or not
  4  finished, but some items failed or input lines were skipped: listed on stderr, and
     failed items have an `error` line that a rerun scores again; `merge` of an incomplete
     set of shards (named, nothing written)";

/// An error's message with its causes, each cause said once: a cause whose text its parent
/// already shows (an I/O error inside a message that quotes it) is not repeated.
pub fn message(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// List the failed items; exit 4 when any item failed or input lines were skipped.
pub fn finish(failed: &[String], skipped_input: usize) -> std::process::ExitCode {
    for f in failed {
        eprintln!("failed: {f}");
    }
    if failed.is_empty() && skipped_input == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(EXIT_PARTIAL)
    }
}

/// A model error, also where a scorer's error holds it transparently (not a link of the chain).
pub(super) fn model_error<'a>(
    cause: &'a (dyn std::error::Error + 'static),
) -> Option<&'a hyoka::model::ModelError> {
    cause
        .downcast_ref::<hyoka::model::ModelError>()
        .or(
            match cause.downcast_ref::<hyoka::bertscore::BertScoreError>() {
                Some(hyoka::bertscore::BertScoreError::Model(e)) => Some(e),
                _ => None,
            },
        )
        .or(match judge_error(cause) {
            Some(hyoka::judge::JudgeError::Model(e)) => Some(e),
            _ => None,
        })
}

/// A judge's error, also inside a run's (`RunError::Task` holds it transparently).
fn judge_error<'a>(
    cause: &'a (dyn std::error::Error + 'static),
) -> Option<&'a hyoka::judge::JudgeError> {
    use hyoka::judge::JudgeError;
    cause.downcast_ref::<JudgeError>().or(
        match cause.downcast_ref::<hyoka::results::RunError<JudgeError>>() {
            Some(hyoka::results::RunError::Task(e)) => Some(e),
            _ => None,
        },
    )
}

/// Invalid input (exit 3) is any data or rubric error other than I/O; the rest is exit 1.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.downcast_ref::<UsageError>().is_some() {
            return EXIT_USAGE;
        }
        if let Some(e) = cause.downcast_ref::<DataError>() {
            return if matches!(e, DataError::Io { .. }) {
                EXIT_FAILURE
            } else {
                EXIT_INVALID_INPUT
            };
        }
        // A run's results-file errors are in the chain (`runner::RunError` names them as its
        // source); `meta` wraps them transparently.
        let results = cause.downcast_ref::<hyoka::results::ResultsError>().or(
            match cause.downcast_ref::<hyoka::meta::MetaError>() {
                Some(hyoka::meta::MetaError::Results(e)) => Some(e),
                _ => None,
            },
        );
        if let Some(e) = results {
            return match e {
                hyoka::results::ResultsError::Io { .. } => EXIT_FAILURE,
                _ => EXIT_INVALID_INPUT,
            };
        }
        if let Some(e) = cause.downcast_ref::<hyoka::report::dbdc3::ExportError>() {
            return match e {
                hyoka::report::dbdc3::ExportError::Results(hyoka::results::ResultsError::Io {
                    ..
                })
                | hyoka::report::dbdc3::ExportError::Write { .. } => EXIT_FAILURE,
                _ => EXIT_INVALID_INPUT,
            };
        }
        if let Some(e) = cause.downcast_ref::<hyoka::meta::MetaError>() {
            return match e {
                hyoka::meta::MetaError::Io { .. } => EXIT_FAILURE,
                hyoka::meta::MetaError::Data(DataError::Io { .. }) => EXIT_FAILURE,
                _ => EXIT_INVALID_INPUT,
            };
        }
        // A --device or --dtype this build or machine cannot use is a bad flag value.
        if let Some(
            hyoka::model::ModelError::Device { .. }
            | hyoka::model::ModelError::Dtype { .. }
            | hyoka::model::ModelError::Setting { .. },
        ) = model_error(cause)
        {
            return EXIT_USAGE;
        }
        if let Some(hyoka::judge::JudgeError::PromptLimit { .. }) = judge_error(cause) {
            return EXIT_USAGE;
        }
        if let Some(e) = cause.downcast_ref::<RubricError>() {
            return if matches!(e, RubricError::Io { .. }) {
                EXIT_FAILURE
            } else {
                EXIT_INVALID_INPUT
            };
        }
    }
    EXIT_FAILURE
}
