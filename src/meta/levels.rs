//! Correlation of one score column with one human column at one level, with p-values and a
//! seeded percentile bootstrap interval.

use super::resample::Prepared;
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

/// The pairs (score, human) where both exist, the system of each, and the dialogues that group
/// them at dialogue level. Item and system level resample single pairs (systems are
/// recomputed from the resampled pairs), dialogue level whole dialogues.
struct Units {
    pairs: Vec<(f64, f64)>,
    system_of: Vec<usize>,
    systems: usize,
    dialogues: Vec<Vec<usize>>,
}

impl Units {
    /// How many units a resample draws at `level`.
    fn count(&self, level: Level) -> usize {
        match level {
            Level::Item | Level::System => self.pairs.len(),
            Level::Dialogue => self.dialogues.len(),
        }
    }
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
    let mut dialogues = Vec::new();
    if level == Level::Dialogue {
        let mut by: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (k, &i) in owners.iter().enumerate() {
            if let Some(d) = items[i].dialogue.as_deref() {
                by.entry(d).or_default().push(k);
            }
        }
        dialogues = by.into_values().collect();
    }
    let units = Units {
        pairs,
        system_of,
        systems: system_ids.len(),
        dialogues,
    };
    (units.count(level) > 0).then_some(units)
}

/// The level's coefficient over all units, with the number of units it rests on (and the
/// p-value where the level has one); `dialogue_r`: each dialogue's coefficient at dialogue level.
fn statistic(
    level: Level,
    units: &Units,
    method: Method,
    dialogue_r: &[Option<f64>],
) -> (usize, Option<Correlation>) {
    let pairs = &units.pairs;
    match level {
        Level::Item => {
            let (x, y): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
            (x.len(), method.correlate(&x, &y))
        }
        Level::System => {
            let counts = vec![1; pairs.len()];
            let (x, y) = system_means(units, &counts);
            (x.len(), method.correlate(&x, &y))
        }
        Level::Dialogue => {
            let defined: Vec<f64> = dialogue_r.iter().flatten().copied().collect();
            let mean = (!defined.is_empty()).then(|| Correlation {
                r: defined.iter().sum::<f64>() / defined.len() as f64,
                p: f64::NAN,
            });
            (defined.len(), mean)
        }
    }
}

/// Each system's mean score and mean rating over its pairs, pair k counted `counts[k]` times;
/// systems without a counted pair left out.
fn system_means(units: &Units, counts: &[u32]) -> (Vec<f64>, Vec<f64>) {
    let mut sums = vec![(0.0, 0.0, 0.0); units.systems];
    for ((&(a, b), &system), &c) in units.pairs.iter().zip(&units.system_of).zip(counts) {
        if c > 0 {
            let c = f64::from(c);
            let e = &mut sums[system];
            e.0 += c * a;
            e.1 += c * b;
            e.2 += c;
        }
    }
    sums.iter()
        .filter(|s| s.2 > 0.0)
        .map(|(a, b, n)| (a / n, b / n))
        .unzip()
}

/// Each dialogue's coefficient (None where undefined).
fn dialogue_coefficients(units: &Units, method: Method) -> Vec<Option<f64>> {
    units
        .dialogues
        .iter()
        .map(|d| {
            let (x, y): (Vec<f64>, Vec<f64>) = d.iter().map(|&k| units.pairs[k]).unzip();
            method.coefficient(&x, &y)
        })
        .collect()
}

