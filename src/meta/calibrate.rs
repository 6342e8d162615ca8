//! Calibration of a judge's label distributions: a temperature and one bias per label, fitted on
//! a development set of turns and applied to others.
//!
//! A turn's calibrated distribution is `softmax(log(q_k) / T + b_k)` over the labels the judge's
//! levels map to (`q`: the judge's probability of each label; the first label's bias is 0).
//! T and b minimise the mean cross-entropy to the raters' label distributions — convex in
//! (1/T, b), so the minimum is unique and Newton's method finds it from the identity (T = 1,
//! b = 0), the same bits for the same turns.

use super::breakdown::Distribution;
use serde::Serialize;

/// log of a probability the judge gave as zero (an underflow of its softmax): keeps the fit
/// finite while such a label stays far below the others at any temperature near 1.
const LOG_FLOOR: f64 = -69.0; // ≈ ln 1e-30

/// A fitted calibration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibration {
    /// The labels calibrated (those the judge's levels map to), as indices into O, T, X.
    pub labels: Vec<usize>,
    pub temperature: f64,
    /// One bias per entry of `labels` (the first is 0).
    pub bias: Vec<f64>,
    /// Mean cross-entropy (nats) on the development turns before and after.
    pub dev_cross_entropy_before: f64,
    pub dev_cross_entropy_after: f64,
    pub dev_turns: usize,
}

/// The fit's data; its parameters are 1/T, then the biases of labels[1..].
struct Problem {
    logq: Vec<Vec<f64>>,
    target: Vec<Vec<f64>>,
}

fn softmax(z: &[f64]) -> Vec<f64> {
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|v| v / sum).collect()
}

fn logits(theta: &[f64], logq: &[f64]) -> Vec<f64> {
    logq.iter()
        .enumerate()
        .map(|(k, l)| theta[0] * l + if k == 0 { 0.0 } else { theta[k] })
        .collect()
}

/// The log-probability of each calibrated label, floored.
fn log_probs(q: &Distribution, labels: &[usize]) -> Vec<f64> {
    labels
        .iter()
        .map(|&k| {
            if q[k] > 0.0 {
                q[k].ln().max(LOG_FLOOR)
            } else {
                LOG_FLOOR
            }
        })
        .collect()
}

impl Problem {
    fn new(predicted: &[Distribution], gold: &[Distribution], labels: &[usize]) -> Self {
        let logq = predicted.iter().map(|q| log_probs(q, labels)).collect();
        let target = gold
            .iter()
            .map(|g| labels.iter().map(|&k| g[k]).collect())
            .collect();
        Problem { logq, target }
    }

    /// Mean cross-entropy over the calibrated labels (a gold label outside them adds a constant
    /// that no calibration changes, and is left out).
    fn loss(&self, theta: &[f64]) -> f64 {
        let mut sum = 0.0;
        for (l, y) in self.logq.iter().zip(&self.target) {
            let z = logits(theta, l);
            let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            sum += y.iter().zip(&z).map(|(y, z)| y * (lse - z)).sum::<f64>();
        }
        sum / self.logq.len() as f64
    }

    /// Gradient and Hessian of the loss. With z = (1/T)·log q + b, d loss / d z = mass·s − y
    /// (s the softmax, mass = Σ y) and its Hessian in z is mass·(diag s − s sᵀ); the parameters
    /// enter z through log q (1/T) and one unit vector per bias.
    fn derivatives(&self, theta: &[f64]) -> (Vec<f64>, Vec<Vec<f64>>) {
        let p = theta.len();
        let mut g = vec![0.0; p];
        let mut h = vec![vec![0.0; p]; p];
        for (l, y) in self.logq.iter().zip(&self.target) {
            let s = softmax(&logits(theta, l));
            let mass: f64 = y.iter().sum();
            let dz: Vec<f64> = s.iter().zip(y).map(|(s, y)| mass * s - y).collect();
            g[0] += dz.iter().zip(l).map(|(d, l)| d * l).sum::<f64>();
            for (gj, d) in g.iter_mut().zip(&dz).skip(1) {
                *gj += d;
            }
            // u = Hessian in z times log q.
            let mean_l: f64 = s.iter().zip(l).map(|(s, l)| s * l).sum();
            let u: Vec<f64> = s
                .iter()
                .zip(l)
                .map(|(s, l)| mass * s * (l - mean_l))
                .collect();
            h[0][0] += u.iter().zip(l).map(|(u, l)| u * l).sum::<f64>();
            for (cell, u) in h[0].iter_mut().zip(&u).skip(1) {
                *cell += u;
            }
            for (j, row) in h.iter_mut().enumerate().skip(1) {
                row[0] += u[j];
                for (b, cell) in row.iter_mut().enumerate().skip(1) {
                    let diagonal = if j == b { s[j] } else { 0.0 };
                    *cell += mass * (diagonal - s[j] * s[b]);
                }
            }
        }
        let n = self.logq.len() as f64;
        g.iter_mut().for_each(|v| *v /= n);
        h.iter_mut().flatten().for_each(|v| *v /= n);
        (g, h)
    }
}

