//! Bradley–Terry strengths with ties, after Davidson (1970): for systems i and j with
//! strengths π = e^θ and a tie parameter ν,
//!
//!   P(i wins) = π_i / D,  P(j wins) = π_j / D,  P(tie) = ν √(π_i π_j) / D,
//!   D = π_i + π_j + ν √(π_i π_j).
//!
//! Each comparison counts with fractional outcomes (the judge's order-averaged probabilities
//! of a win, a loss and a tie, summing to one), so the fit reads the whole distribution, not
//! only its argmax. The log-likelihood is concave in (θ, log ν): Newton's method with a
//! backtracking line search finds its maximum; θ is reported centred (mean 0). Without any tie
//! mass the model is Bradley–Terry's own (ν = 0).
//!
//! Controlled for covariates (`fit_controlled`, Arena-Hard's style control): a comparison's
//! features x (i's response against j's: length, markdown) shift the log-odds of a win by β·x,
//! θ_i + β·x/2 standing for θ_i and θ_j − β·x/2 for θ_j (the tie term is unchanged), so θ is a
//! system's strength with those features held equal; β is fitted with θ and ν.

/// One comparison: systems `i` and `j` and the weights of i winning, j winning and a tie.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    pub i: usize,
    pub j: usize,
    pub wins_i: f64,
    pub wins_j: f64,
    pub ties: f64,
}

/// A fit: each system's log-strength θ (mean 0), the tie parameter ν (0 without ties) and the
/// covariates' coefficients β (none without covariates).
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    pub strengths: Vec<f64>,
    pub tie: f64,
    pub coefficients: Vec<f64>,
    pub iterations: usize,
}

/// Why no maximum-likelihood strengths exist.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("no comparisons")]
    Empty,
    /// Some system's strength runs off to ±∞ (it wins or loses every comparison it is in, or
    /// the systems fall into groups never compared with each other).
    #[error(
        "the strengths have no finite maximum: a system wins or loses all its comparisons, or some systems are never compared with the others"
    )]
    Diverges,
}

const MAX_ITERATIONS: usize = 200;

/// The most covariates a fit takes (the style features: length, markdown): a comparison's
/// derivatives then fit in arrays on the stack, as the bootstrap's thousands of fits compute
/// them for every comparison at every Newton step.
pub const MAX_COVARIATES: usize = 2;

/// Log-odds beyond which a strength (or log ν) is taken as running off to infinity: e^20, odds
/// of 5 × 10^8 to 1, are beyond anything a few hundred comparisons can support.
const FAR: f64 = 20.0;

/// The maximum-likelihood fit of `systems` strengths to `outcomes`.
pub fn fit(systems: usize, outcomes: &[Outcome]) -> Result<Fit, FitError> {
    fit_controlled(systems, outcomes, &[])
}

/// The fit with covariates: `covariates[k]` is one row per outcome (the k-th feature of i's
/// response against j's); none: `fit`.
pub fn fit_controlled(
    systems: usize,
    outcomes: &[Outcome],
    covariates: &[Vec<f64>],
) -> Result<Fit, FitError> {
    if outcomes.is_empty() || systems < 2 {
        return Err(FitError::Empty);
    }
    assert!(
        covariates.len() <= MAX_COVARIATES && covariates.iter().all(|c| c.len() == outcomes.len()),
        "at most {MAX_COVARIATES} covariates, one value per outcome"
    );
    let model = Model {
        systems,
        with_ties: outcomes.iter().any(|o| o.ties > 0.0),
        covariates,
    };
    // Free parameters: θ_1 … θ_{n−1} (θ_0 = 0), with ties λ = log ν, then β.
    let free = systems - 1 + usize::from(model.with_ties) + covariates.len();
    let mut x = vec![0.0; free];
    let mut ll = model.log_likelihood(outcomes, &x);
    for iteration in 0..MAX_ITERATIONS {
        let (grad, hess) = model.derivatives(outcomes, &x);
        let gmax = grad.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        let total: f64 = outcomes.iter().map(|o| o.wins_i + o.wins_j + o.ties).sum();
        if gmax <= 1e-10 * total.max(1.0) {
            // A gradient that vanishes only far out is a likelihood still rising towards
            // infinity (a system winning everything): no finite estimate.
            if x.iter().any(|v| v.abs() > FAR) {
                return Err(FitError::Diverges);
            }
            return Ok(model.finish(&x, iteration));
        }
        // Newton direction: solve (−H) d = g.
        let neg: Vec<Vec<f64>> = hess
            .iter()
            .map(|row| row.iter().map(|h| -h).collect())
            .collect();
        let Some(step) = solve(neg, grad.clone()) else {
            return Err(FitError::Diverges);
        };
        let mut t = 1.0;
        loop {
            let trial: Vec<f64> = x.iter().zip(&step).map(|(a, d)| a + t * d).collect();
            let trial_ll = model.log_likelihood(outcomes, &trial);
            if trial_ll.is_finite() && trial_ll >= ll - 1e-12 * ll.abs().max(1.0) {
                x = trial;
                ll = trial_ll;
                break;
            }
            t /= 2.0;
            if t < 1e-12 {
                return Err(FitError::Diverges);
            }
        }
        if x.iter().any(|v| !v.is_finite() || v.abs() > 2.0 * FAR) {
            return Err(FitError::Diverges);
        }
    }
    Err(FitError::Diverges)
}

