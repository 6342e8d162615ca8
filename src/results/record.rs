//! One results line, typed: an item's scores (or why it has none) and the run that wrote it.
//!
//! The JSON layout is the one users read: `{"id", "scores"|"bertscore"|"error", …,
//! "provenance"}`. Lines are read by the provenance's task, field by field, so a bad line is
//! named down to its field. Each scorer's fields are written and read in its own file
//! (`judge_lines`, `compare_lines`, `likelihoods`, `prf`); this one holds what every line has and
//! chooses among them.

pub use super::compare_lines::CompareRecord;
pub use super::judge_lines::{Answer, JudgeAnswer, JudgeRecord};
pub use super::likelihoods::{AspectLikelihood, LikelihoodRecord, TranslationRecord};
use super::likelihoods::{read_likelihood, read_translation};
pub use super::line_fields::FieldError;
use super::line_fields::field_error;
use super::prf::Prf;
use super::provenance::{Provenance, SharedProvenance, Task};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// A results line.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub id: String,
    /// The hash of what the scorer read of the item (`inputs::digest`); None in a line written
    /// without one, which is never taken for a current item's.
    pub input: Option<String>,
    /// The scores, or why the item has none (an error line, scored again by a rerun).
    pub body: Result<Body, String>,
    /// An error line of an item with nothing to score by definition (`not_applicable_line`).
    pub not_applicable: bool,
    /// Shared by the lines of one file that carry the same provenance (all of a run's do).
    pub provenance: Arc<Provenance>,
}

/// What a scorer found for one item. One arm per scorer (see `provenance::Task`).
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Judge(JudgeRecord),
    BertScore(Prf),
    Compare(CompareRecord),
    Translation(TranslationRecord),
    Likelihood(LikelihoodRecord),
}

impl Record {
    pub fn task(&self) -> Task {
        self.provenance.task
    }

    /// The line as written to a results file (no newline).
    pub fn to_line(&self) -> String {
        let provenance = serde_json::to_value(&*self.provenance).expect("provenance serialises");
        write_line(
            &json!(self.id),
            self.input.as_deref(),
            &self.body,
            self.not_applicable,
            &provenance,
        )
    }

    /// Read one line; the provenance's task says which fields it has.
    pub fn parse(text: &str) -> Result<Record, FieldError> {
        Self::parse_sharing(text, &mut SharedProvenance::default())
    }

    /// [`Record::parse`] for the lines of one file: a provenance equal to the previous line's
    /// is held once.
    pub fn parse_sharing(text: &str, shared: &mut SharedProvenance) -> Result<Record, FieldError> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| field_error("", format!("not JSON: {e}")))?;
        let Value::Object(line) = v else {
            return Err(field_error("", "not a JSON object"));
        };
        let id = match line.get("id") {
            Some(Value::String(s)) => s.clone(),
            // An item's integer id is written back as an integer.
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => return Err(field_error("id", "missing or not a string or integer")),
        };
        let input = match line.get("input_sha256") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(field_error("input_sha256", "not a string")),
        };
        let provenance = line
            .get("provenance")
            .ok_or_else(|| field_error("provenance", "missing: not a hyoka results file"))?;
        let provenance = match &shared.last {
            Some((text, parsed)) if text == provenance => parsed.clone(),
            _ => {
                let parsed: Arc<Provenance> = Arc::new(
                    serde_json::from_value(provenance.clone())
                        .map_err(|e| field_error("provenance", e.to_string()))?,
                );
                shared.last = Some((provenance.clone(), parsed.clone()));
                parsed
            }
        };
        let body = match line.get("error") {
            Some(e) => Err(e
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| e.to_string())),
            None => Ok(match provenance.task {
                Task::Judge => Body::Judge(JudgeRecord::read(&line)?),
                Task::BertScore => Body::BertScore(Prf::read(&line)?),
                Task::Compare => Body::Compare(CompareRecord::read(&line)?),
                Task::Translate => Body::Translation(read_translation(&line)?),
                Task::Likelihood => Body::Likelihood(read_likelihood(&line)?),
            }),
        };
        let not_applicable = match line.get("not_applicable") {
            None => false,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| field_error("not_applicable", "not true or false"))?,
        };
        Ok(Record {
            id,
            input,
            body,
            not_applicable,
            provenance,
        })
    }
}

/// A results line (no newline): the item, the hash of what was read of it, its scores or error,
/// and its run's provenance as JSON (serialised once per run by the runner).
pub fn line(
    id: &Value,
    input: Option<&str>,
    body: &Result<Body, String>,
    provenance: &Value,
) -> String {
    write_line(id, input, body, false, provenance)
}

/// The line of an item that has nothing to score by definition (`runner::Outcome::NotApplicable`:
/// BERTScore of an opening turn against the last turn): an error line marked
/// `"not_applicable": true`, which a rerun keeps while the item is unchanged.
pub fn not_applicable_line(
    id: &Value,
    input: Option<&str>,
    why: &str,
    provenance: &Value,
) -> String {
    write_line(id, input, &Err(why.to_string()), true, provenance)
}

