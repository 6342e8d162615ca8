//! Stage 4 — tokens: one item's judge prompt as tokens, laid out for one shared prefill.
//!
//! The item's prompt (everything before the answer prefixes) is the trunk of one row; each
//! aspect's answer prefix, and each multi-token score path, is a branch of that row. Leading
//! tokens shared by every item (the rubric header) are cut off and computed once per run. A
//! pair of responses (pairwise rubrics) is one row too: both orders share its trunk.

use super::JudgeError;
use super::targets::ScoreTargets;
use crate::data::{Item, Pair, Turn};
use crate::model::Row;
use crate::model::tokenizer::TextFit;
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

/// Tokenize `item` for every aspect of the builder's rubric, dropping the oldest context turns
/// while the longest sequence exceeds `fit.max_tokens`.
pub fn layout_item(
    builder: &PromptBuilder,
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    item: &Item,
    fit: &TextFit,
) -> Result<ItemLayout, JudgeError> {
    let shown = Shown::of_item(item);
    fit_context(builder.rubric().max_context_turns, &shown, fit, |keep| {
        let prompt = builder.render_keeping(item, keep)?;
        score_sequences(builder, template, tokenizer, &prompt)
    })
    .map(|(per_aspect, dropped_turns, truncated)| {
        branch_layout(builder, per_aspect, dropped_turns, truncated)
    })
}

/// A pairwise rubric's layout of `pair`: its two orders, laid out to prefill the fewer tokens.
/// Either one row, whose trunk is what the orders share (the rubric's text and the context, up
/// to the first response) and whose branches are each order's rest with each aspect's answer —
/// the rest then repeats once per aspect; or two rows, one per order, each its whole prompt with
/// the aspects' answers as branches — the context then repeats once. A rubric of one aspect
/// takes the first, a rubric that asks several aspects after the responses the second. The
/// choice counts only the pair's own tokens, so it is the same for the pair in any run. The
/// layouts' aspects, in order, are the rubric's for one order, then for the other: the order
/// that shows the lesser system name first leads (`leading_order`), so that the rows — and
/// their bits — are the same whichever system the pair names first.
pub fn layout_pair(
    builder: &PromptBuilder,
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    pair: &Pair,
    fit: &TextFit,
) -> Result<Vec<ItemLayout>, JudgeError> {
    let shown = Shown::of_pair(pair);
    let lead = leading_order(pair);
    fit_context(builder.rubric().max_context_turns, &shown, fit, |keep| {
        let (seqs, a) = score_sequences(
            builder,
            template,
            tokenizer,
            &builder.render_pair_keeping(pair, lead, keep)?,
        )?;
        let (other, b) = score_sequences(
            builder,
            template,
            tokenizer,
            &builder.render_pair_keeping(pair, !lead, keep)?,
        )?;
        Ok(((seqs, other), a.max(b)))
    })
    .map(|((seqs, other), dropped_turns, truncated)| {
        let apart = [
            branch_layout(builder, seqs.clone(), dropped_turns, truncated),
            branch_layout(builder, other.clone(), dropped_turns, truncated),
        ];
        let together = branch_layout(
            builder,
            seqs.into_iter().chain(other).collect(),
            dropped_turns,
            truncated,
        );
        let apart_tokens: usize = apart.iter().map(|l| l.row_tokens(0)).sum();
        if apart_tokens < together.row_tokens(0) {
            apart.into()
        } else {
            vec![together]
        }
    })
}

/// Which order of `pair` leads its row (`layout_pair`): whether it is the one that shows the
/// second system first (the second's name is the lesser).
pub fn leading_order(pair: &Pair) -> bool {
    pair.second_system() < pair.first_system()
}

/// Per aspect, per score: the tokens of a prompt, its answer prefix and the score.
type ScoreSequences = Vec<Vec<Vec<u32>>>;

/// Per aspect of the rubric, the tokens of `prompt` + answer prefix + each score; and the
/// longest.
fn score_sequences(
    builder: &PromptBuilder,
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    prompt: &crate::prompt::JudgePrompt,
) -> Result<(ScoreSequences, usize), JudgeError> {
    let rubric = builder.rubric();
    let shared = template.render(&prompt.messages, true)?;
    let mut per_aspect: ScoreSequences = Vec::with_capacity(rubric.aspects.len());
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
}

/// One row from score sequences (per aspect, in rubric order, repeated per order of a pair):
/// the trunk is what every sequence shares, less one token so that each aspect has
/// something of its own to read from.
fn branch_layout(
    builder: &PromptBuilder,
    per_aspect: Vec<Vec<Vec<u32>>>,
    dropped_turns: usize,
    truncated: bool,
) -> ItemLayout {
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
    let aspects = builder
        .rubric()
        .aspects
        .iter()
        .cycle()
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
    let (trunk, dropped_turns, truncated) = fit_context(
        builder.rubric().max_context_turns,
        &Shown::of_item(item),
        fit,
        |keep| {
            let trunk = whole_prompt(template, tokenizer, &builder.render_keeping(item, keep)?)?;
            let needed = trunk.len() + reserve;
            Ok((trunk, needed))
        },
    )?;
    Ok(prompt_layout(trunk, dropped_turns, truncated))
}

