//! SentencePiece vocabularies stored in GGUF (`tokenizer.ggml.model = llama`: llm-jp-3,
//! ELYZA-japanese-Llama-2, Swallow-Llama-2, gemma-2-jpn, sarashina …) as a `tokenizers`
//! pipeline: spaces as "▁" (with a leading one unless `add_space_prefix` is false), then the
//! vocabulary's own algorithm, bytes of what no piece covers as `<0xXX>` tokens; control and
//! user-defined tokens are matched whole in text. BPE vocabularies (by far the most) merge the
//! highest-scored adjacent pair until none is in the vocabulary, as llama.cpp's SPM tokenizer
//! does, with BPE merges derived from the scores (a merge ranks as the score of the piece it
//! makes), as transformers' GGUF loader builds them. Unigram vocabularies, which GGUF does not
//! mark but their scores show, take SentencePiece's highest-probability segmentation instead.

use crate::model::error::ModelError;
use candle_core::quantized::gguf_file::{Content, Value};
use std::collections::HashMap;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::models::unigram::Unigram;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, Tokenizer};

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const BYTE: i32 = 6;

pub fn from_gguf(content: &Content, origin: &str) -> Result<Tokenizer, ModelError> {
    let bad = |message: String| ModelError::Missing {
        origin: origin.into(),
        message: format!("SentencePiece vocabulary: {message}"),
    };
    let get = |key: &str| content.metadata.get(key);
    let array = |key: &str| -> Result<&Vec<Value>, ModelError> {
        get(key)
            .ok_or_else(|| bad(format!("no {key}")))?
            .to_vec()
            .map_err(|e| bad(format!("{key}: {e}")))
    };
    let tokens: Vec<String> = array("tokenizer.ggml.tokens")?
        .iter()
        .map(|v| v.to_string().cloned())
        .collect::<Result<_, _>>()
        .map_err(|e| bad(format!("tokenizer.ggml.tokens: {e}")))?;
    let scores: Vec<f32> = array("tokenizer.ggml.scores")?
        .iter()
        .map(Value::to_f32)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(format!("tokenizer.ggml.scores: {e}")))?;
    let types: Vec<i32> = match get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()
            .and_then(|vs| vs.iter().map(Value::to_i32).collect())
            .map_err(|e| bad(format!("tokenizer.ggml.token_type: {e}")))?,
        None => vec![1; tokens.len()],
    };
    if scores.len() != tokens.len() || types.len() != tokens.len() {
        return Err(bad(format!(
            "{} tokens, {} scores, {} token types",
            tokens.len(),
            scores.len(),
            types.len()
        )));
    }
    let id_of = |key: &str| get(key).and_then(|v| v.to_u32().ok());
    let flag =
        |key: &str, default: bool| get(key).and_then(|v| v.to_bool().ok()).unwrap_or(default);
    let token = |id: Option<u32>| id.and_then(|i| Some((i, tokens.get(i as usize)?.clone())));
    // The converter writes no unknown_token_id for every vocabulary; the token type says it.
    let unk_id = id_of("tokenizer.ggml.unknown_token_id")
        .or_else(|| types.iter().position(|&t| t == UNKNOWN).map(|i| i as u32));
    let unk = token(unk_id).map(|(_, t)| t);
    let bos = token(id_of("tokenizer.ggml.bos_token_id"));
    let add_space_prefix = flag("tokenizer.ggml.add_space_prefix", true);
    let add_bos = flag("tokenizer.ggml.add_bos_token", true);

    let model: ModelWrapper = if is_unigram(&scores, &types) {
        unigram(&tokens, &scores, &types, unk_id)
            .map_err(|e| bad(e.to_string()))?
            .into()
    } else {
        let vocab: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let merges = merges_from_scores(&tokens, &scores, &types, &vocab);
        let mut bpe = BPE::builder()
            .vocab_and_merges(
                vocab
                    .into_iter()
                    .collect::<tokenizers::models::bpe::Vocab>(),
                merges,
            )
            .byte_fallback(true)
            .fuse_unk(true);
        if let Some(unk) = &unk {
            bpe = bpe.unk_token(unk.clone());
        }
        bpe.build().map_err(|e| bad(e.to_string()))?.into()
    };

    let mut tokenizer = Tokenizer::new(model);
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    if add_space_prefix {
        normalizers.push(Prepend::new("▁".into()).into());
    }
    normalizers.push(
        Replace::new(" ", "▁")
            .map_err(|e| bad(e.to_string()))?
            .into(),
    );
    tokenizer
        .with_normalizer(Some(NormalizerSequence::new(normalizers)))
        .map_err(|e| bad(e.to_string()))?;
    let mut decoders: Vec<DecoderWrapper> = vec![
        Replace::new("▁", " ")
            .map_err(|e| bad(e.to_string()))?
            .into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));
    // Control and user-defined tokens are whole tokens wherever they appear in text (chat
    // templates write <s>, [INST], <start_of_turn> … as text).
    let specials: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, t)| matches!(**t, CONTROL | USER_DEFINED))
        .map(|(tok, t)| AddedToken::from(tok.clone(), *t == CONTROL))
        .collect();
    tokenizer
        .add_special_tokens(specials)
        .map_err(|e| bad(e.to_string()))?;
    if let (true, Some((id, bos))) = (add_bos, bos) {
        let post = TemplateProcessing::builder()
            .try_single(format!("{bos} $A"))
            .and_then(|b| b.try_pair(format!("{bos} $A {bos} $B")))
            .map_err(|e| bad(e.to_string()))?
            .special_tokens(vec![(bos, id)])
            .build()
            .map_err(|e| bad(e.to_string()))?;
        tokenizer.with_post_processor(Some(post));
    }
    Ok(tokenizer)
}

