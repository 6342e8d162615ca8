//! The encoder's building blocks with their epilogues fused: a dense layer that adds its bias
//! and a residual and applies GELU or LayerNorm in the same pass, and attention over each
//! sequence's real tokens only. On CPU in f32 these run as hyoka's own kernels (`cpu`) on
//! packed token rows — no padding row is ever computed: candle's op-per-tensor path allocated
//! and swept a fresh batch-sized tensor for every bias, residual, transpose and activation,
//! and ran the per-head attention products one thread at a time. Other devices and dtypes get
//! the same arithmetic from candle's ops on right-padded rows.

#[cfg(target_arch = "x86_64")]
mod avx2;
pub(crate) mod cpu;
pub mod math;
mod parts;

pub use parts::{Dense, Epilogue, LayerNorm};

use candle_core::{D, DType, Result, Tensor};

impl Dense {
    /// x (rows in `layout`, in) → (…, out) with the epilogue applied: hyoka's CPU kernel on
    /// packed rows, candle's ops on padded rows.
    pub fn forward(&self, x: &Tensor, layout: &TokenLayout, epilogue: Epilogue) -> Result<Tensor> {
        if let TokenLayout::Packed { .. } = layout {
            return cpu::dense(self, x, epilogue);
        }
        let dims = x.dims();
        let inner = dims[dims.len() - 1];
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("at least one dimension") = self.weight.dim(0)?;
        let y = x
            .reshape((x.elem_count() / inner, inner))?
            .matmul(&self.weight.t()?)?
            .broadcast_add(&self.bias)?
            .reshape(out_dims)?;
        match epilogue {
            Epilogue::None => Ok(y),
            Epilogue::Gelu => y.gelu_erf(),
            Epilogue::AddNorm(residual, norm) => norm.forward(&(y + residual)?),
        }
    }
}

/// How a batch's token rows are laid out.
pub enum TokenLayout {
    /// Every sequence's rows back to back, (tokens, hidden): hyoka's CPU kernels, which so never
    /// compute a padding row.
    Packed { lens: Vec<usize> },
    /// Right-padded (batch, width, hidden), with an additive f32 key mask (batch, 1, 1, width)
    /// of 0 or f32's minimum: candle's ops. `real`: the indices of the real rows among the
    /// batch × width, to pack the outputs.
    Padded {
        lens: Vec<usize>,
        width: usize,
        bias: Tensor,
        real: Tensor,
    },
}

impl TokenLayout {
    /// Packed where hyoka's CPU kernels run (f32 on the CPU), padded elsewhere.
    pub fn new(lens: Vec<usize>, dtype: DType, device: &candle_core::Device) -> Result<Self> {
        if cpu::takes(device, dtype) {
            return Ok(TokenLayout::Packed { lens });
        }
        Self::padded(lens, device)
    }

    pub fn padded(lens: Vec<usize>, device: &candle_core::Device) -> Result<Self> {
        let width = lens.iter().copied().max().unwrap_or(0);
        let bias: Vec<f32> = lens
            .iter()
            .flat_map(|&l| (0..width).map(move |j| if j < l { 0.0 } else { f32::MIN }))
            .collect();
        let bias = Tensor::from_vec(bias, (lens.len(), 1, 1, width), device)?;
        let real: Vec<u32> = lens
            .iter()
            .enumerate()
            .flat_map(|(i, &l)| (0..l).map(move |j| (i * width + j) as u32))
            .collect();
        let real = Tensor::from_vec(real, lens.iter().sum::<usize>(), device)?;
        Ok(TokenLayout::Padded {
            lens,
            width,
            bias,
            real,
        })
    }

    /// Rows per sequence in this layout (padding included).
    pub fn width(&self, seq: usize) -> usize {
        match self {
            TokenLayout::Packed { lens } => lens[seq],
            TokenLayout::Padded { width, .. } => *width,
        }
    }

    /// The shape of (rows of `hidden`) in this layout.
    pub fn shape(&self, hidden: usize) -> Vec<usize> {
        match self {
            TokenLayout::Packed { lens } => vec![lens.iter().sum(), hidden],
            TokenLayout::Padded { lens, width, .. } => vec![lens.len(), *width, hidden],
        }
    }

    /// `x` in this layout → the real tokens' rows back to back, (tokens, hidden).
    pub fn pack(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            TokenLayout::Packed { .. } => Ok(x.clone()),
            TokenLayout::Padded {
                lens, width, real, ..
            } => x
                .reshape((lens.len() * width, x.dim(D::Minus1)?))?
                .index_select(real, 0),
        }
    }
}

/// Bidirectional multi-head attention: `qkv` (rows in `layout`, 3·hidden) holds queries, keys
/// and values side by side; returns the context (rows in `layout`, hidden). Padded keys get no
/// weight; padded query rows are left undefined and never read by real rows.
pub fn attention(qkv: &Tensor, layout: &TokenLayout, heads: usize) -> Result<Tensor> {
    let (lens, width, bias) = match layout {
        TokenLayout::Packed { lens } => return cpu::attention(qkv, lens, heads),
        TokenLayout::Padded {
            lens, width, bias, ..
        } => (lens, *width, bias),
    };
    let (b, n, h3) = qkv.dims3()?;
    if b != lens.len() || n != width {
        candle_core::bail!(
            "attention: qkv {:?} for {} sequences of width {width}",
            qkv.shape(),
            lens.len()
        );
    }
    let h = h3 / 3;
    let d = h / heads;
    let part = |k: usize| {
        qkv.narrow(D::Minus1, k * h, h)?
            .reshape((b, n, heads, d))?
            .transpose(1, 2)?
            .contiguous()
    };
    let q = (part(0)? / (d as f64).sqrt())?;
    let (k, v) = (part(1)?, part(2)?);
    // Masked and normalised in f32 whatever the dtype (f16 cannot hold the mask value).
    let scores = q.matmul(&k.t()?)?;
    let dtype = scores.dtype();
    let scores = scores.to_dtype(DType::F32)?.broadcast_add(bias)?;
    let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(dtype)?;
    probs.matmul(&v)?.transpose(1, 2)?.reshape((b, n, h))
}

