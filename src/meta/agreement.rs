//! The human side: each aspect's mean, spread and inter-rater agreement (the paper's table 4),
//! and the aspect-by-aspect correlation matrix (its table 3).

use super::stats::{pearson_r, spearman_r};
use crate::data::{HumanRating, Item};
use std::collections::BTreeMap;

/// Who "a rater" is when agreement is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RaterBasis {
    /// The ids in each item's `raters` (crowd workers who rate different items, as in DBDC3).
    Ids,
    /// The position in each per-rater list (the same people rate every item in the same order).
    Slots,
}

/// Table 4's row for one human aspect.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HumanAspect {
    pub key: String,
    pub items: usize,
    /// Mean and sample standard deviation of the per-item mean ratings.
    pub mean: f64,
    pub std: f64,
    /// Each rater against the mean of the other raters of the same items, averaged over raters
    /// (None without per-rater lists, or when no rater has 3+ items with a defined correlation).
    pub agreement_spearman: Option<f64>,
    pub agreement_pearson: Option<f64>,
    /// Raters whose correlation was defined (of all raters seen).
    pub raters_used: usize,
    pub raters_seen: usize,
    pub basis: Option<RaterBasis>,
    /// Krippendorff's α among the raters, nominal and interval (None without per-rater lists).
    pub alpha_nominal: Option<f64>,
    pub alpha_interval: Option<f64>,
}

/// Leave-one-out rater agreement and the summary statistics of aspect `key`.
pub fn rater_agreement(items: &[Item], key: &str) -> HumanAspect {
    let means: Vec<f64> = items
        .iter()
        .filter_map(|i| i.human.get(key))
        .map(HumanRating::mean)
        .collect();
    let n = means.len();
    let mean = means.iter().sum::<f64>() / n.max(1) as f64;
    let std = if n > 1 {
        (means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        f64::NAN
    };
    let rated: Vec<(&Item, &Vec<f64>)> = items
        .iter()
        .filter_map(|i| match i.human.get(key) {
            Some(HumanRating::PerRater(v)) if v.len() > 1 => Some((i, v)),
            _ => None,
        })
        .collect();
    let basis = if rated.is_empty() {
        None
    } else if rated.iter().all(|(i, v)| i.raters.len() == v.len()) {
        Some(RaterBasis::Ids)
    } else {
        Some(RaterBasis::Slots)
    };
    // Per rater: (own rating, mean of the others) over the items they rated.
    let mut per_rater: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (item, ratings) in &rated {
        let total: f64 = ratings.iter().sum();
        for (slot, r) in ratings.iter().enumerate() {
            let who = match basis {
                Some(RaterBasis::Ids) => item.raters[slot].clone(),
                _ => format!("#{slot}"),
            };
            let e = per_rater.entry(who).or_default();
            e.0.push(*r);
            e.1.push((total - r) / (ratings.len() - 1) as f64);
        }
    }
    let (alpha_nominal, alpha_interval) = super::chance::raters_alpha(items, key);
    let mut sums = (0.0, 0.0);
    let mut used = (0usize, 0usize);
    for (own, others) in per_rater.values() {
        if let Some(r) = spearman_r(own, others) {
            sums.0 += r;
            used.0 += 1;
        }
        if let Some(r) = pearson_r(own, others) {
            sums.1 += r;
            used.1 += 1;
        }
    }
    HumanAspect {
        key: key.to_string(),
        items: n,
        mean,
        std,
        agreement_spearman: (used.0 > 0).then(|| sums.0 / used.0 as f64),
        agreement_pearson: (used.1 > 0).then(|| sums.1 / used.1 as f64),
        raters_used: used.0,
        raters_seen: per_rater.len(),
        basis,
        alpha_nominal,
        alpha_interval,
    }
}

/// Spearman between every two columns over the items where both exist (None: undefined).
#[derive(Clone, Debug, serde::Serialize)]
pub struct AspectMatrix {
    pub keys: Vec<String>,
    pub spearman: Vec<Vec<Option<f64>>>,
}

pub fn aspect_matrix(keys: Vec<String>, columns: &[Vec<Option<f64>>]) -> AspectMatrix {
    let spearman = columns
        .iter()
        .map(|a| {
            columns
                .iter()
                .map(|b| {
                    let (x, y): (Vec<f64>, Vec<f64>) = a
                        .iter()
                        .zip(b)
                        .filter_map(|(p, q)| Some(((*p)?, (*q)?)))
                        .unzip();
                    spearman_r(&x, &y)
                })
                .collect()
        })
        .collect();
    AspectMatrix { keys, spearman }
}
