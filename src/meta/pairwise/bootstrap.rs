//! Percentile bootstrap intervals of the strengths over resampled contexts.

use super::davidson;

/// `count` resamples (with replacement) of `contexts` contexts, drawn from `seed`.
pub fn resample_contexts(contexts: usize, count: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = crate::rng::SplitMix64(seed);
    (0..count)
        .map(|_| (0..contexts).map(|_| rng.below(contexts)).collect())
        .collect()
}

/// Percentile intervals of each system's strength over the fits of `resamples` (lists of
/// context indices into `by_context`), and how many resamples had no finite fit. A system
/// gets no interval when no resample's fit succeeded.
pub fn bootstrap_intervals(
    systems: usize,
    by_context: &[Vec<davidson::Outcome>],
    resamples: &[Vec<usize>],
    level: f64,
) -> (Vec<Option<[f64; 2]>>, usize) {
    let fit = |outcomes: &[davidson::Outcome]| davidson::fit(systems, outcomes);
    intervals_of(systems, by_context, resamples, level, fit)
}

/// `bootstrap_intervals` of any fit over a context's units (outcomes, or outcomes with their
/// covariates).
pub fn intervals_of<T: Clone>(
    systems: usize,
    by_context: &[Vec<T>],
    resamples: &[Vec<usize>],
    level: f64,
    fit: impl Fn(&[T]) -> Result<davidson::Fit, davidson::FitError>,
) -> (Vec<Option<[f64; 2]>>, usize) {
    let mut draws: Vec<Vec<f64>> = vec![Vec::new(); systems];
    let mut failed = 0;
    for resample in resamples {
        let units: Vec<T> = resample
            .iter()
            .flat_map(|&c| by_context[c].iter().cloned())
            .collect();
        match fit(&units) {
            Ok(f) => {
                for (d, s) in draws.iter_mut().zip(f.strengths) {
                    d.push(s);
                }
            }
            Err(_) => failed += 1,
        }
    }
    let tail = (1.0 - level) / 2.0;
    let intervals = draws
        .iter()
        .map(|d| {
            (!d.is_empty()).then(|| {
                [
                    davidson::quantile(d, tail),
                    davidson::quantile(d, 1.0 - tail),
                ]
            })
        })
        .collect();
    (intervals, failed)
}
