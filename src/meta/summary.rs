//! Everything `hyoka meta` computes, as one serialisable summary, and its Markdown rendering in
//! the paper's layout (rows = methods, columns = aspects, cells = Spearman/Pearson).

use super::MetaError;
use super::agreement::{AspectMatrix, HumanAspect, aspect_matrix, rater_agreement};
use super::alt_test::{AltTest, AltTestOptions, alt_tests};
use super::bias::{LengthBias, ScriptCheck, bias_markdown, length_biases, script_check};
use super::chance::{ChanceAgreement, chance_agreement};
use super::combination::{FittedCombination, combination_markdown, fitted_combinations};
use super::combine::{FitW, add_combined, fit_w};
use super::detection::{BreakdownEntry, BreakdownOptions, breakdown_detection};
use super::frame::{Family, Frame};
use super::levels::{Bootstrap, Cell, Level, Stat, correlate};
use super::markdown::{format_r, md_all, md_text};
use rayon::prelude::*;
use serde_json::Value;
use std::fmt::Write;

#[derive(Clone, Debug)]
pub struct MetaOptions {
    /// w of the combination; None: no combined columns.
    pub w: Option<f64>,
    /// Which BERTScore value is combined: P, R or F.
    pub combine_with: String,
    pub fit_w: bool,
    pub bootstrap: Bootstrap,
    pub breakdown: BreakdownOptions,
    pub alt_test: AltTestOptions,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub label: String,
    pub family: Family,
    pub aspect: Option<String>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Entry {
    pub row: String,
    pub human: String,
    pub level: Level,
    #[serde(flatten)]
    pub cell: Cell,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Combination {
    pub w: f64,
    pub with: String,
    pub mean_b: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    pub hyoka: String,
    pub items: usize,
    /// Every item is a whole dialogue (scope `dialogue`): the item level is the dialogue level,
    /// and there is no within-dialogue level.
    pub whole_dialogues: bool,
    pub sources: Vec<Value>,
    pub bootstrap: Bootstrap,
    pub combined: Option<Combination>,
    pub rows: Vec<Row>,
    pub human: Vec<HumanAspect>,
    pub correlations: Vec<Entry>,
    /// Table 3: the human aspects against each other, and the judge's expected scores.
    pub human_matrix: AspectMatrix,
    pub judge_matrix: Option<AspectMatrix>,
    pub fit_w: Vec<FitW>,
    /// With `fit_w`: every score column combined, fitted on the development half.
    pub combination: Vec<FittedCombination>,
    /// The DBDC challenge's metrics for judge aspects mapped onto breakdown labels.
    pub breakdown: Vec<BreakdownEntry>,
    /// Cohen's κ and Krippendorff's α of the judge's most probable scores with the raters.
    pub chance: Vec<ChanceAgreement>,
    /// The alternative annotator test of the judge's most probable scores against the raters.
    pub alt_test: Vec<AltTest>,
    /// Each score column against the responses' length.
    pub length_bias: Vec<LengthBias>,
    /// The responses' script, and scorers made for another language.
    pub script: ScriptCheck,
}

impl Summary {
    /// Compute everything over `frame` (combined columns are added to it).
    pub fn compute(frame: &mut Frame, opts: &MetaOptions) -> Result<Summary, MetaError> {
        Self::compute_with_progress(frame, opts, &|_, _| {})
    }

    /// [`Summary::compute`], telling `progress` (done, total) of the bootstrap resamples as
    /// they are drawn, from any thread.
    pub fn compute_with_progress(
        frame: &mut Frame,
        opts: &MetaOptions,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<Summary, MetaError> {
        if frame.human_keys.is_empty() {
            return Err(MetaError::Input(
                "no item has human ratings (`human` field): nothing to meta-evaluate against"
                    .into(),
            ));
        }
        let combined = match opts.w {
            Some(w)
                if frame.columns.iter().any(|c| c.family == Family::BertScore)
                    && frame.columns.iter().any(|c| c.family != Family::BertScore) =>
            {
                let mean_b = add_combined(frame, w, &opts.combine_with)?;
                Some(Combination {
                    w,
                    with: opts.combine_with.clone(),
                    mean_b,
                })
            }
            _ => None,
        };
        let (fitted, combination) = if opts.fit_w {
            (
                fit_w(frame, &opts.combine_with, opts.bootstrap.seed)?,
                fitted_combinations(frame, &opts.bootstrap),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        let mut rows: Vec<Row> = Vec::new();
        for c in &frame.columns {
            let label = frame.row_label(c);
            if !rows.iter().any(|r| r.label == label) {
                let aspect = c.aspect.clone().filter(|a| !frame.human_keys.contains(a));
                rows.push(Row {
                    label,
                    family: c.family,
                    aspect,
                });
            }
        }
        let humans: Vec<(String, Vec<Option<f64>>)> = frame
            .human_keys
            .iter()
            .map(|k| (k.clone(), frame.human(k)))
            .collect();
        // Items that are whole dialogues are the dialogue level themselves: nothing varies
        // within one.
        let whole_dialogues = (!frame.items.is_empty())
            && (frame.items.iter()).all(|i| i.scope == crate::data::Scope::Dialogue);
        let levels: Vec<Level> = (Level::ALL.into_iter())
            .filter(|l| !(whole_dialogues && *l == Level::Dialogue))
            .collect();
        let mut tasks = Vec::new();
        for c in &frame.columns {
            for (key, h) in &humans {
                if frame.pairs_with(c, key) {
                    for &level in &levels {
                        tasks.push((frame.row_label(c), c, key, h, level));
                    }
                }
            }
        }
        let items = &frame.items;
        // Each cell draws its resamples once for all its coefficients.
        let total = tasks.len() * opts.bootstrap.resamples;
        let drawn = std::sync::atomic::AtomicUsize::new(0);
        let resampled = || {
            let done = drawn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress(done, total);
        };
        let correlations: Vec<Entry> = tasks
            .par_iter()
            .filter_map(|(row, c, key, h, level)| {
                let cell_key = format!("{row}\u{0}{key}\u{0}{}", level.name());
                let boot = &opts.bootstrap;
                correlate(*level, items, &c.values, h, boot, &cell_key, &resampled).map(|cell| {
                    Entry {
                        row: row.clone(),
                        human: (*key).clone(),
                        level: *level,
                        cell,
                    }
                })
            })
            .collect();
        let human = frame
            .human_keys
            .iter()
            .map(|k| rater_agreement(items, k))
            .collect();
        let human_matrix = aspect_matrix(
            frame.human_keys.clone(),
            &humans.iter().map(|(_, h)| h.clone()).collect::<Vec<_>>(),
        );
        let expected: Vec<_> = frame
            .columns
            .iter()
            .filter(|c| c.family == Family::JudgeExpected && c.aspect.is_some())
            .collect();
        let judge_matrix = (expected.len() > 1).then(|| {
            aspect_matrix(
                expected.iter().map(|c| frame.row_label(c)).collect(),
                &expected
                    .iter()
                    .map(|c| c.values.clone())
                    .collect::<Vec<_>>(),
            )
        });
        Ok(Summary {
            hyoka: crate::version::VERSION.to_string(),
            items: items.len(),
            whole_dialogues,
            sources: frame.sources.clone(),
            bootstrap: opts.bootstrap,
            combined,
            rows,
            human,
            correlations,
            human_matrix,
            judge_matrix,
            fit_w: fitted,
            combination,
            breakdown: breakdown_detection(frame, &opts.breakdown),
            chance: chance_agreement(frame),
            alt_test: alt_tests(frame, &opts.alt_test),
            length_bias: length_biases(frame),
            script: script_check(frame),
        })
    }

    pub fn cell(&self, row: &str, human: &str, level: Level) -> Option<&Cell> {
        self.correlations
            .iter()
            .find(|e| e.row == row && e.human == human && e.level == level)
            .map(|e| &e.cell)
    }

    pub fn human_keys(&self) -> Vec<&str> {
        self.human.iter().map(|h| h.key.as_str()).collect()
    }

    /// What the numbers come from: each results file's run, the combination, the intervals.
    pub fn provenance_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.sources.iter().map(describe_source).collect();
        if let Some(c) = &self.combined {
            lines.push(format!(
                "combined = judge + {} × (BERTScore {} − {:.4}) (mean over the items)",
                c.w, c.with, c.mean_b
            ));
        }
        let b = &self.bootstrap;
        lines.push(format!(
            "intervals: {:.0}% percentile bootstrap, {} resamples, seed {}",
            b.confidence * 100.0,
            b.resamples,
            b.seed
        ));
        lines
    }

    /// One level's table in the paper's layout (rows = methods, columns = human aspects, cells =
    /// Spearman/Pearson) with its unit counts; None when the level has no cell.
    /// A level's heading: the item level of whole dialogues says so.
    pub fn level_title(&self, level: Level) -> &'static str {
        if self.whole_dialogues && level == Level::Item {
            "Item level (whole dialogues)"
        } else {
            level.title()
        }
    }

    pub fn level_table(&self, level: Level) -> Option<String> {
        let n: Vec<usize> = self
            .correlations
            .iter()
            .filter(|e| e.level == level)
            .map(|e| e.cell.n)
            .collect();
        if n.is_empty() {
            return None;
        }
        let keys = self.human_keys();
        let mut md = String::new();
        let _ = writeln!(md, "| method | {} |", md_all(&keys).join(" | "));
        let _ = writeln!(md, "|---|{}", "---|".repeat(keys.len()));
        for row in &self.rows {
            let cells: Vec<String> = keys
                .iter()
                .map(|k| match self.cell(&row.label, k, level) {
                    Some(c) => format!(
                        "{}/{} (n={}){}",
                        format_r(c.spearman.map(|s| s.r)),
                        format_r(c.pearson.map(|s| s.r)),
                        c.n,
                        if c.few_units() { " †" } else { "" }
                    ),
                    None => "".into(),
                })
                .collect();
            let _ = writeln!(md, "| {} | {} |", md_text(&row.label), cells.join(" | "));
        }
        let unit = match level {
            Level::Item => "items",
            Level::System => "systems",
            Level::Dialogue => "dialogues with a defined correlation",
        };
        let _ = writeln!(
            md,
            "\n(n) = {unit} behind each coefficient; — = undefined (constant scores or too few units)."
        );
        if n.iter().any(|&n| n < super::levels::FEW_UNITS) {
            let _ = writeln!(
                md,
                "† fewer than {} {unit}: a coefficient over so few units says little (over 3, ±1 comes by chance one time in three).",
                super::levels::FEW_UNITS
            );
        }
        Some(md)
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# hyoka meta-evaluation\n");
        let _ = writeln!(md, "{} items; hyoka {}.", self.items, self.hyoka);
        for line in self.provenance_lines() {
            let _ = writeln!(md, "- {line}");
        }
        let _ = writeln!(
            md,
            "\n## Correlation with human ratings (Spearman / Pearson)\n"
        );
        for level in Level::ALL {
            if let Some(table) = self.level_table(level) {
                let _ = writeln!(md, "### {}\n\n{table}", self.level_title(level));
            }
        }
        let _ = writeln!(md, "## Item level in detail (coefficient [95% CI] p)\n");
        let _ = writeln!(
            md,
            "| method | human | n | Spearman | Pearson | Kendall τ-b |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for e in self.correlations.iter().filter(|e| e.level == Level::Item) {
            let c = &e.cell;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                md_text(&e.row),
                md_text(&e.human),
                c.n,
                detail(c.spearman),
                detail(c.pearson),
                detail(c.kendall)
            );
        }
        let _ = writeln!(
            md,
            "\n## Human ratings (each rater against the mean of the others)\n"
        );
        let _ = writeln!(
            md,
            "| aspect | items | mean | std | r_s | r_p | α nominal | α interval | raters |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
        for h in &self.human {
            let basis = match h.basis {
                Some(super::RaterBasis::Ids) => "by id",
                Some(super::RaterBasis::Slots) => "by slot",
                None => "no per-rater ratings",
            };
            let _ = writeln!(
                md,
                "| {} | {} | {:.3} | {:.3} | {} | {} | {} | {} | {} of {} ({basis}) |",
                md_text(&h.key),
                h.items,
                h.mean,
                h.std,
                format_r(h.agreement_spearman),
                format_r(h.agreement_pearson),
                format_r(h.alpha_nominal),
                format_r(h.alpha_interval),
                h.raters_used,
                h.raters_seen
            );
        }
        if !self.chance.is_empty() {
            md.push_str(&chance_markdown(&self.chance));
        }
        if !self.alt_test.is_empty() {
            md.push_str(&alt_test_markdown(&self.alt_test));
        }
        for (title, m) in [
            ("human aspects", Some(&self.human_matrix)),
            ("judge expected scores", self.judge_matrix.as_ref()),
        ] {
            let Some(m) = m else { continue };
            if m.keys.len() < 2 {
                continue;
            }
            let _ = writeln!(md, "\n## Spearman between {title}\n");
            let _ = writeln!(md, "| | {} |", md_all(&m.keys).join(" | "));
            let _ = writeln!(md, "|---|{}", "---|".repeat(m.keys.len()));
            for (k, row) in m.keys.iter().zip(&m.spearman) {
                let cells: Vec<String> = row.iter().map(|v| format_r(*v)).collect();
                let _ = writeln!(md, "| {} | {} |", md_text(k), cells.join(" | "));
            }
        }
        if !self.fit_w.is_empty() {
            let _ = writeln!(
                md,
                "\n## w chosen on a development half of the dialogues (Spearman)\n"
            );
            let _ = writeln!(
                md,
                "| judge column | human | w | dev | held-out combined | held-out judge | held-out BERTScore | dev/test items |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
            for f in &self.fit_w {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.3} | {} | {} | {} | {}/{} |",
                    md_text(&f.column),
                    md_text(&f.human),
                    f.w,
                    f.dev_spearman,
                    format_r(f.test_combined),
                    format_r(f.test_judge),
                    format_r(f.test_bertscore),
                    f.dev_items,
                    f.test_items
                );
            }
        }
        if !self.combination.is_empty() {
            md.push_str(&combination_markdown(&self.combination));
        }
        for entry in &self.breakdown {
            breakdown_markdown(&mut md, entry);
        }
        md.push_str(&bias_markdown(&self.length_bias, &self.script));
        md
    }
}

/// One breakdown-detection entry: its settings, then a row per predictor and set of turns.
fn breakdown_markdown(md: &mut String, e: &BreakdownEntry) {
    let _ = writeln!(
        md,
        "\n## Breakdown detection (DBDC metrics): {} against {}\n",
        md_text(&e.column),
        md_text(&e.human)
    );
    let _ = write!(
        md,
        "Levels {}; gold label: the raters' majority at threshold {}; JS divergence in bits. \
         Split by dialogue (seed {}): {} development, {} held-out turns",
        e.levels, e.threshold, e.seed, e.dev_turns, e.held_out_turns
    );
    if let Some(p) = e.prior {
        let _ = write!(
            md,
            "; prior (development mean) O/T/X {:.3}/{:.3}/{:.3}",
            p[0], p[1], p[2]
        );
    }
    let _ = writeln!(md, ".\n");
    if let Some(c) = &e.calibration {
        let names = ["O", "T", "X"];
        let bias: Vec<String> = c
            .labels
            .iter()
            .zip(&c.bias)
            .skip(1)
            .map(|(k, b)| format!("{} {b:+.3}", names[*k]))
            .collect();
        let _ = writeln!(
            md,
            "Calibration fitted on the development turns: temperature {:.3}, bias {} \
             (cross-entropy {:.4} → {:.4}).\n",
            c.temperature,
            bias.join(", "),
            c.dev_cross_entropy_before,
            c.dev_cross_entropy_after
        );
    }
    let columns = super::breakdown::BreakdownMetrics::COLUMNS;
    let _ = writeln!(md, "| predictor | turns | n | {} |", columns.join(" | "));
    let _ = writeln!(md, "|---|---|---|{}", "---|".repeat(columns.len()));
    for r in &e.rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            r.predictor.name(),
            r.turns.name(),
            r.metrics.turns,
            r.metrics.cells().join(" | ")
        );
    }
}

