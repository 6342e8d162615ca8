//! The decoder every supported architecture runs. Llama, Mistral, Qwen2 and Qwen3 blocks are
//! pre-norm attention + gated MLP; Gemma 2/3 blocks add norms after attention and around the
//! MLP (`gemma_blocks`). The remaining differences are switches of `TransformerConfig`.
//!
//! Unlike candle-transformers' models, a forward pass takes a padded batch of prompts with
//! per-row positions and masks, and can continue a shared prefix whose keys and values were
//! computed once.

use super::ModelError;
use super::batch::Batch;
use super::config::TransformerConfig;
use super::decode::{Segment, Segments};
use super::decode_attention::{self, AppendKeys, DECODE_QUERIES, DecodeAttention};
use super::few_queries;
use super::fused_attention;
use super::layers::{Linear, Mlp, RmsNorm, inv_freq, rope_tables};
use super::masked_softmax::masked_softmax;
use super::matrix::{Matrix, Plan, Products, WeightsMode};
use super::prefill_attention;
use super::prefill_gemm::{PrefillGemm, check_prefill_gemm};
use super::stage_times;
use super::weights::Weights;
use candle_core::{DType, Device, Result, Tensor};

/// Keys and values of one layer: (1 or batch, kv_heads, seq, head_dim).
pub type LayerKv = (Tensor, Tensor);

/// The keys and values of a shared prefix, for every layer (a clone shares the tensors).
#[derive(Clone)]
pub struct PrefixKv {
    pub layers: Vec<LayerKv>,
    pub len: usize,
}

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
}

struct Block {
    input_norm: RmsNorm,
    attn: Attention,
    /// Gemma: norm of the attention output before the residual add.
    post_attn_norm: Option<RmsNorm>,
    /// The norm before the MLP (Llama's post_attention_layernorm, Gemma's pre_feedforward).
    pre_mlp_norm: RmsNorm,
    mlp: Mlp,
    /// Gemma: norm of the MLP output before the residual add.
    post_mlp_norm: Option<RmsNorm>,
}

pub struct Transformer {
    pub cfg: TransformerConfig,
    embed: Matrix,
    blocks: Vec<Block>,
    norm: RmsNorm,
    lm_head: Matrix,
    inv_freqs: Vec<Tensor>,
    dtype: DType,
    device: Device,
    weights_mode: WeightsMode,
    attention_elements: usize,
    /// Attention of this many queries a row or more through `fused_attention`; None: never.
    fused_from_queries: Option<usize>,
    /// The precision of a prompt's products on the CPU (`set_prefill_gemm`).
    prefill_gemm: PrefillGemm,
}

impl Transformer {
    pub fn load(w: &Weights, cfg: TransformerConfig) -> Result<Self> {
        let eps = cfg.rms_eps;
        let gemma = cfg.gemma_blocks;
        let mut blocks = Vec::with_capacity(cfg.num_layers());
        for i in 0..cfg.num_layers() {
            let p = format!("model.layers.{i}");
            let norm = |name: &str| RmsNorm::load(w, &format!("{p}.{name}.weight"), eps, gemma);
            let attn = Attention {
                q: Linear::load(w, &format!("{p}.self_attn.q_proj"), cfg.qkv_bias)?,
                k: Linear::load(w, &format!("{p}.self_attn.k_proj"), cfg.qkv_bias)?,
                v: Linear::load(w, &format!("{p}.self_attn.v_proj"), cfg.qkv_bias)?,
                o: Linear::load(w, &format!("{p}.self_attn.o_proj"), false)?,
                q_norm: if cfg.qk_norm {
                    Some(norm("self_attn.q_norm")?)
                } else {
                    None
                },
                k_norm: if cfg.qk_norm {
                    Some(norm("self_attn.k_norm")?)
                } else {
                    None
                },
            };
            blocks.push(Block {
                input_norm: norm("input_layernorm")?,
                attn,
                post_attn_norm: if gemma {
                    Some(norm("post_attention_layernorm")?)
                } else {
                    None
                },
                pre_mlp_norm: if gemma {
                    norm("pre_feedforward_layernorm")?
                } else {
                    norm("post_attention_layernorm")?
                },
                mlp: Mlp::load(w, &format!("{p}.mlp"), cfg.activation)?,
                post_mlp_norm: if gemma {
                    Some(norm("post_feedforward_layernorm")?)
                } else {
                    None
                },
            });
        }
        let embed = w.matrix("model.embed_tokens.weight")?;
        let lm_head = if cfg.tie_embeddings {
            embed.clone()
        } else {
            w.matrix("lm_head.weight")?
        };
        let inv_freqs = cfg
            .ropes
            .iter()
            .map(|r| inv_freq(r, cfg.head_dim, w.device()))
            .collect::<Result<_>>()?;
        Ok(Transformer {
            norm: RmsNorm::load(w, "model.norm.weight", eps, gemma)?,
            embed,
            blocks,
            lm_head,
            inv_freqs,
            dtype: w.dtype(),
            device: w.device().clone(),
            weights_mode: w.mode(),
            attention_elements: ATTENTION_ELEMENTS,
            fused_from_queries: (w.device().is_cuda() && super::hyoka_gpu_kernels())
                .then_some(FUSED_FROM_QUERIES),
            prefill_gemm: PrefillGemm::F32,
            cfg,
        })
    }

