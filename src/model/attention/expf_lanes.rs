//! e^x over many f32 values at once, for the softmaxes of attention.
//!
//! Prefill attention spent a sixth of its time in libm's `expf`, one call per score (perf, json
//! mode: 5% of the whole run). The AVX2 body here is glibc's `expf` algorithm (the code glibc
//! ≥ 2.27 runs on x86-64 with FMA, `__expf_fma`: k = round(x·32/ln 2), a 32-entry table of
//! 2^(i/32), a cubic in double precision) on four doubles per vector, with glibc's constants
//! and the same fused operations — read from its disassembly — so each value is glibc's to the
//! bit (tested over every 251st f32 against `f32::exp`). Where libm is another (macOS, musl) the
//! values are still within glibc's 0.502 ulp, only not that libm's bits. Values outside the
//! range the algorithm covers (NaN, overflow, the subnormal edge) go to `f32::exp`; below
//! it every libm returns +0, as here. (The encoder's `fused::math::exp_f32` is a ≤ 3 ulp
//! approximation: used here it would move every judge score by its rounding.)

/// e^x for every x in `xs`, in place.
pub fn exp_in_place(xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512_available() {
        // SAFETY: the features the body is compiled for were just detected.
        unsafe { avx512::exp_in_place(xs) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::model::backend::cpu::features().avx2_fma {
        // SAFETY: the features the body is compiled for were just detected.
        unsafe { avx2::exp_in_place(xs) };
        return;
    }
    xs.iter_mut().for_each(|x| *x = x.exp());
}

#[cfg(target_arch = "x86_64")]
fn avx512_available() -> bool {
    let cpu = crate::model::backend::cpu::features();
    cpu.avx512 && cpu.avx2_fma
}

/// Lanes of a chunk whose bit is set in `others` (outside the table's range): `f32::exp` of
/// the chunk's input `xs`, over what the vector body wrote.
fn left_to_libm(chunk: &mut [f32], xs: &[f32], others: u32) {
    if others != 0 {
        for (i, (v, x)) in chunk.iter_mut().zip(xs).enumerate() {
            if others & (1 << i) != 0 {
                *v = x.exp();
            }
        }
    }
}

/// Largest x whose e^x is finite (glibc's overflow bound).
const UPPER: f32 = f32::from_bits(0x42b1_7217);
/// Below this e^x is +0 (glibc's underflow bound, −103.97).
const ZERO_BELOW: f32 = f32::from_bits(0xc2cf_f1b4);
/// From here up to `UPPER` the table and cubic are used as they are (−103.28); between
/// `ZERO_BELOW` and here glibc rounds a subnormal through another path.
const TABLE_FROM: f32 = f32::from_bits(0xc2ce_8ecf);

/// 32/ln 2.
const INV_LN2_N: f64 = f64::from_bits(0x4047_1547_652b_82fe);
/// Rounds a double to an integer in its low bits (2^52 + 2^51).
const SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000);
/// The cubic's coefficients, scaled for r = x·32/ln 2 − k.
const C0: f64 = f64::from_bits(0x3ebc_6af8_4b91_2394);
const C1: f64 = f64::from_bits(0x3f2e_bfce_50fa_c4f3);
const C2: f64 = f64::from_bits(0x3f96_2e42_ff0c_52d6);

/// TABLE[i]: the bits of 2^(i/32) rounded to a double, minus i << 47 (so that adding k << 47
/// for k ≡ i mod 32 multiplies by 2^⌊k/32⌋).
const TABLE: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn exp_in_place(xs: &mut [f32]) {
        let mut chunks = xs.chunks_exact_mut(8);
        for c in &mut chunks {
            let xs: [f32; 8] = c.try_into().expect("chunks of 8");
            // SAFETY: 8 values in the chunk.
            let (y, others) = exp8(unsafe { _mm256_loadu_ps(xs.as_ptr()) });
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), y) };
            left_to_libm(c, &xs, others as u32);
        }
        chunks
            .into_remainder()
            .iter_mut()
            .for_each(|x| *x = x.exp());
    }

    /// e^x in 8 lanes, and a bit set for each lane left to `f32::exp` (its value here is not).
    #[target_feature(enable = "avx2,fma")]
    fn exp8(x: __m256) -> (__m256, i32) {
        let table = _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(TABLE_FROM)),
            _mm256_cmp_ps::<_CMP_LE_OQ>(x, _mm256_set1_ps(UPPER)),
        );
        let zero = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(ZERO_BELOW));
        let others = !_mm256_movemask_ps(_mm256_or_ps(table, zero)) & 0xff;
        // Lanes not in the table's range compute e^0 here, then are replaced.
        let xt = _mm256_and_ps(x, table);
        let lo = _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(xt))));
        let hi = _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(xt))));
        let y = _mm256_andnot_ps(zero, _mm256_set_m128(hi, lo));
        (y, others)
    }

    /// glibc's `__expf_fma` on four doubles: each operation as its disassembly has it
    /// (fused where it fuses), so that the result rounds to the same float.
    #[target_feature(enable = "avx2,fma")]
    fn exp4(x: __m256d) -> __m256d {
        let inv = _mm256_set1_pd(INV_LN2_N);
        let shift = _mm256_set1_pd(SHIFT);
        let kd_shifted = _mm256_fmadd_pd(x, inv, shift);
        let ki = _mm256_castpd_si256(kd_shifted);
        let kd = _mm256_sub_pd(kd_shifted, shift);
        let r = _mm256_fmsub_pd(inv, x, kd);
        let i = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
        // SAFETY: every index is below 32, the table's length.
        let t = unsafe { _mm256_i64gather_epi64::<8>(TABLE.as_ptr() as *const i64, i) };
        let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
        let z = _mm256_fmadd_pd(r, _mm256_set1_pd(C0), _mm256_set1_pd(C1));
        let r2 = _mm256_mul_pd(r, r);
        let y = _mm256_fmadd_pd(r, _mm256_set1_pd(C2), _mm256_set1_pd(1.0));
        let y = _mm256_fmadd_pd(z, r2, y);
        _mm256_mul_pd(y, s)
    }
}

