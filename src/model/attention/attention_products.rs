//! The two products of decoding attention (`few_queries`) for one (row, key head): every
//! query's scores against the keys, and every query's mix of the values by its probabilities.
//! Each product's order of operations is fixed whatever the tile it falls in, so a row's
//! numbers do not depend on the other rows or on how many queries it has.

/// `scores[qi·keys + j] = queries[qi] · keys[j]`.
pub type Scores = fn(&[&[f32]], &[&[f32]], &mut [f32]);
/// `out[qi] += Σ_j probs[qi·values + j] · values[j]` (out: queries × d), in key order.
pub type Mix = fn(&[f32], &[&[f32]], &mut [f32]);

/// The two products of attention for this CPU, chosen once per call.
pub struct Kernels {
    pub scores: Scores,
    pub mix: Mix,
}

impl Kernels {
    pub fn for_this_cpu() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::model::backend::cpu::avx512() {
                // SAFETY: the features the functions are compiled for were just detected.
                return Kernels {
                    scores: |q, k, s| unsafe { avx512::scores(q, k, s) },
                    mix: |p, v, o| unsafe { avx512::mix(p, v, o) },
                };
            }
            if crate::model::backend::cpu::features().avx2_fma {
                // SAFETY: as above.
                return Kernels {
                    scores: |q, k, s| scores_by(|a, b| unsafe { avx2::dot(a, b) }, q, k, s),
                    mix: |p, v, o| mix_by(|p, x, y| unsafe { avx2::axpy(p, x, y) }, p, v, o),
                };
            }
        }
        Kernels {
            scores: |q, k, s| scores_by(crate::model::quant::dot_lanes, q, k, s),
            mix: |p, v, o| {
                mix_by(
                    |p, x, y| y.iter_mut().zip(x).for_each(|(y, x)| *y += p * x),
                    p,
                    v,
                    o,
                )
            },
        }
    }
}

/// `Scores` by one dot product per query and key, each key read once for every query.
fn scores_by(
    dot: impl Fn(&[f32], &[f32]) -> f32,
    queries: &[&[f32]],
    keys: &[&[f32]],
    out: &mut [f32],
) {
    let n = keys.len();
    for (j, key) in keys.iter().enumerate() {
        for (qi, query) in queries.iter().enumerate() {
            out[qi * n + j] = dot(query, key);
        }
    }
}

/// `Mix` by one y += p·x per key and query.
fn mix_by(
    axpy: impl Fn(f32, &[f32], &mut [f32]),
    probs: &[f32],
    values: &[&[f32]],
    out: &mut [f32],
) {
    let n = values.len();
    let d = out.len() / (probs.len() / n.max(1)).max(1);
    for (j, value) in values.iter().enumerate() {
        for (qi, o) in out.chunks_exact_mut(d).enumerate() {
            axpy(probs[qi * n + j], value, o);
        }
    }
}

/// Tiles of queries × keys (scores) and queries × 64 dimensions (mixing) held in registers:
/// a step of a json batch feeds runs of 8 to 14 tokens, 7 query heads per key head on
/// Qwen2.5-0.5B, so a task has 56 to 98 queries for every key and value it reads.
#[cfg(target_arch = "x86_64")]
// Register tiles are indexed by query and by column together; iterators would hide that.
#[allow(clippy::needless_range_loop)]
mod avx512 {
    use std::arch::x86_64::*;

    /// Queries × keys per tile of scores: 16 accumulators.
    const QT: usize = 4;
    const KT: usize = 4;

