//! Provenance: what identifies a run, carried by every line it writes.

use super::ResultsError;
use crate::model::LoadedModel;
use crate::model::backend::device::{device_name, dtype_name};
use crate::rubric::Rubric;
use candle_core::{DType, Device};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The scorers. Adding one is this arm, its `record::Body` arm and its `runner::ScoreTask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    Judge,
    BertScore,
    /// A pairwise judge: per pair of responses, the verdicts in both orders.
    Compare,
    /// Texts translated (`hyoka translate`'s store): a line per distinct text.
    Translate,
    /// A likelihood scorer (FED, GPTScore): per item, per aspect, a log-likelihood score.
    Likelihood,
}

impl Task {
    pub fn name(self) -> &'static str {
        match self {
            Task::Judge => "judge",
            Task::BertScore => "bertscore",
            Task::Compare => "compare",
            Task::Translate => "translate",
            Task::Likelihood => "likelihood",
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

/// The last provenance read from a results file, parsed, for the lines after it that repeat it.
#[derive(Default)]
pub struct SharedProvenance {
    pub(crate) last: Option<(serde_json::Value, std::sync::Arc<Provenance>)>,
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
    /// What the weights are when they are a copy that differs from the model they are named
    /// after (`model::load::known_copies`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub description: Option<String>,
    /// sha256 of the chat template the prompts went through.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub chat_template: Option<String>,
}

impl Provenance {
    /// A run's provenance, with this hyoka's version: `models` ran in `dtype` on `device`.
    pub fn new(
        task: Task,
        rubric: Option<RubricId>,
        models: Vec<ModelId>,
        dtype: DType,
        device: &Device,
        settings: serde_json::Map<String, serde_json::Value>,
    ) -> Provenance {
        Provenance {
            hyoka: crate::version::VERSION.into(),
            task,
            rubric,
            models,
            dtype: dtype_name(dtype).into(),
            device: device_name(device),
            settings,
        }
    }

    /// The provenance of a run of loaded decoder models (one, or a panel that runs together):
    /// their identities, and the dtype and device of the first.
    pub fn of_models(
        task: Task,
        rubric: Option<RubricId>,
        models: &[LoadedModel],
        settings: serde_json::Map<String, serde_json::Value>,
    ) -> Provenance {
        let (dtype, device) = models.first().map_or((DType::F32, Device::Cpu), |m| {
            (m.transformer.dtype(), m.transformer.device().clone())
        });
        let ids = models.iter().map(ModelId::of).collect();
        Provenance::new(task, rubric, ids, dtype, &device, settings)
    }
}

impl ModelId {
    /// What identifies a loaded model: its name, revision, checksum, architecture and chat
    /// template.
    pub fn of(m: &LoadedModel) -> ModelId {
        ModelId {
            name: m.files.name.clone(),
            revision: m.files.revision.clone(),
            sha256: m.sha256.clone(),
            arch: m.transformer.cfg.arch.name().into(),
            description: crate::model::load::known_copies::description(&m.sha256)
                .map(str::to_string),
            chat_template: Some(crate::checksum::sha256_hex(
                m.chat_template.source().as_bytes(),
            )),
        }
    }
}

impl RubricId {
    /// A rubric's identity (`source`: how the run named it) and, per aspect, the human ratings
    /// it stands for.
    pub fn of(rubric: &Rubric, source: &str) -> RubricId {
        RubricId {
            name: rubric.name.clone(),
            source: source.into(),
            hash: rubric.hash(),
            aspects: (rubric.aspects.iter())
                .map(|a| AspectTargets {
                    key: a.key.clone(),
                    human: a.human.clone(),
                    levels: (a.levels.iter())
                        .filter_map(|l| Some((l.score, l.human?)))
                        .collect(),
                })
                .collect(),
        }
    }
}

impl Provenance {
    /// The first difference that makes two runs' results incomparable. Identity is content:
    /// the rubric's and models' hashes, the dtype and the settings' values; names and paths
    /// (a rubric named by another path, a model through a link or on another node, a baseline
    /// file's location) are information, as is the device (a run may move between GPUs, or
    /// from GPU to CPU).
    pub fn difference(&self, other: &Provenance) -> Option<(String, String, String)> {
        if self.hyoka != other.hyoka {
            return Some(("hyoka version".into(), s(&self.hyoka), s(&other.hyoka)));
        }
        if self.task != other.task {
            return Some(("task".into(), s(&self.task), s(&other.task)));
        }
        let rubric = |p: &Provenance| {
            p.rubric
                .as_ref()
                .map(|r| (r.hash.clone(), r.aspects.clone()))
        };
        if rubric(self) != rubric(other) {
            return Some(("rubric".into(), s(&self.rubric), s(&other.rubric)));
        }
        let models = |p: &Provenance| -> Vec<(String, Option<String>)> {
            p.models
                .iter()
                .map(|m| (m.sha256.clone(), m.chat_template.clone()))
                .collect()
        };
        if models(self) != models(other) {
            return Some(("model".into(), s(&self.models), s(&other.models)));
        }
        if self.dtype != other.dtype {
            return Some(("dtype".into(), s(&self.dtype), s(&other.dtype)));
        }
        if settings_values(&self.settings) != settings_values(&other.settings) {
            return Some(("settings".into(), s(&self.settings), s(&other.settings)));
        }
        None
    }
}

/// Settings without the names of the files they came from (a baseline's `file`).
fn settings_values(
    settings: &serde_json::Map<String, serde_json::Value>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut values = settings.clone();
    if let Some(serde_json::Value::Object(baseline)) = values.get_mut("baseline") {
        baseline.remove("file");
    }
    values
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

/// What a run's provenance will be, as far as it is known before its models load: the task,
/// hyoka's version and the rubric's hash.
pub struct Expected {
    pub task: Task,
    pub rubric_hash: Option<String>,
}

impl Expected {
    /// The first difference between `theirs` (read from an existing output) and this run.
    pub fn difference(&self, theirs: &Provenance) -> Option<(String, String, String)> {
        if theirs.hyoka != crate::version::VERSION {
            return Some((
                "hyoka version".into(),
                s(&theirs.hyoka),
                s(&crate::version::VERSION),
            ));
        }
        if theirs.task != self.task {
            return Some(("task".into(), s(&theirs.task), s(&self.task)));
        }
        let hash = theirs.rubric.as_ref().map(|r| &r.hash);
        if hash != self.rubric_hash.as_ref() {
            let name = theirs
                .rubric
                .as_ref()
                .map(|r| format!("{} (sha256 {:.12})", r.name, r.hash));
            return Some((
                "rubric".into(),
                name.unwrap_or_else(|| "none".into()),
                self.rubric_hash
                    .as_ref()
                    .map_or_else(|| "none".into(), |h| format!("sha256 {h:.12}")),
            ));
        }
        None
    }
}

fn s<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// A provenance of `task` for tests: one model, f32 on the CPU, no rubric, no settings.
#[cfg(test)]
pub(crate) fn test_provenance(task: Task) -> Provenance {
    Provenance {
        hyoka: "test".into(),
        task,
        rubric: None,
        models: vec![ModelId {
            name: "m".into(),
            revision: None,
            sha256: "0".into(),
            arch: "llama".into(),
            description: None,
            chat_template: None,
        }],
        dtype: "f32".into(),
        device: "cpu".into(),
        settings: serde_json::Map::new(),
    }
}
