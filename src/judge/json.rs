//! Stage 6, json mode: the judge writes one JSON object — a reason, then one integer per aspect,
//! keys in the rubric's order — and a hand-written grammar makes any other output impossible.
//!
//! The fixed parts (`{`, keys, separators) are not generated but fed to the model. The reason is
//! generated token by token, each token checked byte by byte against a JSON string automaton
//! (escapes, valid UTF-8, no control characters); a token that closes the string must continue
//! with the start of what follows. Past `reason_max_tokens` the string is closed for the model.
//! Each integer is read exactly as in score mode (`ScoreTargets`): its distribution over the
//! valid scores, then the argmax (greedy) or a draw (sampling) is written.

use super::JudgeError;
use super::targets::ScoreTargets;
use super::token_bytes::{TokenBytes, encode_exact};
use crate::model::decoder::generate::{
    Feed, Read, RowWriter, decode_rows, host_rows, log_softmax_rows,
};
use crate::model::{PrefixKv, Products, Transformer};
use crate::results::scores::AspectScore;
use crate::rng::SplitMix64;
use crate::rubric::Rubric;
use tokenizers::Tokenizer;

/// How the free parts are chosen.
#[derive(Clone, Copy, Debug)]
pub struct Decoding {
    /// 0: greedy. Otherwise tokens and integers are drawn at this temperature.
    pub temperature: f64,
    pub seed: u64,
}

/// One judge's JSON answer.
#[derive(Clone, Debug)]
pub struct JsonJudgment {
    /// The whole object, as written.
    pub text: String,
    pub reason: String,
    /// Per aspect; `score` is the integer written in the object.
    pub aspects: Vec<AspectScore>,
}

/// The object's fixed parts as tokens, for one rubric and one tokenizer.
pub struct JsonFormat {
    open: Vec<u32>,
    /// After the reason: `",\n  "<first key>": `.
    close_reason: Vec<u8>,
    /// `close_rest[k]`: the tokens of `close_reason[k..]`, fed after a token that closed the
    /// reason writing its first k bytes; None where that rest cannot be written exactly (such a
    /// closing token is not allowed).
    close_rest: Vec<Option<Vec<u32>>>,
    /// Per aspect: its valid scores as token paths, and what follows the integer (empty after
    /// the last one, which ends the object textually: nothing after it is needed from the model).
    aspects: Vec<(ScoreTargets, Segment)>,
    reason_max_tokens: usize,
    bytes: TokenBytes,
    /// Each token's step from the state between characters, where the reason spends most of
    /// its time: the vocabulary scan then reads this instead of walking every token's bytes.
    from_ready: Vec<Option<Step>>,
}

/// Fixed text, and its tokens.
struct Segment {
    text: String,
    tokens: Vec<u32>,
}

