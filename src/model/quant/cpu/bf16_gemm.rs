//! x · Wᵀ on the CPU with both operands rounded to bf16 and the products summed in f32, on
//! AVX512-BF16 (`vdpbf16ps`: 32 multiply-adds an instruction, twice an f32 FMA's): prefill's
//! products under `--prefill-gemm bf16` (`prefill_gemm`).
//!
//! Why: on this project's CPU (AMD EPYC, Zen 5) the f32 GEMM of an 8B prefill runs at the cores'
//! f32 peak, 0.84× llama.cpp, whose products multiply 8-bit activations by the quantized blocks.
//! Rounding to bf16 instead (8 significant bits for both operands, exact products, f32 sums)
//! is what a GPU does in bf16, and keeps more of the activations than llama.cpp's 8-bit rounding.
//! Off by default: the default prefill is the expanded f32 model's to the bit. On Intel's
//! Xeons `vdpbf16ps` runs at a quarter of the FMA's rate, and this takes ~1.7× the f32 GEMM's
//! time (`quarter_rate_here`; `--prefill-gemm int8` is the faster choice there).
//!
//! Layout (GotoBLAS's): W's rows are converted a panel of [`NR`] at a time for [`KC`] values of
//! k, interleaved in pairs of k as `vdpbf16ps` takes them; x's rows are converted once. A tile
//! of up to [`MR`] rows × 32 columns is summed in registers over a block of k, starting from
//! what the previous blocks left in the output. Every row goes through the same instructions
//! in the same order wherever it lies in the batch, so a row's result does not depend on the
//! rows beside it (the batch invariance the f32 path has).

/// Values of k per block: a panel's 32 columns × 512 values are 32 KB of bf16.
const KC: usize = 512;
/// Rows per block: 384 rows × 512 values of x (384 KB) stay in L2 while the panels pass.
const MC: usize = 384;
/// Rows per tile (24 accumulators of the 32 registers).
pub const MR: usize = 12;
/// Columns per tile and panel: two registers of 16 f32.
pub const NR: usize = 32;

/// Whether this CPU has the instructions (AVX-512F and AVX512-BF16).
pub fn available() -> bool {
    crate::model::backend::cpu::features().avx512_bf16
}

/// Whether this CPU is Intel's: Sapphire and Emerald Rapids run `vdpbf16ps` at a quarter of
/// the rate of `vfmadd231ps` (measured on an Emerald Rapids Xeon: 0.75 vs 0.18 ns per
/// instruction in independent chains), so these products take about twice the f32 GEMM's
/// time there; AMD's Zen 4 and 5 run it at the FMA's rate (twice its multiply-adds).
pub fn quarter_rate_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let id = std::arch::x86_64::__cpuid(0);
        let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        vendor == b"GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// x (m, k) · wᵀ (w: (n, k), row-major, f32) → (m, n) f32 in a vector with room for `room` ≥ m
/// rows; None when the CPU lacks the instructions (`available`).
pub fn gemm_t(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, room: usize) -> Option<Vec<f32>> {
    assert!(x.len() == m * k && w.len() == n * k, "operand sizes");
    if !available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let mut y: Vec<f32> = Vec::with_capacity(room.max(m) * n);
        if m > 0 && n > 0 {
            // SAFETY: the CPU has AVX-512F and AVX512-BF16 (checked above); y has room for m × n.
            unsafe { x86::gemm_t(x, m, k, w, n, y.as_mut_ptr()) };
        }
        // SAFETY: every element of the m × n output was written (the first block of k stores
        // every tile's columns below n); with k = 0 the products are zeros, written there too.
        unsafe { y.set_len(m * n) };
        Some(y)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (room, x, w);
        None
    }
}

