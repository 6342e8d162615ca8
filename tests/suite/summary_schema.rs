//! docs/formats.md's tables of summary.json keys against summaries hyoka writes: every key a
//! summary holds is documented, and every documented key occurs in one of them (`hyoka meta` on
//! the scipy fixtures with `--fit-w` and with two runs of a judge, on the DBDC fixture with
//! `--calibrate`, and a pairwise summary of hand-made verdicts).

use crate::common;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

/// The key patterns of the table under `heading` (to the next heading), braces expanded.
fn documented(heading: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(common::repo_root().join("docs/formats.md")).unwrap();
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("docs/formats.md has no {heading:?}"));
    let section = &text[start + heading.len() + 2..];
    let end = section.find("\n#").unwrap_or(section.len());
    let mut keys = BTreeSet::new();
    for line in section[..end].lines() {
        let Some(cell) = line.strip_prefix("| `") else {
            continue;
        };
        let pattern = &cell[..cell.find('`').expect("a closing backquote")];
        keys.extend(expand_braces(pattern));
    }
    assert!(keys.len() > 10, "{heading}: only {keys:?}");
    keys
}

/// `a.{b,c}.d` → `a.b.d`, `a.c.d` (any number of groups).
fn expand_braces(pattern: &str) -> Vec<String> {
    let Some(open) = pattern.find('{') else {
        return vec![pattern.to_string()];
    };
    let close = open + pattern[open..].find('}').expect("a closing brace");
    pattern[open + 1..close]
        .split(',')
        .flat_map(|choice| {
            expand_braces(&format!(
                "{}{choice}{}",
                &pattern[..open],
                &pattern[close + 1..]
            ))
        })
        .collect()
}

/// Every key path of `value` as the tables write them (`a[].b`). An object documented without
/// documented keys below it is taken whole (a provenance); one documented with `.*` has keys
/// from the data; a list of numbers, strings or lists is one value.
fn walk(value: &Value, path: &str, documented: &BTreeSet<String>, out: &mut BTreeSet<String>) {
    // A list of objects is documented by its elements (`a[]`); an empty list by none, or as
    // one value where the tables name it so (a list of names, empty in this summary).
    let list_of_objects = value.as_array().is_some_and(|l| {
        (l.is_empty() && !documented.contains(path)) || l.iter().any(Value::is_object)
    });
    if !path.is_empty() && !list_of_objects {
        out.insert(path.to_string());
    }
    match value {
        Value::Object(map) => {
            let below = format!("{path}.");
            let whole = !path.is_empty()
                && documented.contains(path)
                && !documented.iter().any(|k| k.starts_with(&below));
            if whole {
                return;
            }
            let any_key = documented.contains(&format!("{path}.*"));
            for (key, v) in map {
                let key = if any_key { "*" } else { key.as_str() };
                let child = if path.is_empty() {
                    key.to_string()
                } else {
                    format!("{path}.{key}")
                };
                walk(v, &child, documented, out);
            }
        }
        Value::Array(list) => {
            for v in list.iter().filter(|v| v.is_object()) {
                walk(v, &format!("{path}[]"), documented, out);
            }
        }
        _ => {}
    }
}

fn check(heading: &str, summaries: &[Value]) {
    let documented = documented(heading);
    let mut seen = BTreeSet::new();
    for s in summaries {
        walk(s, "", &documented, &mut seen);
    }
    let undocumented: Vec<&String> = seen.difference(&documented).collect();
    let never_written: Vec<&String> = documented.difference(&seen).collect();
    assert!(
        undocumented.is_empty() && never_written.is_empty(),
        "{heading}\nwritten but not documented: {undocumented:?}\ndocumented but not written: {never_written:?}"
    );
}

fn meta_summary(fixture: &str, results: &[&str], extra: &[&str]) -> Value {
    let dir = common::fixtures().join(fixture);
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("summary.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hyoka"));
    cmd.current_dir(&dir).args([
        "meta",
        "--accept-unhashed",
        "--bootstrap",
        "20",
        "-i",
        "items.jsonl",
    ]);
    for r in results {
        cmd.args(["-s", r]);
    }
    cmd.args(extra).arg("--json").arg(&json);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn summary_json_keys_are_the_documented_ones() {
    // Two runs of one judge, told apart by their folders' names; the second with a rubric for
    // English (on the fixture's Japanese responses: named in `script.english_scorers`).
    let runs = tempfile::tempdir().unwrap();
    let judge = std::fs::read_to_string(common::fixtures().join("meta/judge.jsonl")).unwrap();
    let mut run_files = Vec::new();
    for (run, sha, rubric) in [
        ("runA", "\"sha256\": \"0\"", "\"name\": \"fixture\""),
        ("runB", "\"sha256\": \"1\"", "\"name\": \"fixture-en\""),
    ] {
        std::fs::create_dir(runs.path().join(run)).unwrap();
        let file = runs.path().join(run).join("judge.jsonl");
        let text =
            (judge.replace("\"sha256\": \"0\"", sha)).replace("\"name\": \"fixture\"", rubric);
        std::fs::write(&file, text).unwrap();
        run_files.push(file.to_string_lossy().into_owned());
    }
    let absolute = [
        meta_summary("meta", &["judge.jsonl", "bertscore.jsonl"], &["--fit-w"]),
        meta_summary("dbdc", &["judge.jsonl"], &["--calibrate"]),
        meta_summary("meta", &[&run_files[0], &run_files[1]], &[]),
    ];
    check("### summary.json keys", &absolute);

    use hyoka::meta::pairwise::{PairwiseOptions, join, summarize};
    let (mut items, records) = super::pairwise::hand_made_verdicts();
    // Responses of different lengths: the style-controlled fit has a covariate.
    super::pairwise::with_different_lengths(&mut items);
    let frame = join(&items, records, std::path::Path::new("pairs.jsonl")).unwrap();
    let options = PairwiseOptions {
        bootstrap: 50,
        ..PairwiseOptions::default()
    };
    let pairwise = serde_json::to_value(summarize(&frame, &options)).unwrap();
    // A run against a baseline: length-controlled win rates.
    let run = &super::length_controlled_parity::fixture()["runs"][0];
    let (items, records) = super::length_controlled_parity::baseline_run(run);
    let frame = join(&items, records, std::path::Path::new("pairs.jsonl")).unwrap();
    let against_baseline = serde_json::to_value(summarize(&frame, &options)).unwrap();
    check(
        "### summary.json keys, pairwise rubrics",
        &[pairwise, against_baseline],
    );
}
