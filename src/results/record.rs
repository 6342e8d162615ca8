//! One results line, typed: an item's scores (or why it has none) and the run that wrote it.
//!
//! The JSON layout is the one users read: `{"id", "scores"|"bertscore"|"error", …,
//! "provenance"}`. Lines are read by the provenance's task, field by field, so a bad line is
//! named down to its field.

pub use super::likelihoods::{AspectLikelihood, LikelihoodRecord, TranslationRecord};
use super::likelihoods::{read_likelihood, read_translation};
pub use super::line_fields::FieldError;
use super::line_fields::field_error;
use super::prf::Prf;
use super::provenance::{Provenance, SharedProvenance, Task};
use super::scores::AspectScore;
use super::verdicts::{PairVerdict, VerdictProbs};
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

/// A pairwise judge's (or the mean of several judges') verdicts for one pair.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareRecord {
    pub context_id: String,
    /// The pair's systems (`data::Pair`).
    pub first: String,
    pub second: String,
    /// Per aspect key, in rubric order; with several judges, their mean.
    pub verdicts: Vec<(String, PairVerdict)>,
    /// json mode, one judge: what it wrote with the first system's response shown first, then
    /// with the second's.
    pub answers: Vec<Answer>,
    /// Several judges: each one's own verdicts.
    pub judges: Vec<(String, Vec<(String, PairVerdict)>)>,
    pub dropped_turns: usize,
    pub truncated: bool,
}

/// A judge's (or the mean of several judges') scores for one item.
#[derive(Clone, Debug, PartialEq)]
pub struct JudgeRecord {
    /// Per aspect key, in rubric order; with several judges, their mean distribution.
    pub scores: Vec<(String, AspectScore)>,
    /// json mode, one judge: the reason and the whole object as written.
    pub answer: Option<Answer>,
    /// Several judges: each one's own scores and answer.
    pub judges: Vec<JudgeAnswer>,
    /// Context turns left out, and whether they went for the prompt to fit.
    pub dropped_turns: usize,
    pub truncated: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub reason: String,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct JudgeAnswer {
    pub model: String,
    pub scores: Vec<(String, AspectScore)>,
    pub answer: Option<Answer>,
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
                Task::Judge => Body::Judge(read_judge(&line)?),
                Task::BertScore => Body::BertScore(read_prf(&line)?),
                Task::Compare => Body::Compare(read_compare(&line)?),
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
        Ok(Body::Judge(j)) => {
            line.insert("scores".into(), scores_json(&j.scores));
            add_answer(&mut line, j.answer.as_ref());
            if !j.judges.is_empty() {
                let judges = j
                    .judges
                    .iter()
                    .map(|a| {
                        let mut judge = Map::new();
                        judge.insert("model".into(), json!(a.model));
                        judge.insert("scores".into(), scores_json(&a.scores));
                        add_answer(&mut judge, a.answer.as_ref());
                        Value::Object(judge)
                    })
                    .collect();
                line.insert("judges".into(), Value::Array(judges));
            }
            line.insert("dropped_turns".into(), json!(j.dropped_turns));
            line.insert("truncated".into(), json!(j.truncated));
        }
        Ok(Body::BertScore(prf)) => {
            line.insert(
                "bertscore".into(),
                json!({"P": finite(prf.p), "R": finite(prf.r), "F": finite(prf.f)}),
            );
        }
        Ok(Body::Translation(t)) => {
            line.insert("translation".into(), t.to_json());
        }
        Ok(Body::Likelihood(l)) => {
            line.insert("likelihood".into(), l.to_json());
            line.insert("dropped_turns".into(), json!(l.dropped_turns));
        }
        Ok(Body::Compare(c)) => {
            line.insert(
                "pair".into(),
                json!({"context_id": c.context_id, "first": c.first, "second": c.second}),
            );
            line.insert("verdicts".into(), verdicts_json(&c.verdicts));
            if !c.answers.is_empty() {
                let answers = c
                    .answers
                    .iter()
                    .map(|a| json!({"reason": a.reason, "answer": a.text}))
                    .collect();
                line.insert("answers".into(), Value::Array(answers));
            }
            if !c.judges.is_empty() {
                let judges = c
                    .judges
                    .iter()
                    .map(|(model, v)| json!({"model": model, "verdicts": verdicts_json(v)}))
                    .collect();
                line.insert("judges".into(), Value::Array(judges));
            }
            line.insert("dropped_turns".into(), json!(c.dropped_turns));
            line.insert("truncated".into(), json!(c.truncated));
        }
    }
    line.insert("provenance".into(), provenance.clone());
    Value::Object(line).to_string()
}

