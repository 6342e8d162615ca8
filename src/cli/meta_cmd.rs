//! `hyoka meta`: correlations of score columns with human ratings.

use anyhow::Context;
use clap::Args;
use hyoka::data;
use hyoka::meta::breakdown::LevelLabels;
use hyoka::meta::{Bootstrap, BreakdownOptions, Frame, MetaOptions, Summary};
use hyoka::results::reader::ResultsInput;
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
null, never as 0. Prints Markdown; --json writes everything."
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
}

/// Statistics options shared by `meta` and `eval`.
#[derive(Args, Debug, Clone)]
pub struct StatsArgs {
    /// Weight of BERTScore in the combination c + w (b − mean b).
    #[arg(long, default_value_t = 10.0, value_parser = parse_finite)]
    pub w: f64,
    /// Leave out the combined columns.
    #[arg(long)]
    pub no_combine: bool,
    /// Which BERTScore value is combined.
    #[arg(long, default_value = "F", value_parser = ["P", "R", "F"])]
    pub combine_with: String,
    /// Also choose w from a grid on a development half of the dialogues (split by --seed) and
    /// report the held-out Spearman next to the judge and BERTScore alone.
    #[arg(long)]
    pub fit_w: bool,
    /// Bootstrap resamples for the confidence intervals (0: none).
    #[arg(long, default_value_t = 1000)]
    pub bootstrap: usize,
    /// Confidence level of the intervals.
    #[arg(long, default_value_t = 0.95, value_parser = parse_confidence)]
    pub confidence: f64,
    /// Seed of the bootstrap and of the development/held-out split (--fit-w, --calibrate).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Breakdown detection: fit a temperature and a bias per label to the judge's O/T/X
    /// distributions on the development half of the dialogues (minimum cross-entropy to the
    /// raters' distributions) and report the held-out half raw and calibrated.
    #[arg(long)]
    pub calibrate: bool,
    /// Breakdown detection: the share of raters a label needs to be the gold label (the DBDC
    /// challenge's `-t`; its default 0 takes the plain majority).
    #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
    pub dbdc_threshold: f64,
    /// Breakdown detection for a judge aspect whose rubric maps no levels onto breakdown labels:
    /// ASPECT:SCORE=LABEL,… (e.g. `coherence:1=O,0=X`); repeat for several aspects.
    #[arg(long, value_name = "ASPECT:MAP", value_parser = parse_levels)]
    pub breakdown_levels: Vec<(String, LevelLabels)>,
}

fn parse_finite(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(format!("`{s}` is not a finite number")),
    }
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if (0.0..=1.0).contains(&t) => Ok(t),
        _ => Err(format!("`{s}` is not a share between 0 and 1")),
    }
}

