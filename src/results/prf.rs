//! BERTScore's result: precision, recall and F1, and its field in a results line.

use super::line_fields::{FieldError, field_error};
use serde_json::{Map, Value, json};

/// Precision, recall and F1 of one candidate against its reference(s).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Prf {
    #[serde(rename = "P")]
    pub p: f64,
    #[serde(rename = "R")]
    pub r: f64,
    #[serde(rename = "F")]
    pub f: f64,
}

impl Prf {
    pub(crate) fn from_pr(p: f32, r: f32) -> Self {
        // In f32 like bert_score; 0/0 (an empty side) is 0.
        let f = 2.0 * p * r / (p + r);
        Prf {
            p: p as f64,
            r: r as f64,
            f: if f.is_nan() { 0.0 } else { f as f64 },
        }
    }

    pub(crate) fn max(self, o: Prf) -> Prf {
        Prf {
            p: self.p.max(o.p),
            r: self.r.max(o.r),
            f: self.f.max(o.f),
        }
    }

    /// (x − b) / (1 − b) per column.
    pub fn rescale(self, b: &Prf) -> Prf {
        Prf {
            p: (self.p - b.p) / (1.0 - b.p),
            r: (self.r - b.r) / (1.0 - b.r),
            f: (self.f - b.f) / (1.0 - b.f),
        }
    }
}

/// The max per column over an item's references (0 when it has none).
pub fn best_of(prfs: &[Prf]) -> Prf {
    prfs.iter().copied().reduce(Prf::max).unwrap_or(Prf {
        p: 0.0,
        r: 0.0,
        f: 0.0,
    })
}

impl Prf {
    /// The `bertscore` field of a results line.
    pub(super) fn to_json(self) -> Value {
        json!({"P": finite(self.p), "R": finite(self.r), "F": finite(self.f)})
    }

    /// A results line's `bertscore` field.
    pub(super) fn read(line: &Map<String, Value>) -> Result<Prf, FieldError> {
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
}

/// Non-finite numbers cannot be written as JSON numbers; they are refused before (baselines),
/// so this only keeps a line valid JSON.
fn finite(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}
