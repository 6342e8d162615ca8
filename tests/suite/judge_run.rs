//! `hyoka judge` as users run it: outputs, resume after a kill, refusal of another run's file,
//! truncation, and the same scores whatever the batch size (real SmolLM2 GGUF).

use crate::common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::SHORT_RUBRIC as RUBRIC;

struct Setup {
    dir: tempfile::TempDir,
    model: PathBuf,
}

impl Setup {
    fn new() -> Option<Self> {
        let model = common::test_model("smollm2-135m-instruct-q4_1.gguf")?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rubric.toml"), RUBRIC).unwrap();
        let mut items = String::new();
        for (i, (ctx, resp)) in [
            (
                "I'm getting hungry. Anything you'd like to eat?",
                "I'd like sushi.",
            ),
            ("What did you do at the weekend?", "Yes, I like cats."),
            ("Do you exercise?", "I run twice a week."),
            (
                "How was the trip to Hokkaido?",
                "The crab was wonderful, and it snowed every day.",
            ),
        ]
        .iter()
        .enumerate()
        {
            items.push_str(&serde_json::json!({
                "id": format!("item-{i}"),
                "context": [{"speaker": "B", "text": "Hello!"}, {"speaker": "A", "text": "Hi."}, {"speaker": "B", "text": ctx}],
                "response": {"speaker": "A", "text": resp}
            }).to_string());
            items.push('\n');
        }
        std::fs::write(dir.path().join("items.jsonl"), items).unwrap();
        Some(Setup { dir, model })
    }

