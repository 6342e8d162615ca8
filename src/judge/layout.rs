//! Stage 4 — tokens: one item's judge prompt as tokens, laid out for one shared prefill.
//!
//! The item's prompt (everything before the answer prefixes) is the trunk of one row; each
//! aspect's answer prefix, and each multi-token score path, is a branch of that row. Leading
//! tokens shared by every item (the rubric header) are cut off and computed once per run.

use super::JudgeError;
use super::targets::ScoreTargets;
use crate::data::Item;
use crate::model::Row;
use crate::prompt::{ChatTemplate, PromptBuilder};
use tokenizers::Tokenizer;

/// One item, tokenized for every aspect.
#[derive(Clone, Debug)]
pub struct ItemLayout {
    /// Tokens shared by all aspects (prompt up to the answer prefixes), header included.
    pub trunk: Vec<u32>,
    /// Per aspect, in rubric order. Empty in json mode, where the trunk is the whole prompt and
    /// `json::JsonFormat` writes the rest.
    pub aspects: Vec<ScoreTargets>,
    /// Context turns left out (rubric limit, or to fit the model's context).
    pub dropped_turns: usize,
    /// Whether turns beyond the rubric's limit had to go for the prompt to fit.
    pub truncated: bool,
    /// Tokens a peer pipeline would prefill: one full prompt per aspect.
    pub naive_tokens: usize,
}

impl ItemLayout {
    /// Tokens this layout prefills beyond a `header` computed once.
    pub fn row_tokens(&self, header: usize) -> usize {
        let branches: usize = self
            .aspects
            .iter()
            .flat_map(|t| t.queries.iter().map(move |q| t.stem.len() + q.path.len()))
            .sum();
        self.trunk.len() - header + branches
    }

    /// The row for a batch whose shared prefix is the first `header` trunk tokens.
    pub fn row(&self, header: usize) -> Row {
        let mut branches = Vec::new();
        for t in &self.aspects {
            for q in &t.queries {
                let mut b = t.stem.clone();
                b.extend_from_slice(&q.path);
                if !b.is_empty() {
                    branches.push(b);
                }
            }
        }
        Row {
            trunk: self.trunk[header..].to_vec(),
            branches,
        }
    }

    /// For every aspect, the index within `row(header)` of the token after which each of its
    /// queries reads the next-token distribution (queries in `ScoreTargets::queries` order).
    pub fn query_positions(&self, header: usize) -> Vec<Vec<usize>> {
        let trunk_len = self.trunk.len() - header;
        let mut next_branch_start = trunk_len;
        let mut out = Vec::with_capacity(self.aspects.len());
        for t in &self.aspects {
            let mut positions = Vec::with_capacity(t.queries.len());
            for q in &t.queries {
                let len = t.stem.len() + q.path.len();
                if len == 0 {
                    positions.push(trunk_len - 1);
                } else {
                    positions.push(next_branch_start + len - 1);
                    next_branch_start += len;
                }
            }
            out.push(positions);
        }
        out
    }
}

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
            max_bytes: crate::model::tokenizer::bytes_beyond(tokenizer, max_tokens),
        }
    }
}

/// Tokenize `item` for every aspect of the builder's rubric, dropping the oldest context turns
/// while the longest sequence exceeds `fit.max_tokens`.
pub fn layout_item(
    builder: &PromptBuilder,
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    item: &Item,
    fit: &TextFit,
) -> Result<ItemLayout, JudgeError> {
    let rubric = builder.rubric();
    fit_context(builder, item, fit, |prompt| {
        let shared = template.render(&prompt.messages, true)?;
        let mut per_aspect: Vec<Vec<Vec<u32>>> = Vec::with_capacity(rubric.aspects.len());
        for (a, aspect) in rubric.aspects.iter().enumerate() {
            let answer = &prompt.answers[a.min(prompt.answers.len() - 1)];
            let seqs = aspect
                .scores()
                .iter()
                .map(|s| encode(tokenizer, &format!("{shared}{answer}{s}")))
                .collect::<Result<Vec<_>, _>>()?;
            per_aspect.push(seqs);
        }
        let longest = per_aspect.iter().flatten().map(Vec::len).max().unwrap_or(0);
        Ok((per_aspect, longest))
    })
    .map(|(per_aspect, dropped_turns, truncated)| {
        // The trunk: what every aspect's every score shares, less one token so that each
        // aspect has something of its own to read from.
        let all: Vec<&Vec<u32>> = per_aspect.iter().flatten().collect();
        let shortest = all.iter().map(|s| s.len()).min().unwrap_or(0);
        let lcp = (0..shortest)
            .take_while(|&i| all.iter().all(|s| s[i] == all[0][i]))
            .count();
        let trunk_len = lcp.min(shortest.saturating_sub(1)).max(1);
        let trunk = all[0][..trunk_len].to_vec();
        let naive_tokens = per_aspect
            .iter()
            .map(|seqs| seqs.iter().map(Vec::len).min().unwrap_or(0) - 1)
            .sum();
        let aspects = rubric
            .aspects
            .iter()
            .zip(&per_aspect)
            .map(|(aspect, seqs)| ScoreTargets::new(aspect.scores(), seqs, trunk_len))
            .collect();
        ItemLayout {
            trunk,
            aspects,
            dropped_turns,
            truncated,
            naive_tokens,
        }
    })
}

