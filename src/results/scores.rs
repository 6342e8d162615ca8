//! A judge's result for one aspect: the distribution over its valid scores.

use serde::Serialize;

/// One aspect's result.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct AspectScore {
    /// The most probable valid score (the lowest one on a tie).
    pub score: i64,
    /// Σ score × probability.
    pub expected: f64,
    /// Probability of each valid score, normalised over the valid scores; keys are the scores.
    pub distribution: serde_json::Map<String, serde_json::Value>,
    /// Probability mass the model put outside the valid scores.
    pub off_scale: f64,
    /// With `--greedy-baseline`: what greedy generation answered, and its regex-parsed score
    /// (null when the text holds no valid score).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub greedy: Option<Greedy>,
}

#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Greedy {
    pub text: String,
    pub score: Option<i64>,
}

impl AspectScore {
    pub fn from_distribution(scores: &[i64], dist: &[f64], off_scale: f64) -> Self {
        let mut best = 0;
        for (i, p) in dist.iter().enumerate() {
            if *p > dist[best] {
                best = i;
            }
        }
        AspectScore {
            score: scores[best],
            expected: scores.iter().zip(dist).map(|(s, p)| *s as f64 * p).sum(),
            distribution: scores
                .iter()
                .zip(dist)
                .map(|(s, p)| (s.to_string(), serde_json::json!(p)))
                .collect(),
            off_scale,
            greedy: None,
        }
    }

    /// Each valid score with its probability, as `distribution` holds them.
    pub fn score_probabilities(&self) -> Vec<(i64, f64)> {
        self.distribution
            .iter()
            .filter_map(|(score, p)| Some((score.parse().ok()?, p.as_f64()?)))
            .collect()
    }

    pub fn probabilities(&self) -> Vec<f64> {
        self.distribution
            .values()
            .map(|v| v.as_f64().unwrap_or(0.0))
            .collect()
    }
}
