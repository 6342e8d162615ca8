//! Whether hyoka's own kernels may use AVX-512 here: detected once per process. A test asks
//! for the AVX2 bodies on an AVX-512 CPU with `HYOKA_TEST_CPU=avx2`, to check on one machine
//! what CPUs without AVX-512 compute (the 8-bit products have their own switch,
//! `HYOKA_TEST_INT8_BODY`).

use std::sync::OnceLock;

/// The test switch: `avx2` takes AVX-512 away from hyoka's kernels (attention, exponentials).
pub const TEST_CPU: &str = "HYOKA_TEST_CPU";

/// AVX-512 F and DQ, unless `HYOKA_TEST_CPU=avx2`.
pub fn avx512() -> bool {
    static AVX512: OnceLock<bool> = OnceLock::new();
    *AVX512.get_or_init(|| test_override().is_none() && detected())
}

/// `Some("avx2")` when `HYOKA_TEST_CPU=avx2` takes AVX-512 away from a CPU that has it: a
/// setting that changes numbers, recorded in a judge's provenance.
pub fn test_override() -> Option<&'static str> {
    static FORCED: OnceLock<bool> = OnceLock::new();
    let forced =
        *FORCED.get_or_init(|| std::env::var(TEST_CPU).is_ok_and(|v| v == "avx2") && detected());
    forced.then_some("avx2")
}

#[cfg(target_arch = "x86_64")]
fn detected() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512dq")
}

#[cfg(not(target_arch = "x86_64"))]
fn detected() -> bool {
    false
}
