//! A results line's field at fault, for readers that name it, and fields several lines share.

use serde_json::{Map, Value, json};

/// A line that is not a record: the field at fault (empty: the whole line) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

pub(super) fn field_error(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// `dropped_turns` and `truncated` (0 and false when absent).
pub(super) fn read_fit(line: &Map<String, Value>) -> Result<(usize, bool), FieldError> {
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

/// `dropped_turns` and `truncated`, as `read_fit` reads them.
pub(super) fn write_fit(line: &mut Map<String, Value>, dropped_turns: usize, truncated: bool) {
    line.insert("dropped_turns".into(), json!(dropped_turns));
    line.insert("truncated".into(), json!(truncated));
}