/// Non-finite numbers cannot be written as JSON numbers; they are refused before (baselines),
/// so this only keeps a line valid JSON.
fn finite(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

/// Per aspect: the order-averaged preference and what it says, then each order's own.
fn verdicts_json(verdicts: &[(String, PairVerdict)]) -> Value {
    Value::Object(
        verdicts
            .iter()
            .map(|(k, v)| {
                let pref = v.preference();
                let value = json!({
                    "first": pref.first,
                    "second": pref.second,
                    "tie": pref.tie,
                    "verdict": pref.verdict(),
                    "consistent": v.consistent(),
                    "position_bias": v.position_bias(),
                    "first_shown_first": v.first_shown_first,
                    "second_shown_first": v.second_shown_first,
                });
                (k.clone(), value)
            })
            .collect(),
    )
}

fn read_verdicts(v: Option<&Value>, at: &str) -> Result<Vec<(String, PairVerdict)>, FieldError> {
    let verdicts = v
        .and_then(Value::as_object)
        .ok_or_else(|| field_error(at, "missing or not an object"))?;
    let order = |v: &Value, at: String| -> Result<VerdictProbs, FieldError> {
        let probs: VerdictProbs = v
            .as_object()
            .ok_or_else(|| field_error(&at, "missing or not an object"))
            .and_then(|_| {
                serde_json::from_value(v.clone()).map_err(|e| field_error(&at, e.to_string()))
            })?;
        for (key, p) in [
            ("first", probs.first),
            ("second", probs.second),
            ("tie", probs.tie),
            ("off_scale", probs.off_scale),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(field_error(
                    format!("{at}.{key}"),
                    format!("not a probability: {p}"),
                ));
            }
        }
        Ok(probs)
    };
    verdicts
        .iter()
        .map(|(aspect, v)| {
            let at = format!("{at}.{aspect}");
            let get = |key: &str| order(v.get(key).unwrap_or(&Value::Null), format!("{at}.{key}"));
            Ok((
                aspect.clone(),
                PairVerdict {
                    first_shown_first: get("first_shown_first")?,
                    second_shown_first: get("second_shown_first")?,
                },
            ))
        })
        .collect()
}

fn read_compare(line: &Map<String, Value>) -> Result<CompareRecord, FieldError> {
    let pair = line
        .get("pair")
        .and_then(Value::as_object)
        .ok_or_else(|| field_error("pair", "missing or not an object"))?;
    let name = |key: &str| {
        pair.get(key)
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| field_error(format!("pair.{key}"), "missing or not a string"))
    };
    let answers = match line.get("answers") {
        None => Vec::new(),
        Some(Value::Array(a)) if a.len() == 2 => a
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let a = a
                    .as_object()
                    .ok_or_else(|| field_error(format!("answers[{i}]"), "not an object"))?;
                read_answer(a, &format!("answers[{i}]."))?.ok_or_else(|| {
                    field_error(format!("answers[{i}]"), "needs `reason` and `answer`")
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(field_error(
                "answers",
                "not a list of the two orders' answers",
            ));
        }
    };
    let judges = match line.get("judges") {
        None => Vec::new(),
        Some(Value::Array(js)) => js
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let at = format!("judges[{i}]");
                let model = j
                    .get("model")
                    .and_then(Value::as_str)
                    .ok_or_else(|| field_error(format!("{at}.model"), "missing"))?;
                Ok((
                    model.to_string(),
                    read_verdicts(j.get("verdicts"), &format!("{at}.verdicts"))?,
                ))
            })
            .collect::<Result<_, FieldError>>()?,
        Some(_) => return Err(field_error("judges", "not an array")),
    };
    let (dropped_turns, truncated) = read_fit(line)?;
    Ok(CompareRecord {
        context_id: name("context_id")?,
        first: name("first")?,
        second: name("second")?,
        verdicts: read_verdicts(line.get("verdicts"), "verdicts")?,
        answers,
        judges,
        dropped_turns,
        truncated,
    })
}

fn scores_json(scores: &[(String, AspectScore)]) -> Value {
    Value::Object(
        scores
            .iter()
            .map(|(k, s)| {
                (
                    k.clone(),
                    serde_json::to_value(s).expect("scores serialise"),
                )
            })
            .collect(),
    )
}

fn add_answer(line: &mut Map<String, Value>, answer: Option<&Answer>) {
    if let Some(a) = answer {
        line.insert("reason".into(), json!(a.reason));
        line.insert("answer".into(), json!(a.text));
    }
}

