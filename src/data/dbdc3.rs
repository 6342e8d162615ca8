//! Import of the Dialogue Breakdown Detection Challenge (DBDC3) JSON format.
//!
//! Each `*.log.json` file is one dialogue; every system (`S`) utterance becomes one item whose
//! context is everything before it. Per-rater labels are kept, so rater agreement can be
//! computed later:
//! - `human.breakdown`: O (not a breakdown) = 1, T (possible breakdown) = 0.5, X (breakdown) = 0
//! - `human.ungrammatical`: the `ungrammatical-sentence` label, X (ungrammatical) = 1, O = 0
//! - `raters`: the annotator ids, in the file's order.

use super::DataError;
use super::item::{HumanRating, Item, Turn};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The human aspect key of the breakdown labels.
pub const BREAKDOWN: &str = "breakdown";
/// A breakdown label as a rating: O (not a breakdown), T (possible breakdown), X (breakdown).
pub const O: f64 = 1.0;
pub const T: f64 = 0.5;
pub const X: f64 = 0.0;

/// Options of the import.
#[derive(Clone, Debug, Default)]
pub struct Dbdc3Options {
    /// Keep at most this many context turns (the most recent ones). `None` keeps all.
    pub max_context: Option<usize>,
}

/// Largest dialogue file read from an archive (the challenge's are under 200 KB).
const MAX_DIALOGUE_BYTES: u64 = 64 << 20;

/// Import a DBDC3 dataset: a folder, searched recursively for `*.log.json`, or a `.tar.gz` /
/// `.tgz` archive of one (the repository ships `data/dbdc3-ja.tar.gz`). Dialogues are read in
/// the order of their paths, so the output is deterministic; an archive gives the items its
/// unpacked folder gives.
pub fn import(path: &Path, options: &Dbdc3Options) -> Result<Vec<Item>, DataError> {
    if path.is_dir() {
        return import_dir(path, options);
    }
    let name = path.to_string_lossy();
    if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        return import_archive(path, options);
    }
    if !path.exists() {
        return Err(DataError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
        ));
    }
    Err(DataError::Format {
        file: path.to_path_buf(),
        message: "expected a folder of DBDC3 dialogues (*.log.json) or a .tar.gz of one".into(),
    })
}

/// Import every `*.log.json` below `dir`.
pub fn import_dir(dir: &Path, options: &Dbdc3Options) -> Result<Vec<Item>, DataError> {
    let mut files = Vec::new();
    collect_logs(dir, &mut files)?;
    if files.is_empty() {
        return Err(no_dialogues(dir));
    }
    files.sort();
    let mut items = Vec::new();
    for file in &files {
        items.extend(import_file(dir, file, options)?);
    }
    Ok(without_unused_flags(items))
}

fn no_dialogues(path: &Path) -> DataError {
    DataError::Format {
        file: path.to_path_buf(),
        message: "no DBDC3 dialogue files (*.log.json) found in it".into(),
    }
}