#[cfg(test)]
mod tests {
    //! The CPU kernels (f32, packed rows) against candle's own ops on the same numbers in f64
    //! (padded rows) — the path GPUs take — on every real row.
    use super::*;
    use candle_core::Device;

    fn random(shape: &[usize], seed: u64) -> Tensor {
        let mut rng = crate::rng::SplitMix64(seed);
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| (rng.next_f64() * 2.0 - 1.0) as f32)
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).expect("shape fits")
    }

    fn f64s(t: &Tensor) -> Tensor {
        t.to_dtype(DType::F64).expect("cpu cast")
    }

    /// Largest |a − b| between packed f32 rows and padded f64 rows, over the real tokens.
    fn max_diff(packed: &Tensor, padded: &Tensor, layout: &TokenLayout) -> f64 {
        let a: Vec<Vec<f64>> = f64s(packed).to_vec2().expect("2d");
        let b: Vec<Vec<f64>> = layout.pack(padded).expect("pack").to_vec2().expect("2d");
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(&b)
            .flat_map(|(x, y)| x.iter().zip(y).map(|(x, y)| (x - y).abs()))
            .fold(0.0, f64::max)
    }

    #[test]
    fn cpu_kernels_match_candle_ops_in_f64() -> Result<()> {
        let (b, n, hidden, heads, inter) = (3, 9, 48, 4, 80);
        let lens = vec![9, 2, 6];
        // Activations and weights of a trained encoder's scale: LayerNorm outputs, weights ~ 1/√in.
        let x = (random(&[b, n, hidden], 1) * 1.7)?;
        let dense = |i: usize, o, seed| Dense {
            weight: (random(&[o, i], seed) * (3.0 / i as f64).sqrt()).expect("scale"),
            bias: random(&[o], seed + 1),
        };
        let as64 = |d: &Dense| Dense {
            weight: f64s(&d.weight),
            bias: f64s(&d.bias),
        };
        let norm = LayerNorm {
            weight: (random(&[hidden], 7) + 1.0)?,
            bias: random(&[hidden], 8),
            eps: 1e-12,
        };
        let (qkv, up) = (
            Dense::concat(&[
                dense(hidden, hidden, 10),
                dense(hidden, hidden, 12),
                dense(hidden, hidden, 14),
            ])?,
            dense(hidden, inter, 16),
        );
        let (qkv64, up64) = (as64(&qkv), as64(&up));
        let packed = TokenLayout::new(lens.clone(), DType::F32, &Device::Cpu)?;
        let padded = TokenLayout::new(lens.clone(), DType::F64, &Device::Cpu)?;
        // The test would pass vacuously if both sides took the same path.
        assert!(
            matches!(packed, TokenLayout::Packed { .. })
                && matches!(padded, TokenLayout::Padded { .. })
        );
        let (x32, x64) = (
            TokenLayout::padded(lens.clone(), &Device::Cpu)?.pack(&x)?,
            f64s(&x),
        );
        assert_eq!(x32.dims(), packed.shape(hidden).as_slice());

        let q32 = qkv.forward(&x32, &packed, Epilogue::None)?;
        let q64 = qkv64.forward(&x64, &padded, Epilogue::None)?;
        assert!(max_diff(&q32, &q64, &padded) < 1e-5);
        // 6 heads of 8: AVX2 tiles where the CPU has them; 4 heads of 12: GEMM calls.
        for heads in [6, 4] {
            let attn = max_diff(
                &attention(&q32, &packed, heads)?,
                &attention(&q64, &padded, heads)?,
                &padded,
            );
            assert!(
                attn < 1e-5,
                "attention with {heads} heads differs by {attn}"
            );
        }
        let ctx32 = attention(&q32, &packed, heads)?;
        let ctx64 = attention(&q64, &padded, heads)?;
        let g32 = up.forward(&x32, &packed, Epilogue::Gelu)?;
        let g64 = up64.forward(&x64, &padded, Epilogue::Gelu)?;
        assert!(max_diff(&g32, &g64, &padded) < 1e-5);
        let o = dense(hidden, hidden, 20);
        let n32 = o.forward(&ctx32, &packed, Epilogue::AddNorm(&x32, &norm))?;
        // candle's fused layer_norm has no f64 kernel: the definition, spelled out.
        let y = (as64(&o).forward(&ctx64, &padded, Epilogue::None)? + &x64)?;
        let centred = y.broadcast_sub(&y.mean_keepdim(D::Minus1)?)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let n64 = centred
            .broadcast_div(&(var + norm.eps as f64)?.sqrt()?)?
            .broadcast_mul(&f64s(&norm.weight))?
            .broadcast_add(&f64s(&norm.bias))?;
        let normed = max_diff(&n32, &n64, &padded);
        assert!(normed < 1e-5, "dense + residual + norm differs by {normed}");
        Ok(())
    }
}
