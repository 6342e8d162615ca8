//! Strengths with the responses' style held equal, as Arena-Hard's style control: each
//! comparison's features (the normalised difference of the two responses' length, and of their
//! markdown where any response has some) enter the Davidson fit as covariates
//! (`davidson::fit_controlled`), standardised over the comparisons; the strengths that remain
//! are what the judge prefers beyond those features. Reported beside the raw strengths, with
//! bootstrap intervals over the same resampled contexts, and a warning where the two orders of
//! the systems differ.

use super::bootstrap::intervals_of;
use super::davidson::{self, Outcome};
use crate::meta::bias::response_length;
use serde::Serialize;

/// The covariates' names, in the order of `style_features`.
pub const FEATURES: [&str; 2] = ["length", "markdown"];

/// One system's strength with the style held equal.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ControlledStrength {
    pub system: String,
    pub strength: f64,
    pub interval: Option<[f64; 2]>,
}

/// The style-controlled fit of one aspect.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Controlled {
    /// The features held equal (a feature constant over the comparisons is left out).
    pub covariates: Vec<String>,
    /// Their coefficients β, per standard deviation of the feature: the log-odds a response
    /// gains by being one standard deviation longer (more markdown) than the other.
    pub coefficients: Vec<f64>,
    /// Davidson's ν of the controlled fit.
    pub tie_parameter: f64,
    /// Strongest first.
    pub systems: Vec<ControlledStrength>,
    /// Bootstrap resamples whose controlled fit had no finite maximum.
    pub bootstrap_failed: usize,
    /// Pairs of systems the raw and the controlled strengths order differently.
    pub reordered: Vec<[String; 2]>,
}

/// Markdown elements of a text: header, list and quote lines, and bold or code spans.
fn markdown_elements(text: &str) -> usize {
    let lines = (text.lines().map(str::trim_start))
        .filter(|l| {
            l.starts_with('#')
                || l.starts_with("- ")
                || l.starts_with("* ")
                || l.starts_with("+ ")
                || l.starts_with("> ")
                || (l
                    .split_once(". ")
                    .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())))
        })
        .count();
    lines + text.matches("**").count() / 2 + text.matches('`').count() / 2
}

/// (a − b) / (a + b), 0 when both are 0.
fn normalised_difference(a: usize, b: usize) -> f64 {
    if a + b == 0 {
        0.0
    } else {
        (a as f64 - b as f64) / (a + b) as f64
    }
}

/// The first response's features against the second's, in the order of `FEATURES`.
pub fn style_features(first: &str, second: &str) -> [f64; 2] {
    [
        normalised_difference(response_length(first), response_length(second)),
        normalised_difference(markdown_elements(first), markdown_elements(second)),
    ]
}

/// Each varying feature's index, mean and population standard deviation over the
/// comparisons: the standardisation of the covariates (a constant feature is left out).
pub fn scales(features: &[[f64; 2]]) -> Vec<(usize, f64, f64)> {
    let n = features.len() as f64;
    (0..FEATURES.len())
        .filter_map(|k| {
            let mean = features.iter().map(|f| f[k]).sum::<f64>() / n;
            let sd = (features.iter().map(|f| (f[k] - mean).powi(2)).sum::<f64>() / n).sqrt();
            (sd > 1e-12).then_some((k, mean, sd))
        })
        .collect()
}

/// The controlled fit of `by_context` (each context's outcomes with their raw features),
/// its intervals over `resamples` (none: no intervals); None when no feature varies. `systems` names the systems
/// by index; `raw` holds their raw strengths, for the reordered pairs.
pub fn fit(
    systems: &[&str],
    by_context: &[Vec<(Outcome, [f64; 2])>],
    resamples: &[Vec<usize>],
    level: f64,
    raw: &[Option<f64>],
) -> Option<Result<Controlled, davidson::FitError>> {
    let all: Vec<(Outcome, [f64; 2])> = by_context.iter().flatten().copied().collect();
    if all.is_empty() {
        return None;
    }
    let features: Vec<[f64; 2]> = all.iter().map(|(_, f)| *f).collect();
    // The standardisation is the whole data's, kept for every resample: a resample's fit
    // differs by its comparisons only.
    let scale = scales(&features);
    if scale.is_empty() {
        return None;
    }
    let n = systems.len();
    let fit_units = |units: &[(Outcome, [f64; 2])]| {
        let outcomes: Vec<Outcome> = units.iter().map(|(o, _)| *o).collect();
        let columns: Vec<Vec<f64>> = (scale.iter())
            .map(|(k, mean, sd)| units.iter().map(|(_, f)| (f[*k] - mean) / sd).collect())
            .collect();
        davidson::fit_controlled(n, &outcomes, &columns)
    };
    let fitted = match fit_units(&all) {
        Ok(f) => f,
        Err(e) => return Some(Err(e)),
    };
    let (intervals, bootstrap_failed) = if resamples.is_empty() {
        (vec![None; n], 0)
    } else {
        intervals_of(n, by_context, resamples, level, fit_units)
    };
    let mut reordered = Vec::new();
    for i in 0..n {
        for j in i + 1..n {
            let (Some(ri), Some(rj)) = (raw[i], raw[j]) else {
                continue;
            };
            let (ci, cj) = (fitted.strengths[i], fitted.strengths[j]);
            if (ri - rj) * (ci - cj) < 0.0 {
                reordered.push([systems[i].to_string(), systems[j].to_string()]);
            }
        }
    }
    let mut strengths: Vec<ControlledStrength> = (0..n)
        .map(|i| ControlledStrength {
            system: systems[i].to_string(),
            strength: fitted.strengths[i],
            interval: intervals[i],
        })
        .collect();
    strengths
        .sort_by(|a, b| (b.strength.total_cmp(&a.strength)).then_with(|| a.system.cmp(&b.system)));
    Some(Ok(Controlled {
        covariates: scale
            .iter()
            .map(|(k, _, _)| FEATURES[*k].to_string())
            .collect(),
        coefficients: fitted.coefficients,
        tie_parameter: fitted.tie,
        systems: strengths,
        bootstrap_failed,
        reordered,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn style_features_count_length_and_markdown() {
        let plain = "はい、そうです。";
        let marked = "## 答え\n- **はい**\n- そうです\n1. `code`";
        // Lengths 8 and 24 (white space left out); markdown 0 and 1 + 2 + 1 + 1 + 1 = 6.
        assert_eq!(response_length(marked), 24);
        assert_eq!(markdown_elements(marked), 6);
        assert_eq!(style_features(plain, marked), [-0.5, -1.0]);
        assert_eq!(style_features(plain, plain), [0.0, 0.0]);
    }
}
