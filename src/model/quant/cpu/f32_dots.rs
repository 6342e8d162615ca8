//! f32 dot products summed in an order fixed by the machine alone: the kernels of
//! `Matrix::dots_t` for weights held in f32.

/// Appends x_r · w for every row x_r of `xs` (rows of `w.len()` values).
pub(crate) type F32DotRows = fn(&[f32], &[f32], &mut Vec<f32>);

/// Σ aᵢbᵢ per row, summed in an order fixed by the machine alone (never by what is computed
/// beside it): fused multiply-adds in 4 × 8 lanes where the CPU has AVX2 and FMA — three rows
/// at a time, each with its own accumulators, so a row's sum is the one it gets alone — else
/// eight lanes the compiler vectorises. Chosen once per process (`kernels`), not per dot.
pub(crate) fn dot_kernel() -> F32DotRows {
    #[cfg(target_arch = "x86_64")]
    if crate::model::backend::cpu::features().avx2_fma {
        return |xs, w, out| {
            let k = w.len();
            let mut rows = xs.chunks_exact(k);
            // SAFETY (all calls): the features the functions are compiled for were just
            // detected.
            while rows.len() >= 3 {
                let x = [(); 3].map(|_| rows.next().expect("three rows left"));
                out.extend(unsafe { dots_avx2(x, w) });
            }
            for x in rows {
                out.extend(unsafe { dots_avx2([x], w) });
            }
        };
    }
    |xs, w, out| out.extend(xs.chunks_exact(w.len()).map(|x| dot_lanes(x, w)))
}

/// a · b in eight lanes summed as the AVX2 kernels sum them (portable bodies).
pub(crate) fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// x_r · w for R rows at once: w's lanes are loaded once for all of them, and each row keeps
/// its own four accumulators, updated exactly as when it is alone (R = 1).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2<const R: usize>(xs: [&[f32]; R], w: &[f32]) -> [f32; R] {
    use std::arch::x86_64::*;
    let n = w.len();
    assert!(xs.iter().all(|x| x.len() == n));
    let pw = w.as_ptr();
    let px = xs.map(|x| x.as_ptr());
    let mut acc = [[_mm256_setzero_ps(); 4]; R];
    let mut i = 0;
    // SAFETY (all loads): i + 8 ≤ n for every 8-float load below, and every row has n values.
    while i + 32 <= n {
        #[allow(clippy::needless_range_loop)] // j picks both the offset and the accumulator
        for j in 0..4 {
            let at = i + 8 * j;
            let wv = unsafe { _mm256_loadu_ps(pw.add(at)) };
            for r in 0..R {
                let xv = unsafe { _mm256_loadu_ps(px[r].add(at)) };
                acc[r][j] = _mm256_fmadd_ps(xv, wv, acc[r][j]);
            }
        }
        i += 32;
    }
    while i + 8 <= n {
        let wv = unsafe { _mm256_loadu_ps(pw.add(i)) };
        for r in 0..R {
            let xv = unsafe { _mm256_loadu_ps(px[r].add(i)) };
            acc[r][0] = _mm256_fmadd_ps(xv, wv, acc[r][0]);
        }
        i += 8;
    }
    let mut sums = [0f32; R];
    for r in 0..R {
        let [a0, a1, a2, a3] = acc[r];
        let sum = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
        let mut lanes = [0f32; 8];
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
        let mut s = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
            + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
        for t in i..n {
            s += xs[r][t] * w[t];
        }
        sums[r] = s;
    }
    sums
}
