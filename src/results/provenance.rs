//! Provenance: what identifies a run, carried by every line it writes.

use super::ResultsError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The scorers. Adding one is this arm, its `record::Body` arm and its `runner::ScoreTask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    Judge,
    BertScore,
}

impl Task {
    pub fn name(self) -> &'static str {
        match self {
            Task::Judge => "judge",
            Task::BertScore => "bertscore",
        }
    }
}

/// What identifies a run's results: lines of one file must agree on all of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub hyoka: String,
    pub task: Task,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rubric: Option<RubricId>,
    pub models: Vec<ModelId>,
    pub dtype: String,
    pub device: String,
    /// Task settings that change the numbers (judge decoding; BERTScore layer, idf, baseline …).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty", default)]
    pub settings: serde_json::Map<String, serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RubricId {
    pub name: String,
    pub source: String,
    /// sha256 of the rubric (scales, wording, templates).
    pub hash: String,
    /// Each aspect's key and the human ratings it is compared with (the rubric's `human`), so
    /// that reading the results needs neither the rubric file nor its path.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub aspects: Vec<AspectTargets>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AspectTargets {
    pub key: String,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub human: Vec<String>,
    /// The human rating each score stands for (the rubric levels' `human`), as (score, rating).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub levels: Vec<(i64, f64)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelId {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub revision: Option<String>,
    pub sha256: String,
    pub arch: String,
    /// sha256 of the chat template the prompts went through.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub chat_template: Option<String>,
}

impl Provenance {
    /// The first difference that makes two runs' results incomparable (the device is not one:
    /// a run may move between GPUs, or from GPU to CPU).
    pub fn difference(&self, other: &Provenance) -> Option<(String, String, String)> {
        if self.hyoka != other.hyoka {
            return Some(("hyoka version".into(), s(&self.hyoka), s(&other.hyoka)));
        }
        if self.task != other.task {
            return Some(("task".into(), s(&self.task), s(&other.task)));
        }
        if self.rubric != other.rubric {
            return Some(("rubric".into(), s(&self.rubric), s(&other.rubric)));
        }
        if self.models != other.models {
            return Some(("model".into(), s(&self.models), s(&other.models)));
        }
        if self.dtype != other.dtype {
            return Some(("dtype".into(), s(&self.dtype), s(&other.dtype)));
        }
        if self.settings != other.settings {
            return Some(("settings".into(), s(&self.settings), s(&other.settings)));
        }
        None
    }
}

impl Provenance {
    /// An error naming `path:line` when `other` (read there) comes from an incomparable run.
    pub fn ensure_same(
        &self,
        other: &Provenance,
        path: &Path,
        line: usize,
    ) -> Result<(), ResultsError> {
        match other.difference(self) {
            Some((what, theirs, ours)) => Err(ResultsError::Incompatible {
                path: path.to_path_buf(),
                line,
                what,
                theirs,
                ours,
            }),
            None => Ok(()),
        }
    }
}

fn s<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}
