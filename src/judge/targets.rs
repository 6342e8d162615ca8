//! The valid scores of one aspect as token paths, and their exact probabilities.
//!
//! Each score's path is what the tokenizer makes of prompt + answer prefix + score, cut at the
//! point where the scores' tokenizations part ways ("root"). That covers tokenizers that glue a
//! leading space to the digit and scores of several tokens ("10" = "1" "0"). The probability of
//! a score is the product of its tokens' probabilities along the path; where a score's path
//! is also the beginning of another's ("1" and "10"), stopping there has the probability of
//! not continuing to any valid longer score.

use std::collections::BTreeMap;

/// A node of the score trie that needs the model's next-token distribution.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// Tokens from the root to this node.
    pub path: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScoreTargets {
    pub scores: Vec<i64>,
    /// Tokens shared by all scores' tokenizations, from the end of the shared prompt up to the
    /// root (the answer prefix, as tokenized in context).
    pub stem: Vec<u32>,
    /// Per score, its tokens after the stem (never empty).
    pub paths: Vec<Vec<u32>>,
    /// Nodes whose next-token distribution is needed: the root (empty path) first, then every
    /// node that is a proper prefix of some path.
    pub queries: Vec<Query>,
}

impl ScoreTargets {
    /// `sequences[i]` is the full tokenization for `scores[i]`; `shared` the number of leading
    /// tokens all of them share with the rest of the item (the trunk), which the stem starts after.
    pub fn new(scores: Vec<i64>, sequences: &[Vec<u32>], shared: usize) -> Self {
        assert_eq!(scores.len(), sequences.len());
        let lcp = common_prefix(sequences);
        // Every score keeps at least one token of its own.
        let shortest = sequences.iter().map(Vec::len).min().unwrap_or(0);
        let root = lcp.min(shortest.saturating_sub(1)).max(shared);
        let stem = sequences[0][shared..root].to_vec();
        let paths: Vec<Vec<u32>> = sequences.iter().map(|s| s[root..].to_vec()).collect();
        let mut nodes: Vec<Vec<u32>> = vec![Vec::new()];
        for p in &paths {
            for depth in 1..p.len() {
                let node = p[..depth].to_vec();
                if !nodes.contains(&node) {
                    nodes.push(node);
                }
            }
        }
        ScoreTargets {
            scores,
            stem,
            paths,
            queries: nodes.into_iter().map(|path| Query { path }).collect(),
        }
    }

    /// The tokens whose log-probabilities `distribution` reads (at some query node).
    pub fn tokens(&self) -> impl Iterator<Item = u32> + '_ {
        self.paths.iter().flatten().copied()
    }

    /// Probabilities from `log_prob(q, token)`, the log-softmax over the whole vocabulary at
    /// query node q (in `self.queries` order), read for `tokens()` only.
    /// Returns (normalised distribution over `scores`, mass outside the valid scores).
    pub fn distribution(&self, log_prob: impl Fn(usize, u32) -> f64) -> (Vec<f64>, f64) {
        let index: BTreeMap<&[u32], usize> = self
            .queries
            .iter()
            .enumerate()
            .map(|(i, q)| (q.path.as_slice(), i))
            .collect();
        let lp = |node: &[u32], token: u32| log_prob(index[node], token);
        // log P(stop at node): 1 - sum of the probabilities of its valid continuations.
        let stop = |node: &[u32]| -> f64 {
            let mut next: Vec<u32> = self
                .paths
                .iter()
                .filter(|p| p.len() > node.len() && p.starts_with(node))
                .map(|p| p[node.len()])
                .collect();
            next.sort_unstable();
            next.dedup();
            let cont: f64 = next.iter().map(|&t| lp(node, t).exp()).sum();
            (1.0 - cont).max(0.0).ln()
        };
        let raw: Vec<f64> = self
            .paths
            .iter()
            .map(|p| {
                let mut logp: f64 = (0..p.len()).map(|d| lp(&p[..d], p[d])).sum();
                if index.contains_key(p.as_slice()) {
                    logp += stop(p);
                }
                logp.exp()
            })
            .collect();
        let total: f64 = raw.iter().sum();
        let off_scale = (1.0 - total).clamp(0.0, 1.0);
        let dist = if total > 0.0 {
            raw.iter().map(|p| p / total).collect()
        } else {
            vec![1.0 / raw.len() as f64; raw.len()]
        };
        (dist, off_scale)
    }
}

