//! Strict JSONL reading of dialogue items.
//!
//! Every line is checked field by field so that an error names the file, the line and the
//! field (`items.jsonl:3: context[1].text: expected a string, found 42`). Valid lines are never
//! dropped silently: either the whole read fails on the first bad line, or (with
//! `skip_invalid`) every skipped line is returned with its reason.

use super::DataError;
use super::item::{HumanRating, Item, Turn};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// Items read from a file, and the lines that were skipped (only with `skip_invalid`).
#[derive(Debug, Default)]
pub struct ReadItems {
    pub items: Vec<Item>,
    /// 1-based line number of each item, parallel to `items`.
    pub lines: Vec<usize>,
    pub skipped: Vec<DataError>,
}

const FIELDS: &[&str] = &[
    "id",
    "context",
    "response",
    "reference",
    "setting",
    "system",
    "dialogue",
    "scope",
    "context_id",
    "human",
    "raters",
    "meta",
    "translation",
];

/// Read every item of a JSONL file. Blank lines are allowed and ignored.
pub fn read_items(path: &Path, skip_invalid: bool) -> Result<ReadItems, DataError> {
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut out = ReadItems::default();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for line in super::lines::Lines::new(BufReader::new(file), super::lines::MAX_LINE_BYTES) {
        let line = line.map_err(|e| read_error(path, e))?;
        let lineno = line.number;
        let line = line.text.map_err(|e| (String::new(), e.to_string()));
        if line.as_ref().is_ok_and(|l| l.trim().is_empty()) {
            continue;
        }
        let parsed =
            line.and_then(|l| parse_item(l.trim()))
                .and_then(|item| match seen.get(&item.id) {
                    Some(first) => Err((
                        "id".to_string(),
                        format!("duplicate id {:?} (first on line {first})", item.id),
                    )),
                    None => Ok(item),
                });
        match parsed {
            Ok(item) => {
                seen.insert(item.id.clone(), lineno);
                out.items.push(item);
                out.lines.push(lineno);
            }
            Err((field, message)) => {
                let err = DataError::Invalid {
                    file: path.to_path_buf(),
                    line: lineno,
                    field,
                    message,
                };
                if !skip_invalid {
                    return Err(err);
                }
                out.skipped.push(err);
            }
        }
    }
    Ok(out)
}

/// Items given as JSON texts (a library caller's, Python's), read as an items file's lines are:
/// the same checks, ids unique; a bad one named `items[N]` and its field.
pub fn parse_items(texts: &[String]) -> Result<Vec<Item>, DataError> {
    let mut seen = HashMap::new();
    let mut items = Vec::with_capacity(texts.len());
    for (n, text) in texts.iter().enumerate() {
        let invalid = |field: String, message: String| DataError::Field {
            file: PathBuf::from(format!("items[{n}]")),
            field,
            message,
        };
        let item = parse_item(text.trim()).map_err(|(f, m)| invalid(f, m))?;
        if let Some(first) = seen.insert(item.id.clone(), n) {
            return Err(invalid(
                "id".into(),
                format!("duplicate id {:?} (first in items[{first}])", item.id),
            ));
        }
        items.push(item);
    }
    Ok(items)
}

/// A read that cannot go on, as a data error naming the file (and the line).
pub(crate) fn read_error(path: &Path, e: super::lines::ReadError) -> DataError {
    match e {
        super::lines::ReadError::Io(e) => DataError::io(path, e),
        super::lines::ReadError::TooLong { line, .. } => DataError::Invalid {
            file: path.to_path_buf(),
            line,
            field: String::new(),
            message: e.to_string(),
        },
    }
}

/// Read the item on one 1-based line of a file (for `rubrics show --item FILE:LINE`).
pub fn read_item_at(path: &Path, line: usize) -> Result<Item, DataError> {
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let invalid = |field: &str, message: String| DataError::Invalid {
        file: path.to_path_buf(),
        line,
        field: field.to_string(),
        message,
    };
    match BufReader::new(file).lines().nth(line.saturating_sub(1)) {
        None => Err(invalid("", "the file has fewer lines".into())),
        Some(Err(e)) => Err(DataError::io(path, e)),
        Some(Ok(text)) => parse_item(text.trim_start_matches('\u{feff}').trim())
            .map_err(|(field, message)| invalid(&field, message)),
    }
}