    /// Weights in the forward pass (embeddings once, even when tied to the output head).
    pub fn parameter_count(&self) -> usize {
        let mut n = self.embed.elem_count();
        if !self.cfg.tie_embeddings {
            n += self.lm_head.elem_count();
        }
        let c = &self.cfg;
        let attn = c.hidden_size * c.head_dim * (2 * c.num_heads + 2 * c.num_kv_heads);
        let mlp = 3 * c.hidden_size * c.intermediate_size;
        n + c.num_layers() * (attn + mlp)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dtype of the residual stream (and of `forward`'s hidden states): the model dtype,
    /// except f32 for f16 models (see `forward`).
    pub fn residual_dtype(&self) -> DType {
        if self.dtype == DType::F16 {
            DType::F32
        } else {
            self.dtype
        }
    }

    /// How the weights are held (stored or expanded).
    pub fn weights_mode(&self) -> WeightsMode {
        self.weights_mode
    }

    /// The products of prompts on the CPU: f32 (the default: the expanded f32 model's bits),
    /// bf16 or int8, refused where they do not apply (`check_prefill_gemm`).
    pub fn set_prefill_gemm(&mut self, gemm: PrefillGemm) -> std::result::Result<(), ModelError> {
        check_prefill_gemm(gemm, &self.device, self.dtype, self.weights_mode)?;
        self.prefill_gemm = gemm;
        Ok(())
    }

    /// The products of prompts on the CPU, for the provenance.
    pub fn prefill_gemm(&self) -> PrefillGemm {
        self.prefill_gemm
    }

    /// Bytes the weight matrices hold in memory (embeddings once when tied to the head).
    pub fn matrix_bytes(&self) -> usize {
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| {
                [&b.attn.q, &b.attn.k, &b.attn.v, &b.attn.o]
                    .iter()
                    .map(|l| l.weight_bytes())
                    .sum::<usize>()
                    + b.mlp.weight_bytes()
            })
            .sum();
        let head = if self.cfg.tie_embeddings {
            0
        } else {
            self.lm_head.bytes()
        };
        blocks + self.embed.bytes() + head
    }

    /// Bytes of keys and values one token takes over all layers, in the model's dtype.
    pub fn kv_bytes_per_slot(&self) -> usize {
        let c = &self.cfg;
        c.num_layers() * c.num_kv_heads * c.head_dim * 2 * self.dtype.size_in_bytes()
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Run the batch; returns the final hidden states (batch, len, hidden) in
    /// `residual_dtype`, before the final norm. Each layer's keys and values are dropped once
    /// the layer has run: a scored batch's would be held to the end otherwise (0.8 GB for three
    /// items of a 13B judge without grouped-query attention).
    pub fn forward(&self, batch: &Batch, prefix: Option<&PrefixKv>) -> Result<Tensor> {
        Ok(self.run(batch, Self::past(batch, prefix), false)?.0)
    }

    /// `forward`, with every layer's keys and values (batch, kv_heads, len, head_dim).
    pub fn forward_with_kv(
        &self,
        batch: &Batch,
        prefix: Option<&PrefixKv>,
    ) -> Result<(Tensor, Vec<LayerKv>)> {
        self.run(batch, Self::past(batch, prefix), true)
    }

    fn past<'a>(batch: &Batch, prefix: Option<&'a PrefixKv>) -> Past<'a> {
        if let Some(p) = prefix {
            assert_eq!(
                p.len, batch.prefix_len,
                "batch built for another prefix length"
            );
        }
        prefix.map_or(Past::Fresh, Past::Shared)
    }

