//! Attention's one door: a layer's queries, keys and values, where the keys come from (the
//! batch alone, after a header every row continues, or a decoding cache), and one parameter
//! value; the kernel that fits is chosen here — the fused op, decoding attention on a GPU, the
//! few-query kernels, prefill blocks on AVX-512, or blocks of scores through candle's ops.

use super::decode_attention::{self, AppendKeys, DECODE_QUERIES, DecodeAttention};
use super::masked_softmax::masked_softmax;
use super::plan::{AttentionPlan, LayerKv, ScoreScaling};
use super::{few_queries, fused_attention, prefill_attention};
use crate::model::backend::gpu_kernels::GpuKernels;
use crate::model::backend::stage_times;
use candle_core::{Result, Tensor};
use std::ops::Range;

/// What attention needs to know of a batch's rows (the decoder's `Batch`): the shared prefix,
/// each row's real length, and its masks.
pub trait RowLayout {
    /// Keys of a prefix every row continues, before each row's own.
    fn prefix_len(&self) -> usize;
    /// Each row's real length (without padding).
    fn lens(&self) -> &[usize];
    /// Every row is one sequence (no branches).
    fn is_plain(&self) -> bool;
    /// The additive f32 mask (rows, 1, queries, keys) of `rows`, `queries` against the first
    /// `keys` keys, for a sliding `window` (None: full attention).
    fn mask(
        &self,
        window: Option<usize>,
        rows: Range<usize>,
        queries: Range<usize>,
        keys: usize,
    ) -> Result<Tensor>;
    /// (rows, prefix + len) f32: every key's position and segment, for a kernel that applies
    /// the mask's rule itself.
    fn key_positions(&self) -> (&Tensor, &Tensor);
    /// Every row as one segment of decoding attention.
    fn segment_table(&self) -> Result<&Tensor>;
}

/// A model's switches of attention's kernels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionKernels {
    /// Attention of this many queries a row or more through `fused_attention`; None: never.
    pub fused_from_queries: Option<usize>,
    /// The most scores (rows × heads × queries × keys) one block of scores may hold.
    pub score_limit: usize,
    /// Whose kernels run on CUDA.
    pub gpu_kernels: GpuKernels,
}

/// Everything attention is told besides q, k, v and their source.
#[derive(Clone, Copy)]
pub struct AttentionParams<'a> {
    /// The batch's rows.
    pub rows: &'a dyn RowLayout,
    /// The layer's sliding window (None: full attention).
    pub window: Option<usize>,
    pub scaling: ScoreScaling,
    pub kernels: AttentionKernels,
}

/// Where the keys and values besides k and v come from; `L`: the layout of a decoding step's
/// segments (the decoder's `Batch`).
pub enum KeySource<'a, L> {
    /// None: k and v are all (a prompt from its start).
    Fresh,
    /// A header every row continues ((1, kv_heads, h, d)), then k and v.
    Shared(&'a LayerKv),
    /// A decoding step: k and v are written into each row's cache slots, then attended over
    /// the header and the slots before them.
    Cached {
        cache: &'a LayerKv,
        header: Option<&'a LayerKv>,
        segments: &'a Segments<L>,
    },
}

/// Tokens of one row that attention treats on its own: the trunk, or one branch.
pub struct Segment<L> {
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
    pub rows: Option<L>,
}

/// A decoding step's segments, in row order, and the table of those attended in one launch on
/// a GPU.
pub struct Segments<L> {
    pub list: Vec<Segment<L>>,
    pub one_launch: Option<OneLaunch>,
}

/// The segments of a step attended by `decode_attention` in one launch: their table, and that
/// of the trunks among them, whose keys and values are written into the cache first.
pub struct OneLaunch {
    pub segments: Tensor,
    /// Queries of the longest segment.
    pub queries: usize,
    /// None when no trunk is short (a zero-length buffer is an error on CUDA).
    pub trunks: Option<Tensor>,
    pub trunk_queries: usize,
}

/// softmax(q·kᵀ·scale + mask)·v for q (b, heads, len, d) over the keys of `source` and k, v
/// (b, kv_heads, keys, d): (b, heads, len, d).
pub fn run_attention<L: RowLayout>(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    source: KeySource<'_, L>,
    p: &AttentionParams<'_>,
) -> Result<Tensor> {
    match source {
        KeySource::Fresh => attend(q, None, k, v, p),
        KeySource::Shared(header) => attend(q, Some(header), k, v, p),
        KeySource::Cached {
            cache,
            header,
            segments,
        } => attend_segments(q, k, v, (cache, header), segments, p),
    }
}

