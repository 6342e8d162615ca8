//! The output file of a run: JSONL, one line per item, appended and synced as work finishes, so
//! a killed run restarted with the same arguments continues after the last finished item.
//! Every line carries the provenance of the run that wrote it; a restart refuses a file written
//! by a different run (model, rubric, dtype, settings or hyoka version).

use super::ResultsError;
use super::provenance::Provenance;
use serde::Deserialize;
use std::collections::HashSet;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

/// What a resume needs of a line: the item and the run that wrote it, and whether it failed.
#[derive(Deserialize)]
struct LineHead {
    pub id: String,
    pub provenance: Provenance,
    /// Set on the line of an item that could not be scored.
    #[serde(default)]
    pub error: Option<serde_json::Value>,
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
}

/// What a results file holds: finished ids, the byte ranges (start, length) of their lines,
/// whether the last kept line lacks its newline, and how many error lines it has.
#[derive(Default)]
struct Scan {
    finished: HashSet<String>,
    kept: Vec<(u64, u64)>,
    unterminated: bool,
    errors: usize,
}

/// Read a results file line by line (bounded), checking every line against `provenance` when
/// given; a truncated last line (a killed write) is left out.
fn scan(path: &Path, provenance: Option<&Provenance>) -> Result<Scan, ResultsError> {
    let io = |source| ResultsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut finished = HashSet::new();
    let mut kept: Vec<(u64, u64)> = Vec::new();
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
                if let Some((what, theirs, ours)) =
                    provenance.and_then(|p| head.provenance.difference(p))
                {
                    return Err(ResultsError::Mismatch {
                        path: path.to_path_buf(),
                        line: number,
                        what,
                        theirs,
                        ours,
                    });
                }
                if head.error.is_some() {
                    errors += 1;
                    continue;
                }
                if !finished.insert(head.id.clone()) {
                    return Err(corrupt(
                        number,
                        format!("{:?} again: one line per item", head.id),
                    ));
                }
                kept.push((start, bytes));
                unterminated = !newline;
            }
            // A line cut short by a kill: drop it, its item is scored again.
            Err(_) if last => break,
            Err(e) => return Err(corrupt(number, e.to_string())),
        }
    }
    Ok(Scan {
        finished,
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

/// Replace `path` by a copy holding only the byte ranges `kept` (each a whole line), through a
/// temporary file and one rename; the new file is locked before the old one's lock is let go.
fn rewrite_without(
    path: &Path,
    kept: &[(u64, u64)],
    old: std::fs::File,
) -> Result<std::fs::File, ResultsError> {
    use std::io::{Read, Seek};
    let io = |source| ResultsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".hyoka-rewrite-{}", std::process::id()));
    let tmp = path.with_file_name(name);
    let result = (|| -> std::io::Result<std::fs::File> {
        let mut src = std::fs::File::open(path)?;
        let mut dst = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&tmp)?;
        dst.try_lock()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut buf = Vec::new();
        for &(start, len) in kept {
            src.seek(std::io::SeekFrom::Start(start))?;
            buf.resize(len as usize, 0);
            src.read_exact(&mut buf)?;
            if !buf.ends_with(b"\n") {
                buf.push(b'\n');
            }
            dst.write_all(&buf)?;
        }
        dst.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(dst)
    })();
    drop(old);
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

impl ResultsFile {
    /// Open `path` for `provenance`: existing scored lines of the same run count as finished;
    /// error lines are taken out, so their items are scored again; a truncated last line (a
    /// killed write) is dropped; `overwrite` starts afresh. The file is locked while open.
    pub fn open(
        path: &Path,
        provenance: &Provenance,
        overwrite: bool,
    ) -> Result<Self, ResultsError> {
        let io = |source| ResultsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut out = open_locked(path, true)?;
        let Scan {
            finished,
            kept,
            unterminated,
            errors,
        } = if overwrite {
            Scan::default()
        } else {
            scan(path, Some(provenance))?
        };
        let mut unterminated = unterminated;
        if errors > 0 {
            // Error lines are taken out so that their items are scored again and the file ends
            // with one line per item: the scored lines are copied to a new file that replaces
            // this one in one rename (a crash leaves one or the other, whole).
            out = rewrite_without(path, &kept, out)?;
            unterminated = false;
        } else {
            // Keep the finished lines (none with `overwrite`), append after them.
            let keep_bytes = kept.last().map_or(0, |(start, len)| start + len);
            out.set_len(keep_bytes).map_err(io)?;
        }
        use std::io::Seek;
        out.seek(std::io::SeekFrom::End(0)).map_err(io)?;
        if unterminated {
            out.write_all(b"\n").map_err(io)?;
        }
        Ok(ResultsFile {
            path: path.to_path_buf(),
            out,
            finished,
            retried: errors,
        })
    }

    /// Before anything expensive (loading models): an existing output can be locked and read as
    /// a results file. Whether its lines come from this run is checked when the run opens it.
    pub fn preflight(path: &Path, overwrite: bool) -> Result<(), ResultsError> {
        if !path.exists() {
            return Ok(());
        }
        let _lock = open_locked(path, false)?;
        if !overwrite {
            scan(path, None)?;
        }
        Ok(())
    }

    /// Error lines taken out when the file was opened (their items are to be scored again).
    pub fn retried(&self) -> usize {
        self.retried
    }

    /// Append lines and flush them to disk before returning.
    pub fn append(&mut self, lines: &[String]) -> Result<(), ResultsError> {
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
