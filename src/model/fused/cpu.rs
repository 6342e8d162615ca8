//! hyoka's CPU kernels for the fused blocks (f32, contiguous). GEMMs are the `gemm` crate's (the
//! one candle's CPU matmul calls) with the bias, and the residual, preloaded into the
//! destination so that the product accumulates onto them; epilogues run in place over row
//! chunks in parallel; attention runs one sequence per task over its real tokens only, its two
//! products per head as single-threaded GEMMs on strided views of the packed q|k|v rows.

use super::{math, Dense, Epilogue, LayerNorm};
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Storage, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;

/// Rows handed to one task by the row-wise passes (bias fill, GELU, LayerNorm).
const ROWS_PER_TASK: usize = 64;

pub fn applies(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32
}

fn contiguous<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else { bail!("{op}: f32 only") };
    let Some((start, end)) = l.contiguous_offsets() else { bail!("{op}: contiguous input only") };
    Ok(&data[start..end])
}

/// Runs `f` on a CPU f32 tensor's data (a weight the op holds).
fn with_data<R>(t: &Tensor, op: &str, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(s) => Ok(f(contiguous(s, layout, op)?)),
        _ => bail!("{op}: a weight is not on the CPU"),
    }
}

fn threads() -> Parallelism {
    Parallelism::Rayon(rayon::current_num_threads())
}

pub fn dense(dense: &Dense, x: &Tensor, epilogue: Epilogue) -> Result<Tensor> {
    let x = x.contiguous()?;
    match epilogue {
        Epilogue::None => x.apply_op1_no_bwd(&DenseOp { dense, gelu: false, norm: None }),
        Epilogue::Gelu => x.apply_op1_no_bwd(&DenseOp { dense, gelu: true, norm: None }),
        Epilogue::AddNorm(residual, norm) => x.apply_op2_no_bwd(&residual.contiguous()?, &DenseOp { dense, gelu: false, norm: Some(norm) }),
    }
}

struct DenseOp<'a> {
    dense: &'a Dense,
    gelu: bool,
    /// LayerNorm after adding the residual (the op's second input).
    norm: Option<&'a LayerNorm>,
}

impl DenseOp<'_> {
    const NAME: &'static str = "hyoka-dense";

    fn run(&self, x: &[f32], shape: &Shape, residual: Option<&[f32]>) -> Result<(CpuStorage, Shape)> {
        let (outs, ins) = self.dense.weight.dims2()?;
        let dims = shape.dims();
        if dims.last() != Some(&ins) {
            bail!("{}: input {shape:?}, weight ({outs}, {ins})", Self::NAME);
        }
        let rows = x.len() / ins;
        if residual.is_some_and(|r| r.len() != rows * outs) {
            bail!("{}: residual of {} values for {rows} × {outs}", Self::NAME, residual.map_or(0, <[f32]>::len));
        }
        let mut out = vec![0f32; rows * outs];
        with_data(&self.dense.bias, Self::NAME, |bias| {
            out.par_chunks_mut(outs * ROWS_PER_TASK).enumerate().for_each(|(chunk, dst)| {
                for (r, row) in dst.chunks_exact_mut(outs).enumerate() {
                    match residual {
                        Some(res) => {
                            let at = (chunk * ROWS_PER_TASK + r) * outs;
                            for ((o, b), x) in row.iter_mut().zip(bias).zip(&res[at..at + outs]) {
                                *o = b + x;
                            }
                        }
                        None => row.copy_from_slice(bias),
                    }
                }
            })
        })?;
        with_data(&self.dense.weight, Self::NAME, |w| {
            // Safety: out is rows × outs (row stride outs), x rows × ins (row stride ins), and w
            // (outs, ins) read as its transpose: element (k, n) at n·ins + k. Nothing aliases.
            unsafe {
                gemm::gemm(rows, outs, ins, out.as_mut_ptr(), 1, outs as isize, true, x.as_ptr(), 1, ins as isize, w.as_ptr(), ins as isize, 1, 1.0, 1.0, false, false, false, threads());
            }
        })?;
        if self.gelu {
            out.par_chunks_mut(outs * ROWS_PER_TASK).for_each(|c| c.iter_mut().for_each(|v| *v = math::gelu_f32(*v)));
        }
        if let Some(norm) = self.norm {
            with_data(&norm.weight, Self::NAME, |w| {
                with_data(&norm.bias, Self::NAME, |b| {
                    out.par_chunks_mut(outs * ROWS_PER_TASK).for_each(|c| c.chunks_exact_mut(outs).for_each(|row| layer_norm_row(row, w, b, norm.eps)))
                })
            })??;
        }
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("checked above") = outs;
        Ok((CpuStorage::F32(out), Shape::from(out_dims)))
    }
}