/// Attention of a decoding step on a cache: each segment (a row's trunk, or one of its
/// branches) writes its keys and values into its row at its slot and attends, on its own,
/// over the header's keys (kept once) and the slots of its row before it — the arithmetic of
/// that row decoded alone, whatever else the batch holds. Padding queries get zeros. On a GPU
/// the segments of a few tokens do so all in one launch (`decode_attention`), after their
/// trunks are written.
fn attend_segments<L: RowLayout>(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    ((ck, cv), header): (&LayerKv, Option<&LayerKv>),
    step: &Segments<L>,
    p: &AttentionParams<'_>,
) -> Result<Tensor> {
    let (b, heads, len, d) = q.dims4()?;
    // Trunks first: a longer branch below, and the launch's own branches, read them.
    if let Some((one, trunks)) =
        (step.one_launch.as_ref()).and_then(|one| one.trunks.as_ref().map(|t| (one, t)))
    {
        let append = AppendKeys {
            queries: one.trunk_queries,
        };
        ck.inplace_op3(k, trunks, &append)?;
        cv.inplace_op3(v, trunks, &append)?;
    }
    let alone: Vec<(&Segment<L>, &dyn RowLayout)> = (step.list.iter())
        .filter_map(|s| s.rows.as_ref().map(|rows| (s, rows as &dyn RowLayout)))
        .collect();
    let attended = attend_alone(q, k, v, (ck, cv), header, &alone, p)?;
    let mut parts: Vec<Vec<Tensor>> = vec![Vec::new(); b];
    let mut filled = vec![0; b];
    for (&(s, _), out) in alone.iter().zip(attended) {
        if filled[s.row] < s.start {
            // A segment of the launch before it: zeros here.
            let pad = (1, heads, s.start - filled[s.row], d);
            parts[s.row].push(Tensor::zeros(pad, q.dtype(), q.device())?);
        }
        parts[s.row].push(out);
        filled[s.row] = s.start + s.len;
    }
    let launched = match &step.one_launch {
        Some(one) => Some(
            DecodeAttention {
                header: header.cloned(),
                cache: Some((ck.clone(), cv.clone())),
                segments: one.segments.clone(),
                queries: one.queries,
                window: p.window,
                scale: p.scaling.scale as f32,
                softcap: p.scaling.softcap.map(|c| c as f32),
            }
            .apply(q, k, v)?,
        ),
        None => None,
    };
    if let (true, Some(launched)) = (alone.is_empty(), &launched) {
        return Ok(launched.clone());
    }
    let rows = parts
        .into_iter()
        .zip(filled)
        .map(|(mut row, filled)| {
            if filled < len {
                let pad = (1, heads, len - filled, d);
                row.push(Tensor::zeros(pad, q.dtype(), q.device())?);
            }
            cat_or_single(row, 2)
        })
        .collect::<Result<Vec<_>>>()?;
    let out = cat_or_single(rows, 0)?;
    // Each is zero where the other has queries: the sum is exact.
    match launched {
        Some(l) => out + l,
        None => Ok(out),
    }
}

/// The attention of the segments attended on their own (`alone`, in the step's order), each
/// having written its keys and values into its row's slots first. Segments come in waves —
/// every row's first, then every row's second… — since a row's branches write the same slots
/// one after another; within a wave, those of a few queries on the CPU attend together
/// (`few_queries::attend_sequences`: the header read once for all of them).
fn attend_alone<L>(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    (ck, cv): (&Tensor, &Tensor),
    header: Option<&LayerKv>,
    alone: &[(&Segment<L>, &dyn RowLayout)],
    p: &AttentionParams<'_>,
) -> Result<Vec<Tensor>> {
    let h = match header {
        Some((hk, _)) => hk.dim(2)?,
        None => 0,
    };
    let mut seen = vec![0usize; q.dim(0)?];
    let waves: Vec<usize> = (alone.iter())
        .map(|(s, _)| {
            seen[s.row] += 1;
            seen[s.row] - 1
        })
        .collect();
    let mut outs: Vec<Option<Tensor>> = vec![None; alone.len()];
    for wave in 0..seen.iter().copied().max().unwrap_or(0) {
        // (index in alone, q, keys, values, mask, keys read).
        let mut few = Vec::new();
        for (i, &(s, rows)) in alone.iter().enumerate() {
            if waves[i] != wave {
                continue;
            }
            let take = |t: &Tensor| {
                t.narrow(0, s.row, 1)?
                    .narrow(2, s.start, s.len)?
                    .contiguous()
            };
            // The header's keys are not in the row: its slots start after them.
            let slot = s.slot - h;
            let (row_k, row_v) = (ck.narrow(0, s.row, 1)?, cv.narrow(0, s.row, 1)?);
            stage_times::time(q.device(), "attention: cache writes", || {
                row_k.slice_set(&take(k)?, 2, slot)?;
                row_v.slice_set(&take(v)?, 2, slot)
            })?;
            let keys = slot + s.len;
            let (row_k, row_v) = (row_k.narrow(2, 0, keys)?, row_v.narrow(2, 0, keys)?);
            let q = take(q)?;
            let own = AttentionParams { rows, ..*p };
            if attends_few(&q, &own)? {
                let all = rows.prefix_len() + s.len;
                let mask = rows.mask(p.window, 0..1, 0..s.len, all)?;
                few.push((i, q, row_k, row_v, mask, all));
            } else {
                outs[i] = Some(attend(&q, header, &row_k, &row_v, &own)?);
            }
        }
        let sequences: Vec<few_queries::Sequence> = (few.iter())
            .map(|(_, q, k, v, mask, keys)| few_queries::Sequence {
                q,
                k,
                v,
                mask,
                keys: *keys,
            })
            .collect();
        let attended = stage_times::time(q.device(), "attention: few queries", || {
            few_queries::attend_sequences(header, &sequences, p.scaling)
        })?;
        for ((i, ..), out) in few.iter().zip(attended) {
            outs[*i] = Some(out);
        }
    }
    outs.into_iter()
        .map(|o| o.ok_or_else(|| candle_core::Error::Msg("a segment left unattended".into())))
        .collect()
}

