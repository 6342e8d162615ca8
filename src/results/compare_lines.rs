//! A pairwise judge's line: the pair, each aspect's verdicts in both orders, the json answers,
//! each judge of a panel, and how much context went for the prompt to fit.

use super::judge_lines::{Answer, read_answer};
use super::line_fields::{FieldError, field_error, read_fit, write_fit};
use super::verdicts::{PairVerdict, VerdictProbs};
use serde_json::{Map, Value, json};

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

impl CompareRecord {
    /// Its fields in a results line, after the id.
    pub(super) fn write_fields(&self, line: &mut Map<String, Value>) {
        line.insert(
            "pair".into(),
            json!({"context_id": self.context_id, "first": self.first, "second": self.second}),
        );
        line.insert("verdicts".into(), verdicts_json(&self.verdicts));
        if !self.answers.is_empty() {
            let answers = self
                .answers
                .iter()
                .map(|a| json!({"reason": a.reason, "answer": a.text}))
                .collect();
            line.insert("answers".into(), Value::Array(answers));
        }
        if !self.judges.is_empty() {
            let judges = self
                .judges
                .iter()
                .map(|(model, v)| json!({"model": model, "verdicts": verdicts_json(v)}))
                .collect();
            line.insert("judges".into(), Value::Array(judges));
        }
        write_fit(line, self.dropped_turns, self.truncated);
    }

    /// Its fields from a results line.
    pub(super) fn read(line: &Map<String, Value>) -> Result<CompareRecord, FieldError> {
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