/// `x` rounded to bf16 as the kernels round it (to nearest, ties to even): for references.
pub fn round_to_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{KC, MC, MR, NR};
    use rayon::prelude::*;
    use std::arch::x86_64::*;

    /// The output's base, shared by the threads, each writing its own columns.
    #[derive(Clone, Copy)]
    struct Out(*mut f32);
    // SAFETY: the threads write disjoint columns of the output (`gemm_t`).
    unsafe impl Send for Out {}
    unsafe impl Sync for Out {}

    /// See `super::gemm_t`; `y` has room for m × n values.
    ///
    /// # Safety
    /// AVX-512F and AVX512-BF16 available; `y` valid for m × n writes.
    pub unsafe fn gemm_t(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, y: *mut f32) {
        let pairs = k.div_ceil(2);
        // x as rows of bf16 pairs (k padded with a zero to even).
        let mut xa = vec![0u32; m * pairs];
        xa.par_chunks_mut(pairs.max(1))
            .zip(x.par_chunks(k.max(1)))
            .for_each(|(to, from)| {
                // SAFETY: the CPU has the instructions (the caller's contract).
                unsafe { to_pairs(from, to) }
            });
        let panels = n.div_ceil(NR);
        let threads = rayon::current_num_threads().max(1);
        let per = panels.div_ceil(threads);
        let out = Out(y);
        (0..panels.div_ceil(per)).into_par_iter().for_each(|t| {
            let mine = t * per..((t + 1) * per).min(panels);
            // SAFETY: the caller's contract; this task writes the columns of its panels only.
            unsafe { columns(&xa, m, pairs, w, k, n, mine, out) }
        });
        if k == 0 {
            for i in 0..m * n {
                // SAFETY: i < m × n.
                unsafe { y.add(i).write(0.0) };
            }
        }
    }

    /// The output's columns of `panels` (of NR), every row: block by block of k, each block's
    /// panels converted once, then tile by tile.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn columns(
        xa: &[u32],
        m: usize,
        pairs: usize,
        w: &[f32],
        k: usize,
        n: usize,
        panels: std::ops::Range<usize>,
        out: Out,
    ) {
        let block = KC / 2;
        let mut packed = vec![0u32; panels.len() * block * NR];
        let mut row = vec![0u32; block];
        for p0 in (0..pairs).step_by(block) {
            let np = block.min(pairs - p0);
            for (i, panel) in panels.clone().enumerate() {
                let dst = &mut packed[i * block * NR..][..np * NR];
                for c in 0..NR {
                    let col = panel * NR + c;
                    if col < n {
                        let from = &w[col * k..(col + 1) * k];
                        let (start, end) = (2 * p0, (2 * (p0 + np)).min(k));
                        // SAFETY: the instructions are enabled in this function.
                        unsafe { to_pairs(&from[start..end], &mut row[..np]) };
                    } else {
                        row[..np].fill(0);
                    }
                    for p in 0..np {
                        dst[p * NR + c] = row[p];
                    }
                }
            }
            for m0 in (0..m).step_by(MC) {
                let rows = MC.min(m - m0);
                for (i, panel) in panels.clone().enumerate() {
                    let b = packed[i * block * NR..].as_ptr();
                    let col = panel * NR;
                    let valid = (n - col).min(NR);
                    let masks = (lanes(valid.min(16)), lanes(valid.saturating_sub(16)));
                    for r0 in (m0..m0 + rows).step_by(MR) {
                        let a = xa[r0 * pairs + p0..].as_ptr();
                        // SAFETY: rows r0.. of y from column `col` exist (r0 + tile ≤ m, the
                        // masks stop at n); a holds the tile's rows at stride `pairs`, b np
                        // pairs of the panel.
                        let c = unsafe { out.0.add(r0 * n + col) };
                        let t = (m0 + rows - r0).min(MR);
                        let acc = p0 > 0;
                        unsafe { tile_rows(t, a, pairs, b, np, c, n, masks, acc) };
                    }
                }
            }
        }
    }

    fn lanes(count: usize) -> u16 {
        ((1u32 << count) - 1) as u16
    }

    /// `from` (f32) rounded to bf16 into pairs (`to`: from.len() / 2 rounded up; an odd last
    /// value paired with zero), through `vcvtneps2bf16` (to nearest, ties to even).
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn to_pairs(from: &[f32], to: &mut [u32]) {
        let mut chunks = from.chunks_exact(32);
        let mut at = 0;
        for c in chunks.by_ref() {
            // SAFETY: c has 32 values; `to` has room for 16 more pairs (its length is
            // from.len() / 2 rounded up).
            unsafe {
                let lo = _mm512_loadu_ps(c.as_ptr());
                let hi = _mm512_loadu_ps(c.as_ptr().add(16));
                let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                _mm512_storeu_epi32(to.as_mut_ptr().add(at) as *mut i32, v);
            }
            at += 16;
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut tail = [0f32; 32];
            tail[..rest.len()].copy_from_slice(rest);
            let mut pairs = [0u32; 16];
            // SAFETY: as above, on the zero-padded copy.
            unsafe {
                let lo = _mm512_loadu_ps(tail.as_ptr());
                let hi = _mm512_loadu_ps(tail.as_ptr().add(16));
                let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                _mm512_storeu_epi32(pairs.as_mut_ptr() as *mut i32, v);
            }
            let left = to.len() - at;
            to[at..].copy_from_slice(&pairs[..left]);
        }
    }

    /// A tile of `t` ≤ MR rows.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn tile_rows(
        t: usize,
        a: *const u32,
        lda: usize,
        b: *const u32,
        pairs: usize,
        c: *mut f32,
        ldc: usize,
        masks: (u16, u16),
        accumulate: bool,
    ) {
        macro_rules! go {
            ($($r:literal)*) => {
                match t {
                    // SAFETY: the caller's contract, for t rows.
                    $($r => unsafe { tile::<$r>(a, lda, b, pairs, c, ldc, masks, accumulate) },)*
                    _ => unreachable!("a tile has 1 to {MR} rows"),
                }
            };
        }
        go!(1 2 3 4 5 6 7 8 9 10 11 12)
    }

    /// R rows × 32 columns over `pairs` pairs of k: y (from c, row stride ldc; `masks` the
    /// columns that exist) += or = the rows of a (row stride lda, in pairs) · the panel b (for
    /// each pair, 32 columns' pairs).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn tile<const R: usize>(
        a: *const u32,
        lda: usize,
        b: *const u32,
        pairs: usize,
        c: *mut f32,
        ldc: usize,
        masks: (u16, u16),
        accumulate: bool,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        // SAFETY (the whole body): the caller's contract — R rows of a and c, `pairs` pairs of
        // b; masked loads and stores touch only the columns that exist.
        unsafe {
            if accumulate {
                for (r, acc) in acc.iter_mut().enumerate() {
                    acc[0] = _mm512_maskz_loadu_ps(masks.0, c.add(r * ldc));
                    acc[1] = _mm512_maskz_loadu_ps(masks.1, c.add(r * ldc + 16));
                }
            }
            for p in 0..pairs {
                let b0: __m512bh =
                    std::mem::transmute(_mm512_loadu_epi32(b.add(p * NR) as *const i32));
                let b1: __m512bh =
                    std::mem::transmute(_mm512_loadu_epi32(b.add(p * NR + 16) as *const i32));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x: __m512bh =
                        std::mem::transmute(_mm512_set1_epi32(*a.add(r * lda + p) as i32));
                    acc[0] = _mm512_dpbf16_ps(acc[0], x, b0);
                    acc[1] = _mm512_dpbf16_ps(acc[1], x, b1);
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                _mm512_mask_storeu_ps(c.add(r * ldc), masks.0, acc[0]);
                _mm512_mask_storeu_ps(c.add(r * ldc + 16), masks.1, acc[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect()
    }

    /// Every element within f32 summation's bound of the product of the bf16-rounded operands
    /// computed in f64, at shapes with tails in every dimension (rows past a tile and a block,
    /// columns past a panel, odd k, k past a block).
    #[test]
    fn products_of_the_rounded_operands_within_f32_summation() {
        if !available() {
            eprintln!("skipping: this CPU has no AVX512-BF16");
            return;
        }
        for (m, k, n) in [
            (1, 1, 1),
            (13, 7, 33),
            (397, 1029, 70),
            (25, 512, 64),
            (5, 2048, 31),
        ] {
            let (x, w) = (values(m * k, 1 + m as u64), values(n * k, 2 + k as u64));
            let y = gemm_t(&x, m, k, &w, n, m).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let (mut exact, mut mag) = (0f64, 0f64);
                    for l in 0..k {
                        let p =
                            round_to_bf16(x[i * k + l]) as f64 * round_to_bf16(w[j * k + l]) as f64;
                        exact += p;
                        mag += p.abs();
                    }
                    let bound = k as f64 * f32::EPSILON as f64 * mag + 1e-30;
                    let got = y[i * n + j] as f64;
                    assert!(
                        (got - exact).abs() <= bound,
                        "({m},{k},{n}) [{i},{j}]: {got} vs {exact}"
                    );
                }
            }
        }
    }

    /// A row's result is the same bits alone as in any batch (any tile position).
    #[test]
    fn rows_keep_their_bits_in_any_batch() {
        if !available() {
            return;
        }
        let (m, k, n) = (29, 700, 40);
        let (x, w) = (values(m * k, 5), values(n * k, 6));
        let all = gemm_t(&x, m, k, &w, n, m).unwrap();
        for i in [0, 11, 12, 28] {
            let one = gemm_t(&x[i * k..(i + 1) * k], 1, k, &w, n, 1).unwrap();
            assert!(
                one.iter()
                    .zip(&all[i * n..(i + 1) * n])
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "row {i}"
            );
        }
    }
}
