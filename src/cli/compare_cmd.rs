//! `hyoka compare`.

use crate::data::{self, Origin, Pairing, Pairs};
use crate::judge::JudgeSpec;
use crate::judge::json::Decoding;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(
    long_about = "Judge pairs of responses to the same context with a pairwise rubric: per pair and \
aspect, the exact probabilities that the first system's response is better, the second's, or \
neither.\n\n\
Items that share a context_id are candidate responses of different systems (each item's system) \
to one context; their context turns and setting must be the same. Pairs are every two systems of \
a context, or with --baseline each system against that one. Each pair is judged in both orders \
(the first system's response shown first, then the second's), in one row that shares the prefill \
of the context: each line holds both orders' distributions, their average (the preference with \
the position of the responses cancelled), the verdict, whether the two orders agree \
(consistent) and the position bias, plus the run's provenance.\n\n\
Built-in pairwise rubrics: dialogue6-pair-ja, dialogue6-pair-en, breakdown-pair-ja, \
breakdown-pair-en; a rubric of your own is pairwise with a [pairwise] table (docs/pairwise.md). \
`hyoka meta -i ITEMS -s PAIRS.jsonl` ranks the systems (win rates, Bradley–Terry strengths with \
bootstrap intervals) and compares the verdicts with human preferences.\n\n\
A killed run restarted with the same arguments continues after the last finished pair; pairs \
whose items were edited since their lines were written, and error lines, are judged again. The \
output must not be the input."
)]
pub struct CompareArgs {
    /// Built-in pairwise rubric name (see `hyoka rubrics list`) or rubric file.
    #[arg(long)]
    pub rubric: String,
    /// Judge model: local folder or .gguf file, or Hugging Face id ORG/NAME[@REV][:FILE.gguf].
    /// Repeat to judge with several: each one's verdicts and their mean are written.
    #[arg(long, required = true)]
    pub model: Vec<String>,
    /// Items JSONL with context_id and system on every item (see `hyoka validate --help`).
    #[arg(long, short)]
    pub input: PathBuf,
    /// Output pairwise results JSONL; an existing file of the same run is continued.
    #[arg(long, short)]
    pub output: PathBuf,
    /// Compare each other system with this one only (default: every two systems of a context).
    #[arg(long, value_name = "SYSTEM")]
    pub baseline: Option<String>,
    #[command(flatten)]
    pub runtime: super::runtime_args::RuntimeArgs,
    #[command(flatten)]
    pub batching: super::args::BatchArgs,
    /// Expected sha256 of the (first) model's weights file; a mismatch is an error.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Start the output afresh instead of continuing it.
    #[arg(long)]
    pub overwrite: bool,
    /// json rubrics: sample the reason (and the written integers) at this temperature instead
    /// of greedy decoding (0).
    #[arg(long, default_value_t = 0.0, value_parser = super::args::temperature)]
    pub temperature: f64,
    /// Seed of the sampling; each order's draws depend only on it, the judge and the pair id.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl CompareArgs {
    pub fn pairing(&self) -> Pairing {
        match &self.baseline {
            Some(b) => Pairing::Baseline(b.clone()),
            None => Pairing::All,
        }
    }
}

/// The pairs of an items file, with what gave none said on stderr; none at all is an error.
pub fn read_pairs(input: &std::path::Path, pairing: &Pairing) -> anyhow::Result<Pairs> {
    let read = data::read_items(input, false)?;
    let origin = Origin::File {
        path: input,
        lines: &read.lines,
    };
    let pairs = data::form_pairs(&read.items, origin, pairing)?;
    eprintln!(
        "{} contexts, {} pairs ({})",
        pairs.contexts,
        pairs.pairs.len(),
        pairing.describe()
    );
    if !pairs.single.is_empty() {
        eprintln!(
            "{} contexts have one system only (nothing to compare), e.g. {:?}",
            pairs.single.len(),
            pairs.single[0]
        );
    }
    if !pairs.without_baseline.is_empty() {
        eprintln!(
            "{} contexts have no response of the baseline, e.g. {:?}",
            pairs.without_baseline.len(),
            pairs.without_baseline[0]
        );
    }
    if pairs.pairs.is_empty() {
        return Err(super::exit::usage(format!(
            "{}: no context has responses of two systems to compare (items with the same context_id and different systems)",
            input.display()
        )));
    }
    Ok(pairs)
}

pub fn run(args: CompareArgs) -> anyhow::Result<ExitCode> {
    super::exit::refuse_output_as_input(&args.output, &args.input)?;
    let (rubric, rubric_source) = crate::prompt::resolve_rubric(&args.rubric)?;
    if rubric.pairwise.is_none() {
        return Err(super::exit::usage(format!(
            "rubric {}: not pairwise (no [pairwise] table): use a pairwise rubric ({})",
            rubric.name,
            crate::judge::compare::pairwise_builtins().join(", ")
        )));
    }
    let pairs = read_pairs(&args.input, &args.pairing())?;
    crate::results::ResultsFile::preflight(
        &args.output,
        args.overwrite,
        &crate::results::Expected {
            task: crate::results::Task::Compare,
            rubric_hash: Some(rubric.hash()),
        },
    )?;
    let spec = JudgeSpec {
        models: args.model.clone(),
        rubric,
        rubric_source,
        runtime: args.runtime.options(),
        sha256: args.sha256.clone(),
        run: args.batching.run_options(
            args.overwrite,
            None,
            Decoding {
                temperature: args.temperature,
                seed: args.seed,
            },
        ),
    };
    let judge = spec.load()?;
    let (summary, secs) = super::running::with_progress("comparing", |progress| {
        judge.compare(&pairs, &args.output, progress)
    });
    let (summary, stats) = summary?;
    let place = args.output.display().to_string();
    let figures = stats.describe_units(&summary, secs, &place, "pairs");
    Ok(super::running::finish_scoring(&summary, figures, 0))
}
