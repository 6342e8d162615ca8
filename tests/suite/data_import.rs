//! DBDC3 import and the strict JSONL reader, checked against the raw DBDC3 files read here
//! independently (plain serde_json over the original labels).

use crate::common;

use hyoka::data::{self, HumanRating, dbdc3};
use serde_json::Value;
use std::collections::HashMap;

/// A turn's annotations: breakdown labels, ungrammatical-sentence labels, annotator ids.
type Labels = (Vec<String>, Vec<String>, Vec<String>);

/// Raw labels straight from the DBDC3 files: (folder/dialogue/turn-index) -> annotations.
fn raw_labels() -> HashMap<String, Labels> {
    let mut out = HashMap::new();
    for system in ["DCM", "DIT", "IRS"] {
        for entry in std::fs::read_dir(common::dbdc3_dir().join(system)).unwrap() {
            let doc: Value =
                serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap())
                    .unwrap();
            let did = doc["dialogue-id"].as_str().unwrap().to_string();
            for t in doc["turns"].as_array().unwrap() {
                if t["speaker"] == "S" {
                    let anns = t["annotations"].as_array().unwrap();
                    let get = |k: &str| {
                        anns.iter()
                            .map(|a| a[k].as_str().unwrap().to_string())
                            .collect::<Vec<_>>()
                    };
                    out.insert(
                        format!("{system}/{did}/{}", t["turn-index"]),
                        (
                            get("breakdown"),
                            get("ungrammatical-sentence"),
                            get("annotator-id"),
                        ),
                    );
                }
            }
        }
    }
    out
}

#[test]
fn dbdc3_import_keeps_every_rater() {
    let items = dbdc3::import(&common::dbdc3_dir(), &Default::default())
        .unwrap()
        .items;
    let raw = raw_labels();
    assert_eq!(items.len(), 1650);
    assert_eq!(raw.len(), 1650);
    let any_flagged = raw
        .values()
        .any(|(_, ungrammatical, _)| ungrammatical.iter().any(|l| l == "X"));
    assert!(
        !any_flagged,
        "no rater of the shipped sample flags an utterance"
    );
    for item in &items {
        let (breakdown, ungrammatical, ids) = raw
            .get(&item.id)
            .unwrap_or_else(|| panic!("unexpected id {}", item.id));
        let expect_b: Vec<f64> = breakdown
            .iter()
            .map(|l| match l.as_str() {
                "O" => 1.0,
                "T" => 0.5,
                "X" => 0.0,
                _ => panic!(),
            })
            .collect();
        let expect_u: Vec<f64> = ungrammatical
            .iter()
            .map(|l| if l == "X" { 1.0 } else { 0.0 })
            .collect();
        assert_eq!(
            item.human["breakdown"],
            HumanRating::PerRater(expect_b),
            "{}",
            item.id
        );
        // The Japanese release's raters flagged no utterance ungrammatical: an aspect no rater
        // used is not imported.
        if any_flagged {
            assert_eq!(
                item.human["ungrammatical"],
                HumanRating::PerRater(expect_u),
                "{}",
                item.id
            );
        } else {
            assert!(!item.human.contains_key("ungrammatical"), "{}", item.id);
        }
        assert_eq!(&item.raters, ids);
        assert_eq!(item.response.speaker, "S");
        assert_eq!(item.human["breakdown"].rater_count(), 30);
    }
    let per_system = data::summarize(&items).systems;
    assert_eq!(per_system.values().sum::<usize>(), 1650);
    assert_eq!(per_system.len(), 3);
}

#[test]
fn dbdc3_context_is_everything_said_before() {
    let items = dbdc3::import(&common::dbdc3_dir(), &Default::default())
        .unwrap()
        .items;
    let item = items.iter().find(|i| i.id == "DCM/1502867549/2").unwrap();
    let texts: Vec<&str> = item.context.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "こんにちは。熱中症に気をつけて。",
            "今日は涼しいから大丈夫だよ"
        ]
    );
    assert_eq!(item.context[1].speaker, "U");
    assert_eq!(item.response.text, "いいですねえ");
    assert_eq!(item.dialogue.as_deref(), Some("1502867549"));
    // The opening utterance has no context.
    let first = items.iter().find(|i| i.id == "DCM/1502867549/0").unwrap();
    assert!(first.context.is_empty());
    // --max-context keeps the most recent turns.
    let short = dbdc3::import(
        &common::dbdc3_dir(),
        &dbdc3::Dbdc3Options {
            max_context: Some(1),
            tree: None,
        },
    )
    .unwrap()
    .items;
    let item = short.iter().find(|i| i.id == "DCM/1502867549/2").unwrap();
    assert_eq!(item.context.len(), 1);
    assert_eq!(item.context[0].text, "今日は涼しいから大丈夫だよ");
}

