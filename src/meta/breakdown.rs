//! The Dialogue Breakdown Detection Challenge's metrics (DBDC3): each system turn's predicted
//! O/T/X distribution against its raters' label distribution, as the challenge's evaluation
//! script (`prog/eval/eval.py`) computes them — JS divergence (bits) and mean squared error over
//! (O, T, X), (O, T+X) and (O+T, X); accuracy against the majority label under a threshold;
//! precision, recall and F-measure for X (strict) and for T+X (lenient gold labels).
//!
//! O, T and X stand for "not a breakdown", "possible breakdown" and "breakdown"; the DBDC3
//! importer writes a rater's label as the number `data::dbdc3::O`, `T` or `X`.

use crate::data::dbdc3;
use serde::Serialize;

/// One of the challenge's three labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Label {
    O,
    T,
    X,
}

impl Label {
    pub const ALL: [Label; 3] = [Label::O, Label::T, Label::X];

    /// The label a human rating value stands for (the DBDC3 importer's numbers).
    pub fn of_rating(value: f64) -> Option<Label> {
        if value == dbdc3::O {
            Some(Label::O)
        } else if value == dbdc3::T {
            Some(Label::T)
        } else if value == dbdc3::X {
            Some(Label::X)
        } else {
            None
        }
    }

    pub fn index(self) -> usize {
        match self {
            Label::O => 0,
            Label::T => 1,
            Label::X => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Label::O => "O",
            Label::T => "T",
            Label::X => "X",
        }
    }
}

/// Probabilities of O, T and X, in that order.
pub type Distribution = [f64; 3];

/// The raters' distribution of one turn from its per-rater ratings; None when a rating is not
/// one of the three labels' values or there are none.
pub fn raters_distribution(ratings: &[f64]) -> Option<Distribution> {
    if ratings.is_empty() {
        return None;
    }
    let mut counts = [0usize; 3];
    for r in ratings {
        counts[Label::of_rating(*r)?.index()] += 1;
    }
    let n = ratings.len() as f64;
    Some(counts.map(|c| c as f64 / n))
}

/// The majority label under a threshold, with the script's order of ties (O, then T, then X)
/// and O when no label reaches the threshold. With threshold 0 it is also how a predicted
/// distribution is turned into a predicted label.
pub fn majority(p: &Distribution, threshold: f64) -> Label {
    let [o, t, x] = *p;
    if o >= t && o >= x && o >= threshold {
        Label::O
    } else if t >= o && t >= x && t >= threshold {
        Label::T
    } else if x >= t && x >= o && x >= threshold {
        Label::X
    } else {
        Label::O
    }
}

/// The lenient gold label: is T+X the majority (and at least the threshold)?
fn lenient_breakdown(p: &Distribution, threshold: f64) -> bool {
    let (o, tx) = (p[0], p[1] + p[2]);
    if o >= tx && o >= threshold {
        false
    } else {
        tx >= o && tx >= threshold
    }
}

/// Kullback-Leibler divergence in bits over the terms where `p` is positive.
fn kld(p: &[f64], q: &[f64]) -> f64 {
    p.iter()
        .zip(q)
        .filter(|(p, _)| **p > 0.0)
        .map(|(p, q)| p * (p / q).log2())
        .sum()
}

/// Jensen-Shannon divergence in bits.
pub fn jsd(p: &[f64], q: &[f64]) -> f64 {
    let m: Vec<f64> = p.iter().zip(q).map(|(p, q)| (p + q) / 2.0).collect();
    (kld(p, &m) + kld(q, &m)) / 2.0
}

fn mse(p: &[f64], q: &[f64]) -> f64 {
    p.iter().zip(q).map(|(p, q)| (p - q).powi(2)).sum::<f64>() / p.len() as f64
}

/// (O, T+X) and (O+T, X) views of a distribution.
fn o_tx(p: &Distribution) -> [f64; 2] {
    [p[0], p[1] + p[2]]
}

fn ot_x(p: &Distribution) -> [f64; 2] {
    [p[0] + p[1], p[2]]
}

