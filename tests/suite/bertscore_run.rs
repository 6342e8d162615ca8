//! `hyoka bertscore` as users run it: pairs with the last turn or the references, items without
//! a reference counted (exit 0, not failures) and kept as such by a rerun, the numbers equal to bert_score's
//! (the parity fixture's pairs), and a cut-short output continued without rescoring.

use crate::common;

use serde_json::Value;
use std::process::Command;

fn hyoka(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args(args)
        .output()
        .expect("hyoka runs")
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn last_turn_pairs_match_bert_score_and_resume() {
    let Some(minilm) = common::test_model("all-MiniLM-L6-v2") else {
        return;
    };
    let fx: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixtures().join("bert/expected.json")).unwrap(),
    )
    .unwrap();
    let case = fx["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "minilm-idf")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let items = dir.path().join("items.jsonl");
    let mut text = String::new();
    for (i, (c, r)) in case["cands"]
        .as_array()
        .unwrap()
        .iter()
        .zip(case["refs"].as_array().unwrap())
        .enumerate()
    {
        let item = serde_json::json!({"id": format!("p{i}"), "context": [{"speaker": "B", "text": r[0]}], "response": {"speaker": "A", "text": c}});
        text.push_str(&format!("{item}\n"));
    }
    std::fs::write(&items, text).unwrap();
    let out = dir.path().join("scores.jsonl");
    let args = [
        "bertscore",
        "--model",
        minilm.to_str().unwrap(),
        "--layer",
        "4",
        "--idf",
        "--bert-score-batch",
        "4",
        "--against",
        "last-turn",
        "-i",
        items.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    // --idf with last-turn pairs: the idf comes from the last turns, as bert_score's from its refs.
    let r = hyoka(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let first = lines(&out);
    assert_eq!(first.len(), case["F"].as_array().unwrap().len());
    for (l, f) in first.iter().zip(case["F"].as_array().unwrap()) {
        assert!(
            (l["bertscore"]["F"].as_f64().unwrap() - f.as_f64().unwrap()).abs() < 1e-5,
            "{l}"
        );
        assert_eq!(l["provenance"]["task"], "bertscore");
        assert_eq!(l["provenance"]["settings"]["layer"], 4);
    }
    // A run cut short after 3 lines (and half a fourth) continues with the same numbers.
    let content = std::fs::read_to_string(&out).unwrap();
    let keep: Vec<&str> = content.lines().take(3).collect();
    std::fs::write(
        &out,
        format!(
            "{}\n{}",
            keep.join("\n"),
            &content.lines().nth(3).unwrap()[..20]
        ),
    )
    .unwrap();
    let r = hyoka(&args);
    assert!(r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("3 already in"));
    assert_eq!(lines(&out), first);
    // Another layer is another run: refused (exit 3).
    let mut other = args.to_vec();
    other[4] = "3";
    assert_eq!(hyoka(&other).status.code(), Some(3));
}

#[test]
fn items_without_a_reference_are_reported_not_fatal() {
    let Some(minilm) = common::test_model("all-MiniLM-L6-v2") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.jsonl");
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/items.jsonl");
    let items = dir.path().join("items.jsonl");
    std::fs::copy(&examples, &items).unwrap();
    let run = || {
        hyoka(&[
            "bertscore",
            "--model",
            minilm.to_str().unwrap(),
            "--layer",
            "6",
            "-i",
            items.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
    };
    // Nothing to compare with by definition: counted and said, not a failure (exit 0).
    let r = run();
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains("exercise-1: no `reference`"), "{stderr}");
    let l = lines(&out);
    assert_eq!(l.len(), 4);
    let unscored: Vec<&Value> = l.iter().filter(|x| x.get("error").is_some()).collect();
    assert_eq!(unscored.len(), 2);
    assert!(
        unscored.iter().all(|x| x["not_applicable"] == true),
        "{l:?}"
    );
    // meta tells them from failures.
    let m = hyoka(&[
        "meta",
        "-i",
        items.to_str().unwrap(),
        "-s",
        out.to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&m.stderr);
    assert!(m.status.success(), "{said}");
    assert!(
        said.contains("2 of its 4 lines for these items are not applicable"),
        "{said}"
    );
    assert!(!said.contains("error lines"), "{said}");
    // A rerun keeps those lines (scoring them again would find no reference again), says the
    // same and leaves the file as it was.
    let before = std::fs::read(&out).unwrap();
    let r = run();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("exercise-1: no `reference`"), "{stderr}");
    assert!(stderr.contains("scored 0 items"), "{stderr}");
    assert!(!stderr.contains("scored again"), "{stderr}");
    assert_eq!(std::fs::read(&out).unwrap(), before);
    // Given a reference, the item is another input: its line is replaced by a score.
    let edited: String = std::fs::read_to_string(&items)
        .unwrap()
        .lines()
        .map(|line| {
            let mut item: Value = serde_json::from_str(line).unwrap();
            if item["id"] == "exercise-1" {
                item["reference"] = serde_json::json!(["それはおめでとうございます！"]);
            }
            format!("{item}\n")
        })
        .collect();
    std::fs::write(&items, edited).unwrap();
    let r = run();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains("scored 1 items"), "{stderr}");
    assert!(!stderr.contains("exercise-1: no `reference`"), "{stderr}");
    let l = lines(&out);
    assert_eq!(l.len(), 4);
    let exercise = l.iter().find(|x| x["id"] == "exercise-1").unwrap();
    assert!(exercise["bertscore"]["F"].is_f64(), "{exercise}");
    // No default layer for a model bert_score does not know: a clear error.
    let r = hyoka(&[
        "bertscore",
        "--model",
        minilm.to_str().unwrap(),
        "-i",
        examples.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("--layer: bert_score has no default layer")
    );
}

/// The registry copy of multilingual-e5-small named with --model: its layer (12), numbers equal
/// to bert_score's on that folder, its 4-bit origin in the provenance; `--rescale --lang ja`
/// uses the shipped Japanese baseline.
#[test]
fn the_named_e5_copy_scores_at_its_layer_with_its_baseline() {
    let Some(e5) = common::test_model("multilingual-e5-small") else {
        return;
    };
    let fx: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixtures().join("bert/expected.json")).unwrap(),
    )
    .unwrap();
    let case = |name: &str| {
        fx["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let plain = case("e5-L12");
    let dir = tempfile::tempdir().unwrap();
    let items = dir.path().join("items.jsonl");
    let mut text = String::new();
    for (i, (c, r)) in plain["cands"]
        .as_array()
        .unwrap()
        .iter()
        .zip(plain["refs"].as_array().unwrap())
        .enumerate()
    {
        text.push_str(&format!("{}\n", serde_json::json!({"id": format!("p{i}"), "response": {"speaker": "A", "text": c}, "reference": r})));
    }
    std::fs::write(&items, text).unwrap();
    let run = |out: &str, extra: &[&str]| {
        let out = dir.path().join(out);
        let mut args = vec![
            "bertscore",
            "--bert-score-batch",
            "4",
            "-i",
            items.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args(&args)
            .env("HF_HUB_OFFLINE", "1")
            .env("HF_HOME", dir.path().join("empty-hf-cache"))
            .env("HYOKA_TEST_MODELS", e5.parent().unwrap())
            .output()
            .expect("hyoka runs");
        (o, out)
    };
    let e5_name = e5.to_str().unwrap();
    for (name, extra) in [
        ("e5-L12", &["--model", e5_name, "--lang", "ja"][..]),
        (
            "e5-rescaled",
            &["--model", e5_name, "--lang", "ja", "--rescale"][..],
        ),
    ] {
        let (o, out) = run(&format!("{name}.jsonl"), extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        let expected = case(name);
        for (l, f) in lines(&out).iter().zip(expected["F"].as_array().unwrap()) {
            let model = &l["provenance"]["models"][0];
            assert!(
                model["name"]
                    .as_str()
                    .unwrap()
                    .ends_with("multilingual-e5-small"),
                "{l}"
            );
            // The copy says what it is: not the upstream weights.
            assert!(
                model["description"].as_str().unwrap().contains("4-bit"),
                "{l}"
            );
            assert_eq!(l["provenance"]["settings"]["layer"], 12);
            assert!(
                (l["bertscore"]["F"].as_f64().unwrap() - f.as_f64().unwrap()).abs() < 1e-5,
                "{name}: {l} vs {f}"
            );
        }
        if name == "e5-rescaled" {
            assert_eq!(
                lines(&out)[0]["provenance"]["settings"]["baseline"]["file"],
                "builtin:ja/multilingual-e5-small.tsv"
            );
        }
    }
    // No baseline is shipped for e5 in English: a clear error, nothing scored.
    let (o, out) = run(
        "en.jsonl",
        &["--rescale", "--model", e5.to_str().unwrap(), "--lang", "en"][..],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("no baseline is shipped")
            && err.contains("ja/multilingual-e5-small"),
        "{err}"
    );
    assert!(!out.exists() || lines(&out).is_empty());
    // --rescale is per language: without --lang it is a usage error.
    let o = hyoka(&[
        "bertscore",
        "--model",
        e5.to_str().unwrap(),
        "--rescale",
        "-i",
        items.to_str().unwrap(),
        "-o",
        "/dev/null",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An opening utterance has no previous turn to compare with: counted and said, not a failure,
/// so `--against last-turn` on a dialogue's turns exits 0 (as `eval` does), the line marked
/// `not_applicable`.
#[test]
fn opening_turns_are_not_failures() {
    let Some(minilm) = common::test_model("all-MiniLM-L6-v2") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let items = dir.path().join("items.jsonl");
    std::fs::write(
        &items,
        concat!(
            r#"{"id": "d/0", "context": [], "response": {"speaker": "S", "text": "Hello there."}}"#,
            "\n",
            r#"{"id": "d/1", "context": [{"speaker": "S", "text": "Hello there."}], "response": {"speaker": "S", "text": "Nice to meet you."}}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("scores.jsonl");
    let r = hyoka(&[
        "bertscore",
        "--model",
        minilm.to_str().unwrap(),
        "--layer",
        "6",
        "--against",
        "last-turn",
        "-i",
        items.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("1 items have nothing to compare with"),
        "{stderr}"
    );
    assert!(stderr.contains("0 failed"), "{stderr}");
    let lines = lines(&out);
    assert_eq!(lines[0]["not_applicable"], true, "{}", lines[0]);
    assert!(lines[1]["bertscore"]["F"].is_number(), "{}", lines[1]);
}
