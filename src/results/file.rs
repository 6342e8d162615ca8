//! The output file of a run: JSONL, one line per item, appended and synced as work finishes, so
//! a killed run restarted with the same arguments continues after the last finished item.
//! Every line carries the provenance of the run that wrote it; a restart refuses a file written
//! by a different run (model, rubric, dtype, settings or hyoka version).

use super::ResultsError;
use super::provenance::{Expected, Provenance};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

/// What a resume needs of a line: the item, what was read of it, the run that wrote it, and
/// whether it failed.
#[derive(Deserialize)]
struct LineHead {
    #[serde(deserialize_with = "id_text")]
    pub id: String,
    #[serde(default)]
    pub input_sha256: Option<String>,
    pub provenance: Provenance,
    /// Set on the line of an item that could not be scored.
    #[serde(default)]
    pub error: Option<serde_json::Value>,
    /// An error line of an item with nothing to score by definition: final, not retried.
    #[serde(default)]
    pub not_applicable: bool,
}

/// An item's id as written: a string, or an integer (an item's integer id written back).
fn id_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "id: not a string or integer: {other}"
        ))),
    }
}

impl LineHead {
    fn parse(line: &str) -> Result<LineHead, serde_json::Error> {
        serde_json::from_str(line)
    }
}

/// An open results file: the ids already finished, and a handle to append more.
pub struct ResultsFile {
    path: PathBuf,
    out: std::fs::File,
    pub finished: HashSet<String>,
    retried: usize,
    changed: Vec<String>,
    /// "id: why" of each kept line of an item with nothing to score.
    not_applicable: Vec<String>,
    /// What `begin` does to the file before the run's first line: a run refused before it
    /// writes (a prompt limit too small, a bad setting found while planning, a model that
    /// fails) leaves the file as it was.
    pending: Option<Pending>,
    /// The file did not exist before this run (`abandon` takes it away while it is empty).
    created: bool,
}

/// The changes an open results file waits to make.
enum Pending {
    /// Take error lines and lines of changed items out (the kept lines, in order).
    Rewrite(Vec<KeptLine>),
    /// Cut the file after its finished lines (a killed write's partial line, or everything
    /// with `overwrite`), then end the last line when it lacks its newline.
    Cut { keep_bytes: u64, end_line: bool },
}

/// A scored line of a results file: its byte range (start, length), its item and the hash of
/// what was read of it.
#[derive(Clone)]
struct KeptLine {
    start: u64,
    len: u64,
    id: String,
    input: Option<String>,
    /// Why the item has nothing to score, on a `not_applicable` line.
    not_applicable: Option<String>,
}

/// What a results file holds: its scored lines, whether the last one lacks its newline, and
/// how many error lines it has.
#[derive(Default)]
struct Scan {
    kept: Vec<KeptLine>,
    unterminated: bool,
    errors: usize,
}

/// Read a results file line by line (bounded), checking every line against `provenance` when
/// given; a truncated last line (a killed write) is left out.
fn scan(path: &Path, provenance: Option<&Provenance>) -> Result<Scan, ResultsError> {
    scan_with(
        path,
        &mut |number, theirs| match provenance.and_then(|p| theirs.difference(p)) {
            Some((what, theirs, ours)) => Err(ResultsError::Mismatch {
                path: path.to_path_buf(),
                line: number,
                what,
                theirs,
                ours,
            }),
            None => Ok(()),
        },
    )
}

