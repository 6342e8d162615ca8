//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
}

/// The folder of the real test models (scripts/fetch_test_models.py puts them there).
pub fn test_models() -> PathBuf {
    match std::env::var_os("HYOKA_TEST_MODELS") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/hyoka/test-models"),
    }
}

/// A real test model file. Missing files fail the test (CI fetches them first) unless
/// HYOKA_SKIP_MODEL_TESTS=1, which makes the test return early instead.
pub fn test_model(name: &str) -> Option<PathBuf> {
    let path = test_models().join(name);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("HYOKA_SKIP_MODEL_TESTS").as_deref() == Ok("1") {
        eprintln!(
            "skipping: {} is missing (HYOKA_SKIP_MODEL_TESTS=1)",
            path.display()
        );
        return None;
    }
    panic!(
        "{} is missing: run `python3 scripts/fetch_test_models.py` (or set HYOKA_SKIP_MODEL_TESTS=1)",
        path.display()
    );
}

pub fn dbdc3_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/dbdc3-ja")
}

/// A two-aspect score rubric (0–1 fit, 1–5 quality) for judge runs on the small test models.
pub const SHORT_RUBRIC: &str = r#"
name = "short"
description = "a short rubric for tests"
output = "score"
[prompt]
user = """
Rate the last reply.
{% for t in context %}
{{ t.label }}: {{ t.text }}
{% endfor %}
{{ response.label }}: {{ response.text }}
"""
answer = "{{ aspect.name }}: "
[[aspects]]
key = "fit"
name = "Fit"
min = 0
max = 1
definition = "fits the context"
[[aspects]]
key = "quality"
name = "Quality"
min = 1
max = 5
definition = "overall"
"#;