    /// Each score is one chain of 16-lane fused multiply-adds over the head dimension, summed
    /// across lanes as `expanded_dots` sums (high eight onto low eight, then `avx2::hsum`'s
    /// order; `sum_tile`): the same operations wherever the query and key lie in their tiles.
    /// Head dimensions that are not a multiple of 16 take the AVX2 dot products.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub fn scores(queries: &[&[f32]], keys: &[&[f32]], out: &mut [f32]) {
        let d = queries.first().map_or(0, |q| q.len());
        let n = keys.len();
        if !d.is_multiple_of(16) {
            // Safe to call: avx2 and fma are enabled here (and in closures within).
            return super::scores_by(|a, b| super::avx2::dot(a, b), queries, keys, out);
        }
        assert!(queries.iter().chain(keys).all(|v| v.len() == d));
        assert!(out.len() >= queries.len() * n);
        for j0 in (0..n).step_by(KT) {
            let ks = (n - j0).min(KT);
            let mut k: [&[f32]; KT] = [&[]; KT];
            for (t, k) in k.iter_mut().enumerate() {
                *k = keys[j0 + t.min(ks - 1)];
            }
            ahead(keys, j0 + AHEAD, KT);
            for q0 in (0..queries.len()).step_by(QT) {
                let qs = (queries.len() - q0).min(QT);
                let mut q: [&[f32]; QT] = [&[]; QT];
                for (i, q) in q.iter_mut().enumerate() {
                    *q = queries[q0 + i.min(qs - 1)];
                }
                let mut acc = [[_mm512_setzero_ps(); KT]; QT];
                let mut at = 0;
                while at < d {
                    let mut kv = [_mm512_setzero_ps(); KT];
                    for t in 0..KT {
                        // SAFETY: at + 16 ≤ d, the length of every row (asserted).
                        kv[t] = unsafe { _mm512_loadu_ps(k[t].as_ptr().add(at)) };
                    }
                    for i in 0..QT {
                        // SAFETY: as above.
                        let qv = unsafe { _mm512_loadu_ps(q[i].as_ptr().add(at)) };
                        for t in 0..KT {
                            acc[i][t] = _mm512_fmadd_ps(qv, kv[t], acc[i][t]);
                        }
                    }
                    at += 16;
                }
                // sums[i·KT + t]: the tile's 16 scores at once.
                let sums = sum_tile(&acc);
                let mut tile_out = [0f32; QT * KT];
                // SAFETY: 16 values into an array of 16.
                unsafe { _mm512_storeu_ps(tile_out.as_mut_ptr(), sums) };
                for i in 0..qs {
                    let at = (q0 + i) * n + j0;
                    if ks == KT {
                        // A copy of constant length: one of a length known only at run time
                        // called memcpy, 0.9% of a json run.
                        let row: &mut [f32; KT] = (&mut out[at..at + KT]).try_into().expect("KT");
                        *row = std::array::from_fn(|t| tile_out[i * KT + t]);
                    } else {
                        out[at..at + ks].copy_from_slice(&tile_out[i * KT..i * KT + ks]);
                    }
                }
            }
        }
    }

    /// Keys and values are asked for this many rows ahead of the one multiplied, into L2
    /// (`_MM_HINT_T1`: a core keeps more requests to memory in flight for L2 than for L1). A
    /// step of an 8B judge after a 1,615-token prompt streams 423 MB of them; with the hardware
    /// prefetcher alone the products waited on the key loads (perf) and read 15–17 GB/s of the
    /// 35 a plain read reaches on a Zen 4 with 2 threads; with this, 21–23 GB/s (a step in
    /// 18.5–19.9 ms instead of 25.5–28.1, `examples/bench_decode_attention.rs`).
    /// Asked into L1 instead, 25–26 ms; 8, 24 or 48 rows ahead, no better.
    const AHEAD: usize = 16;

    /// Asks for the cache lines of rows `from..from + count` (those that exist).
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    fn ahead(rows: &[&[f32]], from: usize, count: usize) {
        for row in rows.iter().skip(from).take(count) {
            for at in (0..row.len()).step_by(16) {
                // SAFETY: at < row.len(); a prefetch reads nothing.
                _mm_prefetch::<_MM_HINT_T1>(unsafe { row.as_ptr().add(at) } as *const i8);
            }
        }
    }

    /// The lanes of each of the 16 accumulators summed (`acc[i][t]` into lane i·KT + t): the
    /// high eight lanes onto the low eight, then the high four of
    /// those onto the low four, then (0+2) + (1+3). Three additions per score, where summing
    /// each accumulator on its own took seven instructions for the four multiply-adds of a
    /// 64-dimensional head.
    #[target_feature(enable = "avx512f,avx2,fma")]
    fn sum_tile(acc: &[[__m512; KT]; QT]) -> __m512 {
        let a: [__m512; 16] = std::array::from_fn(|s| acc[s / KT][s % KT]);
        // Two accumulators per register: lanes l < 8 of a[2p] then of a[2p+1], each
        // a[l] + a[l + 8].
        let b: [__m512; 8] = std::array::from_fn(|p| {
            let (x, y) = (a[2 * p], a[2 * p + 1]);
            let low = _mm512_shuffle_f32x4::<0b01_00_01_00>(x, y);
            let high = _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y);
            _mm512_add_ps(low, high)
        });
        // Four per register, a quarter each: lanes l < 4 of b, each b[l] + b[l + 4].
        let c: [__m512; 4] = std::array::from_fn(|q| {
            let (x, y) = (b[2 * q], b[2 * q + 1]);
            let low = _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y);
            let high = _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y);
            _mm512_add_ps(low, high)
        });
        // In every quarter k (accumulator 4g + k of register c[g]): (0+2), (1+3), then their
        // sum, which lands in lane 4k + g.
        let pairs = |x: __m512, y: __m512| {
            _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y))
        };
        let (xy, zw) = (pairs(c[0], c[1]), pairs(c[2], c[3]));
        let (xy, zw) = (_mm512_castps_pd(xy), _mm512_castps_pd(zw));
        let sums = _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(xy, zw)),
            _mm512_castpd_ps(_mm512_unpackhi_pd(xy, zw)),
        );
        // Lane 4k + g holds accumulator 4g + k: back to accumulator order.
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_ps(order, sums)
    }

    /// Queries per tile of mixing, each 64 dimensions (four registers): 24 accumulators.
    const QM: usize = 6;
    const DM: usize = 64;

    /// Each output value is y = fma(p_j, v_j, y) over the keys in order, as `avx2::axpy` does
    /// it (the same bits), but a tile of outputs stays in registers for the whole sweep over
    /// the values, instead of being loaded and stored for every key. Head dimensions that are
    /// not a multiple of 16 take `avx2::axpy`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub fn mix(probs: &[f32], values: &[&[f32]], out: &mut [f32]) {
        let n = values.len();
        let m = probs.len().checked_div(n).unwrap_or(0);
        let d = out.len().checked_div(m).unwrap_or(0);
        if !d.is_multiple_of(16) || m == 0 {
            // Safe to call: avx2 and fma are enabled here (and in closures within).
            return super::mix_by(|p, x, y| super::avx2::axpy(p, x, y), probs, values, out);
        }
        assert!(values.iter().all(|v| v.len() == d) && probs.len() == m * n);
        for j0 in (0..n).step_by(KEY_BLOCK) {
            let block = j0..(j0 + KEY_BLOCK).min(n);
            for q0 in (0..m).step_by(QM) {
                let qs = (m - q0).min(QM);
                for d0 in (0..d).step_by(DM) {
                    let ds = (d - d0).min(DM) / 16;
                    let mut acc = [[_mm512_setzero_ps(); DM / 16]; QM];
                    for i in 0..qs {
                        for c in 0..ds {
                            // SAFETY: (q0 + i)·d + d0 + 16c + 16 ≤ m·d, the length of out.
                            acc[i][c] = unsafe {
                                _mm512_loadu_ps(out.as_ptr().add((q0 + i) * d + d0 + 16 * c))
                            };
                        }
                    }
                    for j in block.clone() {
                        if d0 == 0 && q0 == 0 {
                            ahead(values, j + AHEAD, 1);
                        }
                        let mut v = [_mm512_setzero_ps(); DM / 16];
                        for c in 0..ds {
                            // SAFETY: d0 + 16c + 16 ≤ d, the length of every value row
                            // (asserted).
                            v[c] = unsafe { _mm512_loadu_ps(values[j].as_ptr().add(d0 + 16 * c)) };
                        }
                        for i in 0..QM {
                            if i < qs {
                                let p = _mm512_set1_ps(probs[(q0 + i) * n + j]);
                                for c in 0..DM / 16 {
                                    if c < ds {
                                        acc[i][c] = _mm512_fmadd_ps(p, v[c], acc[i][c]);
                                    }
                                }
                            }
                        }
                    }
                    for i in 0..qs {
                        for c in 0..ds {
                            // SAFETY: as for the loads.
                            unsafe {
                                _mm512_storeu_ps(
                                    out.as_mut_ptr().add((q0 + i) * d + d0 + 16 * c),
                                    acc[i][c],
                                )
                            };
                        }
                    }
                }
            }
        }
    }

    /// Values a sweep of every query tile takes before the next ones: 128 rows of a 128-wide
    /// head are 64 KB, kept in L2 for the tiles after the first (a json step of 16 rows has 64
    /// queries per key head: 11 tiles × 2 halves of the head each swept the header's 1,615
    /// values, 827 KB with their probabilities past L2, from L3). Each output still continues
    /// one chain over the values in order (stored and reloaded exactly between blocks).
    const KEY_BLOCK: usize = 128;
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
        let mut sum = crate::model::quant::hsum(_mm256_add_ps(s0, s1));
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

    fn random_rows(rows: usize, d: usize, seed: u64) -> Vec<f32> {
        crate::rng::SplitMix64(seed).symmetric_f32s(rows * d)
    }

    /// The AVX-512 products, to the bit: each score one chain of 16-lane fused multiply-adds
    /// over the head dimension summed across lanes (`expanded_dots::lane_chain_dot`, an
    /// emulation with f32::mul_add); each output value the
    /// AVX2 axpy's fused chain over the keys in order. Query and key counts that leave
    /// partial tiles, head dimensions of one and of two 64-wide sweeps, values in three blocks
    /// (`KEY_BLOCK`).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx512_products_are_their_chains() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        for (d, m, n) in [
            (64, 7, 1),
            (64, 63, 37),
            (128, 13, 22),
            (256, 5, 9),
            (128, 9, 300),
        ] {
            let qs = random_rows(m, d, 1);
            let ks = random_rows(n, d, 2);
            let vs = random_rows(n, d, 3);
            let queries: Vec<&[f32]> = qs.chunks_exact(d).collect();
            let keys: Vec<&[f32]> = ks.chunks_exact(d).collect();
            let values: Vec<&[f32]> = vs.chunks_exact(d).collect();
            let mut scores = vec![0f32; m * n];
            // SAFETY: avx512f was just detected (with avx2 and fma, which it implies).
            unsafe { avx512::scores(&queries, &keys, &mut scores) };
            for (qi, q) in queries.iter().enumerate() {
                for (j, k) in keys.iter().enumerate() {
                    let want = crate::model::quant::cpu::expanded_dots::lane_chain_dot(q, k);
                    let got = scores[qi * n + j];
                    assert_eq!(got.to_bits(), want.to_bits(), "d={d}: query {qi}, key {j}");
                }
            }
            let mut got = random_rows(m, d, 4);
            let mut want = got.clone();
            // SAFETY: as above.
            unsafe { avx512::mix(&scores, &values, &mut got) };
            for (qi, o) in want.chunks_exact_mut(d).enumerate() {
                for (j, v) in values.iter().enumerate() {
                    let p = scores[qi * n + j];
                    o.iter_mut()
                        .zip(v.iter())
                        .for_each(|(y, &x)| *y = p.mul_add(x, *y));
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "d={d}, {m} queries, {n} values");
        }
    }
}
