//! What whole set of items a shard was cut from: `hyoka eval --shard K/N` records it in the
//! shard's folder (shard.json: the set's item count and a digest of every item), and `hyoka
//! merge` checks that its shards were cut from one set and, together, are that set — shards of
//! two samples, or a shard with an item removed or edited since, would otherwise merge into a
//! report on a set nobody chose.

use crate::data::{DataError, Item};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The file in a shard's folder.
pub const SHARD_SET: &str = "shard.json";

/// Record in `dir` that it is shard `shard` of the set `whole`.
pub fn record(
    dir: &Path,
    shard: &str,
    whole: &(usize, String),
) -> Result<(), super::error::EvalError> {
    let doc = json!({"shard": shard, "whole_set": {"items": whole.0, "sha256": whole.1}});
    let path = dir.join(SHARD_SET);
    crate::files::write_atomic(&path, (doc.to_string() + "\n").as_bytes())
        .map_err(|e| super::error::EvalError::io(&path, e))
}

/// The set the shards say they were cut from, one set for all of them (None for no shard).
pub fn recorded(shards: &[&Path]) -> Result<Option<Recorded>, DataError> {
    let mut recorded: Vec<(PathBuf, (usize, String))> = Vec::new();
    for dir in shards {
        let path = dir.join(SHARD_SET);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(DataError::Format {
                    file: path,
                    message: "missing: this shard does not say which set of items it was cut \
                              from (run its `hyoka eval --shard` again: results are kept)"
                        .into(),
                });
            }
            Err(e) => return Err(DataError::io(&path, e)),
        };
        let bad = |message: String| DataError::Format {
            file: path.clone(),
            message,
        };
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let set = &v["whole_set"];
        let (Some(n), Some(h)) = (set["items"].as_u64(), set["sha256"].as_str()) else {
            return Err(bad("whole_set: needs items and sha256".into()));
        };
        recorded.push((path.clone(), (n as usize, h.to_string())));
    }
    let Some((first_path, first)) = recorded.first() else {
        return Ok(None);
    };
    if let Some((path, other)) = recorded.iter().find(|(_, r)| r != first) {
        return Err(DataError::Format {
            file: path.clone(),
            message: format!(
                "cut from another set of items ({} items) than {} ({} items): shards of one \
                 `eval --shard` set only (the same items, sample and seed)",
                other.0,
                first_path.display(),
                first.0
            ),
        });
    }
    Ok(Some(Recorded {
        path: first_path.clone(),
        set: first.clone(),
    }))
}

/// The whole set as a shard recorded it, and where.
pub struct Recorded {
    path: PathBuf,
    set: (usize, String),
}

impl Recorded {
    /// The shards' items together are the set they were cut from (every shard given).
    pub fn check_whole<'a>(
        &self,
        items: impl Iterator<Item = &'a [Item]>,
    ) -> Result<(), DataError> {
        let here = crate::data::select::set_digest(items.flatten());
        if here == self.set {
            return Ok(());
        }
        Err(DataError::Format {
            file: self.path.clone(),
            message: format!(
                "the shards' items are not the set they were cut from ({} items recorded, {} in \
                 the shards): an item was removed, added or edited in a shard since its run",
                self.set.0, here.0
            ),
        })
    }
}