/// log D and the three outcomes' probabilities for one comparison.
fn probabilities(a: f64, b: f64, lambda: f64) -> (f64, [f64; 3]) {
    let terms = [a, b, lambda + (a + b) / 2.0];
    let top = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exps = terms.map(|t| (t - top).exp());
    let sum: f64 = exps.iter().sum();
    (top + sum.ln(), exps.map(|e| e / sum))
}

/// What is fitted: the systems, whether there is a tie parameter, the covariates.
struct Model<'c> {
    systems: usize,
    with_ties: bool,
    covariates: &'c [Vec<f64>],
}

impl Model<'_> {
    fn finish(&self, x: &[f64], iterations: usize) -> Fit {
        let (mut theta, lambda, beta) = self.unpack(x);
        let mean = theta.iter().sum::<f64>() / self.systems as f64;
        for t in &mut theta {
            *t -= mean;
        }
        Fit {
            strengths: theta,
            tie: if self.with_ties { lambda.exp() } else { 0.0 },
            coefficients: beta.to_vec(),
            iterations,
        }
    }

    /// θ of every system (θ_0 = 0), λ and β from the free parameters.
    fn unpack<'x>(&self, x: &'x [f64]) -> (Vec<f64>, f64, &'x [f64]) {
        let n = self.systems;
        let mut theta = vec![0.0; n];
        theta[1..].copy_from_slice(&x[..n - 1]);
        let lambda = if self.with_ties {
            x[n - 1]
        } else {
            f64::NEG_INFINITY
        };
        (theta, lambda, &x[n - 1 + usize::from(self.with_ties)..])
    }

    /// Half of β·x for outcome `o`: what i's log-strength gains and j's loses.
    fn shift(&self, beta: &[f64], o: usize) -> f64 {
        (beta.iter().zip(self.covariates))
            .map(|(b, c)| b * c[o])
            .sum::<f64>()
            / 2.0
    }

    fn log_likelihood(&self, outcomes: &[Outcome], x: &[f64]) -> f64 {
        let (theta, lambda, beta) = self.unpack(x);
        outcomes
            .iter()
            .enumerate()
            .map(|(n, o)| {
                let shift = self.shift(beta, n);
                let (a, b) = (theta[o.i] + shift, theta[o.j] - shift);
                let (log_d, _) = probabilities(a, b, lambda);
                let tie_term = if o.ties > 0.0 {
                    o.ties * (lambda + (a + b) / 2.0)
                } else {
                    0.0
                };
                o.wins_i * a + o.wins_j * b + tie_term - (o.wins_i + o.wins_j + o.ties) * log_d
            })
            .sum()
    }

    /// Gradient and Hessian of the log-likelihood in the free parameters.
    fn derivatives(&self, outcomes: &[Outcome], x: &[f64]) -> (Vec<f64>, Vec<Vec<f64>>) {
        let systems = self.systems;
        let k = self.covariates.len();
        let (theta, lambda, beta) = self.unpack(x);
        // Over all parameters (θ_0 … θ_{n−1}, λ, β); θ_0's row and column (and λ's without
        // ties) are dropped at the end.
        let all = systems + 1 + k;
        let mut grad = vec![0.0; all];
        let mut hess = vec![vec![0.0; all]; all];
        for (n, o) in outcomes.iter().enumerate() {
            let m = o.wins_i + o.wins_j + o.ties;
            let shift = self.shift(beta, n);
            let (_, p) = probabilities(theta[o.i] + shift, theta[o.j] - shift, lambda);
            // log D is the log-sum-exp of c_k · (θ_i, θ_j, λ, β), with c = (1, 0, 0, x/2),
            // (0, 1, 0, −x/2), (½, ½, 1, 0).
            let dims = 3 + k;
            let mut idx = [o.i, o.j, systems, 0, 0];
            let mut c = [
                [1.0, 0.0, 0.0, 0.0, 0.0],
                [0.0, 1.0, 0.0, 0.0, 0.0],
                [0.5, 0.5, 1.0, 0.0, 0.0],
            ];
            for (f, covariate) in self.covariates.iter().enumerate() {
                idx[3 + f] = systems + 1 + f;
                c[0][3 + f] = covariate[n] / 2.0;
                c[1][3 + f] = -covariate[n] / 2.0;
            }
            let mean: [f64; 5] = std::array::from_fn(|d| (0..3).map(|t| p[t] * c[t][d]).sum());
            let observed: [f64; 5] =
                std::array::from_fn(|d| o.wins_i * c[0][d] + o.wins_j * c[1][d] + o.ties * c[2][d]);
            for d in 0..dims {
                grad[idx[d]] += observed[d] - m * mean[d];
                for e in 0..dims {
                    let second: f64 = (0..3).map(|t| p[t] * c[t][d] * c[t][e]).sum();
                    hess[idx[d]][idx[e]] -= m * (second - mean[d] * mean[e]);
                }
            }
        }
        let keep: Vec<usize> = (1..systems)
            .chain(self.with_ties.then_some(systems))
            .chain(systems + 1..all)
            .collect();
        let g = keep.iter().map(|&k| grad[k]).collect();
        let h = keep
            .iter()
            .map(|&r| keep.iter().map(|&c| hess[r][c]).collect())
            .collect();
        (g, h)
    }
}

