//! The fused attention op (`model::fused_attention`: prefill attention on CUDA) against
//! attention computed in f64 from its definition: softmax(q·kᵀ·scale, softcapped, over the keys
//! a query sees by `Batch::mask`'s rule)·v. On the CPU it runs the op's CPU body (in
//! HYOKA_TEST_DTYPE); with HYOKA_TEST_DEVICE=cuda its CUDA kernels in bf16 — the tensor-core
//! one for head dims that are multiples of 16 (compute capability ≥ 8.0), the one-warp-per-query
//! one for 8 — at the shapes of real judges too (32/8 heads of 128, gemma's 256, 1,643 tokens).
//! Without a GPU, the same CUDA source runs on the CPU through tests/emulation (every CUDA thread
//! an OS thread, the tensor-core product written from PTX's fragment layout), so the kernels'
//! indexing, tiles and barriers are checked on every machine; swapping two registers of a
//! fragment fails it.
//!
//! Inputs are bf16 values, so every device reads the same numbers. Bounds: the output's rounding
//! to the dtype (|y|·ε) plus the probabilities' rounding to it before the second product
//! (2ε·max|v|: a weighted mean whose weights each move by ≤ ε), plus f32 summation; the mean
//! error to a quarter of the mean bound (the CPU body, rounding only its output: 0.04). A
//! fragment, mask or tile error moves outputs by the order of the values and fails both.

use crate::common;

use candle_core::{DType, Device, Tensor};
use hyoka::model::attention::fused_attention::FusedAttention;
use hyoka::rng::SplitMix64;
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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
    /// The first `shared` keys (≤ prefix) are one copy every row reads (a judge's header).
    shared: usize,
    /// Slots after each row's own keys that are not keys (a decoding cache's free slots): the
    /// op reads the rows where they lie, at a stride.
    pad: usize,
    /// Rows of a decoding step (`row_span`): positions are key indices (no branches), and row r
    /// has its own prefix and number of queries (`span`), the rest of its queries padding.
    spans: bool,
}