/// Correlate score column `x` with human column `y` over `items` at `level`. `key` names the
/// cell so that its bootstrap draws depend only on the seed and the cell, not on the others;
/// `resampled` is told of each resample drawn.
pub fn correlate(
    level: Level,
    items: &[Item],
    x: &[Option<f64>],
    y: &[Option<f64>],
    boot: &Bootstrap,
    key: &str,
    resampled: &(dyn Fn() + Sync),
) -> Option<Cell> {
    let units = units(level, items, x, y)?;
    let mut cell = Cell {
        n: 0,
        pearson: None,
        spearman: None,
        kendall: None,
    };
    let mut defined = Vec::new();
    let mut dialogue_r = Vec::new();
    for method in Method::ALL {
        // Each dialogue's coefficient, for the estimate and every resample alike.
        let per_dialogue = match level {
            Level::Dialogue => dialogue_coefficients(&units, method),
            _ => Vec::new(),
        };
        let (units_used, c) = statistic(level, &units, method, &per_dialogue);
        cell.n = cell.n.max(units_used);
        if let Some(c) = c {
            defined.push((method, c));
            dialogue_r.push(per_dialogue);
        }
    }
    let prepared =
        (level == Level::Item && boot.resamples > 0).then(|| Prepared::new(&units.pairs));
    let resample = Resample {
        level,
        units: &units,
        prepared: prepared.as_ref(),
        methods: defined.iter().map(|(m, _)| *m).collect(),
        dialogue_r,
    };
    let intervals = intervals(&resample, boot, key, resampled);
    for ((method, c), ci) in defined.into_iter().zip(intervals) {
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

/// What the resamples of one cell need, prepared once for all of them.
struct Resample<'a> {
    level: Level,
    units: &'a Units,
    /// Item level: the pairs sorted once.
    prepared: Option<&'a Prepared>,
    /// The coefficients defined on all units, whose intervals are drawn.
    methods: Vec<Method>,
    /// Dialogue level, per method: each dialogue's coefficient, which a resample averages.
    dialogue_r: Vec<Vec<Option<f64>>>,
}

impl Resample<'_> {
    /// Each method's coefficient on the resample holding unit k `counts[k]` times.
    fn coefficients(&self, counts: &[u32]) -> Vec<Option<f64>> {
        match self.level {
            Level::Item => self
                .methods
                .iter()
                .map(|&m| self.prepared?.coefficient(m, counts))
                .collect(),
            Level::System => {
                let (x, y) = system_means(self.units, counts);
                self.methods.iter().map(|m| m.coefficient(&x, &y)).collect()
            }
            Level::Dialogue => self
                .dialogue_r
                .iter()
                .map(|dialogue_r| {
                    let (mut total, mut defined) = (0.0, 0u64);
                    for (r, &c) in dialogue_r.iter().zip(counts) {
                        if let (Some(r), true) = (r, c > 0) {
                            total += f64::from(c) * r;
                            defined += u64::from(c);
                        }
                    }
                    (defined > 0).then(|| total / defined as f64)
                })
                .collect(),
        }
    }
}

/// Each method's percentile interval over resamples of the level's units (one resample serves
/// every method); None when turned off, or for a method undefined in more than half of the
/// resamples.
fn intervals(
    resample: &Resample<'_>,
    boot: &Bootstrap,
    key: &str,
    resampled: &(dyn Fn() + Sync),
) -> Vec<Option<[f64; 2]>> {
    let methods = resample.methods.len();
    if boot.resamples == 0 || methods == 0 {
        return vec![None; methods];
    }
    // One stream of draws, resample after resample; each resample starts where the ones
    // before it leave the stream, so they run in parallel and give one pass's numbers.
    let start = SplitMix64(keyed_hash(boot.seed, key));
    let n = resample.units.count(resample.level);
    let drawn: Vec<Vec<Option<f64>>> = (0..boot.resamples)
        .into_par_iter()
        .map_init(
            || vec![0u32; n],
            |counts, r| {
                counts.fill(0);
                let mut rng = start.after((r as u64).wrapping_mul(n as u64));
                for _ in 0..n {
                    counts[rng.below(n)] += 1;
                }
                let values = resample.coefficients(counts);
                resampled();
                values
            },
        )
        .collect();
    (0..methods)
        .map(|m| {
            let mut values: Vec<f64> = drawn.iter().filter_map(|v| v[m]).collect();
            if values.len() * 2 < boot.resamples {
                return None;
            }
            values.sort_by(f64::total_cmp);
            let alpha = (1.0 - boot.confidence) / 2.0;
            Some([percentile(&values, alpha), percentile(&values, 1.0 - alpha)])
        })
        .collect()
}

/// numpy's default ("linear") percentile of sorted values.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}
