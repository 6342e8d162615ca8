//! AlpacaEval 2's length-controlled win rate of each system against the run's baseline
//! (Dubois et al. 2024, `alpaca_eval.metrics.glm_winrate`, formula `length_controlled_v1`):
//! a logistic model of the judge's preference for the system over the baseline on each context,
//!
//!   logit P(system wins) = θ + φ · tanh(Δlen / sd(Δlen)) + ψ · γ_context,
//!
//! fitted to the order-averaged probabilities (a tie counting half) with an L1 penalty chosen
//! by five-fold cross-validated log loss (`meta::logistic`), then predicted with the length
//! difference set to zero and averaged over the contexts: the win rate the judge would give if
//! the system's responses were as long as the baseline's. Δlen is the system's response length
//! minus the baseline's (characters without white space, as every length in hyoka).
//!
//! γ, a context's difficulty, is in AlpacaEval the logit of the mean preference over the
//! leaderboard's models; here it is the logit of the mean preference of the run's other systems
//! on that context (kept within logit 0.01 … logit 0.99; 0, an even chance, where no other
//! system answered it), so that a system's own verdicts never enter its difficulty. With one
//! system against the baseline the term is 0 and its coefficient with it. AlpacaEval's
//! regularisation towards its deliberately verbose and concise baselines needs judgements of
//! those and is not applied.

use super::davidson::quantile;
use crate::meta::logistic::{self, Row};
use serde::Serialize;

/// Folds of the cross-validation that chooses the penalty (AlpacaEval's).
pub const FOLDS: usize = 5;

/// A context's mean preference of the other systems is kept within these before its logit.
const DIFFICULTY_CLIP: f64 = 0.01;

/// One pair of a system and the baseline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BaselineComparison {
    pub context: usize,
    /// The system's index (never the baseline's).
    pub system: usize,
    /// P(the system's response is better) + P(tie) / 2, order-averaged.
    pub preference: f64,
    /// The system's response length minus the baseline's.
    pub length_difference: f64,
}

/// The fitted model's coefficients.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Coefficients {
    /// φ, on tanh of the standardised length difference.
    pub length: f64,
    /// ψ, on the context's difficulty.
    pub difficulty: f64,
    /// θ.
    pub intercept: f64,
}

/// One system's raw and length-controlled win rates against the baseline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LengthControlledRate {
    pub system: String,
    /// Pairs with the baseline.
    pub pairs: usize,
    /// Mean P(win) + P(tie) / 2 over those pairs (AlpacaEval's win rate, as a fraction).
    pub win_rate: f64,
    pub win_rate_interval: Option<[f64; 2]>,
    /// The model's mean prediction with no length difference (None: `error` says why).
    pub length_controlled_win_rate: Option<f64>,
    /// Percentile bootstrap interval over resampled contexts, the penalty held at `penalty`.
    pub interval: Option<[f64; 2]>,
    /// The inverse L1 penalty C chosen by cross-validation.
    pub penalty: Option<f64>,
    pub coefficients: Option<Coefficients>,
    /// The two rates differ by more than AlpacaEval's warning threshold (10 points, or a
    /// quarter of the way to 0 or 100, whichever is more): the fit may have failed.
    pub extreme_change: bool,
    pub error: Option<String>,
}

/// The length-controlled win rates of one aspect.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LengthControlled {
    pub baseline: String,
    /// Whether contexts' difficulty came from other systems (false: one system was compared
    /// with the baseline, and the model has no difficulty term).
    pub difficulty_from_other_systems: bool,
    /// Highest length-controlled win rate first.
    pub systems: Vec<LengthControlledRate>,
}

fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}

/// AlpacaEval's `get_is_extreme_changes` on rates in percent.
fn extreme_change(raw: f64, controlled: f64) -> bool {
    let (raw, controlled) = (raw * 100.0, controlled * 100.0);
    let too_small = controlled < (raw - raw / 4.0).min(raw - 10.0);
    let too_large = controlled > (raw + (100.0 - raw) / 4.0).max(raw + 10.0);
    too_small || too_large
}

/// Each context's difficulty for `system`: the other systems' mean preference there.
fn difficulties(comparisons: &[BaselineComparison], contexts: usize, system: usize) -> Vec<f64> {
    let mut sums = vec![(0.0, 0usize); contexts];
    for c in comparisons.iter().filter(|c| c.system != system) {
        sums[c.context].0 += c.preference;
        sums[c.context].1 += 1;
    }
    sums.iter()
        .map(|&(sum, n)| {
            if n == 0 {
                0.0
            } else {
                logit((sum / n as f64).clamp(DIFFICULTY_CLIP, 1.0 - DIFFICULTY_CLIP))
            }
        })
        .collect()
}

fn percentile_interval(draws: &[f64], level: f64) -> Option<[f64; 2]> {
    let tail = (1.0 - level) / 2.0;
    (!draws.is_empty()).then(|| [quantile(draws, tail), quantile(draws, 1.0 - tail)])
}

/// The mean prediction of `beta` on `rows` with the length term at zero.
fn controlled_rate(rows: &[Row], beta: &Row) -> f64 {
    let total: f64 = rows
        .iter()
        .map(|x| logistic::logistic(beta[1] * x[1] + beta[2] * x[2]))
        .sum();
    total / rows.len() as f64
}

