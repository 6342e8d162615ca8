//! The coefficients of a bootstrap resample given as counts over fixed units, without building
//! or sorting the resample: the units are sorted once, and each resample walks them in that
//! order with its counts. The same numbers as the coefficients of the expanded resample
//! (`stats`), at O(n) for Pearson and Spearman and O(n log n) without a sort for Kendall.

use super::stats::{Method, tau_b_counts};

/// Units (x, y) sorted once for every resample of them.
pub struct Prepared {
    x: Vec<f64>,
    y: Vec<f64>,
    /// Units by x then y (ties in x broken by y, as Knight's algorithm needs).
    by_x: Vec<u32>,
    /// Units by y.
    by_y: Vec<u32>,
    /// Each unit's y among the distinct y values, from 0.
    y_rank: Vec<u32>,
    distinct_y: usize,
}

impl Prepared {
    pub fn new(pairs: &[(f64, f64)]) -> Prepared {
        let x: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let y: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        let mut by_x: Vec<u32> = (0..pairs.len() as u32).collect();
        by_x.sort_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            x[a].total_cmp(&x[b]).then(y[a].total_cmp(&y[b]))
        });
        let mut by_y: Vec<u32> = (0..pairs.len() as u32).collect();
        by_y.sort_by(|&a, &b| y[a as usize].total_cmp(&y[b as usize]));
        let mut y_rank = vec![0u32; pairs.len()];
        let mut distinct_y = 0usize;
        for run in by_y.chunk_by(|&a, &b| y[a as usize] == y[b as usize]) {
            for &k in run {
                y_rank[k as usize] = distinct_y as u32;
            }
            distinct_y += 1;
        }
        Prepared {
            x,
            y,
            by_x,
            by_y,
            y_rank,
            distinct_y,
        }
    }

    /// The coefficient of the resample holding unit k `counts[k]` times; None where the
    /// expanded resample's is undefined (fewer than 3 units, a constant column, a value that is
    /// not a finite number).
    pub fn coefficient(&self, method: Method, counts: &[u32]) -> Option<f64> {
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        if total < 3 || undefined(&self.x, counts) || undefined(&self.y, counts) {
            return None;
        }
        match method {
            Method::Pearson => weighted_pearson(&self.x, &self.y, counts, total),
            Method::Spearman => {
                let rx = midranks(&self.x, &self.by_x, counts);
                let ry = midranks(&self.y, &self.by_y, counts);
                weighted_pearson(&rx, &ry, counts, total)
            }
            Method::Kendall => Some(self.kendall(counts, total)),
        }
    }

    fn kendall(&self, counts: &[u32], total: u64) -> f64 {
        let (x, y) = (&self.x, &self.y);
        let pairs_in = |run: &[u32]| {
            let w: u64 = run.iter().map(|&k| u64::from(counts[k as usize])).sum();
            w * w.saturating_sub(1) / 2
        };
        let x_ties = self
            .by_x
            .chunk_by(|&a, &b| x[a as usize] == x[b as usize])
            .map(pairs_in)
            .sum();
        let joint_ties = self
            .by_x
            .chunk_by(|&a, &b| x[a as usize] == x[b as usize] && y[a as usize] == y[b as usize])
            .map(pairs_in)
            .sum();
        let y_ties = self
            .by_y
            .chunk_by(|&a, &b| y[a as usize] == y[b as usize])
            .map(pairs_in)
            .sum();
        // In x-then-y order a discordant pair is an earlier unit with a greater y.
        let mut tree = Fenwick::new(self.distinct_y);
        let mut discordant = 0u64;
        let mut seen = 0u64;
        for &k in &self.by_x {
            let c = u64::from(counts[k as usize]);
            if c == 0 {
                continue;
            }
            let rank = self.y_rank[k as usize] as usize;
            discordant += c * (seen - tree.prefix(rank + 1));
            tree.add(rank, c);
            seen += c;
        }
        tau_b_counts(total, discordant, x_ties, y_ties, joint_ties)
    }
}

