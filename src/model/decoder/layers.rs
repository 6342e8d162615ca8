//! Building blocks shared by every architecture: linear maps, RMS norms, the gated MLP and
//! rotary position tables.

use crate::model::backend::stage_times;
use crate::model::decoder::gated_mlp;
use crate::model::decoder::swiglu::silu_mul;
use crate::model::load::config::Activation;
use crate::model::load::rope::Rope;
use crate::model::load::weights::Weights;
use crate::model::quant::{Matrix, Plan};
use candle_core::{D, DType, Device, Module, Result, Tensor};

pub struct Linear {
    weight: Matrix,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn load(w: &Weights, prefix: &str, bias: bool) -> Result<Self> {
        Ok(Linear {
            weight: w.matrix(&format!("{prefix}.weight"))?,
            bias: if bias {
                Some(w.get(&format!("{prefix}.bias"))?)
            } else {
                None
            },
        })
    }

    /// Bytes the weight holds in memory.
    pub fn weight_bytes(&self) -> usize {
        self.weight.bytes()
    }

    /// x (…, in) → (…, out), as one product over all leading dimensions.
    pub fn forward(&self, x: &Tensor, plan: Plan<'_>) -> Result<Tensor> {
        let dims = x.dims();
        let (rows, inner) = (x.elem_count() / dims[dims.len() - 1], dims[dims.len() - 1]);
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("at least one dimension") = self.weight.dims()?.0;
        let y = self
            .weight
            .product(&x.reshape((rows, inner))?, plan)?
            .reshape(out_dims)?;
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

pub struct RmsNorm {
    /// In f32 whatever the model's dtype: the norm is computed in f32.
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    /// Gemma stores `w - 1` and multiplies by `1 + w`: fold the 1 in once here, in f32 as
    /// transformers does (`1.0 + weight.float()`); formed in bf16, 1 + w keeps 8 bits.
    pub fn load(w: &Weights, name: &str, eps: f64, plus_one: bool) -> Result<Self> {
        let weight = w.get_as(name, DType::F32)?;
        let weight = if plus_one { (weight + 1.0)? } else { weight };
        Ok(RmsNorm { weight, eps })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_as(x, x.dtype())
    }

    /// Normalised in f32 as transformers does, whatever the model dtype; returned in `dtype`.
    pub fn forward_as(&self, x: &Tensor, dtype: DType) -> Result<Tensor> {
        stage_times::time(x.device(), "norms", || {
            let xf = x.to_dtype(DType::F32)?;
            let y = candle_nn::ops::rms_norm(&xf.contiguous()?, &self.weight, self.eps as f32)?;
            y.to_dtype(dtype)
        })
    }
}

pub struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
    act: Activation,
}

impl Mlp {
    pub fn load(w: &Weights, prefix: &str, act: Activation) -> Result<Self> {
        Ok(Mlp {
            gate: Linear::load(w, &format!("{prefix}.gate_proj"), false)?,
            up: Linear::load(w, &format!("{prefix}.up_proj"), false)?,
            down: Linear::load(w, &format!("{prefix}.down_proj"), false)?,
            act,
        })
    }

    /// Bytes its three weights hold in memory.
    pub fn weight_bytes(&self) -> usize {
        [&self.gate, &self.up, &self.down]
            .iter()
            .map(|l| l.weight_bytes())
            .sum()
    }

    /// x moved in: on the CPU's prompt path it is freed once its real rows are gathered.
    pub fn forward(&self, x: Tensor, plan: Plan<'_>) -> Result<Tensor> {
        let weights = gated_mlp::GatedWeights {
            gate: &self.gate.weight,
            up: &self.up.weight,
            down: &self.down.weight,
        };
        let no_bias = [&self.gate, &self.up, &self.down]
            .iter()
            .all(|l| l.bias.is_none());
        if no_bias && weights.takes(&x, plan) {
            // A prompt's rows on the CPU: the middle a block of its columns at a time.
            let mut dims = x.dims().to_vec();
            let inner = dims[dims.len() - 1];
            let rows = x.reshape((x.elem_count() / inner.max(1), inner))?;
            drop(x);
            let device = rows.device().clone();
            let y = stage_times::time(&device, "weights: products (GEMM, kernels)", || {
                weights.forward(rows, plan.runs, self.act, plan.gemm)
            })?;
            *dims.last_mut().expect("at least one dimension") = y.dim(1)?;
            return y.reshape(dims);
        }
        let x = &x;
        let gate = self.gate.forward(x, plan)?;
        let up = self.up.forward(x, plan)?;
        let mid = stage_times::time(x.device(), "MLP activation", || match self.act {
            Activation::Silu => silu_mul(&gate, &up),
            Activation::GeluTanh => candle_nn::Activation::NewGelu.forward(&gate)? * up,
        })?;
        self.down.forward(&mid, plan)
    }
}

/// Inverse frequencies of one rotary embedding, after scaling.
pub fn inv_freq(rope: &Rope, head_dim: usize, device: &Device) -> Result<Tensor> {
    let freqs: Vec<f32> = rope
        .frequencies(head_dim)
        .iter()
        .map(|&f| f as f32)
        .collect();
    Tensor::from_vec(freqs, head_dim / 2, device)
}

/// cos and sin tables (batch, seq, head_dim/2) for per-row positions (batch, seq), multiplied
/// by `scale` (`Rope::attention_factor`) in f32 before the cast to `dtype`, as transformers.
pub fn rope_tables(
    inv_freq: &Tensor,
    positions: &Tensor,
    scale: f64,
    dtype: DType,
) -> Result<(Tensor, Tensor)> {
    let pos = positions.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
    let angles = pos.broadcast_mul(&inv_freq.reshape((1, 1, ()))?)?;
    let scaled = |t: Tensor| {
        if scale == 1.0 {
            Ok(t)
        } else {
            t.affine(scale, 0.0)
        }
    };
    Ok((
        scaled(angles.cos()?)?.to_dtype(dtype)?,
        scaled(angles.sin()?)?.to_dtype(dtype)?,
    ))
}
