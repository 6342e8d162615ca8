//! softmax(scores + mask) over the keys, for attention over a prompt.
//!
//! Through candle this is a mask add over the whole score block (a new tensor), then
//! `softmax_last_dim`, whose `expf` is one libm call per score: together about a fifth of
//! prefill attention (perf). On the CPU in f32 both run here in one pass per row, with the
//! exponentials eight at a time (`expf_lanes`) and candle's own max and sum, so the result is
//! candle's to the bit where libm is glibc's. Elsewhere candle's own ops run.

use crate::model::attention::expf_lanes::exp_in_place;
use candle_core::cpu::kernels::VecOps;
use candle_core::{CpuStorage, DType, InplaceOp2, Layout, Result, Tensor, bail};
use rayon::prelude::*;

/// scores (rows, kv_heads, group, queries, keys), mask (rows, 1, queries, keys) of 0 and
/// `MASKED`: softmax over the last dimension of scores + mask, in f32. On the CPU the result
/// is written over the scores when they are f32 already (an 8B prefill block: 0.8 GB not
/// allocated twice), so they are taken by value: pass scores nothing else reads.
pub fn masked_softmax(scores: Tensor, mask: &Tensor) -> Result<Tensor> {
    let (rows, kv, group, n, keys) = scores.dims5()?;
    if !scores.device().is_cpu() {
        let scores = scores
            .to_dtype(DType::F32)?
            .broadcast_add(&mask.unsqueeze(2)?)?;
        return candle_nn::ops::softmax_last_dim(&scores);
    }
    if mask.dims() != [rows, 1, n, keys] {
        bail!(
            "attention mask {:?} for scores {:?}",
            mask.dims(),
            scores.dims()
        );
    }
    let scores = scores.to_dtype(DType::F32)?.contiguous()?;
    let mask = mask.to_dtype(DType::F32)?.contiguous()?;
    if keys > 0 {
        scores.inplace_op2(
            &mask,
            &InPlace {
                per_row: kv * group * n,
                n,
                keys,
            },
        )?;
    }
    Ok(scores)
}

/// The softmax over each run of `keys` scores, in place; mask row (r, q) for score run `at`
/// with r = at / per_row, q = at % n.
struct InPlace {
    per_row: usize,
    n: usize,
    keys: usize,
}

impl InplaceOp2 for InPlace {
    fn name(&self) -> &'static str {
        "masked-softmax"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, sl: &Layout, m: &CpuStorage, ml: &Layout) -> Result<()> {
        let (CpuStorage::F32(s), CpuStorage::F32(m)) = (s, m) else {
            bail!("masked softmax: f32 scores and mask expected")
        };
        let (count, mask_count) = (sl.shape().elem_count(), ml.shape().elem_count());
        let s = &mut s[sl.start_offset()..][..count];
        let m = &m[ml.start_offset()..][..mask_count];
        let (per_row, n, keys) = (self.per_row, self.n, self.keys);
        s.par_chunks_mut(keys).enumerate().for_each(|(at, dst)| {
            let (r, q) = (at / per_row, at % n);
            lanes::add(dst, &m[(r * n + q) * keys..][..keys]);
            // candle's softmax_last_dim: its max, e^(x − max), its sum, one division each.
            let mut max = f32::NEG_INFINITY;
            // SAFETY: dst holds `keys` > 0 values.
            unsafe { f32::vec_reduce_max(dst.as_ptr(), &mut max, keys) };
            lanes::subtract(dst, max);
            exp_in_place(dst);
            let mut sum = 0f32;
            // SAFETY: as above.
            unsafe { f32::vec_reduce_sum(dst.as_ptr(), &mut sum, keys) };
            lanes::divide(dst, sum);
        });
        Ok(())
    }
}

/// The element-wise steps, each value rounded once whatever the vector width: compiled for
/// AVX2 where the CPU has it (the default x86-64 target gives four lanes; these loops are
/// most of what the softmax spends outside `expf`).
mod lanes {
    macro_rules! elementwise {
        ($(#[$doc:meta] fn $name:ident($($arg:ident: $ty:ty),*) $body:block)*) => {$(
            #[$doc]
            pub fn $name($($arg: $ty),*) {
                #[inline(always)]
                fn body($($arg: $ty),*) $body
                #[cfg(target_arch = "x86_64")]
                {
                    #[target_feature(enable = "avx2")]
                    fn wide($($arg: $ty),*) {
                        body($($arg),*)
                    }
                    if crate::model::backend::cpu::features().avx2_fma {
                        // SAFETY: AVX2 was just detected.
                        return unsafe { wide($($arg),*) };
                    }
                }
                body($($arg),*)
            }
        )*};
    }

    elementwise! {
        /// score + mask.
        fn add(scores: &mut [f32], mask: &[f32]) {
            for (s, m) in scores.iter_mut().zip(mask) {
                *s += m;
            }
        }
        /// x − max.
        fn subtract(xs: &mut [f32], max: f32) {
            xs.iter_mut().for_each(|x| *x -= max);
        }
        /// x / sum.
        fn divide(xs: &mut [f32], sum: f32) {
            xs.iter_mut().for_each(|x| *x /= sum);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::attention::plan::MASKED;
    use candle_core::Device;

    /// candle's mask add and `softmax_last_dim`, on scores of every scale, masks with whole
    /// masked rows, and key counts that leave tails of every length.
    #[test]
    fn is_candles_mask_add_and_softmax() {
        let dev = Device::Cpu;
        for (rows, kv, group, n, keys) in [(2, 2, 3, 5, 37), (1, 1, 2, 4, 8), (3, 2, 1, 1, 101)] {
            let scale = Tensor::new(&[0.1f32, 1.0, 30.0], &dev).unwrap();
            let scores = Tensor::randn(0f32, 1.0, (rows, kv, group, n, keys), &dev)
                .unwrap()
                .broadcast_mul(&scale.narrow(0, keys % 3, 1).unwrap())
                .unwrap();
            let mut m = vec![0f32; rows * n * keys];
            for (i, v) in m.iter_mut().enumerate() {
                let (row, key) = (i / keys, i % keys);
                // Causal-like masks, and the first query row of row 0 masked whole.
                if key > row % n + keys / 2 || (row == 0 && n > 1) {
                    *v = MASKED;
                }
            }
            let mask = Tensor::from_vec(m, (rows, 1, n, keys), &dev).unwrap();
            // A copy: the softmax is written over the scores it is given.
            let got = masked_softmax(scores.copy().unwrap(), &mask).unwrap();
            let added = scores.broadcast_add(&mask.unsqueeze(2).unwrap()).unwrap();
            let want = candle_nn::ops::softmax_last_dim(&added).unwrap();
            let (got, want) = (
                got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                want.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            );
            // glibc's expf bits (see `expf_lanes`); elsewhere an ulp or two of it.
            let exact = cfg!(all(target_os = "linux", target_env = "gnu"));
            for (g, w) in got.iter().zip(&want) {
                if exact {
                    assert_eq!(g.to_bits(), w.to_bits(), "{g} against {w}");
                } else {
                    assert!((g - w).abs() <= 1e-6, "{g} against {w}");
                }
            }
        }
    }
}
