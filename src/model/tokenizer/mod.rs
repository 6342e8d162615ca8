//! The judge model's tokenizer: tokenizer.json when the model has one, else built from GGUF
//! metadata (gpt2-style BPE vocabularies here, SentencePiece ones in `spm_gguf`).

pub(crate) mod spm_gguf;

use crate::model::error::ModelError;
use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use std::path::Path;
use tokenizers::Tokenizer;

/// A prompt's token limit, and the text length beyond which no tokenization can meet it
/// (`tokenizer::bytes_beyond`). Such texts are refused (a response) or left out (context turns)
/// before anything is tokenized: tokenizing a 50 MB response took minutes and gigabytes only
/// to refuse it.
#[derive(Clone, Copy, Debug)]
pub struct TextFit {
    pub max_tokens: usize,
    pub max_bytes: usize,
}

impl TextFit {
    pub fn new(tokenizer: &Tokenizer, max_tokens: usize) -> Self {
        TextFit {
            max_tokens,
            max_bytes: bytes_beyond(tokenizer, max_tokens),
        }
    }
}

/// Bytes of text that `tokens` tokens of this vocabulary cannot cover, whatever the text: no
/// token covers more bytes than the longest piece, and normalisation shrinks text at most
/// 4-fold (composition: three Hangul jamo, 9 bytes, make one 3-byte syllable), so a text of
/// more bytes needs more tokens. Lets long texts be measured before they are tokenized.
pub fn bytes_beyond(tokenizer: &Tokenizer, tokens: usize) -> usize {
    const NORMALISATION_SLACK: usize = 4;
    let longest = tokenizer
        .get_vocab(true)
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(1)
        .max(1);
    tokens
        .saturating_mul(longest)
        .saturating_mul(NORMALISATION_SLACK)
}

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
            read = crate::model::load::checkpoint_files::read_gguf(model)?;
            &read
        }
    };
    from_gguf_content(content, &origin)
}

/// A tokenizer from GGUF metadata: gpt2-style BPE vocabularies with a pre-tokenizer hyoka knows
/// by the name llama.cpp's converter writes; anything else is an error that says so.
pub fn from_gguf_content(
    content: &gguf_file::Content,
    origin: &str,
) -> Result<Tokenizer, ModelError> {
    let model =
        crate::model::load::config::meta_str(content, "tokenizer.ggml.model").unwrap_or_default();
    match model.as_str() {
        "gpt2" => {}
        "llama" => return crate::model::tokenizer::spm_gguf::from_gguf(content, origin),
        _ => {
            return Err(ModelError::Unsupported {
                origin: origin.into(),
                what: format!(
                    "GGUF tokenizer model `{model}` (hyoka builds `gpt2` BPE and `llama` SentencePiece vocabularies from GGUF metadata; pass the model's tokenizer.json with --tokenizer)"
                ),
            });
        }
    }
    let pre = match crate::model::load::config::meta_str(content, "tokenizer.ggml.pre") {
        Some(pre) => pre,
        // Converted before llama.cpp named pre-tokenizers (spring 2024): llama.cpp then splits
        // with GPT-2's rule and warns that quality degrades. Llama 3's vocabulary, which such
        // files mostly carry, says what it is by its special tokens; anything else is refused.
        None if is_llama3_vocabulary(content) => "llama-bpe".to_string(),
        None => {
            return Err(ModelError::Unsupported {
                origin: origin.into(),
                what: "a BPE vocabulary without `tokenizer.ggml.pre` (converted before llama.cpp named pre-tokenizers; GPT-2's split rule would give other ids than the model's own tokenizer): pass the model's tokenizer.json with --tokenizer".into(),
            });
        }
    };
    let fixed = pre_tokenizer(&pre).ok_or_else(|| ModelError::Unsupported {
        origin: origin.into(),
        what: format!("GGUF pre-tokenizer `{pre}` (known: {}); pass the model's tokenizer.json with --tokenizer", KNOWN_PRE.join(", ")),
    })?;
    let mut tokenizer = Tokenizer::from_gguf(content).map_err(|e| ModelError::Missing {
        origin: origin.into(),
        message: format!(
            "cannot build a tokenizer from the GGUF metadata ({e}); pass a tokenizer.json"
        ),
    })?;
    if let Some(fixed) = fixed {
        tokenizer.with_pre_tokenizer(Some(fixed));
    }
    if ignores_merges(&pre) {
        // Llama 3's tokenizer.json says `ignore_merges`: a pre-token that is itself in the
        // vocabulary is that token, whatever the merges would build (" Việt" is one token,
        // not " Vi" "ệ" "t"). llama.cpp does the same for these names; candle does not.
        if let tokenizers::ModelWrapper::BPE(bpe) = tokenizer.get_model() {
            let mut bpe = bpe.clone();
            bpe.ignore_merges = true;
            tokenizer.with_model(bpe);
        }
    }
    Ok(tokenizer)
}

