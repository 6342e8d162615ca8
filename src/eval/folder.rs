//! The evaluation's folder: the files it holds, folders made for it and taken away again when a
//! refused run leaves them empty, files written whole, and the report of its results.

use super::error::EvalError;
use super::reporter::Reporter;
use crate::data::select::Shard;
use crate::meta::{JoinRules, MetaRequest, Summary};
use crate::results::reader::ResultsInput;
use std::path::{Path, PathBuf};

pub const ITEMS: &str = "items.jsonl";
pub const JUDGE: &str = "judge.jsonl";
pub const BERTSCORE: &str = "bertscore.jsonl";
pub const PAIRS: &str = "pairs.jsonl";

/// The files `eval` and `merge` write in their folder, each written whole.
pub const OUTPUTS: [&str; 8] = [
    ITEMS,
    JUDGE,
    BERTSCORE,
    PAIRS,
    "scores.jsonl",
    "summary.md",
    "summary.json",
    "report.html",
];

/// The folders a run created for its output, taken away again when the run leaves them empty
/// (a model that cannot be had, a refused setting): a refused run leaves nothing behind.
pub(super) struct CreatedFolders(Vec<PathBuf>);

impl CreatedFolders {
    pub(super) fn create(dir: &Path) -> Result<Self, EvalError> {
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(dir).map_err(|e| EvalError::io(dir, e))?;
        Ok(CreatedFolders(missing))
    }
}

impl Drop for CreatedFolders {
    fn drop(&mut self) {
        // Innermost first; a folder that holds anything stays, and so do those above it.
        for folder in &self.0 {
            if std::fs::remove_dir(folder).is_err() {
                break;
            }
        }
    }
}

/// Nothing to evaluate is no failure: an array job's task whose share holds no dialogue (or
/// context: `unit`) succeeds, and leaves an empty share in `dir` that `merge` recognises.
pub(super) fn nothing_to_do(
    dir: &Path,
    shard: Option<Shard>,
    whole: Option<&(usize, String)>,
    unit: &str,
    reporter: &dyn Reporter,
) -> Result<(), EvalError> {
    if let Some(s) = shard {
        std::fs::create_dir_all(dir).map_err(|e| EvalError::io(dir, e))?;
        crate::data::write_items(&dir.join(ITEMS), &[])?;
        if let Some(whole) = whole {
            super::shard_set::record(dir, &s.to_string(), whole)?;
        }
        reporter.note(&format!(
            "nothing to do: shard {s} holds no {unit} (an empty share written to {})",
            dir.display()
        ));
    } else {
        reporter.note("nothing to do: no items to evaluate");
    }
    Ok(())
}

/// Refuse an input that is one of the files written into `dir`.
pub fn refuse_input_as_output(dir: &Path, input: &Path) -> Result<(), EvalError> {
    for name in OUTPUTS {
        let output = dir.join(name);
        if crate::files::same_file(&output, input) {
            return Err(EvalError::usage(format!(
                "the input {} is the output {}: name another output folder",
                input.display(),
                output.display()
            )));
        }
    }
    Ok(())
}

/// Write each (file name, contents) into `dir`, each whole.
pub fn write_all(dir: &Path, files: Vec<(&'static str, String)>) -> Result<(), EvalError> {
    for (name, text) in files {
        let path = dir.join(name);
        crate::files::write_atomic(&path, text.as_bytes()).map_err(|e| EvalError::io(&path, e))?;
    }
    Ok(())
}

/// Files to write in a folder (name, contents), and the summary they hold.
pub type Report = (Vec<(&'static str, String)>, Option<Summary>);

/// scores.jsonl, and with human ratings summary.md, summary.json and report.html, from the
/// items and results in `dir`: (file name, contents), for the caller to write.
pub fn scores_report(
    dir: &Path,
    results: &[PathBuf],
    stats: &MetaRequest,
    reporter: &dyn Reporter,
) -> Result<Report, EvalError> {
    let items_path = dir.join(ITEMS);
    let items = crate::data::read_items(&items_path, false)?.items;
    let inputs = results
        .iter()
        .map(|p| ResultsInput::open(p))
        .collect::<Result<Vec<_>, _>>()?;
    let joined = crate::meta::join(
        items,
        &items_path.display().to_string(),
        &inputs,
        JoinRules::default(),
    )?;
    for note in &joined.notes {
        reporter.note(note);
    }
    let mut frame = joined.frame;
    if frame.human_keys.is_empty() {
        reporter.note("the items have no human ratings: writing scores.jsonl only");
        let scores = lines_text(&crate::report::score_lines(&frame));
        return Ok((vec![("scores.jsonl", scores)], None));
    }
    let summary = Summary::compute(&mut frame, &stats.options)?;
    let json = serde_json::to_string_pretty(&summary).expect("a summary serialises") + "\n";
    let files = vec![
        (
            "scores.jsonl",
            lines_text(&crate::report::score_lines(&frame)),
        ),
        ("summary.json", json),
        ("summary.md", summary.markdown()),
        ("report.html", crate::report::html(&summary, &frame)),
    ];
    // The paper's table, at item level.
    if let Some(table) = summary.level_table(crate::meta::Level::Item) {
        reporter.table(&format!(
            "### {}\n\n{}\n",
            crate::meta::Level::Item.title(),
            table.trim_end()
        ));
    }
    reporter.note(&format!(
        "writing scores.jsonl, summary.md, summary.json and report.html to {}",
        dir.display()
    ));
    Ok((files, Some(summary)))
}

fn lines_text(lines: &[String]) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}
