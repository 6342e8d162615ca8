//! Human preferences given per pair (a preferences JSONL file): for a context and two systems,
//! each rater's verdict per aspect key. Read strictly, each bad line named by file, line and
//! field; a pair given with its systems the other way round is turned to the judged order.

use super::super::MetaError;
use crate::results::verdicts::Verdict;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One line: the raters' verdicts on one pair, per human key.
#[derive(Clone, Debug, PartialEq)]
pub struct PairPreference {
    pub context_id: String,
    pub first: String,
    pub second: String,
    pub votes: BTreeMap<String, Vec<Verdict>>,
}

/// A pair: (context, first system, second system).
type PairKey = (String, String, String);
/// Per human key, the raters' verdicts.
type Votes = BTreeMap<String, Vec<Verdict>>;

/// Preferences by (context, first system, second system).
#[derive(Clone, Debug, Default)]
pub struct Preferences {
    /// Per pair, its line in the file and its votes.
    by_pair: HashMap<PairKey, (usize, Votes)>,
}

impl Preferences {
    /// Every line of a preferences file.
    pub fn read(path: &Path) -> Result<Preferences, MetaError> {
        let bytes = std::fs::read(path).map_err(|source| MetaError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut lines: Vec<(usize, &str)> = Vec::new();
        for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
            let text = std::str::from_utf8(line).map_err(|e| {
                MetaError::Input(format!(
                    "{}:{}: not valid UTF-8 (byte {} of the line): JSON Lines files are UTF-8",
                    path.display(),
                    n + 1,
                    e.valid_up_to() + 1
                ))
            })?;
            if !text.trim().is_empty() {
                lines.push((n + 1, text));
            }
        }
        if lines.is_empty() {
            return Err(MetaError::Input(format!(
                "{}: no preferences in it (an empty file): give one line per judged pair, or leave the file out to compare with the items' ratings",
                path.display()
            )));
        }
        Preferences::parse(&lines, path)
    }

    /// Lines (with their numbers) read as `path`'s.
    pub fn parse(lines: &[(usize, &str)], path: &Path) -> Result<Preferences, MetaError> {
        let mut out = Preferences::default();
        for &(number, text) in lines {
            let bad = |field: &str, message: String| MetaError::Invalid {
                path: path.to_path_buf(),
                line: number,
                field: field.into(),
                message,
            };
            let p = parse_line(text).map_err(|(f, m)| bad(&f, m))?;
            let key = (p.context_id.clone(), p.first.clone(), p.second.clone());
            let swapped = (p.context_id.clone(), p.second.clone(), p.first.clone());
            if out.by_pair.contains_key(&key) || out.by_pair.contains_key(&swapped) {
                return Err(bad(
                    "first",
                    format!(
                        "the pair {} / {} of context {:?} is given twice",
                        p.first, p.second, p.context_id
                    ),
                ));
            }
            out.by_pair.insert(key, (number, p.votes));
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.by_pair.is_empty()
    }

    /// Whether any pair has votes on `key`.
    pub fn has_key(&self, key: &str) -> bool {
        self.by_pair.values().any(|(_, v)| v.contains_key(key))
    }

    /// Every human key some pair has votes on, sorted.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = (self.by_pair.values())
            .flat_map(|(_, v)| v.keys().map(String::as_str))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Each pair as (line, context, first, second), in the file's order.
    pub fn pairs(&self) -> Vec<(usize, &str, &str, &str)> {
        let mut pairs: Vec<_> = (self.by_pair.iter())
            .map(|((c, a, b), (line, _))| (*line, c.as_str(), a.as_str(), b.as_str()))
            .collect();
        pairs.sort_unstable();
        pairs
    }

    /// The votes on `key` for the pair (context, first, second) in this order of its systems.
    pub fn votes(&self, context: &str, first: &str, second: &str, key: &str) -> Vec<Verdict> {
        let get = |a: &str, b: &str| {
            self.by_pair
                .get(&(context.to_string(), a.to_string(), b.to_string()))
                .and_then(|(_, v)| v.get(key))
        };
        if let Some(v) = get(first, second) {
            return v.clone();
        }
        get(second, first)
            .map(|v| v.iter().map(|x| swap(*x)).collect())
            .unwrap_or_default()
    }
}

fn swap(v: Verdict) -> Verdict {
    match v {
        Verdict::First => Verdict::Second,
        Verdict::Second => Verdict::First,
        Verdict::Tie => Verdict::Tie,
    }
}

const FIELDS: [&str; 4] = ["context_id", "first", "second", "human"];

fn parse_line(text: &str) -> Result<PairPreference, (String, String)> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| (String::new(), format!("not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err((String::new(), "expected a JSON object".into()));
    };
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err((
            unknown.clone(),
            format!("unknown field (expected one of: {})", FIELDS.join(", ")),
        ));
    }
    let name = |key: &str| match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err((key.to_string(), "missing or not a non-empty string".into())),
    };
    let (context_id, first, second) = (name("context_id")?, name("first")?, name("second")?);
    if first == second {
        return Err(("second".into(), "the same system as first".into()));
    }
    let Some(Value::Object(human)) = obj.get("human") else {
        return Err((
            "human".into(),
            "missing or not an object of verdicts per aspect".into(),
        ));
    };
    Ok(PairPreference {
        context_id,
        first,
        second,
        votes: votes(human)?,
    })
}

