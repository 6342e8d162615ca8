//! The judge model's tokenizer: tokenizer.json when the model has one, else built from GGUF
//! metadata (gpt2-style BPE vocabularies, as llama.cpp stores them).

use super::ModelError;
use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use std::path::Path;
use tokenizers::Tokenizer;

/// `tokenizer_json` overrides; otherwise a model folder's tokenizer.json, a tokenizer.json beside
/// a GGUF file, or the GGUF's own vocabulary.
pub fn load_tokenizer(
    model: &Path,
    tokenizer_json: Option<&Path>,
) -> Result<Tokenizer, ModelError> {
    load_tokenizer_with(model, tokenizer_json, None)
}

/// `load_tokenizer`, reusing GGUF metadata the caller has already read.
pub fn load_tokenizer_with(
    model: &Path,
    tokenizer_json: Option<&Path>,
    gguf: Option<&gguf_file::Content>,
) -> Result<Tokenizer, ModelError> {
    let from_file = |p: &Path| {
        Tokenizer::from_file(p).map_err(|e| ModelError::Missing {
            origin: p.display().to_string(),
            message: format!("not a usable tokenizer.json: {e}"),
        })
    };
    if let Some(p) = tokenizer_json {
        let p = if p.is_dir() {
            p.join("tokenizer.json")
        } else {
            p.to_path_buf()
        };
        return from_file(&p);
    }
    if model.is_dir() {
        return from_file(&model.join("tokenizer.json"));
    }
    if let Some(beside) = model
        .parent()
        .map(|d| d.join("tokenizer.json"))
        .filter(|p| p.is_file())
    {
        return from_file(&beside);
    }
    let origin = model.display().to_string();
    let read;
    let content = match gguf {
        Some(c) => c,
        None => {
            read = super::read_gguf(model)?;
            &read
        }
    };
    let mut tokenizer = Tokenizer::from_gguf(content).map_err(|e| ModelError::Missing {
        origin,
        message: format!(
            "cannot build a tokenizer from the GGUF metadata ({e}); pass a tokenizer.json"
        ),
    })?;
    let pre = super::config::meta_str(content, "tokenizer.ggml.pre").unwrap_or_default();
    fix_pre_tokenizer(&mut tokenizer, &pre);
    Ok(tokenizer)
}

/// candle maps pre-tokenizer types it does not know to GPT-2's byte level with a prefix space.
/// Those below are what the models' own tokenizer.json files say (checked against transformers
/// in tests/gguf_parity.rs).
fn fix_pre_tokenizer(tokenizer: &mut Tokenizer, pre: &str) {
    use tokenizers::pre_tokenizers::{
        PreTokenizerWrapper, byte_level::ByteLevel, digits::Digits, sequence::Sequence,
    };
    let byte_level = || PreTokenizerWrapper::from(ByteLevel::new(false, true, true));
    let fixed: PreTokenizerWrapper = match pre {
        // SmolLM / SmolLM2: digits one by one, then GPT-2's byte level without a prefix space.
        "smollm" => Sequence::new(vec![Digits::new(true).into(), byte_level()]).into(),
        "gpt2" | "" => byte_level(),
        _ => return,
    };
    tokenizer.with_pre_tokenizer(Some(fixed));
}
