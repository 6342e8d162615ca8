//! DUO (ikuminumaya/duo-dataset): open-domain chats between a crowd worker and an LLM system,
//! in two settings — `ed` (EmpatheticDialogues: the user tells an episode behind an emotion) and
//! `wow` (Wizard of Wikipedia: a topic) — in English and Japanese, one JSON file per dialogue
//! at `<setting>/<language>/<id>.json`. Each dialogue is rated 1–5 as a whole by its user
//! (`subjective_evaluation`) and, for some, by three third-party annotators
//! (`objective_evaluation.*_scores`): preference, stylistic similarity, consistency, and empathy
//! (ed) or engagingness (wow).
//!
//! Each dialogue becomes one item of scope `dialogue`: the annotators' ratings under the
//! aspect's key (one value per annotator, in the file's order; the annotators are not named),
//! the user's under `user_<key>`, the setting's details in `meta.duo`.

use super::item::{HumanRating, Item, Scope};
use super::sources::{self, SourceFile};
use super::{DataError, ids};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The settings and their aspects.
const SETTINGS: [(&str, [&str; 4]); 2] = [
    (
        "ed",
        [
            "preference",
            "stylistic_similarity",
            "consistency",
            "empathy",
        ],
    ),
    (
        "wow",
        [
            "preference",
            "stylistic_similarity",
            "consistency",
            "engagingness",
        ],
    ),
];

const LANGUAGES: [&str; 2] = ["ja", "en"];

/// What an import gives.
#[derive(Clone, Debug)]
pub struct Imported {
    pub items: Vec<Item>,
    /// "ed/ja", "wow/en" …
    pub set: String,
}

/// The set a file belongs to, from its two folders: (setting, language).
fn set_of(f: &SourceFile) -> Option<(&'static str, &'static str)> {
    let language = f.relative.parent()?;
    let setting = language.parent()?.file_name()?.to_str()?;
    let language = language.file_name()?.to_str()?;
    let setting = SETTINGS.iter().map(|(s, _)| *s).find(|s| *s == setting)?;
    let language = LANGUAGES.iter().copied().find(|l| *l == language)?;
    Some((setting, language))
}

fn rating(
    value: &Value,
    at: &str,
    field: &dyn Fn(&str, String) -> DataError,
) -> Result<f64, DataError> {
    let v = value
        .as_f64()
        .ok_or_else(|| field(at, format!("{value} is not a number")))?;
    sources::on_rating_scale(v).map_err(|m| field(at, m))?;
    Ok(v)
}

