//! `hyoka bertscore` and `hyoka bertscore baseline`.

use crate::bertscore::run::{Against, BERT_SCORE_BATCH, BertScoreRun, default_batch_tokens};
use crate::bertscore::{BertScorer, Depth, LoadedScorer, baseline, load_encoder, resolve_baseline};
use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    long_about = "BERTScore of each item's response against its references (or, with --against \
last-turn, against the last context turn), exactly as bert_score 0.3.13 computes it with a fast \
tokenizer: P, R and F per item; several references give the max per column; --idf weights tokens \
by the references' inverse document frequency; --baseline rescales (x − b) / (1 − b) with a \
bert_score baseline file (see `hyoka bertscore baseline` to make one), --rescale with the one \
hyoka ships for the language.\n\n\
The encoder: --model, or bert_score's for --lang (roberta-large for en, bert-base-chinese for zh, \
bert-base-multilingual-cased for ja and every other language) from the Hugging Face Hub, or its \
cache with HF_HUB_OFFLINE=1. bert_score's bare names (roberta-large) are fetched from their \
repositories (FacebookAI/roberta-large). An encoder that cannot be had stops the run with how to \
get it: no other encoder is used in its place. The outputs name the encoder used, and describe \
known copies that differ from their upstream model (the registry copy of multilingual-e5-small: \
4-bit weights).\n\n\
Output lines: {\"id\", \"input_sha256\", \"bertscore\": {\"P\", \"R\", \"F\"}, \"provenance\"}. A killed run \
restarted with the same arguments continues after the last finished chunk of items; items whose \
response or compared texts changed since are scored again."
)]
pub struct BertScoreArgs {
    #[command(subcommand)]
    pub command: Option<BertScoreCommand>,
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// Items JSONL.
    #[arg(long, short, required = true)]
    pub input: Option<PathBuf>,
    /// Output scores JSONL; an existing file of the same run is continued.
    #[arg(long, short, required = true)]
    pub output: Option<PathBuf>,
    /// What the response is compared with.
    #[arg(long, value_enum, default_value = "reference")]
    pub against: Against,
    /// Weight tokens by inverse document frequency over the references.
    #[arg(long)]
    pub idf: bool,
    /// bert_score baseline file (LAYER,P,R,F rows) to rescale with, at the scoring layer.
    #[arg(long, value_name = "FILE", conflicts_with = "rescale")]
    pub baseline: Option<PathBuf>,
    /// Rescale with the baseline hyoka ships for the encoder in --lang (as bert_score's
    /// rescale_with_baseline; ja/multilingual-e5-small, from DBDC3-ja utterances).
    #[arg(long, requires = "lang")]
    pub rescale: bool,
    /// bert_score matches pairs in batches of this many (its batch_size) and lets padding score
    /// 0, which floors a token's best match at 0 in some pairs; reproduced for identical numbers.
    /// 0 turns that off (each token's best match over real tokens only).
    #[arg(long, default_value_t = BERT_SCORE_BATCH, value_name = "N")]
    pub bert_score_batch: usize,
    /// Skip invalid input lines (reported) instead of stopping.
    #[arg(long)]
    pub skip_invalid: bool,
    /// Start the output afresh instead of continuing it.
    #[arg(long)]
    pub overwrite: bool,
}

#[derive(Args, Debug)]
pub struct EncoderArgs {
    /// Encoder: a folder (config.json, model.safetensors, tokenizer.json) or a Hugging Face id
    /// ORG/NAME[@REV]. BERT, RoBERTa/XLM-RoBERTa and DistilBERT. Default: bert_score's encoder
    /// for --lang.
    #[arg(long, required_unless_present = "lang")]
    pub model: Option<String>,
    /// Language of the sentences (ja, en, zh, …): without --model, picks the encoder bert_score
    /// would (roberta-large for en, bert-base-chinese for zh, bert-base-multilingual-cased for
    /// ja and every other language) from the Hub or its cache. --rescale needs it.
    #[arg(long)]
    pub lang: Option<String>,
    /// Layer to read (default: bert_score's for the models it knows, e.g. 9 for
    /// bert-base-multilingual-cased, 17 for roberta-large; 12 for multilingual-e5-small, chosen
    /// on DBDC3-ja).
    #[arg(long)]
    pub layer: Option<usize>,
    /// cpu, cuda or cuda:N (a build with --features cuda; compute capability 7.5 or later).
    /// metal needs a build with --features metal, which has never been built or run.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// f32, bf16 or f16 (default f32; bert_score's numbers are f32).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// With --device cuda and f32: let the encoder's GEMMs use TF32 tensor cores (Ampere and
    /// later; inputs rounded to 10-bit mantissas, so scores move slightly from bert_score's f32
    /// numbers: on an H200 with a MiniLM-sized encoder, 7% faster, F within 4e-5). Recorded in
    /// the provenance.
    #[arg(long)]
    pub tf32: bool,
    /// Padded tokens per encoder batch; a speed setting, scores do not depend on it
    /// [default: 2048 on CPU, 16384 on a GPU].
    #[arg(long)]
    pub batch_tokens: Option<usize>,
}