impl JsonFormat {
    pub fn new(rubric: &Rubric, tokenizer: &Tokenizer) -> Result<Self, JudgeError> {
        let json = rubric.json.as_ref().ok_or_else(|| {
            JudgeError::Grammar(format!("rubric {} has no [json] table", rubric.name))
        })?;
        let bytes = TokenBytes::new(tokenizer);
        let key = |k: &str| serde_json::to_string(k).expect("strings serialise");
        let keys: Vec<String> = rubric.aspects.iter().map(|a| key(&a.name)).collect();
        let mut aspects = Vec::with_capacity(keys.len());
        for (i, a) in rubric.aspects.iter().enumerate() {
            let scores = a.scores();
            let seqs = scores
                .iter()
                .map(|s| encode_exact(tokenizer, &bytes, &s.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            let text = match keys.get(i + 1) {
                Some(next) => format!(",\n  {next}: "),
                None => String::new(),
            };
            let tokens = if text.is_empty() {
                Vec::new()
            } else {
                encode_exact(tokenizer, &bytes, &text)?
            };
            aspects.push((
                ScoreTargets::new(scores, &seqs, 0),
                Segment { text, tokens },
            ));
        }
        let open = encode_exact(
            tokenizer,
            &bytes,
            &format!("{{\n  {}: \"", key(&json.reason_key)),
        )?;
        let close = format!("\",\n  {}: ", keys[0]);
        let close_rest: Vec<Option<Vec<u32>>> = (0..=close.len())
            .map(|k| match close.get(k..) {
                Some("") => Some(Vec::new()),
                Some(rest) => encode_exact(tokenizer, &bytes, rest).ok(),
                None => None,
            })
            .collect();
        if close_rest[0].is_none() {
            return Err(JudgeError::Grammar(format!(
                "the tokenizer does not write {close:?} back as it is"
            )));
        }
        let close_reason = close.into_bytes();
        let mut format = JsonFormat {
            open,
            close_reason,
            close_rest,
            aspects,
            reason_max_tokens: json.reason_max_tokens,
            bytes,
            from_ready: Vec::new(),
        };
        format.from_ready = (0..format.bytes.len() as u32)
            .map(|id| {
                format
                    .bytes
                    .get(id)
                    .and_then(|b| format.advance(StrState::READY, id, b))
            })
            .collect();
        Ok(format)
    }

    /// Most tokens an answer can take after the prompt (for fitting prompts into the context).
    pub fn reserve(&self) -> usize {
        let fixed: usize = self
            .aspects
            .iter()
            .map(|(t, after)| t.paths.iter().map(Vec::len).max().unwrap_or(0) + after.tokens.len())
            .sum();
        let close = self
            .close_rest
            .iter()
            .flatten()
            .map(Vec::len)
            .max()
            .unwrap_or(0);
        self.open.len() + self.reason_max_tokens + close + fixed
    }

    /// Write the object after `prompt` (the tokens after `header`'s keys and values), one token
    /// at a time through `Transformer::extend`: the reference `decode_batch` is tested against.
    pub fn decode(
        &self,
        model: &Transformer,
        header: Option<&PrefixKv>,
        prompt: &[u32],
        decoding: Decoding,
        seed: u64,
    ) -> Result<WrittenJson, JudgeError> {
        let (mut writer, mut feed) = Writer::start(self, prompt, decoding, seed);
        let mut kv: Option<PrefixKv> = None;
        let mut products = Products::ByRowCount;
        loop {
            let (next, logits) = model.extend(kv.as_ref().or(header), &feed.tokens, products)?;
            products = Products::RowWise;
            let read = if feed.log_probs {
                let mut rows = vec![log_softmax_rows(&logits)?.remove(0)];
                for probe in &feed.probes {
                    let (_, l) = model.extend(Some(&next), probe, products)?;
                    rows.push(log_softmax_rows(&l)?.remove(0));
                }
                Read::LogProbs(rows)
            } else {
                Read::Logits(host_rows(&logits)?.remove(0))
            };
            kv = Some(next);
            match writer.advance(read)? {
                Some(f) => feed = f,
                None => return writer.finish(),
            }
        }
    }

    /// Write the objects after several prompts together, each row with its own grammar state
    /// and draws (`model::decoder::generate`: one forward pass per step for all of them). Each
    /// answer is the one `decode` writes for its prompt alone.
    pub fn decode_batch(
        &self,
        model: &Transformer,
        header: Option<&PrefixKv>,
        prompts: &[&[u32]],
        decoding: Decoding,
        seeds: &[u64],
    ) -> Result<Vec<WrittenJson>, JudgeError> {
        let mut writers = Vec::with_capacity(prompts.len());
        let mut feeds = Vec::with_capacity(prompts.len());
        for (prompt, &seed) in prompts.iter().zip(seeds) {
            let (w, f) = Writer::start(self, prompt, decoding, seed);
            writers.push(w);
            feeds.push(Some(f));
        }
        let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        decode_rows(model, header, feeds, &mut writers, longest + self.reserve())?;
        writers.into_iter().map(Writer::finish).collect()
    }

    /// The next reason token under the grammar: greedy or drawn among the allowed tokens.
    fn choose_reason_token(
        &self,
        logits: &[f32],
        state: StrState,
        at_limit: bool,
        decoding: Decoding,
        rng: &mut SplitMix64,
    ) -> Result<Step, JudgeError> {
        let mut allowed: Vec<(Step, f32)> = Vec::new();
        let mut best: Option<(Step, f32)> = None;
        for (id, &logit) in logits.iter().enumerate().take(self.bytes.len()) {
            let step = if state == StrState::READY {
                self.from_ready[id]
            } else {
                self.bytes
                    .get(id as u32)
                    .and_then(|b| self.advance(state, id as u32, b))
            };
            let Some(step) = step else { continue };
            // Past the limit only a token that finishes the current character (or escape) is allowed.
            if at_limit && matches!(step, Step::Continue(_, s) if s != StrState::READY) {
                continue;
            }
            if decoding.temperature > 0.0 {
                allowed.push((step, logit));
            } else if best.as_ref().is_none_or(|(_, l)| logit > *l) {
                best = Some((step, logit));
            }
        }
        if decoding.temperature > 0.0 {
            let max = allowed
                .iter()
                .map(|(_, l)| *l)
                .fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f64> = allowed
                .iter()
                .map(|(_, l)| (((*l - max) as f64) / decoding.temperature).exp())
                .collect();
            if allowed.is_empty() {
                return Err(JudgeError::Grammar(
                    "no vocabulary entry can continue the reason".into(),
                ));
            }
            return Ok(allowed.swap_remove(rng.pick(&weights)).0);
        }
        best.map(|(s, _)| s).ok_or_else(|| {
            JudgeError::Grammar("no vocabulary entry can continue the reason".into())
        })
    }

    fn advance(&self, mut state: StrState, id: u32, bytes: &[u8]) -> Option<Step> {
        for (i, &b) in bytes.iter().enumerate() {
            match state.step(b)? {
                Next::In(s) => state = s,
                Next::Close => {
                    let rest = &bytes[i..];
                    let writable = self.close_rest.get(rest.len()).is_some_and(Option::is_some);
                    return (self.close_reason.starts_with(rest) && writable)
                        .then_some(Step::Close(id, rest.len()));
                }
            }
        }
        Some(Step::Continue(id, state))
    }
}

#[derive(Clone, Copy)]
enum Phase {
    Reason { state: StrState, tokens: usize },
    Score(usize),
}

/// One item's answer being written: its grammar state, its draws and its text.
struct Writer<'f> {
    format: &'f JsonFormat,
    decoding: Decoding,
    rng: SplitMix64,
    phase: Phase,
    text: Vec<u8>,
    reason: std::ops::Range<usize>,
    aspects: Vec<AspectScore>,
    /// The model's output was not a number at a step: nothing more is written.
    broken: bool,
}

/// An item's object, or why it has none.
pub type WrittenJson = Result<JsonJudgment, String>;

impl<'f> Writer<'f> {
    fn start(
        format: &'f JsonFormat,
        prompt: &[u32],
        decoding: Decoding,
        seed: u64,
    ) -> (Self, Feed) {
        let text = format
            .bytes
            .concat(&format.open)
            .expect("checked at construction");
        let mut tokens = prompt.to_vec();
        tokens.extend_from_slice(&format.open);
        let writer = Writer {
            format,
            decoding,
            rng: SplitMix64(seed),
            phase: Phase::Reason {
                state: StrState::READY,
                tokens: 0,
            },
            reason: text.len()..text.len(),
            text,
            aspects: Vec::with_capacity(format.aspects.len()),
            broken: false,
        };
        let feed = Feed {
            tokens,
            probes: Vec::new(),
            log_probs: false,
        };
        (writer, feed)
    }