/// Solve a x = b by Gaussian elimination with partial pivoting; None when singular.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    let scale = a
        .iter()
        .flatten()
        .fold(0.0f64, |m, v| m.max(v.abs()))
        .max(f64::MIN_POSITIVE);
    for col in 0..n {
        let pivot = (col..n).max_by(|&r, &s| a[r][col].abs().total_cmp(&a[s][col].abs()))?;
        if a[pivot][col].abs() <= 1e-14 * scale {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (upper, lower) = a.split_at_mut(col + 1);
        let row = &upper[col];
        for (r, other) in lower.iter_mut().enumerate() {
            let f = other[col] / row[col];
            if f != 0.0 {
                for (x, y) in other[col..].iter_mut().zip(&row[col..]) {
                    *x -= f * y;
                }
                b[col + 1 + r] -= f * b[col];
            }
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|k| a[r][k] * x[k]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}

/// The `q` quantile (0–1) of `values` by linear interpolation between order statistics (numpy's
/// default, Hyndman & Fan's type 7).
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let h = (v.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two systems, no ties: the MLE is the log of the win ratio, split about 0.
    #[test]
    fn two_systems_by_hand() {
        let o = [Outcome {
            i: 0,
            j: 1,
            wins_i: 3.0,
            wins_j: 1.0,
            ties: 0.0,
        }];
        let f = fit(2, &o).unwrap();
        let half = 3f64.ln() / 2.0;
        assert!((f.strengths[0] - half).abs() < 1e-12, "{f:?}");
        assert!((f.strengths[1] + half).abs() < 1e-12);
        assert_eq!(f.tie, 0.0);
        // With ties, two systems: P(i) : P(j) : P(tie) = 3 : 1 : 2 is matched exactly:
        // π_i/π_j = 3 and ν √(π_i π_j) / π_j = 2 → ν = 2/√3.
        let o = [Outcome {
            i: 0,
            j: 1,
            wins_i: 3.0,
            wins_j: 1.0,
            ties: 2.0,
        }];
        let f = fit(2, &o).unwrap();
        assert!((f.strengths[0] - half).abs() < 1e-10, "{f:?}");
        assert!((f.tie - 2.0 / 3f64.sqrt()).abs() < 1e-10, "{f:?}");
        // One system wins everything: no finite maximum.
        let o = [Outcome {
            i: 0,
            j: 1,
            wins_i: 2.0,
            wins_j: 0.0,
            ties: 0.0,
        }];
        assert_eq!(fit(2, &o), Err(FitError::Diverges));
    }

    #[test]
    fn quantiles_interpolate_as_numpy() {
        // numpy.percentile([1, 2, 3, 4], [2.5, 50, 97.5]) = [1.075, 2.5, 3.925]
        let v = [4.0, 1.0, 3.0, 2.0];
        assert!((quantile(&v, 0.025) - 1.075).abs() < 1e-12);
        assert!((quantile(&v, 0.5) - 2.5).abs() < 1e-12);
        assert!((quantile(&v, 0.975) - 3.925).abs() < 1e-12);
    }
}
