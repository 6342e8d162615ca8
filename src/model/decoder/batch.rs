//! A batch of prompts of different lengths for one forward pass: right-padded token ids, per-row
//! positions, and the attention masks (causal, key padding, sliding window), all relative to an
//! optional shared prefix whose keys and values were computed once.
//!
//! A row can also be a small tree: a trunk followed by branches that each see the trunk and
//! themselves but not each other, with positions continuing from the end of the trunk. The judge
//! puts an item's prompt in the trunk and one branch per aspect, so every aspect shares one
//! prefill of the item.
//!
//! Masks are never held whole: the batch keeps, per key, its position and segment (rows × keys
//! numbers, on the device), and `mask` builds the block of queries attention is working on from
//! them, on the device. A host mask of rows × len × keys would take 4.3 GB for one 32k-token row.

use crate::model::attention::decode_attention::{StepSegment, segment_table};
use crate::model::attention::door::RowLayout;
use crate::model::attention::plan::MASKED;
use crate::model::backend::gpu_kernels::GpuKernels;
use crate::model::quant::{Plan, PrefillGemm, Products};
use candle_core::{DType, Device, Result, Tensor};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;

/// One row: a trunk and branches that continue it independently.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub trunk: Vec<u32>,
    pub branches: Vec<Vec<u32>>,
}

