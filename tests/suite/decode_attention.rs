//! The decoding step's attention op (`model/decode_attention.rs`: on a GPU its CUDA kernel, on
//! the CPU its plain f32 body) against attention computed in f64 from its definition: trunks
//! and branches of a step over a header, cache slots and their own keys, grouped heads, a
//! sliding window cutting into the header, a soft cap, rows without segments; in f32, bf16 and
//! f16. Each segment's output is the same to the bit launched alone or with the step's others.
//! The trunks' keys are written into the cache exactly (`AppendKeys`). Without a GPU, the CUDA
//! source runs on the CPU through tests/emulation. HYOKA_TEST_DEVICE=cuda runs the CUDA bodies.

use crate::common;

use candle_core::{DType, Device, Tensor};
use hyoka::model::attention::decode_attention::{
    AppendKeys, DecodeAttention, StepSegment, segment_table,
};
use std::path::PathBuf;
use std::sync::OnceLock;

#[derive(Clone)]
struct Case {
    d: usize,
    heads: usize,
    kv_heads: usize,
    rows: usize,
    len: usize,
    /// Header keys (0: none).
    h: usize,
    /// Cache slots a row (0: no cache).
    slots: usize,
    window: Option<usize>,
    softcap: Option<f32>,
    segments: Vec<StepSegment>,
}

fn seg(row: usize, start: usize, len: usize, past: usize) -> StepSegment {
    StepSegment {
        row,
        start,
        len,
        past,
    }
}

fn cases() -> Vec<Case> {
    vec![
        // Llama-like: two rows' trunks, a branch after row 0's trunk, row 1 idle.
        Case {
            d: 64,
            heads: 8,
            kv_heads: 2,
            rows: 3,
            len: 5,
            h: 7,
            slots: 40,
            window: None,
            softcap: None,
            segments: vec![seg(0, 0, 2, 10), seg(0, 2, 3, 12), seg(2, 0, 5, 33)],
        },
        // Gemma-2-like: a window shorter than the header, a soft cap, a first token.
        Case {
            d: 128,
            heads: 4,
            kv_heads: 2,
            rows: 2,
            len: 4,
            h: 20,
            slots: 9,
            window: Some(9),
            softcap: Some(2.0),
            segments: vec![seg(0, 0, 4, 3), seg(1, 0, 1, 0), seg(1, 1, 2, 1)],
        },
        // One key head, no header: a sequence's first tokens.
        Case {
            d: 256,
            heads: 4,
            kv_heads: 1,
            rows: 2,
            len: 3,
            h: 0,
            slots: 6,
            window: None,
            softcap: None,
            segments: vec![seg(0, 0, 1, 0), seg(1, 0, 3, 2)],
        },
        // `extend`'s form: no cache, every row one segment after the header.
        Case {
            d: 8,
            heads: 6,
            kv_heads: 3,
            rows: 2,
            len: 3,
            h: 70,
            slots: 0,
            window: Some(40),
            softcap: None,
            segments: vec![seg(0, 0, 3, 0), seg(1, 0, 3, 0)],
        },
    ]
}

/// Values in [−2, 2) from a fixed sequence, rounded to `dtype`.
fn values(n: usize, seed: u64, dtype: DType) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0;
            round(v, dtype)
        })
        .collect()
}

fn round(v: f32, dtype: DType) -> f32 {
    match dtype {
        DType::BF16 => half::bf16::from_f32(v).to_f32(),
        DType::F16 => half::f16::from_f32(v).to_f32(),
        _ => v,
    }
}

struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    hk: Vec<f32>,
    hv: Vec<f32>,
    ck: Vec<f32>,
    cv: Vec<f32>,
}

fn inputs(c: &Case, dtype: DType) -> Inputs {
    let step = c.rows * c.kv_heads * c.len * c.d;
    let header = c.kv_heads * c.h * c.d;
    let cache = c.rows * c.kv_heads * c.slots * c.d;
    Inputs {
        q: values(c.rows * c.heads * c.len * c.d, 1, dtype),
        k: values(step, 2, dtype),
        v: values(step, 3, dtype),
        hk: values(header, 4, dtype),
        hv: values(header, 5, dtype),
        ck: values(cache, 6, dtype),
        cv: values(cache, 7, dtype),
    }
}

fn scale(c: &Case) -> f32 {
    1.0 / (c.d as f32).sqrt()
}

