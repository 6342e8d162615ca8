//! `hyoka merge` of shard folders and `hyoka eval` end to end on the real test models.

use crate::common;

use hyoka::data::select::Shard;
use hyoka::data::{read_items, write_items};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn hyoka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args(args)
        .output()
        .expect("hyoka runs")
}

fn meta_fixture(name: &str) -> std::path::PathBuf {
    common::fixtures().join("meta").join(name)
}

/// Split the meta fixture into shard folders the way `hyoka eval --shard K/N` does. The
/// fixture's item without results lines (C/99/0) is left out: a shard holds the items its
/// run scored.
fn make_shards(root: &Path, count: usize) -> Vec<String> {
    let items = read_items(&meta_fixture("items.jsonl"), false)
        .expect("fixture items")
        .items;
    let lines = |name: &str| -> Vec<String> {
        std::fs::read_to_string(meta_fixture(name))
            .expect("fixture")
            .lines()
            .map(String::from)
            .collect()
    };
    let (judge, bert) = (lines("judge.jsonl"), lines("bertscore.jsonl"));
    let items: Vec<_> = items.into_iter().filter(|i| i.id != "C/99/0").collect();
    let (n, sha256) = hyoka::data::select::set_digest(&items);
    let mut dirs = Vec::new();
    for k in 1..=count {
        let part = Shard { index: k, count }.select(items.clone());
        let dir = root.join(format!("shard-{k}-of-{count}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        write_items(&dir.join("items.jsonl"), &part).expect("write items");
        let set = serde_json::json!({"shard": format!("{k}/{count}"), "whole_set": {"items": n, "sha256": sha256}});
        std::fs::write(dir.join("shard.json"), set.to_string()).expect("write shard.json");
        let ids: Vec<&str> = part.iter().map(|i| i.id.as_str()).collect();
        for (name, all) in [("judge.jsonl", &judge), ("bertscore.jsonl", &bert)] {
            let mine: Vec<&String> = all
                .iter()
                .filter(|l| {
                    serde_json::from_str::<Value>(l)
                        .ok()
                        .and_then(|v| v["id"].as_str().map(|id| ids.contains(&id)))
                        .unwrap_or(false)
                })
                .collect();
            std::fs::write(
                dir.join(name),
                mine.iter().map(|l| format!("{l}\n")).collect::<String>(),
            )
            .expect("write");
        }
        dirs.push(dir.to_string_lossy().into_owned());
    }
    dirs
}

fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("exists")).expect("JSON")
}

