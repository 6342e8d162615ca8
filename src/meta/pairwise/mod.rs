//! Meta-evaluation of pairwise results (`hyoka compare`): the systems ranked — win, tie and
//! loss rates, Bradley–Terry strengths with ties (`davidson`) and bootstrap intervals over
//! contexts — and the verdicts compared with human preferences (`agreement`).

pub mod agreement;
pub mod biases;
mod bootstrap;
pub mod controlled;
pub mod davidson;
pub mod length_controlled;
pub mod preferences;
mod render;

pub use agreement::{HumanPreference, agreement, human_verdict};
pub use bootstrap::{bootstrap_intervals, resample_contexts};
pub use preferences::Preferences;
pub use render::markdown;

use super::MetaError;
use crate::data::{Item, Pair};
use crate::meta::bias::response_length;
use crate::results::reader::{ResultsInput, read_input_records};
use crate::results::verdicts::{PairVerdict, Verdict};
use crate::results::{Body, Record};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Settings of the system-level statistics (every one is in the summary).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairwiseOptions {
    /// Bootstrap resamples of the contexts for the strengths' intervals (0: none).
    pub bootstrap: usize,
    pub seed: u64,
    /// Coverage of the intervals.
    pub level: f64,
    /// Human ratings of two responses closer than this are a tie.
    pub tie_margin: f64,
}

impl Default for PairwiseOptions {
    fn default() -> Self {
        PairwiseOptions {
            bootstrap: 1000,
            seed: 0,
            level: 0.95,
            tie_margin: 0.0,
        }
    }
}

/// One system's place on one aspect.
#[derive(Clone, Debug, Serialize)]
pub struct SystemRank {
    pub system: String,
    pub comparisons: usize,
    /// Pairs by the order-averaged verdict.
    pub wins: usize,
    pub ties: usize,
    pub losses: usize,
    /// (wins + ties / 2) / comparisons.
    pub win_rate: f64,
    /// Mean of P(win) + P(tie) / 2: the win rate the distributions expect.
    pub expected_win_rate: f64,
    /// Log-strength θ (mean 0 over the systems); None when the fit has no finite maximum.
    pub strength: Option<f64>,
    /// Percentile bootstrap interval of `strength`.
    pub interval: Option<[f64; 2]>,
    /// Mean human rating of its responses in the compared contexts, per human key.
    pub human: BTreeMap<String, f64>,
}

/// The systems' ranking and the judge's behaviour on one aspect.
#[derive(Clone, Debug, Serialize)]
pub struct AspectRanking {
    pub aspect: String,
    pub pairs: usize,
    /// Share of pairs whose most probable verdict is the same in both orders.
    pub consistency: f64,
    /// Mean P(shown first wins) − P(shown second wins): the judge's position bias.
    pub position_bias: f64,
    /// Share of pairs whose most probable verdict reverses when the order is swapped.
    pub flip_rate: f64,
    /// How often the longer response wins.
    pub longer_wins: biases::LongerWins,
    /// Davidson's ν (0: the rubric allows no tie).
    pub tie_parameter: Option<f64>,
    /// Why there are no strengths, if there are none.
    pub fit_error: Option<String>,
    /// Strongest first (by strength, then win rate).
    pub systems: Vec<SystemRank>,
    /// Bootstrap resamples whose fit had no finite maximum (left out of the intervals).
    pub bootstrap_failed: usize,
    /// The strengths with the responses' length and markdown held equal (None: no such
    /// feature varies over the pairs, or the fit failed).
    pub style_controlled: Option<controlled::Controlled>,
    /// Why the controlled fit failed, if it did.
    pub style_control_error: Option<String>,
    /// Each system's win rate against the run's baseline with the length difference held at
    /// zero, AlpacaEval 2's (None: the run compared every two systems, not each with one
    /// baseline).
    pub length_controlled: Option<length_controlled::LengthControlled>,
    /// Agreement with human preferences, per human key the aspect is compared with.
    pub human: Vec<HumanPreference>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PairwiseSummary {
    pub hyoka: String,
    pub rubric: Option<String>,
    pub pairs: usize,
    pub contexts: usize,
    pub systems: usize,
    /// Error lines (pairs the judge could not score).
    pub errors: usize,
    /// Result lines whose items are not in the items file.
    pub unmatched: usize,
    pub options: PairwiseOptions,
    pub aspects: Vec<AspectRanking>,
    /// The run's provenance.
    pub source: Value,
}

/// A pair's verdicts read back with its two items.
pub struct JoinedPair<'a> {
    pub first: &'a Item,
    pub second: &'a Item,
    pub verdicts: Vec<(String, PairVerdict)>,
}

