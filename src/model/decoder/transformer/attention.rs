//! The decoder's side of attention: a layer's query, key and value projections, their norms
//! and rope, then attention's door (`run_attention`) with the batch and the keys' source, and
//! the output projection.

use super::{AttentionProjections, Transformer};
use crate::model::attention::door::{AttentionParams, KeySource, run_attention};
use crate::model::attention::plan::{LayerKv, ScoreScaling};
use crate::model::backend::stage_times;
use crate::model::decoder::batch::Batch;
use crate::model::quant::Plan;
use candle_core::{Result, Tensor};

impl Transformer {
    /// `out_plan`: the plan of the query and output products (the batch's, or in the last
    /// layer only the rows read); keys and values are computed for every token, and returned
    /// where `keep`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &self,
        a: &AttentionProjections,
        x: Tensor,
        (cos, sin): (&Tensor, &Tensor),
        batch: &Batch,
        window: Option<usize>,
        past: KeySource<'_, Batch>,
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
        let plan = batch.plan(self.prefill_gemm, self.attention.gpu_kernels);
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
        let params = AttentionParams {
            rows: batch,
            window,
            scaling: ScoreScaling {
                scale: cfg.attn_scale,
                softcap: cfg.attn_softcap,
            },
            kernels: self.attention,
        };
        let out = stage_times::time(&self.device, "attention (rest)", || {
            run_attention(&q, &k, &v, past, &params)
        })?;
        drop(q);
        let kv = keep.then_some((k, v));
        let out = stage_times::time(&self.device, "attention: head-major copies", move || {
            out.transpose(1, 2)?
                .reshape((b, len, cfg.num_heads * cfg.head_dim))
        })?;
        Ok((a.o.forward(&out, out_plan)?, kv))
    }
}
