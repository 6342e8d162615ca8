//! The paper's combination of a judge score with BERTScore, `c_i + w (b_i − mean(b))`, and the
//! choice of w on a seeded development split of the dialogues.

use super::MetaError;
use super::frame::{Column, Family, Frame};
use super::stats::spearman_r;
use crate::rng::keyed_hash;

/// The weights `--fit-w` tries (the paper's w = 10 among them).
pub const W_GRID: [f64; 13] = [
    0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0,
];

fn combine(c: &[Option<f64>], b: &[Option<f64>], mean_b: f64, w: f64) -> Vec<Option<f64>> {
    c.iter()
        .zip(b)
        .map(|(c, b)| Some((*c)? + w * ((*b)? - mean_b)))
        .collect()
}

fn mean_of(b: &[Option<f64>]) -> Option<f64> {
    let v: Vec<f64> = b.iter().flatten().copied().collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The BERTScore column `which` (P, R or F) of the first BERTScore file read.
fn bertscore_column<'f>(frame: &'f Frame, which: &str) -> Result<&'f Column, MetaError> {
    frame
        .columns
        .iter()
        .find(|c| c.family == Family::BertScore && c.statistic.name() == which)
        .ok_or_else(|| {
            MetaError::Input(format!(
                "combining needs BERTScore {which} results (pass a `hyoka bertscore` output)"
            ))
        })
}

/// Add "combined" columns for every judge column: c + w (b − mean b), b = BERTScore `which`,
/// mean over all items that have one. Returns mean(b).
pub fn add_combined(frame: &mut Frame, w: f64, which: &str) -> Result<f64, MetaError> {
    let b = bertscore_column(frame, which)?.values.clone();
    let mean_b = mean_of(&b).ok_or_else(|| MetaError::Input("no item has a BERTScore".into()))?;
    let judges: Vec<Column> = frame
        .columns
        .iter()
        .filter(|c| matches!(c.family, Family::JudgeArgmax | Family::JudgeExpected))
        .cloned()
        .collect();
    for c in judges {
        let label = Column::label_of(Family::Combined, c.run.as_deref(), c.statistic);
        frame.columns.push(Column {
            label: format!("{label} (w={w})"),
            family: Family::Combined,
            statistic: c.statistic,
            run: c.run.clone(),
            aspect: c.aspect.clone(),
            human: c.human.clone(),
            values: combine(&c.values, &b, mean_b, w),
        });
    }
    Ok(mean_b)
}

/// The result of choosing w for one (judge column, human aspect).
#[derive(Clone, Debug, serde::Serialize)]
pub struct FitW {
    pub column: String,
    pub human: String,
    pub w: f64,
    /// Spearman on the development half at the chosen w.
    pub dev_spearman: f64,
    /// Spearman on the held-out half: combined at the chosen w, the judge alone, BERTScore alone.
    pub test_combined: Option<f64>,
    pub test_judge: Option<f64>,
    pub test_bertscore: Option<f64>,
    pub dev_items: usize,
    pub test_items: usize,
}

/// Whether a dialogue is in the development half. The key is salted: `--sample-dialogues` ranks
/// dialogues by the unsalted hash with the same seed, and a sample of the lowest hashes would
/// otherwise fall entirely into one half.
pub fn in_dev_half(seed: u64, dialogue: &str) -> bool {
    keyed_hash(seed, &format!("fit-w\u{0}{dialogue}")) < u64::MAX / 2
}

/// Whether an item's dialogue (the item alone when it names none) is in the development half.
pub fn item_in_dev_half(seed: u64, item: &crate::data::Item) -> bool {
    in_dev_half(seed, item.dialogue.as_deref().unwrap_or(&item.id))
}

/// Pick w from [`W_GRID`] by Spearman on a development half of the dialogues (a dialogue's half
/// depends only on the seed and its id), and report the held-out half.
pub fn fit_w(frame: &Frame, which: &str, seed: u64) -> Result<Vec<FitW>, MetaError> {
    let b = &bertscore_column(frame, which)?.values;
    let dev: Vec<bool> = frame
        .items
        .iter()
        .map(|i| item_in_dev_half(seed, i))
        .collect();
    // mean(b) from the development half only: nothing of the test half leaks into w.
    let dev_b: Vec<Option<f64>> = b
        .iter()
        .zip(&dev)
        .map(|(v, d)| if *d { *v } else { None })
        .collect();
    let Some(mean_b) = mean_of(&dev_b) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for c in frame
        .columns
        .iter()
        .filter(|c| matches!(c.family, Family::JudgeArgmax | Family::JudgeExpected))
    {
        for key in frame.human_keys.iter().filter(|k| frame.pairs_with(c, k)) {
            let h = frame.human(key);
            let half = |values: &[Option<f64>], want_dev: bool| -> (Vec<f64>, Vec<f64>) {
                values
                    .iter()
                    .zip(&h)
                    .zip(&dev)
                    .filter(|(_, d)| **d == want_dev)
                    .filter_map(|((v, h), _)| Some(((*v)?, (*h)?)))
                    .unzip()
            };
            let mut best: Option<(f64, f64)> = None;
            for w in W_GRID {
                let (x, y) = half(&combine(&c.values, b, mean_b, w), true);
                if let Some(r) = spearman_r(&x, &y) {
                    // Ties keep the smaller w (the grid is increasing).
                    if best.is_none_or(|(_, br)| r > br) {
                        best = Some((w, r));
                    }
                }
            }
            let Some((w, dev_spearman)) = best else {
                continue;
            };
            let test = |values: &[Option<f64>]| {
                let (x, y) = half(values, false);
                spearman_r(&x, &y)
            };
            let combined = combine(&c.values, b, mean_b, w);
            out.push(FitW {
                column: frame.row_label(c),
                human: key.clone(),
                w,
                dev_spearman,
                test_combined: test(&combined),
                test_judge: test(&c.values),
                test_bertscore: test(b),
                dev_items: half(&combined, true).0.len(),
                test_items: half(&combined, false).0.len(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_is_independent_of_a_dialogue_sample_with_the_same_seed() {
        // The 30 dialogues `sample_dialogues` keeps with seed 0 are those of lowest unsalted hash.
        let mut ids: Vec<(u64, String)> = (0..150)
            .map(|d| format!("{}", 1_502_867_549u64 + d * 7919))
            .map(|d| (keyed_hash(0, &d), d))
            .collect();
        ids.sort();
        let dev = ids
            .iter()
            .take(30)
            .filter(|(_, d)| in_dev_half(0, d))
            .count();
        assert!(
            (8..=22).contains(&dev),
            "{dev} of 30 sampled dialogues in the development half"
        );
    }
}
