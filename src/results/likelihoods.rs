//! The bodies of likelihood scorers' lines (`likelihood`: FED, GPTScore) and of a translation
//! store's lines (`translation`).

use super::line_fields::{FieldError, field_error};
use serde_json::{Map, Value, json};

/// One distinct text translated (`hyoka translate`'s store: a line per text, not per item).
#[derive(Clone, Debug, PartialEq)]
pub struct TranslationRecord {
    pub source: String,
    pub text: String,
    /// Tokens the model wrote.
    pub tokens: usize,
    /// Whether the model ended it (false: cut at its limit, kept because the run was told to).
    pub finished: bool,
}

/// A likelihood scorer's numbers for one item.
#[derive(Clone, Debug, PartialEq)]
pub struct LikelihoodRecord {
    /// Per aspect key, in the scorer's order.
    pub scores: Vec<(String, AspectLikelihood)>,
    pub dropped_turns: usize,
}

/// One aspect: its score and what it is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct AspectLikelihood {
    /// FED: mean of `positive` minus mean of `negative` (an empty list counts 0); GPTScore:
    /// the response's mean log-probability per token.
    pub score: f64,
    /// Per positive follow-up (GPTScore: the response), its mean log-probability per token.
    pub positive: Vec<f64>,
    pub negative: Vec<f64>,
    /// Tokens scored (all follow-ups', or the response's).
    pub tokens: usize,
}

impl TranslationRecord {
    pub fn to_json(&self) -> Value {
        json!({"source": self.source, "text": self.text, "tokens": self.tokens, "finished": self.finished})
    }
}

impl LikelihoodRecord {
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.scores
                .iter()
                .map(|(k, a)| {
                    let mut v = Map::new();
                    v.insert("score".into(), json!(a.score));
                    v.insert("positive".into(), json!(a.positive));
                    if !a.negative.is_empty() {
                        v.insert("negative".into(), json!(a.negative));
                    }
                    v.insert("tokens".into(), json!(a.tokens));
                    (k.clone(), Value::Object(v))
                })
                .collect(),
        )
    }
}

/// A translation line's `translation`: {source, text, tokens}.
pub fn read_translation(line: &Map<String, Value>) -> Result<TranslationRecord, FieldError> {
    let t = line
        .get("translation")
        .and_then(Value::as_object)
        .ok_or_else(|| field_error("translation", "missing or not an object"))?;
    let text = |key: &str| {
        t.get(key)
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| field_error(format!("translation.{key}"), "missing or not a string"))
    };
    let tokens = t
        .get("tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| field_error("translation.tokens", "missing or not a count"))?;
    let finished = match t.get("finished") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(field_error("translation.finished", "not true or false")),
    };
    Ok(TranslationRecord {
        source: text("source")?,
        text: text("text")?,
        tokens: tokens as usize,
        finished,
    })
}

/// A likelihood line's `likelihood` ({aspect: {score, positive, negative, tokens}}) and
/// `dropped_turns`.
pub fn read_likelihood(line: &Map<String, Value>) -> Result<LikelihoodRecord, FieldError> {
    let l = line
        .get("likelihood")
        .and_then(Value::as_object)
        .ok_or_else(|| field_error("likelihood", "missing or not an object"))?;
    let mut scores = Vec::with_capacity(l.len());
    for (key, a) in l {
        let at = |f: &str| format!("likelihood.{key}.{f}");
        let a = a
            .as_object()
            .ok_or_else(|| field_error(format!("likelihood.{key}"), "not an object"))?;
        let score = a
            .get("score")
            .and_then(Value::as_f64)
            .ok_or_else(|| field_error(at("score"), "missing or not a number"))?;
        let list = |f: &str| -> Result<Vec<f64>, FieldError> {
            match a.get(f) {
                None => Ok(Vec::new()),
                Some(Value::Array(v)) => v
                    .iter()
                    .map(|x| x.as_f64().ok_or_else(|| field_error(at(f), "not a number")))
                    .collect(),
                Some(_) => Err(field_error(at(f), "not a list of numbers")),
            }
        };
        let tokens = a
            .get("tokens")
            .and_then(Value::as_u64)
            .ok_or_else(|| field_error(at("tokens"), "missing or not a count"))?;
        scores.push((
            key.clone(),
            AspectLikelihood {
                score,
                positive: list("positive")?,
                negative: list("negative")?,
                tokens: tokens as usize,
            },
        ));
    }
    let dropped_turns = line
        .get("dropped_turns")
        .and_then(Value::as_u64)
        .ok_or_else(|| field_error("dropped_turns", "missing or not a count"))?;
    Ok(LikelihoodRecord {
        scores,
        dropped_turns: dropped_turns as usize,
    })
}
