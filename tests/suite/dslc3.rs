//! The Dialogue System Live Competition 3's data (data/dslc3.zip, the organisers'
//! livecompetition3.zip): every dialogue and rating of both tracks against the archive unpacked
//! by Python's zipfile and read here with plain serde_json and a split of the CSV lines; bad
//! input named by file and line; whole-dialogue items judged only by whole-dialogue rubrics and
//! left out by BERTScore; and `import → judge → meta` at the dialogue level with a test judge.

use crate::common;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hyoka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args(args)
        .output()
        .expect("hyoka runs")
}

fn archive() -> PathBuf {
    common::repo_root().join("data/dslc3.zip")
}

/// data/dslc3.zip unpacked by Python's zipfile: the folder livecompetition3/.
fn unpacked(into: &Path) -> PathBuf {
    let status = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(archive())
        .arg(into)
        .status()
        .expect("python3 runs");
    assert!(status.success());
    into.join("livecompetition3")
}

fn items_of(path: &Path) -> Vec<Value> {
    (std::fs::read_to_string(path).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn judge(rubric: &str, model: &Path, items: &Path, out: &Path) -> Output {
    let [model, items, out] = [model, items, out].map(|p| p.to_str().unwrap());
    hyoka(&[
        "judge", "--rubric", rubric, "--model", model, "-i", items, "-o", out,
    ])
}

fn import(track: &str, from: &Path, out: &Path) -> Output {
    let (from, out) = (from.to_str().unwrap(), out.to_str().unwrap());
    hyoka(&["import", "dslc3", from, "--track", track, "-o", out])
}

#[test]
fn both_tracks_import_every_dialogue_with_its_ratings() {
    let dir = tempfile::tempdir().unwrap();
    let folder = unpacked(dir.path());
    let expected_counts = [
        (
            "open",
            vec![
                ("CHC", 46),
                ("HBY", 52),
                ("ILA", 51),
                ("MM2", 38),
                ("NJT", 52),
            ],
        ),
        (
            "situation",
            vec![
                ("AKT", 53),
                ("FCL", 50),
                ("IRS", 50),
                ("KOM", 39),
                ("RSL", 52),
                ("V2R", 52),
            ],
        ),
    ];
    let mut total = 0;
    for (track, counts) in expected_counts {
        let out = dir.path().join(format!("{track}.jsonl"));
        let run = import(track, &archive(), &out);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let items = items_of(&out);
        // The unpacked folder gives the same file.
        let again = dir.path().join(format!("{track}-folder.jsonl"));
        assert!(import(track, &folder, &again).status.success());
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());
        let by_id: BTreeMap<&str, &Value> = items
            .iter()
            .map(|i| (i["id"].as_str().unwrap(), i))
            .collect();
        let keys: &[&str] = if track == "open" {
            &["naturalness", "topic_following", "topic_offering"]
        } else {
            &["situation_humanlike"]
        };
        let mut per_system = Vec::new();
        for (system, count) in counts {
            let scores =
                std::fs::read_to_string(folder.join(track).join(format!("{system}_score.csv")))
                    .unwrap();
            let mut rows = 0;
            for line in scores.lines().filter(|l| !l.trim().is_empty()) {
                let fields: Vec<&str> = line.split(',').collect();
                let item = by_id[fields[0]];
                assert_eq!(item["system"], system);
                assert_eq!(item["scope"], "dialogue");
                assert_eq!(item["dialogue"], fields[0]);
                for (k, key) in keys.iter().enumerate() {
                    let rating: f64 = fields[1 + k].parse().unwrap();
                    assert_eq!(
                        item["human"][key].as_f64().unwrap(),
                        rating,
                        "{} {key}",
                        fields[0]
                    );
                }
                if track == "open" {
                    // The topics as written, white space around them (some end in U+3000) left out.
                    let topics: Vec<&str> = fields[4..]
                        .iter()
                        .map(|t| t.trim_matches('"').trim())
                        .collect();
                    assert_eq!(item["meta"]["dslc3"]["topics"], serde_json::json!(topics));
                }
                let log = folder
                    .join(track)
                    .join(system)
                    .join(format!("{}.log.json", fields[0]));
                let doc: Value =
                    serde_json::from_str(&std::fs::read_to_string(log).unwrap()).unwrap();
                let turns = doc["turns"].as_array().unwrap();
                let context = item["context"].as_array().unwrap();
                assert_eq!(context.len() + 1, turns.len());
                for (t, c) in turns.iter().zip(context.iter().chain([&item["response"]])) {
                    assert_eq!(
                        (&t["speaker"], &t["utterance"]),
                        (&c["speaker"], &c["text"])
                    );
                }
                rows += 1;
            }
            per_system.push((system, rows));
            assert_eq!(rows, count, "{system}");
        }
        assert_eq!(
            items.len(),
            per_system.iter().map(|(_, n)| n).sum::<usize>()
        );
        total += items.len();
    }
    assert_eq!(total, 535);
}

#[test]
fn bad_ratings_and_unmatched_dialogues_are_named_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let folder = unpacked(dir.path());
    let out = dir.path().join("out.jsonl");
    // Both tracks and no --track: say which there are.
    let run = hyoka(&[
        "import",
        "dslc3",
        archive().to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&run.stderr)
            .contains("open and situation: choose one with --track")
    );
    let scores = folder.join("open/CHC_score.csv");
    let text = std::fs::read_to_string(&scores).unwrap();
    let bad = text.replacen("CHC_02,2,2,2", "CHC_02,6,2,2", 1);
    std::fs::write(&scores, bad).unwrap();
    let run = import("open", &folder, &out);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("CHC_score.csv:2: naturalness: 6 is outside the scale 1–5"),
        "{stderr}"
    );
    assert!(!out.exists());
    // A rating line without its dialogue, and a dialogue without its rating line.
    std::fs::write(&scores, format!("{text}CHC_99,1,1,1,\"a\",\"b\"\n")).unwrap();
    let stderr = String::from_utf8_lossy(&import("open", &folder, &out).stderr).into_owned();
    assert!(
        stderr.contains(
            "CHC_score.csv:47: dialogue id: \"CHC_99\": no such dialogue in the folder CHC"
        ),
        "{stderr}"
    );
    let without_first: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(&scores, without_first).unwrap();
    let run = import("open", &folder, &out);
    assert_eq!(run.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&run.stderr)
            .contains("CHC_01.log.json: dialogue CHC_01 has no line in")
    );
    assert!(!out.exists());
    // A folder that is not the competition's.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let run = import("open", &elsewhere, &out);
    assert_eq!(run.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&run.stderr)
            .contains("no DSLC3 track found: expected open/<SYS>/<SYS>_NN.log.json")
    );
}

