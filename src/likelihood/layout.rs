//! An item's scored texts as one row of a prefill: every (prefix, continuation) sequence of
//! its aspects shares the prefixes' common start (the trunk, the dialogue), each sequence's
//! rest is a branch, and each continuation token is read where the token before it sits.

use super::scorer::{LikelihoodScorer, Method};
use crate::data::Item;
use crate::model::Row;
use tokenizers::Tokenizer;

/// One scored text: which aspect, whether it is a positive follow-up (the response, for
/// method response, counts as positive), and its tokens.
#[derive(Clone, Debug)]
pub struct Sequence {
    pub aspect: usize,
    pub positive: bool,
    /// The prefix's tokens (special tokens the tokenizer adds included), then the
    /// continuation's (the separator and the text, nothing added).
    pub prefix: Vec<u32>,
    pub continuation: Vec<u32>,
}

/// An item laid out: its row, and per sequence the (row position, token) of each scored token.
#[derive(Clone, Debug)]
pub struct ItemRows {
    pub row: Row,
    pub sequences: Vec<Sequence>,
    pub reads: Vec<Vec<(usize, u32)>>,
    pub dropped_turns: usize,
}

impl ItemRows {
    pub fn tokens(&self) -> usize {
        self.row.len()
    }
}

fn encode(tokenizer: &Tokenizer, text: &str, special: bool) -> Result<Vec<u32>, String> {
    tokenizer
        .encode(text, special)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| format!("tokenizer: {e}"))
}

/// Every sequence of `item` with its last `keep` context turns.
pub fn sequences(
    scorer: &LikelihoodScorer,
    tokenizer: &Tokenizer,
    item: &Item,
    keep: usize,
) -> Result<Vec<Sequence>, String> {
    let mut out = Vec::new();
    for (a, aspect) in scorer.aspects.iter().enumerate() {
        let prefix = encode(tokenizer, &scorer.prefix_text(item, keep, a)?, true)?;
        let texts: Vec<(bool, &str)> = match scorer.method {
            Method::FollowUps => (aspect.positive.iter().map(|f| (true, f.as_str())))
                .chain(aspect.negative.iter().map(|f| (false, f.as_str())))
                .collect(),
            Method::Response => vec![(true, item.response.text.as_str())],
        };
        for (positive, text) in texts {
            let continuation = encode(tokenizer, &format!("{}{text}", scorer.separator), false)?;
            if continuation.is_empty() {
                return Err("a scored text has no tokens".into());
            }
            out.push(Sequence {
                aspect: a,
                positive,
                prefix: prefix.clone(),
                continuation,
            });
        }
    }
    Ok(out)
}

/// `item` laid out within `max_tokens` (the model's context): the most recent context turns
/// (at most the scorer's `max_context_turns`) whose row fits.
pub fn layout(
    scorer: &LikelihoodScorer,
    tokenizer: &Tokenizer,
    item: &Item,
    max_tokens: usize,
) -> Result<ItemRows, String> {
    let allowed = scorer
        .max_context_turns
        .unwrap_or(usize::MAX)
        .min(item.context.len());
    let fitting = |keep: usize| -> Result<Option<Vec<Sequence>>, String> {
        let seqs = sequences(scorer, tokenizer, item, keep)?;
        let longest = seqs
            .iter()
            .map(|s| s.prefix.len() + s.continuation.len())
            .max()
            .unwrap_or(0);
        Ok((longest <= max_tokens).then_some(seqs))
    };
    let done = |seqs: Vec<Sequence>, keep: usize| {
        let mut rows = rows_of(seqs)?;
        rows.dropped_turns = item.context.len() - keep;
        Ok(rows)
    };
    if let Some(seqs) = fitting(allowed)? {
        return done(seqs, allowed);
    }
    // More turns never take fewer tokens: the most that fit, by bisection (log2(turns) layouts,
    // not one per turn left out).
    let Some(mut best) = fitting(0)? else {
        return Err(format!(
            "the scored texts do not fit the model's context of {max_tokens} tokens even without context turns"
        ));
    };
    let (mut fits, mut too_many) = (0, allowed);
    while too_many - fits > 1 {
        let mid = fits + (too_many - fits) / 2;
        match fitting(mid)? {
            Some(seqs) => (fits, best) = (mid, seqs),
            None => too_many = mid,
        }
    }
    done(best, fits)
}

