//! The items and every score column aligned with them, read from results files.

use super::MetaError;
use crate::data::Item;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;

/// What a column holds (how the report groups and draws it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    JudgeArgmax,
    JudgeExpected,
    BertScore,
    Combined,
}

/// One score per item (None: no score line, or an error line).
#[derive(Clone, Debug)]
pub struct Column {
    pub label: String,
    pub family: Family,
    /// The rubric aspect a judge column scores; None for BERTScore.
    pub aspect: Option<String>,
    /// Human keys the rubric says this aspect is compared with (its `human` field).
    pub human: Vec<String>,
    pub values: Vec<Option<f64>>,
}

/// Items, their human ratings, and the score columns read so far.
pub struct Frame {
    pub items: Vec<Item>,
    /// Human aspect keys, in first-seen order.
    pub human_keys: Vec<String>,
    pub columns: Vec<Column>,
    /// Provenance of each results file read, in order.
    pub sources: Vec<Value>,
    index: HashMap<String, usize>,
}

impl Frame {
    pub fn new(items: Vec<Item>) -> Self {
        let mut human_keys: Vec<String> = Vec::new();
        for item in &items {
            for key in item.human.keys() {
                if !human_keys.contains(key) {
                    human_keys.push(key.clone());
                }
            }
        }
        let index = items
            .iter()
            .enumerate()
            .map(|(i, it)| (it.id.clone(), i))
            .collect();
        Frame {
            items,
            human_keys,
            columns: Vec::new(),
            sources: Vec::new(),
            index,
        }
    }

    /// Mean human rating of `key` per item.
    pub fn human(&self, key: &str) -> Vec<Option<f64>> {
        self.items
            .iter()
            .map(|i| i.human.get(key).map(|r| r.mean()))
            .collect()
    }

    /// Whether `column` is compared with human aspect `key`: a judge aspect goes with the human
    /// aspect of the same key and those its rubric names (`human = [...]`) when the items have
    /// any of them, and with every human aspect otherwise.
    pub fn pairs_with(&self, column: &Column, key: &str) -> bool {
        match &column.aspect {
            Some(a) => {
                let declared = |k: &str| k == a || column.human.iter().any(|h| h == k);
                if self.human_keys.iter().any(|k| declared(k)) {
                    declared(key)
                } else {
                    true
                }
            }
            None => true,
        }
    }