/// The definition in f64: query i of a segment at position h + past + i sees keys j ≤ it
/// (and > it − window): the header's, its row's cache slots, then its own.
fn reference(c: &Case, x: &Inputs) -> Vec<f64> {
    let mut out = vec![0f64; x.q.len()];
    let group = c.heads / c.kv_heads;
    for s in &c.segments {
        for head in 0..c.heads {
            let kv = head / group;
            let row = |keys: &[f32], header: &[f32], cache: &[f32], j: usize| -> Vec<f64> {
                let at = if j < c.h {
                    (header, (kv * c.h + j) * c.d)
                } else if j < c.h + s.past {
                    (cache, ((s.row * c.kv_heads + kv) * c.slots + j - c.h) * c.d)
                } else {
                    let own = s.start + j - c.h - s.past;
                    (keys, ((s.row * c.kv_heads + kv) * c.len + own) * c.d)
                };
                at.0[at.1..at.1 + c.d].iter().map(|&v| v as f64).collect()
            };
            for i in 0..s.len {
                let at = ((s.row * c.heads + head) * c.len + s.start + i) * c.d;
                let last = c.h + s.past + i;
                let first = c.window.map_or(0, |w| (last + 1).saturating_sub(w));
                let scores: Vec<f64> = (first..=last)
                    .map(|j| {
                        let key = row(&x.k, &x.hk, &x.ck, j);
                        let dot: f64 = (0..c.d)
                            .map(|e| x.q[at + e] as f64 * scale(c) as f64 * key[e])
                            .sum();
                        c.softcap
                            .map_or(dot, |cap| (dot / cap as f64).tanh() * cap as f64)
                    })
                    .collect();
                let top = scores.iter().cloned().fold(f64::MIN, f64::max);
                let p: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let sum: f64 = p.iter().sum();
                for (j, pj) in (first..=last).zip(&p) {
                    let value = row(&x.v, &x.hv, &x.cv, j);
                    for e in 0..c.d {
                        out[at + e] += pj / sum * value[e];
                    }
                }
            }
        }
    }
    out
}

fn tensor(v: &[f32], shape: (usize, usize, usize, usize), dtype: DType, dev: &Device) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape, dev)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// The op on `device` for the case with only `segments` of it.
fn run(c: &Case, x: &Inputs, segments: &[StepSegment], dtype: DType, dev: &Device) -> Vec<f32> {
    let t = |v: &[f32], shape| tensor(v, shape, dtype, dev);
    let step = (c.rows, c.kv_heads, c.len, c.d);
    let op = DecodeAttention {
        header: (c.h > 0).then(|| {
            let shape = (1, c.kv_heads, c.h, c.d);
            (t(&x.hk, shape), t(&x.hv, shape))
        }),
        cache: (c.slots > 0).then(|| {
            let shape = (c.rows, c.kv_heads, c.slots, c.d);
            (t(&x.ck, shape), t(&x.cv, shape))
        }),
        segments: segment_table(segments, dev).unwrap(),
        queries: segments.iter().map(|s| s.len).max().unwrap_or(0),
        window: c.window,
        scale: scale(c),
        softcap: c.softcap,
    };
    let q = t(&x.q, (c.rows, c.heads, c.len, c.d));
    let out = op.apply(&q, &t(&x.k, step), &t(&x.v, step)).unwrap();
    out.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 1.6e-2,
        DType::F16 => 2.5e-3,
        _ => 2e-5,
    }
}

fn compare(c: &Case, got: &[f32], expected: &[f64], dtype: DType, what: &str) -> f64 {
    let mut worst = 0f64;
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        let diff = (*g as f64 - e).abs();
        worst = worst.max(diff);
        assert!(
            diff <= tolerance(dtype),
            "{what}, head dim {}, {dtype:?}: element {i}: {g} against {e}",
            c.d
        );
    }
    worst
}

const DTYPES: [DType; 3] = [DType::F32, DType::BF16, DType::F16];

#[test]
fn step_attention_matches_its_definition() {
    let dev = common::device();
    for c in cases() {
        for dtype in DTYPES {
            let x = inputs(&c, dtype);
            let got = run(&c, &x, &c.segments, dtype, &dev);
            let worst = compare(&c, &got, &reference(&c, &x), dtype, "the op");
            eprintln!("head dim {}, {dtype:?}: worst {worst:.2e}", c.d);
        }
    }
}

