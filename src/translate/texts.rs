//! The units of a translation run (each distinct text once) and the items rebuilt from their
//! translations.

use super::TranslateError;
use crate::data::{Item, SourceTexts, Turn};
use crate::results::runner::Unit;
use crate::results::{Body, Provenance, Record, ResultsError};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// One distinct text to translate, named by its hash: the same text in any item, any file,
/// is the same unit (and the same line of a store).
#[derive(Clone, Debug, PartialEq)]
pub struct Text {
    /// sha256 of the text, hex.
    pub id: String,
    pub text: String,
}

impl Text {
    pub fn new(text: &str) -> Self {
        Text {
            id: crate::checksum::sha256_hex(text.as_bytes()),
            text: text.to_string(),
        }
    }
}

impl Unit for Text {
    fn id(&self) -> &str {
        &self.id
    }

    fn id_json(&self) -> serde_json::Value {
        serde_json::Value::String(self.id.clone())
    }

    /// The id is the text's hash: a line is never of another text.
    fn input_digest(&self, _: &Provenance) -> String {
        self.id.clone()
    }
}

/// Every text of `items` that a translation changes, once each, in order of first appearance
/// (context turns, response, references, setting; empty texts stay empty and are left out).
/// Items that already carry a translation are refused: their source would be lost.
pub fn distinct_texts(items: &[Item]) -> Result<Vec<Text>, TranslateError> {
    if let Some(item) = items.iter().find(|i| i.translation.is_some()) {
        let t = item.translation.as_ref().expect("found above");
        return Err(TranslateError::Items(format!(
            "item {:?} is already a translation (from {} to {}): translate the items it came from, so that their texts stay its source",
            item.id, t.from, t.to
        )));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for text in items.iter().flat_map(texts_of) {
        if !text.is_empty() && seen.insert(text) {
            out.push(Text::new(text));
        }
    }
    Ok(out)
}

fn texts_of(item: &Item) -> impl Iterator<Item = &str> {
    (item.context.iter().map(|t| t.text.as_str()))
        .chain(std::iter::once(item.response.text.as_str()))
        .chain(item.reference.iter().map(String::as_str))
        .chain(item.setting.as_deref())
}

/// Failed texts (a run summary's "id: why") as their start, an item that holds them, and why.
pub fn describe_failures(items: &[Item], failed: &[String]) -> Vec<String> {
    let texts: HashMap<String, String> = items
        .iter()
        .flat_map(texts_of)
        .map(|t| (Text::new(t).id, t.to_string()))
        .collect();
    failed
        .iter()
        .map(|f| {
            let (id, why) = f.split_once(": ").unwrap_or((f.as_str(), ""));
            let Some(text) = texts.get(id) else {
                return f.clone();
            };
            let item = items
                .iter()
                .find(|i| texts_of(i).any(|t| t == text))
                .map_or("?", |i| i.id.as_str());
            let short: String = text.chars().take(40).collect();
            let more = if text.chars().count() > 40 { "…" } else { "" };
            format!("text {short:?}{more} (item {item}): {why}")
        })
        .collect()
}

/// A text's translation, and whether the model ended it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTranslation {
    pub text: String,
    pub finished: bool,
}

/// The translations in a store (`hyoka translate`'s results file), by source text: the lines
/// of the run `provenance` only, error lines left out.
pub fn read_store(
    path: &Path,
    provenance: &Provenance,
) -> Result<HashMap<String, StoredTranslation>, ResultsError> {
    let text = std::fs::read_to_string(path).map_err(|source| ResultsError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    translations_in(text.lines(), path, provenance)
}

/// The translations results lines hold (`path`: what errors name as their origin), each
/// line's provenance `provenance` and its id its source text's hash.
pub(crate) fn translations_in<'l>(
    lines: impl IntoIterator<Item = &'l str>,
    path: &Path,
    provenance: &Provenance,
) -> Result<HashMap<String, StoredTranslation>, ResultsError> {
    let mut out = HashMap::new();
    for (n, line) in lines
        .into_iter()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let corrupt = |message: String| ResultsError::Corrupt {
            path: path.to_path_buf(),
            line: n + 1,
            message,
        };
        let record = Record::parse(line).map_err(|e| corrupt(e.to_string()))?;
        if let Some((what, theirs, ours)) = record.provenance.difference(provenance) {
            return Err(corrupt(format!(
                "written by another run ({what}: {theirs} here, {ours} in this one)"
            )));
        }
        if let Ok(Body::Translation(t)) = record.body {
            if Text::new(&t.source).id != record.id {
                return Err(corrupt(format!(
                    "id: not the hash of the line's source text {:?}",
                    t.source
                )));
            }
            let finished = t.finished;
            out.insert(
                t.source,
                StoredTranslation {
                    text: t.text,
                    finished,
                },
            );
        }
    }
    Ok(out)
}