fn read_scores(v: Option<&Value>, at: &str) -> Result<Vec<(String, AspectScore)>, FieldError> {
    let scores = v
        .and_then(Value::as_object)
        .ok_or_else(|| field_error(at, "missing or not an object"))?;
    scores
        .iter()
        .map(|(aspect, s)| {
            for key in ["score", "expected"] {
                if !s.get(key).is_some_and(Value::is_number) {
                    return Err(field_error(
                        format!("{at}.{aspect}.{key}"),
                        "missing or not a number",
                    ));
                }
            }
            let score: AspectScore = serde_json::from_value(s.clone())
                .map_err(|e| field_error(format!("{at}.{aspect}"), e.to_string()))?;
            check_scale(&score)
                .map_err(|(key, message)| field_error(format!("{at}.{aspect}.{key}"), message))?;
            Ok((aspect.clone(), score))
        })
        .collect()
}

/// An aspect's numbers hold together on its scale (the distribution's keys): each probability
/// in [0, 1], the score one of the scale's, the expected score within it.
fn check_scale(score: &AspectScore) -> Result<(), (&'static str, String)> {
    let mut scale = Vec::with_capacity(score.distribution.len());
    for (key, p) in &score.distribution {
        let valid: i64 = key.parse().map_err(|_| {
            (
                "distribution",
                format!("key {key:?} is not an integer score"),
            )
        })?;
        match p.as_f64() {
            Some(p) if (0.0..=1.0).contains(&p) => {}
            _ => {
                return Err((
                    "distribution",
                    format!("the probability of {key} is not a number in [0, 1]: {p}"),
                ));
            }
        }
        scale.push(valid);
    }
    let (Some(&lo), Some(&hi)) = (scale.iter().min(), scale.iter().max()) else {
        return Err((
            "distribution",
            "empty: an aspect has at least one score".into(),
        ));
    };
    if !scale.contains(&score.score) {
        return Err((
            "score",
            format!(
                "{} is not on the aspect's scale ({})",
                score.score,
                scale
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    // Rounding of Σ score × p can leave the scale's ends by a few ulps, never more.
    let slack = 1e-9 * (hi - lo).max(1) as f64;
    if !(score.expected >= lo as f64 - slack && score.expected <= hi as f64 + slack) {
        return Err((
            "expected",
            format!(
                "{} is outside the aspect's scale [{lo}, {hi}]",
                score.expected
            ),
        ));
    }
    Ok(())
}

fn read_answer(v: &Map<String, Value>, at: &str) -> Result<Option<Answer>, FieldError> {
    match (v.get("reason"), v.get("answer")) {
        (None, None) => Ok(None),
        (Some(Value::String(reason)), Some(Value::String(text))) => Ok(Some(Answer {
            reason: reason.clone(),
            text: text.clone(),
        })),
        _ => Err(field_error(
            format!("{at}reason"),
            "`reason` and `answer` must both be strings",
        )),
    }
}

fn read_judge(line: &Map<String, Value>) -> Result<JudgeRecord, FieldError> {
    let judges = match line.get("judges") {
        None => Vec::new(),
        Some(Value::Array(js)) => js
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let at = format!("judges[{i}]");
                let j = j
                    .as_object()
                    .ok_or_else(|| field_error(&at, "not an object"))?;
                Ok(JudgeAnswer {
                    model: j
                        .get("model")
                        .and_then(Value::as_str)
                        .ok_or_else(|| field_error(format!("{at}.model"), "missing"))?
                        .to_string(),
                    scores: read_scores(j.get("scores"), &format!("{at}.scores"))?,
                    answer: read_answer(j, &format!("{at}."))?,
                })
            })
            .collect::<Result<_, FieldError>>()?,
        Some(_) => return Err(field_error("judges", "not an array")),
    };
    let (dropped_turns, truncated) = read_fit(line)?;
    Ok(JudgeRecord {
        scores: read_scores(line.get("scores"), "scores")?,
        answer: read_answer(line, "")?,
        judges,
        dropped_turns,
        truncated,
    })
}

/// `dropped_turns` and `truncated` (0 and false when absent).
fn read_fit(line: &Map<String, Value>) -> Result<(usize, bool), FieldError> {
    let dropped_turns = match line.get("dropped_turns") {
        None => 0,
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| field_error("dropped_turns", "not a count"))?,
    };
    let truncated = match line.get("truncated") {
        None => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| field_error("truncated", "not true or false"))?,
    };
    Ok((dropped_turns, truncated))
}

fn read_prf(line: &Map<String, Value>) -> Result<Prf, FieldError> {
    let get = |key: &str| {
        line.get("bertscore")
            .and_then(|b| b.get(key))
            .and_then(Value::as_f64)
            .ok_or_else(|| field_error(format!("bertscore.{key}"), "missing or not a number"))
    };
    Ok(Prf {
        p: get("P")?,
        r: get("R")?,
        f: get("F")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::provenance::test_provenance as provenance;

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
