//! Input from elsewhere, as a hostile or careless source writes it: ids and datasets that name
//! paths outside the output, GGUF headers and templates that would hang, abort or score
//! silently, outputs two runs would share, preferences that match nothing. Each is refused
//! with the file, line or key and the documented exit code, and writes nothing.

use crate::common;
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

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every file below `dir`, relative.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The fixture's judge results with the ids of the lines `replace` names changed.
fn judge_lines_with_ids(replace: &[(usize, &str)]) -> String {
    let text = std::fs::read_to_string(common::fixtures().join("dbdc/judge.jsonl")).unwrap();
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some((_, id)) = replace.iter().find(|(k, _)| *k == n) {
                v["id"] = (*id).into();
            }
            v.to_string() + "\n"
        })
        .collect()
}

#[test]
fn a_dataset_never_writes_outside_the_output() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();

    // A DBDC-format folder whose dialogue id climbs out: refused at import.
    let data = root.join("data/SYS");
    std::fs::create_dir_all(&data).unwrap();
    let dialogue = r#"{"dialogue-id": "../../evil", "turns": [
        {"turn-index": 0, "speaker": "S", "utterance": "こんにちは", "annotations": [
            {"annotator-id": "a", "breakdown": "O", "ungrammatical-sentence": "O"}]}]}"#;
    std::fs::write(data.join("d.log.json"), dialogue).unwrap();
    let items = root.join("items.jsonl");
    let out = hyoka(&["import", "dbdc3", s(&root.join("data")), "-o", s(&items)]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("d.log.json") && err.contains("dialogue-id") && err.contains("holds '/'"),
        "{err}"
    );
    assert!(!items.exists());

    // The same ids in an items file: refused by every reader (validate here), line named.
    let line = r#"{"id": "S/../../outside/3", "response": {"speaker": "S", "text": "x"}}"#;
    std::fs::write(&items, format!("{line}\n")).unwrap();
    let out = hyoka(&["validate", s(&items)]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("items.jsonl:1: id:"),
        "{}",
        stderr(&out)
    );

    // Results whose ids name paths outside -o (or files no file system takes): nothing is
    // written anywhere, the output folder included, though earlier dialogues were fine.
    let long = format!("SYS1/{}/0", "9".repeat(300));
    for (id, why) in [
        ("../evil/1500000000/0", "\"..\""),
        ("S/../../../outside/1500000000/3", "\"..\""),
        ("/abs/1500000000/0", "is empty"),
        (long.as_str(), "bytes long"),
        ("SYS1/15\u{0}00/2", "holds"),
    ] {
        let scores = root.join("judge.jsonl");
        std::fs::write(&scores, judge_lines_with_ids(&[(150, id)])).unwrap();
        let dest = root.join("export");
        let before = files_below(root);
        let out = hyoka(&["export", "dbdc3", s(&scores), "-o", s(&dest)]);
        assert_eq!(out.status.code(), Some(3), "{id}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{id}: {}", stderr(&out));
        assert_eq!(files_below(root), before, "{id}: nothing written");
        assert!(!dest.exists());
    }

    // An export goes into a new or empty folder only: stale dialogues of an earlier export
    // would be scored by the challenge's script.
    let scores = root.join("judge.jsonl");
    std::fs::write(&scores, judge_lines_with_ids(&[])).unwrap();
    let dest = root.join("export");
    std::fs::create_dir(&dest).unwrap();
    let out = hyoka(&["export", "dbdc3", s(&scores), "-o", s(&dest)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(files_below(&dest).len(), 20);
    let out = hyoka(&["export", "dbdc3", s(&scores), "-o", s(&dest)]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("not empty"), "{}", stderr(&out));
    assert_eq!(files_below(&dest).len(), 20);
}

/// A GGUF written here with the given metadata and one tensor per name.
fn gguf(
    path: &Path,
    metadata: &[(&str, candle_core::quantized::gguf_file::Value)],
    tensors: &[(&str, (usize, usize))],
) {
    use candle_core::quantized::{QTensor, gguf_file};
    let dev = candle_core::Device::Cpu;
    let made: Vec<(String, QTensor)> = tensors
        .iter()
        .map(|(n, shape)| {
            let t = candle_core::Tensor::zeros(*shape, candle_core::DType::F32, &dev).unwrap();
            (
                n.to_string(),
                QTensor::quantize(&t, candle_core::quantized::GgmlDType::F32).unwrap(),
            )
        })
        .collect();
    let named: Vec<(&str, &QTensor)> = made.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let meta: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &meta, &named).unwrap();
}

