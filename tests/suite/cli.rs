//! The `hyoka` binary end to end: exit codes, messages and files.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

fn hyoka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args(args)
        .output()
        .expect("hyoka runs")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn import_dbdc3_writes_1650_items_with_30_raters() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("x.jsonl");
    let out = hyoka(&[
        "import",
        "dbdc3",
        common::dbdc3_dir().to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let content = std::fs::read_to_string(&out_path).unwrap();
    let lines: Vec<&str> = content.lines().collect();
    assert_eq!(lines.len(), 1650);
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["human"]["breakdown"].as_array().unwrap().len(), 30);
        assert_eq!(v["raters"].as_array().unwrap().len(), 30);
    }
    let out = hyoka(&["validate", out_path.to_str().unwrap()]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    assert!(stdout.contains("1650 items"), "{stdout}");
    assert!(
        stdout.contains("human.breakdown: 1650 items, 30 rater(s) each"),
        "{stdout}"
    );
}

fn write(dir: &Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn validate_names_file_line_and_field_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let good = r#"{"id": 1, "context": [{"speaker": "U", "text": "やあ"}], "response": {"speaker": "S", "text": "こんにちは"}}"#;
    let bad =
        r#"{"id": 3, "context": [{"speaker": "U"}], "response": {"speaker": "S", "text": "x"}}"#;
    let file = write(
        dir.path(),
        "items.jsonl",
        &format!(
            "{good}\n{}\n{bad}\n",
            good.replace("\"id\": 1", "\"id\": 2")
        ),
    );
    let out = hyoka(&["validate", &file]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{file}:3: context[0].text: missing")),
        "{err}"
    );

    let out = hyoka(&["validate", "--skip-invalid", &file]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("2 items"), "{stdout}");
    assert!(stdout.contains("skipped 1 invalid line(s)"), "{stdout}");

    let out = hyoka(&[
        "validate",
        &dir.path().join("missing.jsonl").to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let out = hyoka(&["validate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn rubrics_list_shows_the_four_builtins() {
    let out = hyoka(&["rubrics", "list"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    for name in [
        "dialogue6-ja",
        "dialogue6-en",
        "roleplay8-ja",
        "emotion-fit",
    ] {
        assert!(
            stdout.lines().any(|l| l == name),
            "{name} missing from:\n{stdout}"
        );
    }
    assert!(stdout.contains("文脈的整合性 0..1"), "{stdout}");
}

#[test]
fn rubrics_show_renders_an_item_through_the_model_template() {
    let Some(gguf) = common::test_model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let items = write(
        dir.path(),
        "items.jsonl",
        "{\"id\": \"x\", \"context\": [{\"speaker\": \"U\", \"text\": \"ラーメンが好きです\"}], \"response\": {\"speaker\": \"S\", \"text\": \"醤油味ですか？\"}}\n",
    );
    let out = hyoka(&[
        "rubrics",
        "show",
        "dialogue6-ja",
        "--item",
        &format!("{items}:1"),
        "--chat-template",
        gguf.to_str().unwrap(),
        "--aspect",
        "coherence",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("<|im_start|>system\n"), "{stdout}");
    assert!(
        stdout.contains("Aさん「ラーメンが好きです」\nBさんの応答 (評価対象) 「醤油味ですか？」"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("<|im_end|>\n<|im_start|>assistant\n文脈的整合性: 「"),
        "{stdout}"
    );

    let out = hyoka(&[
        "rubrics",
        "show",
        "dialogue6-ja",
        "--item",
        &format!("{items}:2"),
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains(&format!("{items}:2")));
}

#[test]
fn a_bad_user_rubric_names_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let rubric = |aspect_max: i64, user: &str| {
        format!(
            "name = \"mine\"\ndescription = \"d\"\noutput = \"score\"\n[prompt]\nuser = \"{user}\"\nanswer = \"{{{{ aspect.name }}}}: \"\n\
         [[aspects]]\nkey = \"q\"\nname = \"Quality\"\nmin = 1\nmax = {aspect_max}\ndefinition = \"how good\"\n"
        )
    };
    let good = write(
        dir.path(),
        "good.toml",
        &rubric(5, "Rate: {{ response.text }}"),
    );
    let out = hyoka(&["rubrics", "show", &good]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("answer prefix for q (1..5): \"Quality: \""));

    let scale = write(
        dir.path(),
        "scale.toml",
        &rubric(1, "Rate: {{ response.text }}"),
    );
    let out = hyoka(&["rubrics", "show", &scale]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains(&format!("{scale}: aspects[0].max:")),
        "{}",
        text(&out.stderr)
    );

    let typo = write(
        dir.path(),
        "typo.toml",
        &rubric(5, "Rate: {{ respnse.text }}"),
    );
    let out = hyoka(&["rubrics", "show", &typo]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains(&format!("{typo}: prompt.user:")),
        "{}",
        text(&out.stderr)
    );

    let out = hyoka(&["rubrics", "show", "no-such-rubric"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("built-in: dialogue6-ja"));
}

#[test]
fn every_command_help_explains_more_than_its_one_line_summary() {
    // The long texts the option structs carry (clap takes a variant's doc comment instead when
    // the subcommand's variant has one).
    for (cmd, phrase) in [
        ("judge", "Nothing is generated or parsed"),
        ("bertscore", "exactly as bert_score 0.3.13 computes it"),
        ("meta", "scipy's p-values"),
        ("eval", "report.html"),
        ("merge", "every results line must come from the same run"),
        ("validate", "Each line is one JSON object"),
    ] {
        let out = hyoka(&[cmd, "--help"]);
        assert!(out.status.success());
        let help = text(&out.stdout)
            .replace('\n', " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            help.contains(phrase),
            "`hyoka {cmd} --help` lacks {phrase:?}:\n{help}"
        );
    }
    // One exit-code table, shown by every command, nested ones too.
    for cmd in [
        &[][..],
        &["judge"],
        &["bertscore"],
        &["meta"],
        &["eval"],
        &["merge"],
        &["validate"],
        &["bench"],
        &["import"],
        &["import", "dbdc3"],
        &["rubrics"],
        &["rubrics", "list"],
        &["rubrics", "show"],
        &["bertscore", "baseline"],
    ] {
        let out = hyoka(&[cmd, &["--help"]].concat());
        let help = text(&out.stdout);
        for code in [
            "  2  usage",
            "  3  invalid input",
            "  4  finished, but some items failed",
        ] {
            assert!(
                help.contains(code),
                "`hyoka {cmd:?} --help` lacks {code:?}:\n{help}"
            );
        }
    }
}

/// Bad input files get a clear error naming file and line, exit 3, bounded memory — never a
/// panic: invalid UTF-8 (skippable), an endless line (/dev/zero), numeric ids too long to keep
/// exactly (not reported as duplicates), and `bench` on no items or `--n 0`.
#[test]
fn bad_bytes_endless_lines_long_numeric_ids_and_empty_bench_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, b"{\"id\":\"a\",\"response\":{\"speaker\":\"S\",\"text\":\"x\"}}\n{\"id\":\"b\",\"response\":{\"speaker\":\"S\",\"text\":\"\xff\xfe\"}}\n{\"id\":\"c\",\"response\":{\"speaker\":\"S\",\"text\":\"z\"}}\n").unwrap();
    let out = hyoka(&["validate", bad.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("bad.jsonl:2: not valid UTF-8"), "{err}");
    assert_eq!(
        err.matches("not valid UTF-8").count(),
        1,
        "said once: {err}"
    );
    let out = hyoka(&["validate", bad.to_str().unwrap(), "--skip-invalid"]);
    assert!(
        text(&out.stdout).contains("2 items") && text(&out.stdout).contains("bad.jsonl:2"),
        "{}",
        text(&out.stdout)
    );

    let out = hyoka(&["validate", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("/dev/zero:1: a line longer than 64 MiB"),
        "{}",
        text(&out.stderr)
    );

    let big = dir.path().join("big.jsonl");
    std::fs::write(&big, "{\"id\":123456789012345678901234567890,\"response\":{\"speaker\":\"S\",\"text\":\"x\"}}\n{\"id\":123456789012345678901234567891,\"response\":{\"speaker\":\"S\",\"text\":\"y\"}}\n").unwrap();
    let out = hyoka(&["validate", big.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(
        out.status.code() == Some(3)
            && err.contains("big.jsonl:1: id:")
            && err.contains("write this id as a string")
            && !err.contains("duplicate"),
        "{err}"
    );

    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let out = hyoka(&["bench", "--model", "unused", "-i", empty.to_str().unwrap()]);
    assert!(
        out.status.code() == Some(3) && text(&out.stderr).contains("no items to benchmark"),
        "{}",
        text(&out.stderr)
    );
    let out = hyoka(&[
        "bench",
        "--model",
        "unused",
        "-i",
        bad.to_str().unwrap(),
        "--n",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// `meta` reads results strictly: a byte-order mark is fine; an item's second line, or a line of
/// another run, is refused naming file and line (exit 3) instead of changing numbers silently.
#[test]
fn meta_refuses_repeated_items_and_mixed_runs_and_accepts_a_bom() {
    let dir = tempfile::tempdir().unwrap();
    let items = common::fixtures().join("meta/items.jsonl");
    let scores = std::fs::read_to_string(common::fixtures().join("meta/bertscore.jsonl")).unwrap();
    let lines: Vec<&str> = scores.lines().collect();
    let write = |name: &str, content: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        p
    };
    let run = |scores: &Path| {
        hyoka(&[
            "meta",
            "--accept-unhashed",
            "-i",
            items.to_str().unwrap(),
            "-s",
            scores.to_str().unwrap(),
            "--bootstrap",
            "0",
        ])
    };
    let bom = write("bom.jsonl", format!("\u{feff}{scores}"));
    let out = run(&bom);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let repeated = write("repeated.jsonl", format!("{scores}{}\n", lines[0]));
    let out = run(&repeated);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("repeated.jsonl:{}: id:", lines.len() + 1))
            && err.contains("first on line 1"),
        "{err}"
    );
    let other = lines[1].replacen("\"layer\": 6", "\"layer\": 7", 1);
    assert_ne!(other, lines[1], "the fixture's lines carry a layer setting");
    let mixed = write("mixed.jsonl", format!("{}\n{other}\n", lines[0]));
    let out = run(&mixed);
    let err = text(&out.stderr);
    assert!(
        out.status.code() == Some(3)
            && err.contains("mixed.jsonl:2: provenance:")
            && err.contains("another run"),
        "{err}"
    );
}

/// An output that cannot be written — locked by a running hyoka, or not a results file — is
/// refused before any model loads (the model here does not even exist), exit 3.
#[test]
fn outputs_are_checked_before_models_load() {
    let dir = tempfile::tempdir().unwrap();
    let items = common::fixtures().join("meta/items.jsonl");
    let locked = dir.path().join("locked.jsonl");
    std::fs::write(&locked, "").unwrap();
    let holder = std::fs::OpenOptions::new()
        .append(true)
        .open(&locked)
        .unwrap();
    holder.lock().unwrap();
    let corrupt = dir.path().join("corrupt.jsonl");
    std::fs::write(&corrupt, "not json\n{\"id\": \"x\"}\n").unwrap();
    for (out, want) in [
        (&locked, "another hyoka run is writing this file"),
        (&corrupt, "corrupt.jsonl:1:"),
    ] {
        for cmd in [
            vec![
                "judge",
                "--rubric",
                "dialogue6-ja",
                "--model",
                "/nonexistent/model.gguf",
                "-i",
                items.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ],
            vec![
                "bertscore",
                "--model",
                "/nonexistent/encoder",
                "--layer",
                "1",
                "-i",
                items.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ],
        ] {
            let o = hyoka(&cmd);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(3), "{cmd:?}: {err}");
            assert!(
                err.contains(want) && !err.contains("nonexistent"),
                "{cmd:?}: {err}"
            );
        }
    }
    drop(holder);
}

/// A --dtype or --device this build cannot use is a bad flag value (exit 2, named as itself),
/// and a json rubric's reason bound is checked (2^64 − 1 must not wrap the context arithmetic);
/// `--json-cache-gib` takes a size above zero.
#[test]
fn bad_flag_values_exit_2_and_reason_bounds_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let items = common::fixtures().join("meta/items.jsonl");
    let out = dir.path().join("o.jsonl");
    // `hyoka judge` on a model that is never loaded: the flag is refused first.
    let judge = |extra: &[&str]| {
        let mut args = vec![
            "judge",
            "--rubric",
            "dialogue6-ja",
            "--model",
            "/nonexistent.gguf",
            "-i",
            items.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        hyoka(&args)
    };
    for (flag, value) in [("--dtype", "f64"), ("--device", "nonsense")] {
        let o = judge(&[flag, value]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(
            err.contains(&format!("{flag} {value}:")),
            "named as itself: {err}"
        );
    }
    // The json cache's budget: a number of GiB above zero, refused by the argument parser.
    for value in ["0", "-1", "nan", "inf"] {
        let o = judge(&[&format!("--json-cache-gib={value}")]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--json-cache-gib {value}: {err}");
        assert!(
            err.contains("--json-cache-gib") && err.contains("GiB above 0"),
            "{value}: {err}"
        );
    }
    let toml = text(&hyoka(&["rubrics", "show", "roleplay8-ja", "--toml"]).stdout);
    let huge = toml
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("reason_max_tokens") {
                "reason_max_tokens = 2000000".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(huge, toml, "the built-in json rubric has a reason bound");
    let path = dir.path().join("huge.toml");
    std::fs::write(&path, huge).unwrap();
    let o = hyoka(&["rubrics", "show", path.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert!(
        o.status.code() == Some(3)
            && err.contains("huge.toml: json.reason_max_tokens: at most 1048576"),
        "{err}"
    );
}

/// Ratings too large for the statistics (1e308 gave NaN and ±inf correlations) are refused at
/// the input edge, naming file, line and field.
#[test]
fn ratings_beyond_2_pow_53_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let line = |human: &str| {
        format!(
            r#"{{"id": "a", "context": [{{"speaker": "U", "text": "hi"}}], "response": {{"speaker": "S", "text": "hello"}}, "human": {human}}}"#
        )
    };
    let ok = write(
        dir.path(),
        "ok.jsonl",
        &line(r#"{"q": [9007199254740992, -3]}"#),
    );
    assert!(hyoka(&["validate", &ok]).status.success());
    for (name, human, field) in [
        ("big.jsonl", r#"{"q": 1e308}"#, "human.q"),
        ("list.jsonl", r#"{"q": [1, -1e300]}"#, "human.q[1]"),
    ] {
        let path = write(
            dir.path(),
            name,
            &format!(
                "{}\n{}\n",
                line(r#"{"q": 1}"#).replace("\"a\"", "\"z\""),
                line(human)
            ),
        );
        let out = hyoka(&["validate", &path]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(
            err.contains(&format!("{name}:2")) && err.contains(field) && err.contains("2^53"),
            "{err}"
        );
    }
}

/// `meta` pairs a judge's aspects with the human ratings its rubric named (`human = [...]`)
/// from the results' provenance: the rubric file is not read again (it may have moved or
/// changed since the run).
#[test]
fn meta_takes_human_targets_from_the_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let items = common::fixtures().join("meta/items.jsonl");
    let judge = std::fs::read_to_string(common::fixtures().join("meta/judge.jsonl")).unwrap();
    // The items are rated for coherence and overall. The judge's second aspect is renamed
    // "quality": with no rubric to say otherwise it is compared with every human aspect; its
    // run's provenance says it targets coherence only, and the rubric file is gone.
    let quality = judge.replace(r#""overall": {"score""#, r#""quality": {"score""#);
    assert_ne!(quality, judge, "the fixture has an overall aspect");
    let targeted = quality.replace(
        r#""rubric": {"name": "fixture", "source": "fixture", "hash": "0"}"#,
        r#""rubric": {"name": "gone", "source": "/nonexistent/rubric.toml", "hash": "0", "aspects": [{"key": "coherence"}, {"key": "quality", "human": ["coherence"]}]}"#,
    );
    assert_ne!(targeted, quality, "the fixture names its rubric");
    let run = |name: &str, content: &str| {
        let scores = write(dir.path(), name, content);
        let json = dir.path().join("summary.json");
        let out = hyoka(&[
            "meta",
            "--accept-unhashed",
            "-i",
            items.to_str().unwrap(),
            "-s",
            &scores,
            "--bootstrap",
            "0",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        // The human aspects the judge's quality column is correlated with.
        let mut humans: Vec<String> = v["correlations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["row"] == "judge expected · quality" && c["level"] == "item")
            .map(|c| c["human"].as_str().unwrap().to_string())
            .collect();
        humans.sort();
        humans
    };
    assert_eq!(run("plain.jsonl", &quality), ["coherence", "overall"]);
    assert_eq!(run("targeted.jsonl", &targeted), ["coherence"]);
}

/// `meta` reads a results file's first line bounded too: an endless line is refused at once
/// (exit 3), not read until memory runs out.
#[test]
fn meta_refuses_an_endless_results_line() {
    let items = common::fixtures().join("meta/items.jsonl");
    let out = hyoka(&["meta", "-i", items.to_str().unwrap(), "-s", "/dev/zero"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("/dev/zero:1"), "{err}");
}

/// A model file hyoka cannot read fails the run with exit 1 and a message a user can act on:
/// a file of a type hyoka does not read names it; a damaged file says so without candle's
/// backtrace, even with RUST_BACKTRACE set.
#[test]
fn unreadable_gguf_files_exit_1_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let items = write(
        dir.path(),
        "items.jsonl",
        r#"{"id": 1, "context": [{"speaker": "U", "text": "やあ"}], "response": {"speaker": "S", "text": "こんにちは"}}"#,
    );
    let fixture = common::fixtures().join("converter/qwen2/q4_k_m.gguf");
    let damaged = dir.path().join("damaged.gguf");
    std::fs::write(&damaged, &std::fs::read(&fixture).unwrap()[..4096]).unwrap();
    let ternary = common::fixtures().join("converter/qwen2/tq2_0.gguf");
    for (model, wants) in [
        (ternary.as_path(), &["TQ2_0", "Q4_K_M"][..]),
        (
            damaged.as_path(),
            &["damaged.gguf", "not a readable GGUF file"],
        ),
    ] {
        let out_path = dir.path().join("out.jsonl");
        let out = Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args(["judge", "--rubric", "dialogue6-ja", "--model"])
            .arg(model)
            .args(["--input", &items, "-o", out_path.to_str().unwrap()])
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        for want in wants {
            assert!(err.contains(want), "{want}: {err}");
        }
        assert!(!err.contains("candle_core::"), "{err}");
    }
}

/// The paths a `mock_hub` was asked for, each with its Authorization header.
type Asked = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

/// A minimal Hugging Face Hub for one repository, on a local port: the listing API and
/// `resolve` downloads as hf-hub requests them (a first byte for the metadata: commit, etag,
/// size; then the rest). Returns the endpoint and what it was asked.
fn mock_hub(
    repo: &'static str,
    commit: &'static str,
    files: Vec<(String, Vec<u8>)>,
) -> (String, Asked) {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut head = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push(line.trim_end().to_string());
            }
            let path = head
                .first()
                .and_then(|l| l.split(' ').nth(1))
                .unwrap_or("")
                .to_string();
            let range_start = head
                .iter()
                .find_map(|h| {
                    h.to_lowercase()
                        .strip_prefix("range: bytes=")
                        .map(String::from)
                })
                .and_then(|r| r.split('-').next().and_then(|s| s.parse::<usize>().ok()));
            let authorization = head.iter().find_map(|h| {
                h.to_lowercase()
                    .starts_with("authorization: ")
                    .then(|| h["authorization: ".len()..].to_string())
            });
            seen.lock().unwrap().push((path.clone(), authorization));
            let (status, headers, body) = if path == format!("/api/models/{repo}/revision/main") {
                let siblings: Vec<_> = files
                    .iter()
                    .map(|(name, _)| serde_json::json!({ "rfilename": name }))
                    .collect();
                let json = serde_json::json!({ "sha": commit, "siblings": siblings });
                ("200 OK", String::new(), json.to_string().into_bytes())
            } else if let Some((_, data)) = files
                .iter()
                .find(|(name, _)| path == format!("/{repo}/resolve/main/{name}"))
            {
                let start = range_start.unwrap_or(0);
                let end = if start == 0 && head.iter().any(|h| h.ends_with("bytes=0-0")) {
                    1
                } else {
                    data.len()
                };
                let etag = hyoka::checksum::sha256_hex(data);
                let headers = format!(
                    "x-repo-commit: {commit}\r\netag: \"{etag}\"\r\ncontent-range: bytes {start}-{}/{}\r\n",
                    end - 1,
                    data.len()
                );
                ("206 Partial Content", headers, data[start..end].to_vec())
            } else {
                ("404 Not Found", String::new(), b"not found".to_vec())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(&body);
        }
    });
    (endpoint, asked)
}

/// From the Hub (a local stand-in, so that no network is needed), a split GGUF named by its
/// quantization tag: hf-hub's real download code fetches every shard, the run scores, and the
/// provenance holds the commit and the shards' sha256, and HF_TOKEN goes with every request
/// (hf-hub alone reads only the token file); a GGUF repository named as a checkpoint is refused
/// with what to name. Then offline, from the cache alone, the same.
#[test]
fn hub_downloads_every_shard_of_a_split_gguf_named_by_tag() {
    let commit = "89abcdef0123456789abcdef0123456789abcdef";
    let shards: Vec<(String, Vec<u8>)> = (1..=3)
        .map(|k| {
            let name = format!("q4_k_m-{k:05}-of-00003.gguf");
            let data = std::fs::read(common::fixtures().join("converter/qwen2/split").join(&name))
                .unwrap();
            (format!("Q4_K_M/{name}"), data)
        })
        .collect();
    let mut all = Vec::new();
    for (_, data) in &shards {
        all.extend_from_slice(data);
    }
    let sha = hyoka::checksum::sha256_hex(&all);
    let mut files = shards.clone();
    files.push(("README.md".into(), b"# a GGUF repository".to_vec()));
    let (endpoint, asked) = mock_hub("hyoka-test/split-gguf", commit, files);

    let dir = tempfile::tempdir().unwrap();
    let items = write(
        dir.path(),
        "items.jsonl",
        r#"{"id": 1, "context": [{"speaker": "U", "text": "やあ"}], "response": {"speaker": "S", "text": "こんにちは"}}"#,
    );
    let template = write(
        dir.path(),
        "t.jinja",
        "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    );
    let judge = |model: &str, out: &str, offline: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hyoka"));
        c.args(["judge", "--rubric", "dialogue6-ja", "--model", model])
            .args(["--chat-template", &template, "--input", &items, "-o", out])
            .env("HF_ENDPOINT", &endpoint)
            .env("HF_HOME", dir.path().join("hf"))
            .env("HF_TOKEN", "hf_test_token")
            .env_remove("HF_HUB_OFFLINE");
        if offline {
            c.env("HF_HUB_OFFLINE", "1");
        }
        c.output().unwrap()
    };
    let out = dir.path().join("out.jsonl");
    let o = judge("hyoka-test/split-gguf:q4_k_m", out.to_str().unwrap(), false);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let asked = asked.lock().unwrap().clone();
    for (name, _) in &shards {
        let path = format!("/hyoka-test/split-gguf/resolve/main/{name}");
        assert!(asked.iter().any(|(p, _)| *p == path), "{path} not fetched");
    }
    assert!(
        asked
            .iter()
            .all(|(_, auth)| auth.as_deref() == Some("Bearer hf_test_token")),
        "{asked:?}"
    );
    let line: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let model = &line["provenance"]["models"][0];
    assert_eq!(model["revision"], commit, "{model}");
    assert_eq!(model["sha256"], sha.as_str(), "{model}");

    let o = judge(
        "hyoka-test/split-gguf",
        dir.path().join("x.jsonl").to_str().unwrap(),
        false,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("a repository of GGUF files"), "{err}");

    let offline_out = dir.path().join("offline.jsonl");
    let o = judge(
        "hyoka-test/split-gguf:Q4_K_M",
        offline_out.to_str().unwrap(),
        true,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let scores = |p: &Path| -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(
            std::fs::read_to_string(p).unwrap().lines().next().unwrap(),
        )
        .unwrap()["scores"]
            .clone()
    };
    assert_eq!(scores(&offline_out), scores(&out));
}
