//! The prefill attention kernels against the exact product.

use super::*;
use crate::model::attention::few_queries::tests::{candle_attention, max_abs_diff};
use crate::model::attention::plan::MASKED;
use crate::rng::SplitMix64;
use candle_core::Device;

fn random(shape: (usize, usize, usize, usize), seed: u64) -> Tensor {
    let n = shape.0 * shape.1 * shape.2 * shape.3;
    let xs = SplitMix64(seed).symmetric_f32s(n);
    Tensor::from_vec(xs, shape, &Device::Cpu).unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// Every score is the chain fma(q_t, k_t, ·) over t from zero, in whichever tile (query
/// rows and panels past whole tiles included); keys past the last give zeros.
#[test]
fn each_score_is_one_chain_over_the_dimensions() {
    if !avx512_available() {
        return;
    }
    for (m, keys, d) in [
        (1, 1, 16),
        (13, 70, 64),
        (56, 48, 128),
        (9, 200, 32),
        (4, 100, 64),
    ] {
        let qs = SplitMix64(m as u64).symmetric_f32s(m * d);
        let ks = SplitMix64(keys as u64 + 7).symmetric_f32s(keys * d);
        let queries: Vec<&[f32]> = qs.chunks_exact(d).collect();
        // The panels whole, or split after the first whole ones (a header's).
        let split = keys / 2 / LANES * LANES;
        let whole = panels(ks.chunks_exact(d), keys, d);
        let (before, after) = whole.split_at(split * d);
        let stride = keys.next_multiple_of(LANES);
        let mut got = vec![f32::NAN; m * stride];
        let mut split_got = got.clone();
        let whole = Panels {
            header: &[],
            own: &whole,
            d,
        };
        let split = Panels {
            header: before,
            own: after,
            d,
        };
        unsafe { avx512::scores(whole, &queries, &mut got, stride) };
        unsafe { avx512::scores(split, &queries, &mut split_got, stride) };
        assert!(
            got.iter()
                .zip(&split_got)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        for (i, q) in queries.iter().enumerate() {
            for (j, k) in ks.chunks_exact(d).enumerate() {
                let want = q.iter().zip(k).fold(0f32, |a, (x, y)| x.mul_add(*y, a));
                assert_eq!(
                    got[i * stride + j].to_bits(),
                    want.to_bits(),
                    "{m}×{keys}×{d}"
                );
            }
            assert!(
                got[i * stride + keys..(i + 1) * stride]
                    .iter()
                    .all(|&s| s == 0.0)
            );
        }
    }
}

/// Every output is the chain fma(p_j, v_j, ·) over the keys in order from zero, whatever
/// its tile (6 query rows × 64 dimensions, partial ones included).
#[test]
fn each_mixed_value_is_one_chain_over_the_keys() {
    if !avx512_available() {
        return;
    }
    for (m, keys, stride, d) in [(1, 1, 16, 64), (13, 37, 48, 64), (8, 100, 112, 128)] {
        let probs = SplitMix64(3).symmetric_f32s(m * stride);
        let vs = SplitMix64(4).symmetric_f32s(keys * d);
        let rows: Vec<&[f32]> = vs.chunks_exact(d).collect();
        let mut got = vec![f32::NAN; m * d];
        unsafe { avx512::mix(&probs, stride, &rows, &mut got) };
        for i in 0..m {
            for t in 0..d {
                let want =
                    (0..keys).fold(0f32, |a, j| probs[i * stride + j].mul_add(vs[j * d + t], a));
                assert_eq!(got[i * d + t].to_bits(), want.to_bits(), "{m}×{keys}×{d}");
            }
        }
    }
}

/// The softmax's exponential: within two ulps of libm's over what it is given (x − max
/// ≤ 0, down to −87), exactly 0 for masked keys and below −87 (subnormal results).
#[test]
fn the_exponential_is_libms_within_two_ulps() {
    if !avx512_available() {
        return;
    }
    // x − 0.25 from 0 down to the lowest.
    let mut xs: Vec<f32> = (0..200_000)
        .map(|i| 0.25 + avx512::LOWEST * i as f32 / 200_000.0)
        .collect();
    xs.extend([
        0.25,
        0.25 - 1e-7,
        -0.25,
        0.25 - 86.99,
        0.25 + avx512::LOWEST,
    ]);
    xs.resize(xs.len().next_multiple_of(LANES), -1.0);
    let want: Vec<f32> = xs.iter().map(|&x| (x - 0.25f32).exp()).collect();
    let mut got = xs.clone();
    unsafe { avx512::exp_below(&mut got, 0.25) };
    for ((&x, &g), &w) in xs.iter().zip(&got).zip(&want) {
        let ulps = (g.to_bits() as i64 - w.to_bits() as i64).abs();
        assert!(ulps <= 2, "e^({x} − 0.25): {g} for {w}");
    }
    let mut masked = [
        f32::NEG_INFINITY,
        MASKED,
        MASKED + 30.0,
        // x − 3 just under the lowest, then at what were subnormal results.
        3.0 + (avx512::LOWEST - 0.01),
        3.0 - 87.3,
        3.0 - 103.9,
        -104.5,
        -200.0,
        -1e30,
    ]
    .into_iter()
    .cycle()
    .take(LANES)
    .collect::<Vec<_>>();
    unsafe { avx512::exp_below(&mut masked, 3.0) };
    assert!(masked.iter().all(|&e| e == 0.0), "{masked:?}");
}

/// Causal masks of rows `lens` long after `prefix` keys seen by all, right-padded to the
/// longest (padding keys lie after every real query; a padding query sees itself), row 1
/// also blind to keys 2 and 3 (as a sliding window or a branch would be): (b, 1, len, keys).
fn masks(prefix: usize, lens: &[usize]) -> Tensor {
    let len = *lens.iter().max().unwrap();
    let keys = prefix + len;
    let mut m = vec![0f32; lens.len() * len * keys];
    for (r, &n) in lens.iter().enumerate() {
        for i in 0..len {
            let row = &mut m[(r * len + i) * keys..(r * len + i + 1) * keys];
            for (j, x) in row.iter_mut().enumerate() {
                let own = j.checked_sub(prefix);
                let later = own.is_some_and(|o| o > i);
                let padding = own.is_some_and(|o| o >= n && o != i);
                if later || padding || (r == 1 && (j == 2 || j == 3)) {
                    *x = MASKED;
                }
            }
        }
    }
    Tensor::from_vec(m, (lens.len(), 1, len, keys), &Device::Cpu).unwrap()
}

fn block_masks(mask: &Tensor) -> impl FnMut(Range<usize>, Range<usize>, usize) -> Result<Tensor> {
    move |rows, queries, keys| {
        mask.narrow(0, rows.start, rows.len())?
            .narrow(2, queries.start, queries.len())?
            .narrow(3, 0, keys)?
            .contiguous()
    }
}

/// The same attention through candle's ops: a header of `h` keys read in place before
/// each row's own keys, taken from a view of a longer cache; masks, soft cap, grouped
/// heads, and plans that split the rows and the queries.
#[test]
fn matches_candles_ops() {
    if !avx512_available() {
        return;
    }
    for (d, group, softcap, limit) in [
        (64, 7, None, 1 << 28),
        (128, 4, Some(20.0), 3000),
        (64, 1, None, 20_000),
    ] {
        let (b, kv, h, lens) = (3, 2, 21, [40, 17, 33]);
        let (len, heads) = (40, kv * group);
        let keys = h + len;
        let q = random((b, heads, len, d), 1);
        let header = (random((1, kv, h, d), 2), random((1, kv, h, d), 3));
        let (cache_k, cache_v) = (
            random((b, kv, len + 5, d), 4),
            random((b, kv, len + 5, d), 5),
        );
        let (k, v) = (
            cache_k.narrow(2, 0, len).unwrap(),
            cache_v.narrow(2, 0, len).unwrap(),
        );
        let mask = masks(h, &lens);
        let plan = AttentionPlan::new(b, heads, len, keys, limit).unwrap();
        let scale = 0.125;
        let got = attend(
            &q,
            Some(&header),
            (&k, &v),
            h,
            &plan,
            block_masks(&mask),
            ScoreScaling { scale, softcap },
        )
        .unwrap();
        let all = |shared: &Tensor, own: &Tensor| {
            let shared = shared.broadcast_as((b, kv, h, d)).unwrap();
            Tensor::cat(&[&shared.contiguous().unwrap(), own], 2).unwrap()
        };
        let (all_k, all_v) = (all(&header.0, &k), all(&header.1, &v));
        let want = candle_attention(&q, &all_k, &all_v, &mask, scale, softcap);
        let diff = max_abs_diff(&got, &want);
        assert!(diff < 1e-5, "d={d}, group={group}: {diff}");
    }
}

/// A row gets the same bits alone and padded among longer rows, whatever blocks the plan
/// makes of the rows and queries: nothing it computes depends on how far a block reaches.
#[test]
fn a_row_gets_the_same_bits_alone_and_among_others() {
    if !avx512_available() {
        return;
    }
    let (kv, group, d, h) = (2, 3, 64, 19);
    let heads = kv * group;
    let lens = [29, 50, 41];
    let len = 50;
    let q = random((3, heads, len, d), 7);
    let (k, v) = (random((3, kv, len, d), 8), random((3, kv, len, d), 9));
    let header = (random((1, kv, h, d), 10), random((1, kv, h, d), 11));
    let mask = masks(h, &lens);
    let together: Vec<Vec<f32>> = [1 << 28, 4_000, 900]
        .into_iter()
        .map(|limit| {
            let plan = AttentionPlan::new(3, heads, len, h + len, limit).unwrap();
            let out = attend(
                &q,
                Some(&header),
                (&k, &v),
                h,
                &plan,
                block_masks(&mask),
                ScoreScaling {
                    scale: 0.1,
                    softcap: None,
                },
            );
            values(&out.unwrap().get(0).unwrap().narrow(1, 0, lens[0]).unwrap())
        })
        .collect();
    let n = lens[0];
    let alone = |t: &Tensor| t.narrow(0, 0, 1).unwrap().narrow(2, 0, n).unwrap();
    let alone_mask = masks(h, &[n]);
    let plan = AttentionPlan::new(1, heads, n, h + n, 1 << 28).unwrap();
    let (q1, k1, v1) = (alone(&q), alone(&k), alone(&v));
    let out = attend(
        &q1,
        Some(&header),
        (&k1, &v1),
        h,
        &plan,
        block_masks(&alone_mask),
        ScoreScaling {
            scale: 0.1,
            softcap: None,
        },
    );
    let want = values(&out.unwrap());
    for got in together {
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}
