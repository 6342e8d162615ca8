//! `hyoka meta`: correlations of score columns with human ratings.

use super::args::StatsArgs;
use crate::data;
use crate::meta::{Evaluation, Half, Summary};
use crate::results::reader::ResultsInput;
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(
    long_about = "Meta-evaluation: how well score columns agree with the items' human ratings.\n\n\
Columns come from `hyoka judge` outputs (each aspect's argmax score and expected score) and \
`hyoka bertscore` outputs (P, R, F); with both, the paper's combination c + w (b − mean b) is \
added for every judge column. A judge aspect is compared with the human aspect of the same key \
when the items have one, and with every human aspect otherwise (e.g. DBDC3's `breakdown`).\n\n\
For each column and human aspect: Pearson, Spearman (ties averaged) and Kendall tau-b, with \
scipy's p-values and a seeded percentile bootstrap interval, at item level, system level (means \
per `system`) and within dialogue (per `dialogue`, averaged). Also: each human aspect's mean, \
spread and rater agreement (each rater against the mean of the others, by rater id when items \
carry `raters`, by position otherwise), and the aspect-by-aspect Spearman matrix.\n\n\
Breakdown detection: a judge aspect whose levels map onto DBDC's O/T/X labels (the rubric's \
level `human` ratings, as in `breakdown3-ja`, or --breakdown-levels) is scored against items \
with per-rater `breakdown` labels (from `hyoka import dbdc3`) with the challenge's metrics: JS \
divergence and MSE of the O/T/X distribution, accuracy, precision/recall/F for X and T+X; beside \
it the development half's mean distribution as a constant predictor, and with --calibrate a \
calibration fitted on the development half, reported on the held-out half.\n\n\
Undefined correlations (constant columns, fewer than 3 pairs) are shown as — and written as \
null, never as 0. Prints Markdown; --json writes everything.\n\n\
Pairwise results (`hyoka compare`, given alone): per aspect the systems' win, tie and loss \
rates, Bradley–Terry strengths with ties (Davidson) fitted to the verdict probabilities with \
bootstrap intervals over contexts, the judge's position consistency and bias, and agreement \
with human preferences derived from the items' ratings of both responses (with and without \
ties, Cohen's κ, and the Spearman ρ of strengths and the systems' mean ratings)."
)]
pub struct MetaArgs {
    /// Items JSONL with `human` ratings (and `system` / `dialogue` for those levels).
    #[arg(long, short)]
    pub items: PathBuf,
    /// Results files of `hyoka judge` / `hyoka bertscore` (repeat the flag for several).
    #[arg(long, short, required = true, value_name = "FILE")]
    pub scores: Vec<PathBuf>,
    #[command(flatten)]
    pub stats: StatsArgs,
    /// Write the whole summary as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the Markdown here instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also write the self-contained HTML report (charts inline, opens offline).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Meta-evaluate only one half of the dialogues of --fit-w's split (same --seed): choose
    /// settings (a layer, a prompt) on `dev`, report them on `held-out`.
    #[arg(long, value_enum)]
    pub half: Option<Half>,
    /// Use results lines that carry no input_sha256 (written by another tool or an older
    /// hyoka), whose items may have changed since they were scored; refused otherwise.
    #[arg(long)]
    pub accept_unhashed: bool,
}

/// Each results file opened once: a stream (`-s <(…)`) is read then, and every later pass
/// reads that.
fn open_inputs(scores: &[PathBuf]) -> anyhow::Result<Vec<ResultsInput>> {
    Ok(scores
        .iter()
        .map(|p| ResultsInput::open(p))
        .collect::<Result<_, _>>()?)
}

pub fn run(args: MetaArgs) -> anyhow::Result<ExitCode> {
    let outputs: Vec<&Path> = [&args.json, &args.markdown, &args.html]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
        .collect();
    let inputs: Vec<&Path> = std::iter::once(args.items.as_path())
        .chain(args.scores.iter().map(PathBuf::as_path))
        .chain(args.stats.preferences.as_deref())
        .collect();
    let named = [
        ("--json", &args.json),
        ("--markdown", &args.markdown),
        ("--html", &args.html),
    ];
    for (i, (flag, path)) in named.iter().enumerate() {
        for (other, again) in &named[i + 1..] {
            if let (Some(a), Some(b)) = (path, again)
                && (a == b || crate::files::same_file(a, b))
            {
                return Err(super::exit::usage(format!(
                    "{flag} and {other} name one file ({}): each output needs its own",
                    a.display()
                )));
            }
        }
    }
    if let Some((output, input)) = crate::files::output_among_inputs(&outputs, &inputs) {
        return Err(super::exit::usage(format!(
            "{} is also an input ({}): write the outputs elsewhere",
            output.display(),
            input.display()
        )));
    }
    let items = data::read_items(&args.items, false)?.items;
    let inputs = open_inputs(&args.scores)?;
    let request = args.stats.request(args.half, args.accept_unhashed);
    let bar = super::running::progress_bar("bootstrap");
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} resamples (eta {eta})")
            .expect("the template is valid"),
    );
    let evaluation = crate::meta::evaluate(
        items,
        &args.items.display().to_string(),
        &inputs,
        &request,
        crate::meta::Naming::Flags,
        &mut |note| eprintln!("{note}"),
        &|done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    )?;
    bar.finish_and_clear();
    match evaluation {
        Evaluation::Scores { summary, frame } => {
            write_outputs(&summary, args.json.as_deref(), args.markdown.as_deref())?;
            if let Some(p) = &args.html {
                crate::files::write_atomic(p, crate::report::html(&summary, &frame).as_bytes())
                    .with_context(|| format!("{}", p.display()))?;
            }
        }
        Evaluation::Pairwise(summary) => write_pairwise(
            &summary,
            args.json.as_deref(),
            args.markdown.as_deref(),
            args.html.as_deref(),
        )?,
    }
    Ok(ExitCode::SUCCESS)
}

/// summary.md (or stdout), the JSON and the HTML report of a pairwise meta-evaluation.
pub fn write_pairwise(
    summary: &crate::meta::pairwise::PairwiseSummary,
    json: Option<&Path>,
    markdown: Option<&Path>,
    html: Option<&Path>,
) -> anyhow::Result<()> {
    write_summary(
        &crate::meta::pairwise::markdown(summary),
        summary,
        json,
        markdown,
    )?;
    if let Some(p) = html {
        crate::files::write_atomic(p, crate::report::pairwise_html(summary).as_bytes())
            .with_context(|| format!("{}", p.display()))?;
    }
    Ok(())
}

/// A summary's Markdown to `markdown` (or stdout) and, when asked, its JSON to `json`.
fn write_summary(
    md: &str,
    summary: &impl serde::Serialize,
    json: Option<&Path>,
    markdown: Option<&Path>,
) -> anyhow::Result<()> {
    match markdown {
        Some(p) => crate::files::write_atomic(p, md.as_bytes())
            .with_context(|| format!("{}", p.display()))?,
        None => print!("{md}"),
    }
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(summary).context("summary as JSON")?;
        crate::files::write_atomic(p, (text + "\n").as_bytes())
            .with_context(|| format!("{}", p.display()))?;
    }
    Ok(())
}

pub fn write_outputs(
    summary: &Summary,
    json: Option<&Path>,
    markdown: Option<&Path>,
) -> anyhow::Result<()> {
    write_summary(&summary.markdown(), summary, json, markdown)
}
