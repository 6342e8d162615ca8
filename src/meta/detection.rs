//! Breakdown detection scored as the DBDC challenge scores it: every judge aspect whose levels
//! map onto the O/T/X labels (the rubric's level `human` ratings, or `--breakdown-levels`) and
//! that is compared with the items' per-rater breakdown labels, against a constant predictor of
//! the development half's mean distribution, and, with calibration, on the held-out half
//! (the dialogues' split of `--fit-w`, same seed).

use super::breakdown::{
    BreakdownMetrics, Distribution, LevelLabels, evaluate, raters_distribution,
};
use super::calibrate::{Calibration, fit};
use super::combine::item_in_dev_half;
use super::frame::Frame;
use crate::data::HumanRating;
use crate::data::dbdc3::BREAKDOWN;
use serde::Serialize;

#[derive(Clone, Debug, Default)]
pub struct BreakdownOptions {
    /// The gold label's threshold (the challenge's script: 0).
    pub threshold: f64,
    /// Fit a calibration on the development half and report the held-out half.
    pub calibrate: bool,
    /// Label maps for judge aspects whose rubric gives none, by aspect key.
    pub levels: Vec<(String, LevelLabels)>,
    /// Seed of the development/held-out split.
    pub seed: u64,
}

impl BreakdownOptions {
    /// Every label map names an aspect among `aspects` (the judge's); otherwise a usage error,
    /// never a setting silently ignored.
    pub fn check_aspects<'a>(
        &self,
        aspects: impl Iterator<Item = &'a str> + Clone,
    ) -> Result<(), super::MetaError> {
        for (aspect, _) in &self.levels {
            if !aspects.clone().any(|a| a == aspect) {
                let known: Vec<&str> = aspects.clone().collect();
                return Err(super::MetaError::Usage(format!(
                    "--breakdown-levels {aspect}:…: no judge aspect {aspect:?} (the judge's aspects: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )));
            }
        }
        Ok(())
    }
}

/// What predicted a row's distributions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Predictor {
    Judge,
    /// The judge after the calibration fitted on the development half.
    Calibrated,
    /// The development half's mean gold distribution, for every turn.
    Prior,
}

impl Predictor {
    pub fn name(self) -> &'static str {
        match self {
            Predictor::Judge => "judge",
            Predictor::Calibrated => "judge, calibrated",
            Predictor::Prior => "prior (dev mean)",
        }
    }
}

/// Which turns a row is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TurnSet {
    All,
    HeldOut,
}

