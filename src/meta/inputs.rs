//! What a meta-evaluation reads: the items (all, or one half of the dialogues) and results
//! (files, streams or lines in memory) joined into a frame, with what the user should hear of
//! each input (items without a line, error lines, lines for other items).

use super::{Frame, MetaError};
use crate::data::Item;
use crate::results::reader::{ResultsInput, first_task};
use std::path::Path;

/// One half of the dialogues, as `--fit-w` and `--calibrate` split them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Half {
    Dev,
    HeldOut,
}

impl Half {
    pub fn name(self) -> &'static str {
        match self {
            Half::Dev => "dev",
            Half::HeldOut => "held-out",
        }
    }
}

/// Keep the items of `half` of the dialogues (split by `seed`); none left is a usage error.
pub fn select_half(
    items: &mut Vec<Item>,
    half: Half,
    seed: u64,
    origin: &str,
) -> Result<(), MetaError> {
    items.retain(|i| super::item_in_dev_half(seed, i) == (half == Half::Dev));
    if items.is_empty() {
        return Err(MetaError::Usage(format!(
            "--half {}: no item of {origin} falls in that half (seed {seed}); the halves split whole dialogues, so a file of one dialogue has one empty half",
            half.name()
        )));
    }
    Ok(())
}

/// A frame of items and results, and notes on the inputs for the user.
pub struct Joined {
    pub frame: Frame,
    pub notes: Vec<String>,
}

/// How `join` treats results it cannot fully trust.
#[derive(Clone, Copy, Debug, Default)]
pub struct JoinRules {
    /// Results that give no item a score are an error (`meta`); otherwise (`eval`, `merge`,
    /// which read their own runs) a note.
    pub strict: bool,
    /// Lines without an `input_sha256` (another tool's, or an old version's) are used, with a
    /// note; otherwise (`strict`) refused, since an item edited since they were scored would be
    /// reported with another version's score.
    pub accept_unhashed: bool,
}

/// Join `items` (read from `items_origin`) and `results`. Several results of one task are told
/// apart by the shortest end of their names that differs (`runA` and `runB` for runA/judge.jsonl
/// and runB/judge.jsonl); one file given twice is refused. `rules` says what is an error.
pub fn join(
    items: Vec<Item>,
    items_origin: &str,
    results: &[ResultsInput],
    rules: JoinRules,
) -> Result<Joined, MetaError> {
    let strict = rules.strict;
    let paths: Vec<&Path> = results.iter().map(|r| r.path.as_path()).collect();
    for (i, a) in paths.iter().enumerate() {
        if let Some(b) = paths[..i].iter().find(|b| crate::files::same_file(a, b)) {
            return Err(MetaError::Usage(format!(
                "{} and {} are one file: give each results file once",
                b.display(),
                a.display()
            )));
        }
    }
    let mut frame = Frame::new(items);
    let mut notes = Vec::new();
    let tasks = results
        .iter()
        .map(|input| {
            first_task(input)?.ok_or_else(|| {
                MetaError::Input(format!("{}: no results lines", input.path.display()))
            })
        })
        .collect::<Result<Vec<_>, MetaError>>()?;
    for (k, (input, task)) in results.iter().zip(&tasks).enumerate() {
        let group: Vec<&Path> = paths
            .iter()
            .zip(&tasks)
            .filter(|(_, t)| *t == task)
            .map(|(p, _)| *p)
            .collect();
        let name = (group.len() > 1).then(|| {
            let at = group.iter().position(|p| *p == paths[k]).unwrap_or(k);
            run_names(&group)[at].clone()
        });
        let added = frame.add_results_input(input, name.as_deref())?;
        let n = frame.items.len();
        let path = input.path.display();
        if added.matched == added.errors + added.not_applicable {
            let why = if added.matched == 0 {
                format!(
                    "none of its {} lines is for an item of {items_origin}",
                    added.unmatched
                )
            } else {
                format!(
                    "its {} lines for these items are all error lines or not applicable",
                    added.matched
                )
            };
            let message = format!("{path}: gives no item a score: {why}");
            if strict {
                return Err(MetaError::Input(message));
            }
            notes.push(message);
            continue;
        }
        if added.unhashed > 0 {
            let what = format!(
                "{} of its {} lines for these items have no input_sha256 (written by another tool or an older hyoka): whether their items changed since they were scored cannot be told",
                added.unhashed, added.matched
            );
            if strict && !rules.accept_unhashed {
                return Err(MetaError::Input(format!(
                    "{path}: {what}; score the items again with hyoka, or accept such lines (--accept-unhashed)"
                )));
            }
            notes.push(format!("{path}: {what}; used as they are"));
        }
        let mut said = Vec::new();
        if added.matched < n {
            said.push(format!("{} of {n} items have a line", added.matched));
        }
        if added.errors > 0 {
            said.push(format!(
                "{} of its {} lines for these items are error lines (no score)",
                added.errors, added.matched
            ));
        }
        if added.not_applicable > 0 {
            said.push(format!(
                "{} of its {} lines for these items are not applicable (no score by definition: an opening turn against its last turn, an item without reference)",
                added.not_applicable, added.matched
            ));
        }
        if added.unmatched > 0 {
            said.push(format!(
                "{} lines are for ids not among the items, left out",
                added.unmatched
            ));
        }
        if !said.is_empty() {
            notes.push(format!("{path}: {}", said.join("; ")));
        }
    }
    Ok(Joined { frame, notes })
}

/// Names that tell `paths` apart: the shortest ends of the paths (file extension left out; the
/// file name too when every file has the same one) that differ, e.g. `runA` and `runB`.
fn run_names(paths: &[&Path]) -> Vec<String> {
    let parts: Vec<Vec<String>> = paths
        .iter()
        .map(|p| {
            let mut parts: Vec<String> = p
                .with_extension("")
                .components()
                .filter(|c| matches!(c, std::path::Component::Normal(_)))
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.is_empty() {
                parts.push(p.display().to_string());
            }
            parts
        })
        .collect();
    let same_stem = parts.windows(2).all(|w| w[0].last() == w[1].last());
    let end = |p: &Vec<String>, k: usize| -> String {
        let upto = if same_stem && p.len() > 1 {
            p.len() - 1
        } else {
            p.len()
        };
        let from = upto.saturating_sub(k);
        p[from..upto].join("/")
    };
    let longest = parts.iter().map(Vec::len).max().unwrap_or(1);
    for k in 1..=longest {
        let names: Vec<String> = parts.iter().map(|p| end(p, k)).collect();
        let distinct: std::collections::HashSet<&String> = names.iter().collect();
        if distinct.len() == names.len() {
            return names;
        }
    }
    // Paths whose every end agrees (another folder reached by another route): numbered.
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}#{}", end(p, longest), i + 1))
        .collect()
}
