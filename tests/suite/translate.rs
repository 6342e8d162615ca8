//! `hyoka translate`: greedy translations against HF transformers' greedy decoding on the test
//! judges (fixture: scripts/fixtures/make_translate_fixtures.py); the same bits whatever the
//! batch and the order of the texts; a killed run continuing from its store; a text shared by
//! items translated once; refusals that write nothing.

use crate::common;

use hyoka::data::{Item, Turn};
use hyoka::model::{LoadedModel, RuntimeOptions, WeightsMode};
use hyoka::results::runner::run_in_memory;
use hyoka::results::{Body, Record, RunError};
use hyoka::translate::{
    Text, TranslateOptions, TranslatePrompt, Translator, greedy_batch, translate_items,
};
use serde_json::Value;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::process::Command;

/// Below this margin between the reference's two most probable tokens, f32 rounding in another
/// implementation may take the other one: tokens are compared up to the first such step.
const NEAR_TIE: f64 = 1e-3;

fn load(name: &str, weights: WeightsMode) -> Option<LoadedModel> {
    let path = common::test_model(name)?;
    let runtime = RuntimeOptions {
        weights,
        ..Default::default()
    };
    let (device, settings) = runtime.settings().unwrap();
    Some(
        runtime
            .load_model(path.to_str().unwrap(), &device, &settings, None)
            .unwrap(),
    )
}

