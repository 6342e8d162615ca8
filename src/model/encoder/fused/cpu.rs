//! hyoka's CPU kernels for the fused blocks (f32, contiguous). Dense layers are one GEMM of the
//! `gemm` crate (the one behind candle's CPU matmul) writing straight into the output, then one
//! pass per row adding bias and residual and applying GELU or LayerNorm while the row is in
//! cache. Attention runs one sequence per task over its real tokens only: in AVX2 register
//! tiles (`avx2`) where the CPU and head width allow, else its two products per head as
//! single-threaded GEMMs on strided views of the packed q|k|v rows.

use crate::model::backend::cpu_tensor::Data;
use crate::model::encoder::fused::math;
use crate::model::encoder::fused::parts::{Dense, Epilogue, LayerNorm};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor, bail};
use gemm::Parallelism;
use rayon::prelude::*;

/// Rows handed to one task by the row-wise pass after a dense layer's GEMM.
const ROWS_PER_TASK: usize = 64;

/// Whether these kernels run for tensors of `dtype` on `device`.
pub fn takes(device: &candle_core::Device, dtype: DType) -> bool {
    device.is_cpu() && dtype == DType::F32
}

fn contiguous<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else {
        bail!("{op}: f32 only")
    };
    let Some((start, end)) = l.contiguous_offsets() else {
        bail!("{op}: contiguous input only")
    };
    Ok(&data[start..end])
}