/// A column no correlation is defined on among the counted units: constant, or holding a value
/// that is not a finite number.
fn undefined(v: &[f64], counts: &[u32]) -> bool {
    let mut first = None;
    let mut varies = false;
    for (value, &c) in v.iter().zip(counts) {
        if c == 0 {
            continue;
        }
        if !value.is_finite() {
            return true;
        }
        match first {
            None => first = Some(*value),
            Some(f) => varies |= *value != f,
        }
    }
    !varies
}

/// Each unit's average rank in the resample (scipy.stats.rankdata's "average"): a run of equal
/// values holding weight w after weight `before` takes the ranks before+1 … before+w.
fn midranks(v: &[f64], order: &[u32], counts: &[u32]) -> Vec<f64> {
    let mut ranks = vec![0.0; v.len()];
    let mut before = 0u64;
    for run in order.chunk_by(|&a, &b| v[a as usize] == v[b as usize]) {
        let w: u64 = run.iter().map(|&k| u64::from(counts[k as usize])).sum();
        let rank = before as f64 + (w as f64 + 1.0) / 2.0;
        for &k in run {
            ranks[k as usize] = rank;
        }
        before += w;
    }
    ranks
}

/// `stats::pearson_r` of the expanded resample.
fn weighted_pearson(x: &[f64], y: &[f64], counts: &[u32], total: u64) -> Option<f64> {
    let n = total as f64;
    let (mut sx, mut sy) = (0.0, 0.0);
    for ((a, b), &c) in x.iter().zip(y).zip(counts) {
        let c = f64::from(c);
        sx += c * a;
        sy += c * b;
    }
    let (mx, my) = (sx / n, sy / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for ((a, b), &c) in x.iter().zip(y).zip(counts) {
        if c == 0 {
            continue;
        }
        let (dx, dy, c) = (a - mx, b - my, f64::from(c));
        sxy += c * dx * dy;
        sxx += c * dx * dx;
        syy += c * dy * dy;
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some((sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0))
}

/// Sums of weights over ranks 0..i in O(log n).
struct Fenwick(Vec<u64>);

impl Fenwick {
    fn new(n: usize) -> Fenwick {
        Fenwick(vec![0; n + 1])
    }

    fn add(&mut self, rank: usize, w: u64) {
        let mut i = rank + 1;
        while i < self.0.len() {
            self.0[i] += w;
            i += i & i.wrapping_neg();
        }
    }

    /// The weight at ranks below `end`.
    fn prefix(&self, end: usize) -> u64 {
        let (mut i, mut sum) = (end, 0);
        while i > 0 {
            sum += self.0[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Every coefficient of a resample given by counts equals the one `stats` computes (the
    /// scipy-checked functions) on the resample written out, with ties, repeats and units left
    /// out; undefined where that one is.
    #[test]
    fn counted_resamples_match_the_expanded_ones() {
        let mut rng = SplitMix64(7);
        for case in 0..200 {
            let n = 3 + rng.below(60);
            let levels = 1 + rng.below(6) as u64;
            let pairs: Vec<(f64, f64)> = (0..n)
                .map(|_| {
                    let a = rng.below(levels as usize) as f64 * 0.5;
                    let b = if case % 3 == 0 {
                        rng.below(1000) as f64 / 7.0
                    } else {
                        rng.below(4) as f64
                    };
                    (a, b)
                })
                .collect();
            let prepared = Prepared::new(&pairs);
            let mut counts = vec![0u32; n];
            for _ in 0..n {
                counts[rng.below(n)] += 1;
            }
            let (x, y): (Vec<f64>, Vec<f64>) = counts
                .iter()
                .enumerate()
                .flat_map(|(k, &c)| std::iter::repeat_n(pairs[k], c as usize))
                .unzip();
            for method in Method::ALL {
                let counted = prepared.coefficient(method, &counts);
                let expanded = method.coefficient(&x, &y);
                match (counted, expanded) {
                    (Some(a), Some(b)) => assert!((a - b).abs() < 1e-12, "{method:?} {a} {b}"),
                    (a, b) => assert_eq!(a, b, "{method:?} case {case}"),
                }
            }
        }
    }
}
