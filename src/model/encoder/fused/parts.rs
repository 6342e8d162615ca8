//! The fused blocks' parts: dense layers, LayerNorm, and what a dense layer does after its
//! product.

use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

/// What a dense layer does to its output before returning it.
#[derive(Clone, Copy)]
pub enum Epilogue<'a> {
    None,
    Gelu,
    /// LayerNorm(output + residual).
    AddNorm(&'a Tensor, &'a LayerNorm),
}

pub struct LayerNorm {
    pub(crate) weight: Tensor,
    pub(crate) bias: Tensor,
    pub(crate) eps: f32,
}

impl LayerNorm {
    pub fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<Self> {
        Ok(LayerNorm {
            weight: vb.get(size, "weight")?,
            bias: vb.get(size, "bias")?,
            eps: eps as f32,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::layer_norm(&x.contiguous()?, &self.weight, &self.bias, self.eps)
    }
}

/// y = x Wᵀ + b, W stored (out, in) as checkpoints have it.
pub struct Dense {
    pub(crate) weight: Tensor,
    pub(crate) bias: Tensor,
}

impl Dense {
    pub fn load(vb: VarBuilder, inputs: usize, outputs: usize) -> Result<Self> {
        Ok(Dense {
            weight: vb.get((outputs, inputs), "weight")?,
            bias: vb.get(outputs, "bias")?,
        })
    }

    /// Several layers reading the same input as one (their outputs side by side): one GEMM.
    pub fn concat(parts: &[Dense]) -> Result<Self> {
        let weights: Vec<&Tensor> = parts.iter().map(|d| &d.weight).collect();
        let biases: Vec<&Tensor> = parts.iter().map(|d| &d.bias).collect();
        Ok(Dense {
            weight: Tensor::cat(&weights, 0)?,
            bias: Tensor::cat(&biases, 0)?,
        })
    }
}
