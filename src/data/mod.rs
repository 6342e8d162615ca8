//! Stage 1 — data: dialogue items, their strict JSONL form, importers and a summary.

pub mod dbdc3;
pub mod dslc3;
pub mod duo;
pub mod ids;
mod item;
pub mod jsonl;
pub mod lines;
pub mod pairs;
pub mod select;
mod sources;

pub use item::{HumanRating, Item, Scope, SourceTexts, Translation, Turn};
pub use jsonl::{
    ReadItems, items_text, parse_item, parse_items, read_item_at, read_items, write_items,
};
pub use pairs::{Origin, Pair, Pairing, Pairs, form_pairs};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Errors reading or writing dialogue data. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{}: {source}", file.display())]
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    /// A bad line of a JSONL file.
    #[error("{}:{line}: {}{message}", file.display(), field_prefix(field))]
    Invalid {
        file: PathBuf,
        line: usize,
        field: String,
        message: String,
    },
    /// A bad field of a whole-file format (e.g. a DBDC3 dialogue).
    #[error("{}: {}{message}", file.display(), field_prefix(field))]
    Field {
        file: PathBuf,
        field: String,
        message: String,
    },
    #[error("{}: {message}", file.display())]
    Format { file: PathBuf, message: String },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl DataError {
    pub fn io(file: &Path, source: std::io::Error) -> Self {
        DataError::Io {
            file: file.to_path_buf(),
            source,
        }
    }
}

/// What a set of items holds, as `hyoka validate` prints it.
#[derive(Debug, Default, serde::Serialize)]
pub struct Summary {
    pub items: usize,
    pub context_turns: usize,
    pub min_context: usize,
    pub max_context: usize,
    pub with_reference: usize,
    pub with_setting: usize,
    pub dialogues: usize,
    pub systems: BTreeMap<String, usize>,
    pub response_speakers: BTreeMap<String, usize>,
    /// Per human-rated aspect: items rated, and the range of rater counts.
    pub rated: BTreeMap<String, RatedAspect>,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct RatedAspect {
    pub items: usize,
    pub min_raters: usize,
    pub max_raters: usize,
    pub mean: f64,
}

pub fn summarize(items: &[Item]) -> Summary {
    let mut s = Summary {
        items: items.len(),
        min_context: usize::MAX,
        ..Default::default()
    };
    let mut dialogues = std::collections::BTreeSet::new();
    for item in items {
        let n = item.context.len();
        s.context_turns += n;
        s.min_context = s.min_context.min(n);
        s.max_context = s.max_context.max(n);
        s.with_reference += usize::from(!item.reference.is_empty());
        s.with_setting += usize::from(item.setting.is_some());
        if let Some(d) = &item.dialogue {
            dialogues.insert(d.clone());
        }
        if let Some(sys) = &item.system {
            *s.systems.entry(sys.clone()).or_default() += 1;
        }
        *s.response_speakers
            .entry(item.response.speaker.clone())
            .or_default() += 1;
        for (aspect, rating) in &item.human {
            let r = s.rated.entry(aspect.clone()).or_insert(RatedAspect {
                min_raters: usize::MAX,
                ..Default::default()
            });
            r.items += 1;
            r.min_raters = r.min_raters.min(rating.rater_count());
            r.max_raters = r.max_raters.max(rating.rater_count());
            r.mean += rating.mean();
        }
    }
    if items.is_empty() {
        s.min_context = 0;
    }
    for r in s.rated.values_mut() {
        r.mean /= r.items as f64;
    }
    s.dialogues = dialogues.len();
    s
}
