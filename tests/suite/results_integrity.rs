//! Numbers that follow their items, refusals that write nothing, outputs that are never
//! inputs, and bad values as usage errors — `hyoka judge`, `bertscore`, `eval`, `merge` and
//! `meta` as users run them (the real SmolLM2 judge and MiniLM encoder; meta's fixtures).

use crate::common;
use common::{changed, snapshot};

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

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn lines(path: &Path) -> Vec<Value> {
    text(path)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect()
}

/// Each results line's scores (or error) by id, as JSON text: equal means the same bits.
fn scores_by_id(path: &Path) -> BTreeMap<String, String> {
    lines(path)
        .into_iter()
        .map(|l| {
            let id = match &l["id"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let body = l.get("scores").or(l.get("bertscore")).or(l.get("error"));
            (id, body.expect("a body").to_string())
        })
        .collect()
}

const ITEMS: [(&str, &str); 4] = [
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
];

/// The four test items (one dialogue each), with `edit` applied to the JSON of item i.
fn items_text(edit: impl Fn(usize, &mut Value)) -> String {
    let mut text = String::new();
    for (i, (ctx, resp)) in ITEMS.iter().enumerate() {
        let mut item = serde_json::json!({
            "id": format!("item-{i}"),
            "context": [{"speaker": "B", "text": "Hello!"}, {"speaker": "A", "text": "Hi."}, {"speaker": "B", "text": ctx}],
            "response": {"speaker": "A", "text": resp},
            "dialogue": format!("d{i}"),
        });
        edit(i, &mut item);
        text.push_str(&item.to_string());
        text.push('\n');
    }
    text
}

struct Judge {
    dir: tempfile::TempDir,
    model: PathBuf,
}

impl Judge {
    fn new() -> Option<Self> {
        let model = common::test_model("smollm2-135m-instruct-q4_1.gguf")?;
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("rubric.toml"), common::SHORT_RUBRIC).expect("rubric");
        std::fs::write(dir.path().join("items.jsonl"), items_text(|_, _| {})).expect("items");
        Some(Judge { dir, model })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn p(&self, name: &str) -> String {
        self.path(name).to_string_lossy().into_owned()
    }

    /// `hyoka judge` with the short rubric on `items` into `out`.
    fn judge(&self, items: &str, out: &str, extra: &[&str]) -> Output {
        let (rubric, model, items, out) = (
            self.p("rubric.toml"),
            self.model.to_string_lossy().into_owned(),
            self.p(items),
            self.p(out),
        );
        let mut args = vec![
            "judge", "--rubric", &rubric, "--model", &model, "-i", &items, "-o", &out,
        ];
        args.extend_from_slice(extra);
        hyoka(&args)
    }
}

#[test]
fn an_edited_item_is_scored_again_and_its_old_line_refused_everywhere() {
    let Some(j) = Judge::new() else { return };
    let o = j.judge("items.jsonl", "out.jsonl", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::copy(j.path("out.jsonl"), j.path("before.jsonl")).expect("copy");
    let before = scores_by_id(&j.path("before.jsonl"));

    // Item 1's response and item 2's context edited under the same ids; item 3's human
    // ratings added (not read by the judge).
    let edit = |i: usize, item: &mut Value| match i {
        1 => item["response"]["text"] = "No, I stayed in and read all weekend.".into(),
        2 => item["context"][2]["text"] = "Do you like swimming?".into(),
        3 => item["human"] = serde_json::json!({"fit": [1, 0]}),
        _ => {}
    };
    let edited = items_text(edit);
    std::fs::write(j.path("items.jsonl"), &edited).expect("edit");

    // Before the rerun, the old lines are refused by meta (they no longer are these items').
    let o = hyoka(&[
        "meta",
        "-i",
        &j.p("items.jsonl"),
        "-s",
        &j.p("before.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("input_sha256: item \"item-1\" has changed"),
        "{}",
        stderr(&o)
    );

    // The rerun scores exactly the changed items again, and says so.
    let o = j.judge("items.jsonl", "out.jsonl", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("2 items changed since an earlier run scored them"),
        "{err}"
    );
    assert!(err.contains("scored 2 items"), "{err}");
    let after = scores_by_id(&j.path("out.jsonl"));
    assert_eq!(after.len(), 4, "one line per item");
    // The independent reference: a fresh run on the edited items.
    let o = j.judge("items.jsonl", "fresh.jsonl", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fresh = scores_by_id(&j.path("fresh.jsonl"));
    assert_eq!(after, fresh, "every line is the edited item's");
    for id in ["item-1", "item-2"] {
        assert_ne!(before[id], after[id], "{id} changed and was scored again");
    }
    for id in ["item-0", "item-3"] {
        assert_eq!(before[id], after[id], "{id} kept");
    }
    // meta now takes the lines.
    let o = hyoka(&["meta", "-i", &j.p("items.jsonl"), "-s", &j.p("out.jsonl")]);
    assert!(o.status.success(), "{}", stderr(&o));

    // BERTScore against the last turn: an edit of the first turn is not read, of the last is.
    let Some(minilm) = common::test_model("all-MiniLM-L6-v2") else {
        return;
    };
    let minilm = minilm.to_string_lossy().into_owned();
    let bert = |out: &str| {
        hyoka(&[
            "bertscore",
            "--model",
            &minilm,
            "--layer",
            "6",
            "--against",
            "last-turn",
            "-i",
            &j.p("items.jsonl"),
            "-o",
            &j.p(out),
        ])
    };
    assert!(bert("b.jsonl").status.success());
    let edited = items_text(|i, item| {
        edit(i, item);
        if i == 0 {
            item["context"][0]["text"] = "Good evening!".into();
            item["context"][2]["text"] = "Shall we have dinner?".into();
        }
    });
    std::fs::write(j.path("items.jsonl"), edited).expect("edit");
    let o = bert("b.jsonl");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 items changed since an earlier run scored them (e.g. \"item-0\")"),
        "{}",
        stderr(&o)
    );
    assert!(bert("b-fresh.jsonl").status.success());
    assert_eq!(
        scores_by_id(&j.path("b.jsonl")),
        scores_by_id(&j.path("b-fresh.jsonl"))
    );
}

#[test]
fn eval_refuses_before_writing_and_nothing_to_do_is_success() {
    let Some(j) = Judge::new() else { return };
    let model = j.model.to_string_lossy().into_owned();
    let eval = |items: &str, out: &str, rubric: &str, extra: &[&str]| {
        let (items, out) = (j.p(items), j.p(out));
        let mut args = vec![
            "eval",
            "-i",
            &items,
            "-o",
            &out,
            "--rubric",
            rubric,
            "--model",
            &model,
            "--no-bertscore",
        ];
        args.extend_from_slice(extra);
        hyoka(&args)
    };
    let rubric = j.p("rubric.toml");
    let o = eval("items.jsonl", "run", &rubric, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let before = snapshot(&j.path("run"));
    assert!(before.contains_key(&j.path("run/judge.jsonl")));

    // Two items into the same folder with another rubric: refused before any model loads,
    // the folder as it was.
    let two: String = items_text(|_, _| {})
        .lines()
        .take(2)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(j.path("two.jsonl"), two).expect("write");
    let o = eval("two.jsonl", "run", "dialogue6-en", &[]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("rubric differs"), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("loading"),
        "refused before loading: {}",
        stderr(&o)
    );
    assert_eq!(
        changed(&before, &snapshot(&j.path("run"))),
        Vec::<PathBuf>::new(),
        "a refused eval writes nothing"
    );
    // Another setting: known only once the judge is loaded, still refused before any write.
    let o = eval(
        "two.jsonl",
        "run",
        &rubric,
        &["--max-prompt-tokens", "1000"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("settings differs"), "{}", stderr(&o));
    assert_eq!(
        changed(&before, &snapshot(&j.path("run"))),
        Vec::<PathBuf>::new(),
        "a refused eval writes nothing"
    );

    // The input is one of the outputs: a usage error, nothing touched.
    let o = eval("run/items.jsonl", "run", &rubric, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        changed(&before, &snapshot(&j.path("run"))),
        Vec::<PathBuf>::new()
    );

    // An edited item in a rerun of eval: scored again.
    let edited = items_text(|i, item| {
        if i == 3 {
            item["response"]["text"] = "It rained.".into();
        }
    });
    std::fs::write(j.path("items.jsonl"), edited).expect("edit");
    let o = eval("items.jsonl", "run", &rubric, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 items changed"), "{}", stderr(&o));

    // Nothing to do is success: an empty file, and a shard whose share holds no dialogue.
    std::fs::write(j.path("empty.jsonl"), "").expect("write");
    let o = eval("empty.jsonl", "none", &rubric, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing to do"), "{}", stderr(&o));
    assert!(!j.path("none").exists(), "nothing written");
    let one: String = items_text(|_, _| {})
        .lines()
        .take(1)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(j.path("one.jsonl"), one).expect("write");
    let o = eval("one.jsonl", "sharded", &rubric, &["--shard", "2/2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing to do"), "{}", stderr(&o));
    assert_eq!(text(&j.path("sharded/shard-2-of-2/items.jsonl")), "");
    // With the other shard done, the two merge.
    let o = eval("one.jsonl", "sharded", &rubric, &["--shard", "1/2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (s1, s2, merged) = (
        j.p("sharded/shard-1-of-2"),
        j.p("sharded/shard-2-of-2"),
        j.p("merged"),
    );
    let o = hyoka(&["merge", &s1, &s2, "-o", &merged]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&j.path("merged/judge.jsonl")).len(), 1);

    // A merge whose shard's item was edited after it was scored: refused, naming the line.
    std::fs::write(
        j.path("sharded/shard-1-of-2/items.jsonl"),
        text(&j.path("sharded/shard-1-of-2/items.jsonl")).replace("sushi", "ramen"),
    )
    .expect("edit");
    let o = hyoka(&["merge", &s1, &s2, "-o", &j.p("merged2")]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("judge.jsonl:1: input_sha256"),
        "{}",
        stderr(&o)
    );
    assert!(!j.path("merged2").exists());
}

#[test]
fn outputs_are_never_inputs_and_identity_is_content() {
    let Some(j) = Judge::new() else { return };
    let items = text(&j.path("items.jsonl"));
    // The output is the input, directly or through a link.
    let o = j.judge("items.jsonl", "items.jsonl", &["--overwrite"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(j.path("items.jsonl"), j.path("link.jsonl")).expect("link");
        let o = j.judge("items.jsonl", "link.jsonl", &["--overwrite"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    }
    assert_eq!(text(&j.path("items.jsonl")), items, "the items untouched");

    let o = j.judge("items.jsonl", "out.jsonl", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let scored = text(&j.path("out.jsonl"));
    // meta's outputs: never its inputs.
    for flag in ["--json", "--markdown", "--html"] {
        let o = hyoka(&[
            "meta",
            "-i",
            &j.p("items.jsonl"),
            "-s",
            &j.p("out.jsonl"),
            flag,
            &j.p("items.jsonl"),
        ]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", stderr(&o));
    }
    assert_eq!(text(&j.path("items.jsonl")), items);

    // The same rubric by another path (a byte-identical copy) and the same GGUF through a
    // link: the same run, resumed.
    std::fs::create_dir(j.path("elsewhere")).expect("mkdir");
    std::fs::copy(j.path("rubric.toml"), j.path("elsewhere/copy.toml")).expect("copy");
    let rubric = j.p("elsewhere/copy.toml");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&j.model, j.path("judge.gguf")).expect("link");
    #[cfg(not(unix))]
    std::fs::copy(&j.model, j.path("judge.gguf")).expect("copy");
    let model = j.p("judge.gguf");
    let o = hyoka(&[
        "judge",
        "--rubric",
        &rubric,
        "--model",
        &model,
        "-i",
        &j.p("items.jsonl"),
        "-o",
        &j.p("out.jsonl"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("scored 0 items"), "{}", stderr(&o));
    assert!(stderr(&o).contains("4 already in"), "{}", stderr(&o));

    // A rerun that retries an error line through a linked output replaces the link's target
    // and keeps the link.
    #[cfg(unix)]
    {
        let mut rows = lines(&j.path("out.jsonl"));
        let provenance = rows[2]["provenance"].clone();
        rows[2] = serde_json::json!({"id": "item-2", "error": "killed", "provenance": provenance});
        let broken: String = rows.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(j.path("real.jsonl"), broken).expect("write");
        std::os::unix::fs::symlink("real.jsonl", j.path("out-link.jsonl")).expect("link");
        let o = j.judge("items.jsonl", "out-link.jsonl", &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).contains("1 error lines"), "{}", stderr(&o));
        let meta = std::fs::symlink_metadata(j.path("out-link.jsonl")).expect("link");
        assert!(meta.file_type().is_symlink(), "the output is still a link");
        assert_eq!(
            scores_by_id(&j.path("real.jsonl")),
            scores_by_id(&j.path("out.jsonl")),
            "the link's target holds the retried item"
        );
        assert_eq!(text(&j.path("out.jsonl")), scored);
    }
}

#[test]
fn output_problems_are_found_before_the_model_loads() {
    let Some(j) = Judge::new() else { return };
    // A missing folder, a folder as the output, and a results file of another rubric.
    std::fs::create_dir(j.path("a-folder")).expect("mkdir");
    for (out, code) in [("no/such/folder/out.jsonl", 1), ("a-folder", 1)] {
        let o = j.judge("items.jsonl", out, &[]);
        assert_eq!(o.status.code(), Some(code), "{out}: {}", stderr(&o));
        assert!(!stderr(&o).contains("loading"), "{out}: {}", stderr(&o));
    }
    let o = j.judge("items.jsonl", "out.jsonl", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = hyoka(&[
        "judge",
        "--rubric",
        "breakdown3-en",
        "--model",
        &j.model.to_string_lossy(),
        "-i",
        &j.p("items.jsonl"),
        "-o",
        &j.p("out.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("rubric differs"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("loading"), "{}", stderr(&o));

    // A name that can only be a path is never asked of the Hub.
    let o = hyoka(&[
        "judge",
        "--rubric",
        &j.p("rubric.toml"),
        "--model",
        "gg/nosuch.gguf",
        "-i",
        &j.p("items.jsonl"),
        "-o",
        &j.p("x.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a local path"), "{}", stderr(&o));
    assert!(
        !stderr(&o).to_lowercase().contains("hub:"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_values_are_usage_errors() {
    let Some(j) = Judge::new() else { return };
    for extra in [
        &["--max-prompt-tokens", "0"][..],
        &["--max-prompt-tokens", "10"],
        &["--batch-tokens", "0"],
    ] {
        let o = j.judge("items.jsonl", "out.jsonl", extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
    }
    assert!(!j.path("out.jsonl").exists() || lines(&j.path("out.jsonl")).is_empty());
    let items = j.p("items.jsonl");
    for spec in [format!("{items}:0"), format!("{items}:x"), items.clone()] {
        let o = hyoka(&["rubrics", "show", "dialogue6-ja", "--item", &spec]);
        assert_eq!(o.status.code(), Some(2), "{spec}: {}", stderr(&o));
    }
    let o = hyoka(&["rubrics", "show", &format!("{}/", j.dir.path().display())]);
    assert!(
        stderr(&o).contains("a folder, not a rubric file"),
        "{}",
        stderr(&o)
    );

    if let Some(minilm) = common::test_model("all-MiniLM-L6-v2") {
        let minilm = minilm.to_string_lossy().into_owned();
        let o = hyoka(&[
            "bertscore",
            "--model",
            &minilm,
            "--layer",
            "99",
            "-i",
            &items,
            "-o",
            &j.p("b.jsonl"),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("has 6 layers"), "{}", stderr(&o));
        let o = hyoka(&[
            "bertscore",
            "--model",
            &minilm,
            "-i",
            &items,
            "-o",
            &j.p("b.jsonl"),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("--layer: bert_score has no default layer"),
            "{}",
            stderr(&o)
        );
    }

    // meta: non-finite weights, a breakdown map for an aspect the judge lacks, an empty half.
    let fx = |n: &str| {
        common::fixtures()
            .join("meta")
            .join(n)
            .to_string_lossy()
            .into_owned()
    };
    let (fx_items, fx_judge) = (fx("items.jsonl"), fx("judge.jsonl"));
    for w in ["nan", "inf", "-inf", "NaN"] {
        let o = hyoka(&[
            "meta",
            "--accept-unhashed",
            "-i",
            &fx_items,
            "-s",
            &fx_judge,
            &format!("--w={w}"),
        ]);
        assert_eq!(o.status.code(), Some(2), "--w {w}: {}", stderr(&o));
    }
    let o = hyoka(&[
        "meta",
        "--accept-unhashed",
        "-i",
        &fx_items,
        "-s",
        &fx_judge,
        "--breakdown-levels",
        "nosuch:1=O,0=X",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no judge aspect \"nosuch\""),
        "{}",
        stderr(&o)
    );
    // One dialogue: one half of it is empty, whichever the seed puts it in.
    let one: String = text(Path::new(&fx_items))
        .lines()
        .filter(|l| l.contains("\"dialogue\": \"0\","))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(!one.is_empty(), "the fixture has dialogue 0");
    std::fs::write(j.path("one-dialogue.jsonl"), one).expect("write");
    let codes: Vec<Option<i32>> = ["dev", "held-out"]
        .iter()
        .map(|h| {
            hyoka(&[
                "meta",
                "--accept-unhashed",
                "-i",
                &j.p("one-dialogue.jsonl"),
                "-s",
                &fx_judge,
                "--half",
                h,
            ])
            .status
            .code()
        })
        .collect();
    assert!(codes.contains(&Some(2)), "{codes:?}");
}

#[test]
fn meta_tells_every_judge_apart_and_uses_nothing_it_cannot_trust() {
    let tmp = tempfile::tempdir().expect("tmp");
    let fx = |n: &str| common::fixtures().join("meta").join(n);
    let items = fx("items.jsonl").to_string_lossy().into_owned();
    let judge = text(&fx("judge.jsonl"));
    for (run, sha) in [("runA", "\"sha256\": \"0\""), ("runB", "\"sha256\": \"1\"")] {
        std::fs::create_dir(tmp.path().join(run)).expect("mkdir");
        std::fs::write(
            tmp.path().join(run).join("judge.jsonl"),
            judge.replace("\"sha256\": \"0\"", sha),
        )
        .expect("write");
    }
    let p = |n: &str| tmp.path().join(n).to_string_lossy().into_owned();
    let o = hyoka(&[
        "meta",
        "--accept-unhashed",
        "-i",
        &items,
        "-s",
        &p("runA/judge.jsonl"),
        "-s",
        &p("runB/judge.jsonl"),
        "--json",
        &p("s.json"),
        "--bootstrap",
        "0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: Value = serde_json::from_str(&text(&tmp.path().join("s.json"))).expect("JSON");
    let rows: Vec<String> = summary["correlations"]
        .as_array()
        .expect("list")
        .iter()
        .map(|e| e["row"].as_str().expect("row").to_string())
        .collect();
    for label in ["judge[runA] expected", "judge[runB] expected"] {
        assert!(
            rows.iter().any(|r| r.starts_with(label)),
            "{label}: {rows:?}"
        );
    }
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(md.contains("[runA]") && md.contains("[runB]"), "{md}");
    assert!(
        md.contains("- [runA] judge:") && md.contains("- [runB] judge:"),
        "{md}"
    );
    // Every coefficient with its n; the three systems' coefficients marked as too few units,
    // the items' not.
    let section = |title: &str| -> String {
        md.split(title)
            .nth(1)
            .and_then(|rest| rest.split("###").next())
            .unwrap_or_else(|| panic!("{title}: {md}"))
            .to_string()
    };
    let systems = section("### System level");
    assert!(systems.contains("(n=3) †"), "{systems}");
    assert!(systems.contains("† fewer than 5 systems"), "{systems}");
    let item_table = section("### Item level");
    assert!(
        item_table.contains("(n=7") && !item_table.contains('†'),
        "{item_table}"
    );

    // One file given twice (by two paths): refused.
    let o = hyoka(&[
        "meta",
        "--accept-unhashed",
        "-i",
        &items,
        "-s",
        &p("runA/judge.jsonl"),
        "-s",
        &p("runB/../runA/judge.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // A file that gives no item a score: ids that match nothing, or only error lines.
    let first: Value = serde_json::from_str(judge.lines().next().expect("a line")).expect("JSON");
    let provenance = first["provenance"].clone();
    let foreign: String = judge.replace("\"id\": \"", "\"id\": \"other-");
    std::fs::write(tmp.path().join("foreign.jsonl"), &foreign).expect("write");
    let errors = format!(
        "{}\n",
        serde_json::json!({"id": first["id"], "error": "failed", "provenance": provenance})
    );
    std::fs::write(tmp.path().join("errors.jsonl"), errors).expect("write");
    for (file, says) in [
        ("foreign.jsonl", "none of its"),
        ("errors.jsonl", "all error lines"),
    ] {
        let o = hyoka(&["meta", "--accept-unhashed", "-i", &items, "-s", &p(file)]);
        assert_eq!(o.status.code(), Some(3), "{file}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{file}: {}", stderr(&o));
    }
    // Some lines for other ids: counted, said, left out.
    let mixed: String = judge
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i < 3 {
                l.replace("\"id\": \"", "\"id\": \"other-")
            } else {
                l.to_string()
            }
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(tmp.path().join("mixed.jsonl"), mixed).expect("write");
    let o = hyoka(&[
        "meta",
        "--accept-unhashed",
        "-i",
        &items,
        "-s",
        &p("mixed.jsonl"),
        "--bootstrap",
        "0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("3 lines are for ids not among the items"),
        "{}",
        stderr(&o)
    );

    // A score off the aspect's scale.
    let off: String = judge.replacen("\"score\": 1,", "\"score\": 7,", 1);
    assert_ne!(off, judge, "the fixture has a score of 1");
    std::fs::write(tmp.path().join("off.jsonl"), off).expect("write");
    let o = hyoka(&[
        "meta",
        "--accept-unhashed",
        "-i",
        &items,
        "-s",
        &p("off.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(".score: 7 is not on the aspect's scale"),
        "{}",
        stderr(&o)
    );
}

/// An item its scorer failed on is unscored: counted and shown as such in summary.json,
/// summary.md and report.html, and absent from every statistic — the summary equals the one of
/// a file without its line.
#[test]
fn unscored_items_are_counted_and_never_a_number() {
    let tmp = tempfile::tempdir().expect("tmp");
    let fx = |n: &str| common::fixtures().join("meta").join(n);
    let items = fx("items.jsonl").to_string_lossy().into_owned();
    let judge = text(&fx("judge.jsonl"));
    let lines: Vec<Value> = judge
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let provenance = lines[0]["provenance"].clone();
    // Lines 0 and 5: the judge failed; line 9: nothing to score; line 12: no line at all; and a
    // line for an id that is not an item.
    let mut failed = String::new();
    let mut dropped = String::new();
    for (i, line) in lines.iter().enumerate() {
        let written = match i {
            0 | 5 => {
                serde_json::json!({"id": line["id"], "error": "prompt too long", "provenance": provenance})
            }
            9 => {
                serde_json::json!({"id": line["id"], "error": "an opening turn", "not_applicable": true, "provenance": provenance})
            }
            12 => continue,
            _ => line.clone(),
        };
        failed.push_str(&format!("{written}\n"));
        if ![0, 5, 9].contains(&i) {
            dropped.push_str(&format!("{line}\n"));
        }
    }
    failed.push_str(&format!(
        "{}\n",
        serde_json::json!({"id": "not-an-item", "error": "x", "provenance": provenance})
    ));
    std::fs::write(tmp.path().join("failed.jsonl"), failed).expect("write");
    std::fs::write(tmp.path().join("dropped.jsonl"), dropped).expect("write");
    let p = |n: &str| tmp.path().join(n).to_string_lossy().into_owned();
    let meta = |results: &str, json: &str, html: &str| {
        let o = hyoka(&[
            "meta",
            "--accept-unhashed",
            "-i",
            &items,
            "-s",
            &p(results),
            "--json",
            &p(json),
            "--html",
            &p(html),
            "--bootstrap",
            "50",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let summary: Value = serde_json::from_str(&text(&tmp.path().join(json))).expect("JSON");
        (
            summary,
            String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr(&o),
        )
    };
    let (summary, md, err) = meta("failed.jsonl", "failed.json", "failed.html");
    // The counts, from the file as written.
    let item_ids: Vec<Value> = text(&fx("items.jsonl"))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON")["id"].clone())
        .collect();
    let written: Vec<Value> = text(&tmp.path().join("failed.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let of_items: Vec<&Value> = written
        .iter()
        .filter(|l| item_ids.contains(&l["id"]))
        .collect();
    let count = |f: &dyn Fn(&Value) -> bool| of_items.iter().filter(|l| f(l)).count() as u64;
    let scored = count(&|l| l.get("scores").is_some());
    let unscored = count(&|l| l.get("error").is_some() && l.get("not_applicable").is_none());
    assert!(unscored >= 2);
    let counted = &summary["sources"][0]["lines"];
    assert_eq!(
        counted,
        &serde_json::json!({
            "scored": scored,
            "unscored": unscored,
            "not_applicable": 1,
            "without_line": item_ids.len() - of_items.len(),
            "other_ids": written.len() - of_items.len(),
        }),
        "{summary}"
    );
    let said = format!("{scored} items scored, {unscored} unscored");
    assert!(
        md.contains(&said) && md.contains("1 not applicable"),
        "{md}"
    );
    assert!(text(&tmp.path().join("failed.html")).contains(&said));
    assert!(err.contains(&format!("{unscored} of its")), "{err}");
    // Nothing of the three enters a statistic: every coefficient, interval and count is the
    // one of the file without them.
    let (clean, ..) = meta("dropped.jsonl", "dropped.json", "dropped.html");
    for key in ["correlations", "rows", "judge_matrix", "chance", "human"] {
        assert_eq!(summary[key], clean[key], "{key}");
    }
    assert_eq!(summary["correlations"][0]["n"].as_u64(), Some(scored));
}

#[test]
fn commands_end_quietly_and_say_things_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let p = |n: &str| tmp.path().join(n).to_string_lossy().into_owned();
    // Output to a reader that has gone: no panic, no message.
    let items = common::repo_root().join("examples/items.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args(["validate", "--json", &items.to_string_lossy()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );

    // An OS error once, not twice.
    std::fs::create_dir(tmp.path().join("dir.jsonl")).expect("mkdir");
    let o = hyoka(&["validate", &p("dir.jsonl")]);
    let err = stderr(&o);
    assert_eq!(err.matches("os error 21").count(), 1, "{err}");

    // A lone surrogate is named as such; a whole number written as 1.0 is not said to be
    // inexact.
    std::fs::write(
        tmp.path().join("bad.jsonl"),
        "{\"id\": \"a\", \"context\": [], \"response\": {\"speaker\": \"A\", \"text\": \"x\\ud800\"}}\n{\"id\": 1.0, \"context\": [], \"response\": {\"speaker\": \"A\", \"text\": \"x\"}}\n",
    )
    .expect("write");
    let o = hyoka(&["validate", "--skip-invalid", &p("bad.jsonl")]);
    let err = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(
        err.contains("\\ud800 is half of a UTF-16 surrogate pair"),
        "{err}"
    );
    assert!(!err.contains("cannot be kept exactly"), "{err}");
    assert!(err.contains("written as a fraction"), "{err}");
}

#[test]
fn numeric_ids_come_back_as_numbers() {
    let Some(j) = Judge::new() else { return };
    let numbered = items_text(|i, item| item["id"] = serde_json::json!(i + 10));
    std::fs::write(j.path("items.jsonl"), numbered).expect("write");
    let o = j.judge("items.jsonl", "out.jsonl", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut ids: Vec<Value> = lines(&j.path("out.jsonl"))
        .iter()
        .map(|l| l["id"].clone())
        .collect();
    ids.sort_by_key(|v| v.as_i64());
    assert_eq!(
        ids,
        (10..14).map(|i| serde_json::json!(i)).collect::<Vec<_>>()
    );
    // A rerun reads them back as finished; eval writes the items back as they were.
    let o = j.judge("items.jsonl", "out.jsonl", &[]);
    assert!(stderr(&o).contains("scored 0 items"), "{}", stderr(&o));
    let o = hyoka(&[
        "eval",
        "-i",
        &j.p("items.jsonl"),
        "-o",
        &j.p("run"),
        "--rubric",
        &j.p("rubric.toml"),
        "--model",
        &j.model.to_string_lossy(),
        "--no-bertscore",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        lines(&j.path("run/items.jsonl"))[0]["id"],
        serde_json::json!(10)
    );
    assert_eq!(
        lines(&j.path("run/scores.jsonl"))[0]["id"],
        serde_json::json!(10)
    );
}

/// A run refused once the model has loaded (here: a prompt limit the rubric's own prompt
/// exceeds, found while planning) writes nothing: a new output is not left behind empty, and
/// an existing one — with `--overwrite` too — keeps every byte until a first line is written.
#[test]
fn a_run_refused_while_planning_leaves_its_output_as_it_was() {
    let Some(j) = Judge::new() else { return };
    let o = j.judge("items.jsonl", "new.jsonl", &["--max-prompt-tokens", "10"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        !j.path("new.jsonl").exists(),
        "a refused run left an output file"
    );
    let o = j.judge("items.jsonl", "out.jsonl", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A cut-off last line: a resumed run would cut it.
    let mut text = std::fs::read_to_string(j.path("out.jsonl")).expect("read");
    text.push_str("{\"id\": \"gone\", \"error\": \"x\", \"provenance\"");
    std::fs::write(j.path("out.jsonl"), &text).expect("write");
    // Without --overwrite the other setting is refused before the model loads (exit 3); with
    // it, the limit is refused while planning (exit 2).
    for (extra, code) in [(&[][..], 3), (&["--overwrite"][..], 2)] {
        let mut args = vec!["--max-prompt-tokens", "10"];
        args.extend_from_slice(extra);
        let o = j.judge("items.jsonl", "out.jsonl", &args);
        assert_eq!(o.status.code(), Some(code), "{}", stderr(&o));
        assert_eq!(
            std::fs::read_to_string(j.path("out.jsonl")).expect("read"),
            text,
            "{extra:?}: the refused run changed the file"
        );
    }
}
