//! DUO (ikuminumaya/duo-dataset) on a fixture in its exact layout and schema
//! (tests/fixtures/duo, scripts/fixtures/make_duo_fixtures.py; DUO's ED part is CC BY-NC and is
//! not shipped): every rating and turn against the fixture read with plain serde_json, the set
//! chosen, bad ratings named, and `import → judge → meta` with a test judge.

use crate::common;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hyoka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args(args)
        .output()
        .expect("hyoka runs")
}

fn dataset() -> PathBuf {
    common::fixtures().join("duo/duo-dataset")
}

fn import(from: &Path, set: Option<&str>, out: &Path) -> Output {
    let mut args = vec![
        "import",
        "duo",
        from.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    if let Some(s) = set {
        args.extend(["--set", s]);
    }
    hyoka(&args)
}

fn lines(path: &Path) -> Vec<Value> {
    (std::fs::read_to_string(path).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn every_rating_and_turn_of_a_set_is_imported() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ed.jsonl");
    let run = import(&dataset(), Some("ed/ja"), &out);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let items = lines(&out);
    assert_eq!(items.len(), 3);
    for item in &items {
        let number = item["id"].as_str().unwrap().trim_start_matches("ed-ja-");
        let path = dataset().join(format!("ed/ja/{number}.json"));
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(item["scope"], "dialogue");
        assert_eq!(item["system"], doc["model"]);
        assert_eq!(item["dialogue"], item["id"]);
        let turns = doc["dialogue"].as_array().unwrap();
        let written: Vec<&Value> = (item["context"].as_array().unwrap().iter())
            .chain([&item["response"]])
            .collect();
        assert_eq!(written.len(), turns.len());
        for (t, w) in turns.iter().zip(written) {
            assert_eq!((&t["speaker"], &t["message"]), (&w["speaker"], &w["text"]));
        }
        for key in [
            "preference",
            "stylistic_similarity",
            "consistency",
            "empathy",
        ] {
            assert_eq!(
                item["human"][format!("user_{key}")],
                doc["subjective_evaluation"][key]
            );
            // The annotators' ratings, one per annotator; none where the file has none.
            assert_eq!(
                item["human"][key],
                doc["objective_evaluation"][format!("{key}_scores")]
            );
        }
        let meta = &item["meta"]["duo"];
        assert_eq!(
            (&meta["emotion"], &meta["episode"]),
            (&doc["emotion"], &doc["episode"])
        );
        assert_eq!(meta["user"], turns[0]["user_id"]);
        assert!(item.get("raters").is_none());
    }
    // Several sets and none named: say which there are. A named set is taken alone.
    let run = import(&dataset(), None, &out);
    assert_eq!(run.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&run.stderr)
            .contains("holds the sets ed/ja, wow/en, wow/ja: choose one with --set")
    );
    let run = import(&dataset(), Some("wow/ja"), &out);
    assert!(run.status.success());
    let wow = lines(&out);
    assert_eq!(wow.len(), 2);
    assert_eq!(
        wow[0]["human"]["engagingness"],
        serde_json::json!([4.0, 3.0, 3.0])
    );
    assert_eq!(wow[0]["meta"]["duo"]["topic"], "灯台");
}

#[test]
fn a_bad_rating_is_named_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("duo-dataset");
    for set in ["ed/ja", "wow/ja", "wow/en"] {
        std::fs::create_dir_all(copy.join(set)).unwrap();
        for entry in std::fs::read_dir(dataset().join(set)).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, copy.join(set).join(path.file_name().unwrap())).unwrap();
        }
    }
    let file = copy.join("wow/ja/3001.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    doc["subjective_evaluation"]["engagingness"] = serde_json::json!(7.0);
    std::fs::write(&file, doc.to_string()).unwrap();
    let out = dir.path().join("out.jsonl");
    let run = import(&copy, Some("wow/ja"), &out);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    assert!(
        stderr
            .contains("3001.json: subjective_evaluation.engagingness: 7 is outside the scale 1–5"),
        "{stderr}"
    );
    assert!(!out.exists());
}

#[test]
fn import_judge_and_meta_of_whole_dialogues() {
    let Some(judge) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let items = dir.path().join("ed.jsonl");
    assert!(import(&dataset(), Some("ed/ja"), &items).status.success());
    let out = dir.path().join("judge.jsonl");
    let [model, items_path, out_path] = [&judge, &items, &out].map(|p| p.to_str().unwrap());
    let run = hyoka(&[
        "judge",
        "--rubric",
        "duo-ed-ja",
        "--model",
        model,
        "-i",
        items_path,
        "-o",
        out_path,
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary = dir.path().join("summary.json");
    let run = hyoka(&[
        "meta",
        "-i",
        items_path,
        "-s",
        out_path,
        "--json",
        summary.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let s: Value = serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap();
    assert_eq!(s["whole_dialogues"], true);
    let correlations = s["correlations"].as_array().unwrap();
    // The aspect is compared with the annotators' ratings (two dialogues have them) and the
    // user's (all three).
    for (human, n) in [("preference", 2), ("user_preference", 3)] {
        let cell = (correlations.iter())
            .find(|c| c["level"] == "item" && c["human"] == human && c["row"] == "judge expected")
            .unwrap_or_else(|| panic!("no item-level cell for {human}: {correlations:?}"));
        assert_eq!(cell["n"], n, "{cell}");
    }
}