/// Solve `h x = b` by Gaussian elimination with partial pivoting (a few unknowns).
fn solve(mut h: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| h[i][col].abs().total_cmp(&h[j][col].abs()))?;
        if h[pivot][col].abs() < 1e-300 {
            return None;
        }
        h.swap(col, pivot);
        b.swap(col, pivot);
        let (above, below) = h.split_at_mut(col + 1);
        let pivot_row = &above[col];
        for (k, row) in below.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            for (x, p) in row.iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            b[col + 1 + k] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let rest: f64 = (row + 1..n).map(|k| h[row][k] * x[k]).sum();
        x[row] = (b[row] - rest) / h[row][row];
    }
    Some(x)
}

/// Fit on development turns: `predicted` the judge's O/T/X distributions, `gold` the raters',
/// `labels` the labels the judge's levels map to (at least two). None without turns.
pub fn fit(
    predicted: &[Distribution],
    gold: &[Distribution],
    labels: &[usize],
) -> Option<Calibration> {
    if predicted.is_empty() || labels.len() < 2 {
        return None;
    }
    let problem = Problem::new(predicted, gold, labels);
    let mut theta = vec![0.0; labels.len()];
    theta[0] = 1.0;
    let before = problem.loss(&theta);
    let mut loss = before;
    for _ in 0..200 {
        let (g, mut h) = problem.derivatives(&theta);
        if g.iter().map(|v| v * v).sum::<f64>().sqrt() < 1e-12 {
            break;
        }
        // A little damping keeps the step defined where the labels are separable.
        for (i, row) in h.iter_mut().enumerate() {
            row[i] += 1e-12;
        }
        let Some(step) = solve(h, g.iter().map(|v| -v).collect()) else {
            break;
        };
        let mut t = 1.0;
        let mut improved = false;
        while t > 1e-10 {
            let next: Vec<f64> = theta.iter().zip(&step).map(|(a, s)| a + t * s).collect();
            let l = problem.loss(&next);
            if l <= loss {
                improved = l < loss;
                theta = next;
                loss = l;
                break;
            }
            t /= 2.0;
        }
        if !improved {
            break;
        }
    }
    let mut bias = theta.clone();
    bias[0] = 0.0;
    Some(Calibration {
        labels: labels.to_vec(),
        temperature: 1.0 / theta[0],
        bias,
        dev_cross_entropy_before: before,
        dev_cross_entropy_after: loss,
        dev_turns: predicted.len(),
    })
}

impl Calibration {
    /// The calibrated O/T/X distribution of a judge's one.
    pub fn apply(&self, q: &Distribution) -> Distribution {
        let mut theta = self.bias.clone();
        theta[0] = 1.0 / self.temperature;
        let s = softmax(&logits(&theta, &log_probs(q, &self.labels)));
        let mut out = [0.0; 3];
        for (k, p) in self.labels.iter().zip(s) {
            out[*k] = p;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_a_known_temperature_and_bias() {
        // Gold distributions made from the judge's by a known calibration: the fit finds it.
        let truth = Calibration {
            labels: vec![0, 1, 2],
            temperature: 2.0,
            bias: vec![0.0, 0.4, -0.3],
            dev_cross_entropy_before: 0.0,
            dev_cross_entropy_after: 0.0,
            dev_turns: 0,
        };
        let predicted: Vec<Distribution> = (0..40)
            .map(|i| {
                let a = 0.05 + 0.9 * ((i * 7 % 40) as f64 / 40.0);
                let b = (1.0 - a) * (0.2 + 0.6 * ((i * 13 % 40) as f64 / 40.0));
                [a, b, 1.0 - a - b]
            })
            .collect();
        let gold: Vec<Distribution> = predicted.iter().map(|q| truth.apply(q)).collect();
        let fitted = fit(&predicted, &gold, &[0, 1, 2]).unwrap();
        assert!((fitted.temperature - 2.0).abs() < 1e-8, "{fitted:?}");
        assert!((fitted.bias[1] - 0.4).abs() < 1e-8 && (fitted.bias[2] + 0.3).abs() < 1e-8);
        assert!(fitted.dev_cross_entropy_after < fitted.dev_cross_entropy_before);
    }
}
