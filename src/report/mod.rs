//! Stage 9 — report: the joined per-item scores file and the self-contained HTML report (one
//! file, inline SVG and CSS, no scripts or network) built from a meta-evaluation summary; a
//! judge's breakdown labels in the DBDC challenge's run format (`dbdc3`); the pairwise report
//! (`pairwise`).

mod bias;
pub mod dbdc3;
mod pairwise;
mod svg;

pub use pairwise::pairwise_html;

use crate::meta::{BreakdownEntry, Family, Frame, Level, Statistic, Summary, format_r};
use serde_json::{Map, Value, json};
use std::fmt::Write;

/// One line per item: its id, system, dialogue, human means and every score column (the
/// combined columns included), keyed by row label.
pub fn score_lines(frame: &Frame) -> Vec<String> {
    frame
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let mut line = Map::new();
            line.insert("id".into(), item.id_json());
            if let Some(s) = &item.system {
                line.insert("system".into(), json!(s));
            }
            if let Some(d) = &item.dialogue {
                line.insert("dialogue".into(), json!(d));
            }
            let human: Map<String, Value> = item
                .human
                .iter()
                .map(|(k, r)| (k.clone(), json!(r.mean())))
                .collect();
            line.insert("human".into(), Value::Object(human));
            let mut scores = Map::new();
            for c in &frame.columns {
                scores.insert(frame.column_title(c), json!(c.values[i]));
            }
            line.insert("scores".into(), Value::Object(scores));
            Value::Object(line).to_string()
        })
        .collect()
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Noto Sans JP',sans-serif;margin:24px;color:#222;max-width:1200px}\
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.grid{display:flex;flex-wrap:wrap;gap:12px}\
figure{margin:0}figcaption{font-size:12px;color:#555;max-width:260px}.note{color:#666;font-size:13px}";