fn write_line(
    id: &Value,
    input: Option<&str>,
    body: &Result<Body, String>,
    not_applicable: bool,
    provenance: &Value,
) -> String {
    let mut line = Map::new();
    line.insert("id".into(), id.clone());
    if let Some(input) = input {
        line.insert("input_sha256".into(), json!(input));
    }
    match body {
        Err(message) => {
            line.insert("error".into(), json!(message));
            if not_applicable {
                line.insert("not_applicable".into(), json!(true));
            }
        }
        Ok(Body::Judge(j)) => j.write_fields(&mut line),
        Ok(Body::BertScore(prf)) => {
            line.insert("bertscore".into(), prf.to_json());
        }
        Ok(Body::Translation(t)) => {
            line.insert("translation".into(), t.to_json());
        }
        Ok(Body::Likelihood(l)) => {
            line.insert("likelihood".into(), l.to_json());
            line.insert("dropped_turns".into(), json!(l.dropped_turns));
        }
        Ok(Body::Compare(c)) => c.write_fields(&mut line),
    }
    line.insert("provenance".into(), provenance.clone());
    Value::Object(line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::provenance::test_provenance as provenance;
    use crate::results::scores::AspectScore;

    #[test]
    fn lines_read_back_as_written() {
        let score = AspectScore::from_distribution(&[1, 2, 3], &[0.2, 0.5, 0.3], 0.01);
        let records = [
            Record {
                id: "a".into(),
                input: Some("ab".into()),
                body: Ok(Body::Judge(JudgeRecord {
                    scores: vec![("x".into(), score.clone()), ("y".into(), score.clone())],
                    answer: Some(Answer {
                        reason: "理由".into(),
                        text: "{}".into(),
                    }),
                    judges: Vec::new(),
                    dropped_turns: 2,
                    truncated: true,
                })),
                not_applicable: false,
                provenance: std::sync::Arc::new(provenance(Task::Judge)),
            },
            Record {
                id: "b".into(),
                input: None,
                body: Ok(Body::Judge(JudgeRecord {
                    scores: vec![("x".into(), score.clone())],
                    answer: None,
                    judges: vec![JudgeAnswer {
                        model: "m".into(),
                        scores: vec![("x".into(), score)],
                        answer: None,
                    }],
                    dropped_turns: 0,
                    truncated: false,
                })),
                not_applicable: false,
                provenance: std::sync::Arc::new(provenance(Task::Judge)),
            },
            Record {
                id: "c".into(),
                input: None,
                body: Ok(Body::BertScore(Prf {
                    p: 0.5,
                    r: 0.25,
                    f: 1.0 / 3.0,
                })),
                not_applicable: false,
                provenance: std::sync::Arc::new(provenance(Task::BertScore)),
            },
            Record {
                id: "d".into(),
                input: None,
                body: Err("model failed".into()),
                not_applicable: false,
                provenance: std::sync::Arc::new(provenance(Task::BertScore)),
            },
            Record {
                id: "e".into(),
                input: None,
                body: Err("no context turn".into()),
                not_applicable: true,
                provenance: std::sync::Arc::new(provenance(Task::BertScore)),
            },
        ];
        for r in &records {
            assert_eq!(&Record::parse(&r.to_line()).expect("parses"), r);
        }
    }

    #[test]
    fn a_bad_field_is_named() {
        let line = r#"{"id":"a","scores":{"x":{"score":1,"expectd":1.0,"distribution":{},"off_scale":0}},"provenance":{"hyoka":"t","task":"judge","models":[],"dtype":"f32","device":"cpu"}}"#;
        let e = Record::parse(line).expect_err("no expected");
        assert_eq!(e.field, "scores.x.expected");
        let line = r#"{"id":"a","bertscore":{"P":1,"R":1},"provenance":{"hyoka":"t","task":"bertscore","models":[],"dtype":"f32","device":"cpu"}}"#;
        assert_eq!(Record::parse(line).expect_err("no F").field, "bertscore.F");
        // A score off the aspect's scale (0–1), an expected score beyond it, a probability
        // above 1: each named down to its field.
        for (scores, field) in [
            (
                r#"{"score":7,"expected":0.5,"distribution":{"0":0.5,"1":0.5},"off_scale":0}"#,
                "scores.x.score",
            ),
            (
                r#"{"score":1,"expected":1.5,"distribution":{"0":0.5,"1":0.5},"off_scale":0}"#,
                "scores.x.expected",
            ),
            (
                r#"{"score":1,"expected":0.5,"distribution":{"0":-0.5,"1":1.5},"off_scale":0}"#,
                "scores.x.distribution",
            ),
        ] {
            let line = format!(
                r#"{{"id":"a","scores":{{"x":{scores}}},"provenance":{{"hyoka":"t","task":"judge","models":[],"dtype":"f32","device":"cpu"}}}}"#
            );
            assert_eq!(Record::parse(&line).expect_err(field).field, field);
        }
        let line = r#"{"id":"a","provenance":{"hyoka":"t","task":"rouge","models":[],"dtype":"f32","device":"cpu"}}"#;
        assert_eq!(Record::parse(line).expect_err("task").field, "provenance");
    }
}
