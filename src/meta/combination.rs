//! The paper's open question: does a combination of every score column a run has (each judge
//! aspect's expected score, BERTScore P/R/F, the likelihood scorers) follow the raters better
//! than the best single column? A ridge regression (`ridge`) is fitted on the development half
//! of the dialogues only — its columns standardised there, its penalty chosen there by
//! leave-one-out error — and both it and the column best on the development half are reported
//! on the held-out half, with intervals.

use super::combine::item_in_dev_half;
use super::frame::{Family, Frame};
use super::levels::{Bootstrap, Level, Stat, correlate};
use super::ridge::{ALPHAS, ridge_loo};
use super::stats::spearman_r;

/// The column best on the development half, and how it does on the held-out half.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BestSingle {
    pub column: String,
    pub dev_spearman: f64,
    pub test: Option<Stat>,
}

/// The fitted combination for one human aspect.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FittedCombination {
    pub human: String,
    /// The columns combined (those constant on the development half left out).
    pub columns: Vec<String>,
    /// The ridge penalty chosen on the development half, and each column's coefficient per
    /// standard deviation of the column there.
    pub alpha: f64,
    pub coefficients: Vec<f64>,
    pub intercept: f64,
    /// Items with every column and a rating, in each half.
    pub dev_items: usize,
    pub test_items: usize,
    /// Spearman's ρ of the combination with the ratings on the held-out half.
    pub test: Option<Stat>,
    pub best_single: Option<BestSingle>,
    /// Whether the combination's held-out ρ is above the best single column's.
    pub beats_best_single: Option<bool>,
}