fn detail(s: Option<Stat>) -> String {
    let Some(s) = s else { return "—".into() };
    let mut out = format!("{:.3}", s.r);
    if let Some([lo, hi]) = s.ci {
        let _ = write!(out, " [{lo:.3}, {hi:.3}]");
    }
    if let Some(p) = s.p {
        let _ = write!(out, " p={p:.2e}");
    }
    out
}

fn describe_source(s: &Value) -> String {
    let task = s["task"].as_str().unwrap_or("?");
    let models: Vec<String> = s["models"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    let what = m["description"]
                        .as_str()
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default();
                    format!(
                        "{} (sha256 {:.12}{what})",
                        m["name"].as_str().unwrap_or("?"),
                        m["sha256"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let rubric = s
        .pointer("/rubric/name")
        .and_then(Value::as_str)
        .map(|r| format!(", rubric {r}"))
        .unwrap_or_default();
    let settings = s
        .get("settings")
        .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
        .map(|v| format!(", {v}"))
        .unwrap_or_default();
    let origin = s["run"]
        .as_str()
        .map(|run| format!("[{run}] "))
        .unwrap_or_default();
    format!(
        "{origin}{task}: {}{rubric}, {} on {}{settings}{}",
        models.join(", "),
        s["dtype"].as_str().unwrap_or("?"),
        s["device"].as_str().unwrap_or("?"),
        describe_lines(&s["lines"])
    )
}

/// How many of the items a results file scored, and what became of the rest: an item the judge
/// could not score is unscored, never a number in any statistic.
fn describe_lines(lines: &Value) -> String {
    let count = |key: &str| lines[key].as_u64().unwrap_or(0);
    if lines.is_null() {
        return String::new();
    }
    let mut parts = vec![format!("{} items scored", count("scored"))];
    for (key, what) in [
        (
            "unscored",
            "unscored (error lines: the scorer failed on them)",
        ),
        (
            "not_applicable",
            "not applicable (nothing to score by definition)",
        ),
        ("without_line", "without a line"),
    ] {
        if count(key) > 0 {
            parts.push(format!("{} {what}", count(key)));
        }
    }
    if count("other_ids") > 0 {
        parts.push(format!(
            "{} lines for other ids left out",
            count("other_ids")
        ));
    }
    format!(" — {}", parts.join(", "))
}

/// The section of summary.md: one row per judge column and human aspect.
fn chance_markdown(entries: &[ChanceAgreement]) -> String {
    let mut md = String::from(
        "\n## Chance-corrected agreement of the judge's most probable score\n\n\
         Cohen's κ (and quadratic-weighted κ) with each rater, averaged over the raters, and with \
         the raters' majority; Krippendorff's α (nominal / interval) of the raters with the judge \
         as one more (beside the raters' own α above).\n\n\
         | method | human | κ | weighted κ | raters | κ majority | weighted κ majority | \
         items (majority) | α nominal / interval with the judge |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for e in entries {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} / {} |\n",
            md_text(&e.column),
            md_text(&e.human),
            format_r(e.kappa),
            format_r(e.weighted_kappa),
            e.raters,
            format_r(e.kappa_majority),
            format_r(e.weighted_kappa_majority),
            e.items,
            e.majority_items,
            format_r(e.alpha_nominal_with_judge),
            format_r(e.alpha_interval_with_judge),
        ));
    }
    md
}

/// The section of summary.md: one row per judge column and human aspect, its cautions below.
fn alt_test_markdown(entries: &[AltTest]) -> String {
    let mut md = String::from(
        "\n## Can the judge replace a rater? (alternative annotator test)\n\n\
         Each rater left out in turn: on their items, the judge's most probable score and the \
         rater's rating are scored by how well they align with the other raters (ε: the \
         advantage a rater may keep and still be replaced; Benjamini–Yekutieli over the raters). \
         ω, the winning rate: the share of raters the judge can replace — it passes at ω ≥ 0.5. \
         ρ, the advantage probability: how often the judge aligns with the others at least as \
         well as the left-out rater.\n\n\
         | method | human | alignment | ε | items | raters tested (left out) | ω | ρ | result |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let mut notes = Vec::new();
    for e in entries {
        let result = match e.passed {
            Some(true) => "passes",
            Some(false) => "fails",
            None => "not applicable",
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} ({}) | {} | {} | {result} |\n",
            md_text(&e.column),
            md_text(&e.human),
            e.options.alignment.name(),
            e.options.epsilon,
            e.outcome.items,
            e.outcome.per_rater.len(),
            e.outcome.skipped.len(),
            format_r(e.outcome.winning_rate),
            format_r(e.outcome.advantage_probability),
        ));
        for c in &e.cautions {
            notes.push(format!(
                "- {} / {}: {}",
                md_text(&e.column),
                md_text(&e.human),
                c
            ));
        }
    }
    if !notes.is_empty() {
        md.push('\n');
        md.push_str(&notes.join("\n"));
        md.push('\n');
    }
    md
}