impl CustomOp1 for DenseOp<'_> {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        self.run(contiguous(s, l, Self::NAME)?, l.shape(), None)
    }
}

impl CustomOp2 for DenseOp<'_> {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        self.run(contiguous(s1, l1, Self::NAME)?, l1.shape(), Some(contiguous(s2, l2, Self::NAME)?))
    }
}

/// Sum with eight independent accumulators, so that the loop vectorises.
fn sum(xs: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// LayerNorm of one row in place (two passes: mean, then the centred variance).
fn layer_norm_row(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    row.iter_mut().for_each(|x| *x -= mean);
    let mut acc = [0f32; 8];
    let chunks = row.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().map(|x| x * x).sum();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += x * x;
        }
    }
    let var = (acc.iter().sum::<f32>() + tail) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((x, w), b) in row.iter_mut().zip(w).zip(b) {
        *x = *x * inv * w + b;
    }
}

/// Softmax of one row in place.
fn softmax_row(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    row.iter_mut().for_each(|x| *x = math::exp_f32(*x - max));
    let inv = 1.0 / sum(row);
    row.iter_mut().for_each(|x| *x *= inv);
}

pub fn attention(qkv: &Tensor, lens: &[usize], heads: usize) -> Result<Tensor> {
    qkv.contiguous()?.apply_op1_no_bwd(&AttentionOp { lens, heads })
}

struct AttentionOp<'a> {
    lens: &'a [usize],
    heads: usize,
}

impl CustomOp1 for AttentionOp<'_> {
    fn name(&self) -> &'static str {
        "hyoka-attention"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let qkv = contiguous(s, l, self.name())?;
        let (b, n, h3) = l.shape().dims3()?;
        let h = h3 / 3;
        let d = h / self.heads;
        if self.lens.len() != b || self.lens.iter().any(|&len| len > n) || d * self.heads * 3 != h3 {
            bail!("{}: qkv {:?} does not fit {} heads and lengths {:?}", self.name(), l.shape(), self.heads, self.lens);
        }
        let scale = 1.0 / (d as f32).sqrt();
        let mut out = vec![0f32; b * n * h];
        out.par_chunks_mut(n * h).zip(qkv.par_chunks(n * h3)).zip(self.lens.par_iter()).for_each(|((ctx, seq), &len)| {
            if len == 0 {
                return;
            }
            let mut scores = vec![0f32; len * len];
            for head in 0..self.heads {
                let (q, k, v) = (&seq[head * d..], &seq[h + head * d..], &seq[2 * h + head * d..]);
                // Safety: rows i < len of q, k, v are at i·h3 (+ column < d) inside `seq`;
                // scores is len × len; ctx rows i < len at i·h + head·d (+ column < d).
                unsafe {
                    // scores = scale · Q Kᵀ: Kᵀ element (c, j) is k[j·h3 + c].
                    gemm::gemm(len, len, d, scores.as_mut_ptr(), 1, len as isize, false, q.as_ptr(), 1, h3 as isize, k.as_ptr(), h3 as isize, 1, 0.0, scale, false, false, false, Parallelism::None);
                }
                scores.chunks_exact_mut(len).for_each(softmax_row);
                unsafe {
                    // ctx = P V.
                    gemm::gemm(len, d, len, ctx[head * d..].as_mut_ptr(), 1, h as isize, false, scores.as_ptr(), 1, len as isize, v.as_ptr(), 1, h3 as isize, 0.0, 1.0, false, false, false, Parallelism::None);
                }
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((b, n, h))))
    }
}