/// A unigram vocabulary (SentencePiece's default model type), not a BPE one: SentencePiece BPE scores its
/// pieces by merge order (0, −1, −2 …; −1000 for all when the converter read a tokenizer.json),
/// a unigram model by log-probability, which is never a whole number in practice. The GGUF does
/// not say which algorithm the vocabulary was trained for; its scores do.
fn is_unigram(scores: &[f32], types: &[i32]) -> bool {
    scores
        .iter()
        .zip(types)
        .any(|(s, &t)| t == NORMAL && s.is_finite() && s.fract() != 0.0)
}

/// SentencePiece's unigram segmentation: the Viterbi path of highest total log-probability over
/// the normal pieces (`tokenizers`' Unigram, as transformers builds it from a unigram
/// tokenizer.model), bytes as `<0xXX>` tokens where no piece covers a character. llama.cpp
/// merges the best-scored adjacent pair instead, as for BPE vocabularies, which on a unigram
/// vocabulary stops where the intermediate pieces are missing: on a Japanese unigram vocabulary
/// its ids differ from the model's own tokenizer on most sentences (tests/suite/gguf_tokenizers.rs).
fn unigram(
    tokens: &[String],
    scores: &[f32],
    types: &[i32],
    unk: Option<u32>,
) -> tokenizers::Result<Unigram> {
    // Pieces that are not normal (bytes, controls, unused) never come out of SentencePiece's
    // lattice; here they must be in the vocabulary for their ids, so they get the lowest normal
    // score: text spelling them is almost never segmented through them, and the score of an
    // unknown character stays SentencePiece's (the lowest score − 10).
    let lowest = scores
        .iter()
        .zip(types)
        .filter(|&(s, &t)| t == NORMAL && s.is_finite())
        .map(|(s, _)| *s as f64)
        .fold(f64::INFINITY, f64::min);
    let vocab: Vec<(String, f64)> = tokens
        .iter()
        .zip(scores.iter().zip(types))
        .map(|(token, (&score, &t))| {
            let score = if t == NORMAL { score as f64 } else { lowest };
            (token.clone(), score)
        })
        .collect();
    Unigram::from(vocab, unk.map(|u| u as usize), true)
}

/// Every split of a normal piece into two pieces of the vocabulary is a merge, ranked by the
/// score of the piece it makes (SentencePiece BPE merges the best-scored pair first; ties keep
/// the vocabulary's order).
fn merges_from_scores(
    tokens: &[String],
    scores: &[f32],
    types: &[i32],
    vocab: &HashMap<String, u32>,
) -> Vec<(String, String)> {
    let mut ranked: Vec<(f32, u32, String, String)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        if matches!(types[id], CONTROL | USER_DEFINED) {
            continue;
        }
        for (split, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(split);
            if let (Some(l), Some(r)) = (vocab.get(left), vocab.get(right)) {
                // Pieces of byte tokens or specials never merge in SentencePiece.
                let normal = |i: &u32| !matches!(types[*i as usize], CONTROL | USER_DEFINED | BYTE);
                if normal(l) && normal(r) {
                    ranked.push((scores[id], id as u32, left.to_string(), right.to_string()));
                }
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked.into_iter().map(|(_, _, l, r)| (l, r)).collect()
}
