//! `hyoka judge`.

use crate::data;
use crate::judge::JudgeSpec;
use crate::judge::json::Decoding;
use crate::judge::run::RunOptions;
use crate::rubric::Rubric;
use clap::Args;
use std::path::PathBuf;
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
    pub runtime: super::runtime_args::RuntimeArgs,
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
    #[arg(long = "json-cache-gib", value_name = "GIB", default_value = "2", value_parser = gibibytes)]
    pub json_cache_bytes: usize,
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
            json_cache_bytes: self.json_cache_bytes,
        }
    }
}

impl JudgeArgs {
    /// The library's judge these flags name, with `rubric` (`prompt::resolve_rubric` of
    /// `--rubric`) and its source.
    pub fn spec(&self, (rubric, rubric_source): (Rubric, String)) -> JudgeSpec {
        JudgeSpec {
            models: self.model.clone(),
            rubric,
            rubric_source,
            runtime: self.runtime.options(),
            sha256: self.sha256.clone(),
            run: self.batching.run_options(
                self.overwrite,
                self.greedy_baseline,
                Decoding {
                    temperature: self.temperature,
                    seed: self.seed,
                },
            ),
        }
    }
}

/// A run's figures on stderr; `place`: where its lines went.
fn report(
    summary: &crate::results::RunSummary,
    stats: &crate::judge::run::JudgeStats,
    secs: f64,
    place: &str,
) {
    for line in stats.describe(summary, secs, place) {
        eprintln!("{line}");
    }
}

pub fn run(args: JudgeArgs) -> anyhow::Result<ExitCode> {
    // The rubric and the items are checked, and the output (locked by no other run, readable),
    // before models load.
    super::exit::refuse_output_as_input(&args.output, &args.input)?;
    let rubric = crate::prompt::resolve_rubric(&args.rubric)?;
    let read = data::read_items(&args.input, args.skip_invalid)?;
    for e in &read.skipped {
        eprintln!("skipped: {e}");
    }
    crate::results::ResultsFile::preflight(
        &args.output,
        args.overwrite,
        &crate::results::Expected {
            task: crate::results::Task::Judge,
            rubric_hash: Some(rubric.0.hash()),
        },
    )?;
    let judge = args.spec(rubric).load()?;
    let (summary, secs) = super::running::with_progress("judging", |progress| {
        judge.run(&read.items, &args.output, progress)
    });
    let (summary, stats) = summary?;
    super::running::report_retried(&summary);
    report(&summary, &stats, secs, &args.output.display().to_string());
    Ok(super::exit::finish(&summary.failed, read.skipped.len()))
}

/// A count of tokens: a whole number of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("must be a whole number of at least 1, got {s:?}")),
    }
}

/// A memory size in GiB, in bytes (`judge::json_cache_bytes`).
fn gibibytes(s: &str) -> Result<usize, String> {
    let gib = s
        .parse::<f64>()
        .map_err(|_| format!("must be a number of GiB above 0, got {s:?}"))?;
    crate::judge::json_cache_bytes(gib).map_err(|e| e.to_string())
}

/// A temperature (`judge::check_temperature`), checked before any model is loaded.
pub(super) fn temperature(s: &str) -> Result<f64, String> {
    let t = s
        .parse::<f64>()
        .map_err(|_| format!("must be a finite number ≥ 0, got {s:?}"))?;
    crate::judge::check_temperature(t).map_err(|e| e.to_string())
}
