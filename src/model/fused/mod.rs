//! The encoder's building blocks with their epilogues fused: a dense layer that adds its bias
//! (and a residual) inside the GEMM and applies GELU or LayerNorm in place, and attention over
//! each sequence's real tokens only. On CPU in f32 these run as hyoka's own kernels (`cpu`):
//! candle's op-per-tensor path allocated and swept a fresh batch-sized tensor for every bias,
//! residual, transpose and activation, and ran the per-head attention products one thread at a
//! time. Other devices and dtypes get the same arithmetic from candle's ops.

mod cpu;
pub mod math;

use candle_core::{DType, Result, Tensor, D};
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
        Ok(LayerNorm { weight: vb.get(size, "weight")?, bias: vb.get(size, "bias")?, eps: eps as f32 })
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
        Ok(Dense { weight: vb.get((outputs, inputs), "weight")?, bias: vb.get(outputs, "bias")? })
    }

    /// Several layers reading the same input as one (their outputs side by side): one GEMM.
    pub fn concat(parts: &[Dense]) -> Result<Self> {
        let weights: Vec<&Tensor> = parts.iter().map(|d| &d.weight).collect();
        let biases: Vec<&Tensor> = parts.iter().map(|d| &d.bias).collect();
        Ok(Dense { weight: Tensor::cat(&weights, 0)?, bias: Tensor::cat(&biases, 0)? })
    }

    /// x (…, in) → (…, out) with the epilogue applied.
    pub fn forward(&self, x: &Tensor, epilogue: Epilogue) -> Result<Tensor> {
        if cpu::applies(x) {
            return cpu::dense(self, x, epilogue);
        }
        let dims = x.dims();
        let inner = dims[dims.len() - 1];
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("at least one dimension") = self.weight.dim(0)?;
        let y = x.reshape((x.elem_count() / inner, inner))?.matmul(&self.weight.t()?)?.broadcast_add(&self.bias)?.reshape(out_dims)?;
        match epilogue {
            Epilogue::None => Ok(y),
            Epilogue::Gelu => y.gelu_erf(),
            Epilogue::AddNorm(residual, norm) => norm.forward(&(y + residual)?),
        }
    }
}

/// Which tokens of a right-padded batch are real.
pub struct PaddingMask {
    /// Real length of every row.
    pub lens: Vec<usize>,
    /// (batch, 1, 1, len) additive key mask (0 or the dtype's minimum), for candle's path.
    bias: Tensor,
}

impl PaddingMask {
    pub fn new(lens: Vec<usize>, width: usize, dtype: DType, device: &candle_core::Device) -> Result<Self> {
        let bias: Vec<f32> = lens.iter().flat_map(|&l| (0..width).map(move |j| if j < l { 0.0 } else { f32::MIN })).collect();
        let bias = Tensor::from_vec(bias, (lens.len(), 1, 1, width), device)?.to_dtype(dtype)?;
        Ok(PaddingMask { lens, bias })
    }
}

/// Bidirectional multi-head attention: `qkv` (batch, len, 3·hidden) holds queries, keys and
/// values side by side; returns the context (batch, len, hidden). Padded keys get no weight;
/// padded query rows are left undefined (zeros on CPU) and never read by real rows.
pub fn attention(qkv: &Tensor, mask: &PaddingMask, heads: usize) -> Result<Tensor> {
    if cpu::applies(qkv) {
        return cpu::attention(qkv, &mask.lens, heads);
    }
    let (b, n, h3) = qkv.dims3()?;
    let h = h3 / 3;
    let d = h / heads;
    let part = |k: usize| qkv.narrow(D::Minus1, k * h, h)?.reshape((b, n, heads, d))?.transpose(1, 2)?.contiguous();
    let q = (part(0)? / (d as f64).sqrt())?;
    let (k, v) = (part(1)?, part(2)?);
    let scores = q.matmul(&k.t()?)?.broadcast_add(&mask.bias)?;
    let probs = candle_nn::ops::softmax_last_dim(&scores)?;
    probs.matmul(&v)?.transpose(1, 2)?.reshape((b, n, h))
}

#[cfg(test)]
mod tests {
    //! The CPU kernels (f32) against candle's own ops on the same numbers in f64 — the path
    //! GPUs take — on a batch with padding, on all real rows.
    use super::*;
    use candle_core::Device;