/// json mode, a pairwise rubric: the two orders' prompts (the first system's response shown
/// first, then the second's), each a trunk as `layout_prompt`'s, with the same context turns.
pub fn layout_pair_prompts(
    builder: &PromptBuilder,
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    pair: &Pair,
    fit: &TextFit,
    reserve: usize,
) -> Result<[ItemLayout; 2], JudgeError> {
    let ((a, b), dropped_turns, truncated) = fit_context(
        builder.rubric().max_context_turns,
        &Shown::of_pair(pair),
        fit,
        |keep| {
            let render = |swapped| -> Result<Vec<u32>, JudgeError> {
                let prompt = builder.render_pair_keeping(pair, swapped, keep)?;
                whole_prompt(template, tokenizer, &prompt)
            };
            let (a, b) = (render(false)?, render(true)?);
            let needed = a.len().max(b.len()) + reserve;
            Ok(((a, b), needed))
        },
    )?;
    Ok([
        prompt_layout(a, dropped_turns, truncated),
        prompt_layout(b, dropped_turns, truncated),
    ])
}

fn whole_prompt(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    prompt: &crate::prompt::JudgePrompt,
) -> Result<Vec<u32>, JudgeError> {
    encode(
        tokenizer,
        &format!(
            "{}{}",
            template.render(&prompt.messages, true)?,
            prompt.answers[0]
        ),
    )
}

fn prompt_layout(trunk: Vec<u32>, dropped_turns: usize, truncated: bool) -> ItemLayout {
    // One prompt for all aspects is what peers do in json mode too: nothing to compare.
    ItemLayout {
        trunk,
        aspects: Vec::new(),
        dropped_turns,
        truncated,
        naive_tokens: 0,
    }
}

/// What a layout shows of a unit, for fitting it: its id, its context turns and the bytes of
/// the response(s) it shows in full.
struct Shown<'a> {
    id: &'a str,
    context: &'a [Turn],
    response_bytes: usize,
}

impl<'a> Shown<'a> {
    fn of_item(item: &'a Item) -> Self {
        Shown {
            id: &item.id,
            context: &item.context,
            response_bytes: item.response.text.len(),
        }
    }

    fn of_pair(pair: &'a Pair) -> Self {
        Shown {
            id: &pair.id,
            context: &pair.first.context,
            response_bytes: pair
                .first
                .response
                .text
                .len()
                .saturating_add(pair.second.response.text.len()),
        }
    }
}

/// Render and tokenize with the most recent context turns the rubric allows (`max_context_turns`), dropping the oldest
/// while `build` says more than `fit.max_tokens` are needed. Returns what `build` made, the
/// context turns left out, and whether turns had to go for the prompt to fit. Turns (and
/// responses) too long to fit whatever their tokens are never tokenized.
fn fit_context<T>(
    max_context_turns: Option<usize>,
    item: &Shown,
    fit: &TextFit,
    mut build: impl FnMut(usize) -> Result<(T, usize), JudgeError>,
) -> Result<(T, usize, bool), JudgeError> {
    let max_tokens = fit.max_tokens;
    let response = item.response_bytes;
    if response > fit.max_bytes {
        return Err(JudgeError::TextTooLong {
            item: item.id.to_string(),
            bytes: response,
            max_bytes: fit.max_bytes,
            max: max_tokens,
        });
    }
    let allowed = max_context_turns
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
    let done = |made, keep| Ok((made, item.context.len() - keep, keep < allowed));
    let (made, needed) = build(fitting)?;
    if needed <= max_tokens {
        return done(made, fitting);
    }
    // More turns never take fewer tokens: the most that fit are found by bisection, in
    // log2(turns) renders of the prompt rather than one per turn left out (a dialogue of
    // thousands of turns would take minutes, each render as long as the dialogue).
    let (mut fits, mut too_many) = (0, fitting);
    let (mut best, needed_alone) = build(0)?;
    if needed_alone > max_tokens {
        return Err(JudgeError::TooLong {
            item: item.id.to_string(),
            tokens: needed_alone,
            max: max_tokens,
        });
    }
    while too_many - fits > 1 {
        let mid = fits + (too_many - fits) / 2;
        let (made, needed) = build(mid)?;
        if needed <= max_tokens {
            (fits, best) = (mid, made);
        } else {
            too_many = mid;
        }
    }
    done(best, fits)
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

#[cfg(test)]
mod tests {
    use super::{Shown, TextFit, fit_context};
    use crate::data::Turn;

    /// The most turns that fit are kept, found in a number of tries logarithmic in the turns: a
    /// dialogue of 10,000 turns is laid out in 16 renders, not thousands.
    #[test]
    fn the_most_recent_turns_that_fit_are_found_by_bisection() {
        let turn = |i: usize| Turn {
            speaker: "A".into(),
            text: format!("t{i}"),
        };
        let context: Vec<Turn> = (0..10_000).map(turn).collect();
        let item = Shown {
            id: "long",
            context: &context,
            response_bytes: 2,
        };
        let fit = TextFit {
            max_tokens: 3_000,
            max_bytes: usize::MAX,
        };
        // 5 tokens a turn, 40 for the rest: 592 turns fit.
        let mut calls = 0;
        let (made, dropped, truncated) = fit_context(None, &item, &fit, |keep| {
            calls += 1;
            Ok((keep, 40 + 5 * keep))
        })
        .unwrap();
        assert_eq!((made, dropped, truncated), (592, 10_000 - 592, true));
        assert!(calls <= 16, "{calls} renders");
        // All fit: one try; none fit even without turns: the item is too long.
        let mut calls = 0;
        let short = Shown {
            context: &context[..10],
            ..item
        };
        let all = fit_context(Some(8), &short, &fit, |keep| {
            calls += 1;
            Ok((keep, 40 + 5 * keep))
        });
        assert_eq!(all.unwrap(), (8, 2, false));
        assert_eq!(calls, 1);
        let err = fit_context(None, &short, &fit, |keep| Ok((keep, 4_000 + keep)));
        assert!(err.unwrap_err().to_string().contains("4000 tokens"));
    }
}
