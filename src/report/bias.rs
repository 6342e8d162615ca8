//! The report's length-bias section (a table, and each judge column's scores against the
//! responses' length) and its line on the responses' language.

use super::svg;
use crate::meta::bias::response_length;
use crate::meta::stats::Correlation;
use crate::meta::{Family, Frame, Summary, format_r};
use std::fmt::Write;

fn with_p(c: Option<Correlation>) -> String {
    c.map_or("—".into(), |c| {
        format!("{:.3} <small>(p={:.1e})</small>", c.r, c.p)
    })
}

pub(super) fn bias_section(h: &mut String, summary: &Summary, frame: &Frame) {
    if !summary.length_bias.is_empty() {
        h.push_str("<h2>Length bias (Spearman)</h2><p class=\"note\">Length: the response's characters without white space. Partial ρ: the correlation with the raters once the length is partialled out of both; much lower than ρ, the agreement comes from length.</p><table><tr><th>method</th><th>items</th><th>ρ with length</th><th>human</th><th>ρ</th><th>partial ρ (length out)</th><th>raters' ρ with length</th></tr>");
        for b in &summary.length_bias {
            let rows = b.human.len().max(1);
            let _ = write!(
                h,
                "<tr><td rowspan=\"{rows}\">{}</td><td rowspan=\"{rows}\">{}</td><td rowspan=\"{rows}\">{}</td>",
                svg::escape(&b.column),
                b.items,
                with_p(b.with_length)
            );
            if b.human.is_empty() {
                h.push_str("<td></td><td></td><td></td><td></td></tr>");
            }
            for (n, x) in b.human.iter().enumerate() {
                if n > 0 {
                    h.push_str("<tr>");
                }
                let _ = write!(
                    h,
                    "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    svg::escape(&x.human),
                    format_r(x.spearman.map(|c| c.r)),
                    with_p(x.partial),
                    format_r(x.human_with_length.map(|c| c.r))
                );
            }
        }
        h.push_str("</table><div class=\"grid\">");
        let lengths: Vec<f64> = (frame.items.iter())
            .map(|i| response_length(&i.response.text) as f64)
            .collect();
        for column in (frame.columns.iter()).filter(|c| c.family == Family::JudgeExpected) {
            let points: Vec<(f64, f64)> = (lengths.iter().zip(&column.values))
                .filter_map(|(l, v)| v.map(|v| (*l, v)))
                .collect();
            if points.len() < 2 {
                continue;
            }
            let title = frame.row_label(column);
            let _ = write!(
                h,
                "<figure>{}<figcaption>{} against length</figcaption></figure>",
                svg::scatter(&title, "length (characters)", "expected score", &points),
                svg::escape(&title)
            );
        }
        h.push_str("</div>");
    }
    let s = &summary.script;
    let _ = write!(
        h,
        "<h2>Language of the responses</h2><p class=\"note\">{} of {} responses are mostly in Japanese script; mean share of Japanese script among their letters {}.</p>",
        s.mostly_japanese,
        s.with_letters,
        format_r(s.mean_japanese_share)
    );
    for scorer in &s.english_scorers {
        let _ = write!(
            h,
            "<p><strong>Warning:</strong> {} scored mostly Japanese responses: its scores say little about them.</p>",
            svg::escape(scorer)
        );
    }
}
