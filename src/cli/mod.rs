//! The command line, a face of the library: flags parsed into the library's values, results
//! written to files, failures as exit codes (`exit`). `main_with` runs a command line to its
//! exit status (the `hyoka` binary and the Python package's `hyoka` command).

mod args;
mod bench_cmd;
mod bertscore_cmd;
mod commands;
mod compare_cmd;
mod data_cmd;
#[cfg(test)]
mod docs_check;
mod eval_cmd;
mod eval_files;
pub mod exit;
mod export_cmd;
mod judge_cmd;
mod likelihood_cmd;
mod merge_cmd;
mod meta_cmd;
mod rubrics_cmd;
mod running;
mod runtime_args;
mod translate_cmd;

pub use commands::{Cli, Command, command, main_with, parse_from, run};
