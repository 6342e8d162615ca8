//! The Dialogue System Live Competition 3's preliminary data (dialog-system-live-competition/
//! dslc3, `livecompetition3.zip`, MIT): per track (`open`, `situation`) one folder per system
//! of `<SYS>_NN.log.json` dialogues and a `<SYS>_score.csv` of the user's ratings of each whole
//! dialogue, 1–5 (half points where the form let a rater tick two). Each dialogue becomes one
//! item of scope `dialogue`: its turns but the last as the context, the last as the response.
//!
//! Ratings: open track `naturalness` (自然性), `topic_following` (話題追随), `topic_offering`
//! (話題提供), and the two topics the user chose in `meta.dslc3.topics`; situation track
//! `situation_humanlike` (how well the dialogue suits the situation and how human it is). One
//! user rated each dialogue, so there are no rater ids.

use super::item::{HumanRating, Item, Scope, Turn};
use super::sources::{self, SourceFile};
use super::{DataError, ids};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The tracks and their rating columns, in the CSV's order after the dialogue id.
const TRACKS: [(&str, &[&str]); 2] = [
    (
        "open",
        &["naturalness", "topic_following", "topic_offering"],
    ),
    ("situation", &["situation_humanlike"]),
];

/// What an import gives.
#[derive(Clone, Debug)]
pub struct Imported {
    pub items: Vec<Item>,
    pub track: String,
}

/// The CSV fields of one line: commas outside double quotes separate, `""` inside quotes is a
/// quote.
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        let field = fields.last_mut().expect("one field at least");
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => fields.push(String::new()),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err("a quoted field is not closed".into());
    }
    Ok(fields)
}

/// One score file's lines by dialogue id: the line's number, its ratings and the fields after
/// them.
type Scores = BTreeMap<String, (usize, Vec<f64>, Vec<String>)>;

fn read_scores(file: &SourceFile, columns: &[&str]) -> Result<Scores, DataError> {
    let mut by_dialogue = Scores::new();
    let text = file.text.strip_prefix('\u{feff}').unwrap_or(&file.text);
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let invalid = |field: String, message: String| DataError::Invalid {
            file: file.shown.clone(),
            line: line_no,
            field,
            message,
        };
        if line.trim().is_empty() {
            continue;
        }
        let fields = csv_fields(line).map_err(|m| invalid("line".into(), m))?;
        if fields.len() < 1 + columns.len() {
            return Err(invalid(
                "line".into(),
                format!(
                    "{} fields: a dialogue id and the ratings {} are expected",
                    fields.len(),
                    columns.join(", ")
                ),
            ));
        }
        let id = fields[0].trim().to_string();
        if let Some(why) = ids::path_part_problem(&id) {
            return Err(invalid("dialogue id".into(), format!("{id:?} {why}")));
        }
        let mut ratings = Vec::new();
        for (k, column) in columns.iter().enumerate() {
            let raw = fields[1 + k].trim();
            let value: f64 = raw
                .parse()
                .map_err(|_| invalid(column.to_string(), format!("{raw:?} is not a number")))?;
            sources::on_rating_scale(value).map_err(|m| invalid(column.to_string(), m))?;
            ratings.push(value);
        }
        let extra: Vec<String> = fields[1 + columns.len()..].to_vec();
        if let Some((first, ..)) = by_dialogue.get(&id) {
            return Err(invalid(
                "dialogue id".into(),
                format!("{id:?} again (first on line {first})"),
            ));
        }
        by_dialogue.insert(id, (line_no, ratings, extra));
    }
    Ok(by_dialogue)
}

/// The turns of one dialogue file, and its id.
fn read_dialogue(file: &SourceFile) -> Result<(String, Vec<Turn>), DataError> {
    let field = |field: &str, message: String| DataError::Field {
        file: file.shown.clone(),
        field: field.to_string(),
        message,
    };
    let value: Value = serde_json::from_str(&file.text).map_err(|e| DataError::Format {
        file: file.shown.clone(),
        message: format!("not a DSLC3 dialogue (JSON): {e}"),
    })?;
    let id = value["dialogue-id"]
        .as_str()
        .ok_or_else(|| field("dialogue-id", "missing or not a string".into()))?
        .to_string();
    if let Some(why) = ids::path_part_problem(&id) {
        return Err(field("dialogue-id", format!("{id:?} {why}")));
    }
    let turns = sources::turns_of(&value, "turns", "utterance", &field)?;
    Ok((id, turns))
}

/// The track to import: the only one there is, or the one `wanted` names.
fn choose_track<'a>(
    path: &Path,
    present: &[&'a str],
    wanted: Option<&str>,
) -> Result<&'a str, DataError> {
    let fail = |message: String| DataError::Format {
        file: path.to_path_buf(),
        message,
    };
    match (wanted, present) {
        (_, []) => Err(fail(
            "no DSLC3 track found: expected open/<SYS>/<SYS>_NN.log.json or situation/<SYS>/<SYS>_NN.log.json with <SYS>_score.csv beside the system's folder (livecompetition3.zip)".into(),
        )),
        (None, [one]) => Ok(one),
        (None, many) => Err(fail(format!(
            "holds the tracks {}: choose one with --track",
            many.join(" and ")
        ))),
        (Some(w), _) => present.iter().find(|t| **t == w).copied().ok_or_else(|| {
            fail(format!(
                "no track {w:?} in it (tracks there: {})",
                present.join(", ")
            ))
        }),
    }
}

