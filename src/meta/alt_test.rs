//! The alternative annotator test (Calderon, Reichart & Dror, ACL 2025; their reference
//! implementation is nitaytech/AltTest): can the judge stand in for one of the raters?
//!
//! Each rater is left out in turn. On every item they rated, the judge's annotation and the
//! left-out rater's are each scored by how well they align with the remaining raters' ratings
//! (accuracy: the share of equal ratings; neg-RMSE: minus the root mean squared difference). The
//! judge wins an item when it aligns at least as well; the rater wins it likewise (a tie is a win
//! for both). A one-sided one-sample t-test of the rater-minus-judge win indicators asks whether
//! the rater's advantage is below ε, the cost–benefit margin granted to the judge; the
//! Benjamini–Yekutieli procedure at level q controls the false discovery rate over the raters.
//! The winning rate ω is the share of raters whose hypothesis is rejected (the judge can replace
//! them); the judge passes at ω ≥ 0.5. The advantage probability ρ is the judge's share of wins,
//! averaged over the raters.

use super::chance::{judge_as_ratings, rated};
use super::frame::{Family, Frame};
use super::stats::student_t_sf;

/// How an annotation is scored against the remaining raters' ratings of the same item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Alignment {
    /// The share of the remaining ratings equal to the annotation (the paper's choice for
    /// categorical labels).
    Accuracy,
    /// Minus the root mean squared difference from the remaining ratings (the paper's choice for
    /// ordinal and continuous scores).
    NegRmse,
}

impl Alignment {
    /// As the command line and Python name it.
    pub fn parse(s: &str) -> Option<Alignment> {
        match s {
            "accuracy" => Some(Alignment::Accuracy),
            "neg-rmse" | "neg_rmse" => Some(Alignment::NegRmse),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Alignment::Accuracy => "accuracy",
            Alignment::NegRmse => "neg-rmse",
        }
    }

    /// A quantity that orders annotations as the alignment does (higher aligns better), exact
    /// on ties: the count of equal ratings, or minus the sum of squared differences (the same n
    /// on both sides, so the root and the mean change no order).
    fn order_key(self, annotation: f64, others: &[f64]) -> f64 {
        match self {
            Alignment::Accuracy => others.iter().filter(|o| **o == annotation).count() as f64,
            Alignment::NegRmse => -others.iter().map(|o| (annotation - o).powi(2)).sum::<f64>(),
        }
    }
}

/// The test's settings.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct AltTestOptions {
    /// The cost–benefit margin: the advantage in wins a rater may have over the judge and still
    /// be replaced by it (the paper: 0.1 for crowd workers, 0.15 for trained annotators, 0.2 for
    /// experts).
    pub epsilon: f64,
    pub alignment: Alignment,
    /// The false discovery rate of the Benjamini–Yekutieli procedure.
    pub q: f64,
}

impl Default for AltTestOptions {
    fn default() -> Self {
        AltTestOptions {
            epsilon: 0.1,
            alignment: Alignment::NegRmse,
            q: 0.05,
        }
    }
}

/// A rater needs this many items rated beside the judge and another rater: the t-test leans on
/// the normality of a mean, which the paper trusts from 30 items on.
pub const MIN_ITEMS_PER_RATER: usize = 30;

/// The test of one left-out rater.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RaterTest {
    pub rater: String,
    pub items: usize,
    /// The share of their items where the judge aligns with the other raters at least as well.
    pub judge_wins: f64,
    /// The share where the rater does.
    pub rater_wins: f64,
    /// The one-sided p-value of "the rater's advantage is ε or more"; None when undefined (every
    /// item's difference equal to ε).
    pub p: Option<f64>,
    /// Rejected by the Benjamini–Yekutieli procedure: the judge can replace this rater.
    pub replaced: bool,
}