impl TurnSet {
    pub fn name(self) -> &'static str {
        match self {
            TurnSet::All => "all",
            TurnSet::HeldOut => "held-out",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct BreakdownRow {
    pub predictor: Predictor,
    pub turns: TurnSet,
    pub metrics: BreakdownMetrics,
}

/// One judge aspect scored as a breakdown detector.
#[derive(Clone, Debug, Serialize)]
pub struct BreakdownEntry {
    /// The judge aspect, as the correlation tables name it.
    pub column: String,
    pub human: String,
    /// Which score means which label, as `2=O,1=T,0=X`.
    pub levels: String,
    pub threshold: f64,
    pub seed: u64,
    pub dev_turns: usize,
    pub held_out_turns: usize,
    /// The development half's mean O/T/X distribution.
    pub prior: Option<Distribution>,
    pub rows: Vec<BreakdownRow>,
    pub calibration: Option<Calibration>,
}

/// The raters' O/T/X distribution per item (None: no per-rater breakdown labels).
fn gold(frame: &Frame) -> Vec<Option<Distribution>> {
    frame
        .items
        .iter()
        .map(|i| match i.human.get(BREAKDOWN)? {
            HumanRating::PerRater(r) => raters_distribution(r),
            HumanRating::Single(_) => None,
        })
        .collect()
}

fn mean(ds: &[Distribution]) -> Option<Distribution> {
    if ds.is_empty() {
        return None;
    }
    let mut m = [0.0; 3];
    for d in ds {
        for k in 0..3 {
            m[k] += d[k];
        }
    }
    Some(m.map(|v| v / ds.len() as f64))
}

/// Every breakdown-detection entry of the frame (none without per-rater breakdown labels).
pub fn breakdown_detection(frame: &Frame, opts: &BreakdownOptions) -> Vec<BreakdownEntry> {
    if !frame.human_keys.iter().any(|k| k == BREAKDOWN) {
        return Vec::new();
    }
    let gold = gold(frame);
    let dev: Vec<bool> = frame
        .items
        .iter()
        .map(|i| item_in_dev_half(opts.seed, i))
        .collect();
    let mut out = Vec::new();
    for d in &frame.distributions {
        if !frame.aspect_pairs_with(&d.aspect, &d.human, BREAKDOWN) {
            continue;
        }
        let given = opts.levels.iter().find(|(a, _)| *a == d.aspect);
        let Some(labels) = LevelLabels::of_aspect(&d.levels, given.map(|(_, l)| l)) else {
            continue;
        };
        // (judge, gold, in the development half) per turn with both.
        let turns: Vec<(Distribution, Distribution, bool)> = d
            .values
            .iter()
            .zip(&gold)
            .zip(&dev)
            .filter_map(|((p, g), dev)| Some((labels.distribution(p.as_ref()?), (*g)?, *dev)))
            .collect();
        let split = |want_dev: bool| -> (Vec<Distribution>, Vec<Distribution>) {
            turns
                .iter()
                .filter(|t| t.2 == want_dev)
                .map(|t| (t.0, t.1))
                .unzip()
        };
        let (dev_pred, dev_gold) = split(true);
        let (test_pred, test_gold) = split(false);
        let (all_pred, all_gold): (Vec<_>, Vec<_>) = turns.iter().map(|t| (t.0, t.1)).unzip();
        let prior = mean(&dev_gold);
        let mut rows = Vec::new();
        let mut add = |predictor, set, predicted: &[Distribution], gold: &[Distribution]| {
            if let Some(metrics) = evaluate(predicted, gold, opts.threshold) {
                rows.push(BreakdownRow {
                    predictor,
                    turns: set,
                    metrics,
                });
            }
        };
        add(Predictor::Judge, TurnSet::All, &all_pred, &all_gold);
        if let Some(p) = prior {
            add(
                Predictor::Prior,
                TurnSet::All,
                &vec![p; all_gold.len()],
                &all_gold,
            );
        }
        let mut calibration = None;
        if opts.calibrate {
            let mut used: Vec<usize> = labels.levels.iter().map(|(_, l)| l.index()).collect();
            used.sort_unstable();
            used.dedup();
            calibration = fit(&dev_pred, &dev_gold, &used);
            add(Predictor::Judge, TurnSet::HeldOut, &test_pred, &test_gold);
            if let Some(c) = &calibration {
                let calibrated: Vec<Distribution> = test_pred.iter().map(|q| c.apply(q)).collect();
                add(
                    Predictor::Calibrated,
                    TurnSet::HeldOut,
                    &calibrated,
                    &test_gold,
                );
            }
            if let Some(p) = prior {
                add(
                    Predictor::Prior,
                    TurnSet::HeldOut,
                    &vec![p; test_gold.len()],
                    &test_gold,
                );
            }
        }
        let column = match &d.run {
            Some(r) => format!("judge[{r}] · {}", d.aspect),
            None => format!("judge · {}", d.aspect),
        };
        out.push(BreakdownEntry {
            column,
            human: BREAKDOWN.into(),
            levels: labels.spec(),
            threshold: opts.threshold,
            seed: opts.seed,
            dev_turns: dev_gold.len(),
            held_out_turns: test_gold.len(),
            prior,
            rows,
            calibration,
        });
    }
    out
}