/// The same operations on sixteen lanes (eight doubles per vector), the table read by two
/// two-register permutes instead of a gather: gathers are slow on the AMD and Intel cores
/// measured here, and the algorithm spent most of its time in them.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    pub fn exp_in_place(xs: &mut [f32]) {
        let table = Table::load();
        let mut chunks = xs.chunks_exact_mut(16);
        for c in &mut chunks {
            let xs: [f32; 16] = c.try_into().expect("chunks of 16");
            // SAFETY: 16 values in the chunk.
            let (y, others) = exp16(unsafe { _mm512_loadu_ps(xs.as_ptr()) }, &table);
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(c.as_mut_ptr(), y) };
            left_to_libm(c, &xs, others as u32);
        }
        super::avx2::exp_in_place(chunks.into_remainder());
    }

    /// TABLE in four registers of eight entries.
    struct Table([__m512i; 4]);

    impl Table {
        #[target_feature(enable = "avx512f")]
        fn load() -> Self {
            // SAFETY: TABLE holds 32 values, four times eight.
            Table(std::array::from_fn(|q| unsafe {
                _mm512_loadu_si512(TABLE.as_ptr().add(8 * q) as *const __m512i)
            }))
        }
    }

    /// e^x in 16 lanes, and a bit set for each lane left to `f32::exp` (as avx2's exp8).
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    fn exp16(x: __m512, table: &Table) -> (__m512, u16) {
        let in_table = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(TABLE_FROM))
            & _mm512_cmp_ps_mask::<_CMP_LE_OQ>(x, _mm512_set1_ps(UPPER));
        let zero = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(ZERO_BELOW));
        let others = !(in_table | zero);
        // Lanes not in the table's range compute e^0 here, then are replaced.
        let xt = _mm512_maskz_mov_ps(in_table, x);
        let lo = _mm512_cvtpd_ps(exp8(_mm512_cvtps_pd(_mm512_castps512_ps256(xt)), table));
        let hi = _mm512_cvtpd_ps(exp8(
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                _mm512_castps_pd(xt),
            ))),
            table,
        ));
        let y = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(lo), hi);
        (_mm512_maskz_mov_ps(!zero, y), others)
    }

    /// avx2's exp4 on eight doubles, operation for operation.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    fn exp8(x: __m512d, table: &Table) -> __m512d {
        let inv = _mm512_set1_pd(INV_LN2_N);
        let shift = _mm512_set1_pd(SHIFT);
        let kd_shifted = _mm512_fmadd_pd(x, inv, shift);
        let ki = _mm512_castpd_si512(kd_shifted);
        let kd = _mm512_sub_pd(kd_shifted, shift);
        let r = _mm512_fmsub_pd(inv, x, kd);
        // Entry ki mod 32: bits 0–3 pick within a half (two registers), bit 4 the half.
        let [t0, t1, t2, t3] = table.0;
        let low = _mm512_permutex2var_epi64(t0, ki, t1);
        let high = _mm512_permutex2var_epi64(t2, ki, t3);
        let upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
        let t = _mm512_mask_blend_epi64(upper, low, high);
        let s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64::<47>(ki)));
        let z = _mm512_fmadd_pd(r, _mm512_set1_pd(C0), _mm512_set1_pd(C1));
        let r2 = _mm512_mul_pd(r, r);
        let y = _mm512_fmadd_pd(r, _mm512_set1_pd(C2), _mm512_set1_pd(1.0));
        let y = _mm512_fmadd_pd(z, r2, y);
        _mm512_mul_pd(y, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 251st f32 bit pattern (both signs, NaNs, infinities, subnormals, the edges of the
    /// table's range) and the bounds themselves with their neighbours.
    fn samples() -> Vec<f32> {
        let mut xs: Vec<f32> = (0..=u32::MAX / 251)
            .map(|i| f32::from_bits(i * 251))
            .collect();
        for b in [UPPER, ZERO_BELOW, TABLE_FROM, 0.0, -0.0] {
            for d in -3i32..=3 {
                xs.push(f32::from_bits(b.to_bits().wrapping_add_signed(d)));
            }
        }
        xs.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN,
            f32::MAX,
        ]);
        xs
    }

    /// Every body this CPU runs, by name.
    type Body = (&'static str, fn(&mut [f32]));

    fn bodies() -> Vec<Body> {
        #[allow(unused_mut)]
        let mut bodies: Vec<Body> = vec![("dispatch", exp_in_place)];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the features were just detected.
                bodies.push(("avx2", |xs| unsafe { avx2::exp_in_place(xs) }));
            }
            if avx512_available() {
                // SAFETY: as above.
                bodies.push(("avx512", |xs| unsafe { avx512::exp_in_place(xs) }));
            }
        }
        bodies
    }

    /// glibc's bits where glibc's `expf` on FMA hardware is the reference, from every body
    /// (16 and 8 lanes, and their tails).
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    fn every_value_is_glibcs_expf() {
        if !std::arch::is_x86_feature_detected!("fma") {
            return;
        }
        let mut xs = samples();
        // A tail for each body: 13 past the last 16 (8 of them through the 8-lane body).
        while xs.len() % 16 != 13 {
            xs.push(-1.5);
        }
        for (name, body) in bodies() {
            let mut got = xs.clone();
            body(&mut got);
            let differ: Vec<f32> = xs
                .iter()
                .zip(&got)
                .filter(|(x, y)| x.exp().to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))
                .map(|(x, _)| *x)
                .collect();
            assert!(
                differ.is_empty(),
                "{name}: {} values differ, e.g. {:?}",
                differ.len(),
                &differ[..differ.len().min(5)]
            );
        }
    }

    /// Everywhere: within one ulp of e^x computed in f64.
    #[test]
    fn every_value_within_one_ulp() {
        let xs = samples();
        let mut got = xs.clone();
        exp_in_place(&mut got);
        for (x, y) in xs.iter().zip(&got) {
            let want = (*x as f64).exp() as f32;
            if x.is_nan() {
                assert!(y.is_nan());
                continue;
            }
            let ulps = (want.to_bits() as i64 - y.to_bits() as i64).abs();
            assert!(ulps <= 1, "e^{x}: {y} against {want}");
        }
    }
}
