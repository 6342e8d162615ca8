//! What the commands share while they run: default models, progress, the exit at the end.

use std::path::PathBuf;

/// Where a default model's registry copy is (HYOKA_TEST_MODELS or ~/.cache/hyoka/test-models).
pub fn registry_copy(file: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("HYOKA_TEST_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/hyoka/test-models"),
    };
    Some(dir.join(file)).filter(|p| p.exists())
}

/// Load a default model from the Hub, falling back on its registry copy.
pub fn with_fallback<T>(
    default: (&str, &str),
    load: impl Fn(&str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    eprintln!("loading {} ...", default.0);
    match load(default.0) {
        Ok(m) => Ok(m),
        Err(hub) => match registry_copy(default.1) {
            Some(path) => {
                eprintln!("the Hub is unreachable ({hub:#});\nusing the registry-packaged copy {}", path.display());
                load(&path.to_string_lossy())
            }
            None => Err(hub.context(format!("no local copy of {} either: run `python3 scripts/fetch_test_models.py`, or pass a model", default.1))),
        },
    }
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
    work: impl FnOnce(&mut dyn FnMut(usize, usize)) -> T,
) -> (T, f64) {
    let bar = progress_bar(what);
    let started = std::time::Instant::now();
    let out = work(&mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
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
