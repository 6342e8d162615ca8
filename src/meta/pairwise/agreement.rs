//! The judge's verdicts against human preferences: given per pair (`preferences`), or derived
//! from the raters' absolute ratings of both responses — the higher mean rating wins, a
//! difference within the margin is a tie.
//! Agreement is counted as FastChat's `compute_agreement.py` counts it — with ties (three
//! verdicts), and without (only pairs where neither side says tie) — beside Cohen's κ over the
//! three verdicts and the rank correlation of the systems' strengths with their mean ratings.

use crate::data::Item;
use crate::results::verdicts::Verdict;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct HumanPreference {
    /// The human rating key.
    pub key: String,
    /// Where the human verdicts come from: the items' `ratings` of both responses (within
    /// `margin`, a tie), or `preferences` given per pair (each rater's vote counted).
    pub source: &'static str,
    pub margin: f64,
    /// Comparisons with a human verdict: pairs with both responses rated, or raters' votes.
    pub pairs: usize,
    /// Share of those where the judge's verdict is the humans'.
    pub agreement_with_ties: Option<f64>,
    /// The same over the pairs where neither says tie, and their number.
    pub agreement_without_ties: Option<f64>,
    pub pairs_without_ties: usize,
    /// Cohen's κ over first / second / tie.
    pub kappa: Option<f64>,
    /// Spearman's ρ between the systems' strengths and their mean human ratings.
    pub system_spearman: Option<f64>,
    pub systems: usize,
    /// How often the humans prefer the first system, the second, or neither.
    pub human_verdicts: [usize; 3],
}

/// The human verdict on two rated responses: the higher mean wins; within `margin`, a tie.
pub fn human_verdict(first: &Item, second: &Item, key: &str, margin: f64) -> Option<Verdict> {
    let (a, b) = (first.human.get(key)?.mean(), second.human.get(key)?.mean());
    Some(if (a - b).abs() <= margin {
        Verdict::Tie
    } else if a > b {
        Verdict::First
    } else {
        Verdict::Second
    })
}

/// Agreement of (judge, human) verdict pairs: with ties, without, Cohen's κ.
pub fn agreement(
    verdicts: &[(Verdict, Verdict)],
) -> (Option<f64>, Option<f64>, usize, Option<f64>) {
    let n = verdicts.len();
    if n == 0 {
        return (None, None, 0, None);
    }
    let same = verdicts.iter().filter(|(j, h)| j == h).count();
    let with_ties = same as f64 / n as f64;
    let decided: Vec<&(Verdict, Verdict)> = verdicts
        .iter()
        .filter(|(j, h)| *j != Verdict::Tie && *h != Verdict::Tie)
        .collect();
    let without = (!decided.is_empty())
        .then(|| decided.iter().filter(|(j, h)| j == h).count() as f64 / decided.len() as f64);
    let share = |pick: &dyn Fn(&(Verdict, Verdict)) -> Verdict, v: Verdict| {
        verdicts.iter().filter(|x| pick(x) == v).count() as f64 / n as f64
    };
    let expected: f64 = [Verdict::First, Verdict::Second, Verdict::Tie]
        .into_iter()
        .map(|v| share(&|x| x.0, v) * share(&|x| x.1, v))
        .sum();
    let kappa = (expected < 1.0).then(|| (with_ties - expected) / (1.0 - expected));
    (Some(with_ties), without, decided.len(), kappa)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Verdict::{First as F, Second as S, Tie as T};

    /// Ten pairs counted by hand.
    #[test]
    fn agreement_and_kappa_by_hand() {
        let v = [
            (F, F),
            (F, F),
            (F, S),
            (S, S),
            (S, T),
            (T, T),
            (T, F),
            (F, F),
            (S, S),
            (T, S),
        ];
        let (with_ties, without, decided, kappa) = agreement(&v);
        // Same verdict: pairs 1, 2, 4, 6, 8, 9 → 6 of 10.
        assert_eq!(with_ties, Some(0.6));
        // Neither a tie: pairs 1, 2, 3, 4, 8, 9 → 5 of 6 agree.
        assert_eq!(decided, 6);
        assert!((without.unwrap() - 5.0 / 6.0).abs() < 1e-15);
        // Judge: F 4, S 3, T 3; humans: F 4, S 4, T 2. p_e = .16 + .12 + .06 = .34;
        // κ = (.6 − .34) / (1 − .34) = .26 / .66.
        assert!((kappa.unwrap() - 0.26 / 0.66).abs() < 1e-12, "{kappa:?}");
        assert_eq!(agreement(&[]), (None, None, 0, None));
        // Every verdict the same on both sides: κ is undefined (p_e = 1).
        assert_eq!(agreement(&[(F, F), (F, F)]).3, None);
    }

    #[test]
    fn human_verdicts_follow_the_mean_and_the_margin() {
        let mut a = crate::prompt::sample_item();
        let mut b = a.clone();
        a.human.insert(
            "x".into(),
            crate::data::HumanRating::PerRater(vec![1.0, 0.5]),
        );
        b.human
            .insert("x".into(), crate::data::HumanRating::Single(0.5));
        assert_eq!(human_verdict(&a, &b, "x", 0.0), Some(F));
        assert_eq!(human_verdict(&b, &a, "x", 0.0), Some(S));
        assert_eq!(human_verdict(&a, &b, "x", 0.25), Some(T));
        assert_eq!(human_verdict(&a, &b, "y", 0.0), None);
    }
}
