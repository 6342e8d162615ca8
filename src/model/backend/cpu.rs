//! What this CPU offers hyoka's kernels: its features, detected once per process into one
//! value (`features`), from which every kernel family chooses its body. A test asks for what
//! CPUs without AVX-512 run on an AVX-512 CPU with `HYOKA_TEST_CPU=avx2`, which takes every
//! AVX-512 feature away (the 8-bit products have their own switch, `HYOKA_TEST_INT8_BODY`).

use std::sync::OnceLock;

/// The test switch: `avx2` takes AVX-512 away from hyoka's kernels.
pub const TEST_CPU: &str = "HYOKA_TEST_CPU";

/// The CPU's features that hyoka's kernels are compiled for. A field is true only where the
/// CPU has every feature it names (what makes calling a kernel compiled for them sound).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// AVX2 and FMA.
    pub avx2_fma: bool,
    /// AVX2, FMA and F16C (the block formats' f16 scales).
    pub avx2_fma_f16c: bool,
    /// AVX-512 F and DQ.
    pub avx512: bool,
    /// AVX-512 VNNI and VL, with AVX2, FMA and F16C (the 8-bit dots on 256-bit registers).
    pub avx512_vnni: bool,
    /// AVX-512 BF16, with AVX-512 F.
    pub avx512_bf16: bool,
}

/// This CPU's features, detected once (less AVX-512 under `HYOKA_TEST_CPU=avx2`).
pub fn features() -> CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    *FEATURES.get_or_init(|| {
        let mut f = detected();
        if test_override().is_some() {
            f.avx512 = false;
            f.avx512_vnni = false;
            f.avx512_bf16 = false;
        }
        f
    })
}

/// AVX-512 F and DQ, unless `HYOKA_TEST_CPU=avx2`.
pub fn avx512() -> bool {
    features().avx512
}

/// `Some("avx2")` when `HYOKA_TEST_CPU=avx2` takes AVX-512 away from a CPU that has it: a
/// setting that changes numbers, recorded in a judge's provenance.
pub fn test_override() -> Option<&'static str> {
    static FORCED: OnceLock<bool> = OnceLock::new();
    let forced = *FORCED
        .get_or_init(|| std::env::var(TEST_CPU).is_ok_and(|v| v == "avx2") && detected().avx512);
    forced.then_some("avx2")
}

#[cfg(target_arch = "x86_64")]
fn detected() -> CpuFeatures {
    use std::arch::is_x86_feature_detected as has;
    let avx2_fma = has!("avx2") && has!("fma");
    let avx2_fma_f16c = avx2_fma && has!("f16c");
    let avx512 = has!("avx512f") && has!("avx512dq");
    CpuFeatures {
        avx2_fma,
        avx2_fma_f16c,
        avx512,
        avx512_vnni: avx2_fma_f16c && has!("avx512f") && has!("avx512vnni") && has!("avx512vl"),
        avx512_bf16: has!("avx512f") && has!("avx512bf16"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detected() -> CpuFeatures {
    CpuFeatures::default()
}
