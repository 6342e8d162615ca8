//! silu(gate) · up, the gated MLP's middle, in one pass.
//!
//! Through candle this is two passes and two fresh tensors (silu, then the product), with one
//! libm `expf` call per value. On the CPU in f32 it runs here in one pass over chunks, the
//! exponentials eight at a time (`expf_lanes`): per value candle's own operations,
//! g / (1 + e^(−g)) then · u, so the result is candle's to the bit where libm is glibc's.
//! Elsewhere candle's own ops run.

use crate::model::attention::expf_lanes::exp_in_place;
use candle_core::{DType, Result, Storage, Tensor, bail};
use rayon::prelude::*;

/// Values per task: large enough to amortise a task, small enough to spread a decoding row.
const CHUNK: usize = 4096;

/// silu(gate) · up for gate and up of one shape.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let cpu_f32 = gate.device().is_cpu() && gate.dtype() == DType::F32 && up.dtype() == DType::F32;
    if !cpu_f32 || gate.dims() != up.dims() {
        return candle_nn::ops::silu(gate)? * up;
    }
    let (gate, up) = (gate.contiguous()?, up.contiguous()?);
    let mut out = vec![0f32; gate.elem_count()];
    {
        let (gs, gl) = gate.storage_and_layout();
        let (us, ul) = up.storage_and_layout();
        let (Storage::Cpu(g), Storage::Cpu(u)) = (&*gs, &*us) else {
            bail!("silu_mul: CPU tensors expected")
        };
        let g = &g.as_slice::<f32>()?[gl.start_offset()..][..out.len()];
        let u = &u.as_slice::<f32>()?[ul.start_offset()..][..out.len()];
        out.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK).zip(u.par_chunks(CHUNK)))
            .for_each(|(o, (g, u))| silu_mul_into(g, u, o));
    }
    Tensor::from_vec(out, gate.shape(), gate.device())
}

/// out = silu(g) · u, value by value on this thread (each value the same bits whatever the
/// slices' lengths: the exponentials are glibc's, `expf_lanes`).
pub fn silu_mul_into(g: &[f32], u: &[f32], out: &mut [f32]) {
    assert!(
        g.len() == out.len() && u.len() == out.len(),
        "silu_mul_into: slice lengths"
    );
    out.iter_mut().zip(g).for_each(|(o, g)| *o = -g);
    exp_in_place(out);
    for ((o, g), u) in out.iter_mut().zip(g).zip(u) {
        *o = (g / (1.0 + *o)) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// candle's `silu` then its product, on values of every scale (and a tail past the chunks).
    #[test]
    fn is_candles_silu_then_product() {
        let dev = Device::Cpu;
        let n = 7 * 1777;
        let scale = Tensor::arange(0u32, n as u32, &dev)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .affine(60.0 / n as f64, 0.01)
            .unwrap();
        let gate = (Tensor::randn(0f32, 1.0, (n,), &dev).unwrap() * &scale).unwrap();
        let up = Tensor::randn(0f32, 1.0, (n,), &dev).unwrap();
        let (gate, up) = (
            gate.reshape((7, n / 7)).unwrap(),
            up.reshape((7, n / 7)).unwrap(),
        );
        let got = silu_mul(&gate, &up).unwrap().flatten_all().unwrap();
        let want = (candle_nn::ops::silu(&gate).unwrap() * &up)
            .unwrap()
            .flatten_all()
            .unwrap();
        let (got, want) = (
            got.to_vec1::<f32>().unwrap(),
            want.to_vec1::<f32>().unwrap(),
        );
        let exact = cfg!(all(target_os = "linux", target_env = "gnu"));
        for (g, w) in got.iter().zip(&want) {
            if exact {
                assert_eq!(g.to_bits(), w.to_bits(), "{g} against {w}");
            } else {
                assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{g} against {w}");
            }
        }
    }
}
