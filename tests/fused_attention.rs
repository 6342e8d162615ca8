//! The fused attention op (`model::fused_attention`, EXPERIMENT of branch gpu-next2) against
//! attention computed in f64 from its definition: softmax(q·kᵀ·scale, softcapped, over the keys
//! a query sees by `Batch::mask`'s rule)·v. On the CPU it runs the op's CPU body (in
//! HYOKA_TEST_DTYPE); with HYOKA_TEST_DEVICE=cuda its CUDA kernels in bf16 — the tensor-core
//! one for head dims that are multiples of 16 (compute capability ≥ 8.0), the one-warp-per-query
//! one for 8 — at the shapes of real judges too (32/8 heads of 128, gemma's 256, 1,643 tokens).
//!
//! Inputs are bf16 values, so every device reads the same numbers. Bounds: the output's rounding
//! to the dtype (|y|·ε) plus the probabilities' rounding to it before the second product
//! (2ε·max|v|: a weighted mean whose weights each move by ≤ ε), plus f32 summation; the mean
//! error to a quarter of the mean bound (the CPU body, rounding only its output: 0.04). A
//! fragment, mask or tile error moves outputs by the order of the values and fails both.

mod common;

use candle_core::{DType, Device, Tensor};
use hyoka::model::fused_attention::FusedAttention;
use hyoka::rng::SplitMix64;
use rayon::prelude::*;

#[derive(Clone, Copy, Debug)]
struct Case {
    rows: usize,
    heads: usize,
    kv_heads: usize,
    d: usize,
    prefix: usize,
    len: usize,
    window: Option<usize>,
    softcap: Option<f32>,
    /// Even rows hold a trunk then two branches (the judge's layout); odd rows one sequence.
    branches: bool,
}

/// Each key's position and segment: the prefix and the trunk in segment 0, branch b in
/// segment b with positions continuing the trunk's.
fn layout(c: &Case) -> (Vec<f32>, Vec<f32>) {
    let keys = c.prefix + c.len;
    let (mut pos, mut seg) = (vec![0f32; c.rows * keys], vec![0f32; c.rows * keys]);
    for r in 0..c.rows {
        let (p, s) = (&mut pos[r * keys..][..keys], &mut seg[r * keys..][..keys]);
        let trunk = if c.branches && r % 2 == 0 {
            c.prefix + c.len / 2
        } else {
            keys
        };
        let branch = (keys - trunk).div_ceil(2).max(1);
        for i in 0..keys {
            if i < trunk {
                p[i] = i as f32;
            } else {
                let b = (i - trunk) / branch;
                p[i] = (trunk + (i - trunk) % branch) as f32;
                s[i] = (b + 1) as f32;
            }
        }
    }
    (pos, seg)
}

/// Values rounded to bf16, uniform in ±amp.
fn values(n: usize, amp: f32, seed: u64) -> Vec<f32> {
    SplitMix64(seed)
        .symmetric_f32s(n)
        .into_iter()
        .map(|x| half::bf16::from_f32(x * amp).to_f32())
        .collect()
}

