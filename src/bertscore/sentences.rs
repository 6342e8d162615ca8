//! The sentences and pairs of a scoring job, and the tokens' weights.

use std::collections::HashMap;

/// The distinct sentences of a scoring job, each tokenized once.
pub struct Sentences {
    pub ids: Vec<Vec<u32>>,
    pub(super) index: HashMap<String, usize>,
}

impl Sentences {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// (candidate, reference) sentence pairs in bert_score's order — each candidate once per
/// reference — and, per item, the range of its pairs.
pub struct Pairs {
    pub pairs: Vec<(usize, usize)>,
    pub items: Vec<std::ops::Range<usize>>,
}

/// Token weights: idf from the references — log((M+1)/(df+1)), log(M+1) for tokens no
/// reference has — or, without idf, 1 for every token and 0 for the special tokens.
#[derive(Clone, Debug)]
pub struct Idf {
    pub(super) weights: HashMap<u32, f32>,
    pub(super) unseen: f32,
}

impl Idf {
    pub fn weight(&self, token: u32) -> f32 {
        self.weights.get(&token).copied().unwrap_or(self.unseen)
    }
}

/// Per pair, whether bert_score's padding floors the candidate's / the reference's token maxima
/// at 0: it matches pairs in input order in batches of `group`, padded to the longest sentence
/// of each side in the batch, and padding cells score 0. From token counts only, over the whole
/// input, so that a resumed run or another batching agrees.
pub fn pad_floors(
    sentences: &Sentences,
    pairs: &[(usize, usize)],
    group: Option<usize>,
) -> Vec<(bool, bool)> {
    let len = |i: usize| sentences.ids[i].len();
    let Some(group) = group.filter(|g| *g > 0) else {
        return vec![(false, false); pairs.len()];
    };
    let mut out = Vec::with_capacity(pairs.len());
    for chunk in pairs.chunks(group) {
        let max_c = chunk.iter().map(|p| len(p.0)).max().unwrap_or(0);
        let max_r = chunk.iter().map(|p| len(p.1)).max().unwrap_or(0);
        out.extend(chunk.iter().map(|&(c, r)| (len(r) < max_r, len(c) < max_c)));
    }
    out
}
