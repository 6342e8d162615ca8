//! summary.md of a pairwise meta-evaluation.

use super::PairwiseSummary;
use crate::meta::markdown::md_text;
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
            "\nPosition consistency {:.3} (pairs whose verdict is the same in both orders); flip rate {:.3} (pairs whose winner becomes the loser when the order is swapped); position bias {:+.3} (mean P(shown first wins) − P(shown second wins)); tie parameter ν {}{}.\n",
            a.consistency,
            a.flip_rate,
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
        if let Some(c) = &a.style_controlled {
            md.push_str(&controlled_markdown(c, &a.systems));
        }
        if let Some(e) = &a.style_control_error {
            let _ = writeln!(md, "No style-controlled strengths: {e}.\n");
        }
        if let Some(lc) = &a.length_controlled {
            md.push_str(&length_controlled_markdown(lc, s.options.level));
        }
        let l = &a.longer_wins;
        let _ = writeln!(
            md,
            "Length: the longer response wins {} of {} decided pairs of different lengths ({}; binomial test against one half p = {}).\n",
            l.longer_won,
            l.decided,
            num(l.share, 3),
            l.p.map_or_else(|| "—".into(), |p| format!("{p:.2e}"))
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

/// The style-controlled strengths beside the raw ones, the coefficients, and a warning when
/// the two order the systems differently.
fn controlled_markdown(c: &super::controlled::Controlled, raw: &[super::SystemRank]) -> String {
    let mut md = String::new();
    let coefficients: Vec<String> = (c.covariates.iter().zip(&c.coefficients))
        .map(|(n, b)| format!("{n} β = {b:+.3}"))
        .collect();
    let _ = writeln!(
        md,
        "Style-controlled (Bradley–Terry with the responses' {} held equal, per standard deviation of each normalised difference; {}; ν {:.3}):\n",
        c.covariates.join(" and "),
        coefficients.join(", "),
        c.tie_parameter
    );
    let _ = writeln!(
        md,
        "| system | raw strength | controlled strength | controlled interval |"
    );
    let _ = writeln!(md, "|---|---:|---:|---|");
    for s in &c.systems {
        let raw = raw
            .iter()
            .find(|r| r.system == s.system)
            .and_then(|r| r.strength);
        let interval = s
            .interval
            .map_or_else(|| "—".into(), |[lo, hi]| format!("[{lo:.3}, {hi:.3}]"));
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} | {interval} |",
            md_text(&s.system),
            num(raw, 3),
            s.strength
        );
    }
    if c.bootstrap_failed > 0 {
        let _ = writeln!(
            md,
            "\n{} bootstrap resamples had no finite controlled fit and are left out.",
            c.bootstrap_failed
        );
    }
    if !c.reordered.is_empty() {
        let pairs: Vec<String> = (c.reordered.iter())
            .map(|[a, b]| format!("{} / {}", md_text(a), md_text(b)))
            .collect();
        let _ = writeln!(
            md,
            "\n**Warning:** the raw and the controlled strengths order {} differently: part of the raw ranking follows the responses' style.",
            pairs.join(", ")
        );
    }
    md.push('\n');
    md
}

fn percent(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |x| format!("{:.1}", 100.0 * x))
}

fn percent_interval(x: Option<[f64; 2]>) -> String {
    x.map_or_else(
        || "—".into(),
        |[lo, hi]| format!("[{:.1}, {:.1}]", 100.0 * lo, 100.0 * hi),
    )
}

/// Each system's raw and length-controlled win rate against the baseline, in percent.
fn length_controlled_markdown(
    lc: &super::length_controlled::LengthControlled,
    level: f64,
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Length-controlled win rates against {} (AlpacaEval 2's: a logistic model of each pair's preference on tanh of the standardised length difference{} and an intercept, L1 penalty chosen by 5-fold cross-validation, predicted with no length difference; {:.0} % intervals over the same resampled contexts, in percent):\n",
        md_text(&lc.baseline),
        if lc.difficulty_from_other_systems {
            ", the context's difficulty (the other systems' mean preference, as a logit)"
        } else {
            ""
        },
        level * 100.0
    );
    let _ = writeln!(
        md,
        "| system | pairs | win rate | interval | length-controlled | interval | φ length | ψ difficulty | θ | C |"
    );
    let _ = writeln!(md, "|---|---:|---:|---|---:|---|---:|---:|---:|---:|");
    let mut notes = Vec::new();
    for r in &lc.systems {
        let c = r.coefficients.as_ref();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            md_text(&r.system),
            r.pairs,
            percent(Some(r.win_rate)),
            percent_interval(r.win_rate_interval),
            percent(r.length_controlled_win_rate),
            percent_interval(r.interval),
            num(c.map(|c| c.length), 3),
            num(c.map(|c| c.difficulty), 3),
            num(c.map(|c| c.intercept), 3),
            r.penalty.map_or_else(|| "—".into(), |p| format!("{p:.3}"))
        );
        if let Some(e) = &r.error {
            notes.push(format!(
                "{}: no length-controlled win rate: {e}.",
                md_text(&r.system)
            ));
        }
        if r.extreme_change {
            notes.push(format!(
                "**Warning:** {}'s length-controlled win rate is far from its raw one (AlpacaEval's threshold): the responses' length drives much of its verdicts, or the fit failed.",
                md_text(&r.system)
            ));
        }
    }
    for n in notes {
        let _ = writeln!(md, "\n{n}");
    }
    md.push('\n');
    md
}