/// Defines `$name` as `$body` compiled twice, for AVX2 + FMA (taken when the CPU has them) and
/// for the baseline. The crate targets baseline x86-64 (SSE2) so that one binary runs
/// everywhere; `gemm` dispatches at run time, and these row loops get 8-wide vectors the same way.
macro_rules! multiversion {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) = $body:ident) => {
        $(#[$doc])*
        fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) {
                    $body($($arg),*)
                }
                if crate::model::backend::cpu::features().avx2_fma {
                    // Safety: the CPU has the features `avx2` is compiled for.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

/// Every core on one GEMM, unless the caller already runs on the thread pool (batches side by
/// side, one per core): then each GEMM stays on its thread.
fn threads() -> Parallelism {
    match rayon::current_thread_index() {
        Some(_) => Parallelism::None,
        None => Parallelism::Rayon(rayon::current_num_threads()),
    }
}

pub fn dense(dense: &Dense, x: &Tensor, epilogue: Epilogue) -> Result<Tensor> {
    let x = x.contiguous()?;
    match epilogue {
        Epilogue::None => x.apply_op1_no_bwd(&DenseOp {
            dense,
            gelu: false,
            norm: None,
        }),
        Epilogue::Gelu => x.apply_op1_no_bwd(&DenseOp {
            dense,
            gelu: true,
            norm: None,
        }),
        Epilogue::AddNorm(residual, norm) => x.apply_op2_no_bwd(
            &residual.contiguous()?,
            &DenseOp {
                dense,
                gelu: false,
                norm: Some(norm),
            },
        ),
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

    fn run(
        &self,
        x: &[f32],
        shape: &Shape,
        residual: Option<&[f32]>,
    ) -> Result<(CpuStorage, Shape)> {
        let (outs, ins) = self.dense.weight.dims2()?;
        let dims = shape.dims();
        if dims.last() != Some(&ins) || ins == 0 {
            bail!("{}: input {shape:?}, weight ({outs}, {ins})", Self::NAME);
        }
        let rows = x.len() / ins;
        if residual.is_some_and(|r| r.len() != rows * outs) {
            bail!(
                "{}: residual of {} values for {rows} × {outs}",
                Self::NAME,
                residual.map_or(0, <[f32]>::len)
            );
        }
        let (weight, bias) = (
            Data::of(&self.dense.weight, Self::NAME)?,
            Data::of(&self.dense.bias, Self::NAME)?,
        );
        let norm = match self.norm {
            Some(n) => Some((
                Data::of(&n.weight, Self::NAME)?,
                Data::of(&n.bias, Self::NAME)?,
                n.eps,
            )),
            None => None,
        };
        let mut out: Vec<f32> = Vec::with_capacity(rows * outs);
        // Safety: out has room for rows × outs (row stride outs), x is rows × ins (row stride
        // ins), w (outs, ins) is read as its transpose: element (k, n) at n·ins + k. Without
        // read_dst gemm writes every element of out and reads none, so out is initialised
        // when its length is set. Nothing aliases.
        unsafe {
            gemm::gemm(
                rows,
                outs,
                ins,
                out.as_mut_ptr(),
                1,
                outs as isize,
                false,
                x.as_ptr(),
                1,
                ins as isize,
                weight.slice().as_ptr(),
                ins as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                threads(),
            );
            out.set_len(rows * outs);
        }
        // Bias, residual and the epilogue in one pass per row, while the row is in cache.
        let epilogue = RowEpilogue {
            bias: bias.slice(),
            gelu: self.gelu,
            norm: norm
                .as_ref()
                .map(|(w, b, eps)| (w.slice(), b.slice(), *eps)),
        };
        out.par_chunks_mut(outs * ROWS_PER_TASK)
            .enumerate()
            .for_each(|(chunk, dst)| {
                let residual = residual.map(|r| {
                    &r[chunk * ROWS_PER_TASK * outs..chunk * ROWS_PER_TASK * outs + dst.len()]
                });
                finish_rows(dst, residual, &epilogue);
            });
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

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.run(
            contiguous(s1, l1, Self::NAME)?,
            l1.shape(),
            Some(contiguous(s2, l2, Self::NAME)?),
        )
    }
}

/// What a dense layer's rows get after the GEMM.
struct RowEpilogue<'a> {
    bias: &'a [f32],
    gelu: bool,
    /// LayerNorm weight, bias and epsilon.
    norm: Option<(&'a [f32], &'a [f32], f32)>,
}

multiversion!(
    /// Rows of a dense layer's output (`dst`, of the bias's width): + bias (+ residual), then
    /// GELU or LayerNorm.
    fn finish_rows(dst: &mut [f32], residual: Option<&[f32]>, e: &RowEpilogue) = finish_rows_body
);

#[inline(always)]
fn finish_rows_body(dst: &mut [f32], residual: Option<&[f32]>, e: &RowEpilogue) {
    let width = e.bias.len();
    for (r, row) in dst.chunks_exact_mut(width).enumerate() {
        row.iter_mut().zip(e.bias).for_each(|(o, b)| *o += b);
        if let Some(res) = residual {
            row.iter_mut()
                .zip(&res[r * width..(r + 1) * width])
                .for_each(|(o, x)| *o += x);
        }
        if e.gelu {
            row.iter_mut().for_each(|v| *v = math::gelu_f32(*v));
        }
        if let Some((w, b, eps)) = e.norm {
            layer_norm_row(row, w, b, eps);
        }
    }
}

/// Sum with eight independent accumulators, so that the loop vectorises.
#[inline(always)]
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

/// Dot product with eight independent accumulators.
#[inline(always)]
fn dot(xs: &[f32], ys: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (cx, cy) = (xs.chunks_exact(8), ys.chunks_exact(8));
    let tail: f32 = cx
        .remainder()
        .iter()
        .zip(cy.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in cx.zip(cy) {
        for ((a, x), y) in acc.iter_mut().zip(x).zip(y) {
            *a += x * y;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// LayerNorm of one row in place (two passes: mean, then the centred variance).
#[inline(always)]
fn layer_norm_row(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    row.iter_mut().for_each(|x| *x -= mean);
    let var = dot(row, row) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((x, w), b) in row.iter_mut().zip(w).zip(b) {
        *x = *x * inv * w + b;
    }
}

/// Softmax of one row in place.
#[inline(always)]
fn softmax_row(row: &mut [f32]) {
    // f32::max's NaN rules keep a fold scalar; eight lanes of plain comparisons vectorise.
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = row.chunks_exact(8);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = lanes.iter().fold(tail, |m, &x| if x > m { x } else { m });
    row.iter_mut().for_each(|x| *x = math::exp_f32(*x - max));
    let inv = 1.0 / sum(row);
    row.iter_mut().for_each(|x| *x *= inv);
}

pub fn attention(qkv: &Tensor, lens: &[usize], heads: usize) -> Result<Tensor> {
    qkv.contiguous()?
        .apply_op1_no_bwd(&AttentionOp { lens, heads })
}

multiversion!(
    /// One sequence's attention with `heads` heads of width `h`: `seq` its len q|k|v rows
    /// (3h each), `ctx` its len context rows (h each).
    fn attend(ctx: &mut [f32], seq: &[f32], len: usize, heads: usize, h: usize) = attend_body
);

#[inline(always)]
fn attend_body(ctx: &mut [f32], seq: &[f32], len: usize, heads: usize, h: usize) {
    if len == 0 {
        return;
    }
    let (d, h3) = (h / heads, 3 * h);
    let scale = 1.0 / (d as f32).sqrt();
    let mut scores = vec![0f32; len * len];
    for head in 0..heads {
        let (q, k, v) = (
            &seq[head * d..],
            &seq[h + head * d..],
            &seq[2 * h + head * d..],
        );
        // Safety: rows i < len of q, k, v are at i·h3 (+ column < d) inside `seq`; scores is
        // len × len; ctx rows i < len at i·h + head·d (+ column < d).
        unsafe {
            // scores = scale · Q Kᵀ: Kᵀ element (c, j) is k[j·h3 + c].
            gemm::gemm(
                len,
                len,
                d,
                scores.as_mut_ptr(),
                1,
                len as isize,
                false,
                q.as_ptr(),
                1,
                h3 as isize,
                k.as_ptr(),
                h3 as isize,
                1,
                0.0,
                scale,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
        scores.chunks_exact_mut(len).for_each(softmax_row);
        unsafe {
            // ctx = P V.
            gemm::gemm(
                len,
                d,
                len,
                ctx[head * d..].as_mut_ptr(),
                1,
                h as isize,
                false,
                scores.as_ptr(),
                1,
                len as isize,
                v.as_ptr(),
                1,
                h3 as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    }
}

/// One sequence's attention: AVX2 register tiles where the CPU and head width allow.
fn attend_sequence(ctx: &mut [f32], seq: &[f32], len: usize, heads: usize, h: usize) {
    #[cfg(target_arch = "x86_64")]
    if crate::model::encoder::fused::avx2::available(h / heads) {
        // Safety: `available` holds; the slices are one sequence's len rows (cpu_fwd).
        return unsafe {
            crate::model::encoder::fused::avx2::attend(ctx, seq, len, heads, h, softmax_row)
        };
    }
    attend(ctx, seq, len, heads, h)
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
        let (tokens, h3) = l.shape().dims2()?;
        let h = h3 / 3;
        if self.lens.iter().sum::<usize>() != tokens || h % self.heads != 0 || 3 * h != h3 {
            bail!(
                "{}: packed qkv {:?} does not fit {} heads and lengths {:?}",
                self.name(),
                l.shape(),
                self.heads,
                self.lens
            );
        }
        let mut out = vec![0f32; tokens * h];
        // Each sequence's rows of the output and of qkv, as disjoint slices for the tasks.
        let mut tasks = Vec::with_capacity(self.lens.len());
        let (mut rest, mut seqs) = (&mut out[..], qkv);
        for &len in self.lens {
            let (ctx, tail) = std::mem::take(&mut rest).split_at_mut(len * h);
            let (seq, more) = seqs.split_at(len * h3);
            tasks.push((ctx, seq, len));
            (rest, seqs) = (tail, more);
        }
        tasks
            .into_par_iter()
            .for_each(|(ctx, seq, len)| attend_sequence(ctx, seq, len, self.heads, h));
        Ok((CpuStorage::F32(out), Shape::from((tokens, h))))
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn avx2_attention_matches_the_gemm_path_for_every_tile_remainder() {
        let mut rng = crate::rng::SplitMix64(5);
        for (heads, d) in [(2, 8), (3, 16), (2, 32)] {
            if !crate::model::encoder::fused::avx2::available(d) {
                eprintln!("no AVX2/FMA on this CPU: only the GEMM path is tested");
                return;
            }
            let h = heads * d;
            for len in 1..=13 {
                let seq: Vec<f32> = (0..len * 3 * h)
                    .map(|_| (rng.next_f64() * 4.0 - 2.0) as f32)
                    .collect();
                let (mut tiles, mut gemms) = (vec![0f32; len * h], vec![0f32; len * h]);
                // Safety: available(d) holds; seq is len·3h, tiles len·h.
                unsafe {
                    crate::model::encoder::fused::avx2::attend(
                        &mut tiles,
                        &seq,
                        len,
                        heads,
                        h,
                        softmax_row,
                    )
                };
                attend(&mut gemms, &seq, len, heads, h);
                let worst = tiles
                    .iter()
                    .zip(&gemms)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst < 1e-5,
                    "{heads} heads of {d}, len {len}: differs by {worst}"
                );
            }
        }
    }
}