/// Whether attention of q (a few queries a row on the CPU, not fused) runs in `few_queries`.
fn attends_few(q: &Tensor, p: &AttentionParams<'_>) -> Result<bool> {
    Ok(!fuses(q, p)? && few_queries::takes(q, q.dim(2)?))
}

/// Whether attention of q goes through `fused_attention`: enough queries a row, and its CPU
/// body (tests), or on a GPU its kernels taking q's dtype and head dim.
fn fuses(q: &Tensor, p: &AttentionParams<'_>) -> Result<bool> {
    let (dtype, len, d) = (q.dtype(), q.dim(2)?, q.dim(3)?);
    Ok(p.kernels.fused_from_queries.is_some_and(|from| len >= from)
        && (q.device().is_cpu() || fused_attention::cuda_takes(dtype, d)))
}

/// softmax(q·kᵀ·scale + mask)·v for q (b, heads, len, d) and the keys and values of `shared`
/// ((1, kv_heads, h, d): a prefix every row continues) followed by k, v (b, kv_heads, keys,
/// d), where the last `len` keys belong to the queries (the rest, with the shared ones, is the
/// batch's prefix).
///
/// Grouped-query attention without copying k and v: the heads that share a kv head are laid
/// out one after another, so q viewed as (b, kv_heads, group·len, d) multiplies k directly.
/// Scores are computed for a block of rows × queries at a time (`AttentionPlan`), masked and
/// normalised in f32. A few queries in f32 on the CPU (decoding steps) go to `few_queries`,
/// more (a prompt's prefill) with AVX-512 to `prefill_attention`; both read the keys and values
/// in place.
fn attend(
    q: &Tensor,
    shared: Option<&LayerKv>,
    k: &Tensor,
    v: &Tensor,
    p: &AttentionParams<'_>,
) -> Result<Tensor> {
    let (b, heads, len, d) = q.dims4()?;
    let (batch, window, scaling) = (p.rows, p.window, p.scaling);
    let prefix = batch.prefix_len();
    if fuses(q, p)? {
        let (key_pos, key_seg) = batch.key_positions();
        let op = fused_attention::FusedAttention {
            positions: Some((key_pos.clone(), key_seg.clone())),
            row_span: None,
            shared: match shared {
                Some((k, v)) => Some((k.contiguous()?, v.contiguous()?)),
                None => None,
            },
            prefix,
            window,
            scale: scaling.scale as f32,
            softcap: scaling.softcap.map(|c| c as f32),
        };
        return op.apply(q, k, v);
    }
    let own_keys = k.dim(2)? == len && shared.map_or(0, |(sk, _)| sk.dim(2).unwrap_or(0)) == prefix;
    if len <= DECODE_QUERIES
        && own_keys
        && batch.is_plain()
        && decode_attention::takes(q, p.kernels.gpu_kernels)
    {
        // A few queries a row on a GPU (`extend`'s steps): as a decoding step's segments.
        return DecodeAttention {
            header: shared.cloned(),
            cache: None,
            segments: batch.segment_table()?.clone(),
            queries: len,
            window,
            scale: scaling.scale as f32,
            softcap: scaling.softcap.map(|c| c as f32),
        }
        .apply(q, k, v);
    }
    if attends_few(q, p)? {
        let mask = batch.mask(window, 0..b, 0..len, prefix + len)?;
        let keys = prefix + len;
        return few_queries::attend(q, shared, k, v, &mask, keys, scaling);
    }
    let limit = p.kernels.score_limit;
    let plan = AttentionPlan::new(b, heads, len, prefix + len, limit)?;
    if prefill_attention::takes(q, len) {
        let mask = |rows, queries, keys| batch.mask(window, rows, queries, keys);
        return prefill_attention::attend(q, shared, (k, v), prefix, &plan, mask, scaling);
    }
    // One row at a time, over its own queries and keys only (no padding): every product's
    // shape — and so gemm's blocking of its sums — is the row's own, so a row gets the same
    // bits alone as in a batch. The shared keys and values go before the row's own.
    let kv = k.dim(1)?;
    let group = heads / kv;
    // k's keys before the queries' own (a cache's), part of the prefix like `shared`'s.
    let before = k.dim(2)?.saturating_sub(len);
    let mut row_outs = Vec::with_capacity(b);
    for r in 0..b {
        let real = batch.lens().get(r).copied().unwrap_or(len).min(len);
        if real == 0 {
            row_outs.push(Tensor::zeros((1, heads, len, d), q.dtype(), q.device())?);
            continue;
        }
        let q = q.narrow(0, r, 1)?.narrow(2, 0, real)?;
        let (k, v) = after_shared(
            shared,
            &k.narrow(0, r, 1)?.narrow(2, 0, before + real)?,
            &v.narrow(0, r, 1)?.narrow(2, 0, before + real)?,
            1,
        )?;
        let plan = AttentionPlan::new(1, heads, real, prefix + real, limit)?;
        let mut outs = Vec::with_capacity(real.div_ceil(plan.queries));
        for queries in plan.query_blocks() {
            let n = queries.len();
            // Keys after the block's last query are masked for all of it: never computed.
            let keys = prefix + queries.end;
            let kb = k.narrow(2, 0, keys)?;
            // A view: a decoding cache's values are not copied for each step.
            let vb = v.narrow(2, 0, keys)?;
            let scores = stage_times::time(q.device(), "attention: scores", || {
                let qb =
                    q.narrow(2, queries.start, n)?
                        .contiguous()?
                        .reshape((1, kv, group * n, d))?;
                let scores = (qb * scaling.scale)?.matmul(&kb.t()?)?;
                match scaling.softcap {
                    Some(cap) => (scores / cap)?.tanh()? * cap,
                    None => Ok(scores),
                }
            })?;
            let mask = stage_times::time(q.device(), "attention: mask", || {
                batch.mask(window, r..r + 1, queries.clone(), keys)
            })?;
            let probs = stage_times::time(q.device(), "attention: softmax", || {
                let scores = scores.reshape((1, kv, group, n, keys))?;
                masked_softmax(scores, &mask)?.to_dtype(v.dtype())
            })?;
            let out = stage_times::time(q.device(), "attention: values", || {
                probs.reshape((1, kv, group * n, keys))?.matmul(&vb)
            })?;
            outs.push(out.reshape((1, heads, n, d))?);
        }
        if real < len {
            outs.push(Tensor::zeros(
                (1, heads, len - real, d),
                q.dtype(),
                q.device(),
            )?);
        }
        row_outs.push(cat_or_single(outs, 2)?);
    }
    cat_or_single(row_outs, 0)
}

/// k, v (b, kv_heads, keys, d) after the keys and values of a prefix every row continues
/// ((1, kv_heads, p, d), copied for every row): (b, kv_heads, p + keys, d).
fn after_shared(
    shared: Option<&LayerKv>,
    k: &Tensor,
    v: &Tensor,
    b: usize,
) -> Result<(Tensor, Tensor)> {
    Ok(match shared {
        Some((pk, pv)) => {
            let expand = |t: &Tensor| -> Result<Tensor> {
                let (_, n, p, d) = t.dims4()?;
                t.broadcast_as((b, n, p, d))?.contiguous()
            };
            (
                Tensor::cat(&[&expand(pk)?, k], 2)?,
                Tensor::cat(&[&expand(pv)?, v], 2)?,
            )
        }
        None => (k.clone(), v.clone()),
    })
}

fn cat_or_single(mut parts: Vec<Tensor>, dim: usize) -> Result<Tensor> {
    if parts.len() == 1 {
        return Ok(parts.remove(0));
    }
    Tensor::cat(&parts, dim)
}
