//! Definitions a user names by a built-in's name or by a file's path: rubrics, translation
//! prompts, likelihood scorers. One lookup, so every kind reads a name the same way: a
//! built-in's name wins over a file of that name in the working folder, and a folder is told
//! apart from a missing file.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// The built-ins of one kind: (name, TOML text compiled into the binary from `prompts/`).
pub type Builtins = &'static [(&'static str, &'static str)];

/// What a name or path given by the user is.
#[derive(Debug, PartialEq)]
pub enum Named<'a> {
    /// A built-in: its name and its text.
    Builtin {
        name: &'static str,
        text: &'static str,
    },
    /// An existing path that is not a folder.
    File(&'a Path),
    /// A folder where a file was expected.
    Folder(&'a Path),
    /// Neither a built-in's name nor an existing path.
    Unknown,
}

pub fn look_up<'a>(builtins: Builtins, name_or_path: &'a str) -> Named<'a> {
    if let Some(&(name, text)) = builtins.iter().find(|(n, _)| *n == name_or_path) {
        return Named::Builtin { name, text };
    }
    let path = Path::new(name_or_path);
    if path.is_dir() {
        Named::Folder(path)
    } else if path.exists() {
        Named::File(path)
    } else {
        Named::Unknown
    }
}

/// The TOML text of a built-in or a file, and the origin its errors and provenance name (the
/// file a built-in was compiled from, or the path as given). `what` names the kind in the
/// message of `invalid` (a folder, or neither a built-in nor a file); `io`: the file unread.
pub fn read_toml<E>(
    builtins: Builtins,
    name_or_path: &str,
    what: &str,
    io: impl FnOnce(PathBuf, std::io::Error) -> E,
    invalid: impl FnOnce(String) -> E,
) -> Result<(Cow<'static, str>, String), E> {
    match look_up(builtins, name_or_path) {
        Named::Builtin { name, text } => Ok((Cow::Borrowed(text), builtin_origin(name))),
        Named::File(path) => match std::fs::read_to_string(path) {
            Ok(text) => Ok((Cow::Owned(text), name_or_path.to_string())),
            Err(source) => Err(io(path.to_path_buf(), source)),
        },
        Named::Folder(_) => Err(invalid(format!(
            "a folder, not a {what} file: name a .toml file in it"
        ))),
        Named::Unknown => Err(invalid(format!(
            "no such file, and not a built-in {what} (built in: {})",
            names(builtins).join(", ")
        ))),
    }
}

/// The built-ins' names, in their table's order.
pub fn names(builtins: Builtins) -> Vec<&'static str> {
    builtins.iter().map(|(n, _)| *n).collect()
}

/// The file a built-in was compiled from: what its errors name.
pub fn builtin_origin(name: &str) -> String {
    format!("prompts/{name}.toml")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: Builtins = &[("first", "a = 1"), ("Cargo.toml", "b = 2")];

    #[test]
    fn a_name_is_a_builtin_a_file_a_folder_or_unknown() {
        assert_eq!(
            look_up(TABLE, "first"),
            Named::Builtin {
                name: "first",
                text: "a = 1"
            }
        );
        // The built-in wins over the file of the same name in the working folder.
        assert!(Path::new("Cargo.toml").is_file());
        assert!(matches!(
            look_up(TABLE, "Cargo.toml"),
            Named::Builtin { .. }
        ));
        assert_eq!(
            look_up(TABLE, "README.md"),
            Named::File(Path::new("README.md"))
        );
        assert_eq!(look_up(TABLE, "src"), Named::Folder(Path::new("src")));
        assert_eq!(look_up(TABLE, "no-such-thing.toml"), Named::Unknown);
        assert_eq!(names(TABLE), ["first", "Cargo.toml"]);
    }
}
