//! What a pairwise judge's verdicts follow besides the responses' quality: the order they are
//! shown in (verdicts that reverse when the order is swapped) and their length (the share of
//! decided pairs the longer response wins, with scipy's exact binomial test against one half).

use crate::meta::bias::response_length;
use crate::meta::stats::ln_gamma;
use crate::results::verdicts::{PairVerdict, Verdict};
use serde::Serialize;

/// How often the longer response wins.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LongerWins {
    /// Pairs with a winner (the verdict of both orders averaged) whose responses differ in
    /// length (characters without white space).
    pub decided: usize,
    pub longer_won: usize,
    /// longer_won / decided (None: no such pair).
    pub share: Option<f64>,
    /// Two-sided p-value of the exact binomial test of the share against 1/2
    /// (`scipy.stats.binomtest(longer_won, decided, 0.5)`).
    pub p: Option<f64>,
}

/// The share of pairs whose most probable verdict reverses when the order is swapped
/// (`PairVerdict::flipped`).
pub fn flip_rate<'a>(verdicts: impl ExactSizeIterator<Item = &'a PairVerdict>) -> f64 {
    let pairs = verdicts.len();
    let flips = verdicts.filter(|v| v.flipped()).count();
    flips as f64 / pairs.max(1) as f64
}

/// The verdicts against the responses' length: each pair's first and second system's
/// responses and its verdict.
pub fn longer_wins<'a>(
    pairs: impl Iterator<Item = (&'a str, &'a str, &'a PairVerdict)>,
) -> LongerWins {
    let (mut decided, mut longer_won) = (0, 0);
    for (first, second, verdict) in pairs {
        let (first, second) = (response_length(first), response_length(second));
        let winner_is_first = match verdict.preference().verdict() {
            Verdict::First => true,
            Verdict::Second => false,
            Verdict::Tie => continue,
        };
        if first == second {
            continue;
        }
        decided += 1;
        longer_won += usize::from(winner_is_first == (first > second));
    }
    LongerWins {
        decided,
        longer_won,
        share: (decided > 0).then(|| longer_won as f64 / decided as f64),
        p: (decided > 0).then(|| binomial_test_half(longer_won, decided)),
    }
}

/// Two-sided p-value of `k` successes in `n` trials of probability 1/2, as scipy's
/// `binomtest(k, n, 0.5).pvalue`: the probability of an outcome as unlikely as `k` or less
/// (the distribution is symmetric: both tails beyond min(k, n − k)).
pub fn binomial_test_half(k: usize, n: usize) -> f64 {
    if 2 * k == n {
        return 1.0;
    }
    let m = k.min(n - k);
    let ln_n = ln_gamma(n as f64 + 1.0);
    let ln_half = -(n as f64) * std::f64::consts::LN_2;
    let tail: f64 = (0..=m)
        .map(|i| (ln_n - ln_gamma(i as f64 + 1.0) - ln_gamma((n - i) as f64 + 1.0) + ln_half).exp())
        .sum();
    (2.0 * tail).min(1.0)
}
