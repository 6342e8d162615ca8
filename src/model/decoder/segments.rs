//! A decoding step's segments (`attention::door::Segments`) made from its rows: the tokens of
//! one row that attention treats on its own (its trunk, or one branch), each with its own
//! masks, and the table of those attended in one launch on a GPU.

use crate::model::attention::decode_attention::{DECODE_QUERIES, StepSegment, segment_table};
use crate::model::attention::door::{OneLaunch, Segment, Segments};
use crate::model::decoder::batch::{Batch, Row};
use candle_core::{Device, Result};

impl Segments<Batch> {
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
                rows: match alone {
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