#[test]
fn merged_shards_give_the_same_summary_as_the_whole() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dirs = make_shards(tmp.path(), 3);
    let out = tmp.path().join("merged");
    let mut args = vec!["merge"];
    args.extend(dirs.iter().map(String::as_str));
    let out_s = out.to_string_lossy().into_owned();
    args.extend(["-o", &out_s, "--bootstrap", "100"]);
    let o = hyoka(&args);
    // The fixture's judge failed on one item: written, listed, exit 4 (as its shard's eval).
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("failed: B/7/2: fixture failure"));
    // The whole, through `hyoka meta` on the unsplit fixture.
    let whole = tmp.path().join("whole.json");
    let o = hyoka(&[
        "meta",
        "--accept-unhashed",
        "-i",
        &meta_fixture("items.jsonl").to_string_lossy(),
        "-s",
        &meta_fixture("judge.jsonl").to_string_lossy(),
        "-s",
        &meta_fixture("bertscore.jsonl").to_string_lossy(),
        "--json",
        &whole.to_string_lossy(),
        "--bootstrap",
        "100",
        "--markdown",
        &tmp.path().join("whole.md").to_string_lossy(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (merged, whole) = (json(&out.join("summary.json")), json(&whole));
    // Items come back in shard order, so compare cells by key, not position.
    let cells = |s: &Value| -> std::collections::BTreeMap<String, Value> {
        s["correlations"]
            .as_array()
            .expect("list")
            .iter()
            .map(|e| {
                (
                    format!("{}|{}|{}", e["row"], e["human"], e["level"]),
                    e.clone(),
                )
            })
            .collect()
    };
    let (m, w) = (cells(&merged), cells(&whole));
    assert_eq!(m.len(), w.len());
    for (k, e) in &w {
        for method in ["pearson", "spearman", "kendall"] {
            let (a, b) = (&m[k][method]["r"], &e[method]["r"]);
            match (a.as_f64(), b.as_f64()) {
                (Some(a), Some(b)) => assert!((a - b).abs() < 1e-12, "{k} {method}: {a} vs {b}"),
                _ => assert_eq!(a, b, "{k} {method}"),
            }
        }
    }
    // One scores line per item; the report is one offline file.
    let scores = std::fs::read_to_string(out.join("scores.jsonl")).expect("scores.jsonl");
    assert_eq!(scores.lines().count(), 72);
    let first: Value = serde_json::from_str(scores.lines().next().expect("a line")).expect("JSON");
    assert!(
        first["scores"]["combined expected (w=10) · overall"].is_number()
            || first["scores"]["combined expected (w=10) · overall"].is_null()
    );
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.matches("<svg").count() > 10,
        "charts inline"
    );
    for external in [
        "<script",
        "src=\"http",
        "href=\"http",
        "url(http",
        "@import",
    ] {
        assert!(
            !html.contains(external),
            "report.html must not load anything: found {external}"
        );
    }
    let md = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(md.contains("| method | coherence | overall |"), "{md}");
}

/// Shards of two different sets of items, or a shard whose items changed since its run, are
/// refused (exit 3) before anything is written: the merge would report on a set nobody chose.
#[test]
fn merge_refuses_shards_that_are_not_one_set() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("merged");
    let merge = |dirs: &[String]| {
        let o = hyoka(&["merge", &dirs[0], &dirs[1], "-o", &out.to_string_lossy()]);
        assert_eq!(
            o.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!out.exists(), "nothing written");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    // Shard 2 of another sample: the set it records is not shard 1's.
    let dirs = make_shards(&tmp.path().join("a"), 2);
    let other = Path::new(&dirs[1]).join("shard.json");
    let text = std::fs::read_to_string(&other).expect("shard.json");
    let v: Value = serde_json::from_str(&text).expect("json");
    let edited = text.replace(
        v["whole_set"]["sha256"].as_str().expect("sha"),
        &"0".repeat(64),
    );
    std::fs::write(&other, edited).expect("write");
    let err = merge(&dirs);
    assert!(
        err.contains("shard-2-of-2/shard.json") && err.contains("cut from another set"),
        "{err}"
    );

    // An item taken out of shard 2 (with its lines) after the run.
    let dirs = make_shards(&tmp.path().join("b"), 2);
    let shard = Path::new(&dirs[1]);
    let items = read_items(&shard.join("items.jsonl"), false)
        .expect("items")
        .items;
    let gone = items[0].id.clone();
    write_items(&shard.join("items.jsonl"), &items[1..]).expect("write");
    for name in ["judge.jsonl", "bertscore.jsonl"] {
        let kept: String = std::fs::read_to_string(shard.join(name))
            .expect("lines")
            .lines()
            .filter(|l| !l.contains(&format!("\"{gone}\"")))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(shard.join(name), kept).expect("write");
    }
    let err = merge(&dirs);
    assert!(err.contains("not the set they were cut from"), "{err}");
}

#[test]
fn merge_refuses_another_run_and_repeated_items() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dirs = make_shards(tmp.path(), 2);
    // Shard 2's judge lines from another model (another checksum: a name alone is no
    // identity).
    let judge = Path::new(&dirs[1]).join("judge.jsonl");
    let text = std::fs::read_to_string(&judge).expect("judge").replace(
        "fixture-judge\", \"sha256\": \"0\"",
        "other-judge\", \"sha256\": \"1\"",
    );
    std::fs::write(&judge, text).expect("write");
    let out = tmp.path().join("merged");
    let o = hyoka(&["merge", &dirs[0], &dirs[1], "-o", &out.to_string_lossy()]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("judge.jsonl:1")
            && err.contains("model differs")
            && err.contains("other-judge"),
        "{err}"
    );
    assert!(
        !out.join("summary.json").exists(),
        "nothing written on a refused merge"
    );

    // A merge into the shards' own folder, then refused merges into it: each leaves every
    // file as it was.
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().to_string_lossy().into_owned();
    let dirs = make_shards(tmp.path(), 2);
    let o = hyoka(&[
        "merge",
        &dirs[0],
        &dirs[1],
        "-o",
        &root,
        "--bootstrap",
        "10",
    ]);
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(Path::new(&root).join("summary.json").exists());
    let refused = |args: &[&str], code: i32, says: &[&str]| {
        let before = common::snapshot(tmp.path());
        let o = hyoka(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        for s in says {
            assert!(err.contains(s), "{args:?}: {err}");
        }
        let changed = common::changed(&before, &common::snapshot(tmp.path()));
        assert!(changed.is_empty(), "{args:?} wrote {changed:?}");
    };
    // The same shard twice.
    refused(
        &["merge", &dirs[0], &dirs[0], "-o", &root],
        2,
        &["give each shard once"],
    );
    // One shard of two: the other is named.
    refused(
        &["merge", &dirs[0], "-o", &root],
        4,
        &["missing: shard-2-of-2"],
    );
    // An item in two shards: the shard that brought it again is named, and the other.
    let items1 = Path::new(&dirs[0]).join("items.jsonl");
    let items2 = Path::new(&dirs[1]).join("items.jsonl");
    let first_of_2 = std::fs::read_to_string(&items2).expect("items");
    let first_of_2 = first_of_2.lines().next().expect("a line").to_string();
    let kept1 = std::fs::read_to_string(&items1).expect("items");
    std::fs::write(&items1, format!("{kept1}{first_of_2}\n")).expect("write");
    let second = format!("{}", items2.display());
    refused(
        &["merge", &dirs[0], &dirs[1], "-o", &root],
        3,
        &[&second, "the same item in two shards"],
    );
    std::fs::write(&items1, kept1).expect("write");
    // A shard stopped half-way (preempted): its items without lines are named.
    let judge2 = Path::new(&dirs[1]).join("judge.jsonl");
    let kept2 = std::fs::read_to_string(&judge2).expect("judge");
    let half: String = kept2
        .lines()
        .take(kept2.lines().count() / 2)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&judge2, half).expect("write");
    refused(
        &["merge", &dirs[0], &dirs[1], "-o", &root],
        4,
        &[
            "shard-2-of-2/judge.jsonl",
            "items have no line",
            "nothing written",
        ],
    );
}