/// The first `\\uXXXX` escape in `text` that is a UTF-16 surrogate without its other half.
fn lone_surrogate(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let hex_at = |i: usize| -> Option<u16> {
        let digits = text.get(i + 2..i + 6)?;
        (bytes.get(i) == Some(&b'\\') && bytes.get(i + 1) == Some(&b'u'))
            .then(|| u16::from_str_radix(digits, 16).ok())
            .flatten()
    };
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            if let Some(unit) = hex_at(i) {
                let escape = || text[i..i + 6].to_string();
                match unit {
                    0xD800..=0xDBFF => match hex_at(i + 6) {
                        Some(0xDC00..=0xDFFF) => i += 12,
                        _ => return Some(escape()),
                    },
                    0xDC00..=0xDFFF => return Some(escape()),
                    _ => i += 6,
                }
                continue;
            }
            // Any other escape: skip the escaped character.
            i += 2;
            continue;
        }
        i += 1;
    }
    None
}

/// Parse one line; the error is (field path, message).
pub fn parse_item(text: &str) -> Result<Item, (String, String)> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        let message = match lone_surrogate(text) {
            Some(escape) => format!(
                "not valid JSON: {escape} is half of a UTF-16 surrogate pair with no other half, not a character (write the character itself, or both halves: \\ud83d\\ude00)"
            ),
            None => format!("not valid JSON: {e}"),
        };
        (String::new(), message)
    })?;
    let Value::Object(obj) = value else {
        return Err((
            String::new(),
            format!("expected a JSON object, found {}", kind(&value)),
        ));
    };
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err((
            unknown.clone(),
            format!(
                "unknown field (expected one of: {}; put extra data under \"meta\")",
                FIELDS.join(", ")
            ),
        ));
    }
    let id = match obj.get("id") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        // Integers only: a number JSON readers hold as a float (a fraction, or more digits than
        // 64 bits) would not be compared as written — two 30-digit ids could become one.
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => n.to_string(),
        Some(Value::Number(n)) => {
            let whole = n.as_f64().is_some_and(|x| x.fract() == 0.0);
            return Err((
                "id".into(),
                if whole {
                    format!(
                        "the number {n} is written as a fraction or has more digits than 64 bits hold: write this id as a string or a plain integer"
                    )
                } else {
                    format!("the number {n} is not an integer: write this id as a string")
                },
            ));
        }
        Some(Value::String(_)) => return Err(("id".into(), "must not be empty".into())),
        Some(v) => {
            return Err((
                "id".into(),
                format!("expected a string or number, found {}", kind(v)),
            ));
        }
        None => return Err(("id".into(), "missing".into())),
    };
    if let Some(problem) = super::ids::id_problem(&id) {
        return Err(("id".into(), problem));
    }
    let context = match obj.get("context") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(turns)) => turns
            .iter()
            .enumerate()
            .map(|(i, t)| parse_turn(t, &format!("context[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err((
                "context".into(),
                format!("expected a list of turns, found {}", kind(v)),
            ));
        }
    };
    let response = match obj.get("response") {
        Some(v) => parse_turn(v, "response")?,
        None => return Err(("response".into(), "missing".into())),
    };
    let reference = match obj.get("reference") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(refs)) if !refs.is_empty() => refs
            .iter()
            .enumerate()
            .map(|(i, r)| match r {
                Value::String(s) => Ok(s.clone()),
                v => Err((
                    format!("reference[{i}]"),
                    format!("expected a string, found {}", kind(v)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Array(_)) => return Err(("reference".into(), "empty list".into())),
        Some(v) => {
            return Err((
                "reference".into(),
                format!("expected a string or a list of strings, found {}", kind(v)),
            ));
        }
    };
    let human = match obj.get("human") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => parse_human(m)?,
        Some(v) => {
            return Err((
                "human".into(),
                format!("expected an object of aspect ratings, found {}", kind(v)),
            ));
        }
    };
    let raters = match obj.get("raters") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) => ids
            .iter()
            .enumerate()
            .map(|(i, r)| match r {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                v => Err((
                    format!("raters[{i}]"),
                    format!("expected a rater id, found {}", kind(v)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err((
                "raters".into(),
                format!("expected a list of rater ids, found {}", kind(v)),
            ));
        }
    };
    if !raters.is_empty() {
        for (aspect, rating) in &human {
            if let HumanRating::PerRater(vs) = rating
                && vs.len() != raters.len()
            {
                return Err((
                    format!("human.{aspect}"),
                    format!(
                        "{} values but {} raters listed in \"raters\"",
                        vs.len(),
                        raters.len()
                    ),
                ));
            }
        }
    }
    let translation = match obj.get("translation") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_translation(v, &context, &reference, &obj)?),
    };
    Ok(Item {
        id,
        context,
        response,
        reference,
        setting: optional_string(&obj, "setting")?,
        system: optional_string(&obj, "system")?,
        dialogue: optional_string(&obj, "dialogue")?,
        scope: match obj.get("scope") {
            None | Some(Value::Null) => crate::data::Scope::Turn,
            Some(Value::String(s)) if s == "turn" => crate::data::Scope::Turn,
            Some(Value::String(s)) if s == "dialogue" => crate::data::Scope::Dialogue,
            Some(_) => {
                return Err((
                    "scope".into(),
                    "expected \"turn\" (the response is rated) or \"dialogue\" (the whole dialogue is)".into(),
                ));
            }
        },
        context_id: optional_string(&obj, "context_id")?,
        human,
        raters,
        meta: obj.get("meta").filter(|v| !v.is_null()).cloned(),
        translation,
        numeric_id: matches!(obj.get("id"), Some(Value::Number(_))),
    })
}

/// An item's `translation`: its source texts must line up with the item's own.
fn parse_translation(
    v: &Value,
    context: &[crate::data::Turn],
    reference: &[String],
    obj: &serde_json::Map<String, Value>,
) -> Result<crate::data::Translation, (String, String)> {
    let t: crate::data::Translation = serde_json::from_value(v.clone())
        .map_err(|e| ("translation".to_string(), e.to_string()))?;
    let counts = [
        ("context", t.source.context.len(), context.len(), "turns"),
        (
            "reference",
            t.source.reference.len(),
            reference.len(),
            "references",
        ),
    ];
    for (field, source, own, what) in counts {
        if source != own {
            return Err((
                format!("translation.source.{field}"),
                format!("{source} {what}, but the item has {own}: each text needs its source"),
            ));
        }
    }
    if t.source.setting.is_some() != obj.get("setting").is_some_and(|s| !s.is_null()) {
        return Err((
            "translation.source.setting".into(),
            "given for an item without a setting, or missing for one with a setting".into(),
        ));
    }
    Ok(t)
}

fn parse_turn(v: &Value, field: &str) -> Result<Turn, (String, String)> {
    let Value::Object(m) = v else {
        return Err((
            field.into(),
            format!(
                "expected an object with \"speaker\" and \"text\", found {}",
                kind(v)
            ),
        ));
    };
    if let Some(unknown) = m.keys().find(|k| *k != "speaker" && *k != "text") {
        return Err((
            format!("{field}.{unknown}"),
            "unknown field (a turn has \"speaker\" and \"text\")".into(),
        ));
    }
    let get = |name: &str| match m.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err((
            format!("{field}.{name}"),
            format!("expected a string, found {}", kind(v)),
        )),
        None => Err((format!("{field}.{name}"), "missing".into())),
    };
    Ok(Turn {
        speaker: get("speaker")?,
        text: get("text")?,
    })
}

