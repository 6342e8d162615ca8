//! `hyoka eval --translate en`: the paper's English route on DBDC3 items end to end — the items
//! translated (sources kept), judged with the rubric's English counterpart, BERTScore with the
//! named English encoder, a likelihood scorer's counterpart, and both routes side by side.

use crate::common;
use serde_json::Value;
use std::process::Command;

#[test]
fn the_english_route_runs_beside_the_japanese_one() {
    let (Some(judge), Some(e5), Some(minilm)) = (
        common::test_model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        common::test_model("multilingual-e5-small"),
        common::test_model("all-MiniLM-L6-v2"),
    ) else {
        return;
    };
    let dir = common::scratch_dir().join("english-route");
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.join("eval");
    let rubric = common::repo_root().join("examples/breakdown-ja.toml");
    let archive = common::dbdc3_archive();
    let eval = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--import",
            "dbdc3",
            archive.to_str().unwrap(),
            "--sample-dialogues",
            "1",
            "--rubric",
            rubric.to_str().unwrap(),
            "--model",
            judge.to_str().unwrap(),
            "--bertscore-model",
            e5.to_str().unwrap(),
            "--likelihood",
            "gptscore-ja",
            "--bootstrap",
            "0",
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args(&args)
            .output()
            .unwrap()
    };
    let en = [
        "--translate",
        "en",
        "--translate-bertscore-model",
        minilm.to_str().unwrap(),
        "--translate-layer",
        "6",
    ];
    // A language with no built-in prompt, or a layer for no route: refused, nothing written.
    for bad in [vec!["--translate", "fr"], vec!["--translate-layer", "6"]] {
        let o = eval(&bad);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!out.exists(), "{bad:?}");
    }
    // A layer the route's encoder lacks: named by the route's own flag.
    let mut deep = en.to_vec();
    deep[5] = "9";
    let o = eval(&deep);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--translate-layer 9: "), "{stderr}");
    assert!(!out.exists());
    let o = eval(&en);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let read = |p: &str| std::fs::read_to_string(out.join(p)).unwrap();
    let lines = |p: &str| -> Vec<Value> {
        read(p)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // The translated items: the Japanese ones' ids, speakers and ratings, their texts
    // translated, their sources kept.
    let ja = lines("items.jsonl");
    let translated = lines("en/items.jsonl");
    assert_eq!(ja.len(), translated.len());
    for (a, b) in ja.iter().zip(&translated) {
        assert_eq!(a["id"], b["id"]);
        assert_eq!(a["human"], b["human"]);
        assert_eq!(
            b["translation"]["source"]["response"],
            a["response"]["text"]
        );
        assert_eq!(b["response"]["speaker"], a["response"]["speaker"]);
        assert_eq!(b["translation"]["to"], "en");
        assert_eq!(b["translation"]["by"]["task"], "translate");
    }
    // The English route's scorers: the rubric's and the scorer's counterparts, the named encoder.
    let judged = lines("en/judge.jsonl");
    assert_eq!(judged[0]["provenance"]["rubric"]["name"], "breakdown-en");
    let scored = lines("en/likelihood-gptscore-en.jsonl");
    assert_eq!(scored.len(), ja.len());
    let bert = lines("en/bertscore.jsonl");
    assert!(
        bert[0]["provenance"]["models"][0]["name"]
            .as_str()
            .unwrap()
            .contains("MiniLM")
    );
    // Side by side: every method in both routes (the scorer under its Japanese name).
    let routes: Value = serde_json::from_str(&read("routes.json")).unwrap();
    assert_eq!(routes["routes"], serde_json::json!(["ja", "en"]));
    let rows = routes["rows"].as_array().unwrap();
    for method in [
        "judge expected · coherence",
        "BERTScore F",
        "combined expected (w=10) · coherence",
        "likelihood[gptscore-ja] score",
    ] {
        let row = rows
            .iter()
            .find(|r| r["method"] == method)
            .unwrap_or_else(|| panic!("{method}: {rows:?}"));
        let cells = row["cells"].as_array().unwrap();
        assert!(cells.iter().all(|c| !c.is_null()), "{method}: {cells:?}");
    }
    // Each route's own summary, as `hyoka meta` writes it from the route's files.
    assert!(read("en/summary.md").contains("likelihood[gptscore-en] score"));
    // A rerun translates and scores nothing, and leaves every results file as it was.
    let before = common::snapshot(&out);
    let o = eval(&en);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("0 translated now"), "{stderr}");
    let after = common::snapshot(&out);
    for file in [
        "en/translations.jsonl",
        "en/judge.jsonl",
        "judge.jsonl",
        "en/likelihood-gptscore-en.jsonl",
    ] {
        let path = out.join(file);
        assert_eq!(before[&path], after[&path], "{file}");
    }
}
