//! The real vocabularies of the Llama 3 family (Llama-3.1-Swallow-8B, ELYZA-JP-8B) and of Mistral
//! 7B (SentencePiece; Swallow-MS-7b and RakutenAI-7B extend it) through llama.cpp's own
//! converter, in tiny random models (fixtures: scripts/fixtures/make_real_vocab_fixtures.py). hyoka loads each q8_0 GGUF as a
//! user would — tokenizer, chat template and weights from the file alone — and must give the
//! tokenizer.json's token ids for Japanese text (the tokenizers library, as transformers reads
//! it), transformers' rendered judge chat and its ids, and transformers' logits, in both weights
//! modes.

use crate::common;

use candle_core::{DType, Device};
use hyoka::model::{LoadedModel, Transformer, WeightsMode};
use hyoka::prompt::Message;
use serde_json::Value;
use std::path::PathBuf;

const TOL: f32 = 1e-4;

/// The fixture's GGUF, unpacked into a folder of its own (no tokenizer.json beside it).
fn unpacked(name: &str) -> (tempfile::TempDir, PathBuf) {
    let packed = fixture(name).join("q8_0.gguf.gz");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q8_0.gguf");
    let mut reader = flate2::read::GzDecoder::new(std::fs::File::open(packed).unwrap());
    std::io::copy(&mut reader, &mut std::fs::File::create(&path).unwrap()).unwrap();
    (dir, path)
}

fn fixture(name: &str) -> PathBuf {
    common::fixtures().join("converter/real").join(name)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap() as u32)
        .collect()
}

fn metadata(path: &std::path::Path, key: &str) -> String {
    let content = hyoka::model::read_gguf(path).unwrap();
    content.metadata[key].to_string().unwrap().clone()
}

fn check_tokens(loaded: &LoadedModel, expected: &Value) {
    let texts = expected["texts"].as_array().unwrap();
    assert!(texts.len() >= 10);
    for case in texts {
        let text = case["text"].as_str().unwrap();
        let got = loaded.tokenizer.encode(text, false).unwrap();
        assert_eq!(got.get_ids(), ids(&case["ids"]), "{text:?}");
    }
    let chat = &expected["chat"];
    let messages: Vec<Message> = chat["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    let rendered = loaded
        .chat_template
        .render(&messages, chat["add_generation_prompt"].as_bool().unwrap())
        .unwrap();
    assert_eq!(rendered, chat["rendered"].as_str().unwrap());
    let got = loaded.tokenizer.encode(rendered.as_str(), false).unwrap();
    assert_eq!(got.get_ids(), ids(&chat["ids"]), "the chat prompt's ids");
}

/// Logits against transformers' (its last positions, at the vocabulary columns `cols`).
fn check_logits(model: &Transformer, name: &str, mode: WeightsMode) {
    let expected =
        candle_core::safetensors::load(fixture(name).join("expected.safetensors"), &Device::Cpu)
            .unwrap();
    let cols: Vec<usize> = expected["cols"]
        .to_vec1::<i64>()
        .unwrap()
        .into_iter()
        .map(|c| c as usize)
        .collect();
    let cases = common::prompt_cases(&expected);
    assert!(!cases.is_empty());
    for (prompt, (ids, want)) in cases.iter().enumerate() {
        let got = common::every_position_logits(model, ids);
        let first = ids.len() - want.len();
        for (i, row) in want.iter().enumerate() {
            let d = cols
                .iter()
                .zip(row)
                .map(|(&c, e)| (got[first + i][c] - e).abs())
                .fold(0.0f32, f32::max);
            assert!(
                d <= TOL,
                "{name} {mode:?} prompt {prompt} position {}: max |diff| {d} > {TOL}",
                first + i
            );
        }
    }
}

fn check(name: &str, tokenizer_model: &str, pre: &str) {
    let (_dir, path) = unpacked(name);
    // What the converter decided for this vocabulary, not something hyoka was told.
    assert_eq!(metadata(&path, "tokenizer.ggml.model"), tokenizer_model);
    assert_eq!(metadata(&path, "tokenizer.ggml.pre"), pre);
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(name).join("tokens.json")).unwrap())
            .unwrap();
    // A template given apart (the file has none), as a user passes it with --chat-template.
    let template = expected["chat"].get("template").map(|source| {
        let file = path.with_file_name("chat_template.jinja");
        std::fs::write(&file, source.as_str().unwrap()).unwrap();
        file
    });
    for mode in [WeightsMode::Stored, WeightsMode::Expanded] {
        let loaded = LoadedModel::load(
            &hyoka::model::ModelRequest {
                chat_template: template.as_deref(),
                ..hyoka::model::ModelRequest::new(path.to_str().unwrap())
            },
            &Device::Cpu,
            &hyoka::model::RuntimeSettings {
                weights: mode,
                ..hyoka::model::RuntimeSettings::new(DType::F32)
            },
        )
        .unwrap();
        if mode == WeightsMode::Stored {
            check_tokens(&loaded, &expected);
        }
        check_logits(&loaded.transformer, name, mode);
    }
}

