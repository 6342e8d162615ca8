//! One sequence's attention in AVX2 + FMA register tiles (x86-64). Its per-head products are
//! about len × len × d with len ≈ 25 and d = 32, where a GEMM call costs more to set up (≈ 6 µs)
//! than the work itself: here tiles of 4 rows × 8 columns of FMAs, the keys transposed once
//! per head. Used when the CPU has the features and d is a multiple of 8; `cpu::attend`
//! (GEMM calls) otherwise.

use std::arch::x86_64::*;

/// Whether `attend` may run for heads of width `d`.
pub fn available(d: usize) -> bool {
    d > 0 && d.is_multiple_of(8) && crate::model::backend::cpu::features().avx2_fma
}

/// The attention of one sequence with `heads` heads of width `h`: `seq` its len q|k|v rows
/// (3h each), `ctx` its len context rows (h each), `softmax` applied to each row of scores.
///
/// # Safety
/// `available(h / heads)` must hold; `seq` holds len·3h values and `ctx` len·h.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn attend(
    ctx: &mut [f32],
    seq: &[f32],
    len: usize,
    heads: usize,
    h: usize,
    softmax: impl Fn(&mut [f32]),
) {
    let d = h / heads;
    assert!(
        seq.len() >= len * 3 * h && ctx.len() >= len * h && d.is_multiple_of(8),
        "attend: buffers do not fit"
    );
    // Score rows are padded to a multiple of 8 columns; the padding keys are zeros and the
    // softmax reads only the first len columns.
    let width = len.div_ceil(8) * 8;
    let mut keys_t = vec![0f32; d * width];
    // This head's queries and values copied to contiguous rows (d apart): with the keys and
    // the scores, everything a head's tiles read then sits in L1.
    let (mut queries, mut values) = (vec![0f32; len * d], vec![0f32; len * d]);
    let mut scores = vec![0f32; len * width];
    let g = Geometry {
        len,
        width,
        d,
        scale: 1.0 / (d as f32).sqrt(),
    };
    for head in 0..heads {
        for j in 0..len {
            let row = &seq[j * 3 * h + head * d..];
            queries[j * d..(j + 1) * d].copy_from_slice(&row[..d]);
            values[j * d..(j + 1) * d].copy_from_slice(&row[2 * h..2 * h + d]);
            for (c, &key) in row[h..h + d].iter().enumerate() {
                // Safety: c < d and j < len ≤ width index inside keys_t (d × width).
                unsafe { *keys_t.get_unchecked_mut(c * width + j) = key };
            }
        }
        let mut i = 0;
        while i < len {
            // Safety (both tiles): rows i..i+R < len of queries, values, scores and ctx,
            // columns within width / d, as the buffers are sized above.
            if i + 4 <= len {
                unsafe { scores_tile::<4>(&mut scores, &keys_t, &queries, i, &g) };
                i += 4;
            } else {
                unsafe { scores_tile::<1>(&mut scores, &keys_t, &queries, i, &g) };
                i += 1;
            }
        }
        for row in scores.chunks_exact_mut(width) {
            softmax(&mut row[..len]);
        }
        let mut i = 0;
        while i < len {
            let out = &mut ctx[i * h + head * d..];
            if i + 4 <= len {
                unsafe { context_tile::<4>(out, h, &scores, &values, i, &g) };
                i += 4;
            } else {
                unsafe { context_tile::<1>(out, h, &scores, &values, i, &g) };
                i += 1;
            }
        }
    }
}

struct Geometry {
    len: usize,
    /// Score row stride (len rounded up to 8).
    width: usize,
    d: usize,
    scale: f32,
}

/// scores[i..i+R][..] = scale · q_i · k_j.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn scores_tile<const R: usize>(
    scores: &mut [f32],
    keys_t: &[f32],
    queries: &[f32],
    i: usize,
    g: &Geometry,
) {
    let scale = _mm256_set1_ps(g.scale);
    for j in (0..g.width).step_by(8) {
        let mut acc = [_mm256_setzero_ps(); R];
        for c in 0..g.d {
            let k = unsafe { _mm256_loadu_ps(keys_t.as_ptr().add(c * g.width + j)) };
            for (r, a) in acc.iter_mut().enumerate() {
                let q = _mm256_set1_ps(unsafe { *queries.get_unchecked((i + r) * g.d + c) });
                *a = _mm256_fmadd_ps(q, k, *a);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            unsafe {
                _mm256_storeu_ps(
                    scores.as_mut_ptr().add((i + r) * g.width + j),
                    _mm256_mul_ps(*a, scale),
                )
            };
        }
    }
}

/// Rows i..i+R of the head's context, Σ_j p_ij v_j, into `out` (row r at r·stride).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn context_tile<const R: usize>(
    out: &mut [f32],
    stride: usize,
    scores: &[f32],
    values: &[f32],
    i: usize,
    g: &Geometry,
) {
    for c in (0..g.d).step_by(8) {
        let mut acc = [_mm256_setzero_ps(); R];
        for j in 0..g.len {
            let v = unsafe { _mm256_loadu_ps(values.as_ptr().add(j * g.d + c)) };
            for (r, a) in acc.iter_mut().enumerate() {
                let p = _mm256_set1_ps(unsafe { *scores.get_unchecked((i + r) * g.width + j) });
                *a = _mm256_fmadd_ps(p, v, *a);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(r * stride + c), *a) };
        }
    }
}
