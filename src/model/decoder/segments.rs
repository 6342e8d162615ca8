//! A decoding step's segments: the tokens of one row that attention treats on its own (its
//! trunk, or one branch), and the table of those attended in one launch on a GPU.

use crate::model::attention::decode_attention::{DECODE_QUERIES, StepSegment, segment_table};
use crate::model::attention::door::{CachedSegment, DecodeStep, OneLaunch};
use crate::model::decoder::batch::{Batch, Row};
use candle_core::{Device, Result};

/// Tokens of one row that attention treats on its own: the trunk, or one branch.
pub struct Segment {
    pub row: usize,
    /// Index within the row of its first token.
    pub start: usize,
    pub len: usize,
    /// Slots of its row before it, the header's included: its keys and values are written
    /// there (a branch's only while it is read).
    pub slot: usize,
    /// These tokens alone after `slot` slots of their row: their masks (causal and sliding
    /// window, by position). None: the segment is attended with the step's other short ones in
    /// one launch (`Segments::one_launch`).
    pub batch: Option<Batch>,
}

/// A step's segments, in row order, and the table of those attended in one launch on a GPU.
pub struct Segments {
    pub list: Vec<Segment>,
    pub one_launch: Option<OneLaunch>,
}

impl Segments {
    /// The step as attention reads it (`KeySource::Cached`).
    pub fn step(&self) -> DecodeStep<'_> {
        DecodeStep {
            segments: (self.list.iter())
                .map(|s| CachedSegment {
                    row: s.row,
                    start: s.start,
                    len: s.len,
                    slot: s.slot,
                    rows: s.batch.as_ref().map(|b| b as _),
                })
                .collect(),
            one_launch: self.one_launch.as_ref(),
        }
    }

    /// The segments of `rows` continuing from `next` (per row, its next position; `h` of them
    /// the header's); on a GPU whose kernels take this model (`decode_attention::takes`),
    /// those of at most `DECODE_QUERIES` tokens go in one launch.
    pub(crate) fn new(
        rows: &[Row],
        next: &[usize],
        h: usize,
        one_launch: bool,
        device: &Device,
    ) -> Result<Self> {
        let mut list = Vec::new();
        let mut short = Vec::new();
        let mut trunks = Vec::new();
        let mut add = |row: usize, start: usize, tokens: &[u32], slot: usize, trunk: bool| {
            let alone = !one_launch || tokens.len() > DECODE_QUERIES;
            if !alone {
                let s = StepSegment {
                    row,
                    start,
                    len: tokens.len(),
                    past: slot - h,
                };
                short.push(s);
                if trunk {
                    trunks.push(s);
                }
            }
            list.push(Segment {
                row,
                start,
                len: tokens.len(),
                slot,
                batch: match alone {
                    true => Some(Batch::new(&[tokens.to_vec()], slot, device)?),
                    false => None,
                },
            });
            Ok::<_, candle_core::Error>(())
        };
        for (r, (row, &next)) in rows.iter().zip(next).enumerate() {
            if !row.trunk.is_empty() {
                add(r, 0, &row.trunk, next, true)?;
            }
            // Every branch continues the trunk from the same slot: each overwrites the one
            // before it, once that one has been read; none outlives the step. (In one launch a
            // branch's own keys are read among the step's, never written.)
            let after = next + row.trunk.len();
            for (k, branch) in row.branches.iter().enumerate() {
                if !branch.is_empty() {
                    add(r, row.branch_start(k), branch, after, false)?;
                }
            }
        }
        let longest = |s: &[StepSegment]| s.iter().map(|s| s.len).max().unwrap_or(0);
        let one_launch = match short.is_empty() {
            true => None,
            false => Some(OneLaunch {
                segments: segment_table(&short, device)?,
                queries: longest(&short),
                trunks: match trunks.is_empty() {
                    true => None,
                    false => Some(segment_table(&trunks, device)?),
                },
                trunk_queries: longest(&trunks),
            }),
        };
        Ok(Segments { list, one_launch })
    }
}
