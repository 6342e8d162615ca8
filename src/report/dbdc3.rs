//! A judge's breakdown distributions in the DBDC challenge's run format: one
//! `<dialogue-id>.labels.json` per dialogue, each system turn with its predicted label and
//! prob-O/T/X, so that the challenge's own evaluation script scores hyoka's output unchanged.
//! Dialogues of several systems (item ids `SYSTEM/DIALOGUE/TURN`, as `hyoka import dbdc3`
//! writes them) go to one folder per system, mirroring the dataset's folders.

use crate::meta::breakdown::{LevelLabels, majority};
use crate::results::reader::read_records;
use crate::results::{Body, ResultsError, Task};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error("{}: {message}", path.display())]
    Input { path: PathBuf, message: String },
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What the export wrote.
#[derive(Debug)]
pub struct Written {
    pub dialogues: usize,
    pub turns: usize,
    /// The aspect exported and its label map, as `2=O,1=T,0=X`.
    pub aspect: String,
    pub levels: String,
}

/// One system turn: (turn index, label, prob-O, prob-T, prob-X).
type TurnLabel = (u64, &'static str, [f64; 3]);

/// Write `scores` (a `hyoka judge` results file) to `out` in the challenge's format. `aspect`
/// chooses the aspect when several map onto the labels; `levels` maps an aspect whose rubric
/// gives no map.
pub fn export(
    scores: &Path,
    out: &Path,
    aspect: Option<&str>,
    levels: Option<&LevelLabels>,
) -> Result<Written, ExportError> {
    // (system, dialogue) → turns; the aspect and its labels are settled by the first line.
    let mut dialogues: BTreeMap<(Option<String>, String), Vec<TurnLabel>> = BTreeMap::new();
    let mut chosen: Option<(String, LevelLabels)> = None;
    let provenance = read_records(scores, |line, _, record| {
        if record.task() != Task::Judge {
            return Err(ResultsError::Corrupt {
                path: scores.to_path_buf(),
                line,
                message: "not a `hyoka judge` results line".into(),
            });
        }
        if chosen.is_none() {
            chosen = Some(
                choose(&record.provenance, aspect, levels).map_err(|message| {
                    ResultsError::Corrupt {
                        path: scores.to_path_buf(),
                        line,
                        message,
                    }
                })?,
            );
        }
        let (key, labels) = chosen.as_ref().expect("chosen above");
        let Ok(Body::Judge(judge)) = &record.body else {
            return Err(ResultsError::Corrupt {
                path: scores.to_path_buf(),
                line,
                message: format!(
                    "error: item {:?} has no scores (rerun `hyoka judge` to score it)",
                    record.id
                ),
            });
        };
        let Some((_, score)) = judge.scores.iter().find(|(k, _)| k == key) else {
            return Err(ResultsError::Corrupt {
                path: scores.to_path_buf(),
                line,
                message: format!("scores: no aspect {key:?}"),
            });
        };
        let d = labels.distribution(&score.score_probabilities());
        let (system, dialogue, turn) =
            split_id(&record.id).ok_or_else(|| ResultsError::Corrupt {
                path: scores.to_path_buf(),
                line,
                message: format!(
                    "id: {:?} is not [SYSTEM/]DIALOGUE/TURN as `hyoka import dbdc3` writes it",
                    record.id
                ),
            })?;
        dialogues
            .entry((system, dialogue))
            .or_default()
            .push((turn, majority(&d, 0.0).name(), d));
        Ok(())
    })?;
    if provenance.is_none() {
        return Err(ExportError::Input {
            path: scores.to_path_buf(),
            message: "no results lines".into(),
        });
    }
    let (aspect, labels) = chosen.expect("a line was read");
    // Every file is known and checked before the first is written; they are written into a
    // folder beside `out` that becomes `out` once all are there, so a failed export leaves
    // nothing, and no dialogue of an earlier export can be taken for this one's.
    let mut files = Vec::new();
    let mut turns = 0;
    for ((system, dialogue), list) in &mut dialogues {
        list.sort_by_key(|t| t.0);
        if let Some(w) = list.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(ExportError::Input {
                path: scores.to_path_buf(),
                message: format!("dialogue {dialogue} has turn {} under two ids", w[0].0),
            });
        }
        turns += list.len();
        let relative =
            relative_path(system.as_deref(), dialogue).map_err(|message| ExportError::Input {
                path: scores.to_path_buf(),
                message,
            })?;
        let doc = json!({
            "dialogue-id": dialogue,
            "turns": list.iter().map(|(index, label, d)| json!({
                "turn-index": index,
                "labels": [{
                    "breakdown": label,
                    "prob-O": d[0],
                    "prob-T": d[1],
                    "prob-X": d[2],
                }],
            })).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&doc).expect("labels serialise") + "\n";
        files.push((relative, text));
    }
    write_folder(out, &files)?;
    Ok(Written {
        dialogues: dialogues.len(),
        turns,
        levels: labels.spec(),
        aspect,
    })
}

/// `[SYSTEM/]DIALOGUE.labels.json`, each part a plain name (an id's parts come from a dataset
/// someone else wrote; `hyoka import` and the items reader refuse such ids too).
fn relative_path(system: Option<&str>, dialogue: &str) -> Result<PathBuf, String> {
    let mut path = PathBuf::new();
    let system_parts = system.map(|s| s.split('/').collect::<Vec<_>>());
    for part in system_parts.into_iter().flatten().chain([dialogue]) {
        if let Some(why) = crate::data::ids::path_part_problem(part) {
            return Err(format!(
                "the id part {part:?} {why}: it cannot name a file below the output folder"
            ));
        }
        path.push(part);
    }
    path.set_file_name(format!("{dialogue}.labels.json"));
    if path
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(format!(
            "{}: not a plain path below the output folder",
            path.display()
        ));
    }
    Ok(path)
}