    /// Read a `hyoka judge` or `hyoka bertscore` results file and add its columns. `name` tells
    /// several judges apart in the labels (None: plain "judge"). The judge's rubric (resolved
    /// from the provenance when its hash still matches) says which human keys each aspect targets.
    pub fn add_results(&mut self, path: &Path, name: Option<&str>) -> Result<usize, MetaError> {
        let io = |source| MetaError::Io {
            path: path.to_path_buf(),
            source,
        };
        let reader = BufReader::new(std::fs::File::open(path).map_err(io)?);
        let mut task: Option<String> = None;
        let mut judge_aspects: Vec<String> = Vec::new();
        let mut values: HashMap<String, Vec<Option<f64>>> = HashMap::new();
        let mut matched = 0;
        // Each item once, every line from one run: a second line for an item, or a line of
        // another run (other model, settings, version), would change the correlations silently.
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut first_run: Option<(Value, crate::results::Provenance)> = None;
        for line in crate::data::lines::Lines::new(reader, crate::data::lines::MAX_LINE_BYTES) {
            let line = line.map_err(|e| match e {
                crate::data::lines::ReadError::Io(e) => io(e),
                crate::data::lines::ReadError::TooLong { line, .. } => MetaError::Invalid {
                    path: path.to_path_buf(),
                    line,
                    field: String::new(),
                    message: e.to_string(),
                },
            })?;
            let i = line.number - 1;
            let invalid = |field: &str, message: String| MetaError::Invalid {
                path: path.to_path_buf(),
                line: i + 1,
                field: field.into(),
                message,
            };
            let line = line.text.map_err(|e| invalid("", e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let v: Value =
                serde_json::from_str(&line).map_err(|e| invalid("", format!("not JSON: {e}")))?;
            let id = v
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("id", "missing or not a string".into()))?;
            let this_task = v
                .pointer("/provenance/task")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    invalid(
                        "provenance.task",
                        "missing: not a hyoka results file".into(),
                    )
                })?;
            match &task {
                None => {
                    task = Some(this_task.to_string());
                    self.sources.push(v["provenance"].clone());
                }
                Some(t) if t != this_task => {
                    return Err(invalid(
                        "provenance.task",
                        format!("{this_task} after {t} lines: one run per file"),
                    ));
                }
                _ => {}
            }
            // Lines of one run carry the same provenance: compared as JSON first, and read as a
            // provenance only when they differ (the device may, the rest may not).
            let this_run = &v["provenance"];
            match &first_run {
                None => {
                    first_run = Some((
                        this_run.clone(),
                        parse_provenance(this_run).map_err(|e| invalid("provenance", e))?,
                    ))
                }
                Some((first_value, _)) if first_value == this_run => {}
                Some((_, first)) => {
                    let run = parse_provenance(this_run).map_err(|e| invalid("provenance", e))?;
                    if let Some((what, theirs, ours)) = first.difference(&run) {
                        return Err(invalid(
                            "provenance",
                            format!(
                                "from another run than the file's first line ({what}: {theirs} there, {ours} here); one run per file"
                            ),
                        ));
                    }
                }
            }
            if let Some(first) = seen.insert(id.to_string(), i + 1) {
                return Err(invalid(
                    "id",
                    format!("{id:?} again (first on line {first}): one line per item"),
                ));
            }
            let Some(&row) = self.index.get(id) else {
                continue;
            };
            matched += 1;
            if v.get("error").is_some() {
                continue;
            }
            match this_task {
                "judge" => {
                    let scores = v
                        .get("scores")
                        .and_then(Value::as_object)
                        .ok_or_else(|| invalid("scores", "missing".into()))?;
                    for (aspect, s) in scores {
                        if !judge_aspects.contains(aspect) {
                            judge_aspects.push(aspect.clone());
                        }
                        for (what, field) in [("argmax", "score"), ("expected", "expected")] {
                            let x = s.get(field).and_then(Value::as_f64).ok_or_else(|| {
                                invalid(
                                    &format!("scores.{aspect}.{field}"),
                                    "missing or not a number".into(),
                                )
                            })?;
                            values
                                .entry(format!("{what}\u{0}{aspect}"))
                                .or_insert_with(|| vec![None; self.items.len()])[row] = Some(x);
                        }
                    }
                }
                "bertscore" => {
                    for key in ["P", "R", "F"] {
                        let x = v
                            .pointer(&format!("/bertscore/{key}"))
                            .and_then(Value::as_f64)
                            .ok_or_else(|| {
                                invalid(
                                    &format!("bertscore.{key}"),
                                    "missing or not a number".into(),
                                )
                            })?;
                        values
                            .entry(key.to_string())
                            .or_insert_with(|| vec![None; self.items.len()])[row] = Some(x);
                    }
                }
                other => {
                    return Err(invalid(
                        "provenance.task",
                        format!("`{other}` results cannot be meta-evaluated"),
                    ));
                }
            }
        }
        let empty = || vec![None; self.items.len()];
        match task.as_deref() {
            Some("judge") => {
                let targets = rubric_targets(self.sources.last());
                let prefix = name.map_or("judge".to_string(), |n| format!("judge[{n}]"));
                for (what, family) in [
                    ("argmax", Family::JudgeArgmax),
                    ("expected", Family::JudgeExpected),
                ] {
                    for aspect in &judge_aspects {
                        let v = values
                            .remove(&format!("{what}\u{0}{aspect}"))
                            .unwrap_or_else(empty);
                        let human = targets
                            .iter()
                            .find(|(k, _)| k == aspect)
                            .map(|(_, h)| h.clone())
                            .unwrap_or_default();
                        self.columns.push(Column {
                            label: format!("{prefix} {what}"),
                            family,
                            aspect: Some(aspect.clone()),
                            human,
                            values: v,
                        });
                    }
                }
            }
            Some(_) => {
                let suffix = name.map_or(String::new(), |n| format!("[{n}]"));
                for key in ["P", "R", "F"] {
                    let v = values.remove(key).unwrap_or_else(empty);
                    self.columns.push(Column {
                        label: format!("BERTScore{suffix} {key}"),
                        family: Family::BertScore,
                        aspect: None,
                        human: Vec::new(),
                        values: v,
                    });
                }
            }
            None => {
                return Err(MetaError::Input(format!(
                    "{}: no results in this file",
                    path.display()
                )));
            }
        }
        Ok(matched)
    }

    /// The label shown for a column in tables: judge columns that pair with every human aspect
    /// carry their aspect, as they are rows of their own.
    pub fn row_label(&self, column: &Column) -> String {
        match &column.aspect {
            Some(a) if !self.human_keys.contains(a) => format!("{} · {a}", column.label),
            _ => column.label.clone(),
        }
    }

    /// A column's full name: its label and, for judge columns, the aspect.
    pub fn column_title(&self, column: &Column) -> String {
        match &column.aspect {
            Some(a) => format!("{} · {a}", column.label),
            None => column.label.clone(),
        }
    }
}