/// Pairwise results joined with their items: each line's two items found by context and
/// system, each checked to be the version the line was judged from.
pub struct PairFrame<'a> {
    pub pairs: Vec<JoinedPair<'a>>,
    /// Human preferences given per pair (empty: derived from the items' ratings).
    pub preferences: Preferences,
    pub errors: usize,
    pub unmatched: usize,
    pub provenance: crate::results::Provenance,
}

/// Every line of a results input (one run, one line per unit, as `results::reader` checks),
/// with its line number.
pub fn read_records(input: &ResultsInput) -> Result<Vec<(usize, Record)>, MetaError> {
    let mut records = Vec::new();
    read_input_records(input, |line, _, record| {
        records.push((line, record));
        Ok(())
    })?;
    Ok(records)
}

/// Whether a results input holds pairwise results (`hyoka compare`'s), from its first line:
/// pairwise lines are held in memory, the others stream into a frame.
pub fn is_pairwise(input: &ResultsInput) -> Result<bool, MetaError> {
    Ok(crate::results::reader::first_task(input)? == Some(crate::results::Task::Compare))
}

/// Join `records` (one run's pairwise lines, read from `origin`: a path for errors) with
/// `items`.
pub fn join<'a>(
    items: &'a [Item],
    records: Vec<(usize, Record)>,
    origin: &Path,
) -> Result<PairFrame<'a>, MetaError> {
    let mut by_answer: HashMap<(&str, &str), &Item> = HashMap::new();
    for item in items {
        if let (Some(c), Some(s)) = (&item.context_id, &item.system) {
            by_answer.insert((c.as_str(), s.as_str()), item);
        }
    }
    let mut out = PairFrame {
        pairs: Vec::new(),
        preferences: Preferences::default(),
        errors: 0,
        unmatched: 0,
        provenance: match records.first() {
            Some((_, r)) => (*r.provenance).clone(),
            None => {
                return Err(MetaError::Input(format!(
                    "{}: no results lines",
                    origin.display()
                )));
            }
        },
    };
    for (line, record) in records {
        let body = match &record.body {
            Err(_) => {
                out.errors += 1;
                continue;
            }
            Ok(Body::Compare(c)) => c,
            Ok(_) => {
                return Err(MetaError::Invalid {
                    path: origin.to_path_buf(),
                    line,
                    field: "provenance".into(),
                    message: "not pairwise results: give hyoka compare's results alone".into(),
                });
            }
        };
        let find = |system: &str| by_answer.get(&(body.context_id.as_str(), system)).copied();
        let (Some(first), Some(second)) = (find(&body.first), find(&body.second)) else {
            out.unmatched += 1;
            continue;
        };
        let pair = Pair {
            id: record.id.clone(),
            context_id: body.context_id.clone(),
            first: first.clone(),
            second: second.clone(),
        };
        crate::results::inputs::ensure_current(&record, &pair, origin, line)?;
        out.pairs.push(JoinedPair {
            first,
            second,
            verdicts: body.verdicts.clone(),
        });
    }
    // The statistics sum over pairs and resample contexts by index: in a fixed order (by
    // context, then systems), the summary is the same whatever order the lines were written in.
    out.pairs.sort_by(|a, b| {
        let key = |p: &JoinedPair| {
            (
                p.first.context_id.clone(),
                p.first.system.clone(),
                p.second.system.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    if out.pairs.is_empty() {
        return Err(MetaError::Input(format!(
            "{}: no pair's items are in the items file (pairs are found by context_id and system)",
            origin.display()
        )));
    }
    Ok(out)
}

impl PairFrame<'_> {
    /// The human keys each aspect is compared with: the rubric's `human` keys for it, else
    /// its own key; a preference on the aspect's own key is compared with it too.
    fn human_keys_of(&self, aspect: &str) -> Vec<String> {
        let mut keys = (self.provenance.rubric.as_ref())
            .and_then(|r| r.aspects.iter().find(|t| t.key == aspect))
            .map(|t| t.human.clone())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| vec![aspect.to_string()]);
        if self.preferences.has_key(aspect) && !keys.iter().any(|k| k == aspect) {
            keys.push(aspect.to_string());
        }
        keys
    }

    /// Compare the verdicts with `preferences` (read from `path`): each line must name a pair
    /// that was judged, and some aspect must be compared with one of its keys; otherwise the
    /// file would be dropped, or used in part, without a word.
    pub fn set_preferences(
        &mut self,
        preferences: Preferences,
        path: &Path,
    ) -> Result<(), MetaError> {
        let judged: std::collections::HashSet<(&str, &str, &str)> = (self.pairs.iter())
            .filter_map(|p| {
                Some((
                    p.first.context_id.as_deref()?,
                    p.first.system.as_deref()?,
                    p.second.system.as_deref()?,
                ))
            })
            .collect();
        for (line, context, a, b) in preferences.pairs() {
            if !judged.contains(&(context, a, b)) && !judged.contains(&(context, b, a)) {
                return Err(MetaError::Invalid {
                    path: path.to_path_buf(),
                    line,
                    field: "first".into(),
                    message: format!(
                        "no judged pair of context {context:?} has the systems {a:?} and {b:?}: every line must name a pair of the results"
                    ),
                });
            }
        }
        let aspects: Vec<String> = (self.pairs.first())
            .map(|p| p.verdicts.iter().map(|(k, _)| k.clone()).collect())
            .unwrap_or_default();
        self.preferences = preferences;
        let compared: Vec<String> = aspects.iter().flat_map(|a| self.human_keys_of(a)).collect();
        let given = self.preferences.keys();
        // A key no aspect is compared with would be left out without a word: each is refused.
        let unused: Vec<&str> = (given.iter().copied())
            .filter(|k| !compared.iter().any(|c| c == *k))
            .collect();
        if !unused.is_empty() {
            return Err(MetaError::Input(format!(
                "{}: its human keys {} are compared with no aspect of the results (aspects {}, compared with the human keys {}): name the verdicts by one of those keys",
                path.display(),
                unused.join(", "),
                aspects.join(", "),
                compared.join(", ")
            )));
        }
        Ok(())
    }
}

/// Rank the systems of `frame` on every aspect and compare with human preferences.
pub fn summarize(frame: &PairFrame, opts: &PairwiseOptions) -> PairwiseSummary {
    let mut systems: Vec<&str> = Vec::new();
    let mut contexts: Vec<&str> = Vec::new();
    for p in &frame.pairs {
        for s in [&p.first.system, &p.second.system] {
            let s = s.as_deref().unwrap_or_default();
            if !systems.contains(&s) {
                systems.push(s);
            }
        }
        let c = p.first.context_id.as_deref().unwrap_or_default();
        if !contexts.contains(&c) {
            contexts.push(c);
        }
    }
    systems.sort_unstable();
    contexts.sort_unstable();
    // The run's baseline, as its provenance records the pairing.
    let baseline = (frame.provenance.settings.get("pairing"))
        .and_then(|v| v.as_str())
        .and_then(crate::data::Pairing::from_record)
        .and_then(|p| match p {
            crate::data::Pairing::Baseline(b) => systems.iter().position(|s| *s == b),
            crate::data::Pairing::All => None,
        });
    let aspects: Vec<String> = frame.pairs[0]
        .verdicts
        .iter()
        .map(|(k, _)| k.clone())
        .collect();
    let rankings = aspects
        .iter()
        .enumerate()
        .map(|(a, aspect)| {
            let human_keys = frame.human_keys_of(aspect);
            let sets = Sets {
                systems: &systems,
                contexts: &contexts,
                baseline,
            };
            rank_aspect(frame, a, aspect, &sets, &human_keys, opts)
        })
        .collect();
    PairwiseSummary {
        hyoka: crate::version::VERSION.into(),
        rubric: frame.provenance.rubric.as_ref().map(|r| r.name.clone()),
        pairs: frame.pairs.len(),
        contexts: contexts.len(),
        systems: systems.len(),
        errors: frame.errors,
        unmatched: frame.unmatched,
        options: opts.clone(),
        aspects: rankings,
        source: serde_json::to_value(&frame.provenance).expect("provenance serialises"),
    }
}

/// The systems and contexts of a frame, in name order, and the baseline's index among the
/// systems if the run compared each system with one.
struct Sets<'a> {
    systems: &'a [&'a str],
    contexts: &'a [&'a str],
    baseline: Option<usize>,
}