#[derive(Subcommand, Debug)]
pub enum BertScoreCommand {
    /// Compute a rescaling baseline the way bert_score's get_rescale_baseline.py does: the mean
    /// P/R/F of random sentence pairs at every layer, written in bert_score's format.
    Baseline(BaselineArgs),
}

#[derive(Args, Debug)]
pub struct BaselineArgs {
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// Sentences, one per line (blank lines ignored).
    #[arg(long)]
    pub corpus: PathBuf,
    /// Random pairs to average over.
    #[arg(long, default_value_t = 100_000)]
    pub pairs: usize,
    /// Seed of the random pairs (the same seed and corpus give the same baseline).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output file (e.g. rescale_baseline/ja/MODEL.tsv).
    #[arg(long, short)]
    pub output: PathBuf,
}

impl EncoderArgs {
    /// `--batch-tokens`, else the default for the device the encoder was loaded on.
    fn batch_tokens(&self, scorer: &BertScorer) -> usize {
        self.batch_tokens
            .unwrap_or_else(|| default_batch_tokens(scorer.encoder.device()))
    }
}

fn load(args: &EncoderArgs, all_layers: bool) -> anyhow::Result<LoadedScorer> {
    let device = crate::model::backend::device::parse_device(&args.device)?;
    let dtype = crate::model::backend::device::parse_dtype(Some(&args.dtype), &device)?;
    crate::model::backend::device::set_tf32(&device, args.tf32)?;
    // A baseline covers every layer; scoring stops at the one it reads.
    let depth = if all_layers {
        Depth::All
    } else {
        Depth::Layer(args.layer)
    };
    Ok(load_encoder(
        args.model.as_deref(),
        args.lang.as_deref().unwrap_or("ja"),
        depth,
        dtype,
        &device,
        "--model",
    )?)
}

pub fn run(args: BertScoreArgs) -> anyhow::Result<ExitCode> {
    if let Some(BertScoreCommand::Baseline(b)) = args.command {
        return run_baseline(b);
    }
    let input = args.input.context("--input is required")?;
    let output = args.output.context("--output is required")?;
    super::exit::refuse_output_as_input(&output, &input)?;
    // The output is checked (its folder writable, locked by no other run, readable, of this
    // task) before the encoder loads.
    let read = super::running::read_items_for_output(
        &input,
        &output,
        args.skip_invalid,
        args.overwrite,
        &crate::results::Expected {
            task: crate::results::Task::BertScore,
            rubric_hash: None,
        },
    )?;
    let loaded = load(&args.encoder, false)?;
    let baseline = resolve_baseline(
        args.baseline.as_deref(),
        args.rescale,
        args.encoder.lang.as_deref(),
        &loaded,
    )?;
    let job = BertScoreRun {
        scorer: &loaded.scorer,
        model: loaded.model.clone(),
        layer: loaded.layer,
        idf: args.idf,
        baseline,
        against: args.against,
        batch_tokens: args.encoder.batch_tokens(&loaded.scorer),
        emulate_batch: Some(args.bert_score_batch).filter(|b| *b > 0),
    };
    let (summary, secs) = super::running::with_progress("bertscore", |progress| {
        job.run(&read.items, &output, args.overwrite, progress)
    });
    let summary = summary?;
    let figures = [format!(
        "scored {} items in {secs:.2}s ({:.1} pairs/s, layer {}); {} already in {}; {} failed",
        summary.scored,
        summary.scored as f64 / secs.max(1e-9),
        loaded.layer,
        summary.skipped_finished,
        output.display(),
        summary.failed.len()
    )];
    let note = super::running::not_applicable_note("bertscore", &summary.not_applicable);
    Ok(super::running::finish_scoring(
        &summary,
        figures.into_iter().chain(note),
        read.skipped.len(),
    ))
}

fn run_baseline(args: BaselineArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.corpus)
        .with_context(|| format!("reading {}", args.corpus.display()))?;
    let corpus: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    anyhow::ensure!(
        corpus.len() >= 2,
        "{}: needs at least 2 non-empty lines",
        args.corpus.display()
    );
    let loaded = load(&args.encoder, true)?;
    let pairs = baseline::sample_pairs(&corpus, args.pairs, args.seed);
    let cands: Vec<&str> = pairs.iter().map(|(a, _)| corpus[*a].as_str()).collect();
    let refs: Vec<&str> = pairs.iter().map(|(_, b)| corpus[*b].as_str()).collect();
    let rows = baseline::compute(
        &loaded.scorer,
        &cands,
        &refs,
        args.encoder.batch_tokens(&loaded.scorer),
        Some(BERT_SCORE_BATCH),
    )?;
    baseline::write(&args.output, &rows)?;
    eprintln!(
        "wrote {} layers ({} pairs from {} sentences) to {}",
        rows.len(),
        pairs.len(),
        corpus.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}