    /// Continuing `out` with `extra` is refused: exit 3, the settings named as what differs.
    fn assert_settings_differ(&self, out: &str, extra: &[&str]) {
        let o = self.judge(out, extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{extra:?}: {err}");
        assert!(
            err.contains("written by a different run (settings differs"),
            "{extra:?}: {err}"
        );
    }

    /// Every line of `out` (4 items) records `value` as its provenance's `settings.key`.
    fn assert_setting(&self, out: &str, key: &str, value: &str) {
        let rows = lines(Path::new(&self.path(out)));
        assert_eq!(rows.len(), 4);
        for row in &rows {
            assert_eq!(row["provenance"]["settings"][key], value, "{row}");
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    fn judge(&self, out: &str, extra: &[&str]) -> Output {
        self.command(out, extra).output().unwrap()
    }

    fn command(&self, out: &str, extra: &[&str]) -> Command {
        let mut args = vec![
            "judge".to_string(),
            "--rubric".into(),
            self.path("rubric.toml"),
            "--model".into(),
            self.model.to_str().unwrap().into(),
            "-i".into(),
            self.path("items.jsonl"),
            "-o".into(),
            self.path(out),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut command = Command::new(env!("CARGO_BIN_EXE_hyoka"));
        command.args(&args);
        command
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn every_item_gets_valid_scores_with_provenance() {
    let Some(s) = Setup::new() else { return };
    let out = s.judge("scores.jsonl", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = lines(Path::new(&s.path("scores.jsonl")));
    assert_eq!(rows.len(), 4);
    for row in &rows {
        for (key, range) in [("fit", 0..=1), ("quality", 1..=5)] {
            let a = &row["scores"][key];
            let dist = a["distribution"].as_object().unwrap();
            assert_eq!(dist.len(), range.clone().count());
            let sum: f64 = dist.values().map(|v| v.as_f64().unwrap()).sum();
            assert!((sum - 1.0).abs() < 1e-9);
            assert!(range.contains(&a["score"].as_i64().unwrap()));
            let expected: f64 = dist
                .iter()
                .map(|(k, v)| k.parse::<f64>().unwrap() * v.as_f64().unwrap())
                .sum();
            assert!((expected - a["expected"].as_f64().unwrap()).abs() < 1e-9);
            let off = a["off_scale"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&off));
        }
        let p = &row["provenance"];
        assert_eq!(p["task"], "judge");
        assert_eq!(
            p["models"][0]["sha256"],
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
        );
        assert_eq!(p["rubric"]["name"], "short");
        assert_eq!(p["dtype"], "f32");
        assert_eq!(p["device"], "cpu");
        assert!(p["hyoka"].is_string());
    }
}

#[test]
fn a_killed_run_resumes_without_rescoring_or_losing_items() {
    let Some(s) = Setup::new() else { return };
    assert!(s.judge("scores.jsonl", &[]).status.success());
    let path = s.path("scores.jsonl");
    let full = std::fs::read_to_string(&path).unwrap();
    let all: Vec<&str> = full.lines().collect();
    // A kill after two lines and half of the third.
    let partial = format!("{}\n{}\n{}", all[0], all[1], &all[2][..all[2].len() / 2]);
    std::fs::write(&path, &partial).unwrap();
    let out = s.judge("scores.jsonl", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("scored 2 items") && err.contains("2 already in"),
        "{err}"
    );
    let after = std::fs::read_to_string(&path).unwrap();
    let after: Vec<&str> = after.lines().collect();
    assert_eq!(after.len(), 4);
    assert_eq!(
        &after[..2],
        &all[..2],
        "finished lines are kept as they were"
    );
    let mut ids: Vec<String> = after
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["item-0", "item-1", "item-2", "item-3"]);
    // Nothing left to do: a third run scores nothing.
    let out = s.judge("scores.jsonl", &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("scored 0 items"));
}

#[test]
fn another_runs_output_is_refused() {
    let Some(s) = Setup::new() else { return };
    assert!(s.judge("scores.jsonl", &[]).status.success());
    std::fs::write(
        s.path("rubric.toml"),
        RUBRIC.replace("fits the context", "fits the context well"),
    )
    .unwrap();
    let out = s.judge("scores.jsonl", &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("written by a different run (rubric differs")
    );
    assert!(s.judge("scores.jsonl", &["--overwrite"]).status.success());
}

#[test]
fn same_scores_whatever_the_batch_size() {
    let Some(s) = Setup::new() else { return };
    assert!(
        s.judge("big.jsonl", &["--batch-tokens", "100000"])
            .status
            .success()
    );
    assert!(
        s.judge("small.jsonl", &["--batch-tokens", "1"])
            .status
            .success()
    );
    let (big, small) = (
        lines(Path::new(&s.path("big.jsonl"))),
        lines(Path::new(&s.path("small.jsonl"))),
    );
    for b in &big {
        let m = small.iter().find(|x| x["id"] == b["id"]).unwrap();
        for key in ["fit", "quality"] {
            let (x, y) = (
                b["scores"][key]["expected"].as_f64().unwrap(),
                m["scores"][key]["expected"].as_f64().unwrap(),
            );
            assert!((x - y).abs() < 1e-5, "{}: {key}: {x} vs {y}", b["id"]);
            assert_eq!(b["scores"][key]["score"], m["scores"][key]["score"]);
        }
    }
}

#[test]
fn long_prompts_lose_old_turns_and_a_limit_below_the_rubric_is_refused() {
    let Some(s) = Setup::new() else { return };
    // Enough for every prompt without context (47..54 tokens with SmolLM2's default system
    // prompt), not with all three turns.
    let out = s.judge("t.jsonl", &["--max-prompt-tokens", "60"]);
    let rows = lines(Path::new(&s.path("t.jsonl")));
    assert_eq!(rows.len(), 4, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(rows.iter().all(|r| r.get("error").is_none()), "{rows:?}");
    assert!(
        rows.iter()
            .any(|r| r["truncated"] == true && r["dropped_turns"].as_u64().unwrap() > 0),
        "{rows:?}"
    );
    // Too small for the rubric's own prompt: no item could fit, a usage error (exit 2), and no
    // output file left behind.
    let out = s.judge("f.jsonl", &["--max-prompt-tokens", "5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--max-prompt-tokens 5: the rubric's prompt alone"),
        "{err}"
    );
    assert!(!Path::new(&s.path("f.jsonl")).exists());
}

/// Two runs never write one file: while another process holds the output, a run is refused
/// (exit 3) before writing anything, the file is left as it was, and once it is free the run
/// goes on. Two runs started together: one refused or both sequential, every item once.
#[test]
fn a_second_writer_is_refused() {
    let Some(s) = Setup::new() else { return };
    let path = s.path("scores.jsonl");
    assert!(s.judge("scores.jsonl", &[]).status.success());
    let before = std::fs::read_to_string(&path).unwrap();
    // Another process's lock: this test process holds it, as a running hyoka would.
    let holder = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    holder.lock().unwrap();
    for extra in [&[][..], &["--overwrite"][..]] {
        let out = s.judge("scores.jsonl", extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(
            err.contains("another hyoka run is writing this file"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            before,
            "the file is untouched"
        );
    }
    drop(holder);
    let out = s.judge("scores.jsonl", &[]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stderr).contains("scored 0 items")
    );

    // Two real runs at once on a fresh file.
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args([
                "judge",
                "--rubric",
                &s.path("rubric.toml"),
                "--model",
                s.model.to_str().unwrap(),
                "-i",
                &s.path("items.jsonl"),
                "-o",
                &s.path("both.jsonl"),
            ])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let codes: Vec<Option<i32>> = [a, b]
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code())
        .collect();
    assert!(
        codes.iter().all(|c| *c == Some(0) || *c == Some(3)) && codes.contains(&Some(0)),
        "{codes:?}"
    );
    let mut ids: Vec<String> = lines(Path::new(&s.path("both.jsonl")))
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        ["item-0", "item-1", "item-2", "item-3"],
        "every item exactly once"
    );
}

/// A rerun scores again the items an earlier run could not score (an error line: out of memory,
/// a device error): the error line is taken out, the item gets its score, the file ends with
/// one line per item and the exit code says what it holds (0).
#[test]
fn a_rerun_rescores_error_lines() {
    let Some(s) = Setup::new() else { return };
    assert!(s.judge("scores.jsonl", &[]).status.success());
    let path = s.path("scores.jsonl");
    let good = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<Value> = good
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failed = serde_json::json!({"id": lines[1]["id"], "error": "CUDA out of memory", "provenance": lines[1]["provenance"]});
    let original = std::mem::replace(&mut lines[1], failed);
    std::fs::write(
        &path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let out = s.judge("scores.jsonl", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("1 error lines of an earlier run were taken out")
            && err.contains("scored 1 items")
            && err.contains("3 already in"),
        "{err}"
    );
    let after = super_lines(&path);
    assert_eq!(after.len(), 4, "one line per item");
    assert!(after.iter().all(|l| l.get("error").is_none()));
    let again = after.iter().find(|l| l["id"] == original["id"]).unwrap();
    assert_eq!(
        again["scores"], original["scores"],
        "the same score as the first time"
    );
    assert!(
        std::fs::read_dir(s.dir.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("hyoka-rewrite")),
        "no temporary file left"
    );
}

fn super_lines(path: &str) -> Vec<Value> {
    lines(Path::new(path))
}

/// Settings that change which items are truncated, or what a line holds, are part of the run:
/// continuing a file with another `--max-prompt-tokens` or `--greedy-baseline` is refused.
#[test]
fn truncation_and_baseline_settings_are_part_of_the_run() {
    let Some(s) = Setup::new() else { return };
    assert!(
        s.judge("scores.jsonl", &["--max-prompt-tokens", "4000"])
            .status
            .success()
    );
    for other in [
        &["--max-prompt-tokens", "3000"][..],
        &[][..],
        &["--max-prompt-tokens", "4000", "--greedy-baseline", "2"][..],
    ] {
        s.assert_settings_differ("scores.jsonl", other);
    }
    let out = s.judge("scores.jsonl", &["--max-prompt-tokens", "4000"]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stderr).contains("scored 0 items")
    );
}

/// `--template-date` changes the prompt of judges whose chat template prints the date, so when
/// given it is in every line's provenance, and a file written with it is not continued without.
#[test]
fn a_template_date_is_part_of_the_run() {
    let Some(s) = Setup::new() else { return };
    let out = s.judge("scores.jsonl", &["--template-date", "26 Jul 2024"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.assert_setting("scores.jsonl", "template_date", "26 Jul 2024");
    s.assert_settings_differ("scores.jsonl", &[]);
}

/// `--gpu-kernels candle` changes numbers on a GPU, so it is in every line's provenance, and a
/// file written with it is not continued without it.
#[test]
fn gpu_kernels_are_part_of_the_run() {
    let Some(s) = Setup::new() else { return };
    let mut with = s.command("scores.jsonl", &["--gpu-kernels", "candle"]);
    let out = with.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.assert_setting("scores.jsonl", "gpu_kernels", "candle");
    s.assert_settings_differ("scores.jsonl", &[]);
}

/// `--prefill-gemm bf16` changes the scores, so it is in every line's provenance, and a file
/// written with it is not continued without it. Where the CPU lacks AVX512-BF16, the flag is
/// refused with exit 2 and a message naming what is missing.
#[test]
fn bf16_prefill_gemm_is_part_of_the_run() {
    let Some(s) = Setup::new() else { return };
    let out = s.judge("scores.jsonl", &["--prefill-gemm", "bf16"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if !hyoka::model::quant::cpu::bf16_gemm::available() {
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("AVX512-BF16"), "{err}");
        return;
    }
    assert!(out.status.success(), "{err}");
    s.assert_setting("scores.jsonl", "prefill_gemm", "bf16");
    s.assert_settings_differ("scores.jsonl", &[]);
}

/// `--prefill-gemm int8` likewise; refused (exit 2) with `--weights expanded`, which holds no
/// integer blocks, and where the CPU lacks AVX512-VNNI.
#[test]
fn int8_prefill_gemm_is_part_of_the_run() {
    let Some(s) = Setup::new() else { return };
    let expanded = s.judge(
        "expanded.jsonl",
        &["--prefill-gemm", "int8", "--weights", "expanded"],
    );
    let err = String::from_utf8_lossy(&expanded.stderr);
    assert_eq!(expanded.status.code(), Some(2), "{err}");
    assert!(err.contains("--weights expanded"), "{err}");
    let out = s.judge("scores.jsonl", &["--prefill-gemm", "int8"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if !hyoka::model::quant::cpu::prefill_gemm::PrefillGemm::Int8.available() {
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("VNNI"), "{err}");
        return;
    }
    assert!(out.status.success(), "{err}");
    s.assert_setting("scores.jsonl", "prefill_gemm", "int8");
    s.assert_settings_differ("scores.jsonl", &[]);
}

/// The library's judge, loaded from a `JudgeSpec` and scoring items held in memory, gives the
/// command's results: each item's record equal to its line of `hyoka judge`'s file (read back
/// by the same reader), in the items' order; nothing is written.
#[test]
fn the_library_judge_in_memory_gives_the_commands_records() {
    let Some(s) = Setup::new() else { return };
    let o = s.judge("cli.jsonl", &["--batch-tokens", "512"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(s.path("cli.jsonl")).unwrap();
    let mut want: Vec<hyoka::results::Record> = text
        .lines()
        .map(|l| hyoka::results::Record::parse(l).unwrap())
        .collect();
    let items = hyoka::data::read_items(Path::new(&s.path("items.jsonl")), false)
        .unwrap()
        .items;
    let order: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
    want.sort_by_key(|r| order.iter().position(|id| *id == r.id));
    let mut spec = hyoka::judge::JudgeSpec::new(
        &s.path("rubric.toml"),
        vec![s.model.to_str().unwrap().to_string()],
    )
    .unwrap();
    spec.run.batch_tokens = 512;
    let judge = spec.load().unwrap();
    let before = common::snapshot(s.dir.path());
    let (summary, _, got) = judge
        .score_records(&items, &mut |_, _| std::ops::ControlFlow::Continue(()))
        .unwrap();
    assert_eq!(summary.scored, items.len());
    assert_eq!(got, want);
    assert_eq!(common::snapshot(s.dir.path()), before, "nothing written");
}
