//! What an evaluation is asked to do (`EvalSpec`), its items, and what it did.

use crate::bertscore::run::Against;
use crate::data::Item;
use crate::data::select::{Grouping, Shard, sample_groups};
use crate::judge::JudgeSpec;
use crate::meta::MetaRequest;
use std::path::PathBuf;

/// Everything an evaluation is asked to do.
#[derive(Clone, Debug)]
pub struct EvalSpec {
    /// The judge: its models (none: the default judge), rubric, runtime and run settings
    /// (`run.overwrite` starts the folder's results afresh).
    pub judge: JudgeSpec,
    /// The output folder (a shard writes into its `shard-K-of-N` subfolder).
    pub output: PathBuf,
    /// Evaluate this many whole dialogues (contexts, for a pairwise rubric) drawn with a seed.
    pub sample: Option<Sample>,
    /// Score one share of the dialogues (contexts); merged by `hyoka merge`.
    pub shard: Option<Shard>,
    /// The items' language, for BERTScore's default encoder (default: the rubric's, else ja).
    pub lang: Option<String>,
    /// BERTScore's encoder and settings; None: no BERTScore (and no combination).
    pub bertscore: Option<EncoderChoice>,
    /// Likelihood scorers run beside the judge with its first model (`fed-ja`, a file, …).
    pub likelihood: Vec<String>,
    /// A second route: the items translated and evaluated again.
    pub translate: Option<TranslateSpec>,
    /// Pairwise rubrics: compare each other system with this one only.
    pub baseline: Option<String>,
    /// The meta-evaluation's statistics (its `half` is not used: eval reports every item).
    pub stats: MetaRequest,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub groups: usize,
    pub seed: u64,
}

/// A route's BERTScore encoder.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EncoderChoice {
    /// A folder or Hub id; None: bert_score's encoder for the language.
    pub model: Option<String>,
    pub layer: Option<usize>,
    /// Rescale with the baseline hyoka ships for the encoder and language.
    pub rescale: bool,
    /// What the response is compared with (default: the references when every item has one,
    /// the last context turn otherwise).
    pub against: Option<Against>,
}

/// The translated route.
#[derive(Clone, Debug, Default)]
pub struct TranslateSpec {
    /// Its language (`en`).
    pub to: String,
    /// Its rubric (default: the rubric's counterpart in the language).
    pub rubric: Option<String>,
    /// The translation prompt: built-in name or file (default: translate-FROM-TO).
    pub prompt: Option<String>,
    /// The model that translates (default: the judge's first model).
    pub model: Option<String>,
    /// Its BERTScore encoder and layer (default: bert_score's for the language).
    pub bertscore_model: Option<String>,
    pub layer: Option<usize>,
    /// Keep translations cut at their token limit, marked unfinished.
    pub keep_unfinished: bool,
}

/// The items of an evaluation, and where they were read (so that errors about pairs can name
/// their lines).
pub struct EvalItems {
    pub items: Vec<Item>,
    /// The file and each item's line, when the items are a file's as read.
    pub file: Option<(PathBuf, Vec<usize>)>,
}

/// What a run did.
#[derive(Debug)]
pub struct Evaluated {
    /// The folder written (the shard's, for a shard).
    pub dir: PathBuf,
    /// What failed (items, pairs, translations): a rerun tries them again.
    pub failed: Vec<String>,
}

impl EvalSpec {
    /// `items`, or the sample asked for (whole dialogues or contexts).
    pub(super) fn sampled(&self, items: Vec<Item>, grouping: Grouping) -> Vec<Item> {
        match self.sample {
            Some(s) => sample_groups(items, s.groups, s.seed, grouping),
            None => items,
        }
    }
}
