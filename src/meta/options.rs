//! A meta-evaluation's settings as a user gives them: their defaults and their checks, the same
//! for the command line's flags and the Python package's keyword arguments.

use super::alt_test::AltTestOptions;
use super::breakdown::LevelLabels;
use super::{Bootstrap, BreakdownOptions, MetaError, MetaOptions};

impl Default for MetaOptions {
    fn default() -> Self {
        MetaOptions {
            w: Some(10.0),
            combine_with: "F".into(),
            fit_w: false,
            bootstrap: Bootstrap {
                resamples: 1000,
                seed: 0,
                confidence: 0.95,
            },
            breakdown: BreakdownOptions {
                threshold: 0.0,
                calibrate: false,
                levels: Vec::new(),
                seed: 0,
            },
            alt_test: AltTestOptions::default(),
        }
    }
}

/// The largest |w| of the combination: BERTScore's deviations are below 1, judges' scales a
/// few points, so weights past this only drown the judge.
pub const MAX_W: f64 = 1e6;

impl MetaOptions {
    /// Each value in its range: a finite w, P/R/F to combine, a confidence level between 0 and
    /// 1, a gold-label threshold that is a share. A value out of range is a usage error naming
    /// its setting.
    pub fn check(&self) -> Result<(), MetaError> {
        let bad = |setting: &str, what: &str, value: String| {
            Err(MetaError::Usage(format!(
                "{setting}: `{value}` is not {what}"
            )))
        };
        if let Some(w) = self.w
            && !(w.is_finite() && w.abs() <= MAX_W)
        {
            return bad(
                "w",
                "a number between -1e6 and 1e6 (past that the judge's share of c + w (b - mean b) \
                 is below f64's precision and the statistics overflow)",
                w.to_string(),
            );
        }
        if !["P", "R", "F"].contains(&self.combine_with.as_str()) {
            return bad("combine_with", "P, R or F", self.combine_with.clone());
        }
        let c = self.bootstrap.confidence;
        if !(c > 0.0 && c < 1.0) {
            return bad(
                "confidence",
                "a level between 0 and 1 (e.g. 0.95)",
                c.to_string(),
            );
        }
        let t = self.breakdown.threshold;
        if !(0.0..=1.0).contains(&t) {
            return bad("dbdc_threshold", "a share between 0 and 1", t.to_string());
        }
        let e = self.alt_test.epsilon;
        if !(0.0..1.0).contains(&e) {
            return bad(
                "alt_test_epsilon",
                "a margin of 0 or more and below 1 (the paper: 0.1 crowd workers, 0.15 trained \
                 annotators, 0.2 experts)",
                e.to_string(),
            );
        }
        Ok(())
    }
}

impl MetaOptions {
    /// The settings given away from their defaults that only judge and BERTScore results use
    /// (the combination, breakdown detection): with pairwise results they would change nothing,
    /// so they are refused rather than ignored. Named as the command line names them.
    pub fn not_for_pairwise(&self) -> Vec<&'static str> {
        let d = MetaOptions::default();
        let mut set = Vec::new();
        if self.w != d.w {
            set.push(if self.w.is_none() {
                "--no-combine"
            } else {
                "--w"
            });
        }
        if self.combine_with != d.combine_with {
            set.push("--combine-with");
        }
        if self.fit_w {
            set.push("--fit-w");
        }
        if self.breakdown.calibrate {
            set.push("--calibrate");
        }
        if self.breakdown.threshold != d.breakdown.threshold {
            set.push("--dbdc-threshold");
        }
        if !self.breakdown.levels.is_empty() {
            set.push("--breakdown-levels");
        }
        if self.alt_test.epsilon != d.alt_test.epsilon {
            set.push("--alt-test-epsilon");
        }
        if self.alt_test.alignment != d.alt_test.alignment {
            set.push("--alt-test-alignment");
        }
        set
    }
}

/// `ASPECT:SCORE=LABEL,…` (e.g. `coherence:1=O,0=X`): breakdown labels for the levels of a
/// judge aspect whose rubric maps none.
pub fn parse_aspect_levels(s: &str) -> Result<(String, LevelLabels), String> {
    let (aspect, map) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}` is not ASPECT:SCORE=LABEL,… (e.g. coherence:1=O,0=X)"))?;
    if aspect.trim().is_empty() {
        return Err(format!("`{s}` names no aspect before ':'"));
    }
    Ok((aspect.trim().to_string(), LevelLabels::parse(map)?))
}
