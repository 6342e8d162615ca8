//! L1-penalised logistic regression on probabilities, its penalty chosen by cross-validated
//! log loss: the fit behind AlpacaEval 2's length-controlled win rate (scikit-learn's
//! `LogisticRegressionCV` with liblinear, an L1 penalty and no intercept column of its own;
//! each row enters once with label 1 weighted by its target probability p and once with
//! label 0 weighted by 1 − p, both in one group of the folds).
//!
//! For a penalty C the fit minimises C · Σ_i [log(1 + e^{z_i}) − p_i z_i] + ‖β‖₁ with
//! z_i = β·x_i (liblinear's objective for the two weighted copies of each row). It is convex;
//! proximal Newton steps (each the coordinate-descent solution of the penalised quadratic
//! model) with a backtracking line search reach its minimum to far below liblinear's own
//! tolerance.

/// Columns of a row.
pub const FEATURES: usize = 3;

/// One row's features.
pub type Row = [f64; FEATURES];

/// The penalties tried: scikit-learn's default grid, ten values evenly spaced in log from
/// 1e-4 to 1e4.
pub fn default_penalties() -> Vec<f64> {
    (0..10)
        .map(|k| 10f64.powf(-4.0 + 8.0 * k as f64 / 9.0))
        .collect()
}

/// Why no cross-validated fit exists.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LogisticError {
    #[error("{rows} rows are fewer than the {folds} folds of the cross-validation")]
    TooFewRows { rows: usize, folds: usize },
}

/// A penalty chosen by cross-validation and the fit on every row with it.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossValidated {
    /// The inverse penalty C chosen (the smallest of equal mean losses).
    pub penalty: f64,
    pub coefficients: Row,
    /// Each penalty's mean held-out log loss over the folds, in the order of the grid.
    pub losses: Vec<f64>,
}

fn softplus(z: f64) -> f64 {
    if z > 0.0 {
        z + (-z).exp().ln_1p()
    } else {
        z.exp().ln_1p()
    }
}