/// An empty folder of this test's own.
fn folder(name: &str) -> std::path::PathBuf {
    let dir = common::scratch_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fixture() -> Value {
    let path = common::fixtures().join("translate/greedy.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Each text's translation line, by text.
fn translations(
    model: &LoadedModel,
    prompt: &TranslatePrompt,
    opts: TranslateOptions,
    texts: &[Text],
) -> HashMap<String, Result<(String, usize), String>> {
    let mut task = Translator::new(model, prompt, opts);
    let (_, lines) =
        run_in_memory(&mut task, texts, &mut |_, _| ControlFlow::Continue(())).unwrap();
    texts
        .iter()
        .zip(lines)
        .map(|(t, line)| {
            let body = match Record::parse(&line).unwrap().body {
                Ok(Body::Translation(r)) => Ok((r.text, r.tokens)),
                Ok(_) => panic!("not a translation"),
                Err(why) => Err(why),
            };
            (t.text.clone(), body)
        })
        .collect()
}

#[test]
fn greedy_translations_match_transformers() {
    let fixture = fixture();
    for m in fixture["models"].as_array().unwrap() {
        let Some(model) = load(m["model"].as_str().unwrap(), WeightsMode::Expanded) else {
            return;
        };
        let mut stop = model.stop_tokens();
        stop.sort_unstable();
        stop.dedup();
        assert_eq!(stop, ids(&m["stop"]), "{}: stop tokens", m["model"]);
        let cases = m["cases"].as_array().unwrap();
        let mut prompts = Vec::new();
        for c in cases {
            let (prompt, _) = TranslatePrompt::resolve(c["prompt"].as_str().unwrap()).unwrap();
            let rendered = prompt
                .render(&model.chat_template, c["text"].as_str().unwrap())
                .unwrap();
            let tokens = model.tokenizer.encode(rendered, false).unwrap();
            assert_eq!(
                tokens.get_ids(),
                ids(&c["prompt_ids"]),
                "{}: prompt",
                c["text"]
            );
            prompts.push((prompt, tokens.get_ids().to_vec()));
        }
        // Every case decoded in one batch, token by token against the reference.
        let rows: Vec<&[u32]> = prompts.iter().map(|(_, p)| p.as_slice()).collect();
        let limits: Vec<usize> = cases
            .iter()
            .map(|c| c["limit"].as_u64().unwrap() as usize)
            .collect();
        let got = greedy_batch(&model.transformer, None, &rows, &limits, &stop).unwrap();
        let mut whole = 0;
        for (c, g) in cases.iter().zip(&got) {
            let want = ids(&c["tokens"]);
            let margins: Vec<f64> = c["margins"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            let compared = margins
                .iter()
                .position(|&d| d < NEAR_TIE)
                .unwrap_or(margins.len());
            let n = compared.min(want.len());
            assert_eq!(
                g.tokens[..n.min(g.tokens.len())],
                want[..n],
                "{}: {}",
                m["model"],
                c["text"]
            );
            if compared == margins.len() {
                whole += 1;
                assert_eq!(g.tokens, want, "{}: {}", m["model"], c["text"]);
                assert_eq!(
                    g.finished,
                    c["finished"].as_bool().unwrap(),
                    "{}",
                    c["text"]
                );
            }
        }
        eprintln!(
            "{}: {whole} of {} translations compared whole (the others up to a near tie)",
            m["model"],
            cases.len()
        );
        assert!(
            whole * 2 >= cases.len(),
            "{}: most cases compared whole ({whole})",
            m["model"]
        );
        // Through the run (the template's header prefilled once): the translations written.
        for (c, (prompt, _)) in cases.iter().zip(&prompts) {
            let margins = c["margins"].as_array().unwrap();
            if margins.iter().any(|x| x.as_f64().unwrap() < NEAR_TIE) {
                continue;
            }
            let text = Text::new(c["text"].as_str().unwrap());
            let out = translations(&model, prompt, TranslateOptions::default(), &[text]);
            let line = &out[c["text"].as_str().unwrap()];
            if c["finished"].as_bool().unwrap() {
                let (written, tokens) = line.as_ref().unwrap();
                assert_eq!(written, c["translation"].as_str().unwrap());
                assert_eq!(*tokens, c["tokens"].as_array().unwrap().len());
            } else {
                let why = line.as_ref().unwrap_err();
                assert!(why.contains("did not end within"), "{why}");
            }
        }
    }
}

#[test]
fn translations_are_the_same_bits_in_any_batch_and_order() {
    let Some(model) = load("smollm2-135m-instruct-q4_1.gguf", WeightsMode::Stored) else {
        return;
    };
    let (prompt, _) = TranslatePrompt::resolve("translate-ja-en").unwrap();
    let texts: Vec<Text> = [
        "こんにちは。",
        "週末は友達と映画を見に行きました。",
        "はい",
        "お腹が空いてきました。何か食べたいものはありますか？",
        "雨ですね。",
    ]
    .iter()
    .map(|t| Text::new(t))
    .collect();
    let opts = |rows| TranslateOptions {
        max_new_tokens: Some(24),
        max_rows: rows,
        ..Default::default()
    };
    let together = translations(&model, &prompt, opts(32), &texts);
    let mut reversed = texts.clone();
    reversed.reverse();
    let alone = translations(&model, &prompt, opts(1), &reversed);
    assert_eq!(together, alone);
    let pairs = translations(&model, &prompt, opts(2), &texts);
    assert_eq!(together, pairs);
}

fn turn(speaker: &str, text: &str) -> Turn {
    Turn {
        speaker: speaker.into(),
        text: text.into(),
    }
}

fn items() -> Vec<Item> {
    let base = hyoka::prompt::sample_item();
    let item = |id: &str, context: &[&str], response: &str| {
        let mut it = base.clone();
        it.id = id.into();
        it.context = context
            .iter()
            .enumerate()
            .map(|(i, t)| turn(["A", "B"][i % 2], t))
            .collect();
        it.response = turn(["A", "B"][context.len() % 2], response);
        it.reference.clear();
        it.setting = None;
        it
    };
    vec![
        item(
            "1",
            &["お腹が空いてきました。", "何か食べたいですか？"],
            "お寿司が食べたいです。",
        ),
        item(
            "2",
            &["お腹が空いてきました。", "何か食べたいですか？"],
            "猫が好きです。",
        ),
        item("3", &["週末は何をしましたか？"], "映画を見ました。"),
    ]
}

#[test]
fn a_killed_translation_resumes_and_a_shared_text_is_translated_once() {
    let Some(model) = load(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        WeightsMode::Stored,
    ) else {
        return;
    };
    let (prompt, _) = TranslatePrompt::resolve("translate-ja-en").unwrap();
    let opts = TranslateOptions {
        max_new_tokens: Some(48),
        max_rows: 1,
        ..Default::default()
    };
    let items = items();
    let dir = folder("translate-resume");
    let store = dir.join("store.jsonl");
    // Stopped after two texts: their lines are kept.
    let mut calls = 0;
    let stopped = translate_items(&model, &prompt, opts, &items, &store, &mut |_, _| {
        calls += 1;
        if calls > 2 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    match stopped {
        Err(RunError::Interrupted { done: 2, total: 6 }) => {}
        Err(e) => panic!("{e:?}"),
        Ok(t) => panic!("not stopped: {:?}", t.summary),
    }
    let kept = std::fs::read_to_string(&store).unwrap();
    assert_eq!(kept.lines().count(), 2);
    // The rerun translates the other four; six distinct texts, one line each.
    let done = translate_items(&model, &prompt, opts, &items, &store, &mut |_, _| {
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(
        (
            done.texts,
            done.summary.skipped_finished,
            done.summary.scored
        ),
        (6, 2, 4)
    );
    let lines = std::fs::read_to_string(&store).unwrap();
    assert!(lines.starts_with(&kept));
    assert_eq!(lines.lines().count(), 6);
    // The same as one uninterrupted run's, whatever the rows decoded together.
    let fresh = dir.join("fresh.jsonl");
    let wide = TranslateOptions {
        max_rows: 8,
        ..opts
    };
    let whole = translate_items(&model, &prompt, wide, &items, &fresh, &mut |_, _| {
        ControlFlow::Continue(())
    })
    .unwrap();
    let resumed = done.items.as_ref().unwrap();
    let once = whole.items.as_ref().unwrap();
    assert_eq!(resumed, once);
    let sorted = |t: &str| {
        let mut v: Vec<&str> = t.lines().collect();
        v.sort_unstable();
        v.join("\n")
    };
    assert_eq!(
        sorted(&lines),
        sorted(&std::fs::read_to_string(&fresh).unwrap())
    );
    // A shared turn has one translation in every item; sources and ratings are kept.
    assert_eq!(resumed[0].context, resumed[1].context);
    let t = resumed[1].translation.as_ref().unwrap();
    assert_eq!((t.from.as_str(), t.to.as_str()), ("ja", "en"));
    assert_eq!(t.source.response, "猫が好きです。");
    assert_eq!(
        t.source.context,
        ["お腹が空いてきました。", "何か食べたいですか？"]
    );
    assert_eq!(resumed[1].human, items[1].human);
    assert_eq!(resumed[1].context[0].speaker, "A");
    assert_ne!(resumed[1].response.text, items[1].response.text);
    // The translated items read back as items, their source checked against their texts.
    let path = dir.join("en.jsonl");
    hyoka::data::write_items(&path, resumed).unwrap();
    let back = hyoka::data::read_items(&path, false).unwrap().items;
    assert_eq!(&back, resumed);
    // Nothing is translated twice: a third run writes nothing.
    let again = translate_items(&model, &prompt, opts, &items, &store, &mut |_, _| {
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(
        (again.summary.scored, again.summary.skipped_finished),
        (0, 6)
    );
    assert_eq!(std::fs::read_to_string(&store).unwrap(), lines);
}

#[test]
fn refused_translations_write_nothing() {
    let Some(model) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let dir = folder("translate-refused");
    let input = dir.join("items.jsonl");
    hyoka::data::write_items(&input, &items()).unwrap();
    let output = dir.join("en.jsonl");
    std::fs::write(&output, "keep me\n").unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "translate",
            "-i",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args(&args)
            .output()
            .unwrap()
    };
    // An existing output, a prompt of other languages, a missing prompt for the languages.
    for (extra, says) in [
        (&[][..], "--overwrite"),
        (&["--prompt", "translate-en-ja"][..], "not ja into en"),
        (&["--to", "fr"][..], "no built-in prompt"),
    ] {
        let o = run(extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert_eq!(std::fs::read_to_string(&output).unwrap(), "keep me\n");
        assert!(!dir.join("en.translations.jsonl").exists(), "{extra:?}");
    }
    // Translated items are not translated again.
    let en = dir.join("already.jsonl");
    let mut translated = items();
    translated[0].translation = Some(hyoka::data::Translation {
        from: "ja".into(),
        to: "en".into(),
        source: hyoka::data::SourceTexts {
            context: translated[0]
                .context
                .iter()
                .map(|t| t.text.clone())
                .collect(),
            response: translated[0].response.text.clone(),
            reference: Vec::new(),
            setting: None,
        },
        by: None,
        unfinished: Vec::new(),
    });
    hyoka::data::write_items(&en, &translated).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args([
            "translate",
            "-i",
            en.to_str().unwrap(),
            "-o",
            dir.join("x.jsonl").to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("already a translation"), "{err}");
    assert!(!dir.join("x.jsonl").exists() && !dir.join("x.translations.jsonl").exists());
}

#[test]
fn a_translation_cut_at_its_limit_fails_or_is_kept_and_named() {
    let Some(model) = load("smollm2-135m-instruct-q4_1.gguf", WeightsMode::Stored) else {
        return;
    };
    let (prompt, _) = TranslatePrompt::resolve("translate-ja-en").unwrap();
    let items = items();
    let dir = folder("translate-unfinished");
    let store = dir.join("store.jsonl");
    // Four tokens end no translation of this model: every text fails, nothing is returned.
    let cut = TranslateOptions {
        max_new_tokens: Some(4),
        ..Default::default()
    };
    let go = |opts| {
        translate_items(&model, &prompt, opts, &items, &store, &mut |_, _| {
            ControlFlow::Continue(())
        })
        .unwrap()
    };
    let failed = go(cut);
    assert_eq!(failed.summary.failed.len(), 6);
    assert_eq!(failed.items.as_ref().unwrap_err().len(), 6);
    let said = hyoka::translate::describe_failures(&items, &failed.summary.failed);
    assert!(
        said[0].starts_with(
            "text \"お腹が空いてきました。\" (item 1): the translation did not end within 4 tokens"
        ),
        "{said:?}"
    );
    // Kept on request: the same run (no other provenance), its error lines taken again.
    let kept = go(TranslateOptions {
        keep_unfinished: true,
        ..cut
    });
    assert_eq!((kept.summary.retried, kept.summary.scored), (6, 6));
    let translated = kept.items.unwrap();
    let t = translated[0].translation.as_ref().unwrap();
    assert_eq!(t.unfinished, ["context[0]", "context[1]", "response"]);
    let lines = std::fs::read_to_string(&store).unwrap();
    assert_eq!(lines.matches("\"finished\":false").count(), 6);
    assert_eq!(kept.cut, 6);
    // Without keep_unfinished, the store's cut translations are not translations: all or
    // nothing, the six counted for the message that names them.
    let again = go(cut);
    assert_eq!((again.cut_in_store, again.cut), (6, 0));
    assert_eq!(again.items.as_ref().unwrap_err().len(), 6);
}
