//! Chat templates rendered by hyoka must be byte-identical to HF transformers'
//! `apply_chat_template` (expected strings: scripts/fixtures/make_chat_template_fixtures.py).

use crate::common;

use hyoka::prompt::{ChatTemplate, Message};
use serde_json::Value;
use std::collections::BTreeMap;

fn fixture(name: &str) -> Value {
    let path = common::fixtures()
        .join("chat_templates")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn check_cases(template: &ChatTemplate, fx: &Value) {
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 4);
    for case in cases {
        let messages: Vec<Message> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let got = template
            .render(&messages, case["add_generation_prompt"].as_bool().unwrap())
            .unwrap();
        assert_eq!(
            got,
            case["expected"].as_str().unwrap(),
            "{}: case {}",
            template.origin,
            case["name"]
        );
    }
}

fn from_fixture(name: &str) -> (ChatTemplate, Value) {
    let fx = fixture(name);
    let special: BTreeMap<String, String> = fx["special_tokens"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    (
        ChatTemplate::new(fx["template"].as_str().unwrap(), special, name).unwrap(),
        fx,
    )
}

#[test]
fn qwen25_template_matches_transformers() {
    let (t, fx) = from_fixture("qwen2.5");
    check_cases(&t, &fx);
}

#[test]
fn smollm2_template_matches_transformers() {
    let (t, fx) = from_fixture("smollm2");
    check_cases(&t, &fx);
}

#[test]
fn gemma3_template_matches_transformers() {
    let (t, fx) = from_fixture("gemma3");
    check_cases(&t, &fx);
}

/// hyoka's own loading path: the template and special tokens read from the model files.
#[test]
fn templates_loaded_from_model_files_match_transformers() {
    for (name, file) in [
        ("qwen2.5", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        ("smollm2", "smollm2-135m-instruct-q4_1.gguf"),
        ("gemma3", "gemma-3-tokenizer"),
    ] {
        let Some(path) = common::test_model(file) else {
            return;
        };
        let t = hyoka::model::loaded_model::read_chat_template(&path).unwrap();
        let fx = fixture(name);
        assert_eq!(
            t.source(),
            fx["template"].as_str().unwrap(),
            "{name}: template source"
        );
        check_cases(&t, &fx);
    }
}

#[test]
fn raise_exception_in_template_is_an_error() {
    let (t, _) = from_fixture("gemma3");
    // Gemma requires alternating user/assistant roles.
    let bad = [Message::new("user", "a"), Message::new("user", "b")];
    let err = t.render(&bad, true).unwrap_err().to_string();
    assert!(err.contains("Conversation roles must alternate"), "{err}");
}

/// `strftime_now` prints a fixed day (2024-01-01 in the format asked) so that prompts do not
/// change from day to day, or the text `set_date` gives, whatever the format.
#[test]
fn strftime_now_prints_a_fixed_day_or_the_given_text() {
    let mut t = ChatTemplate::new(
        "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d') }}",
        Default::default(),
        "test",
    )
    .unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "01 Jan 2024|2024-01-01");
    assert_eq!(t.date(), None);
    t.set_date("26 Jul 2024");
    assert_eq!(t.render(&[], false).unwrap(), "26 Jul 2024|26 Jul 2024");
    assert_eq!(t.date(), Some("26 Jul 2024"));
}
