//! A likelihood scorer run as a scorer of the results layer: items laid out, planned into
//! batches by tokens, their log-probabilities read and aggregated per aspect.

use super::LikelihoodError;
use super::layout::{ItemRows, Sequence, layout};
use super::logprobs::log_probs;
use super::scorer::{LikelihoodScorer, Method};
use crate::data::Item;
use crate::model::LoadedModel;
use crate::model::plan_batches;
use crate::results::runner::{Outcome, ScoreTask};
use crate::results::{
    AspectLikelihood, AspectTargets, Body, LikelihoodRecord, Provenance, RubricId, Task,
};
use serde_json::{Map, json};
use std::collections::HashMap;

/// How items are batched (it changes no number: an item's are the same in any batch).
#[derive(Clone, Copy, Debug)]
pub struct LikelihoodOptions {
    /// Padded tokens per forward pass (rows × longest row).
    pub batch_tokens: usize,
}

impl Default for LikelihoodOptions {
    fn default() -> Self {
        LikelihoodOptions { batch_tokens: 4096 }
    }
}

/// Scores items with one model and one likelihood scorer.
pub struct LikelihoodRun<'m> {
    pub model: &'m LoadedModel,
    pub scorer: &'m LikelihoodScorer,
    pub scorer_source: String,
    pub opts: LikelihoodOptions,
    layouts: HashMap<usize, Result<ItemRows, String>>,
}

impl<'m> LikelihoodRun<'m> {
    pub fn new(
        model: &'m LoadedModel,
        scorer: &'m LikelihoodScorer,
        scorer_source: String,
        opts: LikelihoodOptions,
    ) -> Self {
        LikelihoodRun {
            model,
            scorer,
            scorer_source,
            opts,
            layouts: HashMap::new(),
        }
    }
}

/// Per aspect, its score from the log-probabilities of its sequences' tokens: FED's mean of the
/// positive follow-ups minus the mean of the negative ones (each follow-up its mean per token;
/// an empty list counts 0, as FED's own code), GPTScore's mean per token of the response.
pub fn aggregate(
    scorer: &LikelihoodScorer,
    sequences: &[Sequence],
    log_probs: &[Vec<f64>],
) -> Vec<(String, AspectLikelihood)> {
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    scorer
        .aspects
        .iter()
        .enumerate()
        .map(|(a, aspect)| {
            let (mut positive, mut negative, mut tokens) = (Vec::new(), Vec::new(), 0);
            for (s, lp) in sequences
                .iter()
                .zip(log_probs)
                .filter(|(s, _)| s.aspect == a)
            {
                tokens += lp.len();
                match s.positive {
                    true => positive.push(mean(lp)),
                    false => negative.push(mean(lp)),
                }
            }
            let score = match scorer.method {
                Method::FollowUps => mean(&positive) - mean(&negative),
                Method::Response => mean(&positive),
            };
            let result = AspectLikelihood {
                score,
                positive,
                negative,
                tokens,
            };
            (aspect.key.clone(), result)
        })
        .collect()
}