/// Llama 3's 128,256-token vocabulary: byte-level BPE, `llama-bpe` (its split rule, merges
/// ignored for whole pre-tokens), the Llama 3 chat template, llama3 rope scaling.
#[test]
fn llama3_vocabulary() {
    check("llama3", "gpt2", "llama-bpe");
}

/// Mistral 7B's SentencePiece vocabulary as llama.cpp writes it from a tokenizer.json
/// (`llama`: scores, byte fallback, a `▁` prefix); Meta's Llama-2-chat template given apart.
#[test]
fn mistral_vocabulary() {
    check("mistral", "llama", "default");
}

/// A GGUF without a chat template is refused with what to do about it, not rendered somehow.
#[test]
fn a_gguf_without_a_chat_template_names_the_flag_that_gives_one() {
    let (_dir, path) = unpacked("mistral");
    let err = LoadedModel::load(
        &hyoka::model::ModelRequest::new(path.to_str().unwrap()),
        &Device::Cpu,
        &hyoka::model::RuntimeSettings::new(DType::F32),
    )
    .err()
    .expect("no template, no model");
    let message = err.to_string();
    assert!(
        message.contains("tokenizer.chat_template") && message.contains("--chat-template"),
        "{message}"
    );
}

/// `hyoka judge` on that GGUF: refused without a template (exit 1, naming the flag), scored
/// with `--chat-template`, whose hash is the run's provenance.
#[test]
fn judge_renders_with_the_chat_template_it_is_given() {
    let (dir, path) = unpacked("mistral");
    let file = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("mistral").join("tokens.json")).unwrap(),
    )
    .unwrap();
    let template = expected["chat"]["template"].as_str().unwrap();
    std::fs::write(file("llama-2-chat.jinja"), template).unwrap();
    std::fs::write(file("rubric.toml"), common::SHORT_RUBRIC).unwrap();
    let item = serde_json::json!({
        "id": "a",
        "context": [{"speaker": "A", "text": "おなかがすいてきましたね。"}],
        "response": {"speaker": "B", "text": "私はお寿司が食べたいです。"}
    });
    std::fs::write(file("items.jsonl"), format!("{item}\n")).unwrap();
    let judge = |out: &str, extra: &[String]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args(["judge", "--rubric", &file("rubric.toml"), "--model"])
            .arg(&path)
            .args(["-i", &file("items.jsonl"), "-o", &file(out)])
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = judge("none.jsonl", &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--chat-template"), "{stderr}");

    let scored = judge(
        "scores.jsonl",
        &["--chat-template".into(), file("llama-2-chat.jinja")],
    );
    let stderr = String::from_utf8_lossy(&scored.stderr);
    assert!(scored.status.success(), "{stderr}");
    let line = std::fs::read_to_string(file("scores.jsonl")).unwrap();
    let row: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(
        row["provenance"]["models"][0]["chat_template"],
        hyoka::checksum::sha256_hex(template.as_bytes())
    );
    assert!(row["scores"]["quality"]["score"].is_i64(), "{row}");
}
