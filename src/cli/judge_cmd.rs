//! `hyoka judge`.

use super::args::{BatchArgs, temperature};
use crate::judge::JudgeSpec;
use crate::judge::json::Decoding;
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

pub fn run(args: JudgeArgs) -> anyhow::Result<ExitCode> {
    // The rubric and the items are checked, and the output (locked by no other run, readable),
    // before models load.
    super::exit::refuse_output_as_input(&args.output, &args.input)?;
    let rubric = crate::prompt::resolve_rubric(&args.rubric)?;
    let read = super::running::read_items_for_output(
        &args.input,
        &args.output,
        args.skip_invalid,
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
    let figures = stats.describe(&summary, secs, &args.output.display().to_string());
    Ok(super::running::finish_scoring(
        &summary,
        figures,
        read.skipped.len(),
    ))
}