impl Case {
    /// Row r's (prefix, queries): the case's own, or with spans fewer queries and an earlier
    /// prefix on some rows (caches of different lengths in one call).
    fn span(&self, r: usize) -> (usize, usize) {
        match self.spans {
            false => (self.prefix, self.len),
            true => {
                let queries = self.len.saturating_sub(r % 3);
                (self.prefix - (r % 2) * self.prefix.min(4), queries)
            }
        }
    }
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
            let (first, queries) = c.span(r);
            for i in 0..queries {
                let qi = &q[(rh * c.len + i) * c.d..][..c.d];
                let (pq, sq) = (p[first + i], s[first + i]);
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

struct Inputs {
    q: Vec<f32>,
    /// Every row's keys and values, (rows, kv_heads, keys, d): the definition's.
    k: Vec<f32>,
    v: Vec<f32>,
    /// The same as the op reads them: the shared ones (kv_heads, shared, d), each row's own
    /// (rows, kv_heads, own + pad, d), the pad slots full of values far from any key's.
    shared_k: Vec<f32>,
    shared_v: Vec<f32>,
    own_k: Vec<f32>,
    own_v: Vec<f32>,
    pos: Vec<f32>,
    seg: Vec<f32>,
    scale: f32,
}

fn inputs(c: &Case) -> Inputs {
    let keys = c.prefix + c.len;
    let (h, own, d, kv) = (c.shared, keys - c.shared, c.d, c.kv_heads);
    let seed = (c.d * 1_000 + c.len) as u64;
    let (pos, seg) = layout(c);
    let (shared_k, shared_v) = (
        values(kv * h * d, 1.0, seed + 3),
        values(kv * h * d, 1.0, seed + 4),
    );
    let slots = own + c.pad;
    let mut own_k = values(c.rows * kv * slots * d, 1.0, seed + 1);
    let mut own_v = values(c.rows * kv * slots * d, 1.0, seed + 2);
    for (i, (x, y)) in own_k.iter_mut().zip(own_v.iter_mut()).enumerate() {
        if i / d % slots >= own {
            (*x, *y) = (64.0, -64.0);
        }
    }
    // The definition's keys: the shared ones, then the row's own.
    let full = |shared: &[f32], own_t: &[f32]| -> Vec<f32> {
        let mut out = Vec::with_capacity(c.rows * kv * keys * d);
        for r in 0..c.rows {
            for g in 0..kv {
                out.extend_from_slice(&shared[g * h * d..][..h * d]);
                out.extend_from_slice(&own_t[(r * kv + g) * slots * d..][..own * d]);
            }
        }
        out
    };
    Inputs {
        q: values(c.rows * c.heads * c.len * c.d, 6.0, seed),
        k: full(&shared_k, &own_k),
        v: full(&shared_v, &own_v),
        shared_k,
        shared_v,
        own_k,
        own_v,
        pos,
        seg,
        scale: 1.0 / (c.d as f32).sqrt(),
    }
}

fn check(c: Case, device: &Device, dtype: DType) {
    let keys = c.prefix + c.len;
    let x = inputs(&c);
    let tensor = |x: &[f32], shape: (usize, usize, usize, usize)| {
        Tensor::from_slice(x, shape, device)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    let (own, slots) = (keys - c.shared, keys - c.shared + c.pad);
    let shared = (c.shared > 0).then(|| {
        let shape = (1, c.kv_heads, c.shared, c.d);
        (tensor(&x.shared_k, shape), tensor(&x.shared_v, shape))
    });
    let op = FusedAttention {
        positions: (!c.spans).then(|| {
            let t = |x: &[f32]| Tensor::from_slice(x, (c.rows, keys), device).unwrap();
            (t(&x.pos), t(&x.seg))
        }),
        row_span: c.spans.then(|| {
            let span: Vec<u32> = (0..c.rows)
                .flat_map(|r| {
                    let (first, queries) = c.span(r);
                    [first as u32, queries as u32]
                })
                .collect();
            Tensor::from_vec(span, (c.rows, 2), device).unwrap()
        }),
        shared,
        prefix: c.prefix,
        window: c.window,
        scale: x.scale,
        softcap: c.softcap,
    };
    let own_part = |t: &[f32]| {
        let all = tensor(t, (c.rows, c.kv_heads, slots, c.d));
        all.narrow(2, 0, own).unwrap()
    };
    let got = op
        .apply(
            &tensor(&x.q, (c.rows, c.heads, c.len, c.d)),
            &own_part(&x.own_k),
            &own_part(&x.own_v),
        )
        .unwrap_or_else(|e| panic!("{c:?}: {e}"));
    let got: Vec<f32> = got
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    compare(&c, &x, &got, dtype, &format!("{dtype:?}"));
}

/// Holds `got` to the definition's output, within the dtype's bounds (module doc).
fn compare(c: &Case, x: &Inputs, got: &[f32], dtype: DType, label: &str) {
    let expected = reference(c, &x.q, &x.k, &x.v, &x.pos, &x.seg, x.scale as f64);
    assert_eq!(got.len(), expected.len());
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
        "{c:?} {label}: worst |Δ| {worst:.2e} ({worst_share:.2} of its bound), mean {:.2e} ({mean_share:.3} of the mean bound)",
        total / got.len() as f64
    );
    assert!(
        worst_share <= 1.0,
        "{c:?} {label}: worst |Δ| {worst:.3e} is {worst_share:.2}× its bound"
    );
    assert!(
        mean_share <= 0.25,
        "{c:?} {label}: mean |Δ| is {mean_share:.3} of the mean bound"
    );
}

fn emulator() -> Option<&'static PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| common::build_emulator("attention_host.cpp"))
        .as_ref()
}

/// One of kernels/attention.cu's kernels (0: one warp per query, 1: tensor cores) on the CPU.
fn emulated(exe: &Path, kernel: i32, c: &Case, x: &Inputs) -> Vec<f32> {
    let keys = c.prefix + c.len;
    let mut bytes = Vec::new();
    let ints = [
        kernel,
        c.d as i32,
        c.rows as i32,
        c.heads as i32,
        c.kv_heads as i32,
    ];
    let slots = keys - c.shared + c.pad;
    let more = [
        c.len,
        keys,
        c.prefix,
        keys,
        c.window.unwrap_or(0),
        c.shared,
        slots,
        c.spans as usize,
        c.spans as usize,
    ];
    let more = more.map(|n| n as i32);
    for n in ints.iter().chain(&more) {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    for f in [x.scale, c.softcap.unwrap_or(0.0)] {
        bytes.extend_from_slice(&f.to_le_bytes());
    }
    for t in [&x.q, &x.shared_k, &x.shared_v, &x.own_k, &x.own_v] {
        for f in t.iter() {
            bytes.extend_from_slice(&half::bf16::from_f32(*f).to_bits().to_le_bytes());
        }
    }
    if c.spans {
        for r in 0..c.rows {
            let (first, queries) = c.span(r);
            bytes.extend_from_slice(&(first as u32).to_le_bytes());
            bytes.extend_from_slice(&(queries as u32).to_le_bytes());
        }
    } else {
        for t in [&x.pos, &x.seg] {
            for f in t.iter() {
                bytes.extend_from_slice(&f.to_le_bytes());
            }
        }
    }
    let tag = format!("attention-{kernel}-{}-{}", c.d, c.len);
    (common::run_emulator(exe, &[], &bytes, &tag).into_iter())
        .map(|b| half::bf16::from_bits(b).to_f32())
        .collect()
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
        shared: 0,
        pad: 0,
        spans: false,
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
            shared: 20,
            pad: 11,
            ..case(d, 130)
        },
        Case {
            branches: true,
            ..case(d, 150)
        },
        Case {
            prefix: 5,
            shared: 5,
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
            shared: 150,
            pad: 9,
            ..case(d, 3)
        },
        Case {
            rows: 5,
            prefix: 90,
            shared: 40,
            pad: 7,
            spans: true,
            window: Some(64),
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
/// gemma-2's (8/4 of 256) over 1,643 tokens, a header then two branches; 20 rows decoding after
/// a shared header and their own caches. On the CPU the op's CPU body is too slow for this: GPU
/// only.
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
    let decoding = Case {
        rows: 20,
        len: 1,
        prefix: 1_200,
        shared: 900,
        pad: 300,
        branches: false,
        spans: true,
        ..llama
    };
    for c in [
        llama,
        gemma,
        decoding,
        Case {
            rows: 3,
            len: 700,
            prefix: 300,
            shared: 250,
            pad: 40,
            ..llama
        },
    ] {
        check(c, &device, DType::BF16);
    }
}

/// The CUDA kernels' own code (kernels/attention.cu) on the CPU, every CUDA thread an OS thread
/// (tests/emulation/cuda_host.h, whose tensor-core product follows PTX's fragment layout): the
/// kernels' indexing, tiles, barriers and online softmax checked on machines without a GPU.
#[test]
fn cuda_kernels_emulated_on_the_cpu() {
    let Some(exe) = emulator() else { return };
    // The one-warp kernel's exchanges make it ~10× slower to emulate: its smallest and most
    // common head dims, on the cases with a prefix, branches, a window, a softcap and spans.
    let warp_cases = |d| {
        let all = small_cases(d);
        vec![all[4], all[5], all[7]]
    };
    let runs = [
        (0, 8, warp_cases(8)),
        (0, 128, warp_cases(128)),
        (1, 16, small_cases(16)),
        (1, 32, small_cases(32)),
        (1, 64, small_cases(64)),
        (1, 128, small_cases(128)),
        (1, 256, small_cases(256)),
    ];
    for (kernel, d, cases) in runs {
        let start = std::time::Instant::now();
        for c in cases {
            let x = inputs(&c);
            let got = emulated(exe, kernel, &c, &x);
            compare(
                &c,
                &x,
                &got,
                DType::BF16,
                &format!("kernel {kernel} emulated"),
            );
        }
        eprintln!("kernel {kernel}, head dim {d}: {:.1?}", start.elapsed());
    }
}
