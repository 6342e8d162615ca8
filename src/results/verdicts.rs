//! A pairwise judge's result for one aspect of one pair: the verdict distribution read in each
//! order of the two responses, in terms of the pair's systems, and what the two orders say
//! together.

use serde::{Deserialize, Serialize};

/// Probabilities of the three verdicts, normalised over the rubric's verdicts, and the mass
/// the model put elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerdictProbs {
    /// The pair's first system's response is better.
    pub first: f64,
    /// The pair's second system's response is better.
    pub second: f64,
    /// Neither (0 where the rubric allows no tie).
    pub tie: f64,
    pub off_scale: f64,
}

/// A verdict about a pair's systems.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    First,
    Second,
    Tie,
}

impl VerdictProbs {
    /// The most probable verdict; a tie where the two systems are equally probable and no
    /// less than a tie (so that swapping the systems swaps the verdict).
    pub fn verdict(&self) -> Verdict {
        if self.first > self.second && self.first > self.tie {
            Verdict::First
        } else if self.second > self.first && self.second > self.tie {
            Verdict::Second
        } else {
            Verdict::Tie
        }
    }

    /// The same probabilities with the systems' roles exchanged.
    pub fn swapped(&self) -> VerdictProbs {
        VerdictProbs {
            first: self.second,
            second: self.first,
            ..*self
        }
    }
}

/// One aspect's verdicts for one pair, read in both orders.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairVerdict {
    /// The first system's response shown first.
    pub first_shown_first: VerdictProbs,
    /// The second system's response shown first.
    pub second_shown_first: VerdictProbs,
}

impl PairVerdict {
    /// The two orders averaged: the preference with the position of the responses cancelled.
    pub fn preference(&self) -> VerdictProbs {
        let (a, b) = (&self.first_shown_first, &self.second_shown_first);
        VerdictProbs {
            first: (a.first + b.first) / 2.0,
            second: (a.second + b.second) / 2.0,
            tie: (a.tie + b.tie) / 2.0,
            off_scale: (a.off_scale + b.off_scale) / 2.0,
        }
    }

    /// Whether the most probable verdict is the same in both orders.
    pub fn consistent(&self) -> bool {
        self.first_shown_first.verdict() == self.second_shown_first.verdict()
    }

    /// Whether the most probable verdict reverses with the order: one order's winner is the
    /// other order's loser (a tie in one order is inconsistent, not a flip).
    pub fn flipped(&self) -> bool {
        matches!(
            (
                self.first_shown_first.verdict(),
                self.second_shown_first.verdict()
            ),
            (Verdict::First, Verdict::Second) | (Verdict::Second, Verdict::First)
        )
    }

    /// P(the response shown first wins) − P(the one shown second wins), averaged over the
    /// orders: 0 for a judge that does not care where a response stands.
    pub fn position_bias(&self) -> f64 {
        let (a, b) = (&self.first_shown_first, &self.second_shown_first);
        ((a.first - a.second) + (b.second - b.first)) / 2.0
    }

    /// The same verdicts for the pair with its systems exchanged.
    pub fn swapped(&self) -> PairVerdict {
        PairVerdict {
            first_shown_first: self.second_shown_first.swapped(),
            second_shown_first: self.first_shown_first.swapped(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(first: f64, second: f64, tie: f64) -> VerdictProbs {
        VerdictProbs {
            first,
            second,
            tie,
            off_scale: 0.0,
        }
    }

    #[test]
    fn orders_combine_by_hand() {
        // Shown first, the first system wins 0.7 : 0.2; shown second, it still wins 0.5 : 0.4.
        let v = PairVerdict {
            first_shown_first: p(0.7, 0.2, 0.1),
            second_shown_first: p(0.5, 0.4, 0.1),
        };
        let pref = v.preference();
        assert!((pref.first - 0.6).abs() < 1e-15 && (pref.second - 0.3).abs() < 1e-15);
        assert_eq!(pref.verdict(), Verdict::First);
        assert!(v.consistent());
        // Shown first: +0.5 for the first position; shown second: 0.4 − 0.5 = −0.1. Mean 0.2.
        assert!((v.position_bias() - 0.2).abs() < 1e-15);
        let s = v.swapped();
        assert_eq!(s.preference().verdict(), Verdict::Second);
        assert_eq!(s.position_bias(), v.position_bias());
        // A judge that always prefers the response shown first: inconsistent, and its
        // averaged preference is a tie between the systems.
        let biased = PairVerdict {
            first_shown_first: p(0.8, 0.2, 0.0),
            second_shown_first: p(0.2, 0.8, 0.0),
        };
        assert!(!biased.consistent());
        assert_eq!(biased.preference().verdict(), Verdict::Tie);
        assert!((biased.position_bias() - 0.6).abs() < 1e-15);
    }
}