/// json mode: the whole prompt (answer prefix included) as the trunk, dropping the oldest
/// context turns while prompt + `reserve` answer tokens exceed `fit.max_tokens`.
pub fn layout_prompt(
    builder: &PromptBuilder,
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    item: &Item,
    fit: &TextFit,
    reserve: usize,
) -> Result<ItemLayout, JudgeError> {
    let (trunk, dropped_turns, truncated) = fit_context(builder, item, fit, |prompt| {
        let trunk = encode(
            tokenizer,
            &format!(
                "{}{}",
                template.render(&prompt.messages, true)?,
                prompt.answers[0]
            ),
        )?;
        let needed = trunk.len() + reserve;
        Ok((trunk, needed))
    })?;
    // One prompt for all aspects is what peers do in json mode too: nothing to compare.
    Ok(ItemLayout {
        trunk,
        aspects: Vec::new(),
        dropped_turns,
        truncated,
        naive_tokens: 0,
    })
}

/// Render and tokenize with the most recent context turns the rubric allows, dropping the oldest
/// while `build` says more than `fit.max_tokens` are needed. Returns what `build` made, the
/// context turns left out, and whether turns had to go for the prompt to fit. Turns (and
/// responses) too long to fit whatever their tokens are never tokenized.
fn fit_context<T>(
    builder: &PromptBuilder,
    item: &Item,
    fit: &TextFit,
    mut build: impl FnMut(&crate::prompt::JudgePrompt) -> Result<(T, usize), JudgeError>,
) -> Result<(T, usize, bool), JudgeError> {
    let max_tokens = fit.max_tokens;
    let response = item.response.text.len();
    if response > fit.max_bytes {
        return Err(JudgeError::TextTooLong {
            item: item.id.clone(),
            bytes: response,
            max_bytes: fit.max_bytes,
            max: max_tokens,
        });
    }
    let allowed = builder
        .rubric()
        .max_context_turns
        .unwrap_or(usize::MAX)
        .min(item.context.len());
    // The most recent turns whose text, with the response, could still fit.
    let mut bytes = response;
    let fitting = item.context[item.context.len() - allowed..]
        .iter()
        .rev()
        .take_while(|t| {
            bytes = bytes.saturating_add(t.text.len());
            bytes <= fit.max_bytes
        })
        .count();
    let mut keep = fitting;
    loop {
        let (made, needed) = build(&builder.render_keeping(item, keep)?)?;
        if needed <= max_tokens {
            return Ok((made, item.context.len() - keep, keep < allowed));
        }
        if keep == 0 {
            return Err(JudgeError::TooLong {
                item: item.id.clone(),
                tokens: needed,
                max: max_tokens,
            });
        }
        keep -= 1;
    }
}

fn encode(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>, JudgeError> {
    tokenizer
        .encode(text, false)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| JudgeError::Tokenizer(e.to_string()))
}

/// Leading tokens shared by every item's trunk (each trunk keeps at least one token).
pub fn common_header(layouts: &[&ItemLayout]) -> usize {
    let Some(first) = layouts.first() else {
        return 0;
    };
    let mut n = first.trunk.len().saturating_sub(1);
    for l in &layouts[1..] {
        n = n.min(l.trunk.len().saturating_sub(1));
        n = (0..n).take_while(|&i| l.trunk[i] == first.trunk[i]).count();
    }
    n
}