/// Import one track of DSLC3: a folder or a `.zip`/`.tar.gz` of one (the repository ships
/// `data/dslc3.zip`, the competition's `livecompetition3.zip`). Every dialogue must have its
/// ratings and every rating its dialogue.
pub fn import(path: &Path, track: Option<&str>) -> Result<Imported, DataError> {
    let files = sources::read(
        path,
        &sources::Wanted {
            endings: &[".log.json", "_score.csv"],
            described: "DSLC3 dialogues (*.log.json) and ratings (*_score.csv)",
        },
    )?;
    // A track's files lie at <track>/<SYS>/… and <track>/<SYS>_score.csv, below one top folder
    // at most.
    let track_of = |f: &SourceFile| -> Option<&'static str> {
        let first = f.relative.components().next()?.as_os_str().to_str()?;
        TRACKS.iter().map(|(t, _)| *t).find(|t| *t == first)
    };
    let present: Vec<&str> = (TRACKS.iter().map(|(t, _)| *t))
        .filter(|t| files.iter().any(|f| track_of(f) == Some(t)))
        .collect();
    let track = choose_track(path, &present, track)?;
    let columns = TRACKS
        .iter()
        .find(|(t, _)| *t == track)
        .map(|(_, c)| *c)
        .unwrap_or_default();
    let mine: Vec<&SourceFile> = files
        .iter()
        .filter(|f| track_of(f) == Some(track))
        .collect();
    let mut scores: BTreeMap<String, (Scores, &SourceFile)> = BTreeMap::new();
    for f in mine
        .iter()
        .filter(|f| f.relative.to_string_lossy().ends_with("_score.csv"))
    {
        let name = f
            .relative
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let system = name.trim_end_matches("_score.csv").to_string();
        scores.insert(system, (read_scores(f, columns)?, f));
    }
    let mut items = Vec::new();
    let mut seen: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    for f in mine
        .iter()
        .filter(|f| f.relative.to_string_lossy().ends_with(".log.json"))
    {
        let system = f.system().unwrap_or_default();
        let (id, mut turns) = read_dialogue(f)?;
        let Some((table, table_file)) = scores.get(&system) else {
            return Err(DataError::Format {
                file: f.shown.clone(),
                message: format!(
                    "no {system}_score.csv beside the folder {system}: every dialogue needs its ratings"
                ),
            });
        };
        let Some((_, ratings, extra)) = table.get(&id) else {
            return Err(DataError::Format {
                file: f.shown.clone(),
                message: format!(
                    "dialogue {id} has no line in {}",
                    table_file.shown.display()
                ),
            });
        };
        if let Some(first) = seen.insert(id.clone(), f.shown.clone()) {
            return Err(DataError::Field {
                file: f.shown.clone(),
                field: "dialogue-id".into(),
                message: format!("{id:?} again (first in {})", first.display()),
            });
        }
        let response = turns.pop().expect("two turns at least");
        let human = (columns.iter().zip(ratings))
            .map(|(c, r)| (c.to_string(), HumanRating::Single(*r)))
            .collect();
        let mut about = serde_json::Map::new();
        about.insert("track".into(), Value::from(track));
        if track == "open" {
            let topics: Vec<Value> = extra.iter().map(|t| Value::from(t.trim())).collect();
            about.insert("topics".into(), Value::Array(topics));
        }
        items.push(Item {
            id: id.clone(),
            context: turns,
            response,
            reference: Vec::new(),
            setting: None,
            system: Some(system),
            dialogue: Some(id.clone()),
            scope: Scope::Dialogue,
            context_id: None,
            human,
            raters: Vec::new(),
            meta: Some(serde_json::json!({ "dslc3": about })),
            translation: None,
            numeric_id: false,
        });
    }
    let imported: std::collections::BTreeSet<&str> = items.iter().map(|i| i.id.as_str()).collect();
    for (system, (table, file)) in &scores {
        let missing = (table.iter()).find(|(id, _)| !imported.contains(id.as_str()));
        if let Some((id, (line, ..))) = missing {
            return Err(DataError::Invalid {
                file: file.shown.clone(),
                line: *line,
                field: "dialogue id".into(),
                message: format!("{id:?}: no such dialogue in the folder {system}"),
            });
        }
    }
    Ok(Imported {
        items,
        track: track.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_follow_quotes() {
        assert_eq!(
            csv_fields(r#"CHC_01,2,1.5,2,"アーセナルFC","a, ""b""""#).unwrap(),
            ["CHC_01", "2", "1.5", "2", "アーセナルFC", "a, \"b\""]
        );
        assert!(csv_fields(r#"x,"open"#).is_err());
    }
}
