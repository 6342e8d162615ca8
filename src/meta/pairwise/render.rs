//! summary.md of a pairwise meta-evaluation.

use super::PairwiseSummary;
use crate::meta::summary::md_text;
use std::fmt::Write;

fn num(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "—".into(), |x| format!("{x:.digits$}"))
}

/// The summary as Markdown: per aspect the ranking table, then the judge's consistency and
/// position bias, then agreement with human preferences.
pub fn markdown(s: &PairwiseSummary) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# hyoka pairwise meta-evaluation\n");
    let _ = writeln!(
        md,
        "{} pairs of {} systems over {} contexts{}; rubric {}; hyoka {}.\n",
        s.pairs,
        s.systems,
        s.contexts,
        if s.errors + s.unmatched > 0 {
            format!(
                " ({} error lines and {} lines without their items left out)",
                s.errors, s.unmatched
            )
        } else {
            String::new()
        },
        s.rubric.as_deref().unwrap_or("—"),
        s.hyoka
    );
    let _ = writeln!(
        md,
        "Strength: Bradley–Terry log-strength with ties (Davidson), fitted to the order-averaged verdict probabilities, mean 0; interval: {:.0} % percentile bootstrap over contexts ({} resamples, seed {}). Verdicts: the most probable of the order-averaged distribution. Human preference: given per pair (each rater's vote a comparison), else the higher mean rating of the two responses, a tie within {}.\n",
        s.options.level * 100.0,
        s.options.bootstrap,
        s.options.seed,
        s.options.tie_margin
    );
    if s.contexts < 2 {
        let _ = writeln!(
            md,
            "One context: resampling contexts cannot show how the strengths vary, so there is no interval (—).\n"
        );
    }
    for a in &s.aspects {
        let _ = writeln!(md, "## {}\n", md_text(&a.aspect));
        if let Some(e) = &a.fit_error {
            let _ = writeln!(md, "No strengths: {e}.\n");
        }
        let human_keys: Vec<&String> = a
            .systems
            .iter()
            .flat_map(|r| r.human.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let _ = write!(
            md,
            "| system | strength | interval | win rate | expected win rate | W / T / L |"
        );
        for k in &human_keys {
            let _ = write!(md, " human {} |", md_text(k));
        }
        let _ = writeln!(md);
        let _ = writeln!(
            md,
            "|---|---:|---|---:|---:|---|{}",
            "---:|".repeat(human_keys.len())
        );
        for r in &a.systems {
            let interval = r
                .interval
                .map_or_else(|| "—".into(), |[lo, hi]| format!("[{lo:.3}, {hi:.3}]"));
            let _ = write!(
                md,
                "| {} | {} | {interval} | {:.3} | {:.3} | {} / {} / {} |",
                md_text(&r.system),
                num(r.strength, 3),
                r.win_rate,
                r.expected_win_rate,
                r.wins,
                r.ties,
                r.losses
            );
            for k in &human_keys {
                let _ = write!(md, " {} |", num(r.human.get(*k).copied(), 3));
            }
            let _ = writeln!(md);
        }
        let _ = writeln!(
            md,
            "\nPosition consistency {:.3} (pairs whose verdict is the same in both orders); position bias {:+.3} (mean P(shown first wins) − P(shown second wins)); tie parameter ν {}{}.\n",
            a.consistency,
            a.position_bias,
            num(a.tie_parameter, 3),
            if a.bootstrap_failed > 0 {
                format!(
                    "; {} bootstrap resamples had no finite fit and are left out",
                    a.bootstrap_failed
                )
            } else {
                String::new()
            }
        );
        if !a.human.is_empty() {
            let _ = writeln!(
                md,
                "| human key | from | comparisons | agreement with ties | without ties (comparisons) | Cohen's κ | systems' Spearman ρ (systems) | human F / S / T |"
            );
            let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---|");
            for h in &a.human {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} ({}) | {} | {} ({}) | {} / {} / {} |",
                    md_text(&h.key),
                    h.source,
                    h.pairs,
                    num(h.agreement_with_ties, 3),
                    num(h.agreement_without_ties, 3),
                    h.pairs_without_ties,
                    num(h.kappa, 3),
                    num(h.system_spearman, 3),
                    h.systems,
                    h.human_verdicts[0],
                    h.human_verdicts[1],
                    h.human_verdicts[2]
                );
            }
            let _ = writeln!(md);
        }
    }
    md
}
