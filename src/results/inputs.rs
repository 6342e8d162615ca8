//! What a scorer read of an item, as a hash carried by the item's results line
//! (`input_sha256`). A resume scores an item again when its hash differs from its line's (the
//! item was edited under the same id), and `meta`, `merge` and `eval` refuse a line whose item
//! has changed since it was scored: a number never outlives the text it was computed from.
//!
//! The hash covers exactly the fields the task reads, so editing what it does not read (human
//! ratings, rater ids) keeps the line:
//! - judge: every field a rubric's templates can show (context, response, setting, reference,
//!   id, system, dialogue, meta);
//! - likelihood scorers: the context turns and the response;
//! - BERTScore: the response's text and the texts it is compared with (the references, or the
//!   last context turn, as the run's `against` setting says).

use super::ResultsError;
use super::provenance::{Provenance, Task};
use super::record::Record;
use crate::data::{Item, Pair};
use serde_json::{Value, json};
use std::path::Path;

/// What a results line is written for: an item, or a pair of items (`data::Pair`).
pub trait Unit {
    fn id(&self) -> &str;
    /// The id as the line writes it (an item's integer id stays an integer).
    fn id_json(&self) -> serde_json::Value;
    /// The hash of what a run of `provenance` reads of this unit (`inputs`).
    fn input_digest(&self, provenance: &Provenance) -> String;
}

impl Unit for Item {
    fn id(&self) -> &str {
        &self.id
    }

    fn id_json(&self) -> serde_json::Value {
        Item::id_json(self)
    }

    fn input_digest(&self, provenance: &Provenance) -> String {
        digest(provenance, self)
    }
}

impl Unit for Pair {
    fn id(&self) -> &str {
        &self.id
    }

    fn id_json(&self) -> serde_json::Value {
        serde_json::Value::String(self.id.clone())
    }

    fn input_digest(&self, _: &Provenance) -> String {
        pair_digest(self)
    }
}

/// The hash of what a run of `provenance` reads of `item` (sha256, hex).
pub fn digest(provenance: &Provenance, item: &Item) -> String {
    let read: Value = match provenance.task {
        Task::Judge | Task::Compare => shown(item),
        // A likelihood scorer's prefix shows the dialogue: its turns and the response.
        Task::Likelihood => json!({"context": item.context, "response": item.response}),
        // A translation line is written for one text, hashed as `translate::Text` hashes it
        // (its bytes); an item read as such a unit is its response.
        Task::Translate => return crate::checksum::sha256_hex(item.response.text.as_bytes()),
        Task::BertScore => {
            let against = provenance.settings.get("against").and_then(Value::as_str);
            let compared: Vec<&str> = match against {
                Some("last-turn") => item
                    .context
                    .last()
                    .map(|t| t.text.as_str())
                    .into_iter()
                    .collect(),
                _ => item.reference.iter().map(String::as_str).collect(),
            };
            json!({"response": item.response.text, "compared": compared})
        }
    };
    crate::checksum::sha256_hex(read.to_string().as_bytes())
}

/// Every field of an item a rubric's templates can show (its ratings are not shown).
fn shown(item: &Item) -> Value {
    let mut shown = item.clone();
    shown.human.clear();
    shown.raters.clear();
    // Where translated texts came from is not shown to a judge.
    shown.translation = None;
    serde_json::to_value(&shown).expect("items serialise")
}

/// The hash of what a pairwise judge reads of `pair`: both candidates as a judge reads items.
pub fn pair_digest(pair: &Pair) -> String {
    let read = json!({
        "context_id": pair.context_id,
        "first": shown(&pair.first),
        "second": shown(&pair.second),
    });
    crate::checksum::sha256_hex(read.to_string().as_bytes())
}

/// An error naming `path:line` when `record` (read there) was scored from another version of
/// `unit` (an item, a pair) than the one given. A line without a hash (written by another tool)
/// is not checked.
pub fn ensure_current(
    record: &Record,
    unit: &impl Unit,
    path: &Path,
    line: usize,
) -> Result<(), ResultsError> {
    match &record.input {
        Some(input) if *input != unit.input_digest(&record.provenance) => {
            Err(ResultsError::Corrupt {
                path: path.to_path_buf(),
                line,
                message: format!(
                    "input_sha256: item {:?} has changed since this line was scored; run the scorer again on these items (it scores changed items again)",
                    record.id
                ),
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{HumanRating, Turn};
    use crate::results::provenance::test_provenance;

    fn provenance(task: Task, against: Option<&str>) -> Provenance {
        let mut p = test_provenance(task);
        if let Some(a) = against {
            p.settings.insert("against".into(), json!(a));
        }
        p
    }

    fn item() -> Item {
        Item {
            id: "a".into(),
            context: vec![
                Turn {
                    speaker: "U".into(),
                    text: "one".into(),
                },
                Turn {
                    speaker: "S".into(),
                    text: "two".into(),
                },
            ],
            response: Turn {
                speaker: "U".into(),
                text: "three".into(),
            },
            reference: vec!["ref".into()],
            setting: None,
            system: Some("sys".into()),
            dialogue: None,
            scope: Default::default(),
            context_id: None,
            human: [("x".to_string(), HumanRating::Single(1.0))].into(),
            raters: vec![],
            meta: None,
            translation: None,
            numeric_id: false,
        }
    }

    #[test]
    fn a_hash_follows_what_its_task_reads_and_nothing_else() {
        let judge = provenance(Task::Judge, None);
        let last = provenance(Task::BertScore, Some("last-turn"));
        let refs = provenance(Task::BertScore, Some("reference"));
        let base = item();
        // (what, the edit, whether the judge / last-turn / reference hashes change)
        type Edit = (&'static str, fn(&mut Item), [bool; 3]);
        let edits: [Edit; 6] = [
            (
                "response",
                |i| i.response.text.push('!'),
                [true, true, true],
            ),
            (
                "last turn",
                |i| i.context[1].text.push('!'),
                [true, true, false],
            ),
            (
                "first turn",
                |i| i.context[0].text.push('!'),
                [true, false, false],
            ),
            (
                "reference",
                |i| i.reference.push("r2".into()),
                [true, false, true],
            ),
            ("system", |i| i.system = None, [true, false, false]),
            (
                "human",
                |i| {
                    i.human.clear();
                    i.raters.push("r".into());
                },
                [false, false, false],
            ),
        ];
        for (what, edit, expect) in edits {
            let mut changed = base.clone();
            edit(&mut changed);
            for (p, &e) in [&judge, &last, &refs].iter().zip(&expect) {
                assert_eq!(
                    digest(p, &base) != digest(p, &changed),
                    e,
                    "{what} under {:?} {:?}",
                    p.task,
                    p.settings
                );
            }
        }
    }
}