fn parse_levels(s: &str) -> Result<(String, LevelLabels), String> {
    let (aspect, map) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}` is not ASPECT:SCORE=LABEL,… (e.g. coherence:1=O,0=X)"))?;
    if aspect.trim().is_empty() {
        return Err(format!("`{s}` names no aspect before ':'"));
    }
    Ok((aspect.trim().to_string(), LevelLabels::parse(map)?))
}

fn parse_confidence(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(c) if c > 0.0 && c < 1.0 => Ok(c),
        _ => Err(format!("`{s}` is not a level between 0 and 1 (e.g. 0.95)")),
    }
}

impl StatsArgs {
    /// Every --breakdown-levels names an aspect among `aspects` (the judge's); otherwise a
    /// usage error, never a flag silently ignored.
    pub fn check_breakdown_aspects<'a>(
        &self,
        aspects: impl Iterator<Item = &'a str> + Clone,
    ) -> anyhow::Result<()> {
        for (aspect, _) in &self.breakdown_levels {
            if !aspects.clone().any(|a| a == aspect) {
                let known: Vec<&str> = aspects.clone().collect();
                return Err(super::usage(format!(
                    "--breakdown-levels {aspect}:…: no judge aspect {aspect:?} (the judge's aspects: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )));
            }
        }
        Ok(())
    }

    pub fn options(&self) -> MetaOptions {
        MetaOptions {
            w: (!self.no_combine).then_some(self.w),
            combine_with: self.combine_with.clone(),
            fit_w: self.fit_w,
            bootstrap: Bootstrap {
                resamples: self.bootstrap,
                seed: self.seed,
                confidence: self.confidence,
            },
            breakdown: BreakdownOptions {
                threshold: self.dbdc_threshold,
                calibrate: self.calibrate,
                levels: self.breakdown_levels.clone(),
                seed: self.seed,
            },
        }
    }
}

/// The task a results file holds, from its first line (read bounded and typed).
fn results_task(input: &ResultsInput) -> anyhow::Result<hyoka::results::Task> {
    hyoka::results::reader::first_task(input)?
        .ok_or_else(|| anyhow::anyhow!("{}: no results lines", input.path.display()))
}

/// One half of the dialogues, as --fit-w splits them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Half {
    Dev,
    HeldOut,
}

/// Read items and results into a frame. Several results files of one task are told apart by
/// the shortest end of their paths that differs (`runA` and `runB` for runA/judge.jsonl and
/// runB/judge.jsonl); one file given twice is refused. With `strict` (`meta`), a file that
/// gives no item a score is an error; otherwise (`eval`, `merge`) it is said on stderr.
pub fn load_frame(items: &Path, scores: &[PathBuf], strict: bool) -> anyhow::Result<Frame> {
    let items_read = data::read_items(items, false)?.items;
    load_frame_of(items_read, items, scores, strict)
}

/// `load_frame` over items already read from `items_path`.
fn load_frame_of(
    items: Vec<hyoka::data::Item>,
    items_path: &Path,
    scores: &[PathBuf],
    strict: bool,
) -> anyhow::Result<Frame> {
    for (i, a) in scores.iter().enumerate() {
        if let Some(b) = scores[..i].iter().find(|b| hyoka::files::same_file(a, b)) {
            return Err(super::usage(format!(
                "{} and {} are one file: give each results file once",
                b.display(),
                a.display()
            )));
        }
    }
    let mut frame = Frame::new(items);
    // Each file opened once: a stream (`-s <(…)`) is read then, and both passes read that.
    let inputs: Vec<ResultsInput> = scores
        .iter()
        .map(|p| ResultsInput::open(p))
        .collect::<Result<_, _>>()?;
    let tasks: Vec<hyoka::results::Task> = inputs
        .iter()
        .map(results_task)
        .collect::<anyhow::Result<_>>()?;
    for (k, (path, task)) in scores.iter().zip(&tasks).enumerate() {
        let group: Vec<&Path> = scores
            .iter()
            .zip(&tasks)
            .filter(|(_, t)| *t == task)
            .map(|(p, _)| p.as_path())
            .collect();
        let name = (group.len() > 1).then(|| {
            let at = group.iter().position(|p| *p == path.as_path()).unwrap_or(k);
            run_names(&group)[at].clone()
        });
        let added = frame.add_results_input(&inputs[k], name.as_deref())?;
        let n = frame.items.len();
        let scored = added.matched - added.errors;
        if scored == 0 {
            let why = if added.matched == 0 {
                format!(
                    "none of its {} lines is for an item of {}",
                    added.unmatched,
                    items_path.display()
                )
            } else {
                format!(
                    "its {} lines for these items are all error lines",
                    added.matched
                )
            };
            let message = format!("{}: gives no item a score: {why}", path.display());
            if strict {
                return Err(hyoka::meta::MetaError::Input(message).into());
            }
            eprintln!("{message}");
            continue;
        }
        let mut notes = Vec::new();
        if added.matched < n {
            notes.push(format!("{} of {n} items have a line", added.matched));
        }
        if added.errors > 0 {
            notes.push(format!("{} of them error lines (no score)", added.errors));
        }
        if added.unmatched > 0 {
            notes.push(format!(
                "{} lines are for ids not among the items, left out",
                added.unmatched
            ));
        }
        if !notes.is_empty() {
            eprintln!("{}: {}", path.display(), notes.join("; "));
        }
    }
    Ok(frame)
}

/// Names that tell `paths` apart: the shortest ends of the paths (file extension left out; the
/// file name too when every file has the same one) that differ, e.g. `runA` and `runB`.
fn run_names(paths: &[&Path]) -> Vec<String> {
    let parts: Vec<Vec<String>> = paths
        .iter()
        .map(|p| {
            let mut parts: Vec<String> = p
                .with_extension("")
                .components()
                .filter(|c| matches!(c, std::path::Component::Normal(_)))
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.is_empty() {
                parts.push(p.display().to_string());
            }
            parts
        })
        .collect();
    let same_stem = parts.windows(2).all(|w| w[0].last() == w[1].last());
    let end = |p: &Vec<String>, k: usize| -> String {
        let upto = if same_stem && p.len() > 1 {
            p.len() - 1
        } else {
            p.len()
        };
        let from = upto.saturating_sub(k);
        p[from..upto].join("/")
    };
    let longest = parts.iter().map(Vec::len).max().unwrap_or(1);
    for k in 1..=longest {
        let names: Vec<String> = parts.iter().map(|p| end(p, k)).collect();
        let distinct: std::collections::HashSet<&String> = names.iter().collect();
        if distinct.len() == names.len() {
            return names;
        }
    }
    // Paths whose every end agrees (another folder reached by another route): numbered.
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}#{}", end(p, longest), i + 1))
        .collect()
}

pub fn run(args: MetaArgs) -> anyhow::Result<ExitCode> {
    let outputs: Vec<&Path> = [&args.json, &args.markdown, &args.html]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
        .collect();
    let inputs: Vec<&Path> = std::iter::once(args.items.as_path())
        .chain(args.scores.iter().map(PathBuf::as_path))
        .collect();
    if let Some((output, input)) = hyoka::files::output_among_inputs(&outputs, &inputs) {
        return Err(super::usage(format!(
            "{} is also an input ({}): write the outputs elsewhere",
            output.display(),
            input.display()
        )));
    }
    let mut items = data::read_items(&args.items, false)?.items;
    if let Some(half) = args.half {
        let seed = args.stats.seed;
        items.retain(|i| hyoka::meta::item_in_dev_half(seed, i) == (half == Half::Dev));
        if items.is_empty() {
            return Err(super::usage(format!(
                "--half {}: no item of {} falls in that half (seed {seed}); the halves split whole dialogues, so a file of one dialogue has one empty half",
                if half == Half::Dev { "dev" } else { "held-out" },
                args.items.display()
            )));
        }
        eprintln!(
            "{} items in the {} half (seed {seed})",
            items.len(),
            if half == Half::Dev { "dev" } else { "held-out" }
        );
    }
    let mut frame = load_frame_of(items, &args.items, &args.scores, true)?;
    args.stats
        .check_breakdown_aspects(frame.distributions.iter().map(|d| d.aspect.as_str()))?;
    let summary = Summary::compute(&mut frame, &args.stats.options())?;
    write_outputs(&summary, args.json.as_deref(), args.markdown.as_deref())?;
    if let Some(p) = &args.html {
        hyoka::files::write_atomic(p, hyoka::report::html(&summary, &frame).as_bytes())
            .with_context(|| format!("{}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn write_outputs(
    summary: &Summary,
    json: Option<&Path>,
    markdown: Option<&Path>,
) -> anyhow::Result<()> {
    let md = summary.markdown();
    match markdown {
        Some(p) => hyoka::files::write_atomic(p, md.as_bytes())
            .with_context(|| format!("{}", p.display()))?,
        None => print!("{md}"),
    }
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(summary).context("summary as JSON")?;
        hyoka::files::write_atomic(p, (text + "\n").as_bytes())
            .with_context(|| format!("{}", p.display()))?;
    }
    Ok(())
}
