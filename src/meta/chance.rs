//! Chance-corrected agreement beside the correlations: Cohen's κ (unweighted, and
//! quadratic-weighted for ordinal scales) of the judge's most probable score with each rater and
//! with the raters' majority, and Krippendorff's α (nominal and interval) among the raters and
//! with the judge added as one more rater. A judge's score counts as the rating its rubric's
//! level stands for (`levels`: breakdown3-ja's 2 is O, 1.0), else as the number itself.

use super::frame::{Column, Family, Frame};
use crate::data::{HumanRating, Item};
use std::collections::BTreeMap;

/// κ's disagreement weights: every disagreement alike, or the squared distance between the
/// categories' places in their order (scikit-learn's `weights="quadratic"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    None,
    Quadratic,
}

/// α's distance between two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    Nominal,
    Interval,
}

/// The categories of `values`, in order.
fn categories<'a>(values: impl Iterator<Item = &'a f64>) -> Vec<f64> {
    let mut c: Vec<f64> = values.copied().collect();
    c.sort_by(f64::total_cmp);
    c.dedup();
    c
}

/// Cohen's κ of two raters' labels of the same units, as scikit-learn's `cohen_kappa_score`
/// computes it (the categories those labels use, in the order of their values). None when
/// undefined (no unit, or chance alone explains every agreement: one category).
pub fn cohen_kappa(a: &[f64], b: &[f64], weights: Weights) -> Option<f64> {
    if a.is_empty() || a.len() != b.len() {
        return None;
    }
    let cats = categories(a.iter().chain(b));
    let k = cats.len();
    let at = |x: f64| cats.partition_point(|c| *c < x);
    let mut observed = vec![0.0; k * k];
    let (mut rows, mut cols) = (vec![0.0; k], vec![0.0; k]);
    for (x, y) in a.iter().zip(b) {
        let (i, j) = (at(*x), at(*y));
        observed[i * k + j] += 1.0;
        rows[i] += 1.0;
        cols[j] += 1.0;
    }
    let n = a.len() as f64;
    let (mut disagreed, mut expected) = (0.0, 0.0);
    for i in 0..k {
        for j in 0..k {
            let w = match weights {
                Weights::None => f64::from(u8::from(i != j)),
                Weights::Quadratic => (i as f64 - j as f64).powi(2),
            };
            disagreed += w * observed[i * k + j];
            expected += w * rows[i] * cols[j] / n;
        }
    }
    (expected > 0.0).then(|| 1.0 - disagreed / expected)
}

/// Krippendorff's α over units each holding the values its raters gave (a unit with fewer than
/// two is not pairable and left out), as the `krippendorff` package computes it. None when
/// undefined (fewer than two pairable values, or no variation at all).
pub fn krippendorff_alpha(units: &[Vec<f64>], metric: Metric) -> Option<f64> {
    // Σ over ordered pairs (i ≠ j) of the values of a set of their distances.
    let pair_sum = |values: &[f64]| -> f64 {
        let m = values.len() as f64;
        match metric {
            Metric::Nominal => {
                let mut counts: BTreeMap<u64, f64> = BTreeMap::new();
                for v in values {
                    *counts.entry(v.to_bits()).or_default() += 1.0;
                }
                counts.values().map(|c| c * (m - c)).sum()
            }
            Metric::Interval => {
                let (s, s2) = values
                    .iter()
                    .fold((0.0, 0.0), |(s, s2), v| (s + v, s2 + v * v));
                2.0 * m * s2 - 2.0 * s * s
            }
        }
    };
    let pairable: Vec<&Vec<f64>> = units.iter().filter(|u| u.len() >= 2).collect();
    let all: Vec<f64> = pairable.iter().flat_map(|u| u.iter().copied()).collect();
    let n = all.len() as f64;
    if all.len() < 2 {
        return None;
    }
    let within: f64 = pairable
        .iter()
        .map(|u| pair_sum(u) / (u.len() as f64 - 1.0))
        .sum::<f64>()
        / n;
    let between = pair_sum(&all) / (n * (n - 1.0));
    (between > 0.0).then(|| 1.0 - within / between)
}

/// The chance-corrected agreement of one judge column with one human aspect's raters.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ChanceAgreement {
    /// The judge's most probable score, as the tables name it.
    pub column: String,
    pub human: String,
    /// How a score became a rating: `levels` (the rubric's) or `scores` (the number itself).
    pub judge_values: &'static str,
    /// Items with the judge's score and two or more raters' ratings.
    pub items: usize,
    /// κ with each rater over the items they rated, averaged over the raters where it is defined.
    pub kappa: Option<f64>,
    pub weighted_kappa: Option<f64>,
    pub raters: usize,
    /// κ with the raters' majority (the one most frequent rating), over the items that have one.
    pub kappa_majority: Option<f64>,
    pub weighted_kappa_majority: Option<f64>,
    pub majority_items: usize,
    /// α among the raters with the judge as one more rater.
    pub alpha_nominal_with_judge: Option<f64>,
    pub alpha_interval_with_judge: Option<f64>,
}

