//! What an item id may hold. `hyoka export` turns an id's `/`-separated parts into folder and
//! file names (`SYSTEM/DIALOGUE/TURN` → `OUT/SYSTEM/DIALOGUE.labels.json`), and an id comes from
//! a dataset someone else wrote: a part that is empty, `.` or `..`, or holds a backslash, NUL or
//! another control character would name a file outside the output, or one the file system
//! refuses half-way through a write. Such ids are refused where items are read or imported.

/// The longest part of an id, in bytes: with `.labels.json` after it, a file name stays under
/// the 255 bytes file systems allow.
pub const MAX_PART_BYTES: usize = 200;

/// Why `part` cannot be a folder or file name below an output folder, if it cannot.
pub fn path_part_problem(part: &str) -> Option<String> {
    if part.is_empty() {
        return Some("is empty".into());
    }
    if part == "." || part == ".." {
        return Some(format!("is {part:?}"));
    }
    if let Some(c) = part
        .chars()
        .find(|c| matches!(c, '/' | '\\') || c.is_control())
    {
        return Some(format!("holds {c:?}"));
    }
    if part.len() > MAX_PART_BYTES {
        return Some(format!(
            "is {} bytes long (at most {MAX_PART_BYTES})",
            part.len()
        ));
    }
    None
}

/// Why `id` cannot be an item id, if it cannot: each of its `/`-separated parts must be a
/// plain name.
pub fn id_problem(id: &str) -> Option<String> {
    let parts: Vec<&str> = id.split('/').collect();
    parts.iter().enumerate().find_map(|(i, part)| {
        path_part_problem(part).map(|why| {
            let which = if parts.len() == 1 {
                "it".to_string()
            } else {
                format!("its part {} ({:?})", i + 1, part)
            };
            format!(
                "{id:?}: {which} {why}; an id's /-separated parts name folders and files when \
                 exported, so none may be empty, \".\" or \"..\", hold a backslash or control \
                 character, or be over {MAX_PART_BYTES} bytes"
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_name_a_path_outside_are_refused() {
        for bad in [
            "../evil/1",
            "S/../../../outside/3",
            "/abs/1",
            "a//1",
            "a/./1",
            "a\\..\\b/1",
            "a\u{0}b/1",
            "line\nbreak",
            &"x".repeat(MAX_PART_BYTES + 1),
        ] {
            assert!(id_problem(bad).is_some(), "{bad:?}");
        }
        for good in [
            "sushi-1",
            "DCM/1502867549/4",
            "42",
            "日本語/対話.1/0",
            "a..b/c.d",
            &"x".repeat(MAX_PART_BYTES),
        ] {
            assert_eq!(id_problem(good), None, "{good:?}");
        }
    }
}