/// The logistic function.
pub fn logistic(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

fn dot(a: &Row, b: &Row) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn l1(b: &Row) -> f64 {
    b.iter().map(|x| x.abs()).sum()
}

/// The penalised objective divided by C: Σ [log(1 + e^z) − p z] + λ‖β‖₁, λ = 1/C.
fn objective(rows: &[Row], targets: &[f64], beta: &Row, lambda: f64) -> f64 {
    let loss: f64 = (rows.iter().zip(targets))
        .map(|(x, p)| {
            let z = dot(x, beta);
            softplus(z) - p * z
        })
        .sum();
    loss + lambda * l1(beta)
}

fn soft_threshold(x: f64, t: f64) -> f64 {
    if x > t {
        x - t
    } else if x < -t {
        x + t
    } else {
        0.0
    }
}

const MAX_NEWTON: usize = 200;
const MAX_SWEEPS: usize = 1000;

/// The fit with inverse penalty `c` of `targets` (probabilities) on `rows`.
pub fn fit(rows: &[Row], targets: &[f64], c: f64) -> Row {
    let lambda = 1.0 / c;
    let mut beta: Row = [0.0; FEATURES];
    let mut value = objective(rows, targets, &beta, lambda);
    let tolerance = 1e-11 * (rows.len().max(1) as f64);
    for _ in 0..MAX_NEWTON {
        let mut grad: Row = [0.0; FEATURES];
        let mut hess = [[0.0; FEATURES]; FEATURES];
        for (x, p) in rows.iter().zip(targets) {
            let q = logistic(dot(x, &beta));
            let w = q * (1.0 - q);
            for a in 0..FEATURES {
                grad[a] += (q - p) * x[a];
                for b in 0..FEATURES {
                    hess[a][b] += w * x[a] * x[b];
                }
            }
        }
        // The largest violation of the optimality conditions (the smallest subgradient).
        let violation = (0..FEATURES)
            .map(|k| {
                if beta[k] != 0.0 {
                    (grad[k] + lambda * beta[k].signum()).abs()
                } else {
                    (grad[k].abs() - lambda).max(0.0)
                }
            })
            .fold(0.0f64, f64::max);
        if violation <= tolerance {
            break;
        }
        // The step minimising the quadratic model plus the penalty, coordinate by coordinate.
        let mut step: Row = [0.0; FEATURES];
        for _ in 0..MAX_SWEEPS {
            let mut largest = 0.0f64;
            for k in 0..FEATURES {
                let a = hess[k][k];
                if a <= 0.0 {
                    continue;
                }
                let b = grad[k] + (0..FEATURES).map(|j| hess[k][j] * step[j]).sum::<f64>();
                let current = beta[k] + step[k];
                let next = soft_threshold(current - b / a, lambda / a);
                largest = largest.max((next - current).abs());
                step[k] = next - beta[k];
            }
            if largest <= 1e-15 * (1.0 + l1(&beta)) {
                break;
            }
        }
        let trial = |t: f64| -> Row { std::array::from_fn(|k| beta[k] + t * step[k]) };
        let decrease = dot(&grad, &step) + lambda * (l1(&trial(1.0)) - l1(&beta));
        if decrease >= 0.0 {
            break;
        }
        let mut t = 1.0;
        let moved = loop {
            let candidate = trial(t);
            let v = objective(rows, targets, &candidate, lambda);
            if v <= value + 0.01 * t * decrease {
                value = v;
                break Some(candidate);
            }
            t /= 2.0;
            if t < 1e-12 {
                break None;
            }
        };
        match moved {
            Some(next) => beta = next,
            None => break,
        }
    }
    beta
}

/// The mean log loss of the fit on `rows`, predictions kept within [1e-15, 1 − 1e-15] as
/// AlpacaEval's scorer does.
fn log_loss(rows: &[Row], targets: &[f64], beta: &Row) -> f64 {
    let total: f64 = (rows.iter().zip(targets))
        .map(|(x, p)| {
            let q = logistic(dot(x, beta)).clamp(1e-15, 1.0 - 1e-15);
            -(p * q.ln() + (1.0 - p) * (1.0 - q).ln())
        })
        .sum();
    total / rows.len() as f64
}

/// The penalty of `penalties` with the least mean held-out log loss over `folds` folds, and
/// the fit on every row with it. Row r is held out in fold (n − 1 − r) mod folds: scikit-learn's
/// `GroupKFold` of groups of equal size, each row a group.
pub fn cross_validated(
    rows: &[Row],
    targets: &[f64],
    folds: usize,
    penalties: &[f64],
) -> Result<CrossValidated, LogisticError> {
    let n = rows.len();
    if n < folds || folds < 2 {
        return Err(LogisticError::TooFewRows { rows: n, folds });
    }
    let fold_of = |r: usize| (n - 1 - r) % folds;
    let mut losses = vec![0.0; penalties.len()];
    for fold in 0..folds {
        let (mut train_x, mut train_p, mut test_x, mut test_p) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..n {
            if fold_of(r) == fold {
                test_x.push(rows[r]);
                test_p.push(targets[r]);
            } else {
                train_x.push(rows[r]);
                train_p.push(targets[r]);
            }
        }
        for (loss, &c) in losses.iter_mut().zip(penalties) {
            let beta = fit(&train_x, &train_p, c);
            *loss += log_loss(&test_x, &test_p, &beta) / folds as f64;
        }
    }
    let best =
        (0..penalties.len()).fold(0, |best, k| if losses[k] < losses[best] { k } else { best });
    Ok(CrossValidated {
        penalty: penalties[best],
        coefficients: fit(rows, targets, penalties[best]),
        losses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weak_penalty_recovers_the_unpenalised_fit_and_a_strong_one_zeroes_it() {
        // Targets exactly logistic(0.5 + 1.5 x): the unpenalised optimum is (1.5, 0, 0.5).
        let rows: Vec<Row> = (0..20).map(|i| [i as f64 / 10.0 - 1.0, 0.0, 1.0]).collect();
        let targets: Vec<f64> = rows.iter().map(|x| logistic(0.5 + 1.5 * x[0])).collect();
        let beta = fit(&rows, &targets, 1e12);
        assert!(
            (beta[0] - 1.5).abs() < 1e-8 && (beta[2] - 0.5).abs() < 1e-8,
            "{beta:?}"
        );
        assert_eq!(beta[1], 0.0);
        assert_eq!(fit(&rows, &targets, 1e-4), [0.0; FEATURES]);
    }

    #[test]
    fn the_grid_is_scikit_learns() {
        let cs = default_penalties();
        assert_eq!(cs.len(), 10);
        assert!((cs[0] - 1e-4).abs() < 1e-18 && (cs[9] - 1e4).abs() < 1e-9);
        assert!((cs[5] - 2.782559402207126).abs() < 1e-12);
    }
}