    /// Feed `tokens`, which end where aspect `i`'s score starts, and probe its longer paths.
    fn score_feed(&mut self, i: usize, tokens: Vec<u32>) -> Feed {
        self.phase = Phase::Score(i);
        let queries = &self.format.aspects[i].0.queries;
        Feed {
            tokens,
            probes: queries[1..].iter().map(|q| q.path.clone()).collect(),
            log_probs: true,
        }
    }

    fn finish(self) -> Result<WrittenJson, JudgeError> {
        if self.broken {
            return Ok(Err(super::error::NOT_A_NUMBER.to_string()));
        }
        let text = String::from_utf8(self.text).map_err(|_| {
            JudgeError::Grammar("the answer is not UTF-8 (a bug in the grammar)".into())
        })?;
        let reason_json = format!("\"{}\"", &text[self.reason.clone()]);
        let reason: String = serde_json::from_str(&reason_json).map_err(|e| {
            JudgeError::Grammar(format!(
                "the reason is not a JSON string (a bug in the grammar): {e}"
            ))
        })?;
        Ok(Ok(JsonJudgment {
            text,
            reason,
            aspects: self.aspects,
        }))
    }
}

impl RowWriter for Writer<'_> {
    type Error = JudgeError;

    /// Take what the last feed gave; what to feed next, or None when the object is written.
    fn advance(&mut self, read: Read) -> Result<Option<Feed>, JudgeError> {
        let finite = match &read {
            Read::Logits(row) => row.iter().all(|v| v.is_finite()),
            Read::LogProbs(rows) => rows.iter().flatten().all(|v| v.is_finite()),
        };
        if !finite {
            self.broken = true;
            return Ok(None);
        }
        let f = self.format;
        match (self.phase, read) {
            (Phase::Reason { state, tokens }, Read::Logits(logits)) => {
                let at_limit = tokens >= f.reason_max_tokens;
                let closing = if at_limit && state == StrState::READY {
                    f.close_rest[0].clone().expect("checked at construction")
                } else {
                    let choice = f.choose_reason_token(
                        &logits,
                        state,
                        at_limit,
                        self.decoding,
                        &mut self.rng,
                    )?;
                    match choice {
                        Step::Continue(id, next) => {
                            let bytes = f.bytes.get(id).expect("allowed tokens have bytes");
                            self.text.extend_from_slice(bytes);
                            self.phase = Phase::Reason {
                                state: next,
                                tokens: tokens + 1,
                            };
                            return Ok(Some(Feed {
                                tokens: vec![id],
                                probes: Vec::new(),
                                log_probs: false,
                            }));
                        }
                        Step::Close(id, consumed) => {
                            let mut tokens = vec![id];
                            let rest = f.close_rest[consumed].as_deref();
                            tokens
                                .extend_from_slice(rest.expect("only writable rests are allowed"));
                            tokens
                        }
                    }
                };
                self.reason.end = self.text.len();
                self.text.extend_from_slice(&f.close_reason);
                Ok(Some(self.score_feed(0, closing)))
            }
            (Phase::Score(i), Read::LogProbs(rows)) => {
                let (targets, after) = &f.aspects[i];
                let (dist, off) = targets.distribution(|q, t| rows[q][t as usize] as f64);
                let mut score = AspectScore::from_distribution(&targets.scores, &dist, off);
                let pick = if self.decoding.temperature > 0.0 {
                    let weights: Vec<f64> = dist
                        .iter()
                        .map(|p| p.powf(1.0 / self.decoding.temperature))
                        .collect();
                    self.rng.pick(&weights)
                } else {
                    targets
                        .scores
                        .iter()
                        .position(|s| *s == score.score)
                        .expect("argmax is a valid score")
                };
                score.score = targets.scores[pick];
                self.text
                    .extend_from_slice(score.score.to_string().as_bytes());
                self.text.extend_from_slice(after.text.as_bytes());
                self.aspects.push(score);
                if i + 1 == f.aspects.len() {
                    self.text.extend_from_slice(b"\n}");
                    return Ok(None);
                }
                let mut tokens = targets.paths[pick].clone();
                tokens.extend_from_slice(&after.tokens);
                Ok(Some(self.score_feed(i + 1, tokens)))
            }
            _ => Err(JudgeError::Grammar(
                "a reading does not match the answer's state (a bug in the decoder)".into(),
            )),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    /// The token stays inside the string, leaving it in this state.
    Continue(u32, StrState),
    /// The token ends the string and writes this many bytes of what follows it.
    Close(u32, usize),
}

/// Inside a JSON string: how many UTF-8 continuation bytes are still due (and the range the
/// next one must fall in), or an escape in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StrState {
    utf8_left: u8,
    lo: u8,
    hi: u8,
    escape: bool,
}

enum Next {
    In(StrState),
    Close,
}

impl StrState {
    const READY: StrState = StrState {
        utf8_left: 0,
        lo: 0x80,
        hi: 0xBF,
        escape: false,
    };

