//! The files of a dataset as given: a folder, a `.tar.gz`/`.tgz` or a `.zip`, those a dataset's
//! reader wants (by the end of their names), each bounded in size and the whole in total, since
//! the archive comes from elsewhere.

use super::DataError;
use super::item::Turn;
use serde_json::Value;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Largest file read (DBDC3's and DSLC3's dialogues are under 200 KB).
const MAX_DIALOGUE_BYTES: u64 = 64 << 20;
/// Most bytes read from one dataset (DBDC3's whole archive unpacks to about 100 MB).
const MAX_TOTAL_BYTES: u64 = 4 << 30;

/// One file: where it lies below the dataset (an archive's one top folder left out), how errors
/// name it, and its text.
#[derive(Clone, Debug)]
pub(crate) struct SourceFile {
    pub relative: PathBuf,
    pub shown: PathBuf,
    pub text: String,
}

impl SourceFile {
    /// The system: the folder holding the dialogue (DCM, CIC_50), if it lies in one.
    pub fn system(&self) -> Option<String> {
        let parent = self.relative.parent()?;
        parent.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// The set the dialogue belongs to: the folder holding its system's folder, as a
    /// `/`-separated path ("" at the top).
    pub fn tree(&self) -> String {
        self.relative
            .parent()
            .and_then(Path::parent)
            .map(|t| {
                t.components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .unwrap_or_default()
    }
}

/// What a dataset's reader takes: the files whose names end with one of `endings`, and the
/// dataset described for an error ("DBDC3 dialogues (*.log.json)").
pub(crate) struct Wanted<'a> {
    pub endings: &'a [&'a str],
    pub described: &'a str,
}

impl Wanted<'_> {
    fn takes(&self, name: &str) -> bool {
        self.endings.iter().any(|e| name.ends_with(e))
    }
}

/// Every file of `path` that `wanted` takes, sorted by their place below it.
pub(crate) fn read(path: &Path, wanted: &Wanted) -> Result<Vec<SourceFile>, DataError> {
    let name = path.to_string_lossy();
    let mut budget = Budget::default();
    let mut files = if path.is_dir() {
        let mut found = Vec::new();
        collect(path, wanted, &mut found)?;
        found
            .into_iter()
            .map(|file| {
                let text = budget.read(&file, std::fs::File::open(&file), None)?;
                let relative = file.strip_prefix(path).unwrap_or(&file).to_path_buf();
                Ok(SourceFile {
                    relative,
                    shown: file,
                    text,
                })
            })
            .collect::<Result<Vec<_>, DataError>>()?
    } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        without_top_folder(read_tar_gz(path, wanted, &mut budget)?)
    } else if name.ends_with(".zip") {
        without_top_folder(read_zip(path, wanted, &mut budget)?)
    } else if !path.exists() {
        return Err(DataError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
        ));
    } else {
        return Err(DataError::Format {
            file: path.to_path_buf(),
            message: format!(
                "expected a folder of {}, or a .tar.gz or .zip of one",
                wanted.described
            ),
        });
    };
    files.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(files)
}

/// Bytes read so far of one dataset.
#[derive(Default)]
struct Budget {
    total: u64,
}