/// Each segment alone gives the bits it gets among the step's others (the other queries' places
/// are zero then): a row's numbers do not depend on what else is decoded with it.
#[test]
fn a_segment_gets_the_same_bits_alone() {
    let dev = common::device();
    for c in cases() {
        for dtype in DTYPES {
            let x = inputs(&c, dtype);
            let all = run(&c, &x, &c.segments, dtype, &dev);
            let mut pieced = vec![0f32; all.len()];
            for s in &c.segments {
                let alone = run(&c, &x, &[*s], dtype, &dev);
                for (p, a) in pieced.iter_mut().zip(&alone) {
                    *p += a;
                }
            }
            let same = all
                .iter()
                .zip(&pieced)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "head dim {}, {dtype:?}: a segment alone differs", c.d);
        }
    }
}

#[test]
fn trunk_keys_are_written_into_the_cache() {
    let dev = common::device();
    let (rows, kv_heads, len, slots, d) = (3, 2, 4, 10, 8);
    for dtype in DTYPES {
        let k = values(rows * kv_heads * len * d, 11, dtype);
        let cache = values(rows * kv_heads * slots * d, 12, dtype);
        let trunks = [seg(0, 0, 2, 3), seg(2, 0, 4, 6)];
        let ct = tensor(&cache, (rows, kv_heads, slots, d), dtype, &dev);
        let kt = tensor(&k, (rows, kv_heads, len, d), dtype, &dev);
        let table = segment_table(&trunks, &dev).unwrap();
        ct.inplace_op3(&kt, &table, &AppendKeys { queries: 4 })
            .unwrap();
        let got: Vec<f32> = (ct.to_dtype(DType::F32).unwrap())
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let mut expected = cache.clone();
        for s in trunks {
            for kv in 0..kv_heads {
                for i in 0..s.len {
                    let dst = ((s.row * kv_heads + kv) * slots + s.past + i) * d;
                    let src = ((s.row * kv_heads + kv) * len + s.start + i) * d;
                    expected[dst..dst + d].copy_from_slice(&k[src..src + d]);
                }
            }
        }
        assert_eq!(got, expected, "{dtype:?}");
    }
}

fn emulator() -> Option<&'static PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| common::build_emulator("decode_attention_host.cpp"))
        .as_ref()
}

/// The CUDA kernel's own code (kernels/decode_attention.cu) on the CPU, every CUDA thread an OS
/// thread: its tiles, warp split, exchanges and combination checked without a GPU.
#[test]
fn cuda_kernel_emulated_on_the_cpu() {
    let Some(exe) = emulator() else { return };
    for c in cases() {
        for (code, dtype) in [(0, DType::BF16), (1, DType::F16), (2, DType::F32)] {
            let x = inputs(&c, dtype);
            let bits = |v: &[f32]| -> Vec<u8> {
                v.iter()
                    .flat_map(|&f| match dtype {
                        DType::BF16 => half::bf16::from_f32(f).to_bits().to_le_bytes().to_vec(),
                        DType::F16 => half::f16::from_f32(f).to_bits().to_le_bytes().to_vec(),
                        _ => f.to_le_bytes().to_vec(),
                    })
                    .collect()
            };
            let queries = c.segments.iter().map(|s| s.len).max().unwrap_or(0);
            let ints = [
                code,
                c.d,
                c.rows,
                c.heads,
                c.kv_heads,
                c.len,
                c.h,
                c.slots,
                c.window.unwrap_or(0),
                c.segments.len(),
                queries,
            ];
            let mut input: Vec<u8> = ints
                .iter()
                .flat_map(|&i| (i as i32).to_le_bytes())
                .collect();
            for f in [scale(&c), c.softcap.unwrap_or(0.0)] {
                input.extend(f.to_le_bytes());
            }
            for v in [&x.q, &x.k, &x.v, &x.hk, &x.hv, &x.ck, &x.cv] {
                input.extend(bits(v));
            }
            for s in &c.segments {
                for n in [s.row, s.start, s.len, s.past] {
                    input.extend((n as u32).to_le_bytes());
                }
            }
            let tag = format!("decode-{}-{code}", c.d);
            let out = common::run_emulator(exe, &[], &input, &tag);
            let got: Vec<f32> = match dtype {
                DType::BF16 => out
                    .iter()
                    .map(|&b| half::bf16::from_bits(b).to_f32())
                    .collect(),
                DType::F16 => out
                    .iter()
                    .map(|&b| half::f16::from_bits(b).to_f32())
                    .collect(),
                _ => out
                    .chunks_exact(2)
                    .map(|w| f32::from_bits(w[0] as u32 | (w[1] as u32) << 16))
                    .collect(),
            };
            let worst = compare(&c, &got, &reference(&c, &x), dtype, "emulated kernel");
            eprintln!("emulated, head dim {}, {dtype:?}: worst {worst:.2e}", c.d);
        }
    }
}
