//! The gated MLP, down(act(x · Gᵀ) · (x · Uᵀ)), for a prompt's rows on the CPU: its middle a
//! block of columns at a time, and the padding rows left out once for all three products.
//!
//! Computed whole, the gate's and up's products are two (rows × MLP width) f32 tensors alive
//! at once next to the middle: for a batch of 4,096 tokens of a 13B (width 13,824) 226 MB each,
//! 0.68 GB with the middle — the largest part of a batch's working set, which grows with
//! `--batch-tokens` — and the down projection then gathered the middle's real rows into a copy
//! of it. Here the gate's and up's rows of one block of columns are multiplied (each weight row
//! expanded once, as whole products expand it), the activation writes that block of the
//! middle, which is kept whole for the down projection only, without its padding rows. Every
//! value is the bits of the whole products' (a product's value does not depend on the block
//! its weight row is multiplied in, nor on the other rows: `prefill_gemm`; tested here).

use crate::model::decoder::swiglu::silu_mul_into;
use crate::model::load::config::Activation;
use crate::model::quant::{
    self, DECODE_ROWS, EXPANDED_VALUES, Matrix, Operand, Plan, PrefillGemm, Products, equal_blocks,
    on_real_rows, packed_product,
};
use candle_core::op::{Gelu, UnaryOpT};
use candle_core::{Result, Tensor, bail};
use rayon::prelude::*;

/// The most values of a block's gate (and up) products: 32 MiB of f32 each.
const BLOCK_VALUES: usize = 1 << 23;

/// The three matrices of a gated MLP.
pub struct GatedWeights<'a> {
    pub gate: &'a Matrix,
    pub up: &'a Matrix,
    pub down: &'a Matrix,
}

impl GatedWeights<'_> {
    /// Whether `forward` computes this MLP: a prompt's rows (more than a decoding step's,
    /// products by row count) whose three products `prefill_gemm` computes.
    pub fn takes(&self, x: &Tensor, plan: Plan) -> bool {
        let rows = x.elem_count() / x.dims().last().copied().unwrap_or(1).max(1);
        (plan.products == Products::Prefill
            || plan.products == Products::ByRowCount && rows > DECODE_ROWS)
            && [self.gate, self.up, self.down]
                .iter()
                .all(|w| quant::prefill_takes(w, x))
    }

    /// down(act(x · Gᵀ) · (x · Uᵀ)) for x (rows, in): (rows, out), padding rows (run 0) zeros;
    /// the bits of the whole products and `silu_mul` (or candle's tanh GELU then product).
    /// x is freed once its real rows are gathered, where nothing else holds it.
    pub fn forward(
        &self,
        x: Tensor,
        runs: Option<&[u32]>,
        act: Activation,
        gemm: PrefillGemm,
    ) -> Result<Tensor> {
        self.forward_in_blocks(x, runs, act, gemm, BLOCK_VALUES)
    }

    /// `forward` with the products `gemm` says, the middle in blocks of at most
    /// `block_values` products a matrix.
    fn forward_in_blocks(
        &self,
        x: Tensor,
        runs: Option<&[u32]>,
        act: Activation,
        gemm: PrefillGemm,
        block_values: usize,
    ) -> Result<Tensor> {
        let (width, k) = self.gate.dims()?;
        let (out, down_k) = self.down.dims()?;
        if self.up.dims()? != (width, k) || down_k != width {
            bail!(
                "gated MLP: gate {:?}, up {:?} and down {:?} do not chain",
                self.gate.dims()?,
                self.up.dims()?,
                self.down.dims()?
            );
        }
        on_real_rows(x, k, out, runs, |lhs, rows, room| {
            let mid = self.middle(lhs, act, gemm, block_values)?;
            debug_assert_eq!(mid.len(), rows * width);
            packed_product(self.down, &mid, room, gemm)
        })
    }

    /// act(lhs · Gᵀ) · (lhs · Uᵀ) for lhs (rows × k), a block of the width at a time.
    fn middle(
        &self,
        lhs: &[f32],
        act: Activation,
        gemm: PrefillGemm,
        block_values: usize,
    ) -> Result<Vec<f32>> {
        let (width, k) = self.gate.dims()?;
        let rows = lhs.len() / k.max(1);
        let g = Operand::new(self.gate, lhs, k, gemm, None)?;
        let u = Operand::new(self.up, lhs, k, gemm, Some(&g))?;
        let mut mid = vec![0f32; rows * width];
        for range in equal_blocks(width, blocks(width, k, rows, block_values)) {
            let n = range.len();
            let gs = g.rows_product(range.clone(), rows)?;
            let us = u.rows_product(range.clone(), rows)?;
            mid.par_chunks_mut(width)
                .zip(gs.par_chunks(n).zip(us.par_chunks(n)))
                .for_each(|(to, (g, u))| activate(act, g, u, &mut to[range.clone()]));
        }
        Ok(mid)
    }
}

/// out = act(g) · u, value by value as the whole tensors' ops compute it.
fn activate(act: Activation, g: &[f32], u: &[f32], out: &mut [f32]) {
    match act {
        Activation::Silu => silu_mul_into(g, u, out),
        // candle's tanh GELU in f32 (`Tensor::gelu`, no MKL), then the product.
        Activation::GeluTanh => {
            for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
                *o = Gelu::f32(g) * u;
            }
        }
    }
}