/// `scan`, calling `check(line number, provenance)` on every line.
fn scan_with(
    path: &Path,
    check: &mut dyn FnMut(usize, &Provenance) -> Result<(), ResultsError>,
) -> Result<Scan, ResultsError> {
    let io = |source| ResultsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut finished = HashSet::new();
    let mut kept: Vec<KeptLine> = Vec::new();
    // Whether the last line kept has no newline (a run killed between a line and its end).
    let mut unterminated = false;
    let mut errors = 0;
    let reader = BufReader::new(std::fs::File::open(path).map_err(io)?);
    let corrupt = |line: usize, message: String| ResultsError::Corrupt {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut lines =
        crate::data::lines::Lines::new(reader, crate::data::lines::MAX_LINE_BYTES).peekable();
    let mut offset = 0u64;
    while let Some(next) = lines.next() {
        let crate::data::lines::Line {
            number,
            bytes,
            newline,
            text,
        } = next.map_err(|e| match e {
            crate::data::lines::ReadError::Io(e) => io(e),
            crate::data::lines::ReadError::TooLong { line, .. } => corrupt(line, e.to_string()),
        })?;
        let start = offset;
        offset += bytes;
        let last = lines.peek().is_none();
        let text = match text {
            Ok(t) => t,
            // A line cut short by a kill can end inside a character.
            Err(_) if last => break,
            Err(e) => return Err(corrupt(number, e.to_string())),
        };
        if text.trim().is_empty() {
            continue;
        }
        match LineHead::parse(&text) {
            Ok(head) => {
                check(number, &head.provenance)?;
                if head.error.is_some() && !head.not_applicable {
                    errors += 1;
                    continue;
                }
                if !finished.insert(head.id.clone()) {
                    return Err(corrupt(
                        number,
                        format!("{:?} again: one line per item", head.id),
                    ));
                }
                let not_applicable = head
                    .error
                    .filter(|_| head.not_applicable)
                    .map(|e| e.as_str().map_or_else(|| e.to_string(), String::from));
                kept.push(KeptLine {
                    start,
                    len: bytes,
                    id: head.id,
                    input: head.input_sha256,
                    not_applicable,
                });
                unterminated = !newline;
            }
            // A line cut short by a kill: drop it, its item is scored again.
            Err(_) if last => break,
            Err(e) => return Err(corrupt(number, e.to_string())),
        }
    }
    Ok(Scan {
        kept,
        unterminated,
        errors,
    })
}

/// Open (creating) `path` for writing with an exclusive lock: a second run on the same output
/// would interleave its lines with ours. The lock is the file's (flock), released when the
/// handle closes — also when a run is killed — and taken before anything is read, so no other
/// run can change what this one resumes from.
fn open_locked(path: &Path, create: bool) -> Result<std::fs::File, ResultsError> {
    let io = |source| ResultsError::Io {
        path: path.to_path_buf(),
        source,
    };
    loop {
        let out = std::fs::OpenOptions::new()
            .create(create)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        match out.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(ResultsError::Locked {
                    path: path.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        // Another run may have replaced the file (`rewrite_without`) between our open and our
        // lock: the lock must be on the file the path names now.
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let (ours, now) = (
                out.metadata().map_err(io)?,
                std::fs::metadata(path).map_err(io)?,
            );
            if (ours.dev(), ours.ino()) == (now.dev(), now.ino()) {
                return Ok(out);
            }
        }
        #[cfg(not(unix))]
        return Ok(out);
    }
}

/// Replace `path` by a copy holding only the `kept` lines, through a temporary file and one
/// rename; the new file is locked before the old one's lock is let go. A symbolic link is
/// followed: the file it names is replaced, and the link stays a link.
fn rewrite_without(
    path: &Path,
    kept: &[&KeptLine],
    old: std::fs::File,
) -> Result<std::fs::File, ResultsError> {
    use std::io::{Read, Seek};
    let io = |source| ResultsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let target = crate::files::write_target(path).map_err(io)?;
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".hyoka-rewrite-{}", std::process::id()));
    let tmp = target.with_file_name(name);
    let result = (|| -> std::io::Result<std::fs::File> {
        let mut src = std::fs::File::open(&target)?;
        let mut dst = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&tmp)?;
        dst.try_lock()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut buf = Vec::new();
        for line in kept {
            src.seek(std::io::SeekFrom::Start(line.start))?;
            buf.resize(line.len as usize, 0);
            src.read_exact(&mut buf)?;
            if !buf.ends_with(b"\n") {
                buf.push(b'\n');
            }
            dst.write_all(&buf)?;
        }
        dst.sync_all()?;
        std::fs::rename(&tmp, &target)?;
        Ok(dst)
    })();
    drop(old);
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

impl ResultsFile {
    /// Open `path` for `provenance`: existing scored lines of the same run count as finished
    /// when they were read from the item as it is now (`inputs`: the item's hash in `current`,
    /// by id); lines of changed items and error lines are taken out, so their items are scored
    /// again; a truncated last line (a killed write) is dropped; `overwrite` starts afresh. Lines
    /// of ids not in `current` are kept. The file is locked while open; it changes with the
    /// first `append` (a file this run creates exists from here: `abandon` takes it away).
    pub fn open(
        path: &Path,
        provenance: &Provenance,
        overwrite: bool,
        current: &HashMap<&str, &str>,
    ) -> Result<Self, ResultsError> {
        let created = !path.exists();
        let out = open_locked(path, true)?;
        let Scan {
            kept,
            unterminated,
            errors,
        } = if overwrite {
            Scan::default()
        } else {
            scan(path, Some(provenance))?
        };
        let (kept, stale): (Vec<KeptLine>, Vec<KeptLine>) =
            kept.into_iter()
                .partition(|l| match current.get(l.id.as_str()) {
                    None => true,
                    Some(now) => l.input.as_deref() == Some(*now),
                });
        let finished = kept.iter().map(|l| l.id.clone()).collect();
        let changed = stale.iter().map(|l| l.id.clone()).collect();
        let not_applicable = kept
            .iter()
            .filter_map(|l| Some(format!("{}: {}", l.id, l.not_applicable.as_ref()?)))
            .collect();
        let pending = if errors > 0 || !stale.is_empty() {
            // Error lines and lines of changed items are taken out so that their items are
            // scored again and the file ends with one line per item: the lines kept are copied
            // to a new file that replaces this one in one rename (a crash leaves one or the
            // other, whole).
            Pending::Rewrite(kept)
        } else {
            // Keep the finished lines (none with `overwrite`), append after them.
            let keep_bytes = kept.last().map_or(0, |l| l.start + l.len);
            Pending::Cut {
                keep_bytes,
                end_line: unterminated,
            }
        };
        Ok(ResultsFile {
            path: path.to_path_buf(),
            out,
            finished,
            retried: errors,
            changed,
            not_applicable,
            pending: Some(pending),
            created,
        })
    }