/// One row: the trunk is the prefixes' longest common start (at most the shortest prefix),
/// each sequence's rest of its prefix and its continuation a branch.
pub fn rows_of(sequences: Vec<Sequence>) -> Result<ItemRows, String> {
    let first = &sequences.first().ok_or("nothing to score")?.prefix;
    let shortest = sequences.iter().map(|s| s.prefix.len()).min().unwrap_or(0);
    let trunk_len = (0..shortest)
        .take_while(|&i| sequences.iter().all(|s| s.prefix[i] == first[i]))
        .count();
    if trunk_len == 0 {
        return Err(
            "the aspects' prefixes share no first token: write the dialogue before what differs between aspects (an instruction)".into(),
        );
    }
    let trunk = first[..trunk_len].to_vec();
    let mut branches: Vec<Vec<u32>> = Vec::with_capacity(sequences.len());
    let mut reads: Vec<Vec<(usize, u32)>> = Vec::with_capacity(sequences.len());
    let mut start = trunk_len;
    for s in &sequences {
        let rest = &s.prefix[trunk_len..];
        let mut branch = rest.to_vec();
        branch.extend_from_slice(&s.continuation);
        // A text scored for several aspects after the same prefix (a follow-up in two sets) is
        // one branch: computed once, the same numbers for each.
        if let Some(k) = (sequences.iter().zip(&reads))
            .position(|(o, _)| o.prefix[trunk_len..] == *rest && o.continuation == s.continuation)
        {
            reads.push(reads[k].clone());
            continue;
        }
        // Token k of the branch is read at the position before it: the trunk's last for k = 0.
        let read: Vec<(usize, u32)> = (rest.len()..branch.len())
            .map(|k| {
                let at = if k == 0 { trunk_len - 1 } else { start + k - 1 };
                (at, branch[k])
            })
            .collect();
        start += branch.len();
        branches.push(branch);
        reads.push(read);
    }
    Ok(ItemRows {
        row: Row { trunk, branches },
        sequences,
        reads,
        dropped_turns: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(prefix: &[u32], continuation: &[u32]) -> Sequence {
        Sequence {
            aspect: 0,
            positive: true,
            prefix: prefix.to_vec(),
            continuation: continuation.to_vec(),
        }
    }

    /// Each continuation token is read right after the token that precedes it in its own
    /// sequence, whether that is in the trunk or in its branch.
    #[test]
    fn reads_sit_before_each_scored_token() {
        let rows = rows_of(vec![seq(&[1, 2, 3], &[7, 8]), seq(&[1, 2, 4], &[9])]).unwrap();
        assert_eq!(rows.row.trunk, [1, 2]);
        assert_eq!(rows.row.branches, [vec![3, 7, 8], vec![4, 9]]);
        // Row positions: trunk 0-1, branch one 2-4, branch two 5-6.
        assert_eq!(rows.reads[0], [(2, 7), (3, 8)]);
        assert_eq!(rows.reads[1], [(5, 9)]);
        // Equal prefixes: every first token is read at the trunk's end.
        let rows = rows_of(vec![seq(&[5, 6], &[7, 8]), seq(&[5, 6], &[9])]).unwrap();
        assert_eq!(rows.row.trunk, [5, 6]);
        assert_eq!(rows.reads[0], [(1, 7), (2, 8)]);
        assert_eq!(rows.reads[1], [(1, 9)]);
        assert!(rows_of(vec![seq(&[1], &[2]), seq(&[3], &[4])]).is_err());
        // The same text after the same prefix (a follow-up of two aspects): one branch.
        let rows = rows_of(vec![
            seq(&[5, 6], &[7, 8]),
            seq(&[5, 6], &[9]),
            seq(&[5, 6], &[7, 8]),
        ])
        .unwrap();
        assert_eq!(rows.row.branches, [vec![7, 8], vec![9]]);
        assert_eq!(rows.reads[2], rows.reads[0]);
    }
}