/// Import every `*.log.json` of a gzipped tar archive. Its one top folder, if it has one,
/// stands for the dataset's folder: `dbdc3-ja/DCM/x.log.json` is system DCM, as `DCM/x.log.json`
/// is below an unpacked `dbdc3-ja/`.
fn import_archive(archive: &Path, options: &Dbdc3Options) -> Result<Vec<Item>, DataError> {
    let file = std::fs::File::open(archive).map_err(|e| DataError::io(archive, e))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
    let unreadable = |e: std::io::Error| DataError::Format {
        file: archive.to_path_buf(),
        message: format!("not a readable .tar.gz archive: {e}"),
    };
    let mut dialogues: Vec<(PathBuf, String)> = Vec::new();
    for entry in tar.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let inner = entry.path().map_err(unreadable)?.into_owned();
        if !entry.header().entry_type().is_file() || !inner.to_string_lossy().ends_with(".log.json")
        {
            continue;
        }
        let shown = archive.join(&inner);
        if entry.size() > MAX_DIALOGUE_BYTES {
            return Err(DataError::Format {
                file: shown,
                message: format!(
                    "a dialogue file of {} bytes (at most {MAX_DIALOGUE_BYTES} are read)",
                    entry.size()
                ),
            });
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut entry, &mut text)
            .map_err(|e| DataError::io(&shown, e))?;
        dialogues.push((inner, text));
    }
    if dialogues.is_empty() {
        return Err(no_dialogues(archive));
    }
    dialogues.sort();
    // The archive's one top folder, if every dialogue lies below the same one.
    let top = dialogues[0]
        .0
        .components()
        .next()
        .map(|c| PathBuf::from(c.as_os_str()))
        .filter(|top| {
            dialogues
                .iter()
                .all(|(p, _)| p.components().count() > 1 && p.starts_with(top))
        });
    let mut items = Vec::new();
    for (inner, text) in &dialogues {
        let relative = top
            .as_ref()
            .and_then(|top| inner.strip_prefix(top).ok())
            .unwrap_or(inner);
        let system = system_of(relative.parent().unwrap_or(Path::new("")));
        items.extend(import_text(&archive.join(inner), system, text, options)?);
    }
    Ok(without_unused_flags(items))
}

/// The system of a dialogue: the folder holding it, below the dataset's own (DCM, DIT, IRS).
fn system_of(folder_below_root: &Path) -> Option<String> {
    folder_below_root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

fn collect_logs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), DataError> {
    let entries = std::fs::read_dir(dir).map_err(|e| DataError::io(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| DataError::io(dir, e))?.path();
        if path.is_dir() {
            collect_logs(&path, out)?;
        } else if path.to_string_lossy().ends_with(".log.json") {
            out.push(path);
        }
    }
    Ok(())
}

/// Import one dialogue file. The system name is the folder holding it (DCM, DIT, IRS).
pub fn import_file(
    root: &Path,
    file: &Path,
    options: &Dbdc3Options,
) -> Result<Vec<Item>, DataError> {
    let text = std::fs::read_to_string(file).map_err(|e| DataError::io(file, e))?;
    let below_root = file
        .parent()
        .and_then(|p| p.strip_prefix(root).ok())
        .unwrap_or(Path::new(""));
    import_text(file, system_of(below_root), &text, options)
}

/// One dialogue's JSON text; `file` names it in errors.
fn import_text(
    file: &Path,
    system: Option<String>,
    text: &str,
    options: &Dbdc3Options,
) -> Result<Vec<Item>, DataError> {
    let fail = |field: &str, message: String| DataError::Field {
        file: file.to_path_buf(),
        field: field.to_string(),
        message,
    };
    let doc: Value =
        serde_json::from_str(text).map_err(|e| fail("", format!("not valid JSON: {e}")))?;
    let dialogue_id = match doc.get("dialogue-id") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(fail("dialogue-id", "missing or not a string".into())),
    };
    // The dialogue id and the system's folder become parts of the items' ids, and `hyoka
    // export` makes files of them.
    if let Some(why) = super::ids::path_part_problem(&dialogue_id) {
        return Err(fail(
            "dialogue-id",
            format!("{dialogue_id:?} {why}: it names a file when exported"),
        ));
    }
    if let Some((system, why)) = system
        .as_deref()
        .and_then(|s| super::ids::path_part_problem(s).map(|why| (s, why)))
    {
        return Err(fail(
            "",
            format!("the system folder {system:?} {why}: it names a folder when exported"),
        ));
    }
    let Some(Value::Array(turns)) = doc.get("turns") else {
        return Err(fail("turns", "missing or not a list".into()));
    };
    let mut history: Vec<Turn> = Vec::new();
    let mut items = Vec::new();
    for (i, turn) in turns.iter().enumerate() {
        let field = |name: &str| format!("turns[{i}].{name}");
        let get_str = |name: &str| match turn.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(fail(&field(name), "missing or not a string".into())),
        };
        let speaker = get_str("speaker")?;
        let utterance = get_str("utterance")?;
        let index = match turn.get("turn-index") {
            Some(Value::Number(n)) => n.to_string(),
            _ => return Err(fail(&field("turn-index"), "missing or not a number".into())),
        };
        let this = Turn {
            speaker: speaker.clone(),
            text: utterance,
        };
        if speaker == "S" {
            let (human, raters) = annotations(turn, &|name, msg| fail(&field(name), msg))?;
            let start = options
                .max_context
                .map_or(0, |n| history.len().saturating_sub(n));
            let id_prefix = system
                .as_deref()
                .map(|s| format!("{s}/"))
                .unwrap_or_default();
            items.push(Item {
                id: format!("{id_prefix}{dialogue_id}/{index}"),
                context: history[start..].to_vec(),
                response: this.clone(),
                reference: Vec::new(),
                setting: None,
                system: system.clone(),
                dialogue: Some(dialogue_id.clone()),
                context_id: None,
                human,
                raters,
                meta: None,
                translation: None,
                numeric_id: false,
            });
        }
        history.push(this);
    }
    Ok(items)
}

