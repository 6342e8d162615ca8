//! The rubrics that ship with hyoka, compiled into the binary from `prompts/`.

use super::{Rubric, RubricError};
use crate::definition::{self, Builtins};

/// (name, TOML text) of every built-in rubric.
pub const BUILTIN: Builtins = &[
    (
        "dialogue6-ja",
        include_str!("../../prompts/dialogue6-ja.toml"),
    ),
    (
        "dialogue6-en",
        include_str!("../../prompts/dialogue6-en.toml"),
    ),
    (
        "roleplay8-ja",
        include_str!("../../prompts/roleplay8-ja.toml"),
    ),
    (
        "emotion-fit",
        include_str!("../../prompts/emotion-fit.toml"),
    ),
    (
        "breakdown3-ja",
        include_str!("../../prompts/breakdown3-ja.toml"),
    ),
    (
        "breakdown3-en",
        include_str!("../../prompts/breakdown3-en.toml"),
    ),
    (
        "dialogue6-pair-ja",
        include_str!("../../prompts/dialogue6-pair-ja.toml"),
    ),
    (
        "dialogue6-pair-en",
        include_str!("../../prompts/dialogue6-pair-en.toml"),
    ),
    (
        "breakdown-pair-ja",
        include_str!("../../prompts/breakdown-pair-ja.toml"),
    ),
    (
        "breakdown-pair-en",
        include_str!("../../prompts/breakdown-pair-en.toml"),
    ),
    (
        "dslc3-open-ja",
        include_str!("../../prompts/dslc3-open-ja.toml"),
    ),
    (
        "dslc3-situation-ja",
        include_str!("../../prompts/dslc3-situation-ja.toml"),
    ),
    ("duo-ed-ja", include_str!("../../prompts/duo-ed-ja.toml")),
    ("duo-wow-ja", include_str!("../../prompts/duo-wow-ja.toml")),
    ("duo-ed-en", include_str!("../../prompts/duo-ed-en.toml")),
    ("duo-wow-en", include_str!("../../prompts/duo-wow-en.toml")),
];

pub fn builtin_names() -> Vec<&'static str> {
    definition::names(BUILTIN)
}

/// The built-in rubric of that name, parsed and validated; `None` if there is none.
pub fn builtin(name: &str) -> Option<Result<Rubric, RubricError>> {
    BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, text)| Rubric::from_toml(text, &definition::builtin_origin(n)))
}