/// The real models on a few DBDC3 items: the folder holds every output, a shard run and merge
/// give the same scores, and a second run resumes instead of rescoring. The registry copy of
/// multilingual-e5-small named as the encoder: its layer 12, and its 4-bit origin said in the
/// summary.
#[test]
fn eval_end_to_end_on_real_models_with_shards() {
    let (Some(judge), Some(encoder)) = (
        common::test_model("smollm2-135m-instruct-q4_1.gguf"),
        common::test_model("multilingual-e5-small"),
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let items = tmp.path().join("items.jsonl");
    let o = hyoka(&[
        "import",
        "dbdc3",
        &common::dbdc3_archive().to_string_lossy(),
        "--sample-dialogues",
        "2",
        "--seed",
        "1",
        "-o",
        &items.to_string_lossy(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The first turns of each dialogue only: short prompts keep the test quick on 2 cores.
    let mut short = read_items(&items, false).expect("items").items;
    short.retain(|i| i.context.len() <= 4);
    write_items(&items, &short).expect("write");
    let rubric = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/breakdown-ja.toml")
        .to_string_lossy()
        .into_owned();
    let judge = judge.to_string_lossy().into_owned();
    let encoder_name = encoder.to_string_lossy().into_owned();
    let offline = |c: &mut Command| {
        c.env("HF_HUB_OFFLINE", "1")
            .env("HF_HOME", tmp.path().join("empty-hf-cache"))
            .env("HYOKA_TEST_MODELS", encoder.parent().expect("cache dir"));
    };
    let common_args = |out: &str| -> Vec<String> {
        [
            "eval",
            "-i",
            &items.to_string_lossy(),
            "--rubric",
            &rubric,
            "--model",
            &judge,
            "--bertscore-model",
            &encoder_name,
            "--bootstrap",
            "50",
            "-o",
            out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let whole = tmp.path().join("whole").to_string_lossy().into_owned();
    let args = common_args(&whole);
    let run = |args: &[String]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hyoka"));
        offline(c.args(args));
        c.output().expect("runs")
    };
    let o = run(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let first = json_lines(&Path::new(&whole).join("bertscore.jsonl"));
    let provenance = &first[0]["provenance"];
    assert!(
        provenance["models"][0]["name"]
            .as_str()
            .expect("name")
            .ends_with("multilingual-e5-small"),
        "{provenance}"
    );
    assert_eq!(provenance["settings"]["layer"], 12);
    let summary = std::fs::read_to_string(Path::new(&whole).join("summary.md")).expect("summary");
    assert!(
        summary.contains("4-bit weights expanded to f32"),
        "{summary}"
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("| method |"),
        "the table is printed"
    );
    for f in [
        "items.jsonl",
        "judge.jsonl",
        "bertscore.jsonl",
        "scores.jsonl",
        "summary.md",
        "summary.json",
        "report.html",
    ] {
        assert!(Path::new(&whole).join(f).exists(), "{f} written");
    }
    // Resuming scores nothing again.
    let o = run(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.contains("judge: scored 0 items"),
        "{err}"
    );
    // Two shards through SLURM's variables, then merged.
    let sharded = tmp.path().join("sharded").to_string_lossy().into_owned();
    for task in ["0", "1"] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hyoka"));
        offline(&mut c);
        let o = c
            .args(common_args(&sharded))
            .env("SLURM_ARRAY_TASK_ID", task)
            .env("SLURM_ARRAY_TASK_COUNT", "2")
            .env("SLURM_ARRAY_TASK_MIN", "0")
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let merged = tmp.path().join("merged").to_string_lossy().into_owned();
    let shard_dirs = [
        format!("{sharded}/shard-1-of-2"),
        format!("{sharded}/shard-2-of-2"),
    ];
    let o = hyoka(&[
        "merge",
        &shard_dirs[0],
        &shard_dirs[1],
        "-o",
        &merged,
        "--bootstrap",
        "50",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let by_id = |dir: &str| -> std::collections::BTreeMap<String, Value> {
        std::fs::read_to_string(Path::new(dir).join("scores.jsonl"))
            .expect("scores")
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
            .map(|v| {
                (
                    v["id"].as_str().expect("id").to_string(),
                    v["scores"].clone(),
                )
            })
            .collect()
    };
    let (a, b) = (by_id(&whole), by_id(&merged));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (id, s) in &a {
        for (k, v) in s.as_object().expect("scores") {
            if k.starts_with("combined") {
                continue; // mean(b) is over all items in both, but summed in another order
            }
            match (v.as_f64(), b[id][k].as_f64()) {
                (Some(x), Some(y)) => assert!(
                    (x - y).abs() < 1e-5,
                    "{id} {k}: {x} vs {y} (batching must not change scores)"
                ),
                (x, y) => assert_eq!(x, y, "{id} {k}"),
            }
        }
    }
}

/// `meta --half`: the two halves of --fit-w's split partition the items by dialogue, and a half's
/// numbers are those of the whole computed on its items alone.
#[test]
fn meta_halves_partition_the_dialogues() {
    let tmp = tempfile::tempdir().expect("tmp");
    let items = meta_fixture("items.jsonl");
    let all = read_items(&items, false).expect("items").items;
    let mut seen = Vec::new();
    for half in ["dev", "held-out"] {
        let out = tmp.path().join(format!("{half}.json"));
        let o = hyoka(&[
            "meta",
            "--accept-unhashed",
            "-i",
            &items.to_string_lossy(),
            "-s",
            &meta_fixture("bertscore.jsonl").to_string_lossy(),
            "--half",
            half,
            "--bootstrap",
            "0",
            "--json",
            &out.to_string_lossy(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let n = json(&out)["items"].as_u64().expect("items") as usize;
        assert!(n > 0 && n < all.len(), "{half}: {n} of {}", all.len());
        seen.push(n);
        // The same numbers from an items file holding only that half.
        let dialogues: std::collections::HashSet<String> = all
            .iter()
            .filter(|i| {
                hyoka::meta::in_dev_half(0, i.dialogue.as_deref().expect("dialogue"))
                    == (half == "dev")
            })
            .map(|i| i.dialogue.clone().expect("dialogue"))
            .collect();
        let subset: Vec<_> = all
            .iter()
            .filter(|i| dialogues.contains(i.dialogue.as_deref().expect("dialogue")))
            .cloned()
            .collect();
        assert_eq!(subset.len(), n);
        let subset_path = tmp.path().join(format!("{half}-items.jsonl"));
        write_items(&subset_path, &subset).expect("write");
        let direct = tmp.path().join(format!("{half}-direct.json"));
        let o = hyoka(&[
            "meta",
            "--accept-unhashed",
            "-i",
            &subset_path.to_string_lossy(),
            "-s",
            &meta_fixture("bertscore.jsonl").to_string_lossy(),
            "--bootstrap",
            "0",
            "--json",
            &direct.to_string_lossy(),
        ]);
        assert!(o.status.success());
        assert_eq!(json(&out)["correlations"], json(&direct)["correlations"]);
    }
    assert_eq!(seen.iter().sum::<usize>(), all.len());
}

/// An encoder setting that cannot work (no default layer for an unknown encoder) fails before
/// the judge pass spends its time, not after it.
#[test]
fn eval_checks_the_encoder_before_judging() {
    let Some(judge) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("out");
    let encoder = common::fixtures().join("bert").join("bert");
    let o = hyoka(&[
        "eval",
        "-i",
        &meta_fixture("items.jsonl").to_string_lossy(),
        "--model",
        &judge.to_string_lossy(),
        "--bertscore-model",
        &encoder.to_string_lossy(),
        "-o",
        &out.to_string_lossy(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--layer"), "{err}");
    assert!(
        !err.contains("judge: scored") && !out.join("judge.jsonl").exists(),
        "no judging before the error: {err}"
    );
}

/// A results file that is a stream (`meta -s <(…)`, `-s /dev/stdin` from a pipe) is read once,
/// and gives the summary the same file gives.
#[test]
fn meta_reads_a_piped_results_file_once() {
    use std::io::Write;
    let tmp = tempfile::tempdir().expect("tmp");
    let items = meta_fixture("items.jsonl").to_string_lossy().into_owned();
    let (from_file, from_pipe) = (tmp.path().join("file.json"), tmp.path().join("pipe.json"));
    let judge = meta_fixture("judge.jsonl");
    let o = hyoka(&[
        "meta",
        "--accept-unhashed",
        "-i",
        &items,
        "-s",
        &judge.to_string_lossy(),
        "--json",
        &from_file.to_string_lossy(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut child = Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args([
            "meta",
            "--accept-unhashed",
            "-i",
            &items,
            "-s",
            "/dev/stdin",
            "--json",
            &from_pipe.to_string_lossy(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("hyoka runs");
    let text = std::fs::read(&judge).expect("judge lines");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&text)
        .expect("piped");
    let o = child.wait_with_output().expect("hyoka ends");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = |p: &Path| -> serde_json::Value {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).expect("summary")).expect("json");
        v["sources"] = serde_json::Value::Null; // the file's name differs, nothing else may
        v
    };
    assert_eq!(summary(&from_pipe), summary(&from_file));
}
