//! `hyoka judge`.

use clap::Args;
use hyoka::data;
use hyoka::judge::json::Decoding;
use hyoka::judge::run::{Judge, RunOptions};
use hyoka::rubric::Rubric;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(
    long_about = "Score items with LLM judges, one integer per rubric aspect.\n\n\
Nothing is generated or parsed: for each aspect the judge model's next-token distribution after \
the aspect's answer prefix is restricted to the aspect's valid scores, so every item gets a valid \
score. Each line of the output holds, per aspect: score (most probable), expected (expected \
score), distribution (over the valid scores) and off_scale (probability mass outside them), plus \
the run's provenance.\n\n\
Rubrics with output = \"json\" (roleplay8-ja) make the judge write one JSON object: a reason of \
at most the rubric's reason_max_tokens, then every aspect's integer under its exact key, in \
order. A grammar allows nothing else, so the object always parses and matches the schema; the \
integers are read as above (distribution, expected) and the line also holds \"reason\" and \
\"answer\" (the object as written). The reason is greedy unless --temperature is given.\n\n\
All aspects of an item share one prefill, and the rubric's header (the tokens every prompt of \
the rubric shares) is computed once; on the CPU an item's scores are the same bits alone or among \
others, whatever the batch.\n\n\
A killed run restarted with the same arguments continues after the last finished item; items \
edited since their lines were written (each line carries input_sha256, the hash of what the judge \
read) and error lines are scored again. The output must not be the input."
)]
pub struct JudgeArgs {
    /// Built-in rubric name (see `hyoka rubrics list`) or rubric file.
    #[arg(long)]
    pub rubric: String,
    /// Judge model: local folder or .gguf file, or Hugging Face id ORG/NAME[@REV][:FILE.gguf]
    /// (ORG/NAME:Q4_K_M: the GGUF file of that quantization). A split GGUF
    /// (PREFIX-00001-of-0000N.gguf …) is named by any of its shards.
    /// Repeat to score with several judges: each one's scores and their mean are written.
    #[arg(long, required = true)]
    pub model: Vec<String>,
    /// Items JSONL (see `hyoka validate --help`).
    #[arg(long, short)]
    pub input: PathBuf,
    /// Output scores JSONL; an existing file of the same run is continued.
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub runtime: super::RuntimeArgs,
    #[command(flatten)]
    pub batching: BatchArgs,
    /// Expected sha256 of the (first) model's weights file — of a split GGUF, of its shards'
    /// bytes in order (`cat PREFIX-*-of-*.gguf | sha256sum`); a mismatch is an error.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Skip invalid input lines (reported) instead of stopping.
    #[arg(long)]
    pub skip_invalid: bool,
    /// Start the output afresh instead of continuing it.
    #[arg(long)]
    pub overwrite: bool,
    /// Also record the peers' method for comparison: greedy generation of up to N tokens after
    /// each answer prefix, and the first integer in it ("greedy": {"text", "score"}).
    #[arg(long, value_name = "N")]
    pub greedy_baseline: Option<usize>,
    /// json rubrics: sample the reason (and the written integers) at this temperature instead
    /// of greedy decoding (0).
    #[arg(long, default_value_t = 0.0, value_parser = temperature)]
    pub temperature: f64,
    /// Seed of the sampling; each item's draws depend only on it, the judge and the item id.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// How judge prompts are batched and fitted: flags shared by `judge` and `eval`.
#[derive(Args, Debug)]
pub struct BatchArgs {
    /// Padded tokens per forward pass (rows × longest row). A batch's memory grows with it: on
    /// a CPU about six hidden-sized f32 activations a token plus the MLP's middle (MLP width;
    /// its gate and up products are computed a block of columns at a time) — at 4,096 tokens
    /// of a 13B 0.5 GiB in use, 0.9 GiB resident (docs/memory.md) — and, where attention runs
    /// through blocks of scores (a CPU without AVX-512, a GPU's steps of a few queries), blocks
    /// of at most 2^28 scores (1 GiB in f32, about three such buffers at once) whatever the
    /// batch or prompt length; no mask of rows × tokens × tokens is ever built.
    #[arg(long, default_value_t = 4096, value_parser = at_least_one)]
    pub batch_tokens: usize,
    /// Longest prompt in tokens; longer ones lose their oldest context turns (default: the
    /// model's context length). A limit below what the rubric's own prompt needs is refused.
    #[arg(long, value_parser = at_least_one)]
    pub max_prompt_tokens: Option<usize>,
    /// json rubrics: memory for the keys and values of the items decoded together, in GiB.
    /// Each item's row holds its prompt after the rubric's shared header and its answer: per
    /// token 0.25 MB for an 8B with 8 key heads in f32 (a CPU), half in bf16 (a GPU), 1.6 MB for
    /// llm-jp-3-13b in f32 (40 key heads) — so by default (2 GiB) a 13B decodes one item at a
    /// time and reads all its weights for every token of every item. More rows per step read
    /// the weights once for all of them (up to the items of a batch, `--batch-tokens`). On a
    /// CPU the objects are the same bits whatever fits; on CUDA their scores' last bits can
    /// move with the rows decoded together (docs/rubrics.md, json rubrics).
    #[arg(
        long,
        value_name = "GIB",
        default_value_t = hyoka::judge::JSON_CACHE_BYTES as f64 / (1u64 << 30) as f64,
        value_parser = gibibytes
    )]
    pub json_cache_gib: f64,
}