/// `n` whole dialogues of the open track.
fn open_dialogues(dir: &Path, n: usize) -> PathBuf {
    let out = dir.join("open.jsonl");
    let run = hyoka(&[
        "import",
        "dslc3",
        archive().to_str().unwrap(),
        "--track",
        "open",
        "--sample-dialogues",
        &n.to_string(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(run.status.success());
    out
}

#[test]
fn whole_dialogues_meet_only_whole_dialogue_rubrics_and_bertscore_leaves_them_out() {
    let Some(judge_model) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let items = open_dialogues(dir.path(), 3);
    let out = dir.path().join("judge.jsonl");
    let run = judge("breakdown3-ja", &judge_model, &items, &out);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("judges a response in its context, and item"),
        "{stderr}"
    );
    assert!(!out.exists());
    // A whole-dialogue rubric on turns.
    let turns = common::repo_root().join("examples/items.jsonl");
    let run = judge("dslc3-open-ja", &judge_model, &turns, &out);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("judges whole dialogues"));
    assert!(!out.exists());
    let Some(encoder) = common::test_model("multilingual-e5-small") else {
        return;
    };
    let scores = dir.path().join("bertscore.jsonl");
    let run = hyoka(&[
        "bertscore",
        "--model",
        encoder.to_str().unwrap(),
        "--against",
        "last-turn",
        "-i",
        items.to_str().unwrap(),
        "-o",
        scores.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    for line in items_of(&scores) {
        assert_eq!(line["not_applicable"], true, "{line}");
        assert!(
            line["error"].as_str().unwrap().contains("a whole dialogue"),
            "{line}"
        );
    }
}

#[test]
fn import_judge_and_meta_at_the_dialogue_level() {
    let Some(judge_model) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let items = open_dialogues(dir.path(), 4);
    let out = dir.path().join("judge.jsonl");
    let run = judge("dslc3-open-ja", &judge_model, &items, &out);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let lines = items_of(&out);
    assert_eq!(lines.len(), 4);
    for line in &lines {
        for key in ["naturalness", "topic_following", "topic_offering"] {
            let probs = line["scores"][key]["distribution"].as_object().unwrap();
            let keys: Vec<&str> = probs.keys().map(String::as_str).collect();
            assert_eq!(keys, ["1", "2", "3", "4", "5"], "{line}");
        }
    }
    let summary = dir.path().join("summary.json");
    let run = hyoka(&[
        "meta",
        "-i",
        items.to_str().unwrap(),
        "-s",
        out.to_str().unwrap(),
        "--json",
        summary.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("### Item level (whole dialogues)"),
        "{stdout}"
    );
    assert!(!stdout.contains("Within dialogue"), "{stdout}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap();
    assert_eq!(s["whole_dialogues"], true);
    let correlations = s["correlations"].as_array().unwrap();
    assert!(correlations.iter().all(|c| c["level"] != "dialogue"));
    for key in ["naturalness", "topic_following", "topic_offering"] {
        let cell = correlations
            .iter()
            .find(|c| c["level"] == "item" && c["human"] == key && c["row"] == "judge expected")
            .unwrap_or_else(|| panic!("no item-level cell for {key}"));
        assert_eq!(cell["n"], 4, "{cell}");
    }
}