fn parse_human(m: &Map<String, Value>) -> Result<BTreeMap<String, HumanRating>, (String, String)> {
    let mut out = BTreeMap::new();
    for (aspect, v) in m {
        let field = format!("human.{aspect}");
        let rating = match v {
            Value::Number(n) => HumanRating::Single(finite(n, &field)?),
            Value::Array(vs) if !vs.is_empty() => HumanRating::PerRater(
                vs.iter()
                    .enumerate()
                    .map(|(i, x)| match x {
                        Value::Number(n) => finite(n, &format!("{field}[{i}]")),
                        other => Err((
                            format!("{field}[{i}]"),
                            format!("expected a number, found {}", kind(other)),
                        )),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Value::Array(_) => return Err((field, "empty list of ratings".into())),
            other => {
                return Err((
                    field,
                    format!(
                        "expected a number or a list of numbers, found {}",
                        kind(other)
                    ),
                ));
            }
        };
        out.insert(aspect.clone(), rating);
    }
    Ok(out)
}

/// The largest rating magnitude accepted: 2^53, the last integer f64 keeps exactly. Ratings are
/// small numbers; beyond this, sums of squares in the statistics overflow (1e308 gave NaN and
/// ±inf correlations).
pub const MAX_RATING: f64 = 9_007_199_254_740_992.0;

fn finite(n: &serde_json::Number, field: &str) -> Result<f64, (String, String)> {
    let x = n
        .as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| (field.to_string(), format!("not a finite number: {n}")))?;
    if x.abs() > MAX_RATING {
        return Err((
            field.to_string(),
            format!("{n} is out of range: ratings must lie within ±2^53 ({MAX_RATING})"),
        ));
    }
    Ok(x)
}

fn optional_string(
    obj: &Map<String, Value>,
    name: &str,
) -> Result<Option<String>, (String, String)> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err((name.into(), format!("expected a string, found {}", kind(v)))),
    }
}

fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// Write items as JSONL, whole (`files::write_atomic`).
pub fn write_items(path: &Path, items: &[Item]) -> Result<(), DataError> {
    crate::files::write_atomic(path, items_text(items).as_bytes())
        .map_err(|e| DataError::io(path, e))
}

/// Items as the text of a JSONL file.
pub fn items_text(items: &[Item]) -> String {
    let mut text = String::new();
    for item in items {
        text.push_str(&item.to_json_line());
        text.push('\n');
    }
    text
}
