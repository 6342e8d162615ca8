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