/// One dialogue file as an item of `setting`'s aspects.
fn item_of(
    f: &SourceFile,
    setting: &str,
    language: &str,
    aspects: &[&str],
) -> Result<Item, DataError> {
    let field = |at: &str, message: String| DataError::Field {
        file: f.shown.clone(),
        field: at.to_string(),
        message,
    };
    let doc: Value = serde_json::from_str(&f.text).map_err(|e| DataError::Format {
        file: f.shown.clone(),
        message: format!("not a DUO dialogue (JSON): {e}"),
    })?;
    let number = match &doc["dialogue_id"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => {
            return Err(field(
                "dialogue_id",
                "missing, or not a string or number".into(),
            ));
        }
    };
    let id = format!("{setting}-{language}-{number}");
    if let Some(why) = ids::path_part_problem(&id) {
        return Err(field("dialogue_id", format!("{number:?} {why}")));
    }
    let mut turns = sources::turns_of(&doc, "dialogue", "message", &field)?;
    let mut human = BTreeMap::new();
    let objective = &doc["objective_evaluation"];
    let mut annotators: Option<usize> = None;
    for key in aspects {
        let at = format!("objective_evaluation.{key}_scores");
        match &objective[format!("{key}_scores")] {
            Value::Null => {}
            Value::Array(values) => {
                let values = (values.iter())
                    .map(|v| rating(v, &at, &field))
                    .collect::<Result<Vec<f64>, DataError>>()?;
                if values.is_empty() || annotators.is_some_and(|n| n != values.len()) {
                    return Err(field(
                        &at,
                        format!(
                            "{} ratings, where the other aspects have {annotators:?}",
                            values.len()
                        ),
                    ));
                }
                annotators = Some(values.len());
                human.insert(key.to_string(), HumanRating::PerRater(values));
            }
            other => return Err(field(&at, format!("{other} is not a list of ratings"))),
        }
        let at = format!("subjective_evaluation.{key}");
        match &doc["subjective_evaluation"][key] {
            Value::Null => {}
            v => {
                human.insert(
                    format!("user_{key}"),
                    HumanRating::Single(rating(v, &at, &field)?),
                );
            }
        }
    }
    if human.is_empty() {
        return Err(field(
            "subjective_evaluation",
            "no rating of the dialogue (neither the user's nor the annotators')".into(),
        ));
    }
    let mut about = serde_json::Map::new();
    about.insert("setting".into(), Value::from(setting));
    about.insert("language".into(), Value::from(language));
    for key in ["prompt", "emotion", "episode", "topic"] {
        if let Some(v) = doc[key].as_str() {
            about.insert(key.into(), Value::from(v));
        }
    }
    if let Some(user) =
        (doc["dialogue"].as_array().into_iter().flatten()).find_map(|t| t["user_id"].as_str())
    {
        about.insert("user".into(), Value::from(user));
    }
    let response = turns.pop().expect("two turns at least");
    Ok(Item {
        id: id.clone(),
        context: turns,
        response,
        reference: Vec::new(),
        setting: None,
        system: doc["model"].as_str().map(str::to_string),
        dialogue: Some(id),
        scope: Scope::Dialogue,
        context_id: None,
        human,
        raters: Vec::new(),
        meta: Some(serde_json::json!({ "duo": about })),
        translation: None,
        numeric_id: false,
    })
}

/// Import one setting and language of DUO: the repository's folder, or a `.zip`/`.tar.gz` of
/// it. `wanted` names the set ("ed/ja"); it may be left out where the source holds one.
pub fn import(path: &Path, wanted: Option<&str>) -> Result<Imported, DataError> {
    let files = sources::read(
        path,
        &sources::Wanted {
            endings: &[".json"],
            described: "DUO dialogues (<setting>/<language>/<id>.json)",
        },
    )?;
    let mut sets: BTreeMap<String, Vec<&SourceFile>> = BTreeMap::new();
    for f in &files {
        if let Some((setting, language)) = set_of(f) {
            sets.entry(format!("{setting}/{language}"))
                .or_default()
                .push(f);
        }
    }
    let fail = |message: String| DataError::Format {
        file: path.to_path_buf(),
        message,
    };
    let listed = || sets.keys().cloned().collect::<Vec<_>>().join(", ");
    let set = match wanted {
        _ if sets.is_empty() => {
            return Err(fail(
                "no DUO dialogues found: expected {ed,wow}/{ja,en}/<id>.json (the duo-dataset repository)".into(),
            ));
        }
        None if sets.len() == 1 => sets.keys().next().cloned().unwrap_or_default(),
        None => {
            return Err(fail(format!(
                "holds the sets {}: choose one with --set",
                listed()
            )));
        }
        Some(w) if sets.contains_key(w) => w.to_string(),
        Some(w) => {
            return Err(fail(format!(
                "no set {w:?} in it (sets there: {})",
                listed()
            )));
        }
    };
    let (setting, language) = set.split_once('/').unwrap_or_default();
    let aspects = SETTINGS
        .iter()
        .find(|(s, _)| *s == setting)
        .map(|(_, a)| a.as_slice())
        .unwrap_or_default();
    let mut items = Vec::new();
    let mut seen: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    for f in &sets[&set] {
        let item = item_of(f, setting, language, aspects)?;
        if let Some(first) = seen.insert(item.id.clone(), f.shown.clone()) {
            return Err(DataError::Field {
                file: f.shown.clone(),
                field: "dialogue_id".into(),
                message: format!("{:?} again (first in {})", item.id, first.display()),
            });
        }
        items.push(item);
    }
    Ok(Imported { items, set })
}