/// One system's rates from its comparisons (one per context, in context order) and the
/// contexts' difficulties.
fn rate_of(
    name: &str,
    own: &[&BaselineComparison],
    difficulty: &[f64],
    resamples: &[Vec<usize>],
    level: f64,
) -> LengthControlledRate {
    let targets: Vec<f64> = own.iter().map(|c| c.preference).collect();
    let win_rate = targets.iter().sum::<f64>() / targets.len().max(1) as f64;
    let mut rate = LengthControlledRate {
        system: name.to_string(),
        pairs: own.len(),
        win_rate,
        win_rate_interval: None,
        length_controlled_win_rate: None,
        interval: None,
        penalty: None,
        coefficients: None,
        extreme_change: false,
        error: None,
    };
    // Each resample's comparisons: a context drawn k times counts k times.
    let by_context: std::collections::HashMap<usize, usize> = (own.iter().enumerate())
        .map(|(k, c)| (c.context, k))
        .collect();
    let drawn: Vec<Vec<usize>> = (resamples.iter())
        .map(|r| {
            r.iter()
                .filter_map(|c| by_context.get(c).copied())
                .collect()
        })
        .filter(|rows: &Vec<usize>| !rows.is_empty())
        .collect();
    let raw_draws: Vec<f64> = (drawn.iter())
        .map(|rows| rows.iter().map(|&k| targets[k]).sum::<f64>() / rows.len() as f64)
        .collect();
    rate.win_rate_interval = percentile_interval(&raw_draws, level);
    let n = own.len();
    let mean = own.iter().map(|c| c.length_difference).sum::<f64>() / n.max(1) as f64;
    let variance = (own.iter())
        .map(|c| (c.length_difference - mean).powi(2))
        .sum::<f64>()
        / (n.max(2) - 1) as f64;
    let sd = variance.sqrt();
    if n < FOLDS {
        rate.error = Some(format!(
            "{n} pairs with the baseline: the penalty's cross-validation needs at least {FOLDS}"
        ));
        return rate;
    }
    if sd == 0.0 {
        rate.error = Some(
            "its responses' length difference to the baseline's does not vary: there is no length effect to fit"
                .into(),
        );
        return rate;
    }
    let rows: Vec<Row> = (own.iter())
        .map(|c| {
            [
                (c.length_difference / sd).tanh(),
                difficulty[c.context],
                1.0,
            ]
        })
        .collect();
    let fitted =
        match logistic::cross_validated(&rows, &targets, FOLDS, &logistic::default_penalties()) {
            Ok(f) => f,
            Err(e) => {
                rate.error = Some(e.to_string());
                return rate;
            }
        };
    let controlled = controlled_rate(&rows, &fitted.coefficients);
    let draws: Vec<f64> = (drawn.iter())
        .map(|picked| {
            let rows: Vec<Row> = picked.iter().map(|&k| rows[k]).collect();
            let targets: Vec<f64> = picked.iter().map(|&k| targets[k]).collect();
            controlled_rate(&rows, &logistic::fit(&rows, &targets, fitted.penalty))
        })
        .collect();
    rate.interval = percentile_interval(&draws, level);
    rate.length_controlled_win_rate = Some(controlled);
    rate.penalty = Some(fitted.penalty);
    let [length, difficulty, intercept] = fitted.coefficients;
    rate.coefficients = Some(Coefficients {
        length,
        difficulty,
        intercept,
    });
    rate.extreme_change = extreme_change(win_rate, controlled);
    rate
}

/// The length-controlled win rates of every system of `systems` (by index) but `baseline`
/// against it, from `comparisons` over `contexts` contexts; intervals over `resamples` (lists
/// of context indices; none: no intervals).
pub fn fit(
    systems: &[&str],
    baseline: usize,
    comparisons: &[BaselineComparison],
    contexts: usize,
    resamples: &[Vec<usize>],
    level: f64,
) -> LengthControlled {
    let compared: std::collections::BTreeSet<usize> =
        comparisons.iter().map(|c| c.system).collect();
    let mut rates: Vec<LengthControlledRate> = (compared.iter())
        .map(|&s| {
            let mut own: Vec<&BaselineComparison> =
                comparisons.iter().filter(|c| c.system == s).collect();
            own.sort_by_key(|c| c.context);
            let difficulty = difficulties(comparisons, contexts, s);
            rate_of(systems[s], &own, &difficulty, resamples, level)
        })
        .collect();
    rates.sort_by(|a, b| {
        let key =
            |r: &LengthControlledRate| r.length_controlled_win_rate.unwrap_or(f64::NEG_INFINITY);
        key(b)
            .total_cmp(&key(a))
            .then_with(|| a.system.cmp(&b.system))
    });
    LengthControlled {
        baseline: systems[baseline].to_string(),
        difficulty_from_other_systems: compared.len() > 1,
        systems: rates,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpaca_evals_warning_thresholds() {
        // From 20 %: below 10 % (20 − 10) or above 40 % (20 + 80/4) warns.
        assert!(!extreme_change(0.20, 0.11) && extreme_change(0.20, 0.09));
        assert!(!extreme_change(0.20, 0.39) && extreme_change(0.20, 0.41));
        // From 50 %: below 37.5 % or above 62.5 %.
        assert!(!extreme_change(0.50, 0.38) && extreme_change(0.50, 0.37));
    }

    #[test]
    fn a_systems_difficulty_is_the_others_mean_logit() {
        let c = |context, system, preference| BaselineComparison {
            context,
            system,
            preference,
            length_difference: 0.0,
        };
        let comparisons = [
            c(0, 1, 0.9),
            c(0, 2, 0.5),
            c(0, 3, 0.7),
            c(1, 1, 1.0),
            c(1, 2, 1.0),
        ];
        let d = difficulties(&comparisons, 3, 1);
        assert!((d[0] - logit(0.6)).abs() < 1e-15);
        assert!((d[1] - logit(0.99)).abs() < 1e-15);
        assert_eq!(d[2], 0.0);
    }
}