    fn step(self, b: u8) -> Option<Next> {
        let cont = |left: u8, lo: u8, hi: u8| {
            Some(Next::In(StrState {
                utf8_left: left,
                lo,
                hi,
                escape: false,
            }))
        };
        if self.escape {
            // \uXXXX is left out: a lone surrogate would make the object invalid for strict parsers.
            return matches!(b, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
                .then_some(Next::In(Self::READY));
        }
        if self.utf8_left > 0 {
            return (self.lo..=self.hi)
                .contains(&b)
                .then_some(Next::In(StrState {
                    utf8_left: self.utf8_left - 1,
                    lo: 0x80,
                    hi: 0xBF,
                    escape: false,
                }));
        }
        match b {
            b'"' => Some(Next::Close),
            b'\\' => Some(Next::In(StrState {
                escape: true,
                ..Self::READY
            })),
            0x00..=0x1F | 0x7F => None,
            0x20..=0x7E => Some(Next::In(Self::READY)),
            0xC2..=0xDF => cont(1, 0x80, 0xBF),
            0xE0 => cont(2, 0xA0, 0xBF),
            0xED => cont(2, 0x80, 0x9F),
            0xE1..=0xEF => cont(2, 0x80, 0xBF),
            0xF0 => cont(3, 0x90, 0xBF),
            0xF1..=0xF3 => cont(3, 0x80, 0xBF),
            0xF4 => cont(3, 0x80, 0x8F),
            _ => None,
        }
    }
}

/// A per-item seed, so that an item's draws do not depend on which others share its run.
pub fn item_seed(seed: u64, judge: usize, item_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.rotate_left(17) ^ (judge as u64).rotate_left(41);
    for b in item_id.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(s: &[u8]) -> bool {
        let mut st = StrState::READY;
        for &b in s {
            match st.step(b) {
                Some(Next::In(n)) => st = n,
                _ => return false,
            }
        }
        st == StrState::READY
    }

    #[test]
    fn string_automaton_matches_serde_json() {
        let cases: Vec<&[u8]> = vec![
            "日本語の理由".as_bytes(),
            b"a \\\"quoted\\\" \\n line",
            b"tab\there",
            b"\\u0041",
            b"\\x",
            &[0xE3, 0x81],
            &[0xED, 0xA0, 0x80],
            &[0xC0, 0x80],
            b"plain ascii / slash",
        ];
        for c in cases {
            let quoted = [b"\"".as_slice(), c, b"\""].concat();
            let serde_ok = std::str::from_utf8(&quoted)
                .ok()
                .and_then(|s| serde_json::from_str::<String>(s).ok())
                .is_some();
            let ours = accepts(c);
            // Ours may be stricter (no \u escapes), never looser.
            assert!(!ours || serde_ok, "{c:?} accepted but invalid JSON");
            if c != b"\\u0041" {
                assert_eq!(ours, serde_ok, "{c:?}");
            }
        }
    }

    #[test]
    fn draws_follow_the_weights() {
        let mut r = SplitMix64(7);
        let mut counts = [0usize; 3];
        for _ in 0..30_000 {
            counts[r.pick(&[1.0, 2.0, 0.0])] += 1;
        }
        assert_eq!(counts[2], 0);
        let ratio = counts[1] as f64 / counts[0] as f64;
        assert!((ratio - 2.0).abs() < 0.1, "{counts:?}");
    }
}