impl ScoreTask for LikelihoodRun<'_> {
    type Error = LikelihoodError;
    type Unit = Item;

    fn provenance(&self) -> Provenance {
        let mut settings = Map::new();
        settings.insert("method".into(), json!(self.scorer.method));
        self.model.settings().record(false, &mut settings);
        let rubric = RubricId {
            name: self.scorer.name.clone(),
            source: self.scorer_source.clone(),
            hash: self.scorer.hash(),
            aspects: (self.scorer.aspects.iter())
                .map(|a| AspectTargets {
                    key: a.key.clone(),
                    human: a.human.clone(),
                    levels: Vec::new(),
                })
                .collect(),
        };
        Provenance::of_models(
            Task::Likelihood,
            Some(rubric),
            std::slice::from_ref(self.model),
            settings,
        )
    }

    fn plan(&mut self, items: &[Item], todo: &[usize]) -> Result<Vec<Vec<usize>>, LikelihoodError> {
        let max = self.model.transformer.cfg.max_position;
        let mut ready = Vec::new();
        let mut chunks = Vec::new();
        for &i in todo {
            let laid = layout(self.scorer, &self.model.tokenizer, &items[i], max);
            match &laid {
                Ok(_) => ready.push(i),
                Err(_) => chunks.push(vec![i]),
            }
            self.layouts.insert(i, laid);
        }
        let lens: Vec<usize> = ready
            .iter()
            .map(|i| self.layouts[i].as_ref().map_or(1, ItemRows::tokens))
            .collect();
        chunks.extend(
            plan_batches(&lens, self.opts.batch_tokens)
                .into_iter()
                .map(|b| b.into_iter().map(|k| ready[k]).collect()),
        );
        Ok(chunks)
    }

    fn score(&mut self, _: &[Item], chunk: &[usize]) -> Result<Vec<Outcome>, LikelihoodError> {
        let rows: Vec<&ItemRows> = chunk
            .iter()
            .filter_map(|i| self.layouts[i].as_ref().ok())
            .collect();
        let mut read = if rows.is_empty() {
            Vec::new()
        } else {
            log_probs(&self.model.transformer, &rows)?
        }
        .into_iter();
        let mut out = Vec::with_capacity(chunk.len());
        for i in chunk {
            out.push(match &self.layouts[i] {
                Err(why) => Outcome::Failed(why.clone()),
                Ok(rows) => {
                    let lps = read.next().expect("one reading per laid-out item");
                    Outcome::Scored(Body::Likelihood(LikelihoodRecord {
                        scores: aggregate(self.scorer, &rows.sequences, &lps),
                        dropped_turns: rows.dropped_turns,
                    }))
                }
            });
        }
        for i in chunk {
            self.layouts.remove(i);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(aspect: usize, positive: bool) -> Sequence {
        Sequence {
            aspect,
            positive,
            prefix: vec![1],
            continuation: vec![2],
        }
    }

    /// FED's sign and aggregation by hand: each follow-up its mean per token, positive mean minus
    /// negative mean, an empty side 0 (higher is better); GPTScore the response's mean.
    #[test]
    fn fed_and_gptscore_aggregate_as_by_hand() {
        let fed = "name = \"x\"\nmethod = \"follow-ups\"\nprefix = \"{{ response.text }}\"\n\
            [[aspects]]\nkey = \"a\"\npositive = [\"p1\", \"p2\"]\nnegative = [\"n1\"]\n\
            [[aspects]]\nkey = \"b\"\nnegative = [\"n1\", \"n2\"]\n";
        let fed = LikelihoodScorer::from_toml(fed, "x.toml").unwrap();
        let seqs = [
            seq(0, true),
            seq(0, true),
            seq(0, false),
            seq(1, false),
            seq(1, false),
        ];
        let lps = [
            vec![-1.0, -3.0],       // mean -2
            vec![-4.0],             // -4
            vec![-6.0, -6.0, -9.0], // -7
            vec![-2.0],             // -2
            vec![-5.0, -3.0],       // -4
        ];
        let out = aggregate(&fed, &seqs, &lps);
        assert_eq!(out[0].0, "a");
        // (-2 + -4) / 2 - (-7) = 4: the negative follow-ups are less likely, so a good response.
        assert_eq!(out[0].1.score, 4.0);
        assert_eq!(out[0].1.positive, [-2.0, -4.0]);
        assert_eq!(out[0].1.negative, [-7.0]);
        assert_eq!(out[0].1.tokens, 6);
        // No positive follow-ups: 0 - (-3) = 3.
        assert_eq!(out[1].1.score, 3.0);
        let gpt = "name = \"x\"\nmethod = \"response\"\nprefix = \"{{ response.text }}\"\n\
            [[aspects]]\nkey = \"a\"\ninstruction = \"i\"\n";
        let gpt = LikelihoodScorer::from_toml(gpt, "x.toml").unwrap();
        let out = aggregate(&gpt, &[seq(0, true)], &[vec![-1.0, -2.0, -6.0]]);
        assert_eq!(out[0].1.score, -3.0);
    }
}