/// The whole report as one HTML document.
pub fn html(summary: &Summary, frame: &Frame) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"ja\"><head><meta charset=\"utf-8\"><title>hyoka report</title><style>{STYLE}</style></head><body>"
    );
    let _ = write!(
        h,
        "<h1>hyoka evaluation report</h1><p class=\"note\">{} items · hyoka {}</p><ul>",
        summary.items,
        svg::escape(&summary.hyoka)
    );
    for line in summary.provenance_lines() {
        let _ = write!(h, "<li>{}</li>", svg::escape(&line));
    }
    h.push_str("</ul>");
    let keys: Vec<String> = summary.human_keys().into_iter().map(String::from).collect();
    for level in Level::ALL {
        if !summary.correlations.iter().any(|e| e.level == level) {
            continue;
        }
        let _ = write!(
            h,
            "<h2>{} — Spearman / Pearson</h2><table><tr><th>method</th>",
            summary.level_title(level)
        );
        for k in &keys {
            let _ = write!(h, "<th>{}</th>", svg::escape(k));
        }
        h.push_str("</tr>");
        for row in &summary.rows {
            let _ = write!(h, "<tr><td>{}</td>", svg::escape(&row.label));
            for k in &keys {
                match summary.cell(&row.label, k, level) {
                    Some(c) => {
                        let s = c.spearman.map(|s| s.r);
                        let ci = c
                            .spearman
                            .and_then(|s| s.ci)
                            .map(|[lo, hi]| format!("95% CI of ρ: [{lo:.3}, {hi:.3}], n = {}", c.n))
                            .unwrap_or_else(|| format!("n = {}", c.n));
                        // A coefficient over too few units is shown, marked, and not coloured.
                        let (colour, mark) = if c.few_units() {
                            ("transparent".to_string(), " †")
                        } else {
                            (svg::colour(s), "")
                        };
                        let _ = write!(
                            h,
                            "<td style=\"background:{colour}\" title=\"{ci}\">{}/{} <small>(n={})</small>{mark}</td>",
                            format_r(s),
                            format_r(c.pearson.map(|p| p.r)),
                            c.n
                        );
                    }
                    None => h.push_str("<td></td>"),
                }
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
        let few = summary
            .correlations
            .iter()
            .any(|e| e.level == level && e.cell.few_units());
        if few {
            let _ = write!(
                h,
                "<p><small>† fewer than {} units: a coefficient over so few says little.</small></p>",
                crate::meta::FEW_UNITS
            );
        }
    }
    // Heatmap of the item-level Spearman, and the aspect matrices.
    let values: Vec<Vec<Option<f64>>> = summary
        .rows
        .iter()
        .map(|r| {
            keys.iter()
                .map(|k| {
                    summary
                        .cell(&r.label, k, Level::Item)
                        .and_then(|c| c.spearman.map(|s| s.r))
                })
                .collect()
        })
        .collect();
    let labels: Vec<String> = summary.rows.iter().map(|r| r.label.clone()).collect();
    let _ = write!(
        h,
        "<h2>Item-level Spearman with human ratings</h2>{}",
        svg::heatmap("item-level Spearman", &labels, &keys, &values)
    );
    for (title, m) in [
        (
            "Spearman between human aspects",
            Some(&summary.human_matrix),
        ),
        (
            "Spearman between the judge's expected scores",
            summary.judge_matrix.as_ref(),
        ),
    ] {
        if let Some(m) = m.filter(|m| m.keys.len() > 1) {
            let _ = write!(
                h,
                "<h2>{title}</h2>{}",
                svg::heatmap(title, &m.keys, &m.keys, &m.spearman)
            );
        }
    }
    h.push_str("<h2>Human ratings</h2><table><tr><th>aspect</th><th>items</th><th>mean</th><th>std</th><th>r_s</th><th>r_p</th><th>raters</th></tr>");
    for a in &summary.human {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{} of {}</td></tr>",
            svg::escape(&a.key),
            a.items,
            a.mean,
            a.std,
            format_r(a.agreement_spearman),
            format_r(a.agreement_pearson),
            a.raters_used,
            a.raters_seen
        );
    }
    h.push_str("</table><h2>Score distributions</h2><div class=\"grid\">");
    for c in &frame.columns {
        let v: Vec<f64> = c.values.iter().flatten().copied().collect();
        if v.is_empty() {
            continue;
        }
        let title = frame.column_title(c);
        let _ = write!(
            h,
            "<figure>{}<figcaption>{}</figcaption></figure>",
            svg::histogram(&title, &v),
            svg::escape(&title)
        );
    }
    h.push_str("</div><h2>Scores against human means (items)</h2><div class=\"grid\">");
    for c in frame.columns.iter().filter(|c| {
        matches!(
            c.family,
            Family::JudgeExpected | Family::Combined | Family::BertScore
        )
    }) {
        if c.family == Family::Combined && c.statistic == Statistic::Argmax
            || c.family == Family::BertScore && c.statistic != Statistic::F
        {
            continue;
        }
        for k in keys.iter().filter(|k| frame.pairs_with(c, k)) {
            let human = frame.human(k);
            let points: Vec<(f64, f64)> = c
                .values
                .iter()
                .zip(&human)
                .filter_map(|(x, y)| Some(((*x)?, (*y)?)))
                .collect();
            let title = frame.column_title(c);
            let rho = format_r(
                summary
                    .cell(&frame.row_label(c), k, Level::Item)
                    .and_then(|cell| cell.spearman)
                    .map(|s| s.r),
            );
            let caption = format!("{title} vs human {k}: ρ = {rho}, n = {}", points.len());
            let _ = write!(
                h,
                "<figure>{}<figcaption>{}</figcaption></figure>",
                svg::scatter(&caption, &title, &format!("human {k}"), &points),
                svg::escape(&caption)
            );
        }
    }
    h.push_str("</div>");
    if !summary.fit_w.is_empty() {
        h.push_str("<h2>w chosen on a development half</h2><table><tr><th>judge column</th><th>human</th><th>w</th><th>dev ρ</th><th>held-out combined</th><th>held-out judge</th><th>held-out BERTScore</th></tr>");
        for f in &summary.fit_w {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                svg::escape(&f.column),
                svg::escape(&f.human),
                f.w,
                f.dev_spearman,
                format_r(f.test_combined),
                format_r(f.test_judge),
                format_r(f.test_bertscore)
            );
        }
        h.push_str("</table>");
    }
    combination_table(&mut h, summary);
    for e in &summary.breakdown {
        breakdown_table(&mut h, e);
    }
    alt_test_section(&mut h, summary);
    bias::bias_section(&mut h, summary, frame);
    h.push_str("<p class=\"note\">Undefined correlations (constant scores, fewer than 3 units) are shown as —. Generated offline by hyoka; this file loads nothing from the network.</p></body></html>\n");
    h
}