/// Header numbers that would divide by zero, allocate 51 GB or describe tensors other than the
/// file's are refused at load with FILE: KEY and exit 3, before any item is read.
#[test]
fn hostile_gguf_headers_are_named_not_panicked_on() {
    use candle_core::quantized::gguf_file::Value;
    let tmp = tempfile::tempdir().unwrap();
    let items = common::repo_root().join("examples/items.jsonl");
    let template = tmp.path().join("t.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}{{ m.content }}{% endfor %}",
    )
    .unwrap();
    let tokenizer = common::fixtures().join("bert/bert/tokenizer.json");
    let base = |edit: &[(&'static str, Value)]| {
        let mut m: Vec<(&str, Value)> = vec![
            ("general.architecture", Value::String("llama".into())),
            ("llama.embedding_length", Value::U32(64)),
            ("llama.attention.head_count", Value::U32(4)),
            ("llama.attention.head_count_kv", Value::U32(2)),
            ("llama.block_count", Value::U32(1)),
            ("llama.feed_forward_length", Value::U32(128)),
        ];
        for (k, v) in edit {
            m.retain(|(key, _)| key != k);
            m.push((k, v.clone()));
        }
        m
    };
    let tensors = [
        ("token_embd.weight", (1000, 64)),
        ("blk.0.attn_q.weight", (64, 64)),
    ];
    for (edit, key, says) in [
        (
            vec![("llama.attention.head_count", Value::U32(0))],
            "llama.attention.head_count",
            "between 1 and",
        ),
        (
            vec![("llama.attention.head_count_kv", Value::U32(0))],
            "llama.attention.head_count_kv",
            "between 1 and",
        ),
        (
            vec![("llama.block_count", Value::U32(1 << 31))],
            "llama.block_count",
            "between 1 and 4096",
        ),
        (
            vec![("llama.attention.head_count_kv", Value::U32(3))],
            "llama.attention.head_count_kv",
            "shared evenly",
        ),
        (
            vec![("llama.embedding_length", Value::U32(96))],
            "token_embd.weight",
            "shape",
        ),
    ] {
        let path = tmp.path().join("hostile.gguf");
        gguf(&path, &base(&edit), &tensors);
        let out = hyoka(&[
            "judge",
            "--rubric",
            "breakdown3-ja",
            "--model",
            s(&path),
            "--tokenizer",
            s(&tokenizer),
            "--chat-template",
            s(&template),
            "-i",
            s(&items),
            "-o",
            s(&tmp.path().join("o.jsonl")),
        ]);
        assert_eq!(out.status.code(), Some(3), "{key}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("hostile.gguf: {key}: "))
                && err.contains(says)
                && !err.contains("panicked"),
            "{key}: {err}"
        );
        assert!(!tmp.path().join("o.jsonl").exists());
    }
    // A tokenizer whose ids run past the model's embedding: named at load, not at the first batch.
    let (Some(model), Some(gemma)) = (
        common::test_model("smollm2-135m-instruct-q4_1.gguf"),
        common::test_model("gemma-3-tokenizer"),
    ) else {
        return;
    };
    let out = hyoka(&[
        "judge",
        "--rubric",
        "breakdown3-ja",
        "--model",
        s(&model),
        "--tokenizer",
        s(&gemma),
        "-i",
        s(&items),
        "-o",
        s(&tmp.path().join("o.jsonl")),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("--tokenizer: 262144 token ids, but the model's embedding has 49152 rows"),
        "{}",
        stderr(&out)
    );
}

/// A rubric whose template loops without end stops the run at once, as invalid input naming
/// the template, instead of hanging (or writing one failure per item).
#[test]
fn an_endless_rubric_template_is_invalid_input() {
    let Some(model) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let rubric = std::fs::read_to_string(common::repo_root().join("examples/breakdown-ja.toml"))
        .unwrap()
        .replacen(
            "{{ response.text }}",
            "{{ response.text }}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            1,
        );
    assert!(
        rubric.contains("range(100000)"),
        "the example shows the response"
    );
    let path = tmp.path().join("loop.toml");
    std::fs::write(&path, rubric).unwrap();
    let out_path = tmp.path().join("o.jsonl");
    let items = common::repo_root().join("examples/items.jsonl");
    let start = std::time::Instant::now();
    let out = hyoka(&[
        "judge",
        "--rubric",
        s(&path),
        "--model",
        s(&model),
        "-i",
        s(&items),
        "-o",
        s(&out_path),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("fuel"), "{}", stderr(&out));
    assert!(start.elapsed().as_secs() < 120);
    assert!(!out_path.exists());
}

/// A second run on an output another run holds is refused at its start, writing nothing.
#[test]
fn outputs_held_by_a_running_command_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("eval");
    std::fs::create_dir(&folder).unwrap();
    let held = std::fs::File::open(&folder).unwrap();
    held.lock().unwrap();
    let items = common::repo_root().join("examples/items.jsonl");
    let out = hyoka(&[
        "eval",
        "-i",
        s(&items),
        "--model",
        "no/such-model",
        "--no-bertscore",
        "-o",
        s(&folder),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("another hyoka run"),
        "{}",
        stderr(&out)
    );
    assert!(files_below(&folder).is_empty());
    drop(held);

    let output = tmp.path().join("en.jsonl");
    let lock = tmp.path().join(".en.jsonl.hyoka-lock");
    let held = std::fs::File::create(&lock).unwrap();
    held.lock().unwrap();
    let out = hyoka(&[
        "translate",
        "-i",
        s(&items),
        "-o",
        s(&output),
        "--model",
        "no/such-model",
        "--store",
        s(&tmp.path().join("mine.jsonl")),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("another hyoka run"),
        "{}",
        stderr(&out)
    );
    assert!(!output.exists() && !tmp.path().join("mine.jsonl").exists());
}

/// Two outputs on one path and a w past f64's precision are refused before anything is read.
#[test]
fn meta_refuses_outputs_on_one_path_and_absurd_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("summary");
    let dbdc = common::fixtures().join("dbdc");
    let out = hyoka(&[
        "meta",
        "-i",
        s(&dbdc.join("items.jsonl")),
        "-s",
        s(&dbdc.join("judge.jsonl")),
        "--json",
        s(&f),
        "--html",
        s(&f),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--json and --html name one file"),
        "{}",
        stderr(&out)
    );
    assert!(!f.exists());
    let out = hyoka(&[
        "meta",
        "-i",
        s(&dbdc.join("items.jsonl")),
        "-s",
        s(&dbdc.join("judge.jsonl")),
        "--w",
        "1e160",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("1e160"), "{}", stderr(&out));

    // Lines without input_sha256 (the reference script's fixture, as another tool writes
    // them): counted and refused, unless accepted.
    let (items, judge) = (dbdc.join("items.jsonl"), dbdc.join("judge.jsonl"));
    let meta = |extra: &[&str]| {
        let mut args = vec!["meta", "-i", s(&items), "-s", s(&judge), "--bootstrap", "0"];
        args.extend(extra);
        hyoka(&args)
    };
    let out = meta(&[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("200 of its 200 lines for these items have no input_sha256")
            && stderr(&out).contains("--accept-unhashed"),
        "{}",
        stderr(&out)
    );
    let out = meta(&["--accept-unhashed"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("used as they are"),
        "{}",
        stderr(&out)
    );
}

/// A NaN in the weights makes every logit NaN: each item is an error line (exit 4), never the
/// flat distribution that NaN logits would otherwise turn into.
#[test]
fn a_model_whose_output_is_not_a_number_scores_nothing() {
    use candle_core::quantized::{QTensor, gguf_file};
    let Some(model) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("nan.gguf");
    let mut reader = std::fs::File::open(&model).unwrap();
    let content = gguf_file::Content::read(&mut reader).unwrap();
    let dev = candle_core::Device::Cpu;
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    for name in content.tensor_infos.keys() {
        let t = if name == "output_norm.weight" {
            let n = content.tensor_infos[name].shape.elem_count();
            let nan = candle_core::Tensor::full(f32::NAN, n, &dev).unwrap();
            QTensor::quantize(&nan, candle_core::quantized::GgmlDType::F32).unwrap()
        } else {
            content.tensor(&mut reader, name, &dev).unwrap()
        };
        tensors.push((name.clone(), t));
    }
    let meta: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let named: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    gguf_file::write(&mut std::fs::File::create(&broken).unwrap(), &meta, &named).unwrap();

    let items = common::repo_root().join("examples/items.jsonl");
    for rubric in ["breakdown3-ja", "roleplay8-ja"] {
        let out_path = tmp.path().join(format!("{rubric}.jsonl"));
        let out = hyoka(&[
            "judge",
            "--rubric",
            rubric,
            "--model",
            s(&broken),
            "-i",
            s(&items),
            "-o",
            s(&out_path),
        ]);
        assert_eq!(out.status.code(), Some(4), "{rubric}: {}", stderr(&out));
        let text = std::fs::read_to_string(&out_path).unwrap();
        assert_eq!(text.lines().count(), 4, "{rubric}");
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v.get("scores").is_none(), "{rubric}: {line}");
            assert!(
                v["error"].as_str().unwrap().contains("not a number"),
                "{rubric}: {line}"
            );
        }
    }
}

/// Preferences that match no judged pair, use no key an aspect is compared with, are empty
/// or are not UTF-8 are named, line by line, with exit 3.
#[test]
fn preferences_that_match_nothing_are_named() {
    let Some(model) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let items = common::repo_root().join("examples/pairs-ja.jsonl");
    let pairs = tmp.path().join("pairs.jsonl");
    let out = hyoka(&[
        "compare",
        "--rubric",
        "breakdown-pair-ja",
        "--model",
        s(&model),
        "-i",
        s(&items),
        "-o",
        s(&pairs),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let prefs = tmp.path().join("prefs.jsonl");
    let meta = |content: &[u8]| {
        std::fs::write(&prefs, content).unwrap();
        hyoka(&[
            "meta",
            "-i",
            s(&items),
            "-s",
            s(&pairs),
            "--preferences",
            s(&prefs),
            "--bootstrap",
            "0",
        ])
    };
    let good = r#"{"context_id": "food", "first": "careful", "second": "terse", "human": {"breakdown": ["first"]}}"#;
    let out = meta(format!("{good}\n").as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    let typo = r#"{"context_id": "food", "first": "carefull", "second": "terse", "human": {"breakdown": ["first"]}}"#;
    let other_key = r#"{"context_id": "food", "first": "careful", "second": "terse", "human": {"overall": ["first"]}}"#;
    for (content, says) in [
        (
            format!("{good}\n{typo}\n").into_bytes(),
            "prefs.jsonl:2: first: no judged pair",
        ),
        (
            format!("{other_key}\n").into_bytes(),
            "compared with no aspect",
        ),
        // Beside a key that is used, one that is not would be left out without a word.
        (
            br#"{"context_id": "food", "first": "careful", "second": "terse", "human": {"breakdown": ["first"], "overall": ["first"]}}"#
                .to_vec(),
            "its human keys overall are compared with no aspect",
        ),
        (b"\n".to_vec(), "no preferences in it"),
        (
            [good.as_bytes(), b"\n\xff\xfe\n"].concat(),
            "prefs.jsonl:2: not valid UTF-8",
        ),
    ] {
        let out = meta(&content);
        assert_eq!(out.status.code(), Some(3), "{says}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{says}: {}", stderr(&out));
    }
}
