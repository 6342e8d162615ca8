//! Groups of flags that several commands share (`judge`, `compare` and `eval` batch judge
//! prompts alike; `meta`, `eval` and `merge` compute the same statistics), and their parsers.

use crate::judge::json::Decoding;
use crate::judge::run::RunOptions;
use crate::meta::breakdown::LevelLabels;
use crate::meta::{
    Alignment, AltTestOptions, Bootstrap, BreakdownOptions, Half, MetaOptions, MetaRequest,
};
use clap::Args;
use std::path::PathBuf;

/// How judge prompts are batched and fitted: flags shared by `judge` and `eval`.
#[derive(Args, Debug)]
pub struct BatchArgs {
    /// Padded tokens per forward pass (rows × longest row). A batch's memory grows with it: on
    /// a CPU about six hidden-sized f32 activations a token plus the MLP's middle (MLP width;
    /// its gate and up products are computed a block of columns at a time) — at 4,096 tokens
    /// of a 13B 0.5 GiB in use, 0.9 GiB resident (docs/memory.md) — and, where attention runs
    /// through blocks of scores (a CPU without AVX-512, a GPU's steps of a few queries), blocks
    /// of at most 2^28 scores (1 GiB in f32, about three such buffers at once) whatever the
    /// batch or prompt length; no mask of rows × tokens × tokens is ever built.
    #[arg(long, default_value_t = 4096, value_parser = at_least_one)]
    pub batch_tokens: usize,
    /// Longest prompt in tokens; longer ones lose their oldest context turns (default: the
    /// model's context length). A limit below what the rubric's own prompt needs is refused.
    #[arg(long, value_parser = at_least_one)]
    pub max_prompt_tokens: Option<usize>,
    /// json rubrics: memory for the keys and values of the items decoded together, in GiB.
    /// Each item's row holds its prompt after the rubric's shared header and its answer: per
    /// token 0.25 MB for an 8B with 8 key heads in f32 (a CPU), half in bf16 (a GPU), 1.6 MB for
    /// llm-jp-3-13b in f32 (40 key heads) — so by default (2 GiB) a 13B decodes one item at a
    /// time and reads all its weights for every token of every item. More rows per step read
    /// the weights once for all of them (up to the items of a batch, `--batch-tokens`). On a
    /// CPU the objects are the same bits whatever fits; on CUDA their scores' last bits can
    /// move with the rows decoded together (docs/rubrics.md, json rubrics).
    #[arg(long = "json-cache-gib", value_name = "GIB", default_value = "2", value_parser = gibibytes)]
    pub json_cache_bytes: usize,
}

impl BatchArgs {
    pub fn run_options(
        &self,
        overwrite: bool,
        greedy_baseline: Option<usize>,
        decoding: Decoding,
    ) -> RunOptions {
        RunOptions {
            batch_tokens: self.batch_tokens,
            max_prompt_tokens: self.max_prompt_tokens,
            overwrite,
            greedy_baseline,
            decoding,
            json_cache_bytes: self.json_cache_bytes,
        }
    }
}