/// Blocks of the width: none of more than `block_values` products a matrix (nor of more weight
/// values than one expansion holds, nor of fewer than `BLOCK_ROWS_MIN` weight rows).
fn blocks(width: usize, k: usize, rows: usize, block_values: usize) -> usize {
    let at_least = (rows * width).div_ceil(block_values.max(1));
    quant::weight_blocks(width, k, EXPANDED_VALUES, at_least)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decoder::swiglu::silu_mul;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{DType, Device};
    use std::sync::Arc;

    fn quantized(w: &Tensor, dtype: GgmlDType) -> Matrix {
        Matrix::Quantized(Arc::new(QTensor::quantize(w, dtype).unwrap()))
    }

    /// x · Wᵀ whole: candle's expansion and `matmul` in f32, else the whole matrix's product as
    /// `gemm` computes it (bf16 GEMM, 8-bit products).
    fn whole(w: &Matrix, x: &Tensor, gemm: PrefillGemm) -> Tensor {
        if gemm == PrefillGemm::F32 {
            return x
                .matmul(&w.expand(DType::F32).unwrap().t().unwrap())
                .unwrap();
        }
        let (width, k) = w.dims().unwrap();
        let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        let rows = xs.len() / k;
        let y = Operand::new(w, &xs, k, gemm, None)
            .unwrap()
            .rows_product(0..width, rows)
            .unwrap();
        Tensor::from_vec(y, (rows, width), &Device::Cpu).unwrap()
    }

    /// Blocks of 256 columns of a 768-wide MLP (and the whole width in one block) give the bits
    /// of the whole gate and up products, the activation and the whole down product, for dense
    /// and quantized matrices (gate and up of one type, or of two), in f32, bf16 and 8-bit
    /// products, SiLU and tanh GELU; padding rows are zeros and the other rows keep their bits.
    #[test]
    fn blocks_of_columns_are_the_whole_products_then_the_activation() {
        let dev = Device::Cpu;
        let (width, k, out, rows) = (768, 256, 128, 21);
        let randn = |shape: (usize, usize)| Tensor::randn(0f32, 1.0, shape, &dev).unwrap();
        let (g, u, d, x) = (
            randn((width, k)),
            randn((width, k)),
            randn((out, width)),
            randn((rows, k)),
        );
        let bf16 = |t: &Tensor| Matrix::Dense(t.to_dtype(DType::BF16).unwrap());
        let cases = [
            ("f32", [g.clone(), u.clone(), d.clone()].map(Matrix::Dense)),
            ("bf16", [bf16(&g), bf16(&u), bf16(&d)]),
            (
                "Q4_0",
                [
                    quantized(&g, GgmlDType::Q4_0),
                    quantized(&u, GgmlDType::Q4_0),
                    quantized(&d, GgmlDType::Q8_0),
                ],
            ),
            (
                "Q4K/Q6K",
                [
                    quantized(&g, GgmlDType::Q4K),
                    quantized(&u, GgmlDType::Q6K),
                    quantized(&d, GgmlDType::Q6K),
                ],
            ),
            (
                "Q4K",
                [
                    quantized(&g, GgmlDType::Q4K),
                    quantized(&u, GgmlDType::Q4K),
                    quantized(&d, GgmlDType::Q4K),
                ],
            ),
        ];
        let runs: Vec<u32> = (0..rows as u32)
            .map(|i| if i % 4 == 1 || i > 17 { 0 } else { 5 })
            .collect();
        for gemm in PrefillGemm::ALL.into_iter().filter(|g| g.available()) {
            for (name, [gate, up, down]) in &cases {
                let weights = GatedWeights { gate, up, down };
                let (wg, wu) = (whole(gate, &x, gemm), whole(up, &x, gemm));
                for act in [Activation::Silu, Activation::GeluTanh] {
                    let mid = match act {
                        Activation::Silu => silu_mul(&wg, &wu).unwrap(),
                        Activation::GeluTanh => (wg.gelu().unwrap() * &wu).unwrap(),
                    };
                    let want = whole(down, &mid, gemm).to_vec2::<f32>().unwrap();
                    for (values, runs) in [(256 * rows, None), (usize::MAX, Some(&runs[..]))] {
                        let got = weights
                            .forward_in_blocks(x.clone(), runs, act, gemm, values)
                            .unwrap()
                            .to_vec2::<f32>()
                            .unwrap();
                        let case = format!("{gemm:?}, {name}, {act:?}, {values}");
                        for (r, (got, want)) in got.iter().zip(&want).enumerate() {
                            if runs.is_some_and(|runs| runs[r] == 0) {
                                assert!(got.iter().all(|&v| v == 0.0), "{case}: padding {r}");
                            } else {
                                let same = got
                                    .iter()
                                    .zip(want)
                                    .all(|(a, b)| a.to_bits() == b.to_bits());
                                assert!(same, "{case}: row {r}");
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(blocks(width, k, rows, 256 * rows), 3);
    }
}