/// Whether the vocabulary's tokenizer.json says `ignore_merges`: Llama 3's does, in both
/// revisions. llama.cpp's converter names the first revision (no BOS post-processor, which
/// Smaug-Llama-3 kept) `smaug-bpe` — Llama-3 models converted so are seen in the wild (llama.cpp
/// issue #7881) — and llama.cpp then does not ignore merges; hyoka tokenizes as the model's own
/// tokenizer.json does.
fn ignores_merges(pre: &str) -> bool {
    matches!(pre, "llama-bpe" | "llama3" | "smaug-bpe")
}

/// Llama 3's vocabulary: 128,256 tokens with its special tokens at their ids.
fn is_llama3_vocabulary(content: &gguf_file::Content) -> bool {
    const SPECIALS: [(usize, &str); 5] = [
        (128000, "<|begin_of_text|>"),
        (128001, "<|end_of_text|>"),
        (128006, "<|start_header_id|>"),
        (128007, "<|end_header_id|>"),
        (128009, "<|eot_id|>"),
    ];
    let Some(tokens) = content
        .metadata
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.to_vec().ok())
    else {
        return false;
    };
    tokens.len() == 128256
        && SPECIALS
            .iter()
            .all(|&(id, text)| tokens[id].to_string().is_ok_and(|t| t.as_str() == text))
}

/// The `tokenizer.ggml.pre` names hyoka builds, each checked against the model family's own
/// tokenizer.json (tests/suite/gguf_parity.rs, tests/suite/gguf_tokenizers.rs) and against llama.cpp on its own
/// vocab-only files (tests/suite/llama_cpp_vocabs.rs).
const KNOWN_PRE: &[&str] = &[
    "llama-bpe",
    "llama3",
    "smaug-bpe",
    "qwen2",
    "deepseek-r1-qwen",
    "smollm",
    "gpt2",
    "gpt-2",
];

/// The pre-tokenizer for a `tokenizer.ggml.pre` name: Some(None) where candle's own choice is
/// right, None for a name hyoka does not know (candle would fall back to GPT-2's rule silently).
fn pre_tokenizer(pre: &str) -> Option<Option<tokenizers::PreTokenizerWrapper>> {
    use tokenizers::SplitDelimiterBehavior;
    use tokenizers::pre_tokenizers::{
        PreTokenizerWrapper,
        byte_level::ByteLevel,
        digits::Digits,
        sequence::Sequence,
        split::{Split, SplitPattern},
    };
    let byte_level = |regex: bool| PreTokenizerWrapper::from(ByteLevel::new(false, true, regex));
    let split = |regex: &str| -> PreTokenizerWrapper {
        Split::new(
            SplitPattern::Regex(regex.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .expect("the pattern compiles")
        .into()
    };
    Some(match pre {
        // Llama 3 (Swallow-8B, ELYZA-JP-8B): its tokenizer.json's Split pattern (numbers in
        // groups of up to 3 digits), then byte level without a regex.
        "llama-bpe" | "llama3" | "smaug-bpe" => {
            Some(Sequence::new(vec![split(REGEX_LLAMA3), byte_level(false)]).into())
        }
        // Qwen2.5 / Qwen3 / TinySwallow: candle's pipeline is theirs (digits one by one, NFC).
        "qwen2" => None,
        "deepseek-r1-qwen" => {
            Some(Sequence::new(vec![split(REGEX_QWEN2), byte_level(false)]).into())
        }
        // SmolLM / SmolLM2: digits one by one, then GPT-2's byte level without a prefix space.
        "smollm" => Some(Sequence::new(vec![Digits::new(true).into(), byte_level(true)]).into()),
        "gpt2" | "gpt-2" => Some(byte_level(true)),
        _ => return None,
    })
}

const REGEX_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const REGEX_QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

#[cfg(test)]
mod tests {
    /// The names an error lists are exactly those that build.
    #[test]
    fn known_pre_tokenizer_names_all_build() {
        for name in super::KNOWN_PRE {
            assert!(super::pre_tokenizer(name).is_some(), "{name}");
        }
        assert!(super::pre_tokenizer("tekken").is_none());
    }
}