/// Statistics options shared by `meta` and `eval`.
#[derive(Args, Debug, Clone)]
pub struct StatsArgs {
    /// Weight of BERTScore in the combination c + w (b − mean b).
    #[arg(long, default_value_t = 10.0, value_parser = parse_w)]
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
    /// Pairwise results: human preferences given per pair, a JSONL file of
    /// {"context_id", "first", "second", "human": {KEY: "first"|"second"|"tie" or a list, one
    /// per rater}}; keys it has replace the preferences derived from the items' ratings.
    #[arg(long, value_name = "FILE")]
    pub preferences: Option<PathBuf>,
    /// Pairwise results: human ratings of two responses closer than this are a tie.
    #[arg(long, default_value_t = 0.0, value_parser = parse_margin)]
    pub tie_margin: f64,
    /// Breakdown detection: the share of raters a label needs to be the gold label (the DBDC
    /// challenge's `-t`; its default 0 takes the plain majority).
    #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
    pub dbdc_threshold: f64,
    /// Breakdown detection for a judge aspect whose rubric maps no levels onto breakdown labels:
    /// ASPECT:SCORE=LABEL,… (e.g. `coherence:1=O,0=X`); repeat for several aspects.
    #[arg(long, value_name = "ASPECT:MAP", value_parser = crate::meta::parse_aspect_levels)]
    pub breakdown_levels: Vec<(String, LevelLabels)>,
    /// Alternative annotator test: the cost–benefit margin ε, the advantage in wins a rater may
    /// keep over the judge and still be replaced by it (the paper's rule of thumb: 0.1 for crowd
    /// workers, 0.15 for trained annotators, 0.2 for experts).
    #[arg(long, default_value_t = 0.1, value_parser = parse_epsilon)]
    pub alt_test_epsilon: f64,
    /// Alternative annotator test: how an annotation is scored against the other raters'
    /// ratings of the item — `neg-rmse` for ordinal scores (the paper's choice for scales),
    /// `accuracy` for categorical labels (the share of equal ratings).
    #[arg(long, default_value = "neg-rmse", value_parser = parse_alignment)]
    pub alt_test_alignment: Alignment,
}

fn parse_epsilon(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..1.0).contains(&x) => Ok(x),
        _ => Err(format!(
            "`{s}` is not a margin of 0 or more and below 1 (e.g. 0.1)"
        )),
    }
}

fn parse_alignment(s: &str) -> Result<Alignment, String> {
    Alignment::parse(s).ok_or_else(|| format!("`{s}` is not `neg-rmse` or `accuracy`"))
}

fn parse_w(s: &str) -> Result<f64, String> {
    let max = crate::meta::options::MAX_W;
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x.abs() <= max => Ok(x),
        _ => Err(format!(
            "`{s}` is not a number between -{max:e} and {max:e} (past that the judge's share of the combination is below f64's precision)"
        )),
    }
}

fn parse_margin(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a margin of 0 or more")),
    }
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if (0.0..=1.0).contains(&t) => Ok(t),
        _ => Err(format!("`{s}` is not a share between 0 and 1")),
    }
}

fn parse_confidence(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(c) if c > 0.0 && c < 1.0 => Ok(c),
        _ => Err(format!("`{s}` is not a level between 0 and 1 (e.g. 0.95)")),
    }
}

impl StatsArgs {
    /// The meta-evaluation these flags ask for, with `meta`'s own settings.
    pub fn request(&self, half: Option<Half>, accept_unhashed: bool) -> MetaRequest {
        MetaRequest {
            options: self.options(),
            tie_margin: self.tie_margin,
            preferences: self.preferences.clone(),
            half,
            accept_unhashed,
        }
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
            alt_test: AltTestOptions {
                epsilon: self.alt_test_epsilon,
                alignment: self.alt_test_alignment,
                q: AltTestOptions::default().q,
            },
        }
    }
}

/// A count of tokens: a whole number of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("must be a whole number of at least 1, got {s:?}")),
    }
}

/// A memory size in GiB, in bytes (`judge::json_cache_bytes`).
fn gibibytes(s: &str) -> Result<usize, String> {
    let gib = s
        .parse::<f64>()
        .map_err(|_| format!("must be a number of GiB above 0, got {s:?}"))?;
    crate::judge::json_cache_bytes(gib).map_err(|e| e.to_string())
}

/// A temperature (`judge::check_temperature`), checked before any model is loaded.
pub(super) fn temperature(s: &str) -> Result<f64, String> {
    let t = s
        .parse::<f64>()
        .map_err(|_| format!("must be a finite number ≥ 0, got {s:?}"))?;
    crate::judge::check_temperature(t).map_err(|e| e.to_string())
}
