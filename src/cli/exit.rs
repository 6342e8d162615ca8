//! Exit codes, and which errors map to which.

use crate::error_kind::ErrorKind;
use crate::usage_error::UsageError;

pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_INVALID_INPUT: u8 = 3;
pub const EXIT_PARTIAL: u8 = 4;

/// `Err(UsageError)` as an anyhow error: exit 2.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

/// Refuse an output file that is the input (directly, by another path or through a link):
/// a usage error, before anything is read or written.
pub fn refuse_output_as_input(
    output: &std::path::Path,
    input: &std::path::Path,
) -> anyhow::Result<()> {
    if crate::files::same_file(input, output) {
        return Err(usage(format!(
            "the output {} is the input {}: name another output file",
            output.display(),
            input.display()
        )));
    }
    Ok(())
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

/// An error's message with its causes, each cause said once.
pub fn message(err: &anyhow::Error) -> String {
    crate::error_text::describe(err.as_ref())
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

/// The exit code of a failure of `kind`: usage 2, invalid input 3, anything else 1.
pub fn exit_code_of(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Usage => EXIT_USAGE,
        ErrorKind::InvalidInput => EXIT_INVALID_INPUT,
        ErrorKind::Failure | ErrorKind::NotFound => EXIT_FAILURE,
    }
}

/// The exit code of `err` (`ErrorKind::of` its chain).
pub fn exit_code(err: &anyhow::Error) -> u8 {
    exit_code_of(ErrorKind::of(err.as_ref()))
}