type Annotations = (BTreeMap<String, HumanRating>, Vec<String>);

/// The items without the `ungrammatical` ratings when no rater flagged any utterance (DBDC3's
/// Japanese release: "O" from all of them): an aspect no rater used holds no information, and
/// would fill every table with undefined cells.
fn without_unused_flags(mut items: Vec<Item>) -> Vec<Item> {
    let used = items
        .iter()
        .any(|item| match item.human.get(UNGRAMMATICAL) {
            Some(HumanRating::PerRater(v)) => v.iter().any(|x| *x != 0.0),
            Some(HumanRating::Single(x)) => *x != 0.0,
            None => false,
        });
    if !used {
        for item in &mut items {
            item.human.remove(UNGRAMMATICAL);
        }
    }
    items
}

const UNGRAMMATICAL: &str = "ungrammatical";

fn annotations(
    turn: &Value,
    fail: &dyn Fn(&str, String) -> DataError,
) -> Result<Annotations, DataError> {
    let Some(Value::Array(list)) = turn.get("annotations") else {
        return Err(fail("annotations", "missing or not a list".into()));
    };
    if list.is_empty() {
        return Err(fail(
            "annotations",
            "a system utterance without annotations".into(),
        ));
    }
    let mut breakdown = Vec::with_capacity(list.len());
    let mut ungrammatical = Vec::with_capacity(list.len());
    let mut raters = Vec::with_capacity(list.len());
    for (j, a) in list.iter().enumerate() {
        let label = |name: &str| match a.get(name) {
            Some(Value::String(s)) => Ok(s.as_str()),
            _ => Err(fail(
                &format!("annotations[{j}].{name}"),
                "missing or not a string".into(),
            )),
        };
        breakdown.push(match label("breakdown")? {
            "O" => O,
            "T" => T,
            "X" => X,
            other => {
                return Err(fail(
                    &format!("annotations[{j}].breakdown"),
                    format!("expected O, T or X, found {other:?}"),
                ));
            }
        });
        ungrammatical.push(match label("ungrammatical-sentence")? {
            "O" => 0.0,
            "X" => 1.0,
            other => {
                return Err(fail(
                    &format!("annotations[{j}].ungrammatical-sentence"),
                    format!("expected O or X, found {other:?}"),
                ));
            }
        });
        raters.push(label("annotator-id")?.to_string());
    }
    let mut human = BTreeMap::new();
    human.insert(BREAKDOWN.to_string(), HumanRating::PerRater(breakdown));
    human.insert(
        UNGRAMMATICAL.to_string(),
        HumanRating::PerRater(ungrammatical),
    );
    Ok((human, raters))
}
