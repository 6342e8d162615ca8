//! Outputs written whole, and inputs told apart from outputs.
//!
//! Every file hyoka writes in one go (items, scores.jsonl, summaries, the report, a merge's
//! results) goes through a temporary file beside it and one rename: a full disk or a kill
//! leaves the old file or the new one, never a torn one. A symbolic link is followed, so the
//! file it names is replaced and the link stays a link.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Where a write to `path` lands: the file a symbolic link names (followed to the end), or
/// `path` itself when it is no link.
pub(crate) fn write_target(path: &Path) -> std::io::Result<PathBuf> {
    let mut target = path.to_path_buf();
    // A chain of links ends within the system's limit (40 on Linux); a loop is an error.
    for _ in 0..40 {
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.file_type().is_symlink() => {
                let next = std::fs::read_link(&target)?;
                target = match target.parent() {
                    Some(dir) if next.is_relative() => dir.join(next),
                    _ => next,
                };
            }
            _ => return Ok(target),
        }
    }
    Err(std::io::Error::other(format!(
        "{}: too many levels of symbolic links",
        path.display()
    )))
}

/// Write `bytes` to `path` whole: into a temporary file in the same folder, synced, then
/// renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let target = write_target(path)?;
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".hyoka-tmp-{}", std::process::id()));
    let tmp = target.with_file_name(name);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The identity of an existing file (device and inode, links followed); None when it does not
/// exist.
#[cfg(unix)]
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn identity(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// Whether `a` and `b` name one existing file (by device and inode, links resolved).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (identity(a), identity(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// The first output that is also an input, as (output, input).
pub fn output_among_inputs<'a>(
    outputs: &[&'a Path],
    inputs: &[&'a Path],
) -> Option<(&'a Path, &'a Path)> {
    outputs
        .iter()
        .find_map(|o| inputs.iter().find(|i| same_file(o, i)).map(|i| (*o, *i)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_through_a_link_replaces_its_target_and_keeps_the_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("target.txt");
        let link = dir.path().join("link.txt");
        std::fs::write(&target, "old").expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink("target.txt", &link).expect("symlink");
        #[cfg(not(unix))]
        std::fs::write(&link, "old").expect("write");
        write_atomic(&link, b"new").expect("atomic write");
        #[cfg(unix)]
        {
            assert!(
                std::fs::symlink_metadata(&link)
                    .expect("link")
                    .file_type()
                    .is_symlink()
            );
            assert_eq!(std::fs::read_to_string(&target).expect("read"), "new");
            assert!(same_file(&link, &target));
        }
        assert_eq!(std::fs::read_to_string(&link).expect("read"), "new");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn outputs_are_found_among_inputs_by_identity_not_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.jsonl");
        std::fs::write(&a, "x").expect("write");
        let via_dot = dir.path().join(".").join("a.jsonl");
        let other = dir.path().join("b.jsonl");
        assert!(output_among_inputs(&[&via_dot], &[&a]).is_some());
        assert!(output_among_inputs(&[&other], &[&a]).is_none());
        // Not yet existing outputs are never inputs.
        std::fs::write(&other, "y").expect("write");
        assert!(output_among_inputs(&[&other], &[&a]).is_none());
    }
}

/// A claim on an output that is written at the end of a run (an eval's folder, a translation's
/// items file): taken before anything is read or written and held until the run ends, so that
/// a second run on the same output is refused at its start instead of writing over the
/// first's output, or the first over the second's. The lock is flock's, released when the
/// process ends, also when it is killed.
#[derive(Debug)]
pub struct OutputClaim {
    _lock: std::fs::File,
    /// The lock file made beside a file output, taken away when the claim ends.
    beside: Option<PathBuf>,
}

/// Why an output could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("{}: another hyoka run is writing this output; wait for it, or write elsewhere", path.display())]
    Busy { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl OutputClaim {
    /// Claim the folder `dir` (which exists): the lock is the folder's own.
    pub fn folder(dir: &Path) -> Result<Self, ClaimError> {
        let io = |source| ClaimError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let handle = std::fs::File::open(dir).map_err(io)?;
        lock(handle, dir).map(|lock| OutputClaim {
            _lock: lock,
            beside: None,
        })
    }

    /// Claim the file output `path` (which may not exist yet) through a lock file beside it,
    /// `.NAME.hyoka-lock`: the output itself is only written, whole, at the end.
    pub fn file(path: &Path) -> Result<Self, ClaimError> {
        let mut name = std::ffi::OsString::from(".");
        name.push(path.file_name().unwrap_or_default());
        name.push(".hyoka-lock");
        let beside = path.with_file_name(name);
        loop {
            let handle = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&beside)
                .map_err(|source| ClaimError::Io {
                    path: beside.clone(),
                    source,
                })?;
            let lock = lock(handle, path)?;
            // The run before may have taken the lock file away between our open and our lock:
            // the lock must be on the file the name holds now.
            let held = lock.metadata().ok().map(|m| file_id(&m));
            let named = std::fs::metadata(&beside).ok().map(|m| file_id(&m));
            if held.is_some() && held == named {
                return Ok(OutputClaim {
                    _lock: lock,
                    beside: Some(beside),
                });
            }
        }
    }
}

fn lock(handle: std::fs::File, claimed: &Path) -> Result<std::fs::File, ClaimError> {
    match handle.try_lock() {
        Ok(()) => Ok(handle),
        Err(std::fs::TryLockError::WouldBlock) => Err(ClaimError::Busy {
            path: claimed.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(ClaimError::Io {
            path: claimed.to_path_buf(),
            source,
        }),
    }
}

#[cfg(unix)]
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

#[cfg(not(unix))]
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    (m.len(), 0)
}

impl Drop for OutputClaim {
    fn drop(&mut self) {
        // Taken away while still locked: a run that opened it meanwhile finds another file
        // under the name and opens again (`OutputClaim::file`).
        if let Some(beside) = &self.beside {
            let _ = std::fs::remove_file(beside);
        }
    }
}

#[cfg(test)]
mod claim_tests {
    use super::*;

    #[test]
    fn a_claimed_output_is_refused_to_a_second_claim_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let first = OutputClaim::folder(dir.path()).unwrap();
        // flock locks belong to the open file: a second open in this process conflicts as a
        // second process's would.
        assert!(matches!(
            OutputClaim::folder(dir.path()),
            Err(ClaimError::Busy { .. })
        ));
        drop(first);
        assert!(OutputClaim::folder(dir.path()).is_ok());

        let out = dir.path().join("en.jsonl");
        let first = OutputClaim::file(&out).unwrap();
        let err = OutputClaim::file(&out).unwrap_err().to_string();
        assert!(
            err.contains("en.jsonl") && err.contains("another hyoka run"),
            "{err}"
        );
        drop(first);
        assert!(!dir.path().join(".en.jsonl.hyoka-lock").exists());
        assert!(!out.exists(), "claiming writes nothing at the output");
        assert!(OutputClaim::file(&out).is_ok());
    }
}