fn rank_aspect(
    frame: &PairFrame,
    a: usize,
    aspect: &str,
    sets: &Sets,
    human_keys: &[String],
    opts: &PairwiseOptions,
) -> AspectRanking {
    let (systems, contexts) = (sets.systems, sets.contexts);
    let index = |s: &Option<String>| {
        systems
            .binary_search(&s.as_deref().unwrap_or_default())
            .expect("every system is listed")
    };
    let n = systems.len();
    let mut rows: Vec<SystemRank> = systems
        .iter()
        .map(|s| SystemRank {
            system: s.to_string(),
            comparisons: 0,
            wins: 0,
            ties: 0,
            losses: 0,
            win_rate: 0.0,
            expected_win_rate: 0.0,
            strength: None,
            interval: None,
            human: BTreeMap::new(),
        })
        .collect();
    // Outcomes per context, for the fit and its bootstrap.
    let mut by_context: Vec<Vec<davidson::Outcome>> = vec![Vec::new(); contexts.len()];
    // The same outcomes with their responses' style features, for the controlled fit.
    let mut styled: Vec<Vec<(davidson::Outcome, [f64; 2])>> = vec![Vec::new(); contexts.len()];
    let mut with_baseline: Vec<length_controlled::BaselineComparison> = Vec::new();
    let (mut consistent, mut bias) = (0usize, 0.0);
    for p in &frame.pairs {
        let v = &p.verdicts[a].1;
        let (i, j) = (index(&p.first.system), index(&p.second.system));
        let pref = v.preference();
        let total = pref.first + pref.second + pref.tie;
        let outcome = davidson::Outcome {
            i,
            j,
            wins_i: pref.first / total,
            wins_j: pref.second / total,
            ties: pref.tie / total,
        };
        let c = contexts
            .iter()
            .position(|c| Some(*c) == p.first.context_id.as_deref())
            .expect("every context is listed");
        by_context[c].push(outcome);
        let features = controlled::style_features(&p.first.response.text, &p.second.response.text);
        styled[c].push((outcome, features));
        if let Some(b) = sets.baseline.filter(|b| *b == i || *b == j) {
            let (system, won, first_is_system) = if b == j {
                (i, outcome.wins_i, true)
            } else {
                (j, outcome.wins_j, false)
            };
            let (length_of_first, length_of_second) = (
                response_length(&p.first.response.text) as f64,
                response_length(&p.second.response.text) as f64,
            );
            let difference = length_of_first - length_of_second;
            with_baseline.push(length_controlled::BaselineComparison {
                context: c,
                system,
                preference: won + outcome.ties / 2.0,
                length_difference: if first_is_system {
                    difference
                } else {
                    -difference
                },
            });
        }
        consistent += usize::from(v.consistent());
        bias += v.position_bias();
        for (k, win) in [(i, outcome.wins_i), (j, outcome.wins_j)] {
            rows[k].comparisons += 1;
            rows[k].expected_win_rate += win + outcome.ties / 2.0;
        }
        match pref.verdict() {
            Verdict::First => {
                rows[i].wins += 1;
                rows[j].losses += 1;
            }
            Verdict::Second => {
                rows[j].wins += 1;
                rows[i].losses += 1;
            }
            Verdict::Tie => {
                rows[i].ties += 1;
                rows[j].ties += 1;
            }
        }
    }
    for row in &mut rows {
        let c = row.comparisons.max(1) as f64;
        row.win_rate = (row.wins as f64 + row.ties as f64 / 2.0) / c;
        row.expected_win_rate /= c;
    }
    let all: Vec<davidson::Outcome> = by_context.iter().flatten().copied().collect();
    let fitted = davidson::fit(n, &all);
    let (tie_parameter, fit_error) = match &fitted {
        Ok(f) => {
            for (row, s) in rows.iter_mut().zip(&f.strengths) {
                row.strength = Some(*s);
            }
            (Some(f.tie), None)
        }
        Err(e) => (None, Some(e.to_string())),
    };
    let mut bootstrap_failed = 0;
    // Resampling one context draws it every time: a zero-width interval that would say
    // nothing of the uncertainty. With fewer than two contexts the interval is undefined.
    let resamples = if opts.bootstrap > 0 && contexts.len() >= 2 {
        resample_contexts(contexts.len(), opts.bootstrap, opts.seed)
    } else {
        Vec::new()
    };
    if fitted.is_ok() && !resamples.is_empty() {
        let (intervals, failed) = bootstrap_intervals(n, &by_context, &resamples, opts.level);
        bootstrap_failed = failed;
        for (row, interval) in rows.iter_mut().zip(intervals) {
            row.interval = interval;
        }
    }
    let raw: Vec<Option<f64>> = rows.iter().map(|r| r.strength).collect();
    let (style_controlled, style_control_error) =
        match controlled::fit(systems, &styled, &resamples, opts.level, &raw) {
            None => (None, None),
            Some(Ok(c)) => (Some(c), None),
            Some(Err(e)) => (None, Some(e.to_string())),
        };
    let length_controlled = sets.baseline.map(|b| {
        length_controlled::fit(
            systems,
            b,
            &with_baseline,
            contexts.len(),
            &resamples,
            opts.level,
        )
    });
    // Per human key, each system's human score: its mean rating over its compared responses,
    // or, where preferences are given on the key, its win rate over the raters' votes.
    let mut sums: Vec<BTreeMap<String, (f64, usize)>> = vec![BTreeMap::new(); n];
    let mut seen = std::collections::HashSet::new();
    let prefs = &frame.preferences;
    for p in &frame.pairs {
        for key in human_keys.iter().filter(|k| prefs.has_key(k)) {
            let (first, second) = (p.first.system.as_deref(), p.second.system.as_deref());
            let context = p.first.context_id.as_deref().unwrap_or_default();
            let votes = prefs.votes(
                context,
                first.unwrap_or_default(),
                second.unwrap_or_default(),
                key,
            );
            for v in votes {
                let (a, b) = match v {
                    Verdict::First => (1.0, 0.0),
                    Verdict::Second => (0.0, 1.0),
                    Verdict::Tie => (0.5, 0.5),
                };
                for (system, won) in [(&p.first.system, a), (&p.second.system, b)] {
                    let e = sums[index(system)].entry(key.clone()).or_default();
                    e.0 += won;
                    e.1 += 1;
                }
            }
        }
        for item in [p.first, p.second] {
            if !seen.insert(&item.id) {
                continue;
            }
            for key in human_keys.iter().filter(|k| !prefs.has_key(k)) {
                if let Some(r) = item.human.get(key) {
                    let e = sums[index(&item.system)].entry(key.clone()).or_default();
                    e.0 += r.mean();
                    e.1 += 1;
                }
            }
        }
    }
    for (row, sums) in rows.iter_mut().zip(sums) {
        row.human = sums
            .into_iter()
            .map(|(k, (s, c))| (k, s / c as f64))
            .collect();
    }
    let human = human_keys
        .iter()
        .filter_map(|key| compare_with_humans(frame, a, key, opts.tie_margin, &rows))
        .collect();
    rows.sort_by(|x, y| {
        let s = |r: &SystemRank| r.strength.unwrap_or(f64::NEG_INFINITY);
        s(y).total_cmp(&s(x))
            .then(y.win_rate.total_cmp(&x.win_rate))
            .then(x.system.cmp(&y.system))
    });
    let pairs = frame.pairs.len();
    AspectRanking {
        aspect: aspect.to_string(),
        pairs,
        consistency: consistent as f64 / pairs as f64,
        position_bias: bias / pairs as f64,
        flip_rate: biases::flip_rate(frame.pairs.iter().map(|p| &p.verdicts[a].1)),
        longer_wins: biases::longer_wins(frame.pairs.iter().map(|p| {
            let (first, second) = (&p.first.response.text, &p.second.response.text);
            (first.as_str(), second.as_str(), &p.verdicts[a].1)
        })),
        tie_parameter,
        fit_error,
        systems: rows,
        bootstrap_failed,
        style_controlled,
        style_control_error,
        length_controlled,
        human,
    }
}