/// The definition in f64: (rows, heads, len, d).
#[allow(clippy::too_many_arguments)]
fn reference(
    c: &Case,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos: &[f32],
    seg: &[f32],
    scale: f64,
) -> Vec<f64> {
    let keys = c.prefix + c.len;
    let group = c.heads / c.kv_heads;
    let per_head: Vec<Vec<f64>> = (0..c.rows * c.heads)
        .into_par_iter()
        .map(|rh| {
            let (r, h) = (rh / c.heads, rh % c.heads);
            let kv = (r * c.kv_heads + h / group) * keys * c.d;
            let (p, s) = (&pos[r * keys..][..keys], &seg[r * keys..][..keys]);
            let mut out = vec![0f64; c.len * c.d];
            for i in 0..c.len {
                let qi = &q[(rh * c.len + i) * c.d..][..c.d];
                let (pq, sq) = (p[c.prefix + i], s[c.prefix + i]);
                let seen: Vec<usize> = (0..keys)
                    .filter(|&j| {
                        let behind = p[j] - pq;
                        behind <= 0.0
                            && c.window.is_none_or(|w| behind > -(w as f32))
                            && s[j] * (s[j] - sq) == 0.0
                    })
                    .collect();
                let scores: Vec<f64> = seen
                    .iter()
                    .map(|&j| {
                        let kj = &k[kv + j * c.d..][..c.d];
                        let x = qi
                            .iter()
                            .zip(kj)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>();
                        let x = x * scale;
                        c.softcap
                            .map_or(x, |cap| (x / cap as f64).tanh() * cap as f64)
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
                let total: f64 = w.iter().sum();
                for (&j, wj) in seen.iter().zip(&w) {
                    let vj = &v[kv + j * c.d..][..c.d];
                    for (o, x) in out[i * c.d..][..c.d].iter_mut().zip(vj) {
                        *o += wj / total * *x as f64;
                    }
                }
            }
            out
        })
        .collect();
    per_head.concat()
}

fn check(c: Case, device: &Device, dtype: DType) {
    let keys = c.prefix + c.len;
    let seed = (c.d * 1_000 + c.len) as u64;
    let q = values(c.rows * c.heads * c.len * c.d, 6.0, seed);
    let k = values(c.rows * c.kv_heads * keys * c.d, 1.0, seed + 1);
    let v = values(c.rows * c.kv_heads * keys * c.d, 1.0, seed + 2);
    let (pos, seg) = layout(&c);
    let scale = 1.0 / (c.d as f32).sqrt();
    let expected = reference(&c, &q, &k, &v, &pos, &seg, scale as f64);

    let tensor = |x: &[f32], shape: (usize, usize, usize, usize)| {
        Tensor::from_slice(x, shape, device)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    let op = FusedAttention {
        key_pos: Tensor::from_slice(&pos, (c.rows, keys), device).unwrap(),
        key_seg: Tensor::from_slice(&seg, (c.rows, keys), device).unwrap(),
        prefix: c.prefix,
        window: c.window,
        scale,
        softcap: c.softcap,
    };
    let got = op
        .apply(
            &tensor(&q, (c.rows, c.heads, c.len, c.d)),
            &tensor(&k, (c.rows, c.kv_heads, keys, c.d)),
            &tensor(&v, (c.rows, c.kv_heads, keys, c.d)),
        )
        .unwrap_or_else(|e| panic!("{c:?}: {e}"));
    let got: Vec<f32> = got
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();

    let eps = match dtype {
        DType::BF16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        _ => 0.0,
    };
    let (mut worst, mut worst_share, mut total, mut total_bound) = (0f64, 0f64, 0f64, 0f64);
    for (g, e) in got.iter().zip(&expected) {
        let err = (*g as f64 - e).abs();
        // max |v| is 1; summation over ≤ 2,048 keys in f32.
        let bound = e.abs() * eps + 2.0 * eps + 1e-5;
        worst = worst.max(err);
        worst_share = worst_share.max(err / bound);
        total += err;
        total_bound += bound;
    }
    let mean_share = total / total_bound;
    eprintln!(
        "{c:?} {dtype:?}: worst |Δ| {worst:.2e} ({worst_share:.2} of its bound), mean {:.2e} ({mean_share:.3} of the mean bound)",
        total / got.len() as f64
    );
    assert!(
        worst_share <= 1.0,
        "{c:?}: worst |Δ| {worst:.3e} is {worst_share:.2}× its bound"
    );
    assert!(
        mean_share <= 0.25,
        "{c:?}: mean |Δ| is {mean_share:.3} of the mean bound"
    );
}

fn case(d: usize, len: usize) -> Case {
    Case {
        rows: 2,
        heads: 4,
        kv_heads: 2,
        d,
        prefix: 0,
        len,
        window: None,
        softcap: None,
        branches: false,
    }
}

/// Small shapes that cross every boundary: tiles of keys, blocks of queries, a last block
/// holding one query, a prefix of cached keys, branches, a window, a softcap, GQA, decoding.
fn small_cases(d: usize) -> Vec<Case> {
    vec![
        case(d, 1),
        case(d, 65),
        Case {
            prefix: 37,
            ..case(d, 130)
        },
        Case {
            branches: true,
            ..case(d, 150)
        },
        Case {
            prefix: 5,
            branches: true,
            window: Some(40),
            ..case(d, 97)
        },
        Case {
            softcap: Some(5.0),
            heads: 8,
            ..case(d, 70)
        },
        Case {
            prefix: 200,
            ..case(d, 3)
        },
    ]
}

#[test]
fn fused_attention_matches_its_definition() {
    let device = common::device();
    // The CUDA kernels take bf16 only.
    let dtype = if device.is_cuda() {
        DType::BF16
    } else {
        common::dtype()
    };
    let dims: &[usize] = if device.is_cpu() {
        &[8, 64]
    } else {
        &[8, 16, 32, 64, 128, 256]
    };
    for &d in dims {
        for c in small_cases(d) {
            check(c, &device, dtype);
        }
    }
}

/// A judge's prompt at real shape: Llama-3.1-8B's heads (32 queries, 8 keys/values of 128) and
/// gemma-2's (8/4 of 256) over 1,643 tokens, a header then two branches. On the CPU the op's
/// CPU body is too slow for this: GPU only.
#[test]
fn fused_attention_at_real_shapes() {
    let device = common::device();
    if !device.is_cuda() {
        eprintln!("skipping: real shapes run on a GPU (HYOKA_TEST_DEVICE=cuda)");
        return;
    }
    let llama = Case {
        rows: 1,
        heads: 32,
        kv_heads: 8,
        d: 128,
        branches: true,
        ..case(128, 1_643)
    };
    let gemma = Case {
        heads: 8,
        kv_heads: 4,
        d: 256,
        softcap: Some(50.0),
        window: Some(1_024),
        ..llama
    };
    for c in [
        llama,
        gemma,
        Case {
            rows: 3,
            len: 700,
            prefix: 300,
            ..llama
        },
    ] {
        check(c, &device, DType::BF16);
    }
}
