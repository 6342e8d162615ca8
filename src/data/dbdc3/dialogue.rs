//! One DBDC3 dialogue file: its annotated system utterances as items.

use super::super::DataError;
use super::super::item::{HumanRating, Item, Turn};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The human aspect key of the breakdown labels.
pub const BREAKDOWN: &str = "breakdown";
/// A breakdown label as a rating: O (not a breakdown), T (possible breakdown), X (breakdown).
pub const O: f64 = 1.0;
pub const T: f64 = 0.5;
pub const X: f64 = 0.0;
pub(super) const UNGRAMMATICAL: &str = "ungrammatical";

/// A dialogue's items, and its system utterances that no rater annotated.
pub(super) struct Dialogue {
    pub items: Vec<Item>,
    pub unannotated: usize,
}

/// One dialogue's JSON text; `file` names it in errors.
pub(super) fn import_text(
    file: &Path,
    system: Option<String>,
    text: &str,
    max_context: Option<usize>,
) -> Result<Dialogue, DataError> {
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
    if let Some(why) = super::super::ids::path_part_problem(&dialogue_id) {
        return Err(fail(
            "dialogue-id",
            format!("{dialogue_id:?} {why}: it names a file when exported"),
        ));
    }
    if let Some((system, why)) = system
        .as_deref()
        .and_then(|s| super::super::ids::path_part_problem(s).map(|why| (s, why)))
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
    let mut unannotated = 0;
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
            let Some((human, raters)) = annotations(turn, &|name, msg| fail(&field(name), msg))?
            else {
                unannotated += 1;
                history.push(this);
                continue;
            };
            let start = max_context.map_or(0, |n| history.len().saturating_sub(n));
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
                scope: Default::default(),
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
    Ok(Dialogue { items, unannotated })
}

type Annotations = (BTreeMap<String, HumanRating>, Vec<String>);

/// A system utterance's ratings and raters; None when no rater annotated it.
fn annotations(
    turn: &Value,
    fail: &dyn Fn(&str, String) -> DataError,
) -> Result<Option<Annotations>, DataError> {
    let Some(Value::Array(list)) = turn.get("annotations") else {
        return Err(fail("annotations", "missing or not a list".into()));
    };
    if list.is_empty() {
        return Ok(None);
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
            "O" => Some(0.0),
            "X" => Some(1.0),
            // The English data's raters were not asked.
            "" => None,
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
    let given: Option<Vec<f64>> = ungrammatical.iter().copied().collect();
    match given {
        Some(flags) => {
            human.insert(UNGRAMMATICAL.to_string(), HumanRating::PerRater(flags));
        }
        None if ungrammatical.iter().any(Option::is_some) => {
            return Err(fail(
                "annotations",
                "ungrammatical-sentence is empty for some raters and given by others".into(),
            ));
        }
        None => {}
    }
    Ok(Some((human, raters)))
}