/// The judge's verdicts on aspect `a` against the humans' on `key`; None when no pair has both
/// responses rated on it.
fn compare_with_humans(
    frame: &PairFrame,
    a: usize,
    key: &str,
    margin: f64,
    rows: &[SystemRank],
) -> Option<HumanPreference> {
    let given = frame.preferences.has_key(key);
    // With preferences given, each rater's vote is a comparison (as FastChat counts them);
    // otherwise each pair's verdict from the two responses' mean ratings.
    let verdicts: Vec<(Verdict, Verdict)> = frame
        .pairs
        .iter()
        .flat_map(|p| {
            let judge = p.verdicts[a].1.preference().verdict();
            let humans = if given {
                frame.preferences.votes(
                    p.first.context_id.as_deref().unwrap_or_default(),
                    p.first.system.as_deref().unwrap_or_default(),
                    p.second.system.as_deref().unwrap_or_default(),
                    key,
                )
            } else {
                human_verdict(p.first, p.second, key, margin)
                    .into_iter()
                    .collect()
            };
            humans.into_iter().map(move |h| (judge, h))
        })
        .collect();
    if verdicts.is_empty() {
        return None;
    }
    let (with_ties, without, pairs_without_ties, kappa) = agreement(&verdicts);
    let rated: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.strength?, *r.human.get(key)?)))
        .collect();
    let (x, y): (Vec<f64>, Vec<f64>) = rated.iter().copied().unzip();
    let count = |v: Verdict| verdicts.iter().filter(|(_, h)| *h == v).count();
    Some(HumanPreference {
        key: key.to_string(),
        source: if given { "preferences" } else { "ratings" },
        margin,
        pairs: verdicts.len(),
        agreement_with_ties: with_ties,
        agreement_without_ties: without,
        pairs_without_ties,
        kappa,
        system_spearman: crate::meta::stats::spearman_r(&x, &y),
        systems: rated.len(),
        human_verdicts: [
            count(Verdict::First),
            count(Verdict::Second),
            count(Verdict::Tie),
        ],
    })
}
