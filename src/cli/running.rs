//! What the commands share while they run: default models, progress, the exit at the end.

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

/// One progress bar at a time on stderr (a terminal's; hidden otherwise), for a run that
/// reports its steps as they go.
#[derive(Default)]
pub struct Terminal {
    bar: std::cell::RefCell<Option<(String, indicatif::ProgressBar)>>,
}

impl Terminal {
    /// Step `what` is at `done` of `total` items.
    pub fn show(&self, what: &str, done: usize, total: usize) {
        let mut bar = self.bar.borrow_mut();
        if bar.as_ref().is_none_or(|(step, _)| step != what) {
            if let Some((_, old)) = bar.take() {
                old.finish_and_clear();
            }
            *bar = Some((what.to_string(), progress_bar(what)));
        }
        if let Some((_, b)) = bar.as_ref() {
            b.set_length(total as u64);
            b.set_position(done as u64);
        }
    }

    /// The step's bar taken away.
    pub fn clear(&self) {
        if let Some((_, bar)) = self.bar.borrow_mut().take() {
            bar.finish_and_clear();
        }
    }
}

/// Run `work` with a progress bar over its (done, total) items; its result and its seconds.
pub fn with_progress<T>(
    what: &str,
    work: impl FnOnce(&mut crate::results::Progress<'_>) -> T,
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

/// How many items have nothing to score by definition (an opening utterance has no previous
/// turn to compare with): counted, not failures, so they leave the exit code at 0.
pub fn not_applicable_note(what: &str, not_applicable: &[String]) -> Option<String> {
    let first = not_applicable.first()?;
    Some(format!(
        "{what}: {} items have nothing to compare with, by definition (e.g. {first}); not failures",
        not_applicable.len(),
    ))
}

/// A scoring command's items and output, checked before any model loads (after the command's
/// own checks: the output is not an input, its rubric resolved): the items read, each skipped
/// one said, and the output's folder writable, locked by no other run, its lines (if any)
/// written by a run like this one (`expected`).
pub fn read_items_for_output(
    input: &std::path::Path,
    output: &std::path::Path,
    skip_invalid: bool,
    overwrite: bool,
    expected: &crate::results::Expected,
) -> anyhow::Result<crate::data::ReadItems> {
    let read = crate::data::read_items(input, skip_invalid)?;
    for e in &read.skipped {
        eprintln!("skipped: {e}");
    }
    crate::results::ResultsFile::preflight(output, overwrite, expected)?;
    Ok(read)
}

/// The end of a scoring run: the lines of an earlier run taken out said, then the run's
/// `figures`, then each failure named and the exit code (`exit::finish`).
pub fn finish_scoring(
    summary: &crate::results::RunSummary,
    figures: impl IntoIterator<Item = String>,
    skipped_input: usize,
) -> std::process::ExitCode {
    report_retried(summary);
    for line in figures {
        eprintln!("{line}");
    }
    super::exit::finish(&summary.failed, skipped_input)
}

/// Say which lines of an earlier run were taken out of an output and their items scored again:
/// error lines, and lines of items changed since (same id, other text).
pub fn report_retried(summary: &crate::results::RunSummary) {
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