/// (aspect key, human keys) of the rubric a judge run used, when it can still be found with the
/// same hash (a built-in, or a rubric file still at its path and unchanged).
fn rubric_targets(provenance: Option<&Value>) -> Vec<(String, Vec<String>)> {
    let Some(id) = provenance.and_then(|p| p.get("rubric")) else {
        return Vec::new();
    };
    let (Some(source), Some(hash)) = (id["source"].as_str(), id["hash"].as_str()) else {
        return Vec::new();
    };
    let name = source.strip_prefix("builtin:").unwrap_or(source);
    match crate::rubric::Rubric::resolve(name) {
        Ok((r, _)) if r.hash() == hash => r
            .aspects
            .iter()
            .map(|a| (a.key.clone(), a.human.clone()))
            .collect(),
        _ => Vec::new(),
    }
}

/// A results line's provenance, read as one.
fn parse_provenance(v: &Value) -> Result<crate::results::Provenance, String> {
    crate::results::Provenance::deserialize(v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{HumanRating, Turn};

    fn frame(keys: &[&str]) -> Frame {
        let item = Item {
            id: "a".into(),
            context: vec![],
            response: Turn {
                speaker: "S".into(),
                text: "x".into(),
            },
            reference: vec![],
            setting: None,
            system: None,
            dialogue: None,
            human: keys
                .iter()
                .map(|k| (k.to_string(), HumanRating::Single(1.0)))
                .collect(),
            raters: vec![],
            meta: None,
        };
        Frame::new(vec![item])
    }

    fn judge(aspect: &str, human: &[&str]) -> Column {
        Column {
            label: "judge expected".into(),
            family: Family::JudgeExpected,
            aspect: Some(aspect.into()),
            human: human.iter().map(|h| h.to_string()).collect(),
            values: vec![Some(1.0)],
        }
    }

    #[test]
    fn judge_aspects_pair_by_key_then_by_the_rubric_then_with_everything() {
        let f = frame(&["breakdown", "ungrammatical", "naturalness"]);
        // Same key.
        assert!(f.pairs_with(&judge("naturalness", &[]), "naturalness"));
        assert!(!f.pairs_with(&judge("naturalness", &[]), "breakdown"));
        // The rubric's `human = ["breakdown"]`.
        assert!(f.pairs_with(&judge("coherence", &["breakdown"]), "breakdown"));
        assert!(!f.pairs_with(&judge("coherence", &["breakdown"]), "ungrammatical"));
        // Nothing declared or matching: every human aspect (exploratory rows).
        assert!(
            f.pairs_with(&judge("overall", &[]), "breakdown")
                && f.pairs_with(&judge("overall", &[]), "ungrammatical")
        );
        // A declared key the items lack falls back to everything too.
        assert!(f.pairs_with(&judge("overall", &["quality"]), "ungrammatical"));
    }
}
