//! Attention of a few queries over a long key/value cache — decoding steps — on the CPU in f32.
//!
//! Through candle, a step's attention is two matmuls per key head (7 queries × 1,600 cached keys
//! for Qwen2.5-0.5B), each packing its operands for the general GEMM: 27% of batch-1 decoding
//! (perf). Here every score is one dot product with a key where it lies in the cache (no copy,
//! no packing) and every output an accumulation of value rows, one task per (row, key head).
//! A row's result depends on its own queries, keys, values and mask only; the order of every
//! sum is fixed, so a sequence gets the same numbers alone or among others.

use candle_core::{CpuStorage, DType, Result, Storage, Tensor, bail};
use rayon::prelude::*;

/// Queries per row up to which decoding attention runs here (a step's tokens: one, or a few
/// forced ones; never a prompt).
pub const FEW_QUERIES: usize = 8;

/// Whether `attend` runs for these queries (n of them per row).
pub fn runs(q: &Tensor, n: usize) -> bool {
    q.device().is_cpu() && q.dtype() == DType::F32 && n <= FEW_QUERIES
}

/// softmax(q·kᵀ·scale, soft-capped, + mask)·v: q (b, heads, n, d); k and v (b, kv_heads, ≥ keys,
/// d), read over their first `keys` (views of a cache are read in place); mask (b, 1, n, keys),
/// added to the scores. The heads sharing a key head are consecutive. Returns (b, heads, n, d).
pub fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &Tensor,
    keys: usize,
    scale: f64,
    softcap: Option<f64>,
) -> Result<Tensor> {
    let (b, heads, n, d) = q.dims4()?;
    let kv_heads = k.dim(1)?;
    let group = heads / kv_heads;
    // Scaled before the product, as the general path does.
    let qs: Vec<f32> = (q * scale)?.flatten_all()?.to_vec1()?;
    let mask: Vec<f32> = mask.flatten_all()?.to_vec1()?;
    if mask.len() != b * n * keys {
        bail!(
            "few-query attention: a mask of {} values for {b}×{n}×{keys}",
            mask.len()
        );
    }
    let (ks, kl) = k.storage_and_layout();
    let (vs, vl) = v.storage_and_layout();
    let (Storage::Cpu(CpuStorage::F32(kd)), Storage::Cpu(CpuStorage::F32(vd))) = (&*ks, &*vs)
    else {
        bail!("few-query attention: f32 keys and values on the CPU only")
    };
    let (kst, vst) = (kl.stride(), vl.stride());
    if kst[3] != 1 || vst[3] != 1 || k.dim(2)? < keys || v.dim(2)? < keys {
        bail!("few-query attention: keys and values need unit stride in their last dimension");
    }
    let row_at = |st: &[usize], off: usize, r: usize, h: usize, j: usize| {
        off + r * st[0] + h * st[1] + j * st[2]
    };
    let (k_off, v_off) = (kl.start_offset(), vl.start_offset());
    let kernels = Kernels::for_this_cpu();
    let parts: Vec<Vec<f32>> = (0..b * kv_heads)
        .into_par_iter()
        .map(|task| {
            let (r, h) = (task / kv_heads, task % kv_heads);
            let mut out = vec![0f32; group * n * d];
            let mut scores = vec![0f32; keys];
            for g in 0..group {
                for i in 0..n {
                    let at = ((r * heads + h * group + g) * n + i) * d;
                    let query = &qs[at..at + d];
                    for (j, s) in scores.iter_mut().enumerate() {
                        let kr = row_at(kst, k_off, r, h, j);
                        *s = (kernels.dot)(query, &kd[kr..kr + d]);
                    }
                    if let Some(cap) = softcap {
                        let cap = cap as f32;
                        scores.iter_mut().for_each(|s| *s = (*s / cap).tanh() * cap);
                    }
                    let m = &mask[(r * n + i) * keys..(r * n + i + 1) * keys];
                    scores.iter_mut().zip(m).for_each(|(s, m)| *s += m);
                    softmax(&mut scores);
                    let o = &mut out[(g * n + i) * d..(g * n + i + 1) * d];
                    for (j, &p) in scores.iter().enumerate() {
                        let vr = row_at(vst, v_off, r, h, j);
                        (kernels.axpy)(p, &vd[vr..vr + d], o);
                    }
                }
            }
            out
        })
        .collect();
    drop((ks, vs));
    // parts[r·kv + h] holds heads h·group.. of row r, in (head, query, d) order: concatenated
    // in task order they are (b, heads, n, d).
    let flat: Vec<f32> = parts.into_iter().flatten().collect();
    Tensor::from_vec(flat, (b, heads, n, d), q.device())
}

/// Softmax in place: max, e^(x − max), sum, divide.
fn softmax(xs: &mut [f32]) {
    let max = xs.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let mut sum = 0f32;
    for x in xs.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    xs.iter_mut().for_each(|x| *x /= sum);
}

