//! Correlation of one score column with one human column at one level, with p-values and a
//! seeded percentile bootstrap interval.

use super::stats::{Correlation, Method};
use crate::data::Item;
use crate::rng::{SplitMix64, keyed_hash};
use rayon::prelude::*;
use std::collections::BTreeMap;

/// Where the correlation is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Over items (turns).
    Item,
    /// Over systems, each the mean of its items.
    System,
    /// Within each dialogue, then averaged over the dialogues where it is defined.
    Dialogue,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Item, Level::System, Level::Dialogue];

    pub fn name(self) -> &'static str {
        match self {
            Level::Item => "item",
            Level::System => "system",
            Level::Dialogue => "dialogue",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Level::Item => "Item level (turns)",
            Level::System => "System level (means per system)",
            Level::Dialogue => "Within dialogue (averaged over dialogues)",
        }
    }
}

/// Bootstrap settings: `resamples` = 0 turns intervals off.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Bootstrap {
    pub resamples: usize,
    pub seed: u64,
    pub confidence: f64,
}

/// One coefficient: its value, p-value (None at the within-dialogue level, which averages
/// coefficients) and bootstrap interval (None when turned off or undefined in too many resamples).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Stat {
    pub r: f64,
    pub p: Option<f64>,
    pub ci: Option<[f64; 2]>,
}

/// Everything about one (column, human aspect, level): how many units (items, systems or
/// dialogues) entered, and each coefficient (None: undefined, e.g. a constant column).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Cell {
    /// Units the coefficients are computed over (items, systems, or dialogues with a defined
    /// correlation).
    pub n: usize,
    pub pearson: Option<Stat>,
    pub spearman: Option<Stat>,
    pub kendall: Option<Stat>,
}

/// Fewer units than this make a coefficient that says little (3 systems: ±1 by chance one
/// time in three): such cells are marked, and drawn without colour.
pub const FEW_UNITS: usize = 5;

impl Cell {
    /// Whether the cell rests on fewer than `FEW_UNITS` units.
    pub fn few_units(&self) -> bool {
        self.n < FEW_UNITS
    }

    pub fn get(&self, m: Method) -> Option<Stat> {
        match m {
            Method::Pearson => self.pearson,
            Method::Spearman => self.spearman,
            Method::Kendall => self.kendall,
        }
    }
}

/// The pairs (score, human) where both exist, the system of each, and how the level groups
/// them for resampling: single items at item and system level (systems are recomputed from
/// resampled items), whole dialogues at dialogue level.
struct Units {
    pairs: Vec<(f64, f64)>,
    system_of: Vec<usize>,
    groups: Vec<Vec<usize>>,
}

/// None when the level does not apply (no system on some item, no dialogues) or nothing pairs.
fn units(level: Level, items: &[Item], x: &[Option<f64>], y: &[Option<f64>]) -> Option<Units> {
    let mut pairs = Vec::new();
    let mut owners = Vec::new();
    for (i, (a, b)) in x.iter().zip(y).enumerate() {
        if let (Some(a), Some(b)) = (a, b) {
            pairs.push((*a, *b));
            owners.push(i);
        }
    }
    if level == Level::System && owners.iter().any(|&i| items[i].system.is_none()) {
        return None;
    }
    let mut system_ids: BTreeMap<&str, usize> = BTreeMap::new();
    let system_of = owners
        .iter()
        .map(|&i| {
            let next = system_ids.len();
            *system_ids
                .entry(items[i].system.as_deref().unwrap_or(""))
                .or_insert(next)
        })
        .collect();
    let groups: Vec<Vec<usize>> = match level {
        Level::Item | Level::System => (0..pairs.len()).map(|k| vec![k]).collect(),
        Level::Dialogue => {
            let mut by: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            for (k, &i) in owners.iter().enumerate() {
                if let Some(d) = items[i].dialogue.as_deref() {
                    by.entry(d).or_default().push(k);
                }
            }
            by.into_values().collect()
        }
    };
    (!groups.is_empty()).then_some(Units {
        pairs,
        system_of,
        groups,
    })
}