fn common_prefix(seqs: &[Vec<u32>]) -> usize {
    let first = &seqs[0];
    (0..first.len())
        .take_while(|&i| seqs.iter().all(|s| s.get(i) == Some(&first[i])))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(log_probs: &[Vec<f32>]) -> impl Fn(usize, u32) -> f64 + '_ {
        |q, t| log_probs[q][t as usize] as f64
    }

    fn log_softmax(logits: &[f32]) -> Vec<f32> {
        let m = logits.iter().cloned().fold(f32::MIN, f32::max);
        let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f32>().ln();
        logits.iter().map(|l| l - lse).collect()
    }

    #[test]
    fn single_token_scores_are_a_restricted_softmax() {
        // Prompt [7, 8], scores 0..2 as tokens 10, 11, 12.
        let seqs = vec![vec![7, 8, 10], vec![7, 8, 11], vec![7, 8, 12]];
        let t = ScoreTargets::new(vec![0, 1, 2], &seqs, 1);
        assert_eq!(t.stem, vec![8]);
        assert_eq!(t.queries.len(), 1);
        let mut logits = vec![0f32; 16];
        logits[10] = 2.0;
        logits[11] = 1.0;
        logits[12] = -1.0;
        let (dist, off) = t.distribution(at(&[log_softmax(&logits)]));
        let e = [2f64.exp(), 1f64.exp(), (-1f64).exp()];
        let z: f64 = e.iter().sum();
        for (d, x) in dist.iter().zip(e) {
            assert!((d - x / z).abs() < 1e-6);
        }
        let all: f64 = z + 13.0; // 13 other tokens with logit 0
        assert!((off - (1.0 - z / all)).abs() < 1e-6);
    }

    #[test]
    fn a_score_that_prefixes_another_gets_the_stop_probability() {
        // Scores 1 and 10: "1" = [5], "10" = [5, 6]; the token after "1" decides.
        let seqs = vec![vec![3, 5], vec![3, 5, 6]];
        let t = ScoreTargets::new(vec![1, 10], &seqs, 1);
        assert_eq!(t.paths, vec![vec![5], vec![5, 6]]);
        assert_eq!(
            t.queries.iter().map(|q| q.path.clone()).collect::<Vec<_>>(),
            vec![vec![], vec![5]]
        );
        let mut root = vec![-10f32; 8];
        root[5] = 0.0; // P("1") ≈ 1
        let mut after = vec![-10f32; 8];
        after[6] = 0.0; // P("0" | "1") = 0.5 against …
        after[7] = 0.0; // … anything else (stopping)
        let (dist, _) = t.distribution(at(&[log_softmax(&root), log_softmax(&after)]));
        assert!(
            (dist[0] - 0.5).abs() < 1e-3 && (dist[1] - 0.5).abs() < 1e-3,
            "{dist:?}"
        );
    }

    #[test]
    fn leading_space_merges_move_the_root_back() {
        // "…: " + "1" tokenizes as [9, 20] but "…: " + "2" as [9, 21] where the space token (15)
        // of the bare prompt got merged: the root sits before the merge.
        let seqs = vec![vec![1, 9, 20], vec![1, 9, 21]];
        let t = ScoreTargets::new(vec![1, 2], &seqs, 1);
        assert_eq!(t.stem, vec![9]);
        assert_eq!(t.paths, vec![vec![20], vec![21]]);
    }
}