impl Row {
    pub fn plain(tokens: Vec<u32>) -> Self {
        Row {
            trunk: tokens,
            branches: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.trunk.len() + self.branches.iter().map(Vec::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Index within the row of the last token of the trunk, and of each branch.
    pub fn trunk_end(&self) -> Option<usize> {
        self.trunk.len().checked_sub(1)
    }

    pub fn branch_start(&self, branch: usize) -> usize {
        self.trunk.len() + self.branches[..branch].iter().map(Vec::len).sum::<usize>()
    }

    /// Index within the row of the trunk's last token, then of each branch's: the positions
    /// a decoding step reads (`Transformer::step`).
    pub fn ends(&self) -> impl Iterator<Item = usize> + '_ {
        let ends = (self.branches.iter().enumerate())
            .filter(|(_, branch)| !branch.is_empty())
            .map(|(k, branch)| self.branch_start(k) + branch.len() - 1);
        self.trunk_end().into_iter().chain(ends)
    }
}

pub struct Batch {
    /// (batch, len) token ids, right-padded with 0.
    pub ids: Tensor,
    /// (batch, len) absolute positions.
    pub positions: Tensor,
    /// Real length of each row (without padding).
    pub lens: Vec<usize>,
    /// Length of the shared prefix every row continues.
    pub prefix_len: usize,
    /// (batch, prefix + len) f32: every key's absolute position, then its segment (0: prefix or
    /// trunk, k: branch k). Queries are the last `len` keys.
    key_pos: Tensor,
    key_seg: Tensor,
    /// Masks built for this batch, kept across layers when all of them are small
    /// (`MASK_CACHE_BYTES`): attention asks for the same blocks in every layer.
    cache: RefCell<HashMap<MaskKey, Tensor>>,
    cacheable: bool,
    /// How its linear maps choose their kernels.
    pub products: Products,
    /// Per token of the batch (rows × len): the length of the trunk or branch it is part of,
    /// 0 for padding (`Plan::runs`).
    runs: Vec<u32>,
    /// `runs` with 0 for every token whose final hidden state is not read (`reading`).
    read_runs: Option<Vec<u32>>,
    /// No row has branches: every row is one sequence, its keys' positions their indices.
    plain: bool,
    /// Each row as one segment of `decode_attention` ((row, 0, len, 0) per row), made once.
    segment_table: std::cell::OnceCell<Tensor>,
}

/// Each row's tokens from its start position, right-padded to the longest row. Padding
/// continues the positions in the trunk: every padding key lies after every real query of its
/// row (so causality hides it), and every query sees at least itself (so no softmax row is
/// empty).
fn padded_tokens(rows: &[Row], start: impl Fn(usize) -> usize) -> Vec<Vec<Token>> {
    let len = rows.iter().map(Row::len).max().unwrap_or(0).max(1);
    rows.iter()
        .enumerate()
        .map(|(r, row)| {
            let mut tokens = row_tokens(row, start(r));
            tokens.extend((row.len()..len).map(|j| (0, start(r) + j, TRUNK)));
            tokens
        })
        .collect()
}

/// A row's tokens from position `start`: the trunk, then each branch after it.
fn row_tokens(row: &Row, start: usize) -> Vec<Token> {
    let mut tokens = Vec::with_capacity(row.len());
    tokens.extend(
        row.trunk
            .iter()
            .enumerate()
            .map(|(t, &id)| (id, start + t, TRUNK)),
    );
    let at = start + row.trunk.len();
    for (k, branch) in row.branches.iter().enumerate() {
        let seg = FIRST_BRANCH + k as f32;
        tokens.extend(branch.iter().enumerate().map(|(t, &id)| (id, at + t, seg)));
    }
    tokens
}

/// (window, first row, rows, first query, queries, keys).
type MaskKey = (Option<usize>, usize, usize, usize, usize, usize);

/// A batch keeps its masks across layers when one window's whole mask (rows × len × keys, f32)
/// fits here; larger batches (a 16k-token prompt: 1 GB) rebuild each block in every layer.
const MASK_CACHE_BYTES: usize = 64 << 20;

/// Segments: keys of segment 0 (the prefix, a row's trunk) are seen by every later query of
/// the row; keys of a branch only by that branch's queries.
const TRUNK: f32 = 0.0;
const FIRST_BRANCH: f32 = 1.0;

/// A batch's token: id, position, segment.
type Token = (u32, usize, f32);

impl Batch {
    /// Plain rows (no branches) continuing a shared prefix of `prefix_len` tokens.
    pub fn new(rows: &[Vec<u32>], prefix_len: usize, device: &Device) -> Result<Self> {
        let rows: Vec<Row> = rows.iter().map(|r| Row::plain(r.clone())).collect();
        Self::from_rows(&rows, prefix_len, device)
    }

    pub fn from_rows(rows: &[Row], prefix_len: usize, device: &Device) -> Result<Self> {
        let tokens = padded_tokens(rows, |_| prefix_len);
        let positions: Vec<f32> = (0..prefix_len).map(|k| k as f32).collect();
        let segments = vec![TRUNK; prefix_len];
        let shared = |_| (&positions[..], &segments[..]);
        Self::assemble(rows, tokens, shared, prefix_len, device)
    }

    /// A decoding step's tokens (`decode::KvCache`): each row from its next position, padded.
    /// Its masks are not used: each segment of a row attends with its own (`decode::Segment`).
    pub fn stepping(rows: &[Row], next: &[usize], device: &Device) -> Result<Self> {
        let none = |_| (&[][..], &[][..]);
        Self::assemble(rows, padded_tokens(rows, |r| next[r]), none, 0, device)
    }

    fn assemble<'k>(
        rows: &[Row],
        tokens: Vec<Vec<Token>>,
        prefix_keys: impl Fn(usize) -> (&'k [f32], &'k [f32]),
        prefix_len: usize,
        device: &Device,
    ) -> Result<Self> {
        let b = rows.len();
        let len = tokens.first().map_or(1, Vec::len);
        let keys = prefix_len + len;
        let mut ids = vec![0u32; b * len];
        let mut pos = vec![0u32; b * len];
        let mut key_pos = vec![0f32; b * keys];
        let mut key_seg = vec![0f32; b * keys];
        let mut runs = vec![0u32; b * len];
        for (r, row) in rows.iter().enumerate() {
            let parts = std::iter::once(&row.trunk).chain(&row.branches);
            let mut at = r * len;
            for part in parts {
                runs[at..at + part.len()].fill(part.len() as u32);
                at += part.len();
            }
        }
        for (r, tokens) in tokens.into_iter().enumerate() {
            let (p, s) = prefix_keys(r);
            key_pos[r * keys..r * keys + prefix_len].copy_from_slice(p);
            key_seg[r * keys..r * keys + prefix_len].copy_from_slice(s);
            for (i, (id, p, seg)) in tokens.into_iter().enumerate() {
                ids[r * len + i] = id;
                pos[r * len + i] = p as u32;
                key_pos[r * keys + prefix_len + i] = p as f32;
                key_seg[r * keys + prefix_len + i] = seg;
            }
        }
        Ok(Batch {
            ids: Tensor::from_vec(ids, (b, len), device)?,
            positions: Tensor::from_vec(pos, (b, len), device)?,
            lens: rows.iter().map(Row::len).collect(),
            prefix_len,
            key_pos: Tensor::from_vec(key_pos, (b, keys), device)?,
            key_seg: Tensor::from_vec(key_seg, (b, keys), device)?,
            cache: RefCell::new(HashMap::new()),
            cacheable: b * len * keys * 4 <= MASK_CACHE_BYTES,
            products: Products::ByRowCount,
            runs,
            read_runs: None,
            plain: rows.iter().all(|r| r.branches.is_empty()),
            segment_table: std::cell::OnceCell::new(),
        })
    }

    /// How the batch's linear maps choose their kernels; `gemm`: the model's prompt products,
    /// `gpu_kernels`: its CUDA kernels.
    pub fn plan(&self, gemm: PrefillGemm, gpu_kernels: GpuKernels) -> Plan<'_> {
        Plan {
            products: self.products,
            runs: Some(&self.runs),
            gemm,
            gpu_kernels,
        }
    }