/// `items` with every text replaced by its translation and its source kept
/// (`data::Translation`, `by`: the run's provenance, `unfinished`: the texts cut at their
/// limit); Err: the texts that have none (each once).
pub fn translated_items(
    items: &[Item],
    translations: &HashMap<String, StoredTranslation>,
    (from, to): (&str, &str),
    by: &serde_json::Value,
) -> Result<Vec<Item>, Vec<String>> {
    let mut missing: Vec<String> = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mut unfinished: Vec<String> = Vec::new();
        let mut get = |text: &str, field: String| -> String {
            if text.is_empty() {
                return String::new();
            }
            match translations.get(text) {
                Some(t) => {
                    if !t.finished {
                        unfinished.push(field);
                    }
                    t.text.clone()
                }
                None => {
                    if !missing.iter().any(|m| m == text) {
                        missing.push(text.to_string());
                    }
                    String::new()
                }
            }
        };
        let source = SourceTexts {
            context: item.context.iter().map(|t| t.text.clone()).collect(),
            response: item.response.text.clone(),
            reference: item.reference.clone(),
            setting: item.setting.clone(),
        };
        let turn = |t: &Turn, text: String| Turn {
            speaker: t.speaker.clone(),
            text,
        };
        let mut translated = item.clone();
        translated.context = (item.context.iter().enumerate())
            .map(|(k, t)| turn(t, get(&t.text, format!("context[{k}]"))))
            .collect();
        translated.response = turn(&item.response, get(&item.response.text, "response".into()));
        translated.reference = (item.reference.iter().enumerate())
            .map(|(k, r)| get(r, format!("reference[{k}]")))
            .collect();
        translated.setting = (item.setting.as_deref()).map(|s| get(s, "setting".into()));
        translated.translation = Some(crate::data::Translation {
            from: from.into(),
            to: to.into(),
            source,
            by: Some(by.clone()),
            unfinished,
        });
        out.push(translated);
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, context: &[&str], response: &str) -> Item {
        let turn = |t: &str| Turn {
            speaker: "S".into(),
            text: t.into(),
        };
        let mut item = crate::prompt::sample_item();
        item.id = id.into();
        item.context = context.iter().map(|t| turn(t)).collect();
        item.response = turn(response);
        item.reference.clear();
        item.setting = None;
        item
    }

    #[test]
    fn a_text_shared_by_items_is_one_unit_and_every_copy_gets_its_translation() {
        let items = [
            item("1", &["おはよう", "元気?"], "元気です"),
            item("2", &["おはよう", "元気?"], "まあまあ"),
            item("3", &[], "おはよう"),
        ];
        let texts = distinct_texts(&items).unwrap();
        let names: Vec<&str> = texts.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(names, ["おはよう", "元気?", "元気です", "まあまあ"]);
        let map: HashMap<String, StoredTranslation> = texts
            .iter()
            .map(|t| {
                let text = format!("<{}>", t.text);
                let finished = t.text != "まあまあ";
                (t.text.clone(), StoredTranslation { text, finished })
            })
            .collect();
        let by = serde_json::json!({"model": "m"});
        let out = translated_items(&items, &map, ("ja", "en"), &by).unwrap();
        assert_eq!(out[1].context[0].text, "<おはよう>");
        assert_eq!(out[2].response.text, "<おはよう>");
        let t = out[1].translation.as_ref().unwrap();
        assert_eq!(t.source.response, "まあまあ");
        assert_eq!(t.source.context, ["おはよう", "元気?"]);
        assert_eq!(out[1].human, items[1].human);
        // A translation cut at its limit is named in the items that hold it.
        assert_eq!(t.unfinished, ["response"]);
        assert!(out[0].translation.as_ref().unwrap().unfinished.is_empty());
        // A missing translation is named once, and nothing is returned.
        let mut partial = map.clone();
        partial.remove("おはよう");
        let missing = translated_items(&items, &partial, ("ja", "en"), &by).unwrap_err();
        assert_eq!(missing, ["おはよう"]);
        // Translated items are not translated again.
        assert!(distinct_texts(&out).is_err());
    }
}