impl Budget {
    /// The text of one file, at most `MAX_DIALOGUE_BYTES`, within the dataset's total.
    fn read(
        &mut self,
        shown: &Path,
        reader: std::io::Result<impl Read>,
        declared: Option<u64>,
    ) -> Result<String, DataError> {
        let too_large = |size: String| DataError::Format {
            file: shown.to_path_buf(),
            message: format!("a file of {size} bytes (at most {MAX_DIALOGUE_BYTES} are read)"),
        };
        if let Some(size) = declared.filter(|&s| s > MAX_DIALOGUE_BYTES) {
            return Err(too_large(size.to_string()));
        }
        let mut bytes = Vec::new();
        reader
            .and_then(|r| r.take(MAX_DIALOGUE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| DataError::io(shown, e))?;
        if bytes.len() as u64 > MAX_DIALOGUE_BYTES {
            return Err(too_large(format!("over {MAX_DIALOGUE_BYTES}")));
        }
        self.total += bytes.len() as u64;
        if self.total > MAX_TOTAL_BYTES {
            return Err(DataError::Format {
                file: shown.to_path_buf(),
                message: format!(
                    "the dataset's files pass {MAX_TOTAL_BYTES} bytes in all (at most that is read)"
                ),
            });
        }
        String::from_utf8(bytes).map_err(|_| DataError::Format {
            file: shown.to_path_buf(),
            message: "not UTF-8 text".into(),
        })
    }
}

/// Folders are followed where they really are (a link to a folder is not, so a loop of links
/// cannot recurse without end); files through links are read.
fn collect(dir: &Path, wanted: &Wanted, out: &mut Vec<PathBuf>) -> Result<(), DataError> {
    let entries = std::fs::read_dir(dir).map_err(|e| DataError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| DataError::io(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| DataError::io(&path, e))?;
        if kind.is_dir() {
            collect(&path, wanted, out)?;
        } else if wanted.takes(&path.to_string_lossy()) && !path.is_dir() {
            out.push(path);
        }
    }
    Ok(())
}

fn unreadable(archive: &Path, kind: &str, e: impl std::fmt::Display) -> DataError {
    DataError::Format {
        file: archive.to_path_buf(),
        message: format!("not a readable {kind} archive: {e}"),
    }
}

fn read_tar_gz(
    archive: &Path,
    wanted: &Wanted,
    budget: &mut Budget,
) -> Result<Vec<SourceFile>, DataError> {
    let file = std::fs::File::open(archive).map_err(|e| DataError::io(archive, e))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
    let bad = |e: std::io::Error| unreadable(archive, ".tar.gz", e);
    let mut out = Vec::new();
    for entry in tar.entries().map_err(bad)? {
        let entry = entry.map_err(bad)?;
        let inner = entry.path().map_err(bad)?.into_owned();
        if !entry.header().entry_type().is_file() || !wanted.takes(&inner.to_string_lossy()) {
            continue;
        }
        let shown = archive.join(&inner);
        let size = entry.size();
        let text = budget.read(&shown, Ok(entry), Some(size))?;
        out.push(SourceFile {
            relative: inner,
            shown,
            text,
        });
    }
    Ok(out)
}

fn read_zip(
    archive: &Path,
    wanted: &Wanted,
    budget: &mut Budget,
) -> Result<Vec<SourceFile>, DataError> {
    let file = std::fs::File::open(archive).map_err(|e| DataError::io(archive, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| unreadable(archive, ".zip", e))?;
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let entry = zip
            .by_index(i)
            .map_err(|e| unreadable(archive, ".zip", e))?;
        let name = entry
            .name()
            .map_err(|e| unreadable(archive, ".zip", e))?
            .into_owned();
        if !entry.is_file() || !wanted.takes(&name) {
            continue;
        }
        // A name that climbs out (`..`, an absolute path) names no place below the dataset.
        let Some(inner) = entry.enclosed_name() else {
            return Err(DataError::Format {
                file: archive.to_path_buf(),
                message: format!("an entry named {name:?} lies outside the archive"),
            });
        };
        let shown = archive.join(&inner);
        let size = entry.size();
        let text = budget.read(&shown, Ok(entry), Some(size))?;
        out.push(SourceFile {
            relative: inner,
            shown,
            text,
        });
    }
    Ok(out)
}

/// An archive's one top folder, if every file lies below the same one, stands for the
/// dataset's folder: `dbdc3-ja/DCM/x.log.json` is system DCM, as `DCM/x.log.json` is below an
/// unpacked `dbdc3-ja/`.
fn without_top_folder(mut files: Vec<SourceFile>) -> Vec<SourceFile> {
    let first = |f: &SourceFile| match f.relative.components().next() {
        Some(Component::Normal(c)) if f.relative.components().count() > 1 => Some(c.to_os_string()),
        _ => None,
    };
    let Some(top) = files.first().and_then(first) else {
        return files;
    };
    if files.iter().all(|f| first(f).as_ref() == Some(&top)) {
        for f in &mut files {
            if let Ok(rest) = f.relative.strip_prefix(&top) {
                f.relative = rest.to_path_buf();
            }
        }
    }
    files
}

/// The turns of a dialogue file's list `key` (each turn's speaker under `speaker`, its text under
/// `text`), errors named through `field`; a dialogue to rate needs two turns at least.
pub(crate) fn turns_of(
    doc: &Value,
    key: &str,
    text: &str,
    field: &dyn Fn(&str, String) -> DataError,
) -> Result<Vec<Turn>, DataError> {
    let list = doc[key]
        .as_array()
        .ok_or_else(|| field(key, "missing or not a list".into()))?;
    let turns = (list.iter().enumerate())
        .map(|(i, t)| {
            let string = |name: &str| {
                t[name].as_str().map(str::to_string).ok_or_else(|| {
                    field(
                        &format!("{key}[{i}].{name}"),
                        "missing or not a string".into(),
                    )
                })
            };
            Ok(Turn {
                speaker: string("speaker")?,
                text: string(text)?,
            })
        })
        .collect::<Result<Vec<_>, DataError>>()?;
    if turns.len() < 2 {
        return Err(field(
            key,
            format!(
                "{} turns: a dialogue to rate needs two at least",
                turns.len()
            ),
        ));
    }
    Ok(turns)
}

/// A whole-dialogue rating of DSLC3 or DUO: on their 1–5 scale, or why not.
pub(crate) fn on_rating_scale(value: f64) -> Result<(), String> {
    if (1.0..=5.0).contains(&value) {
        Ok(())
    } else {
        Err(format!("{value} is outside the scale 1–5"))
    }
}
