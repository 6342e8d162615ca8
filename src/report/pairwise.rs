//! The HTML report of a pairwise meta-evaluation: per aspect a ranking plot (each system's
//! strength with its bootstrap interval) and the tables of summary.md.

use super::STYLE;
use super::svg::escape;
use crate::meta::pairwise::{AspectRanking, PairwiseSummary};
use std::fmt::Write;

/// The whole report as one HTML document.
pub fn pairwise_html(s: &PairwiseSummary) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"ja\"><head><meta charset=\"utf-8\"><title>hyoka pairwise report</title><style>{STYLE}</style></head><body><h1>hyoka pairwise report</h1><p class=\"note\">{} pairs · {} systems · {} contexts · rubric {} · hyoka {}</p>",
        s.pairs,
        s.systems,
        s.contexts,
        escape(s.rubric.as_deref().unwrap_or("—")),
        escape(&s.hyoka)
    );
    let _ = write!(
        h,
        "<p class=\"note\">Strength: Bradley–Terry log-strength with ties (Davidson), fitted to the order-averaged verdict probabilities, mean 0; whiskers: {:.0} % percentile bootstrap over contexts ({} resamples, seed {}).</p>",
        s.options.level * 100.0,
        s.options.bootstrap,
        s.options.seed
    );
    for a in &s.aspects {
        let _ = write!(h, "<h2>{}</h2>", escape(&a.aspect));
        h.push_str(&ranking_plot(a));
        h.push_str("<table><tr><th>system</th><th>strength</th><th>interval</th><th>win rate</th><th>expected win rate</th><th>W / T / L</th></tr>");
        for r in &a.systems {
            let interval = r
                .interval
                .map_or_else(|| "—".into(), |[lo, hi]| format!("[{lo:.3}, {hi:.3}]"));
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{interval}</td><td>{:.3}</td><td>{:.3}</td><td>{} / {} / {}</td></tr>",
                escape(&r.system),
                r.strength.map_or_else(|| "—".into(), |x| format!("{x:.3}")),
                r.win_rate,
                r.expected_win_rate,
                r.wins,
                r.ties,
                r.losses
            );
        }
        h.push_str("</table>");
        if let Some(c) = &a.style_controlled {
            controlled_table(&mut h, c);
        }
        if let Some(lc) = &a.length_controlled {
            length_controlled_table(&mut h, lc);
        }
        let _ = write!(
            h,
            "<p class=\"note\">Position consistency {:.3}; flip rate {:.3}; position bias {:+.3}; tie parameter ν {}. The longer response wins {} of {} decided pairs of different lengths ({}).</p>",
            a.consistency,
            a.flip_rate,
            a.position_bias,
            a.tie_parameter
                .map_or_else(|| "—".into(), |x| format!("{x:.3}")),
            a.longer_wins.longer_won,
            a.longer_wins.decided,
            a.longer_wins
                .p
                .map_or_else(|| "—".into(), |p| format!("binomial test p = {p:.2e}"))
        );
        if !a.human.is_empty() {
            h.push_str("<table><tr><th>human key</th><th>from</th><th>comparisons</th><th>agreement with ties</th><th>without ties</th><th>Cohen's κ</th><th>systems' Spearman ρ</th></tr>");
            let f = |x: Option<f64>| x.map_or_else(|| "—".into(), |x| format!("{x:.3}"));
            for p in &a.human {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ({})</td><td>{}</td><td>{} ({})</td></tr>",
                    escape(&p.key),
                    p.source,
                    p.pairs,
                    f(p.agreement_with_ties),
                    f(p.agreement_without_ties),
                    p.pairs_without_ties,
                    f(p.kappa),
                    f(p.system_spearman),
                    p.systems
                );
            }
            h.push_str("</table>");
        }
    }
    h.push_str("</body></html>\n");
    h
}