/// Each item's per-rater ratings of `key`, and the raters' names (ids, or list positions when
/// the items name no rater for every rating).
pub(super) fn rated<'a>(items: &'a [Item], key: &str) -> Vec<Option<(&'a [f64], Vec<String>)>> {
    let by_ids = items.iter().all(|i| match i.human.get(key) {
        Some(HumanRating::PerRater(v)) => i.raters.len() == v.len(),
        _ => true,
    });
    items
        .iter()
        .map(|i| match i.human.get(key) {
            Some(HumanRating::PerRater(v)) if v.len() >= 2 => {
                let names = match by_ids {
                    true => i.raters.clone(),
                    false => (0..v.len()).map(|s| format!("#{s}")).collect(),
                };
                Some((v.as_slice(), names))
            }
            _ => None,
        })
        .collect()
}

/// α among the raters of `key` (nominal, interval): None without per-rater ratings.
pub fn raters_alpha(items: &[Item], key: &str) -> (Option<f64>, Option<f64>) {
    let units: Vec<Vec<f64>> = rated(items, key)
        .into_iter()
        .flatten()
        .map(|(v, _)| v.to_vec())
        .collect();
    (
        krippendorff_alpha(&units, Metric::Nominal),
        krippendorff_alpha(&units, Metric::Interval),
    )
}

/// The one most frequent value, if one is more frequent than every other.
fn majority(values: &[f64]) -> Option<f64> {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v.to_bits()).or_default() += 1;
    }
    let mut ranked: Vec<(usize, u64)> = counts.into_iter().map(|(v, c)| (c, v)).collect();
    ranked.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
    match ranked.as_slice() {
        [(_, v)] => Some(f64::from_bits(*v)),
        [(c1, v), (c2, _), ..] if c1 > c2 => Some(f64::from_bits(*v)),
        _ => None,
    }
}

/// The judge column's score of each item as a rating: the value its rubric's level stands for,
/// or the score itself when the rubric maps no levels (said by the second value: `levels` or
/// `scores`). None where the item is unscored or its score is no level of the rubric.
pub(super) fn judge_as_ratings(
    frame: &Frame,
    column: &Column,
    aspect: &str,
) -> (Vec<Option<f64>>, &'static str) {
    let levels = frame
        .distributions
        .iter()
        .find(|d| d.aspect == aspect && d.run == column.run)
        .map(|d| d.levels.clone())
        .unwrap_or_default();
    let as_rating = |score: f64| -> Option<f64> {
        if levels.is_empty() {
            return Some(score);
        }
        (levels.iter())
            .find(|(s, _)| *s as f64 == score)
            .map(|(_, h)| *h)
    };
    let values = column
        .values
        .iter()
        .map(|v| v.and_then(as_rating))
        .collect();
    (
        values,
        if levels.is_empty() {
            "scores"
        } else {
            "levels"
        },
    )
}

/// κ and α of every judge aspect's most probable score with the raters of each human aspect it
/// is compared with (items with per-rater ratings only).
pub fn chance_agreement(frame: &Frame) -> Vec<ChanceAgreement> {
    let mut out = Vec::new();
    for column in frame
        .columns
        .iter()
        .filter(|c| c.family == Family::JudgeArgmax)
    {
        let Some(aspect) = &column.aspect else {
            continue;
        };
        let (judged, judge_values) = judge_as_ratings(frame, column, aspect);
        for key in frame
            .human_keys
            .iter()
            .filter(|k| frame.pairs_with(column, k))
        {
            let rated = rated(&frame.items, key);
            let mut per_rater: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
            let (mut maj_judge, mut maj_human) = (Vec::new(), Vec::new());
            let mut units = Vec::new();
            for (value, rated) in judged.iter().zip(&rated) {
                let (Some(judge), Some((ratings, names))) = (value, rated.as_ref()) else {
                    continue;
                };
                for (r, name) in ratings.iter().zip(names) {
                    let e = per_rater.entry(name.as_str()).or_default();
                    e.0.push(*judge);
                    e.1.push(*r);
                }
                if let Some(m) = majority(ratings) {
                    maj_judge.push(*judge);
                    maj_human.push(m);
                }
                let mut unit = ratings.to_vec();
                unit.push(*judge);
                units.push(unit);
            }
            if units.is_empty() {
                continue;
            }
            let mean_over_raters = |weights| {
                let ks: Vec<f64> = (per_rater.values())
                    .filter_map(|(j, h)| cohen_kappa(j, h, weights))
                    .collect();
                (
                    (!ks.is_empty()).then(|| ks.iter().sum::<f64>() / ks.len() as f64),
                    ks.len(),
                )
            };
            let (kappa, raters) = mean_over_raters(Weights::None);
            let (weighted_kappa, _) = mean_over_raters(Weights::Quadratic);
            out.push(ChanceAgreement {
                column: frame.row_label(column),
                human: key.clone(),
                judge_values,
                items: units.len(),
                kappa,
                weighted_kappa,
                raters,
                kappa_majority: cohen_kappa(&maj_judge, &maj_human, Weights::None),
                weighted_kappa_majority: cohen_kappa(&maj_judge, &maj_human, Weights::Quadratic),
                majority_items: maj_judge.len(),
                alpha_nominal_with_judge: krippendorff_alpha(&units, Metric::Nominal),
                alpha_interval_with_judge: krippendorff_alpha(&units, Metric::Interval),
            });
        }
    }
    out
}