fn votes(human: &Map<String, Value>) -> Result<BTreeMap<String, Vec<Verdict>>, (String, String)> {
    let verdict = |v: &Value, field: String| match v.as_str() {
        Some("first") => Ok(Verdict::First),
        Some("second") => Ok(Verdict::Second),
        Some("tie") => Ok(Verdict::Tie),
        _ => Err((
            field,
            format!("{v}: a verdict is \"first\", \"second\" or \"tie\""),
        )),
    };
    human
        .iter()
        .map(|(key, v)| {
            let field = format!("human.{key}");
            let list = match v {
                Value::Array(vs) if !vs.is_empty() => vs
                    .iter()
                    .enumerate()
                    .map(|(i, x)| verdict(x, format!("{field}[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?,
                Value::Array(_) => return Err((field, "an empty list".into())),
                single => vec![verdict(single, field)?],
            };
            Ok((key.clone(), list))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_strictly_and_pairs_either_way_round() {
        let path = Path::new("prefs.jsonl");
        let good = [
            (
                1,
                r#"{"context_id": "c1", "first": "a", "second": "b", "human": {"overall": ["first", "tie"]}}"#,
            ),
            (
                2,
                r#"{"context_id": "c2", "first": "b", "second": "a", "human": {"overall": "first"}}"#,
            ),
        ];
        let p = Preferences::parse(&good, path).unwrap();
        assert_eq!(
            p.votes("c1", "a", "b", "overall"),
            [Verdict::First, Verdict::Tie]
        );
        assert_eq!(
            p.votes("c1", "b", "a", "overall"),
            [Verdict::Second, Verdict::Tie]
        );
        assert_eq!(p.votes("c2", "a", "b", "overall"), [Verdict::Second]);
        assert!(p.votes("c2", "a", "b", "fluency").is_empty());
        assert!(p.has_key("overall") && !p.has_key("fluency"));
        for (line, field) in [
            (
                r#"{"context_id": "c", "first": "a", "second": "b", "human": {"x": "win"}}"#,
                "human.x",
            ),
            (
                r#"{"context_id": "c", "first": "a", "second": "a", "human": {}}"#,
                "second",
            ),
            (
                r#"{"context_id": "c", "first": "a", "second": "b", "rater": 1, "human": {}}"#,
                "rater",
            ),
            (
                r#"{"first": "a", "second": "b", "human": {}}"#,
                "context_id",
            ),
        ] {
            let e = Preferences::parse(&[(3, line)], path).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("prefs.jsonl:3: {field}:")),
                "{e}"
            );
        }
        let twice = [
            good[0],
            (
                5,
                r#"{"context_id": "c1", "first": "b", "second": "a", "human": {"x": "tie"}}"#,
            ),
        ];
        let e = Preferences::parse(&twice, path).unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
    }
}