    /// Make the file ready for the run's lines: the changes `open` found needed (lines taken
    /// out, a partial line cut, `overwrite`'s fresh start), made with the first `append`, so a
    /// run that stops before its first line leaves the file as it was.
    fn begin(&mut self) -> Result<(), ResultsError> {
        let io = |source| ResultsError::Io {
            path: self.path.clone(),
            source,
        };
        let end_line = match self.pending.take() {
            None => return Ok(()),
            Some(Pending::Rewrite(kept)) => {
                let old = self.out.try_clone().map_err(io)?;
                let refs: Vec<&KeptLine> = kept.iter().collect();
                self.out = rewrite_without(&self.path, &refs, old)?;
                false
            }
            Some(Pending::Cut {
                keep_bytes,
                end_line,
            }) => {
                self.out.set_len(keep_bytes).map_err(io)?;
                end_line
            }
        };
        use std::io::Seek;
        self.out.seek(std::io::SeekFrom::End(0)).map_err(io)?;
        if end_line {
            self.out.write_all(b"\n").map_err(io)?;
        }
        Ok(())
    }

    /// End a run that stopped before writing: a file this run created and left empty is
    /// taken away, so that a refused run leaves nothing behind.
    pub fn abandon(self) {
        // Still pending: nothing was written.
        if self.created && self.pending.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Items whose lines were taken out because the item changed since they were written.
    pub fn changed(&self) -> &[String] {
        &self.changed
    }

    /// "id: why" of the items the file already holds as having nothing to score (kept, as
    /// scoring them again would find nothing again).
    pub fn not_applicable(&self) -> &[String] {
        &self.not_applicable
    }

    /// Before anything expensive (loading models): the output's folder takes new files, an
    /// existing output can be locked and read as a results file, and its lines are not of
    /// another task, hyoka version or rubric than `expected` (what can be told before the
    /// models load; the rest is checked when the run opens it, or by `check`).
    pub fn preflight(
        path: &Path,
        overwrite: bool,
        expected: &Expected,
    ) -> Result<(), ResultsError> {
        let io = |source| ResultsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut probe = folder.join(".hyoka-probe");
        probe
            .as_mut_os_string()
            .push(format!("-{}", std::process::id()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .map_err(|e| {
                io(std::io::Error::new(
                    e.kind(),
                    format!("cannot write in {}: {e}", folder.display()),
                ))
            })?;
        let _ = std::fs::remove_file(&probe);
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            return Err(io(std::io::Error::other(
                "is a folder; name a file for the results",
            )));
        }
        if !path.exists() {
            return Ok(());
        }
        let _lock = open_locked(path, false)?;
        if !overwrite {
            let mut first = None;
            scan_with(path, &mut |number, provenance| {
                if first.is_none() {
                    first = Some(());
                    if let Some((what, theirs, ours)) = expected.difference(provenance) {
                        return Err(ResultsError::Mismatch {
                            path: path.to_path_buf(),
                            line: number,
                            what,
                            theirs,
                            ours,
                        });
                    }
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Whether every line of an existing output comes from a run of `provenance` (the models
    /// loaded), without writing: a command checks all its outputs before it writes any.
    pub fn check(
        path: &Path,
        provenance: &Provenance,
        overwrite: bool,
    ) -> Result<(), ResultsError> {
        if overwrite || !path.exists() {
            return Ok(());
        }
        let _lock = open_locked(path, false)?;
        scan(path, Some(provenance)).map(|_| ())
    }

    /// Error lines taken out when the file was opened (their items are to be scored again).
    pub fn retried(&self) -> usize {
        self.retried
    }

    /// Append lines and flush them to disk before returning.
    pub fn append(&mut self, lines: &[String]) -> Result<(), ResultsError> {
        self.begin()?;
        let io = |source| ResultsError::Io {
            path: self.path.clone(),
            source,
        };
        let mut text = String::new();
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        self.out.write_all(text.as_bytes()).map_err(io)?;
        self.out.flush().map_err(io)?;
        self.out.sync_data().map_err(io)
    }
}