/// Write `files` (paths relative to `out`) as the new folder `out`: refused when `out` holds
/// anything already; staged beside it and renamed into place once every file is written.
fn write_folder(out: &Path, files: &[(PathBuf, String)]) -> Result<(), ExportError> {
    let write = |path: &Path, source| ExportError::Write {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ExportError::Input {
                    path: out.to_path_buf(),
                    message: "the output folder is not empty: the challenge's script reads every \
                              file in it, so an export goes into a new or empty folder"
                        .into(),
                });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(write(out, e)),
    }
    let name = out
        .file_name()
        .ok_or_else(|| ExportError::Input {
            path: out.to_path_buf(),
            message: "not a folder name".into(),
        })?
        .to_string_lossy();
    let stage = out.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    let result = (|| {
        for (relative, text) in files {
            let path = stage.join(relative);
            let folder = path.parent().expect("a file below the stage");
            std::fs::create_dir_all(folder).map_err(|e| write(folder, e))?;
            std::fs::write(&path, text).map_err(|e| write(&path, e))?;
        }
        std::fs::create_dir_all(&stage).map_err(|e| write(&stage, e))?;
        // An empty `out` gives way to the finished folder.
        if out.exists() {
            std::fs::remove_dir(out).map_err(|e| write(out, e))?;
        }
        std::fs::rename(&stage, out).map_err(|e| write(out, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&stage);
    }
    result
}

/// The aspect to export and its label map: the one the rubric maps (or `levels` maps), or the
/// one `aspect` names.
fn choose(
    provenance: &crate::results::Provenance,
    aspect: Option<&str>,
    levels: Option<&LevelLabels>,
) -> Result<(String, LevelLabels), String> {
    let targets = provenance
        .rubric
        .as_ref()
        .map(|r| r.aspects.as_slice())
        .unwrap_or_default();
    let candidates: Vec<(String, LevelLabels)> = targets
        .iter()
        .filter(|t| aspect.is_none_or(|a| a == t.key))
        .filter_map(|t| Some((t.key.clone(), LevelLabels::of_aspect(&t.levels, levels)?)))
        .collect();
    let keys: Vec<&str> = targets.iter().map(|t| t.key.as_str()).collect();
    match (candidates.len(), aspect) {
        (1, _) => Ok(candidates.into_iter().next().expect("one")),
        (0, Some(a)) if !keys.contains(&a) => Err(format!(
            "provenance: the rubric has no aspect {a:?} (it has {})",
            keys.join(", ")
        )),
        (0, _) => Err(format!(
            "provenance: no aspect's levels map onto breakdown labels O/T/X (rubric levels with \
             `human` ratings, as in breakdown3-ja); give the map with --levels, e.g. \
             --aspect {} --levels 1=O,0=X",
            keys.first().copied().unwrap_or("coherence")
        )),
        _ => Err(format!(
            "provenance: several aspects map onto breakdown labels ({}); choose one with --aspect",
            candidates
                .iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// `SYSTEM/DIALOGUE/TURN` or `DIALOGUE/TURN` → (system, dialogue, turn index).
fn split_id(id: &str) -> Option<(Option<String>, String, u64)> {
    let mut parts: Vec<&str> = id.rsplitn(3, '/').collect();
    parts.reverse();
    let turn: u64 = parts.last()?.parse().ok()?;
    match parts.as_slice() {
        [dialogue, _] if !dialogue.is_empty() => Some((None, dialogue.to_string(), turn)),
        [system, dialogue, _] if !dialogue.is_empty() && !system.is_empty() => {
            Some((Some(system.to_string()), dialogue.to_string(), turn))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::split_id;

    #[test]
    fn ids_split_into_system_dialogue_and_turn() {
        assert_eq!(
            split_id("DCM/1502867549/4"),
            Some((Some("DCM".into()), "1502867549".into(), 4))
        );
        assert_eq!(
            split_id("1502867549/0"),
            Some((None, "1502867549".into(), 0))
        );
        assert_eq!(
            split_id("a/b/c/2"),
            Some((Some("a/b".into()), "c".into(), 2))
        );
        for bad in ["1502867549", "x/y", "/3", "DCM//3"] {
            assert_eq!(split_id(bad), None, "{bad}");
        }
    }
}
