//! Python's string methods for templates (minijinja-contrib's pycompat), with the size checks
//! the template engine makes for its own operations: a `replace` or `join` whose result would
//! pass the bound on one built value is refused before it is allocated.

use minijinja::value::Value;
use minijinja::{Error, ErrorKind, State};

/// The longest string one template operation may build: the engine's own bound, applied to
/// the methods added here.
pub const TEMPLATE_VALUE_BYTES: usize = minijinja::MAX_BUILT_LEN;
/// The longest JSON indent a template may ask for.
pub const MAX_JSON_INDENT: usize = 64;

/// pycompat's method callback behind the size checks.
pub fn python_methods(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(text) = value.as_str() {
        let built = match method {
            "replace" => replaced_len(text, args),
            "join" => joined_len(text, args),
            _ => Some(0),
        };
        if built.is_none_or(|len| len > TEMPLATE_VALUE_BYTES) {
            return Err(too_large(method));
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// The error of a method whose result would pass the bound, of the kind of running out of fuel.
pub fn too_large(what: &str) -> Error {
    Error::new(
        ErrorKind::OutOfFuel,
        format!(
            "str.{what} would build more than the template limit of {TEMPLATE_VALUE_BYTES} bytes"
        ),
    )
}

/// The length of `text.replace(old, new[, count])` (None on overflow); 0 when the arguments
/// are not strings, which pycompat then refuses.
fn replaced_len(text: &str, args: &[Value]) -> Option<usize> {
    let (Some(old), Some(new)) = (
        args.first().and_then(Value::as_str),
        args.get(1).and_then(Value::as_str),
    ) else {
        return Some(0);
    };
    if new.len() <= old.len() {
        return Some(text.len());
    }
    let mut count = if old.is_empty() {
        text.chars().count() + 1
    } else {
        text.matches(old).count()
    };
    // A non-negative count limits the replacements (Python's third argument).
    if let Some(limit) = args.get(2).and_then(|v| u64::try_from(v.clone()).ok()) {
        count = count.min(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    count
        .checked_mul(new.len() - old.len())?
        .checked_add(text.len())
}

/// The length of `sep.join(items)` (None on overflow or when it passes the bound part way).
fn joined_len(sep: &str, args: &[Value]) -> Option<usize> {
    let Some(items) = args.first() else {
        return Some(0);
    };
    let Ok(iter) = items.try_iter() else {
        return Some(0);
    };
    let mut len = 0usize;
    for (index, item) in iter.enumerate() {
        if index > 0 {
            len = len.checked_add(sep.len())?;
        }
        len = len.checked_add(match item.as_str() {
            Some(s) => s.len(),
            None => item.to_string().len(),
        })?;
        if len > TEMPLATE_VALUE_BYTES {
            return None;
        }
    }
    Some(len)
}
