//! BERTScore as bert_score 0.3.13 defines it (fast tokenizer): sentences stripped and encoded
//! with special tokens, one layer's token embeddings, cosine greedy matching with idf weights
//! (special tokens take part in the matching but weigh 0), P/R/F, several references per item
//! (max per column), baseline rescaling.
//!
//! What is done differently, for speed and batch invariance: sentences are deduplicated and
//! batched by token count under a token budget (bert_score sorts by whitespace words, which does
//! nothing for Japanese); token embeddings of all sentences stay in one device tensor and pairs
//! are matched there in batches, so only P and R come back to the host.
//!
//! One bert_score behaviour is reproduced on purpose: it matches pairs in batches of 64 (its
//! `batch_size`) in input order, padded, and a padding cell scores 0, so a token whose real
//! similarities are all negative gets 0 instead of its best one — when the other sentence of its
//! pair is shorter than the longest in that batch of 64. `pad_floors` computes which pairs that
//! hits from token counts alone (over the whole input, so a resumed run agrees), and matching
//! floors those tokens' maxima at 0. Our own batching never changes a score.

pub mod baseline;
pub mod defaults;
mod error;
pub mod loading;
mod matching;
pub mod run;
mod scorer;
mod sentences;

pub use error::BertScoreError;
pub use loading::{load_encoder, resolve_baseline};
pub use matching::Embeddings;
pub use scorer::{BertScorer, Depth, LoadedScorer};
pub use sentences::{Idf, Pairs, Sentences, pad_floors};
