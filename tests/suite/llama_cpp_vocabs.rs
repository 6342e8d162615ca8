//! Real vocabularies as llama.cpp ships them for its own tokenizer tests: the vocab-only GGUF
//! files of `vendor/llama.cpp/models/` in the llama-cpp-python sdist on PyPI, written by
//! llama.cpp's converter from each family's Hugging Face tokenizer (Llama 3, Llama 2, Qwen2,
//! Phi-3, GPT-2, …), each with a `.inp` of test texts and a `.out` of the ids Hugging Face's
//! tokenizer gives them (`encode(text, add_special_tokens=False)`, convert_hf_to_gguf_update.py).
//! scripts/fetch_test_models.py puts them under `llama-cpp-vocabs/`.
//!
//! Every file either tokenizes every text to exactly the upstream ids, or is refused with an
//! error naming its tokenizer model or pre-tokenizer: never a silent wrong tokenization. The
//! Japanese texts of `tests/fixtures/llama_cpp_vocabs/ja.json` carry llama.cpp's own ids for
//! the same files (scripts/fixtures/make_llama_cpp_vocab_fixtures.py, through llama-cpp-python), checked
//! there against Hugging Face's tokenizer where the registries carry it.

use crate::common;

use candle_core::quantized::gguf_file::Content;
use hyoka::model::tokenizer::from_gguf_content;
use std::path::{Path, PathBuf};

/// The vocabularies hyoka builds from GGUF metadata, with the families that use them.
const BUILT: &[&str] = &[
    "llama-bpe", // Llama 3 / 3.1: Swallow-8B, ELYZA-JP-8B
    "llama-spm", // Llama 2 SentencePiece: ELYZA-japanese-Llama-2, Swallow-7b, llm-jp
    "phi-3",     // SentencePiece with Phi-3's added tokens
    "qwen2",     // Qwen2 / 2.5 / 3
    "gpt-2",
];

/// Vocabularies refused with an error that names what is not supported.
const REFUSED: &[(&str, &str)] = &[
    ("bert-bge", "bert"),
    ("command-r", "command-r"),
    ("deepseek-coder", "deepseek-coder"),
    ("deepseek-llm", "deepseek-llm"),
    ("falcon", "falcon"),
    ("mpt", "mpt"),
    ("qwen35", "qwen35"),
    ("refact", "refact"),
    ("starcoder", "starcoder"),
    ("gemma-4", "gemma4"),
    // BPE vocabularies converted before pre-tokenizers had names.
    ("aquila", "tokenizer.ggml.pre"),
    ("gpt-neox", "tokenizer.ggml.pre"),
];

fn vocab_dir() -> Option<PathBuf> {
    common::test_model("llama-cpp-vocabs")
}

fn gguf(dir: &Path, name: &str) -> Content {
    let path = dir.join(format!("ggml-vocab-{name}.gguf"));
    let mut file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Content::read(&mut file).unwrap()
}

/// (text, ids) pairs of a `.inp`/`.out` pair: texts separated by `\n__ggml_vocab_test__\n`,
/// one line of space-separated ids per text.
fn upstream_cases(dir: &Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        std::fs::read_to_string(dir.join(format!("ggml-vocab-{name}.gguf.{ext}"))).unwrap()
    };
    let inp = read("inp");
    let texts: Vec<&str> = inp
        .strip_suffix("\n__ggml_vocab_test__\n")
        .unwrap_or(&inp)
        .split("\n__ggml_vocab_test__\n")
        .collect();
    let out = read("out");
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(
        texts.len(),
        ids.len(),
        "{name}: .inp and .out disagree in length"
    );
    texts.into_iter().map(String::from).zip(ids).collect()
}

/// Every text's ids (no special tokens added) are the expected ones; the failure lists all
/// texts that differ.
fn assert_same_ids(tokenizer: &tokenizers::Tokenizer, cases: &[(String, Vec<u32>)], what: &str) {
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|(text, want)| {
            let got = tokenizer.encode(text.as_str(), false).unwrap();
            (got.get_ids() != want.as_slice())
                .then(|| format!("{text:?}: got {:?}, want {want:?}", got.get_ids()))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} texts differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn built_vocabularies_give_upstream_ids_on_llama_cpps_test_texts() {
    let Some(dir) = vocab_dir() else { return };
    for name in BUILT {
        let tokenizer =
            from_gguf_content(&gguf(&dir, name), name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let cases = upstream_cases(&dir, name);
        assert!(cases.len() > 30, "{name}: {} cases", cases.len());
        assert_same_ids(&tokenizer, &cases, &format!("{name}, upstream ids"));
    }
}

#[test]
fn other_vocabularies_are_refused_by_name() {
    let Some(dir) = vocab_dir() else { return };
    for (name, named) in REFUSED {
        match from_gguf_content(&gguf(&dir, name), name) {
            Ok(_) => panic!("{name}: built, but its pre-tokenizer is not one hyoka checks"),
            Err(e) => {
                let message = e.to_string();
                assert!(message.contains(&format!("`{named}`")), "{name}: {message}");
            }
        }
    }
}

/// Japanese texts (DBDC3 utterances and hand-written cases: digit runs, full- and half-width
/// forms, emoji with modifiers, characters outside the BMP, a decomposed kana, whitespace, a
/// judge's JSON): exactly llama.cpp's ids on the same files.
#[test]
fn built_vocabularies_give_llama_cpps_ids_on_japanese() {
    let Some(dir) = vocab_dir() else { return };
    let path = common::fixtures().join("llama_cpp_vocabs/ja.json");
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let texts: Vec<&str> = fixture["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(texts.len() > 100);
    for name in BUILT {
        let tokenizer = from_gguf_content(&gguf(&dir, name), name).unwrap();
        let want = fixture["ids"][name].as_array().unwrap();
        assert_eq!(want.len(), texts.len(), "{name}");
        let cases: Vec<(String, Vec<u32>)> = texts
            .iter()
            .zip(want)
            .map(|(text, ids)| {
                let ids = ids.as_array().unwrap();
                let ids = ids.iter().map(|i| i.as_u64().unwrap() as u32).collect();
                (text.to_string(), ids)
            })
            .collect();
        assert_same_ids(&tokenizer, &cases, &format!("{name}, llama.cpp's ids"));
    }
}
