//! Small inline-SVG charts (no scripts, no external resources): histograms, scatter plots and
//! heatmaps for the self-contained HTML report.

use std::fmt::Write;

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A diverging colour for a correlation in [−1, 1]: blue (negative) – white – red (positive).
pub fn colour(r: Option<f64>) -> String {
    let Some(r) = r else { return "#e6e6e6".into() };
    let t = r.clamp(-1.0, 1.0);
    let (from, to) = if t >= 0.0 {
        ((255.0, 255.0, 255.0), (214.0, 39.0, 40.0))
    } else {
        ((255.0, 255.0, 255.0), (31.0, 119.0, 180.0))
    };
    let a = t.abs();
    let mix = |f: f64, g: f64| (f + (g - f) * a).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(from.0, to.0),
        mix(from.1, to.1),
        mix(from.2, to.2)
    )
}

fn range(values: &[f64]) -> (f64, f64) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    }
}

const W: f64 = 260.0;
const H: f64 = 180.0;
const PAD: f64 = 34.0;

fn frame(svg: &mut String, title: &str, x_label: &str, y_label: &str) {
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img"><title>{t}</title><rect x="{PAD}" y="8" width="{pw}" height="{ph}" fill="none" stroke="#999"/><text x="{cx}" y="{by}" font-size="10" text-anchor="middle">{xl}</text><text x="10" y="{cy}" font-size="10" text-anchor="middle" transform="rotate(-90 10 {cy})">{yl}</text>"##,
        t = escape(title),
        pw = W - PAD - 8.0,
        ph = H - PAD - 8.0,
        cx = PAD + (W - PAD - 8.0) / 2.0,
        by = H - 4.0,
        cy = 8.0 + (H - PAD - 8.0) / 2.0,
        xl = escape(x_label),
        yl = escape(y_label),
    );
}

fn ticks(svg: &mut String, (xlo, xhi): (f64, f64), (ylo, yhi): (f64, f64)) {
    let _ = write!(
        svg,
        r##"<text x="{PAD}" y="{ty}" font-size="9" text-anchor="start">{xlo:.2}</text><text x="{xr}" y="{ty}" font-size="9" text-anchor="end">{xhi:.2}</text><text x="{yx}" y="{yb}" font-size="9" text-anchor="end">{ylo:.2}</text><text x="{yx}" y="16" font-size="9" text-anchor="end">{yhi:.2}</text>"##,
        ty = H - PAD + 11.0,
        xr = W - 8.0,
        yx = PAD - 2.0,
        yb = H - PAD,
    );
}

/// Counts per value when there are few distinct values (integer scores), 20 bins otherwise.
pub fn histogram(title: &str, values: &[f64]) -> String {
    let mut svg = String::new();
    frame(&mut svg, title, title, "items");
    let mut distinct: Vec<f64> = values.to_vec();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    let (lo, hi) = range(values);
    let bins: Vec<(String, usize)> = if distinct.len() <= 12 {
        distinct
            .iter()
            .map(|v| (format!("{v}"), values.iter().filter(|x| *x == v).count()))
            .collect()
    } else {
        let mut counts = vec![0usize; 20];
        for v in values {
            let k = (((v - lo) / (hi - lo)) * 20.0).floor().clamp(0.0, 19.0) as usize;
            counts[k] += 1;
        }
        counts
            .into_iter()
            .enumerate()
            .map(|(k, c)| (format!("{:.2}", lo + (hi - lo) * k as f64 / 20.0), c))
            .collect()
    };
    let max = bins.iter().map(|b| b.1).max().unwrap_or(1).max(1) as f64;
    let (pw, ph) = (W - PAD - 8.0, H - PAD - 8.0);
    let bw = pw / bins.len().max(1) as f64;
    for (k, (label, c)) in bins.iter().enumerate() {
        let h = ph * *c as f64 / max;
        let _ = write!(
            svg,
            r##"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="#4c78a8"><title>{l}: {c}</title></rect>"##,
            x = PAD + bw * k as f64 + 1.0,
            y = 8.0 + ph - h,
            w = (bw - 2.0).max(1.0),
            l = escape(label),
        );
    }
    ticks(&mut svg, (lo, hi), (0.0, max));
    svg.push_str("</svg>");
    svg
}

