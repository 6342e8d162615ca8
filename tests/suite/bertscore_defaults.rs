//! bert_score's default encoder as a user without --model gets it: `--lang ja` loads
//! bert-base-multilingual-cased from its Hub repository (google-bert/…), here from a Hugging Face
//! cache read offline, at bert_score's layer 9, and its numbers are bert_score's own on the same
//! files (`lang="ja"` there picks the model and the layer); where it cannot be had, the run stops
//! and says how to get it, and no other model is used in its place.

use crate::common;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const REPO: &str = "google-bert/bert-base-multilingual-cased";

fn fixture() -> Value {
    let text = std::fs::read_to_string(common::fixtures().join("bert/hub-default.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// hyoka with a Hugging Face cache read offline, and a registry folder of the caller's.
fn hyoka(hf_home: &Path, registry: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args(args)
        .env("HF_HOME", hf_home)
        .env("HF_HUB_OFFLINE", "1")
        .env("HYOKA_TEST_MODELS", registry)
        .output()
        .expect("hyoka runs")
}

/// `hyoka bertscore` of `items` into `out` with the encoder flags given.
fn bertscore(
    hf_home: &Path,
    registry: &Path,
    items: &Path,
    out: &Path,
    encoder: &[&str],
) -> Output {
    let mut args = vec!["bertscore"];
    args.extend_from_slice(encoder);
    args.extend(["-i", items.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    hyoka(hf_home, registry, &args)
}

fn write_items(path: &Path, fx: &Value) {
    let mut text = String::new();
    let pairs = fx["cands"]
        .as_array()
        .unwrap()
        .iter()
        .zip(fx["refs"].as_array().unwrap());
    for (i, (c, r)) in pairs.enumerate() {
        let item = serde_json::json!({"id": format!("p{i}"), "context": [{"speaker": "B", "text": "…"}],
            "response": {"speaker": "A", "text": c}, "reference": [r]});
        text.push_str(&format!("{item}\n"));
    }
    std::fs::write(path, text).unwrap();
}

fn cached_default(hf_home: &Path, fx: &Value) {
    let dir = common::fixtures().join("bert/hub-default");
    let files: Vec<PathBuf> = [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    .iter()
    .map(|f| dir.join(f))
    .collect();
    common::hub_cache(hf_home, REPO, fx["commit"].as_str().unwrap(), &files);
}

#[test]
fn lang_ja_reads_bert_base_multilingual_cased_from_the_hub_cache_as_bert_score() {
    let fx = fixture();
    let dir = tempfile::tempdir().unwrap();
    let (hf_home, registry) = (dir.path().join("hf"), dir.path().join("registry"));
    std::fs::create_dir_all(&registry).unwrap();
    cached_default(&hf_home, &fx);
    let items = dir.path().join("items.jsonl");
    write_items(&items, &fx);
    let out = dir.path().join("bertscore.jsonl");
    let run = bertscore(&hf_home, &registry, &items, &out, &["--lang", "ja"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let lines: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    for (i, line) in lines.iter().enumerate() {
        for k in ["P", "R", "F"] {
            let got = line["bertscore"][k].as_f64().unwrap();
            let want = fx[k][i].as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-5,
                "item {i} {k}: {got} vs bert_score {want}"
            );
        }
        let model = &line["provenance"]["models"][0];
        assert_eq!(model["name"], REPO);
        assert_eq!(model["revision"], fx["commit"]);
        assert!(model.get("description").is_none(), "{model}");
        assert_eq!(line["provenance"]["settings"]["layer"], fx["layer"]);
    }
    // bert_score's bare name is the same model.
    let out2 = dir.path().join("bare.jsonl");
    let run = bertscore(
        &hf_home,
        &registry,
        &items,
        &out2,
        &["--model", "bert-base-multilingual-cased"],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(&out2)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["bertscore"], lines[0]["bertscore"]);
}

#[test]
fn a_default_that_cannot_be_had_stops_the_run_and_nothing_replaces_it() {
    let fx = fixture();
    let dir = tempfile::tempdir().unwrap();
    let (hf_home, registry) = (dir.path().join("hf"), dir.path().join("registry"));
    // Registry copies present: they are offered by name, never used unasked.
    std::fs::create_dir_all(registry.join("multilingual-e5-small")).unwrap();
    std::fs::write(
        registry.join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        b"not loaded",
    )
    .unwrap();
    std::fs::create_dir_all(&hf_home).unwrap();
    let items = dir.path().join("items.jsonl");
    write_items(&items, &fx);
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("bertscore.jsonl");
    let run = bertscore(&hf_home, &registry, &items, &out, &["--lang", "ja"]);
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    for needed in [
        "bert-base-multilingual-cased",
        "huggingface-cli download google-bert/bert-base-multilingual-cased",
        "HF_HUB_OFFLINE=1",
        "no other model",
        "multilingual-e5-small",
        "4-bit",
    ] {
        assert!(err.contains(needed), "{needed:?} missing from: {err}");
    }
    assert!(
        std::fs::read_dir(&out_dir).unwrap().next().is_none(),
        "the refused run wrote files"
    );
    // The advice names the flag of the command that failed: following it works.
    let e5 = registry.join("multilingual-e5-small");
    assert!(err.contains(&format!("--model {}", e5.display())), "{err}");
    let judge = registry.join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let eval_dir = out_dir.join("advice");
    let run = hyoka(
        &hf_home,
        &registry,
        &[
            "eval",
            "-i",
            items.to_str().unwrap(),
            "--model",
            judge.to_str().unwrap(),
            "-o",
            eval_dir.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("--bertscore-model {}", e5.display())),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&eval_dir);
    // The translated route's default encoder (roberta-large for en) is named by its own flag.
    if let Some(real_e5) = common::test_model("multilingual-e5-small") {
        let run = hyoka(
            &hf_home,
            &registry,
            &[
                "eval",
                "-i",
                items.to_str().unwrap(),
                "--model",
                judge.to_str().unwrap(),
                "--bertscore-model",
                real_e5.to_str().unwrap(),
                "--translate",
                "en",
                "-o",
                eval_dir.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{err}");
        assert!(err.contains("FacebookAI/roberta-large"), "{err}");
        assert!(
            err.contains(&format!("--translate-bertscore-model {}", e5.display())),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&eval_dir);
    }
    // bert_score's bare names are asked of their repositories, not refused as non-ids.
    let run = bertscore(
        &hf_home,
        &registry,
        &items,
        &out,
        &["--model", "roberta-large"],
    );
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("FacebookAI/roberta-large"), "{err}");
    // The default judge is the Hub's file or nothing; the output folders the run made are
    // taken away again.
    let new_out = out_dir.join("new").join("eval");
    let run = hyoka(
        &hf_home,
        &registry,
        &[
            "eval",
            "-i",
            items.to_str().unwrap(),
            "--no-bertscore",
            "-o",
            new_out.to_str().unwrap(),
        ],
    );
    assert!(
        std::fs::read_dir(&out_dir).unwrap().next().is_none(),
        "the refused eval left folders"
    );
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("the default judge Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"),
        "{err}"
    );
    let offered = format!(
        "--model {}",
        registry
            .join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
            .display()
    );
    assert!(err.contains(&offered), "{err}");
    assert!(
        err.contains("huggingface-cli download Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        "{err}"
    );
    assert!(
        !err.contains("not loaded") && !err.contains("GGUF magic"),
        "the registry file was read: {err}"
    );
}