/// One row per system, strongest on top: a dot at its strength, a line across its interval.
fn ranking_plot(a: &AspectRanking) -> String {
    let rows: Vec<(&str, f64, Option<[f64; 2]>)> = a
        .systems
        .iter()
        .filter_map(|r| Some((r.system.as_str(), r.strength?, r.interval)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for (_, s, i) in &rows {
        for v in std::iter::once(*s).chain(i.iter().flatten().copied()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if hi - lo < 1e-9 {
        lo -= 0.5;
        hi += 0.5;
    }
    let (left, width, row_h) = (140.0, 360.0, 22.0);
    let height = row_h * rows.len() as f64 + 30.0;
    let x = |v: f64| left + (v - lo) / (hi - lo) * width;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" role="img"><title>ranking: {t}</title><line x1="{z}" x2="{z}" y1="4" y2="{b}" stroke="#ccc" stroke-dasharray="3 3"/>"##,
        w = left + width + 20.0,
        t = escape(&a.aspect),
        z = x(0.0_f64.clamp(lo, hi)),
        b = height - 22.0,
    );
    for (k, (system, s, interval)) in rows.iter().enumerate() {
        let y = 14.0 + row_h * k as f64;
        let _ = write!(
            svg,
            r##"<text x="{tx}" y="{ty}" font-size="11" text-anchor="end">{name}</text>"##,
            tx = left - 8.0,
            ty = y + 4.0,
            name = escape(system)
        );
        if let Some([l, u]) = interval {
            let _ = write!(
                svg,
                r##"<line x1="{a}" x2="{b}" y1="{y}" y2="{y}" stroke="#1f77b4" stroke-width="2"/>"##,
                a = x(*l),
                b = x(*u)
            );
        }
        let _ = write!(
            svg,
            r##"<circle cx="{cx}" cy="{y}" r="4" fill="#d62728"/>"##,
            cx = x(*s)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{left}" y="{ty}" font-size="9">{lo:.2}</text><text x="{r}" y="{ty}" font-size="9" text-anchor="end">{hi:.2}</text><text x="{c}" y="{ty}" font-size="10" text-anchor="middle">log-strength</text></svg>"##,
        ty = height - 6.0,
        r = left + width,
        c = left + width / 2.0
    );
    svg
}

/// The style-controlled strengths, their coefficients, and the warning when the raw and the
/// controlled strengths order the systems differently.
fn controlled_table(h: &mut String, c: &crate::meta::pairwise::controlled::Controlled) {
    let coefficients: Vec<String> = (c.covariates.iter().zip(&c.coefficients))
        .map(|(n, b)| format!("{} β = {b:+.3}", escape(n)))
        .collect();
    let _ = write!(
        h,
        "<p class=\"note\">Style-controlled: the responses' {} held equal ({}).</p><table><tr><th>system</th><th>controlled strength</th><th>interval</th></tr>",
        escape(&c.covariates.join(" and ")),
        coefficients.join(", ")
    );
    for s in &c.systems {
        let interval = s
            .interval
            .map_or_else(|| "—".into(), |[lo, hi]| format!("[{lo:.3}, {hi:.3}]"));
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.3}</td><td>{interval}</td></tr>",
            escape(&s.system),
            s.strength
        );
    }
    h.push_str("</table>");
    if !c.reordered.is_empty() {
        let pairs: Vec<String> = (c.reordered.iter())
            .map(|[a, b]| format!("{} / {}", escape(a), escape(b)))
            .collect();
        let _ = write!(
            h,
            "<p><strong>Warning:</strong> the raw and the controlled strengths order {} differently.</p>",
            pairs.join(", ")
        );
    }
}

/// Each system's raw and length-controlled win rate against the baseline, in percent, and the
/// warning where the two are far apart.
fn length_controlled_table(
    h: &mut String,
    lc: &crate::meta::pairwise::length_controlled::LengthControlled,
) {
    let _ = write!(
        h,
        "<p class=\"note\">Win rates against {} with the length difference held at zero (AlpacaEval 2's length-controlled win rate), in percent.</p><table><tr><th>system</th><th>pairs</th><th>win rate</th><th>length-controlled</th><th>interval</th></tr>",
        escape(&lc.baseline)
    );
    let pct = |x: Option<f64>| x.map_or_else(|| "—".into(), |x| format!("{:.1}", 100.0 * x));
    for r in &lc.systems {
        let interval = r.interval.map_or_else(
            || "—".into(),
            |[lo, hi]| format!("[{:.1}, {:.1}]", 100.0 * lo, 100.0 * hi),
        );
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{interval}</td></tr>",
            escape(&r.system),
            r.pairs,
            pct(Some(r.win_rate)),
            pct(r.length_controlled_win_rate)
        );
    }
    h.push_str("</table>");
    for r in &lc.systems {
        if let Some(e) = &r.error {
            let _ = write!(
                h,
                "<p class=\"note\">{}: {}.</p>",
                escape(&r.system),
                escape(e)
            );
        }
        if r.extreme_change {
            let _ = write!(
                h,
                "<p><strong>Warning:</strong> {}'s length-controlled win rate is far from its raw one.</p>",
                escape(&r.system)
            );
        }
    }
}
