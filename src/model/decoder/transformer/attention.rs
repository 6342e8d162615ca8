//! The decoder's attention: each layer's queries, keys and values through the attention that
//! fits the batch — blocks of masked scores for prompts, the few-query kernels, the fused op, or
//! decoding attention over each row's own cache slots.

use super::{Attention, LayerPast, Transformer};
use crate::model::attention::decode_attention::{
    self, AppendKeys, DECODE_QUERIES, DecodeAttention,
};
use crate::model::attention::masked_softmax::masked_softmax;
use crate::model::attention::plan::{AttentionPlan, LayerKv, ScoreScaling};
use crate::model::attention::prefill_attention;
use crate::model::attention::{few_queries, fused_attention};
use crate::model::backend::stage_times;
use crate::model::decoder::batch::Batch;
use crate::model::decoder::segments::{Segment, Segments};
use crate::model::quant::matrix::Plan;
use candle_core::{Result, Tensor};

impl Transformer {
    /// `out_plan`: the plan of the query and output products (the batch's, or in the last
    /// layer only the rows read); keys and values are computed for every token, and returned
    /// where `keep`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &self,
        a: &Attention,
        x: Tensor,
        (cos, sin): (&Tensor, &Tensor),
        batch: &Batch,
        window: Option<usize>,
        past: LayerPast,
        (out_plan, keep): (Plan, bool),
    ) -> Result<(Tensor, Option<LayerKv>)> {
        let cfg = &self.cfg;
        let (b, len, _) = x.dims3()?;
        let heads = |t: Tensor, n: usize| {
            stage_times::time(&self.device, "attention: head-major copies", || {
                t.reshape((b, len, n, cfg.head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            })
        };
        let plan = batch.plan(self.prefill_gemm, self.gpu_kernels);
        let mut q = heads(a.q.forward(&x, out_plan)?, cfg.num_heads)?;
        let mut k = heads(a.k.forward(&x, plan)?, cfg.num_kv_heads)?;
        let v = heads(a.v.forward(&x, plan)?, cfg.num_kv_heads)?;
        drop(x);
        if let (Some(qn), Some(kn)) = (&a.q_norm, &a.k_norm) {
            q = qn.forward(&q)?;
            k = kn.forward(&k)?;
        }
        let (q, k) = stage_times::time(&self.device, "rope", || {
            let rope = |t: Tensor| candle_nn::rotary_emb::rope(&t.contiguous()?, cos, sin);
            Ok((rope(q)?, rope(k)?))
        })?;
        let out = stage_times::time(&self.device, "attention (rest)", || match past {
            LayerPast::Shared(header) => self.attend(&q, Some(header), &k, &v, batch, window),
            LayerPast::Cached(cache, header, segments) => {
                self.attend_segments(&q, &k, &v, (cache, header), segments, window)
            }
            LayerPast::Fresh => self.attend(&q, None, &k, &v, batch, window),
        })?;
        drop(q);
        let kv = keep.then_some((k, v));
        let out = stage_times::time(&self.device, "attention: head-major copies", move || {
            out.transpose(1, 2)?
                .reshape((b, len, cfg.num_heads * cfg.head_dim))
        })?;
        Ok((a.o.forward(&out, out_plan)?, kv))
    }

    /// Attention of a decoding step on a cache: each segment (a row's trunk, or one of its
    /// branches) writes its keys and values into its row at its slot and attends, on its own,
    /// over the header's keys (`cache.1`, kept once) and the slots of its row before it — the
    /// arithmetic of that row decoded alone through `extend`, whatever else the batch holds
    /// (`decode` says why that matters). Padding queries get zeros. On a GPU the segments of a
    /// few tokens do so all in one launch (`decode_attention`), after their trunks are written.
    fn attend_segments(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        ((ck, cv), header): (&LayerKv, Option<&LayerKv>),
        segments: &Segments,
        window: Option<usize>,
    ) -> Result<Tensor> {
        let (b, heads, len, d) = q.dims4()?;
        // Trunks first: a longer branch below, and the launch's own branches, read them.
        if let Some((one, trunks)) =
            (segments.one_launch.as_ref()).and_then(|one| one.trunks.as_ref().map(|t| (one, t)))
        {
            let append = AppendKeys {
                queries: one.trunk_queries,
            };
            ck.inplace_op3(k, trunks, &append)?;
            cv.inplace_op3(v, trunks, &append)?;
        }
        let alone: Vec<_> = (segments.list.iter())
            .filter_map(|s| s.batch.as_ref().map(|batch| (s, batch)))
            .collect();
        let attended = self.attend_alone(q, k, v, (ck, cv), header, &alone, window)?;
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
        let launched = match &segments.one_launch {
            Some(one) => Some(
                DecodeAttention {
                    header: header.cloned(),
                    cache: Some((ck.clone(), cv.clone())),
                    segments: one.segments.clone(),
                    queries: one.queries,
                    window,
                    scale: self.cfg.attn_scale as f32,
                    softcap: self.cfg.attn_softcap.map(|c| c as f32),
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

    /// The attention of the segments attended on their own (`alone`, in the step's order),
    /// each having written its keys and values into its row's slots first. Segments come in
    /// waves — every row's first, then every row's second… — since a row's branches write the
    /// same slots one after another; within a wave, those of a few queries on the CPU attend
    /// together (`few_queries::attend_sequences`: the header read once for all of them).
    #[allow(clippy::too_many_arguments)]
    fn attend_alone(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        (ck, cv): (&Tensor, &Tensor),
        header: Option<&LayerKv>,
        alone: &[(&Segment, &Batch)],
        window: Option<usize>,
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
            for (i, &(s, batch)) in alone.iter().enumerate() {
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
                stage_times::time(&self.device, "attention: cache writes", || {
                    row_k.slice_set(&take(k)?, 2, slot)?;
                    row_v.slice_set(&take(v)?, 2, slot)
                })?;
                let keys = slot + s.len;
                let (row_k, row_v) = (row_k.narrow(2, 0, keys)?, row_v.narrow(2, 0, keys)?);
                let q = take(q)?;
                if self.attends_few(&q)? {
                    let all = batch.prefix_len + s.len;
                    let mask = batch.mask(window, 0..1, 0..s.len, all)?;
                    few.push((i, q, row_k, row_v, mask, all));
                } else {
                    outs[i] = Some(self.attend(&q, header, &row_k, &row_v, batch, window)?);
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
            let scaling = self.score_scaling();
            let attended = stage_times::time(&self.device, "attention: few queries", || {
                few_queries::attend_sequences(header, &sequences, scaling)
            })?;
            for ((i, ..), out) in few.iter().zip(attended) {
                outs[*i] = Some(out);
            }
        }
        outs.into_iter()
            .map(|o| o.ok_or_else(|| candle_core::Error::Msg("a segment left unattended".into())))
            .collect()
    }

    /// How this model's attention scores are formed: its scale and soft cap.
    fn score_scaling(&self) -> ScoreScaling {
        ScoreScaling {
            scale: self.cfg.attn_scale,
            softcap: self.cfg.attn_softcap,
        }
    }

    /// Whether attention of q (a few queries a row on the CPU, not fused) runs in `few_queries`.
    fn attends_few(&self, q: &Tensor) -> Result<bool> {
        Ok(!self.fuses(q)? && few_queries::takes(q, q.dim(2)?))
    }

    /// Whether attention of q goes through `fused_attention`: enough queries a row, and its
    /// CPU body (tests), or on a GPU its kernels taking q's dtype and head dim.
    fn fuses(&self, q: &Tensor) -> Result<bool> {
        let (dtype, len, d) = (q.dtype(), q.dim(2)?, q.dim(3)?);
        Ok(self.fused_from_queries.is_some_and(|from| len >= from)
            && (q.device().is_cpu() || fused_attention::cuda_takes(dtype, d)))
    }

    /// The fused op with this model's scale and softcap (`FusedAttention`'s fields).
    fn fused_op(
        &self,
        positions: Option<(Tensor, Tensor)>,
        prefix: usize,
        shared: Option<&LayerKv>,
        window: Option<usize>,
    ) -> Result<fused_attention::FusedAttention> {
        Ok(fused_attention::FusedAttention {
            positions,
            row_span: None,
            shared: match shared {
                Some((k, v)) => Some((k.contiguous()?, v.contiguous()?)),
                None => None,
            },
            prefix,
            window,
            scale: self.cfg.attn_scale as f32,
            softcap: self.cfg.attn_softcap.map(|c| c as f32),
        })
    }

    /// softmax(q·kᵀ·scale + mask)·v for q (b, heads, len, d) and the keys and values of
    /// `shared` ((1, kv_heads, h, d): a prefix every row continues) followed by k, v (b,
    /// kv_heads, keys, d), where the last `len` keys belong to the queries (the rest, with the
    /// shared ones, is the batch's prefix).
    ///
    /// Grouped-query attention without copying k and v: the heads that share a kv head are laid
    /// out one after another, so q viewed as (b, kv_heads, group·len, d) multiplies k directly.
    /// Scores are computed for a block of rows × queries at a time (`AttentionPlan`), masked and
    /// normalised in f32. A few queries in f32 on the CPU (decoding steps) go to `few_queries`,
    /// more (a prompt's prefill) with AVX-512 to `prefill_attention`; both read the keys and
    /// values in place.
    fn attend(
        &self,
        q: &Tensor,
        shared: Option<&LayerKv>,
        k: &Tensor,
        v: &Tensor,
        batch: &Batch,
        window: Option<usize>,
    ) -> Result<Tensor> {
        let cfg = &self.cfg;
        let (b, heads, len, d) = q.dims4()?;
        let prefix = batch.prefix_len;
        if self.fuses(q)? {
            let (key_pos, key_seg) = batch.key_positions();
            let positions = Some((key_pos.clone(), key_seg.clone()));
            let op = self.fused_op(positions, prefix, shared, window)?;
            return op.apply(q, k, v);
        }
        let own_keys =
            k.dim(2)? == len && shared.map_or(0, |(sk, _)| sk.dim(2).unwrap_or(0)) == prefix;
        if len <= DECODE_QUERIES
            && own_keys
            && batch.is_plain()
            && decode_attention::takes(q, self.gpu_kernels)
        {
            // A few queries a row on a GPU (`extend`'s steps): as a decoding step's segments.
            return DecodeAttention {
                header: shared.cloned(),
                cache: None,
                segments: batch.segment_table()?.clone(),
                queries: len,
                window,
                scale: cfg.attn_scale as f32,
                softcap: cfg.attn_softcap.map(|c| c as f32),
            }
            .apply(q, k, v);
        }
        if self.attends_few(q)? {
            let mask = batch.mask(window, 0..b, 0..len, prefix + len)?;
            let keys = prefix + len;
            return few_queries::attend(q, shared, k, v, &mask, keys, self.score_scaling());
        }
        let kv = cfg.num_kv_heads;
        let plan = AttentionPlan::new(b, heads, len, prefix + len, self.attention_elements)?;
        if prefill_attention::takes(q, len) {
            let mask = |rows, queries, keys| batch.mask(window, rows, queries, keys);
            let scaling = self.score_scaling();
            return prefill_attention::attend(q, shared, (k, v), prefix, &plan, mask, scaling);
        }
        // One row at a time, over its own queries and keys only (no padding): every product's
        // shape — and so gemm's blocking of its sums — is the row's own, so a row gets the
        // same bits alone as in a batch. The shared keys and values go before the row's own.
        let group = heads / kv;
        // k's keys before the queries' own (a cache's), part of the prefix like `shared`'s.
        let before = k.dim(2)?.saturating_sub(len);
        let mut row_outs = Vec::with_capacity(b);
        for r in 0..b {
            let real = batch.lens.get(r).copied().unwrap_or(len).min(len);
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
            let plan = AttentionPlan::new(1, heads, real, prefix + real, self.attention_elements)?;
            let mut outs = Vec::with_capacity(real.div_ceil(plan.queries));
            for queries in plan.query_blocks() {
                let n = queries.len();
                // Keys after the block's last query are masked for all of it: never computed.
                let keys = prefix + queries.end;
                let kb = k.narrow(2, 0, keys)?;
                // A view: a decoding cache's values are not copied for each step.
                let vb = v.narrow(2, 0, keys)?;
                let scores = stage_times::time(&self.device, "attention: scores", || {
                    let qb = q.narrow(2, queries.start, n)?.contiguous()?.reshape((
                        1,
                        kv,
                        group * n,
                        d,
                    ))?;
                    let scores = (qb * cfg.attn_scale)?.matmul(&kb.t()?)?;
                    match cfg.attn_softcap {
                        Some(cap) => (scores / cap)?.tanh()? * cap,
                        None => Ok(scores),
                    }
                })?;
                let mask = stage_times::time(&self.device, "attention: mask", || {
                    batch.mask(window, r..r + 1, queries.clone(), keys)
                })?;
                let probs = stage_times::time(&self.device, "attention: softmax", || {
                    let scores = scores.reshape((1, kv, group, n, keys))?;
                    masked_softmax(scores, &mask)?.to_dtype(self.dtype)
                })?;
                let out = stage_times::time(&self.device, "attention: values", || {
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