/// Every score column combined (fitted on the development half) against the best single
/// column, on the held-out half.
fn combination_table(h: &mut String, summary: &Summary) {
    if summary.combination.is_empty() {
        return;
    }
    let stat = |s: Option<crate::meta::Stat>| match s {
        Some(s) => match s.ci {
            Some([lo, hi]) => format!("{:.3} <small>[{lo:.3}, {hi:.3}]</small>", s.r),
            None => format!("{:.3}", s.r),
        },
        None => "—".into(),
    };
    h.push_str("<h2>A combination of every score column</h2><p class=\"note\">Ridge regression on the columns standardised on the development half, its penalty chosen there by leave-one-out error; Spearman ρ [95% CI] on the held-out half.</p><table><tr><th>human</th><th>columns</th><th>α</th><th>dev/test items</th><th>combination</th><th>best single column</th><th>its ρ</th></tr>");
    for f in &summary.combination {
        let (best, best_test) = match &f.best_single {
            Some(b) => (svg::escape(&b.column), stat(b.test)),
            None => ("—".into(), "—".into()),
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{best}</td><td>{best_test}</td></tr>",
            svg::escape(&f.human),
            f.columns.len(),
            f.alpha,
            f.dev_items,
            f.test_items,
            stat(f.test)
        );
    }
    h.push_str("</table>");
}

/// The alternative annotator test: a table of ω and ρ, and each test's raters as bars.
fn alt_test_section(h: &mut String, summary: &Summary) {
    if summary.alt_test.is_empty() {
        return;
    }
    h.push_str("<h2>Can the judge replace a rater? (alternative annotator test)</h2><p class=\"note\">ω: the share of raters the judge can replace (it passes at ω ≥ 0.5); ρ: how often it aligns with the other raters at least as well as the left-out rater. Bars: each rater's items won by the judge minus those won by the rater; green where the judge can replace the rater.</p><table><tr><th>method</th><th>human</th><th>alignment</th><th>ε</th><th>raters tested (left out)</th><th>ω</th><th>ρ</th><th>result</th></tr>");
    for e in &summary.alt_test {
        let result = match e.passed {
            Some(true) => "passes",
            Some(false) => "fails",
            None => "not applicable",
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ({})</td><td>{}</td><td>{}</td><td>{result}</td></tr>",
            svg::escape(&e.column),
            svg::escape(&e.human),
            e.options.alignment.name(),
            e.options.epsilon,
            e.outcome.per_rater.len(),
            e.outcome.skipped.len(),
            format_r(e.outcome.winning_rate),
            format_r(e.outcome.advantage_probability),
        );
    }
    h.push_str("</table><div class=\"grid\">");
    for e in summary
        .alt_test
        .iter()
        .filter(|e| !e.outcome.per_rater.is_empty())
    {
        let caption = format!("{} — {}", e.column, e.human);
        let bars: Vec<(String, f64, bool)> = (e.outcome.per_rater.iter())
            .map(|r| (r.rater.clone(), r.judge_wins - r.rater_wins, r.replaced))
            .collect();
        let _ = write!(
            h,
            "<figure>{}<figcaption>{}</figcaption></figure>",
            svg::rater_advantages(&caption, e.options.epsilon, &bars),
            svg::escape(&caption)
        );
    }
    h.push_str("</div>");
}

/// A breakdown-detection entry as a table, the challenge's metrics in its columns.
fn breakdown_table(h: &mut String, e: &BreakdownEntry) {
    let _ = write!(
        h,
        "<h2>Breakdown detection (DBDC metrics): {} against {}</h2><p class=\"note\">levels {}; \
         gold label at threshold {}; JS divergence in bits; {} development / {} held-out turns \
         (seed {})</p>",
        svg::escape(&e.column),
        svg::escape(&e.human),
        svg::escape(&e.levels),
        e.threshold,
        e.dev_turns,
        e.held_out_turns,
        e.seed
    );
    h.push_str("<table><tr><th>predictor</th><th>turns</th><th>n</th>");
    for title in crate::meta::breakdown::BreakdownMetrics::COLUMNS {
        let _ = write!(h, "<th>{title}</th>");
    }
    h.push_str("</tr>");
    for r in &e.rows {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td>",
            r.predictor.name(),
            r.turns.name(),
            r.metrics.turns
        );
        for cell in r.metrics.cells() {
            let _ = write!(h, "<td>{cell}</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    if let Some(c) = &e.calibration {
        let _ = write!(
            h,
            "<p class=\"note\">calibration fitted on the development turns: temperature {:.3}, \
             biases {:?}, cross-entropy {:.4} → {:.4}</p>",
            c.temperature, c.bias, c.dev_cross_entropy_before, c.dev_cross_entropy_after
        );
    }
}
