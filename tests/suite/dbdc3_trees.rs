//! Every set of dialogues of the challenge's DBDC3 archive: the English data shipped in
//! data/dbdc3-en.tar.gz (unpacked by the system's tar and read here with plain serde_json,
//! independently of hyoka's reader), and an excerpt of DBDC3.zip in its exact layout
//! (tests/fixtures/dbdc3-zip: two dialogues of every system of all six trees).

use crate::common;
use hyoka::data::{HumanRating, dbdc3};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// data/dbdc3-en.tar.gz unpacked by the system's tar.
fn english_folder(into: &Path) -> PathBuf {
    let archive = common::repo_root().join("data/dbdc3-en.tar.gz");
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(into)
        .status()
        .expect("tar runs");
    assert!(status.success());
    into.join("dbdc3-en")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_english_eval_set_imports_with_unannotated_turns_as_context() {
    let dir = tempfile::tempdir().unwrap();
    let folder = english_folder(dir.path());
    let imported = dbdc3::import(
        &common::repo_root().join("data/dbdc3-en.tar.gz"),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(
        (
            imported.items.len(),
            imported.dialogues,
            imported.unannotated
        ),
        (2000, 200, 89)
    );
    // The unpacked folder gives the same items.
    let from_folder = dbdc3::import(&folder, &Default::default()).unwrap();
    assert_eq!(from_folder.items, imported.items);
    let by_id: std::collections::HashMap<&str, &hyoka::data::Item> =
        imported.items.iter().map(|i| (i.id.as_str(), i)).collect();
    let (mut seen, mut unannotated) = (0, 0);
    for system in ["CIC_50", "IRIS_50", "TKTK_50", "YI_50"] {
        for entry in std::fs::read_dir(folder.join(system)).unwrap() {
            let doc = read_json(&entry.unwrap().path());
            let dialogue = doc["dialogue-id"].as_str().unwrap();
            let turns = doc["turns"].as_array().unwrap();
            for (i, t) in turns.iter().enumerate() {
                if t["speaker"] != "S" {
                    continue;
                }
                let id = format!("{system}/{dialogue}/{}", t["turn-index"]);
                let annotations = t["annotations"].as_array().unwrap();
                if annotations.is_empty() {
                    unannotated += 1;
                    assert!(!by_id.contains_key(id.as_str()), "{id} has no ratings");
                    continue;
                }
                seen += 1;
                let item = by_id[id.as_str()];
                // Everything said before, the unannotated system turns included.
                let context: Vec<&str> = turns[..i]
                    .iter()
                    .map(|c| c["utterance"].as_str().unwrap())
                    .collect();
                let got: Vec<&str> = item.context.iter().map(|c| c.text.as_str()).collect();
                assert_eq!(got, context, "{id}");
                let labels: Vec<f64> = annotations
                    .iter()
                    .map(|a| match a["breakdown"].as_str().unwrap() {
                        "O" => 1.0,
                        "T" => 0.5,
                        "X" => 0.0,
                        other => panic!("{other}"),
                    })
                    .collect();
                assert_eq!(item.human["breakdown"], HumanRating::PerRater(labels));
                let raters: Vec<&str> = annotations
                    .iter()
                    .map(|a| a["annotator-id"].as_str().unwrap())
                    .collect();
                assert_eq!(item.raters, raters);
                // The English raters were not asked about grammar: no such rating.
                assert!(!item.human.contains_key("ungrammatical"), "{id}");
                assert_eq!(
                    item.meta,
                    Some(serde_json::json!({"dbdc3": {"language": "en"}}))
                );
            }
        }
    }
    assert_eq!((seen, unannotated), (2000, 89));
}

#[test]
fn every_tree_of_the_challenges_archive_imports_by_name() {
    let zip = common::fixtures().join("dbdc3-zip/DBDC3-excerpt.zip");
    let err = dbdc3::import(&zip, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("holds 6 sets") && err.contains("--tree"),
        "{err}"
    );
    let tree = |t: &str| {
        dbdc3::import(
            &zip,
            &dbdc3::Dbdc3Options {
                max_context: None,
                tree: Some(t.into()),
            },
        )
        .unwrap()
    };
    // 2 dialogues of each system: 3 Japanese systems, 4 English ones.
    for (name, language, revised, dialogues) in [
        ("dbdc3/ja/eval", "ja", false, 6),
        ("dbdc3/en/dev", "en", false, 8),
        ("dbdc3/en/eval", "en", false, 8),
        ("dbdc3_revised/ja/eval", "ja", true, 6),
        ("dbdc3_revised/en/dev", "en", true, 8),
        ("dbdc3_revised/en/eval", "en", true, 8),
    ] {
        let got = tree(name);
        assert_eq!((got.tree.as_str(), got.dialogues), (name, dialogues));
        let meta =
            serde_json::json!({"dbdc3": {"tree": name, "language": language, "revised": revised}});
        assert!(
            got.items.iter().all(|i| i.meta.as_ref() == Some(&meta)),
            "{name}"
        );
    }
    // The original English eval tree holds the shipped archive's labels for the same dialogues.
    let shipped = dbdc3::import(
        &common::repo_root().join("data/dbdc3-en.tar.gz"),
        &Default::default(),
    )
    .unwrap()
    .items;
    let original = tree("dbdc3/en/eval").items;
    let revised = tree("dbdc3_revised/en/eval").items;
    for item in &original {
        let same = shipped.iter().find(|s| s.id == item.id).unwrap();
        assert_eq!((&same.human, &same.context), (&item.human, &item.context));
    }
    // The revision relabeled CIC and YI, not IRIS.
    let differs = |prefix: &str| {
        original
            .iter()
            .filter(|i| i.id.starts_with(prefix))
            .any(|i| revised.iter().find(|r| r.id == i.id).unwrap().human != i.human)
    };
    assert!(differs("CIC_50/") && differs("YI_50/") && !differs("IRIS_50/"));
    // A path as `unzip -l` shows it names its tree; an ending shared by two is refused; an entry
    // that climbs out of the archive is refused.
    assert_eq!(tree("DBDC3/dbdc3/ja/eval/").tree, "dbdc3/ja/eval");
    let shared = dbdc3::import(
        &zip,
        &dbdc3::Dbdc3Options {
            max_context: None,
            tree: Some("en/eval".into()),
        },
    )
    .unwrap_err()
    .to_string();
    assert!(shared.contains("names 2 sets"), "{shared}");
    // From the command line: refused with the list and exit 3, nothing written; then by name.
    let out = tempfile::tempdir().unwrap();
    let items = out.path().join("items.jsonl");
    let import = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args(["import", "dbdc3"])
            .arg(&zip)
            .arg("-o")
            .arg(&items)
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = import(&[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{err}");
    assert!(err.contains("dbdc3_revised/en/dev (8 dialogues)"), "{err}");
    assert!(!items.exists());
    let done = import(&["--tree", "dbdc3/en/eval"]);
    assert!(done.status.success());
    assert_eq!(
        hyoka::data::read_items(&items, false).unwrap().items,
        tree("dbdc3/en/eval").items
    );
    let hostile = common::fixtures().join("dbdc3-zip/climbs-out.zip");
    let err = dbdc3::import(&hostile, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("lies outside the archive"), "{err}");
}
