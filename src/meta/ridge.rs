//! Ridge regression with its penalty chosen by leave-one-out error, as scikit-learn's
//! `RidgeCV(alphas, fit_intercept=True)` (its default efficient leave-one-out): for each α the
//! coefficients solve (XcᵀXc + αI) w = Xcᵀyc on the centred data (the intercept is not
//! penalised), each item's leave-one-out residual is its residual over 1 − h_ii with
//! h_ii = 1/n + xcᵢᵀ(XcᵀXc + αI)⁻¹xcᵢ, and the α of least mean squared leave-one-out residual
//! wins (the first of equal ones).

/// The penalties tried, on columns standardised to unit variance (so α compares with the
/// number of items: α = n shrinks the coefficients about by half).
pub const ALPHAS: [f64; 9] = [0.01, 0.1, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0, 10000.0];

/// A fitted ridge regression.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RidgeFit {
    pub alpha: f64,
    pub coefficients: Vec<f64>,
    pub intercept: f64,
    /// The mean squared leave-one-out residual at `alpha`.
    pub loo_mse: f64,
}

impl RidgeFit {
    pub fn predict(&self, row: &[f64]) -> f64 {
        self.intercept
            + (row.iter().zip(&self.coefficients))
                .map(|(x, w)| x * w)
                .sum::<f64>()
    }
}

/// The fit of `y` on the rows of `x` (each of the same length) with the α of `alphas` whose
/// leave-one-out error is least; None with fewer than 3 rows, no column, or a singular system.
pub fn ridge_loo(x: &[Vec<f64>], y: &[f64], alphas: &[f64]) -> Option<RidgeFit> {
    let n = x.len();
    let p = x.first().map_or(0, Vec::len);
    if n < 3 || p == 0 || y.len() != n || alphas.is_empty() {
        return None;
    }
    let means: Vec<f64> = (0..p)
        .map(|k| x.iter().map(|r| r[k]).sum::<f64>() / n as f64)
        .collect();
    let y_mean = y.iter().sum::<f64>() / n as f64;
    let xc: Vec<Vec<f64>> = (x.iter())
        .map(|r| r.iter().zip(&means).map(|(v, m)| v - m).collect())
        .collect();
    let yc: Vec<f64> = y.iter().map(|v| v - y_mean).collect();
    let gram: Vec<Vec<f64>> = (0..p)
        .map(|a| {
            (0..p)
                .map(|b| xc.iter().map(|r| r[a] * r[b]).sum())
                .collect()
        })
        .collect();
    let xty: Vec<f64> = (0..p)
        .map(|a| xc.iter().zip(&yc).map(|(r, y)| r[a] * y).sum())
        .collect();
    let mut best: Option<RidgeFit> = None;
    for &alpha in alphas {
        let mut a = gram.clone();
        for (k, row) in a.iter_mut().enumerate() {
            row[k] += alpha;
        }
        let chol = cholesky(&a)?;
        let w = chol_solve(&chol, &xty);
        let mut squared = 0.0;
        for (r, yv) in xc.iter().zip(&yc) {
            let z = chol_solve(&chol, r);
            let h = 1.0 / n as f64 + r.iter().zip(&z).map(|(a, b)| a * b).sum::<f64>();
            let residual = yv - r.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
            squared += (residual / (1.0 - h)).powi(2);
        }
        let loo_mse = squared / n as f64;
        if best.as_ref().is_none_or(|b| loo_mse < b.loo_mse) {
            let intercept = y_mean - means.iter().zip(&w).map(|(m, w)| m * w).sum::<f64>();
            best = Some(RidgeFit {
                alpha,
                coefficients: w,
                intercept,
                loo_mse,
            });
        }
    }
    best
}

/// The lower-triangular L with L Lᵀ = a; None when `a` is not positive definite.
fn cholesky(a: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let p = a.len();
    let mut l = vec![vec![0.0; p]; p];
    for i in 0..p {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let d = a[i][i] - s;
                if d <= 0.0 || !d.is_finite() {
                    return None;
                }
                l[i][j] = d.sqrt();
            } else {
                l[i][j] = (a[i][j] - s) / l[j][j];
            }
        }
    }
    Some(l)
}

/// x with L Lᵀ x = b.
fn chol_solve(l: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let p = b.len();
    let mut z = vec![0.0; p];
    for i in 0..p {
        let s: f64 = (0..i).map(|k| l[i][k] * z[k]).sum();
        z[i] = (b[i] - s) / l[i][i];
    }
    let mut x = vec![0.0; p];
    for i in (0..p).rev() {
        let s: f64 = (i + 1..p).map(|k| l[k][i] * x[k]).sum();
        x[i] = (z[i] - s) / l[i][i];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One column, no penalty to speak of: least squares, y = 2x + 1 exactly.
    #[test]
    fn an_exact_line_is_recovered() {
        let x: Vec<Vec<f64>> = (0..6).map(|i| vec![i as f64]).collect();
        let y: Vec<f64> = (0..6).map(|i| 2.0 * i as f64 + 1.0).collect();
        let f = ridge_loo(&x, &y, &[1e-9]).unwrap();
        assert!((f.coefficients[0] - 2.0).abs() < 1e-8, "{f:?}");
        assert!((f.intercept - 1.0).abs() < 1e-8, "{f:?}");
        assert!((f.predict(&[10.0]) - 21.0).abs() < 1e-7);
    }
}
