//! The two loops of rounding activation rows to 8 bits (`block_dots::Q8Rows`,
//! `kquant_dots::Q8KRows`): a block's largest magnitude, then each value scaled and rounded.
//!
//! They run on the calling thread before every decoding product while the other threads wait;
//! compiled for the baseline x86-64 they are scalar (`roundf` called per value, a scalar
//! maximum): 2.6% of a 16-row json decoding run. The AVX2 bodies give the same bytes: a
//! maximum does not depend on the order it is taken in, and halves are rounded away from zero
//! as `roundf` does (trunc(x + copysign(0.49999997, x)), exact below 2²³, LLVM's own lowering
//! of `f32::round`).

/// The bodies for one machine; [`Rounding::for_machine`] picks them once per process.
#[derive(Clone, Copy)]
pub struct Rounding {
    /// max |xᵢ| (0 for no values), NaNs ignored as `f32::max` ignores them.
    pub max_abs: fn(&[f32]) -> f32,
    /// qᵢ = round(xᵢ·scale), halves away from zero, saturated to −128..127, NaN → 0 (Rust's
    /// `as i8`); returns Σqᵢ.
    pub round: fn(&[f32], f32, &mut [i8]) -> i32,
}

impl Rounding {
    pub const PORTABLE: Rounding = Rounding {
        max_abs: max_abs_portable,
        round: round_portable,
    };

    /// This machine's bodies, chosen once per process.
    pub fn for_machine() -> Rounding {
        static CHOSEN: std::sync::OnceLock<Rounding> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(Rounding::choose)
    }

    fn choose() -> Rounding {
        #[cfg(target_arch = "x86_64")]
        if crate::model::backend::cpu::features().avx2_fma {
            // SAFETY (both): the feature the bodies are compiled for was just detected.
            return Rounding {
                max_abs: |x| unsafe { avx2::max_abs(x) },
                round: |x, scale, q| unsafe { avx2::round(x, scale, q) },
            };
        }
        Rounding::PORTABLE
    }
}

fn max_abs_portable(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, v| m.max(v.abs()))
}

fn round_portable(x: &[f32], scale: f32, q: &mut [i8]) -> i32 {
    assert_eq!(x.len(), q.len());
    let mut sum = 0;
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * scale).round() as i8;
        sum += *q as i32;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2")]
    pub fn max_abs(x: &[f32]) -> f32 {
        let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        let mut acc = _mm256_setzero_ps();
        let mut chunks = x.chunks_exact(8);
        for c in chunks.by_ref() {
            // SAFETY: 8 values from c's start lie in c.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            // maxps returns its second operand where either is NaN: the running maximum.
            acc = _mm256_max_ps(_mm256_and_ps(v, magnitude), acc);
        }
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds 8 values.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        let rest = super::max_abs_portable(chunks.remainder());
        lanes.iter().fold(rest, |m, &v| m.max(v))
    }

    #[target_feature(enable = "avx2")]
    pub fn round(x: &[f32], scale: f32, q: &mut [i8]) -> i32 {
        assert_eq!(x.len(), q.len());
        let s = _mm256_set1_ps(scale);
        let below_half = _mm256_set1_ps(0.49999997);
        let sign = _mm256_set1_ps(-0.0);
        let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
        // Bytes 0–3 of each 128-bit lane after two packs: (a0..3, b0..3, a4..7, b4..7).
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let eight = |at: &[f32]| {
            // SAFETY: the callers pass 8 values.
            let v = _mm256_mul_ps(unsafe { _mm256_loadu_ps(at.as_ptr()) }, s);
            let away = _mm256_or_ps(_mm256_and_ps(v, sign), below_half);
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(_mm256_add_ps(
                v, away,
            ));
            // NaN → 0, then saturate (±∞ included), as `as i8` does.
            let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(v, v));
            _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
        };
        let mut sum = _mm256_setzero_si256();
        let mut chunks = x.chunks_exact(16).zip(q.chunks_exact_mut(16));
        for (x16, q16) in chunks.by_ref() {
            let (a, b) = (eight(&x16[..8]), eight(&x16[8..]));
            sum = _mm256_add_epi32(sum, _mm256_add_epi32(a, b));
            let bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_setzero_si256());
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            // SAFETY: q16 holds 16 bytes.
            unsafe {
                _mm_storeu_si128(
                    q16.as_mut_ptr() as *mut __m128i,
                    _mm256_castsi256_si128(bytes),
                )
            };
        }
        let mut lanes = [0i32; 8];
        // SAFETY: `lanes` holds 8 values.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, sum) };
        let done = x.len() / 16 * 16;
        lanes.iter().sum::<i32>() + super::round_portable(&x[done..], scale, &mut q[done..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The machine's bodies give the portable loop's results on what rounding gets wrong:
    /// exact halves of either sign, values a hair either side of them, ±∞, NaN, an infinite
    /// scale (1/d of a subnormal d), and lengths with a scalar tail.
    #[test]
    fn machine_bodies_match_the_portable_loops() {
        let mut x: Vec<f32> = (-300..=300).map(|i| i as f32 * 0.5).collect();
        for h in [0.5f32, 1.5, 2.5, 126.5, 127.5] {
            for v in [h, -h] {
                x.extend([
                    v,
                    f32::from_bits(v.to_bits() + 1),
                    f32::from_bits(v.to_bits() - 1),
                ]);
            }
        }
        x.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -0.0,
            1e-40,
            -1e-40,
        ]);
        x.extend((0..97).map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0));
        let (machine, portable) = (Rounding::for_machine(), Rounding::PORTABLE);
        for len in [0, 1, 15, 16, 17, 32, 256, x.len()] {
            let xs = &x[..len];
            let (m, p) = ((machine.max_abs)(xs), (portable.max_abs)(xs));
            assert_eq!(m.to_bits(), p.to_bits(), "max_abs, {len} values");
            for scale in [1.0f32, 0.37, -127.0 / 150.0, f32::INFINITY, 0.0] {
                let (mut qm, mut qp) = (vec![0i8; len], vec![0i8; len]);
                let sm = (machine.round)(xs, scale, &mut qm);
                let sp = (portable.round)(xs, scale, &mut qp);
                assert_eq!((sm, &qm), (sp, &qp), "round, {len} values, scale {scale}");
            }
        }
        // The portable loop itself, against values worked by hand.
        let mut q = [0i8; 6];
        let sum = round_portable(&[0.5, -0.5, 1.5, -2.5, f32::NAN, 1e9], 1.0, &mut q);
        assert_eq!((q, sum), ([1, -1, 2, -3, 0, 127], 126));
    }
}