    /// The same batch, its products through `products` (decoding steps: `RowWise`).
    pub fn with_products(mut self, products: Products) -> Self {
        self.products = products;
        self
    }

    /// The same batch, of which only the final hidden states at `at` ((row, position within
    /// the row) pairs) will be read: the last layer computes every token's keys and values, but
    /// its query, output and MLP products only for these tokens (`last_plan`); the others'
    /// final states are left unfinished. A judge reads a few positions of each prompt, and a
    /// header none: the last layer's remaining products are 3–4% of a prefill.
    pub fn reading(mut self, at: &[(usize, usize)]) -> Result<Self> {
        let (b, len) = self.ids.dims2()?;
        let mut runs = vec![0u32; self.runs.len()];
        for &(r, p) in at {
            let i = r * len + p;
            if r >= b || p >= len || self.runs[i] == 0 {
                candle_core::bail!("reading ({r}, {p}): not a token of a {b} × {len} batch");
            }
            runs[i] = self.runs[i];
        }
        self.read_runs = Some(runs);
        Ok(self)
    }

    /// The plan of the last layer's products after its keys and values: only the rows read
    /// (`reading`), each with its own run, so that a row read gets the kernel and the bits it
    /// gets when every row is computed.
    pub fn last_plan(&self, gemm: PrefillGemm, gpu_kernels: GpuKernels) -> Plan<'_> {
        Plan {
            products: self.products,
            runs: Some(self.read_runs.as_deref().unwrap_or(&self.runs)),
            gemm,
            gpu_kernels,
        }
    }

    fn build_mask(
        &self,
        window: Option<usize>,
        rows: Range<usize>,
        queries: Range<usize>,
        keys: usize,
    ) -> Result<Tensor> {
        let (nr, nq) = (rows.len(), queries.len());
        let at =
            |t: &Tensor, from: usize, n: usize| t.narrow(0, rows.start, nr)?.narrow(1, from, n);
        let q_from = self.prefix_len + queries.start;
        let (q_pos, q_seg) = (
            at(&self.key_pos, q_from, nq)?.unsqueeze(2)?.contiguous()?,
            at(&self.key_seg, q_from, nq)?.unsqueeze(2)?.contiguous()?,
        );
        // The keys side materialised at the block's shape (row copies), so that every op below
        // has a contiguous left side: candle's CPU ops fall back to per-element indexing when
        // both sides are broadcast (a 16k-token prompt took twice as long that way).
        let full = |t: &Tensor| {
            at(t, 0, keys)?
                .unsqueeze(1)?
                .broadcast_as((nr, nq, keys))?
                .contiguous()
        };
        let (k_pos, k_seg) = (full(&self.key_pos)?, full(&self.key_seg)?);
        // behind = p_k − p_q: seen when ≤ 0 (not after the query) and > −window.
        let behind = k_pos.broadcast_sub(&q_pos)?;
        let mut seen = behind.le(0f64)?;
        if let Some(w) = window {
            seen = (seen * behind.gt(-(w as f64))?)?;
        }
        let other_branch = (k_seg.broadcast_sub(&q_seg)? * &k_seg)?;
        let seen = (seen * other_branch.eq(0f64)?)?;
        // seen · (−MASKED) + MASKED: exactly 0 where seen, MASKED elsewhere.
        seen.to_dtype(DType::F32)?
            .affine(-(MASKED as f64), MASKED as f64)?
            .unsqueeze(1)
    }
}