/// The combination of every score column for each human aspect, fitted on the development half
/// of `seed`'s split (as `--fit-w`'s); none where fewer than two columns vary, or a half has
/// too few items (the development half needs more items than columns, plus 3).
pub fn fitted_combinations(frame: &Frame, boot: &Bootstrap) -> Vec<FittedCombination> {
    let columns: Vec<_> = (frame.columns.iter())
        .filter(|c| {
            matches!(
                c.family,
                Family::JudgeExpected | Family::BertScore | Family::Likelihood
            )
        })
        .collect();
    if columns.len() < 2 {
        return Vec::new();
    }
    let dev: Vec<bool> = (frame.items.iter())
        .map(|i| item_in_dev_half(boot.seed, i))
        .collect();
    let mut out = Vec::new();
    for key in &frame.human_keys {
        let human = frame.human(key);
        // Complete cases: every column and a rating.
        let complete: Vec<usize> = (0..frame.items.len())
            .filter(|&i| human[i].is_some() && columns.iter().all(|c| c.values[i].is_some()))
            .collect();
        let (dev_rows, test_rows): (Vec<usize>, Vec<usize>) =
            complete.iter().partition(|&&i| dev[i]);
        let value = |c: usize, i: usize| columns[c].values[i].expect("a complete case");
        // Standardised on the development half; a column constant there says nothing.
        let scales: Vec<(usize, f64, f64)> = (0..columns.len())
            .filter_map(|c| {
                let n = dev_rows.len() as f64;
                let mean = dev_rows.iter().map(|&i| value(c, i)).sum::<f64>() / n;
                let var = dev_rows
                    .iter()
                    .map(|&i| (value(c, i) - mean).powi(2))
                    .sum::<f64>()
                    / n;
                (var.sqrt() > 1e-12).then_some((c, mean, var.sqrt()))
            })
            .collect();
        if scales.len() < 2 || dev_rows.len() < scales.len() + 3 || test_rows.len() < 3 {
            continue;
        }
        let row = |i: usize| -> Vec<f64> {
            (scales.iter())
                .map(|(c, mean, sd)| (value(*c, i) - mean) / sd)
                .collect()
        };
        let x: Vec<Vec<f64>> = dev_rows.iter().map(|&i| row(i)).collect();
        let y: Vec<f64> = dev_rows.iter().map(|&i| human[i].expect("rated")).collect();
        let Some(fit) = ridge_loo(&x, &y, &ALPHAS) else {
            continue;
        };
        // Only the held-out items carry a value: the statistics are the held-out half's.
        let held_out = |value_of: &dyn Fn(usize) -> f64| -> Vec<Option<f64>> {
            let mut v = vec![None; frame.items.len()];
            for &i in &test_rows {
                v[i] = Some(value_of(i));
            }
            v
        };
        let spearman_on = |values: &[Option<f64>], name: &str| {
            let cell_key = format!("combination\u{0}{name}\u{0}{key}");
            correlate(
                Level::Item,
                &frame.items,
                values,
                &human,
                boot,
                &cell_key,
                &|| {},
            )
            .and_then(|cell| cell.spearman)
        };
        let test = spearman_on(&held_out(&|i| fit.predict(&row(i))), "ridge");
        let best_single = (scales.iter())
            .filter_map(|(c, _, _)| {
                let xs: Vec<f64> = dev_rows.iter().map(|&i| value(*c, i)).collect();
                spearman_r(&xs, &y).map(|r| (*c, r))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(c, dev_spearman)| {
                let label = frame.column_title(columns[c]);
                BestSingle {
                    test: spearman_on(&held_out(&|i| value(c, i)), &label),
                    column: label,
                    dev_spearman,
                }
            });
        let beats_best_single = match (&test, best_single.as_ref().and_then(|b| b.test)) {
            (Some(t), Some(b)) => Some(t.r > b.r),
            _ => None,
        };
        out.push(FittedCombination {
            human: key.clone(),
            columns: (scales.iter())
                .map(|(c, _, _)| frame.column_title(columns[*c]))
                .collect(),
            alpha: fit.alpha,
            coefficients: fit.coefficients,
            intercept: fit.intercept,
            dev_items: dev_rows.len(),
            test_items: test_rows.len(),
            test,
            best_single,
            beats_best_single,
        });
    }
    out
}

/// The section of summary.md: per human aspect the combination against the best single
/// column on the held-out half, and whether it beats it.
pub fn combination_markdown(fits: &[FittedCombination]) -> String {
    use super::markdown::{format_r, md_text};
    let stat = |s: Option<Stat>| match s {
        Some(Stat {
            r,
            ci: Some([lo, hi]),
            ..
        }) => format!("{r:.3} [{lo:.3}, {hi:.3}]"),
        Some(s) => format!("{:.3}", s.r),
        None => "—".into(),
    };
    let mut md = String::from(
        "\n## A combination of every score column (ridge regression fitted on the development half)\n\n\
         Every judge aspect's expected score, BERTScore and likelihood column, standardised on the \
         development half of the dialogues; the penalty chosen there by leave-one-out error. \
         Held-out Spearman ρ [95% CI] of the combination and of the column best on the \
         development half.\n\n\
         | human | columns | α | dev/test items | combination (held out) | best single column | its ρ (held out) | combination better |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for f in fits {
        let (best, best_test) = match &f.best_single {
            Some(b) => (md_text(&b.column), stat(b.test)),
            None => ("—".into(), "—".into()),
        };
        let better = match f.beats_best_single {
            Some(true) => "yes",
            Some(false) => "no",
            None => "—",
        };
        md.push_str(&format!(
            "| {} | {} | {} | {}/{} | {} | {best} | {best_test} | {better} |\n",
            md_text(&f.human),
            f.columns.len(),
            f.alpha,
            f.dev_items,
            f.test_items,
            stat(f.test),
        ));
    }
    for f in fits {
        let weights: Vec<String> = (f.columns.iter().zip(&f.coefficients))
            .map(|(c, w)| format!("{} {w:+.3}", md_text(c)))
            .collect();
        md.push_str(&format!(
            "\n{}: {} (intercept {}).\n",
            md_text(&f.human),
            weights.join(", "),
            format_r(Some(f.intercept))
        ));
        if f.beats_best_single == Some(false) {
            md.push_str(
                "The combination does not beat the best single column on the held-out half.\n",
            );
        }
    }
    md
}
