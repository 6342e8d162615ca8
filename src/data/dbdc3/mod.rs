//! Import of the Dialogue Breakdown Detection Challenge (DBDC3) JSON format.
//!
//! Each `*.log.json` file is one dialogue; every annotated system (`S`) utterance becomes one item
//! whose context is everything before it. A system utterance without annotations (the English
//! data's opening turns, 274 in all) is not rated: it stays in the later items' context and makes
//! no item. Per-rater labels are kept, so rater agreement can be computed later:
//! - `human.breakdown`: O (not a breakdown) = 1, T (possible breakdown) = 0.5, X (breakdown) = 0
//! - `human.ungrammatical`: the `ungrammatical-sentence` label, X (ungrammatical) = 1, O = 0
//!   (left out where the raters left it empty, as in the English data)
//! - `raters`: the annotator ids, in the file's order.
//!
//! The challenge's archive (`DBDC3.zip`) holds several sets of dialogues — `dbdc3/ja/eval`,
//! `dbdc3/en/{dev,eval}`, `dbdc3_revised/{ja,en}/…` — the same dialogues under two labelings;
//! one is imported at a time (`tree`), and each item's `meta.dbdc3` says which (tree, language,
//! revised).

mod dialogue;

use super::DataError;
use super::item::{HumanRating, Item};
use crate::data::sources::{self, SourceFile};
pub use dialogue::{BREAKDOWN, O, T, X};
use std::collections::BTreeMap;
use std::path::Path;

/// Options of the import.
#[derive(Clone, Debug, Default)]
pub struct Dbdc3Options {
    /// Keep at most this many context turns (the most recent ones). `None` keeps all.
    pub max_context: Option<usize>,
    /// Which set of dialogues to import where the folder or archive holds several (the folder
    /// holding the systems' folders, e.g. `dbdc3/en/eval`; a unique ending of it, or a path
    /// ending in it, is enough).
    pub tree: Option<String>,
}

/// What an import gives.
#[derive(Clone, Debug)]
pub struct Imported {
    pub items: Vec<Item>,
    /// The set imported, as a path below what was given ("" when that is one set).
    pub tree: String,
    /// Dialogues read.
    pub dialogues: usize,
    /// System utterances without annotations: context only, no item.
    pub unannotated: usize,
}

/// Import a DBDC3 dataset: a folder, searched recursively for `*.log.json`, or a `.tar.gz` /
/// `.tgz` / `.zip` archive of one (the repository ships `data/dbdc3-ja.tar.gz` and
/// `data/dbdc3-en.tar.gz`; the challenge distributes `DBDC3.zip`). Dialogues are read in the
/// order of their paths, so the output is deterministic; an archive gives the items its
/// unpacked folder gives.
pub fn import(path: &Path, options: &Dbdc3Options) -> Result<Imported, DataError> {
    let files = sources::read(
        path,
        &sources::Wanted {
            endings: &[".log.json"],
            described: "DBDC3 dialogues (*.log.json)",
        },
    )?;
    if files.is_empty() {
        return Err(DataError::Format {
            file: path.to_path_buf(),
            message: "no DBDC3 dialogue files (*.log.json) found in it".into(),
        });
    }
    let tree = choose_tree(path, &files, options.tree.as_deref())?;
    let labels = SetLabels::of(path, &tree);
    let mut items = Vec::new();
    let (mut dialogues, mut unannotated) = (0, 0);
    for file in files.iter().filter(|f| f.tree() == tree) {
        let d = dialogue::import_text(&file.shown, file.system(), &file.text, options.max_context)?;
        dialogues += 1;
        unannotated += d.unannotated;
        items.extend(d.items);
    }
    let mut items = without_unused_flags(items);
    if let Some(meta) = labels.meta() {
        for item in &mut items {
            item.meta = Some(meta.clone());
        }
    }
    Ok(Imported {
        items,
        tree,
        dialogues,
        unannotated,
    })
}