/// Score (x) against the human mean (y), one dot per item.
pub fn scatter(title: &str, x_label: &str, y_label: &str, points: &[(f64, f64)]) -> String {
    let mut svg = String::new();
    frame(&mut svg, title, x_label, y_label);
    let xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    let (xr, yr) = (range(&xs), range(&ys));
    let (pw, ph) = (W - PAD - 8.0, H - PAD - 8.0);
    for (x, y) in points {
        let _ = write!(
            svg,
            r##"<circle cx="{:.1}" cy="{:.1}" r="2" fill="#4c78a8" fill-opacity="0.45"/>"##,
            PAD + pw * (x - xr.0) / (xr.1 - xr.0),
            8.0 + ph - ph * (y - yr.0) / (yr.1 - yr.0)
        );
    }
    ticks(&mut svg, xr, yr);
    svg.push_str("</svg>");
    svg
}

/// A matrix of correlations as coloured cells with their values.
pub fn heatmap(
    title: &str,
    rows: &[String],
    cols: &[String],
    values: &[Vec<Option<f64>>],
) -> String {
    let cell = 54.0;
    let left = 8.0 + 6.5 * rows.iter().map(|r| r.chars().count()).max().unwrap_or(4) as f64;
    let top = 16.0
        + 6.5
            * cols
                .iter()
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(4)
                .min(24) as f64;
    let width = left + cell * cols.len() as f64 + 8.0;
    let height = top + 24.0 * rows.len() as f64 + 8.0;
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="img"><title>{}</title>"##,
        escape(title)
    );
    for (j, c) in cols.iter().enumerate() {
        let x = left + cell * j as f64 + cell / 2.0;
        let _ = write!(
            svg,
            r##"<text x="{x:.1}" y="{y:.1}" font-size="10" transform="rotate(-40 {x:.1} {y:.1})">{}</text>"##,
            escape(c),
            y = top - 4.0
        );
    }
    for (i, r) in rows.iter().enumerate() {
        let y = top + 24.0 * i as f64;
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{}</text>"##,
            left - 4.0,
            y + 15.0,
            escape(r)
        );
        for (j, v) in values[i].iter().enumerate() {
            let x = left + cell * j as f64;
            let label = v.map_or("—".to_string(), |v| format!("{v:.2}"));
            let _ = write!(
                svg,
                r##"<rect x="{x:.1}" y="{y:.1}" width="{cell}" height="24" fill="{}" stroke="#fff"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{label}</text>"##,
                colour(*v),
                x + cell / 2.0,
                y + 15.0
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The alternative annotator test, one bar per tested rater: the judge's share of wins minus
/// the rater's, from −1 to 1, with the margin −ε dashed; a rater the judge can replace is green.
pub fn rater_advantages(title: &str, epsilon: f64, raters: &[(String, f64, bool)]) -> String {
    let mut svg = String::new();
    frame(
        &mut svg,
        title,
        "raters (left out in turn)",
        "judge − rater wins",
    );
    let (pw, ph) = (W - PAD - 8.0, H - PAD - 8.0);
    let y_of = |v: f64| 8.0 + ph * (1.0 - v) / 2.0;
    let bw = pw / raters.len().max(1) as f64;
    for (k, (name, advantage, replaced)) in raters.iter().enumerate() {
        let (top, bottom) = (y_of(advantage.max(0.0)), y_of(advantage.min(0.0)));
        let _ = write!(
            svg,
            r##"<rect x="{x:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"><title>{n}: {advantage:+.3}{what}</title></rect>"##,
            x = PAD + bw * k as f64 + bw * 0.1,
            w = (bw * 0.8).max(0.5),
            h = (bottom - top).max(0.5),
            fill = if *replaced { "#2ca02c" } else { "#999999" },
            n = escape(name),
            what = if *replaced { ", replaced" } else { "" },
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{PAD}" x2="{x2:.1}" y1="{z:.1}" y2="{z:.1}" stroke="#333"/><line x1="{PAD}" x2="{x2:.1}" y1="{e:.1}" y2="{e:.1}" stroke="#d62728" stroke-dasharray="4 3"><title>−ε = {m}</title></line>"##,
        x2 = PAD + pw,
        z = y_of(0.0),
        e = y_of(-epsilon),
        m = -epsilon,
    );
    ticks(&mut svg, (1.0, raters.len().max(1) as f64), (-1.0, 1.0));
    svg.push_str("</svg>");
    svg
}
