//! What a run tells its user, as the face that asked shows it.

use std::ops::ControlFlow;

/// What the run tells its user: notes (the command line's stderr), tables (its stdout) and the
/// progress of each step. `progress` may stop the step (`Break`: Ctrl-C in Python).
pub trait Reporter {
    fn note(&self, line: &str);
    fn table(&self, text: &str);
    fn progress(&self, step: &str, done: usize, total: usize) -> ControlFlow<()>;
    /// `step` is over (a bar is taken away).
    fn step_done(&self, step: &str);
}

/// Run `work` as step `what`, its progress reported; its result and its seconds.
pub(super) fn timed<T>(
    reporter: &dyn Reporter,
    what: &str,
    work: impl FnOnce(&mut crate::results::Progress<'_>) -> T,
) -> (T, f64) {
    let started = std::time::Instant::now();
    let out = work(&mut |done, total| reporter.progress(what, done, total));
    reporter.step_done(what);
    (out, started.elapsed().as_secs_f64())
}

/// The lines to say about a run's summary: earlier error lines and changed items scored again.
pub(super) fn retried_notes(summary: &crate::results::RunSummary) -> Vec<String> {
    let mut notes = Vec::new();
    if summary.retried > 0 {
        notes.push(format!(
            "{} error lines of an earlier run were taken out and their items scored again",
            summary.retried
        ));
    }
    if let Some(first) = summary.changed.first() {
        notes.push(format!(
            "{} items changed since an earlier run scored them (e.g. {first:?}): their lines were taken out and the items scored again",
            summary.changed.len()
        ));
    }
    notes
}