/// The challenge's figures over a set of turns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BreakdownMetrics {
    pub turns: usize,
    /// How many turns' gold (majority) label is O, T and X.
    pub gold: [usize; 3],
    pub accuracy: f64,
    pub precision_x: f64,
    pub recall_x: f64,
    pub f_x: f64,
    pub precision_tx: f64,
    pub recall_tx: f64,
    pub f_tx: f64,
    pub jsd_o_t_x: f64,
    pub jsd_o_tx: f64,
    pub jsd_ot_x: f64,
    pub mse_o_t_x: f64,
    pub mse_o_tx: f64,
    pub mse_ot_x: f64,
}

impl BreakdownMetrics {
    /// The titles of `cells`, as tables show them.
    pub const COLUMNS: [&'static str; 9] = [
        "JSD O,T,X",
        "JSD O,T+X",
        "JSD O+T,X",
        "MSE O,T,X",
        "MSE O,T+X",
        "MSE O+T,X",
        "accuracy",
        "P/R/F (X)",
        "P/R/F (T+X)",
    ];

    /// The figures as table cells: divergences, errors and accuracy to 4 decimals, P/R/F to 3.
    pub fn cells(&self) -> [String; 9] {
        let prf = |p: f64, r: f64, f: f64| format!("{p:.3}/{r:.3}/{f:.3}");
        [
            format!("{:.4}", self.jsd_o_t_x),
            format!("{:.4}", self.jsd_o_tx),
            format!("{:.4}", self.jsd_ot_x),
            format!("{:.4}", self.mse_o_t_x),
            format!("{:.4}", self.mse_o_tx),
            format!("{:.4}", self.mse_ot_x),
            format!("{:.4}", self.accuracy),
            prf(self.precision_x, self.recall_x, self.f_x),
            prf(self.precision_tx, self.recall_tx, self.f_tx),
        ]
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if a > 0 && b > 0 {
        a as f64 / b as f64
    } else {
        0.0
    }
}

fn f_measure(p: f64, r: f64) -> f64 {
    if p > 0.0 && r > 0.0 {
        2.0 * p * r / (p + r)
    } else {
        0.0
    }
}

/// The metrics of `predicted` against `gold` (the raters' distributions), turn by turn; each
/// predicted label is the predicted distribution's majority at threshold 0. None for no turns.
pub fn evaluate(
    predicted: &[Distribution],
    gold: &[Distribution],
    threshold: f64,
) -> Option<BreakdownMetrics> {
    assert_eq!(predicted.len(), gold.len(), "one prediction per turn");
    let n = predicted.len();
    if n == 0 {
        return None;
    }
    let mut gold_counts = [0usize; 3];
    let (mut correct, mut pred_x, mut pred_x_gold_x, mut gold_x) = (0, 0, 0, 0);
    let (mut pred_tx, mut pred_tx_gold_tx, mut gold_tx) = (0, 0, 0);
    let mut sums = [0.0f64; 6];
    for (p, g) in predicted.iter().zip(gold) {
        let answer = majority(g, threshold);
        let answer_breakdown = lenient_breakdown(g, threshold);
        let label = majority(p, 0.0);
        gold_counts[answer.index()] += 1;
        correct += usize::from(label == answer);
        pred_x += usize::from(label == Label::X);
        gold_x += usize::from(answer == Label::X);
        pred_x_gold_x += usize::from(label == Label::X && answer == Label::X);
        let says_breakdown = label != Label::O;
        pred_tx += usize::from(says_breakdown);
        gold_tx += usize::from(answer_breakdown);
        pred_tx_gold_tx += usize::from(says_breakdown && answer_breakdown);
        sums[0] += jsd(g, p);
        sums[1] += jsd(&o_tx(g), &o_tx(p));
        sums[2] += jsd(&ot_x(g), &ot_x(p));
        sums[3] += mse(g, p);
        sums[4] += mse(&o_tx(g), &o_tx(p));
        sums[5] += mse(&ot_x(g), &ot_x(p));
    }
    let mean = sums.map(|s| s / n as f64);
    let (precision_x, recall_x) = (ratio(pred_x_gold_x, pred_x), ratio(pred_x_gold_x, gold_x));
    let (precision_tx, recall_tx) = (
        ratio(pred_tx_gold_tx, pred_tx),
        ratio(pred_tx_gold_tx, gold_tx),
    );
    Some(BreakdownMetrics {
        turns: n,
        gold: gold_counts,
        accuracy: correct as f64 / n as f64,
        precision_x,
        recall_x,
        f_x: f_measure(precision_x, recall_x),
        precision_tx,
        recall_tx,
        f_tx: f_measure(precision_tx, recall_tx),
        jsd_o_t_x: mean[0],
        jsd_o_tx: mean[1],
        jsd_ot_x: mean[2],
        mse_o_t_x: mean[3],
        mse_o_tx: mean[4],
        mse_ot_x: mean[5],
    })
}

/// How a judge aspect's scores map onto the three labels: the label of each score, in the
/// order of the aspect's scale. Scores without a label get no probability mass in O/T/X (a
/// rubric maps all of its levels or none).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelLabels {
    pub levels: Vec<(i64, Label)>,
}

