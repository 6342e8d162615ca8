//! Subcommands, and the exit codes every one of them uses (`EXIT_CODES`, shown by `--help`).

mod bench_cmd;
pub(crate) mod bertscore_cmd;
mod data_cmd;
#[cfg(test)]
mod docs_check;
mod eval_cmd;
pub(crate) mod exit;
mod export_cmd;
pub(crate) mod judge_cmd;
mod merge_cmd;
mod meta_cmd;
mod rubrics_cmd;
mod running;
mod runtime_args;

pub use exit::{EXIT_CODES, EXIT_INVALID_INPUT, exit_code, finish, message, usage};
pub use running::{load_default, report_retried, with_progress};
pub use runtime_args::RuntimeArgs;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "hyoka",
    version,
    about = "Evaluate dialogue responses (Japanese first) with models that run in-process.",
    long_about = "hyoka (評価) scores dialogue responses with LLM judges and BERTScore running \
in-process, offline, and checks them against human ratings.\n\n\
Items are JSONL, one dialogue item per line (see `hyoka validate --help` and README.md)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
/// Commands with their own options say what they are with `about` only: a doc comment here would
/// also replace the long `--help` text their option structs carry.
pub enum Command {
    /// Convert a dataset into hyoka's items JSONL.
    #[command(subcommand)]
    Import(data_cmd::Import),
    #[command(about = "Check an items JSONL file strictly and print what it holds")]
    Validate(data_cmd::Validate),
    /// List, show and check rubrics, and print the prompt a judge sees (exactly, with its chat template).
    #[command(subcommand)]
    Rubrics(rubrics_cmd::Rubrics),
    #[command(about = "Score items with LLM judges: valid integer scores and their distributions")]
    Judge(judge_cmd::JudgeArgs),
    #[command(
        about = "BERTScore of responses against references or the last context turn (bert_score 0.3.13)"
    )]
    Bertscore(bertscore_cmd::BertScoreArgs),
    #[command(
        about = "Correlations of judge / BERTScore / combined scores with human ratings (the paper's tables)"
    )]
    Meta(meta_cmd::MetaArgs),
    #[command(
        about = "Evaluate end to end: judge + BERTScore + meta-evaluation + report in one folder"
    )]
    Eval(eval_cmd::EvalArgs),
    #[command(about = "Join `hyoka eval --shard` folders and write their report")]
    Merge(merge_cmd::MergeArgs),
    /// Write results in other tools' formats (the DBDC challenge's runs).
    #[command(subcommand)]
    Export(export_cmd::Export),
    #[command(about = "Measure prefill speed on real judge prompts (tokens/s, items/s)")]
    Bench(bench_cmd::BenchArgs),
}

/// The command line as clap parses it, every command and nested command ending its `--help`
/// with the exit codes.
pub fn command() -> clap::Command {
    fn with_exit_codes(command: clap::Command) -> clap::Command {
        command
            .after_help(EXIT_CODES)
            .mut_subcommands(with_exit_codes)
    }
    with_exit_codes(<Cli as clap::CommandFactory>::command())
}

/// A command line (the program name first): this process's, or the one the Python package's
/// `hyoka` entry point passes on.
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = command().try_get_matches_from(args)?;
    <Cli as clap::FromArgMatches>::from_arg_matches(&matches)
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Import(cmd) => data_cmd::import(cmd),
        Command::Validate(cmd) => data_cmd::validate(cmd),
        Command::Rubrics(cmd) => rubrics_cmd::run(cmd),
        Command::Judge(args) => judge_cmd::run(args),
        Command::Bench(args) => bench_cmd::run(args),
        Command::Bertscore(args) => bertscore_cmd::run(args),
        Command::Meta(args) => meta_cmd::run(args),
        Command::Eval(args) => eval_cmd::run(args),
        Command::Merge(args) => merge_cmd::merge(args),
        Command::Export(cmd) => export_cmd::run(cmd),
    }
}
