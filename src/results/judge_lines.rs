//! A judge's line: each aspect's score, the json answer, each judge of a panel, and how much
//! context went for the prompt to fit.

use super::line_fields::{FieldError, field_error, read_fit, write_fit};
use super::scores::AspectScore;
use serde_json::{Map, Value, json};

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

impl JudgeRecord {
    /// Its fields in a results line, after the id.
    pub(super) fn write_fields(&self, line: &mut Map<String, Value>) {
        line.insert("scores".into(), scores_json(&self.scores));
        add_answer(line, self.answer.as_ref());
        if !self.judges.is_empty() {
            let judges = self
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
        write_fit(line, self.dropped_turns, self.truncated);
    }

    /// Its fields from a results line.
    pub(super) fn read(line: &Map<String, Value>) -> Result<JudgeRecord, FieldError> {
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

pub(super) fn add_answer(line: &mut Map<String, Value>, answer: Option<&Answer>) {
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

pub(super) fn read_answer(v: &Map<String, Value>, at: &str) -> Result<Option<Answer>, FieldError> {
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