/// The one set of dialogues to import: the only one there is, or the one `wanted` names.
fn choose_tree(
    path: &Path,
    files: &[SourceFile],
    wanted: Option<&str>,
) -> Result<String, DataError> {
    let mut trees: BTreeMap<String, usize> = BTreeMap::new();
    for f in files {
        *trees.entry(f.tree()).or_default() += 1;
    }
    let listed = || {
        trees
            .iter()
            .map(|(t, n)| {
                let s = if *n == 1 { "" } else { "s" };
                format!("{} ({n} dialogue{s})", if t.is_empty() { "." } else { t })
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fail = |message: String| DataError::Format {
        file: path.to_path_buf(),
        message,
    };
    match wanted {
        None if trees.len() == 1 => Ok(trees.into_keys().next().unwrap_or_default()),
        None => Err(fail(format!(
            "holds {} sets of DBDC3 dialogues: {}; choose one with --tree (e.g. --tree {})",
            trees.len(),
            listed(),
            trees.keys().next().map(String::as_str).unwrap_or_default()
        ))),
        Some(w) => {
            let w = w.trim_matches('/');
            if trees.contains_key(w) {
                return Ok(w.to_string());
            }
            // An ending of a tree, or a longer path ending in one (as `unzip -l` shows it, with
            // the archive's top folder).
            let ends: Vec<&String> = trees
                .keys()
                .filter(|t| {
                    !t.is_empty()
                        && (t.ends_with(&format!("/{w}")) || w.ends_with(&format!("/{t}")))
                })
                .collect();
            match ends.as_slice() {
                [one] => Ok(one.to_string()),
                [] => Err(fail(format!(
                    "no set of dialogues {w:?} in it; it holds {}",
                    listed()
                ))),
                _ => Err(fail(format!(
                    "--tree {w:?} names {} sets: {}; name one in full",
                    ends.len(),
                    ends.iter()
                        .map(|t| t.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            }
        }
    }
}

/// What the names of the folders say about a set: its language and whether it is the revised
/// labeling (the challenge names them `dbdc3/en/eval`, `dbdc3_revised/ja/eval`; the archives
/// hyoka ships, `dbdc3-ja`, `dbdc3-en`).
#[derive(Clone, Debug, PartialEq)]
struct SetLabels {
    tree: String,
    language: Option<String>,
    revised: Option<bool>,
}

impl SetLabels {
    fn of(given: &Path, tree: &str) -> SetLabels {
        let given_name = given
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let given_name = [".tar.gz", ".tgz", ".zip"]
            .iter()
            .find_map(|ext| given_name.strip_suffix(ext))
            .unwrap_or(&given_name)
            .to_string();
        let names: Vec<&str> = std::iter::once(given_name.as_str())
            .chain(tree.split('/'))
            .filter(|n| !n.is_empty())
            .collect();
        let language = names.iter().rev().find_map(|n| {
            let lower = n.to_ascii_lowercase();
            ["ja", "jp", "en"].iter().find_map(|code| {
                let is = lower == *code
                    || lower.ends_with(&format!("-{code}"))
                    || lower.ends_with(&format!("_{code}"));
                is.then(|| if *code == "jp" { "ja" } else { *code }.to_string())
            })
        });
        let revised = names.iter().rev().find_map(|n| match *n {
            "dbdc3_revised" => Some(true),
            "dbdc3" => Some(false),
            _ => None,
        });
        SetLabels {
            tree: tree.to_string(),
            language,
            revised,
        }
    }

    /// `{"dbdc3": {"tree", "language", "revised"}}` with what is known; None when nothing is.
    fn meta(&self) -> Option<serde_json::Value> {
        let mut m = serde_json::Map::new();
        if !self.tree.is_empty() {
            m.insert("tree".into(), self.tree.clone().into());
        }
        if let Some(l) = &self.language {
            m.insert("language".into(), l.clone().into());
        }
        if let Some(r) = self.revised {
            m.insert("revised".into(), r.into());
        }
        (!m.is_empty()).then(|| serde_json::json!({ "dbdc3": m }))
    }
}

/// The items without the `ungrammatical` ratings when no rater flagged any utterance (DBDC3's
/// Japanese release: "O" from all of them): an aspect no rater used holds no information, and
/// would fill every table with undefined cells.
fn without_unused_flags(mut items: Vec<Item>) -> Vec<Item> {
    let used = items
        .iter()
        .any(|item| match item.human.get(dialogue::UNGRAMMATICAL) {
            Some(HumanRating::PerRater(v)) => v.iter().any(|x| *x != 0.0),
            Some(HumanRating::Single(x)) => *x != 0.0,
            None => false,
        });
    if !used {
        for item in &mut items {
            item.human.remove(dialogue::UNGRAMMATICAL);
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn set_labels_come_from_the_folder_names() {
        let l = SetLabels::of(Path::new("/x/DBDC3.zip"), "dbdc3_revised/en/eval");
        assert_eq!((l.language.as_deref(), l.revised), (Some("en"), Some(true)));
        let l = SetLabels::of(Path::new("data/dbdc3-ja.tar.gz"), "");
        assert_eq!((l.language.as_deref(), l.revised), (Some("ja"), None));
        assert_eq!(
            l.meta(),
            Some(serde_json::json!({"dbdc3": {"language": "ja"}}))
        );
        let l = SetLabels::of(Path::new("mine"), "");
        assert_eq!(l.meta(), None);
    }

    #[test]
    fn a_tree_is_chosen_by_name_or_unique_ending() {
        let file = |p: &str| SourceFile {
            relative: PathBuf::from(p),
            shown: PathBuf::from(p),
            text: String::new(),
        };
        let files = [
            file("dbdc3/en/eval/CIC_50/a.log.json"),
            file("dbdc3_revised/en/eval/CIC_50/a.log.json"),
            file("dbdc3/ja/eval/DCM/b.log.json"),
        ];
        let given = Path::new("DBDC3.zip");
        let err = choose_tree(given, &files, None).unwrap_err().to_string();
        assert!(
            err.contains("3 sets") && err.contains("dbdc3/en/eval (1 dialogue)"),
            "{err}"
        );
        assert_eq!(
            choose_tree(given, &files, Some("dbdc3/ja/eval")).unwrap(),
            "dbdc3/ja/eval"
        );
        assert_eq!(
            choose_tree(given, &files, Some("ja/eval")).unwrap(),
            "dbdc3/ja/eval"
        );
        let err = choose_tree(given, &files, Some("en/eval"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("names 2 sets"), "{err}");
        let err = choose_tree(given, &files, Some("fr"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no set of dialogues \"fr\""), "{err}");
    }
}
