//! `hyoka meta`: correlations of score columns with human ratings.

use anyhow::Context;
use clap::Args;
use hyoka::data;
use hyoka::meta::breakdown::LevelLabels;
use hyoka::meta::{Bootstrap, BreakdownOptions, Frame, MetaOptions, Summary};
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
    #[arg(long, default_value_t = 10.0)]
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
fn results_task(path: &Path) -> anyhow::Result<hyoka::results::Task> {
    hyoka::results::reader::first_task(path)?
        .ok_or_else(|| anyhow::anyhow!("{}: no results lines", path.display()))
}

/// One half of the dialogues, as --fit-w splits them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Half {
    Dev,
    HeldOut,
}

/// Read items and results into a frame; results of the same task from several files are told
/// apart by their file names.
pub fn load_frame(items: &Path, scores: &[PathBuf]) -> anyhow::Result<Frame> {
    load_frame_of(data::read_items(items, false)?.items, scores)
}

/// `load_frame` over items already read.
fn load_frame_of(items: Vec<hyoka::data::Item>, scores: &[PathBuf]) -> anyhow::Result<Frame> {
    let mut frame = Frame::new(items);
    let tasks: Vec<hyoka::results::Task> = scores
        .iter()
        .map(|p| results_task(p))
        .collect::<anyhow::Result<_>>()?;
    for (path, task) in scores.iter().zip(&tasks) {
        let several = tasks.iter().filter(|t| *t == task).count() > 1;
        let name = several.then(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        let matched = frame.add_results(path, name.as_deref())?;
        if matched < frame.items.len() {
            eprintln!(
                "{}: {} of {} items have a line",
                path.display(),
                matched,
                frame.items.len()
            );
        }
    }
    Ok(frame)
}

pub fn run(args: MetaArgs) -> anyhow::Result<ExitCode> {
    let mut items = data::read_items(&args.items, false)?.items;
    if let Some(half) = args.half {
        let seed = args.stats.seed;
        items.retain(|i| hyoka::meta::item_in_dev_half(seed, i) == (half == Half::Dev));
        anyhow::ensure!(!items.is_empty(), "no items in the {half:?} half");
        eprintln!(
            "{} items in the {} half (seed {seed})",
            items.len(),
            if half == Half::Dev { "dev" } else { "held-out" }
        );
    }
    let mut frame = load_frame_of(items, &args.scores)?;
    let summary = Summary::compute(&mut frame, &args.stats.options())?;
    write_outputs(&summary, args.json.as_deref(), args.markdown.as_deref())?;
    if let Some(p) = &args.html {
        std::fs::write(p, hyoka::report::html(&summary, &frame))
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
        Some(p) => std::fs::write(p, &md).with_context(|| format!("{}", p.display()))?,
        None => print!("{md}"),
    }
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(summary).context("summary as JSON")?;
        std::fs::write(p, text + "\n").with_context(|| format!("{}", p.display()))?;
    }
    Ok(())
}