impl BatchArgs {
    pub fn run_options(
        &self,
        overwrite: bool,
        greedy_baseline: Option<usize>,
        decoding: Decoding,
    ) -> RunOptions {
        RunOptions {
            batch_tokens: self.batch_tokens,
            max_prompt_tokens: self.max_prompt_tokens,
            overwrite,
            greedy_baseline,
            decoding,
            json_cache_bytes: (self.json_cache_gib * (1u64 << 30) as f64) as usize,
        }
    }
}

/// A judge command's models, rubric and options, loaded: what `hyoka judge` runs once and the
/// Python package's `Judge` keeps between calls.
pub struct LoadedJudge {
    pub models: Vec<hyoka::model::LoadedModel>,
    pub rubric: Rubric,
    pub rubric_source: String,
    pub opts: RunOptions,
}

impl LoadedJudge {
    /// The models `args` name, with `rubric` (`Rubric::resolve` of `args.rubric`) and its source.
    pub fn load(
        args: &JudgeArgs,
        (rubric, rubric_source): (Rubric, String),
    ) -> anyhow::Result<Self> {
        let (device, settings) = args.runtime.settings()?;
        let mut models = Vec::with_capacity(args.model.len());
        for (i, name) in args.model.iter().enumerate() {
            eprintln!("loading {name} ...");
            let expect = if i == 0 { args.sha256.as_deref() } else { None };
            models.push(args.runtime.load_model(name, &device, &settings, expect)?);
        }
        let opts = args.batching.run_options(
            args.overwrite,
            args.greedy_baseline,
            Decoding {
                temperature: args.temperature,
                seed: args.seed,
            },
        );
        Ok(LoadedJudge {
            models,
            rubric,
            rubric_source,
            opts,
        })
    }

    /// Score `items` into `output` (continued when it holds lines of the same run), with a
    /// progress bar; prints the run's figures and returns the failed items' messages.
    pub fn run(&self, items: &[data::Item], output: &Path) -> anyhow::Result<Vec<String>> {
        let (summary, secs) = super::with_progress("judging", |progress| {
            self.judge().run(items, output, &self.opts, progress)
        });
        let (summary, stats) = summary?;
        super::report_retried(&summary);
        report(&summary, &stats, secs, &output.display().to_string());
        Ok(summary.failed)
    }

    /// The judge of these models, rubric and options (`Judge::run`, `Judge::score_lines`).
    pub fn judge(&self) -> Judge<'_> {
        Judge {
            models: &self.models,
            rubric: &self.rubric,
            rubric_source: &self.rubric_source,
        }
    }
}

/// A run's figures on stderr; `place`: where its lines went.
pub fn report(
    summary: &hyoka::results::RunSummary,
    stats: &hyoka::judge::run::JudgeStats,
    secs: f64,
    place: &str,
) {
    eprintln!(
        "scored {} items in {secs:.1}s ({:.2} items/s); {} already in {place}; {} failed; {} truncated to fit",
        summary.scored,
        summary.scored as f64 / secs.max(1e-9),
        summary.skipped_finished,
        summary.failed.len(),
        stats.truncated,
    );
    if stats.naive_tokens > 0 {
        eprintln!(
            "forward tokens: {} (one full prompt per aspect would be {}: {:.1}× fewer)",
            stats.forward_tokens,
            stats.naive_tokens,
            stats.naive_tokens as f64 / stats.forward_tokens.max(1) as f64
        );
    }
}

pub fn run(args: JudgeArgs) -> anyhow::Result<ExitCode> {
    // The rubric and the items are checked, and the output (locked by no other run, readable),
    // before models load.
    if hyoka::files::same_file(&args.input, &args.output) {
        return Err(super::usage(format!(
            "the output {} is the input {}: name another output file",
            args.output.display(),
            args.input.display()
        )));
    }
    let rubric = hyoka::prompt::resolve_rubric(&args.rubric)?;
    let read = data::read_items(&args.input, args.skip_invalid)?;
    for e in &read.skipped {
        eprintln!("skipped: {e}");
    }
    hyoka::results::ResultsFile::preflight(
        &args.output,
        args.overwrite,
        &hyoka::results::Expected {
            task: hyoka::results::Task::Judge,
            rubric_hash: Some(rubric.0.hash()),
        },
    )?;
    let judge = LoadedJudge::load(&args, rubric)?;
    let failed = judge.run(&read.items, &args.output)?;
    Ok(super::finish(&failed, read.skipped.len()))
}

/// A count of tokens: a whole number of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("must be a whole number of at least 1, got {s:?}")),
    }
}

/// A memory size in GiB: above zero, at most 2^20 (a PiB; NaN and infinities refused).
fn gibibytes(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(g) if g > 0.0 && g <= (1u64 << 20) as f64 => Ok(g),
        _ => Err(format!("must be a number of GiB above 0, got {s:?}")),
    }
}

/// A finite temperature ≥ 0, checked before any model is loaded.
fn temperature(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t >= 0.0 && t.is_finite() => Ok(t),
        _ => Err(format!("must be a finite number ≥ 0, got {s:?}")),
    }
}
