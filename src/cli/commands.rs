//! The command line's commands: clap's tree of them (every `--help` ending with the exit
//! codes), parsing, and each command's run.

use super::exit::{EXIT_CODES, EXIT_FAILURE, exit_code, message};
use super::{
    bench_cmd, bertscore_cmd, compare_cmd, data_cmd, eval_cmd, eval_files, export_cmd, judge_cmd,
    likelihood_cmd, merge_cmd, meta_cmd, rubrics_cmd, translate_cmd,
};
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
    #[command(
        about = "Translate items (every text once, the source kept) with a model hyoka runs, e.g. ja → en"
    )]
    Translate(translate_cmd::TranslateArgs),
    #[command(about = "Score items with LLM judges: valid integer scores and their distributions")]
    Judge(judge_cmd::JudgeArgs),
    #[command(
        about = "Judge pairs of responses to one context: which is better, as exact probabilities, both orders"
    )]
    Compare(compare_cmd::CompareArgs),
    #[command(
        about = "Likelihood scores (FED follow-ups, GPTScore) of responses under a language model"
    )]
    Likelihood(likelihood_cmd::LikelihoodArgs),
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
    Eval(Box<eval_files::EvalArgs>),
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

/// Run the command line `args` (the program name first) to its end: its exit status. Errors
/// are printed as `error: …` on stderr; `--help` and bad flags as clap prints them.
pub fn main_with<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(EXIT_FAILURE);
        }
    };
    match run(cli) {
        Ok(code) => (0..=255u8)
            .find(|n| ExitCode::from(*n) == code)
            .unwrap_or(EXIT_FAILURE),
        Err(err) => {
            eprintln!("error: {}", message(&err));
            exit_code(&err)
        }
    }
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Import(cmd) => data_cmd::import(cmd),
        Command::Validate(cmd) => data_cmd::validate(cmd),
        Command::Rubrics(cmd) => rubrics_cmd::run(cmd),
        Command::Translate(args) => translate_cmd::run(args),
        Command::Judge(args) => judge_cmd::run(args),
        Command::Compare(args) => compare_cmd::run(args),
        Command::Bench(args) => bench_cmd::run(args),
        Command::Likelihood(args) => likelihood_cmd::run(args),
        Command::Bertscore(args) => bertscore_cmd::run(args),
        Command::Meta(args) => meta_cmd::run(args),
        Command::Eval(args) => eval_cmd::run(*args),
        Command::Merge(args) => merge_cmd::merge(args),
        Command::Export(cmd) => export_cmd::run(cmd),
    }
}

#[cfg(test)]
mod tests {
    use super::{Cli, Command, parse_from};

    /// The library's defaults (what the Python package starts from) are the flags' defaults.
    #[test]
    fn flag_defaults_are_the_librarys_defaults() {
        let parsed = |line: &str| parse_from(line.split(' ')).expect("parses");
        let Cli {
            command: Command::Judge(judge),
        } = parsed("hyoka judge --rubric dialogue6-ja --model m.gguf -i a -o b")
        else {
            panic!("not a judge command")
        };
        let rubric = crate::prompt::resolve_rubric("dialogue6-ja").expect("built-in rubric");
        let spec = judge.spec(rubric);
        let defaults =
            crate::judge::JudgeSpec::new("dialogue6-ja", vec!["m.gguf".into()]).expect("rubric");
        assert_eq!(format!("{:?}", spec.run), format!("{:?}", defaults.run));
        assert_eq!(
            format!("{:?}", spec.runtime),
            format!("{:?}", defaults.runtime)
        );
        assert_eq!(spec.sha256, defaults.sha256);
        let Cli {
            command: Command::Meta(meta),
        } = parsed("hyoka meta -i a -s b")
        else {
            panic!("not a meta command")
        };
        assert_eq!(
            format!("{:?}", meta.stats.options()),
            format!("{:?}", crate::meta::MetaOptions::default())
        );
        assert!(meta.half.is_none());
    }
}