    /// Run a decoding step on rows' own keys and values (`decode::KvCache`'s layers,
    /// (rows, kv_heads, capacity, head_dim)), which follow `header`'s (one copy, read by every
    /// row): each segment's keys and values are written into its row at its slot. Returns the
    /// final hidden states as `forward`.
    pub(super) fn forward_cached(
        &self,
        batch: &Batch,
        layers: &[LayerKv],
        header: Option<&[LayerKv]>,
        segments: &Segments,
    ) -> Result<Tensor> {
        Ok(self
            .run(batch, Past::Cached(layers, header, segments), false)?
            .0)
    }

    fn run(&self, batch: &Batch, past: Past, keep: bool) -> Result<(Tensor, Vec<LayerKv>)> {
        stage_times::time(&self.device, "forward (rest)", || {
            self.layers(batch, past, keep)
        })
    }

    fn layers(&self, batch: &Batch, past: Past, keep: bool) -> Result<(Tensor, Vec<LayerKv>)> {
        let (b, len) = batch.ids.dims2()?;
        // f16 holds at most 65504: Gemma's residual stream passes that (activations of 1e4 and
        // more), so in f16 the stream is kept in f32 and only the layers' GEMMs run in f16.
        let (dtype, stream) = (self.dtype, self.residual_dtype());
        let mut x = stage_times::time(&self.device, "embedding", || {
            self.embed.rows(&batch.ids.flatten_all()?, dtype)
        })?
        .reshape((b, len, self.cfg.hidden_size))?;
        if let Some(scale) = self.cfg.embed_scale {
            // transformers casts the scale to the model dtype before multiplying.
            let scale = Tensor::new(scale as f32, &self.device)?.to_dtype(dtype)?;
            x = x.broadcast_mul(&scale)?;
        }
        let mut x = x.to_dtype(stream)?;
        let tables: Vec<(Tensor, Tensor)> = (self.inv_freqs.iter().zip(&self.cfg.ropes))
            .map(|(f, rope)| rope_tables(f, &batch.positions, rope.attention_factor(), dtype))
            .collect::<Result<_>>()?;
        let mut kvs = Vec::with_capacity(self.blocks.len());
        let last = self.blocks.len().saturating_sub(1);
        for (i, block) in self.blocks.iter().enumerate() {
            let kind = &self.cfg.layers[i];
            // Past the last layer's keys and values, only the rows that are read.
            let plan = if i == last {
                batch.last_plan(self.prefill_gemm)
            } else {
                batch.plan(self.prefill_gemm)
            };
            let (cos, sin) = &tables[kind.rope];
            let past = match past {
                Past::Fresh => LayerPast::Fresh,
                Past::Shared(p) => LayerPast::Shared(&p.layers[i]),
                Past::Cached(layers, header, segments) => {
                    LayerPast::Cached(&layers[i], header.map(|h| &h[i]), segments)
                }
            };
            // Each temporary is moved into the step that reads it last, so that it is freed
            // there: a shadowed binding would live to the end of the layer (at 4,096 tokens of
            // a 13B, 84 MB each).
            let (h, kv) = self.attention(
                &block.attn,
                block.input_norm.forward_as(&x, dtype)?,
                (cos, sin),
                batch,
                kind.sliding_window,
                past,
                (plan, keep),
            )?;
            kvs.extend(kv);
            x = (x + to_stream(h, block.post_attn_norm.as_ref(), stream)?)?;
            let h = block
                .mlp
                .forward(block.pre_mlp_norm.forward_as(&x, dtype)?, plan)?;
            x = (x + to_stream(h, block.post_mlp_norm.as_ref(), stream)?)?;
        }
        Ok((x, kvs))
    }