/// The test over one set of items: each rater's, and what they add up to.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AltTestOutcome {
    /// Items with the judge's annotation and two or more raters.
    pub items: usize,
    /// Each tested rater, in the order they first appear in the items.
    pub per_rater: Vec<RaterTest>,
    /// Raters left out of the test for rating fewer than [`MIN_ITEMS_PER_RATER`] of the items,
    /// with how many they rated.
    pub skipped: Vec<(String, usize)>,
    /// ω: the share of tested raters the judge can replace; None when no rater was tested.
    pub winning_rate: Option<f64>,
    /// ρ: the judge's share of wins, averaged over the tested raters.
    pub advantage_probability: Option<f64>,
}

/// The alternative annotator test of one judge over items: `judge[i]` is the judge's annotation
/// of item i (None: unscored), `ratings[i]` the raters' (rater, rating) pairs of item i. Items
/// need the judge's annotation and two or more raters; raters are tested in the order they first
/// appear.
pub fn alt_test(
    judge: &[Option<f64>],
    ratings: &[Vec<(&str, f64)>],
    options: &AltTestOptions,
) -> AltTestOutcome {
    let kept: Vec<(f64, &[(&str, f64)])> = judge
        .iter()
        .zip(ratings)
        .filter_map(|(j, r)| match (j, r.len() >= 2) {
            (Some(j), true) => Some((*j, r.as_slice())),
            _ => None,
        })
        .collect();
    let mut order: Vec<&str> = Vec::new();
    for (_, r) in &kept {
        for (name, _) in r.iter() {
            if !order.contains(name) {
                order.push(name);
            }
        }
    }
    let (mut raters, mut skipped) = (Vec::new(), Vec::new());
    let mut others = Vec::new();
    for rater in order {
        let (mut judge_wins, mut rater_wins, mut diffs) = (0usize, 0usize, Vec::new());
        for (j, r) in &kept {
            let Some((_, own)) = r.iter().find(|(name, _)| *name == rater) else {
                continue;
            };
            others.clear();
            others.extend(r.iter().filter(|(n, _)| *n != rater).map(|(_, v)| *v));
            let by_judge = options.alignment.order_key(*j, &others);
            let by_rater = options.alignment.order_key(*own, &others);
            let (jw, rw) = (by_judge >= by_rater, by_rater >= by_judge);
            judge_wins += jw as usize;
            rater_wins += rw as usize;
            diffs.push(rw as i8 as f64 - jw as i8 as f64);
        }
        let n = diffs.len();
        if n < MIN_ITEMS_PER_RATER {
            skipped.push((rater.to_string(), n));
            continue;
        }
        raters.push(RaterTest {
            rater: rater.to_string(),
            items: n,
            judge_wins: judge_wins as f64 / n as f64,
            rater_wins: rater_wins as f64 / n as f64,
            p: t_test_less(&diffs, options.epsilon),
            replaced: false,
        });
    }
    let p: Vec<Option<f64>> = raters.iter().map(|r| r.p).collect();
    for i in benjamini_yekutieli(&p, options.q) {
        raters[i].replaced = true;
    }
    let tested = raters.len() as f64;
    let (winning_rate, advantage_probability) = match raters.is_empty() {
        true => (None, None),
        false => (
            Some(raters.iter().filter(|r| r.replaced).count() as f64 / tested),
            Some(raters.iter().map(|r| r.judge_wins).sum::<f64>() / tested),
        ),
    };
    AltTestOutcome {
        items: kept.len(),
        per_rater: raters,
        skipped,
        winning_rate,
        advantage_probability,
    }
}

/// The one-sided one-sample t-test of "the mean of `x` is `mu` or more" against "less" (scipy's
/// `ttest_1samp(x, mu, alternative='less')`): P(T ≤ t) with n − 1 degrees of freedom. Without
/// spread t is ±∞ (p 0 or 1), or undefined when every value is `mu`.
pub fn t_test_less(x: &[f64], mu: f64) -> Option<f64> {
    let n = x.len() as f64;
    if x.len() < 2 {
        return None;
    }
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let t = (mean - mu) / (var / n).sqrt();
    if t.is_nan() {
        return None;
    }
    let upper = student_t_sf(t.abs(), n - 1.0);
    Some(if t < 0.0 { upper } else { 1.0 - upper })
}