/// The level's coefficient from the pairs in `chosen` (indices into `pairs`, repeats allowed).
/// Returns the number of units and, per method, the coefficient (and p-value where it has one).
fn statistic(
    level: Level,
    units: &Units,
    chosen: &[&[usize]],
    method: Method,
    with_p: bool,
) -> (usize, Option<Correlation>) {
    let (pairs, system_of) = (&units.pairs, &units.system_of);
    match level {
        Level::Item => {
            let (x, y): (Vec<f64>, Vec<f64>) = chosen
                .iter()
                .flat_map(|g| g.iter().map(|&k| pairs[k]))
                .unzip();
            (x.len(), correlate_pairs(method, &x, &y, with_p))
        }
        Level::System => {
            let mut sums: BTreeMap<usize, (f64, f64, f64)> = BTreeMap::new();
            for &k in chosen.iter().flat_map(|g| g.iter()) {
                let e = sums.entry(system_of[k]).or_default();
                e.0 += pairs[k].0;
                e.1 += pairs[k].1;
                e.2 += 1.0;
            }
            let (x, y): (Vec<f64>, Vec<f64>) =
                sums.values().map(|(a, b, n)| (a / n, b / n)).unzip();
            (x.len(), correlate_pairs(method, &x, &y, with_p))
        }
        Level::Dialogue => {
            let mut total = 0.0;
            let mut defined = 0;
            for g in chosen {
                let (x, y): (Vec<f64>, Vec<f64>) = g.iter().map(|&k| pairs[k]).unzip();
                if let Some(c) = correlate_pairs(method, &x, &y, false) {
                    total += c.r;
                    defined += 1;
                }
            }
            let mean = (defined > 0).then(|| Correlation {
                r: total / defined as f64,
                p: f64::NAN,
            });
            (defined, mean)
        }
    }
}

fn correlate_pairs(method: Method, x: &[f64], y: &[f64], with_p: bool) -> Option<Correlation> {
    if with_p {
        return method.correlate(x, y);
    }
    Some(Correlation {
        r: method.coefficient(x, y)?,
        p: f64::NAN,
    })
}

/// Correlate score column `x` with human column `y` over `items` at `level`. `key` names the
/// cell so that its bootstrap draws depend only on the seed and the cell, not on the others.
pub fn correlate(
    level: Level,
    items: &[Item],
    x: &[Option<f64>],
    y: &[Option<f64>],
    boot: &Bootstrap,
    key: &str,
) -> Option<Cell> {
    let units = units(level, items, x, y)?;
    let all: Vec<&[usize]> = units.groups.iter().map(Vec::as_slice).collect();
    let mut cell = Cell {
        n: 0,
        pearson: None,
        spearman: None,
        kendall: None,
    };
    for method in Method::ALL {
        let (units_used, c) = statistic(level, &units, &all, method, level != Level::Dialogue);
        cell.n = cell.n.max(units_used);
        let Some(c) = c else { continue };
        let ci = interval(
            level,
            &units,
            method,
            boot,
            &format!("{key}\u{0}{}", method.name()),
        );
        let stat = Stat {
            r: c.r,
            p: c.p.is_finite().then_some(c.p),
            ci,
        };
        match method {
            Method::Pearson => cell.pearson = Some(stat),
            Method::Spearman => cell.spearman = Some(stat),
            Method::Kendall => cell.kendall = Some(stat),
        }
    }
    Some(cell)
}

/// Percentile interval over resamples of the level's units; None when turned off, or when the
/// coefficient is undefined in more than half of the resamples.
fn interval(
    level: Level,
    units: &Units,
    method: Method,
    boot: &Bootstrap,
    key: &str,
) -> Option<[f64; 2]> {
    let groups = &units.groups;
    if boot.resamples == 0 {
        return None;
    }
    // One stream of draws, resample after resample; each resample starts where the ones
    // before it leave the stream, so they run in parallel and give one pass's numbers.
    let start = SplitMix64(keyed_hash(boot.seed, key));
    let n = groups.len();
    let mut values: Vec<f64> = (0..boot.resamples)
        .into_par_iter()
        .filter_map(|r| {
            let mut rng = start.after((r as u64).wrapping_mul(n as u64));
            let chosen: Vec<&[usize]> = (0..n).map(|_| groups[rng.below(n)].as_slice()).collect();
            statistic(level, units, &chosen, method, false)
                .1
                .map(|c| c.r)
        })
        .collect();
    if values.len() * 2 < boot.resamples {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let alpha = (1.0 - boot.confidence) / 2.0;
    Some([percentile(&values, alpha), percentile(&values, 1.0 - alpha)])
}

/// numpy's default ("linear") percentile of sorted values.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}