    /// `out_plan`: the plan of the query and output products (the batch's, or in the last
    /// layer only the rows read); keys and values are computed for every token, and returned
    /// where `keep`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
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
        let plan = batch.plan(self.prefill_gemm);
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
            let (scale, cap) = (self.cfg.attn_scale, self.cfg.attn_softcap);
            let attended = stage_times::time(&self.device, "attention: few queries", || {
                few_queries::attend_sequences(header, &sequences, scale, cap)
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
    fn attends_few(&self, q: &Tensor) -> Result<bool> {
        Ok(!self.fuses(q)? && few_queries::runs(q, q.dim(2)?))
    }

    /// Whether attention of q goes through `fused_attention`: enough queries a row, and its
    /// CPU body (tests), or on a GPU its kernels taking q's dtype and head dim.
    fn fuses(&self, q: &Tensor) -> Result<bool> {
        let (dtype, len, d) = (q.dtype(), q.dim(2)?, q.dim(3)?);
        Ok(self.fused_from_queries.is_some_and(|from| len >= from)
            && (q.device().is_cpu() || fused_attention::cuda_applies(dtype, d)))
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
        if len <= DECODE_QUERIES && own_keys && batch.is_plain() && decode_attention::applies(q) {
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
            let (scale, cap) = (cfg.attn_scale, cfg.attn_softcap);
            return few_queries::attend(q, shared, k, v, &mask, prefix + len, scale, cap);
        }
        let kv = cfg.num_kv_heads;
        let plan = AttentionPlan::new(b, heads, len, prefix + len, self.attention_elements)?;
        if prefill_attention::runs(q, len) {
            let mask = |rows, queries, keys| batch.mask(window, rows, queries, keys);
            let (scale, cap) = (cfg.attn_scale, cfg.attn_softcap);
            return prefill_attention::attend(q, shared, k, v, prefix, &plan, mask, scale, cap);
        }
        // Here the shared keys and values are copied before every row's own.
        let (k, v) = after_shared(shared, k, v, b)?;
        let group = heads / kv;
        let mut row_outs = Vec::with_capacity(b.div_ceil(plan.rows));
        for rows in plan.row_chunks() {
            let nr = rows.len();
            let (q, k, v) = (
                q.narrow(0, rows.start, nr)?,
                k.narrow(0, rows.start, nr)?,
                v.narrow(0, rows.start, nr)?,
            );
            let mut outs = Vec::with_capacity(len.div_ceil(plan.queries));
            for queries in plan.query_blocks() {
                let n = queries.len();
                // Keys after the block's last query are masked for all of it: never computed.
                let keys = prefix + queries.end;
                let kb = k.narrow(2, 0, keys)?;
                // A view: a decoding cache's values are not copied for each step.
                let vb = v.narrow(2, 0, keys)?;
                let scores = stage_times::time(&self.device, "attention: scores", || {
                    let qb = q.narrow(2, queries.start, n)?.contiguous()?.reshape((
                        nr,
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
                    batch.mask(window, rows.clone(), queries.clone(), keys)
                })?;
                let probs = stage_times::time(&self.device, "attention: softmax", || {
                    let scores = scores.reshape((nr, kv, group, n, keys))?;
                    masked_softmax(scores, &mask)?.to_dtype(self.dtype)
                })?;
                let out = stage_times::time(&self.device, "attention: values", || {
                    probs.reshape((nr, kv, group * n, keys))?.matmul(&vb)
                })?;
                outs.push(out.reshape((nr, heads, n, d))?);
            }
            row_outs.push(cat_or_single(outs, 2)?);
        }
        cat_or_single(row_outs, 0)
    }

    /// Attention of `from` queries a row or more through the fused op (`fused_attention`)
    /// instead of blocks of scores: its CPU body anywhere (tests), its CUDA kernel on a GPU in
    /// bf16. None: never. On CUDA it is `FUSED_FROM_QUERIES` from load (unless
    /// HYOKA_GPU_KERNELS=candle); elsewhere None.
    pub fn set_fused_attention(&mut self, from: Option<usize>) {
        self.fused_from_queries = from;
    }

    /// The most attention scores (rows × heads × queries × keys) one block may hold; see
    /// `ATTENTION_ELEMENTS`. Lowered by tests to run the split path on small batches.
    pub fn set_attention_elements(&mut self, limit: usize) {
        self.attention_elements = limit;
    }

    /// Compute the keys and values of a prefix once, to be continued by many rows.
    pub fn prefix(&self, ids: &[u32]) -> Result<PrefixKv> {
        // No logits: the header's last token is continued, never read.
        let batch = Batch::new(&[ids.to_vec()], 0, &self.device)?.reading(&[])?;
        let (_, layers) = self.forward_with_kv(&batch, None)?;
        Ok(PrefixKv {
            layers,
            len: ids.len(),
        })
    }

    /// Continue `prefix` (or start) with `tokens`: the longer prefix, and the logits after the
    /// last token (1, vocab). Token-by-token generation is this, one token at a time (with
    /// `Products::RowWise`, as `decode` steps run).
    pub fn extend(
        &self,
        prefix: Option<&PrefixKv>,
        tokens: &[u32],
        products: Products,
    ) -> Result<(PrefixKv, Tensor)> {
        let start = prefix.map_or(0, |p| p.len);
        let batch = Batch::new(&[tokens.to_vec()], start, &self.device)?
            .with_products(products)
            .reading(&[(0, tokens.len() - 1)])?;
        let (hidden, kvs) = self.forward_with_kv(&batch, prefix)?;
        let logits = self.decode_logits(&hidden, &[(0, tokens.len() - 1)])?;
        let layers = match prefix {
            None => kvs,
            Some(p) => p
                .layers
                .iter()
                .zip(kvs)
                .map(|((k0, v0), (k, v))| {
                    Ok((Tensor::cat(&[k0, &k], 2)?, Tensor::cat(&[v0, &v], 2)?))
                })
                .collect::<Result<_>>()?,
        };
        Ok((
            PrefixKv {
                layers,
                len: start + tokens.len(),
            },
            logits,
        ))
    }

    /// Next-token logits (n, vocab) for decoding, a position's logits the same whatever is read
    /// with it: a quantized head through the quantized kernels, each position on its own
    /// (`Matrix::matvec_t`); a dense one on the CPU with fixed-order dot products
    /// (`Matrix::dots_t`), elsewhere as `logits_at`.
    pub fn decode_logits(&self, hidden: &Tensor, at: &[(usize, usize)]) -> Result<Tensor> {
        self.head(hidden, at, |picked| match &self.lm_head {
            Matrix::Quantized(_) | Matrix::Iq(_) => self.lm_head.matvec_t(picked),
            Matrix::Dense(_) if self.device.is_cpu() => self.lm_head.dots_t(picked),
            Matrix::Dense(_) => self.lm_head.matmul_t_chunked(picked, HEAD_CHUNK_ROWS),
        })
    }

    /// Logits (n, vocab) at the given (row, position) pairs of a forward pass's hidden states;
    /// `rows` restricts the output to those vocabulary entries (n, rows.len()).
    pub fn logits_at(
        &self,
        hidden: &Tensor,
        at: &[(usize, usize)],
        rows: Option<&Tensor>,
    ) -> Result<Tensor> {
        // The expanded head's arithmetic (a judge reads probabilities): a few vocabulary rows
        // expanded, or the whole head expanded a slice at a time.
        self.head(hidden, at, |picked| match rows {
            Some(r) => picked.matmul(&self.lm_head.rows(r, picked.dtype())?.t()?),
            None => self.lm_head.matmul_t_chunked(picked, HEAD_CHUNK_ROWS),
        })
    }

    /// The output head at the given (row, position) pairs: the final norm of those hidden
    /// states, `product` with the head, in f32, soft-capped where the model caps.
    fn head(
        &self,
        hidden: &Tensor,
        at: &[(usize, usize)],
        product: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        stage_times::time(&self.device, "output head (rest)", || {
            self.head_untimed(hidden, at, product)
        })
    }

    fn head_untimed(
        &self,
        hidden: &Tensor,
        at: &[(usize, usize)],
        product: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let (b, len, h) = hidden.dims3()?;
        let flat: Vec<u32> = at.iter().map(|&(r, p)| (r * len + p) as u32).collect();
        debug_assert!(at.iter().all(|&(r, p)| r < b && p < len));
        let idx = Tensor::from_vec(flat, at.len(), &self.device)?;
        let picked = hidden.reshape((b * len, h))?.index_select(&idx, 0)?;
        let logits = product(&self.norm.forward(&picked)?)?.to_dtype(DType::F32)?;
        match self.cfg.final_softcap {
            Some(cap) => (logits / cap)?.tanh()? * cap,
            None => Ok(logits),
        }
    }
}

/// The keys and values a forward pass continues.
#[derive(Clone, Copy)]
enum Past<'a> {
    Fresh,
    /// One prefix every row continues (its keys broadcast over the rows).
    Shared(&'a PrefixKv),
    /// Every row's own keys, preallocated (written in place), after those of a header every
    /// row continues (kept once), and the segments of the step.
    Cached(&'a [LayerKv], Option<&'a [LayerKv]>, &'a Segments),
}

#[derive(Clone, Copy)]
enum LayerPast<'a> {
    Fresh,
    Shared(&'a LayerKv),
    Cached(&'a LayerKv, Option<&'a LayerKv>, &'a Segments),
}

/// Vocabulary rows of a quantized (or differently typed) output head expanded at once when all
/// logits are read: 16k rows × 4096 × 4 bytes = 256 MB at most.
const HEAD_CHUNK_ROWS: usize = 16384;

/// Queries per block: keys after a block's last query are masked for every query of the block,
/// so they are never computed (causal attention does about half the work of full attention).
const QUERY_BLOCK: usize = 256;

/// Attention scores one block may hold (rows × heads × queries × keys): 2^28, 1 GiB in f32. It
/// bounds the memory of attention whatever the batch, and keeps every kernel that sweeps the
/// scores (mask add, softmax, the products) far below 2^31 elements: candle's CUDA softmax
/// indexes its rows with 32-bit integers.
pub const ATTENTION_ELEMENTS: usize = 1 << 28;

/// On CUDA, attention of this many queries a row or more (a prompt's prefill, a judge's items
/// after their header) runs in the fused kernel; fewer (decoding steps, a judge's answer
/// branches) through blocks of scores. On an H200 (an 8B Q4_K_M, prompts of ~1,650 tokens) the
/// fused kernel prefills 1.5× as fast, but decodes a token at a time at 37 against 98 tok/s,
/// and json mode's steps at 0.91 against 0.96 items/s — the tensor-core kernel's blocks of 64
/// queries hold one, and a head's keys are read by one block.
pub const FUSED_FROM_QUERIES: usize = 16;

/// How attention splits a batch: `rows` batch rows and `queries` queries at a time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionPlan {
    pub rows: usize,
    pub queries: usize,
    batch: usize,
    len: usize,
}

impl AttentionPlan {
    /// For `batch` rows of `len` queries over at most `keys` keys each, `heads` query heads,
    /// blocks of at most `limit` scores. Fails only when one query's scores over every head
    /// exceed the limit (tens of millions of keys).
    pub fn new(batch: usize, heads: usize, len: usize, keys: usize, limit: usize) -> Result<Self> {
        let per_query = heads * keys.max(1);
        let queries = QUERY_BLOCK.min(len.max(1)).min(limit / per_query);
        if queries == 0 {
            candle_core::bail!(
                "attention over {keys} keys with {heads} heads needs more than {limit} scores for one query"
            );
        }
        let rows = (limit / (per_query * queries)).clamp(1, batch.max(1));
        Ok(AttentionPlan {
            rows,
            queries,
            batch,
            len,
        })
    }

    pub fn row_chunks(&self) -> impl Iterator<Item = std::ops::Range<usize>> + use<> {
        let (step, end) = (self.rows, self.batch);
        (0..end).step_by(step).map(move |s| s..(s + step).min(end))
    }

    pub fn query_blocks(&self) -> impl Iterator<Item = std::ops::Range<usize>> + use<> {
        let (step, end) = (self.queries, self.len);
        (0..end).step_by(step).map(move |s| s..(s + step).min(end))
    }
}

/// A block's output in the residual stream's dtype, through its norm where it has one
/// (Gemma's post-attention and post-MLP norms).
fn to_stream(h: Tensor, norm: Option<&RmsNorm>, stream: DType) -> Result<Tensor> {
    match norm {
        Some(n) => n.forward_as(&h, stream),
        None => h.to_dtype(stream),
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