#[test]
fn written_items_read_back_identically() {
    let items = dbdc3::import(&common::dbdc3_dir(), &Default::default())
        .unwrap()
        .items;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("items.jsonl");
    data::write_items(&path, &items).unwrap();
    let back = data::read_items(&path, false).unwrap();
    assert_eq!(back.items, items);
    assert_eq!(back.lines.len(), items.len());
}

fn parse_err(line: &str) -> (String, String) {
    data::parse_item(line).unwrap_err()
}

#[test]
fn reader_names_the_field_that_is_wrong() {
    let ok = r#"{"id": "a", "context": [{"speaker": "U", "text": "こんにちは"}], "response": {"speaker": "S", "text": "どうも"}}"#;
    assert!(data::parse_item(ok).is_ok());
    let cases = [
        (
            r#"{"id": "a", "context": [], "response": {"speaker": "S"}}"#,
            "response.text",
            "missing",
        ),
        (
            r#"{"id": "a", "context": [{"speaker": "U", "text": 42}], "response": {"speaker": "S", "text": "x"}}"#,
            "context[0].text",
            "expected a string, found number 42",
        ),
        (
            r#"{"context": [], "response": {"speaker": "S", "text": "x"}}"#,
            "id",
            "missing",
        ),
        (
            r#"{"id": "a", "response": {"speaker": "S", "text": "x"}, "refrence": "y"}"#,
            "refrence",
            "unknown field",
        ),
        (
            r#"{"id": "a", "response": {"speaker": "S", "text": "x"}, "human": {"q": [1, "2"]}}"#,
            "human.q[1]",
            "expected a number",
        ),
        (
            r#"{"id": "a", "response": {"speaker": "S", "text": "x"}, "human": {"q": [1, 2]}, "raters": ["r1"]}"#,
            "human.q",
            "2 values but 1 raters",
        ),
        (
            r#"{"id": "a", "response": "just text"}"#,
            "response",
            "expected an object",
        ),
        (
            r#"{"id": "a", "response": {"speaker": "S", "text": "x"}, "reference": []}"#,
            "reference",
            "empty list",
        ),
        (r#"[1, 2]"#, "", "expected a JSON object"),
        (r#"{"id": "a", "#, "", "not valid JSON"),
    ];
    for (line, field, message) in cases {
        let (f, m) = parse_err(line);
        assert_eq!(f, field, "{line}");
        assert!(m.contains(message), "{line}: {m}");
    }
}

#[test]
fn duplicate_ids_and_skip_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.jsonl");
    let good =
        |id: &str| format!(r#"{{"id": "{id}", "response": {{"speaker": "S", "text": "x"}}}}"#);
    std::fs::write(
        &path,
        format!("{}\n\n{}\n{{bad\n{}\n", good("a"), good("b"), good("a")),
    )
    .unwrap();
    let err = data::read_items(&path, false).unwrap_err().to_string();
    assert!(err.contains("x.jsonl:4: not valid JSON"), "{err}");
    let read = data::read_items(&path, true).unwrap();
    assert_eq!(read.items.len(), 2);
    assert_eq!(read.lines, vec![1, 3]);
    assert_eq!(read.skipped.len(), 2);
    assert!(
        read.skipped[1]
            .to_string()
            .contains("x.jsonl:5: id: duplicate id \"a\" (first on line 1)"),
        "{}",
        read.skipped[1]
    );
}

/// The shipped archive, read by hyoka, gives the items of the folder the system's tar unpacks
/// from it; a file that is not an archive is named in the error.
#[test]
fn the_shipped_archive_imports_as_its_unpacked_folder() {
    let from_folder = dbdc3::import(&common::dbdc3_dir(), &Default::default())
        .unwrap()
        .items;
    let from_archive = dbdc3::import(&common::dbdc3_archive(), &Default::default())
        .unwrap()
        .items;
    assert_eq!(from_folder.len(), 1650);
    assert_eq!(from_archive, from_folder);

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.tar.gz");
    std::fs::write(&bad, b"not gzip").unwrap();
    let err = dbdc3::import(&bad, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("broken.tar.gz") && err.contains("not a readable .tar.gz"),
        "{err}"
    );
    let other = dir.path().join("items.jsonl");
    std::fs::write(&other, b"{}").unwrap();
    let err = dbdc3::import(&other, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("items.jsonl") && err.contains(".tar.gz"),
        "{err}"
    );
}