/// The dot product and y += a·x for this CPU, chosen once per call.
struct Kernels {
    dot: fn(&[f32], &[f32]) -> f32,
    axpy: fn(f32, &[f32], &mut [f32]),
}

impl Kernels {
    fn for_this_cpu() -> Self {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features the functions are compiled for were just detected.
            return Kernels {
                dot: |a, b| unsafe { avx2::dot(a, b) },
                axpy: |p, x, y| unsafe { avx2::axpy(p, x, y) },
            };
        }
        Kernels {
            dot: crate::model::matrix::dot_lanes,
            axpy: |p, x, y| y.iter_mut().zip(x).for_each(|(y, x)| *y += p * x),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Σ aᵢbᵢ: two 8-lane accumulators, then the tail.
    #[target_feature(enable = "avx2,fma")]
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        // SAFETY (all loads): i + 16 ≤ n, resp. i + 8 ≤ n, values of both slices.
        while i + 16 <= n {
            unsafe {
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                s1 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i + 8)),
                    _mm256_loadu_ps(pb.add(i + 8)),
                    s1,
                );
            }
            i += 16;
        }
        if i + 8 <= n {
            unsafe {
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
            }
            i += 8;
        }
        let s = _mm256_add_ps(s0, s1);
        let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_movehdup_ps(h));
        let mut sum = _mm_cvtss_f32(h);
        for t in i..n {
            sum += a[t] * b[t];
        }
        sum
    }

    /// y += p·x.
    #[target_feature(enable = "avx2,fma")]
    pub fn axpy(p: f32, x: &[f32], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let pv = _mm256_set1_ps(p);
        let (px, py) = (x.as_ptr(), y.as_mut_ptr());
        let mut i = 0;
        // SAFETY: i + 8 ≤ n values of both slices.
        while i + 8 <= n {
            unsafe {
                let v = _mm256_fmadd_ps(pv, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i)));
                _mm256_storeu_ps(py.add(i), v);
            }
            i += 8;
        }
        for t in i..n {
            y[t] += p * x[t];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::batch::MASKED;
    use candle_core::{D, Device};

    /// The same attention through candle's ops (each query head against its key head's rows
    /// copied out), with keys and values read from a view of a larger cache, masked entries
    /// and a soft cap.
    #[test]
    fn matches_candles_ops_on_cache_views() {
        let dev = Device::Cpu;
        let (b, kv, group, d, cap, keys) = (2, 2, 3, 40, 50, 37);
        let heads = kv * group;
        let cache_k = Tensor::randn(0f32, 1.0, (b, kv, cap, d), &dev).unwrap();
        let cache_v = Tensor::randn(0f32, 1.0, (b, kv, cap, d), &dev).unwrap();
        let (k, v) = (
            cache_k.narrow(2, 0, keys + 3).unwrap(),
            cache_v.narrow(2, 0, keys + 3).unwrap(),
        );
        for (n, softcap) in [(1, None), (3, Some(20.0)), (FEW_QUERIES, None)] {
            let q = Tensor::randn(0f32, 1.0, (b, heads, n, d), &dev).unwrap();
            // Row 1 sees only keys 5.. (as a sliding window would), row 0 all of them.
            let mut m = vec![0f32; b * n * keys];
            for i in 0..n {
                for j in 0..5 {
                    m[(n + i) * keys + j] = MASKED;
                }
            }
            let mask = Tensor::from_vec(m, (b, 1, n, keys), &dev).unwrap();
            let scale = 0.125;
            let got = attend(&q, &k, &v, &mask, keys, scale, softcap).unwrap();
            let mut want = Vec::new();
            for r in 0..b {
                for h in 0..heads {
                    let qh = q.get(r).unwrap().get(h).unwrap();
                    let kh = k.get(r).unwrap().get(h / group).unwrap().narrow(0, 0, keys);
                    let vh = v.get(r).unwrap().get(h / group).unwrap().narrow(0, 0, keys);
                    let (kh, vh) = (kh.unwrap().contiguous().unwrap(), vh.unwrap());
                    let mut s = (qh * scale).unwrap().matmul(&kh.t().unwrap()).unwrap();
                    if let Some(c) = softcap {
                        s = ((s / c).unwrap().tanh().unwrap() * c).unwrap();
                    }
                    let s = s
                        .broadcast_add(&mask.get(r).unwrap().get(0).unwrap())
                        .unwrap();
                    let p = candle_nn::ops::softmax(&s, D::Minus1).unwrap();
                    want.push(p.matmul(&vh.contiguous().unwrap()).unwrap());
                }
            }
            let want = Tensor::stack(&want, 0)
                .unwrap()
                .reshape((b, heads, n, d))
                .unwrap();
            let diff: f32 = (got - want)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar()
                .unwrap();
            assert!(diff < 1e-5, "n={n}: {diff}");
        }
    }
}
