//! `hyoka likelihood`.

use crate::likelihood::{LikelihoodOptions, LikelihoodRun, LikelihoodScorer, score_items};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(
    long_about = "Score items with a likelihood scorer: the reference-free baselines of the \
literature, computed from a language model's probabilities (any model hyoka loads as a judge).\n\n\
fed-ja, fed-en: FED (Mehri & Eskenazi, 2020). For each aspect, follow-up utterances the other \
speaker might say next are appended after the response; the score is the mean log-likelihood \
per token of the positive follow-ups minus that of the negative ones (an empty list counts 0). \
Higher is better.\n\n\
gptscore-ja, gptscore-en: GPTScore (Fu et al., 2023). For each aspect, the mean log-probability \
per token of the response after the dialogue and an instruction asking for that quality.\n\n\
Both have the six aspects of Terauchi et al. (2024) (keys as dialogue6-ja) and DBDC's breakdown \
question; a scorer file of your own (TOML, see docs/likelihood.md) may have others. The dialogue \
is written as lines \"A: text\"; every sequence of an item (all follow-ups of all aspects, or the \
response under every instruction) shares one prefill of it, and an item's numbers are the same \
bits in any batch on the CPU. Each line holds per aspect: score, positive and negative (each \
follow-up's mean log-probability per token; GPTScore: the response's), tokens, and the run's \
provenance; `hyoka meta` reads them as columns beside a judge's and BERTScore's.\n\n\
A killed run restarted with the same arguments continues after the last finished item; items \
edited since (context or response) and error lines are scored again."
)]
pub struct LikelihoodArgs {
    /// Built-in scorer (fed-ja, fed-en, gptscore-ja, gptscore-en) or a scorer TOML file.
    #[arg(long)]
    pub scorer: String,
    /// The language model: local folder or .gguf file, or Hugging Face id
    /// ORG/NAME[@REV][:FILE.gguf].
    #[arg(long)]
    pub model: String,
    /// Items JSONL (see `hyoka validate --help`).
    #[arg(long, short)]
    pub input: PathBuf,
    /// Output scores JSONL; an existing file of the same run is continued.
    #[arg(long, short)]
    pub output: PathBuf,
    /// Padded tokens per forward pass (rows × longest row).
    #[arg(long, default_value_t = 4096)]
    pub batch_tokens: usize,
    /// Expected sha256 of the model's weights file; a mismatch is an error.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Skip invalid input lines (reported) instead of stopping.
    #[arg(long)]
    pub skip_invalid: bool,
    /// Start the output afresh instead of continuing it.
    #[arg(long)]
    pub overwrite: bool,
    #[command(flatten)]
    pub runtime: super::runtime_args::RuntimeArgs,
}

pub fn run(args: LikelihoodArgs) -> anyhow::Result<ExitCode> {
    super::exit::refuse_output_as_input(&args.output, &args.input)?;
    if args.batch_tokens == 0 {
        return Err(super::exit::usage("--batch-tokens must be at least 1"));
    }
    let (scorer, source) = LikelihoodScorer::resolve(&args.scorer)?;
    let read = super::running::read_items_for_output(
        &args.input,
        &args.output,
        args.skip_invalid,
        args.overwrite,
        &crate::results::Expected {
            task: crate::results::Task::Likelihood,
            rubric_hash: Some(scorer.hash()),
        },
    )?;
    let runtime = args.runtime.options();
    let (device, settings) = runtime.settings()?;
    eprintln!("loading {} ...", args.model);
    let model = runtime.load_model(&args.model, &device, &settings, args.sha256.as_deref())?;
    let opts = LikelihoodOptions {
        batch_tokens: args.batch_tokens,
    };
    let mut task = LikelihoodRun::new(&model, &scorer, source, opts);
    let (summary, secs) = super::running::with_progress("scoring", |progress| {
        score_items(
            &mut task,
            &read.items,
            &args.output,
            args.overwrite,
            progress,
        )
    });
    let summary = summary?;
    let figures = [format!(
        "{} items scored with {} in {secs:.1} s ({} already in {})",
        summary.scored,
        scorer.name,
        summary.skipped_finished,
        args.output.display()
    )];
    Ok(super::running::finish_scoring(
        &summary,
        figures,
        read.skipped.len(),
    ))
}