impl RowLayout for Batch {
    fn prefix_len(&self) -> usize {
        self.prefix_len
    }

    fn lens(&self) -> &[usize] {
        &self.lens
    }

    /// Whether every row is one sequence (no branches): its queries and keys at positions equal
    /// to their indices after the prefix.
    fn is_plain(&self) -> bool {
        self.plain
    }

    /// Every row as one segment of a step's attention (`decode_attention`): its `len` queries
    /// after the prefix alone, as (rows, 4) u32 on the batch's device. Made once per batch.
    fn segment_table(&self) -> Result<&Tensor> {
        if let Some(t) = self.segment_table.get() {
            return Ok(t);
        }
        let (rows, len) = self.ids.dims2()?;
        let segments: Vec<StepSegment> = (0..rows)
            .map(|row| StepSegment {
                row,
                start: 0,
                len,
                past: 0,
            })
            .collect();
        let table = segment_table(&segments, self.ids.device())?;
        Ok(self.segment_table.get_or_init(|| table))
    }

    /// (rows, prefix + len) f32: every key's position and segment, for a kernel that applies
    /// `mask`'s rule itself (`fused_attention`).
    fn key_positions(&self) -> (&Tensor, &Tensor) {
        (&self.key_pos, &self.key_seg)
    }

    /// The additive f32 mask (rows, 1, queries, keys) of the batch rows `rows`, for the queries
    /// `queries` (indices within the rows) against the first `keys` keys (prefix included),
    /// for layers with sliding window `window` (None: full attention). Built on the device.
    ///
    /// A query sees a key when the key is not after it, within the window, and in the prefix,
    /// the trunk or the query's own branch: with positions p and segments s,
    /// `0 ≤ p_q − p_k < window` and `s_k · (s_k − s_q) = 0`.
    fn mask(
        &self,
        window: Option<usize>,
        rows: Range<usize>,
        queries: Range<usize>,
        keys: usize,
    ) -> Result<Tensor> {
        let key = (
            window,
            rows.start,
            rows.len(),
            queries.start,
            queries.len(),
            keys,
        );
        if let Some(m) = self.cache.borrow().get(&key) {
            return Ok(m.clone());
        }
        let mask = self.build_mask(window, rows, queries, keys)?;
        if self.cacheable {
            self.cache.borrow_mut().insert(key, mask.clone());
        }
        Ok(mask)
    }
}

