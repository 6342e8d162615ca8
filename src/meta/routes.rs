//! Routes side by side: the same items scored as they are and translated (the paper's table 5,
//! Japanese and English), each method's item-level correlation with each human aspect in every
//! route.

use super::levels::{Cell, Level};
use super::summary::Summary;
use std::fmt::Write;

#[derive(Clone, Debug, serde::Serialize)]
pub struct Routes {
    /// The routes' names (their languages), in column order.
    pub routes: Vec<String>,
    pub level: Level,
    pub rows: Vec<RouteRow>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct RouteRow {
    /// The method, as the first route's summary names it.
    pub method: String,
    pub human: String,
    /// Per route: the cell, if that route has the method.
    pub cells: Vec<Option<Cell>>,
}

/// Item-level correlations of every method of the first route's summary (and those only
/// later routes have) with every human aspect, route by route. `same` pairs a later route's
/// row name with the first's where a method goes by another name there (a likelihood scorer's
/// counterpart: fed-ja, fed-en).
pub fn side_by_side(routes: &[(&str, &Summary)], same: &[(String, String)]) -> Routes {
    let level = Level::Item;
    // A row is a method's name, with " · aspect" after it for aspects of other names.
    let renamed = |row: &str, from: &str, to: &str| -> Option<String> {
        let rest = row.strip_prefix(from)?;
        (rest.is_empty() || rest.starts_with(" · ")).then(|| format!("{to}{rest}"))
    };
    let as_first = |row: &str| -> String {
        (same.iter())
            .find_map(|(first, later)| renamed(row, later, first))
            .unwrap_or_else(|| row.to_string())
    };
    let as_later = |row: &str| -> String {
        (same.iter())
            .find_map(|(first, later)| renamed(row, first, later))
            .unwrap_or_else(|| row.to_string())
    };
    let mut keys: Vec<(String, String)> = Vec::new();
    for (_, summary) in routes {
        for e in summary.correlations.iter().filter(|e| e.level == level) {
            let key = (as_first(&e.row), e.human.clone());
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    let rows = keys
        .into_iter()
        .map(|(method, human)| {
            let cells = routes
                .iter()
                .map(|(_, summary)| {
                    summary
                        .cell(&method, &human, level)
                        .or_else(|| summary.cell(&as_later(&method), &human, level))
                        .cloned()
                })
                .collect();
            RouteRow {
                method,
                human,
                cells,
            }
        })
        .collect();
    Routes {
        routes: routes.iter().map(|(n, _)| n.to_string()).collect(),
        level,
        rows,
    }
}

/// The table in Markdown: one row per method and human aspect, one column per route, cells =
/// Spearman (items).
pub fn markdown(routes: &Routes) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## Routes side by side ({} level, Spearman)\n",
        routes.level.name()
    );
    let names: Vec<String> = routes
        .routes
        .iter()
        .map(|r| super::markdown::md_text(r))
        .collect();
    let _ = writeln!(out, "| method | human | {} |", names.join(" | "));
    let _ = writeln!(out, "|---|---|{}", "---|".repeat(routes.routes.len()));
    for row in &routes.rows {
        let cells: Vec<String> = (row.cells.iter())
            .map(|c| match c {
                Some(c) => format!(
                    "{} (n={})",
                    super::markdown::format_r(c.spearman.map(|s| s.r)),
                    c.n
                ),
                None => "—".into(),
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            super::markdown::md_text(&row.method),
            super::markdown::md_text(&row.human),
            cells.join(" | ")
        );
    }
    out
}