    fn random(shape: &[usize], seed: u64) -> Tensor {
        let mut rng = crate::rng::SplitMix64(seed);
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| (rng.next_f64() * 2.0 - 1.0) as f32).collect();
        Tensor::from_vec(v, shape, &Device::Cpu).expect("shape fits")
    }

    fn f64s(t: &Tensor) -> Tensor {
        t.to_dtype(DType::F64).expect("cpu cast")
    }

    /// Largest |a − b| over the first lens[i] rows of every sequence.
    fn max_diff_real_rows(a: &Tensor, b: &Tensor, lens: &[usize]) -> f64 {
        let a: Vec<Vec<Vec<f64>>> = f64s(a).to_vec3().expect("3d");
        let b: Vec<Vec<Vec<f64>>> = f64s(b).to_vec3().expect("3d");
        let mut worst = 0f64;
        for (s, &len) in lens.iter().enumerate() {
            for i in 0..len {
                for (x, y) in a[s][i].iter().zip(&b[s][i]) {
                    worst = worst.max((x - y).abs());
                }
            }
        }
        worst
    }

    #[test]
    fn cpu_kernels_match_candle_ops_in_f64() -> Result<()> {
        let (b, n, hidden, heads, inter) = (3, 9, 48, 4, 80);
        let lens = vec![9, 2, 6];
        // Activations and weights of a trained encoder's scale: LayerNorm outputs, weights ~ 1/√in.
        let x = (random(&[b, n, hidden], 1) * 1.7)?;
        let dense = |i: usize, o, seed| Dense { weight: (random(&[o, i], seed) * (3.0 / i as f64).sqrt()).expect("scale"), bias: random(&[o], seed + 1) };
        let as64 = |d: &Dense| Dense { weight: f64s(&d.weight), bias: f64s(&d.bias) };
        let norm = LayerNorm { weight: (random(&[hidden], 7) + 1.0)?, bias: random(&[hidden], 8), eps: 1e-12 };
        let norm64 = LayerNorm { weight: f64s(&norm.weight), bias: f64s(&norm.bias), eps: norm.eps };
        let (qkv, up) = (Dense::concat(&[dense(hidden, hidden, 10), dense(hidden, hidden, 12), dense(hidden, hidden, 14)])?, dense(hidden, inter, 16));
        let (qkv64, up64) = (as64(&qkv), as64(&up));
        let mask = PaddingMask::new(lens.clone(), n, DType::F32, &Device::Cpu)?;
        let mask64 = PaddingMask::new(lens.clone(), n, DType::F64, &Device::Cpu)?;

        let q32 = qkv.forward(&x, Epilogue::None)?;
        let q64 = qkv64.forward(&f64s(&x), Epilogue::None)?;
        assert!(max_diff_real_rows(&q32, &q64, &lens) < 1e-5);
        let ctx32 = attention(&q32, &mask, heads)?;
        let ctx64 = attention(&q64, &mask64, heads)?;
        let attn = max_diff_real_rows(&ctx32, &ctx64, &lens);
        assert!(attn < 1e-5, "attention differs by {attn}");
        let g32 = up.forward(&x, Epilogue::Gelu)?;
        let g64 = up64.forward(&f64s(&x), Epilogue::Gelu)?;
        assert!(max_diff_real_rows(&g32, &g64, &lens) < 1e-5);
        let o = dense(hidden, hidden, 20);
        let n32 = o.forward(&ctx32, Epilogue::AddNorm(&x, &norm))?;
        // candle's fused layer_norm has no f64 kernel: the definition, spelled out.
        let y = (as64(&o).forward(&ctx64, Epilogue::None)? + f64s(&x))?;
        let centred = y.broadcast_sub(&y.mean_keepdim(D::Minus1)?)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let n64 = centred.broadcast_div(&(var + norm.eps as f64)?.sqrt()?)?.broadcast_mul(&norm64.weight)?.broadcast_add(&norm64.bias)?;
        let normed = max_diff_real_rows(&n32, &n64, &lens);
        assert!(normed < 1e-5, "dense + residual + norm differs by {normed}");
        // The test would pass vacuously if both sides took the same path.
        assert!(cpu::applies(&x) && !cpu::applies(&f64s(&x)));
        Ok(())
    }
}