/// Group items into batches whose padded size (rows × longest row) stays within `budget`
/// tokens; longest first, so rows of a batch have similar lengths. Every batch holds at least
/// one item. The budget bounds activations (tokens × hidden, tokens × MLP width); attention
/// bounds its own scores (`transformer::ATTENTION_ELEMENTS`), so long rows need no smaller one.
pub fn plan_batches(lens: &[usize], budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by(|&a, &b| lens[b].cmp(&lens[a]).then(a.cmp(&b)));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in order {
        let longest = current.first().map_or(lens[i], |&f| lens[f]);
        if !current.is_empty() && (current.len() + 1) * longest > budget {
            batches.push(std::mem::take(&mut current));
        }
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule written out per element, on the host: the reference the masks are checked against.
    fn reference(rows: &[Row], prefix: usize, window: Option<usize>) -> Vec<f32> {
        let len = rows.iter().map(Row::len).max().unwrap_or(0).max(1);
        let keys = prefix + len;
        let mut m = vec![MASKED; rows.len() * len * keys];
        for (r, row) in rows.iter().enumerate() {
            let mut pos = Vec::new();
            let mut seg = Vec::new();
            pos.extend((0..row.trunk.len()).map(|t| prefix + t));
            seg.extend(std::iter::repeat_n(0, row.trunk.len()));
            for (k, br) in row.branches.iter().enumerate() {
                pos.extend((0..br.len()).map(|t| prefix + row.trunk.len() + t));
                seg.extend(std::iter::repeat_n(k + 1, br.len()));
            }
            for i in 0..len {
                let out = &mut m[(r * len + i) * keys..(r * len + i + 1) * keys];
                let q_pos = pos.get(i).copied().unwrap_or(prefix + i);
                let within = |k_pos: usize| window.is_none_or(|w| q_pos - k_pos < w);
                for (k, slot) in out.iter_mut().enumerate().take(prefix) {
                    if k <= q_pos && within(k) {
                        *slot = 0.0;
                    }
                }
                if i >= row.len() {
                    // A padding query: only finiteness matters; it sees at least itself.
                    out[prefix + i] = 0.0;
                    continue;
                }
                for j in 0..=i {
                    if (seg[j] == 0 || seg[j] == seg[i]) && within(pos[j]) {
                        out[prefix + j] = 0.0;
                    }
                }
            }
        }
        m
    }

    #[test]
    fn device_masks_follow_the_rule_for_trees_windows_and_padding() {
        let rows = vec![
            Row {
                trunk: vec![1, 2, 3],
                branches: vec![vec![4, 5], vec![6], vec![7, 8, 9]],
            },
            Row::plain(vec![1, 2]),
            Row {
                trunk: vec![],
                branches: vec![vec![3, 4]],
            },
            Row::plain((0..9).collect()),
        ];
        for prefix in [0, 3] {
            let batch = Batch::from_rows(&rows, prefix, &Device::Cpu).unwrap();
            let len = 9;
            for window in [None, Some(2), Some(5)] {
                let want = reference(&rows, prefix, window);
                let keys = prefix + len;
                // Whole, and in blocks of rows × queries × leading keys, as attention asks.
                for (r0, nr, q0, nq) in [(0, 4, 0, len), (1, 2, 2, 4), (3, 1, 7, 2)] {
                    let k = prefix + q0 + nq;
                    let got = batch.mask(window, r0..r0 + nr, q0..q0 + nq, k).unwrap();
                    assert_eq!(got.dims(), &[nr, 1, nq, k]);
                    let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
                    for r in 0..nr {
                        for q in 0..nq {
                            let got = &got[(r * nq + q) * k..][..k];
                            if q0 + q >= rows[r0 + r].len() {
                                // A padding query's output is never read: it only has to see
                                // some key, so that its softmax stays finite.
                                assert!(got.contains(&0.0));
                                continue;
                            }
                            let expect = &want[((r0 + r) * len + q0 + q) * keys..][..k];
                            assert_eq!(
                                got,
                                expect,
                                "prefix {prefix} window {window:?} row {} query {}",
                                r0 + r,
                                q0 + q
                            );
                        }
                    }
                }
            }
        }
    }
}