impl LevelLabels {
    /// From (score, human rating value) pairs; None when a value is not a label's.
    pub fn from_ratings(levels: &[(i64, f64)]) -> Option<LevelLabels> {
        let levels = levels
            .iter()
            .map(|(s, v)| Some((*s, Label::of_rating(*v)?)))
            .collect::<Option<Vec<_>>>()?;
        (!levels.is_empty()).then_some(LevelLabels { levels })
    }

    /// An aspect's map: its rubric's (score, rating) pairs, or `given` when the rubric has none.
    pub fn of_aspect(rubric: &[(i64, f64)], given: Option<&LevelLabels>) -> Option<LevelLabels> {
        if rubric.is_empty() {
            given.cloned()
        } else {
            LevelLabels::from_ratings(rubric)
        }
    }

    /// Parse `2=O,1=T,0=X` (scores and the labels they mean).
    pub fn parse(spec: &str) -> Result<LevelLabels, String> {
        let mut levels = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (score, label) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not SCORE=LABEL (e.g. 2=O)"))?;
            let score: i64 = score
                .trim()
                .parse()
                .map_err(|_| format!("`{score}` in `{part}` is not an integer score"))?;
            let label = match label.trim() {
                "O" => Label::O,
                "T" => Label::T,
                "X" => Label::X,
                other => return Err(format!("`{other}` in `{part}` is not O, T or X")),
            };
            if levels.iter().any(|(s, _)| *s == score) {
                return Err(format!("score {score} is given twice"));
            }
            levels.push((score, label));
        }
        if levels.is_empty() {
            return Err("no SCORE=LABEL pairs (e.g. 2=O,1=T,0=X)".into());
        }
        Ok(LevelLabels { levels })
    }

    /// The O/T/X distribution of a judge distribution given as (score, probability) pairs.
    pub fn distribution(&self, scores: &[(i64, f64)]) -> Distribution {
        let mut d = [0.0; 3];
        for (score, p) in scores {
            if let Some((_, label)) = self.levels.iter().find(|(s, _)| s == score) {
                d[label.index()] += p;
            }
        }
        d
    }

    /// As `2=O,1=T,0=X`.
    pub fn spec(&self) -> String {
        self.levels
            .iter()
            .map(|(s, l)| format!("{s}={}", l.name()))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_follows_the_scripts_order_of_ties_and_threshold() {
        assert_eq!(majority(&[0.4, 0.4, 0.2], 0.0), Label::O);
        assert_eq!(majority(&[0.2, 0.4, 0.4], 0.0), Label::T);
        assert_eq!(majority(&[0.2, 0.3, 0.5], 0.0), Label::X);
        // Nothing reaches the threshold: O.
        assert_eq!(majority(&[0.2, 0.3, 0.5], 0.6), Label::O);
        assert!(lenient_breakdown(&[0.4, 0.3, 0.3], 0.0));
        assert!(!lenient_breakdown(&[0.5, 0.2, 0.3], 0.0));
        assert!(!lenient_breakdown(&[0.6, 0.2, 0.2], 0.0));
    }

    #[test]
    fn level_labels_parse_and_refuse_what_is_not_a_mapping() {
        let m = LevelLabels::parse("2=O, 1=T,0=X").unwrap();
        assert_eq!(
            m.distribution(&[(0, 0.5), (1, 0.2), (2, 0.3)]),
            [0.3, 0.2, 0.5]
        );
        assert_eq!(m.spec(), "2=O,1=T,0=X");
        for bad in ["", "2=Y", "two=O", "2=O,2=X", "2"] {
            assert!(LevelLabels::parse(bad).is_err(), "{bad}");
        }
    }
}