/// The Benjamini–Yekutieli step-up procedure at false discovery rate `q`: the indices of the
/// rejected hypotheses (an undefined p-value is never rejected).
pub fn benjamini_yekutieli(p: &[Option<f64>], q: f64) -> Vec<usize> {
    let m = p.len();
    let harmonic: f64 = (1..=m).map(|i| 1.0 / i as f64).sum();
    let mut sorted: Vec<(usize, f64)> = (p.iter().enumerate())
        .filter_map(|(i, p)| p.map(|p| (i, p)))
        .collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
    let last = (sorted.iter().enumerate())
        .filter(|(rank, (_, p))| *p <= (rank + 1) as f64 / m as f64 * (q / harmonic))
        .map(|(rank, _)| rank)
        .next_back();
    match last {
        Some(last) => sorted[..=last].iter().map(|(i, _)| *i).collect(),
        None => Vec::new(),
    }
}

/// The test for one judge column and one human aspect, as the summary reports it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AltTest {
    /// The judge's most probable score, as the tables name it.
    pub column: String,
    pub human: String,
    /// How a score became an annotation: `levels` (the rubric's) or `scores` (the number itself).
    pub judge_values: &'static str,
    #[serde(flatten)]
    pub options: AltTestOptions,
    #[serde(flatten)]
    pub outcome: AltTestOutcome,
    /// ω ≥ 0.5; None when no rater could be tested.
    pub passed: Option<bool>,
    /// What limits the reading: raters named by list position, fewer than three raters, raters
    /// with too few items, no rater tested.
    pub cautions: Vec<String>,
}

/// The test of every judge aspect's most probable score against the raters of each human
/// aspect it is compared with (items with per-rater ratings only).
pub fn alt_tests(frame: &Frame, options: &AltTestOptions) -> Vec<AltTest> {
    let mut out = Vec::new();
    for column in (frame.columns.iter()).filter(|c| c.family == Family::JudgeArgmax) {
        let Some(aspect) = &column.aspect else {
            continue;
        };
        let (judged, judge_values) = judge_as_ratings(frame, column, aspect);
        for key in (frame.human_keys.iter()).filter(|k| frame.pairs_with(column, k)) {
            let rated = rated(&frame.items, key);
            if rated.iter().all(Option::is_none) {
                continue;
            }
            let by_slot = (frame.items.iter())
                .zip(&rated)
                .any(|(i, r)| r.as_ref().is_some_and(|(_, names)| *names != i.raters));
            let ratings: Vec<Vec<(&str, f64)>> = (rated.iter())
                .map(|r| match r {
                    Some((values, names)) => (names.iter().map(String::as_str))
                        .zip(values.iter().copied())
                        .collect(),
                    None => Vec::new(),
                })
                .collect();
            let outcome = alt_test(&judged, &ratings, options);
            let cautions = cautions(&outcome, by_slot);
            out.push(AltTest {
                column: frame.row_label(column),
                human: key.clone(),
                judge_values,
                options: *options,
                passed: outcome.winning_rate.map(|w| w >= 0.5),
                outcome,
                cautions,
            });
        }
    }
    out
}

fn cautions(outcome: &AltTestOutcome, by_slot: bool) -> Vec<String> {
    let mut c = Vec::new();
    if by_slot {
        c.push(
            "the items name no raters (`raters`): each list position stands for one rater, right \
             only if one person gave every rating in that position"
                .to_string(),
        );
    }
    let tested = outcome.per_rater.len();
    if tested == 0 {
        c.push(format!(
            "no rater rated {MIN_ITEMS_PER_RATER} or more of the {} items that have the judge's \
             score and two or more raters: the data do not support the test",
            outcome.items
        ));
    } else if tested + outcome.skipped.len() < 3 {
        c.push(
            "fewer than three raters: the remaining raters are one person, no consensus (the \
             paper asks for three or more)"
                .to_string(),
        );
    }
    if !outcome.skipped.is_empty() && tested > 0 {
        c.push(format!(
            "{} rater(s) left out for rating fewer than {MIN_ITEMS_PER_RATER} of the items",
            outcome.skipped.len()
        ));
    }
    c
}
