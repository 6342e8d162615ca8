//! `--prefill-gemm bf16` and `int8` through whole models. Their own test binary: the choice of
//! products is process-wide, so the tests here take `SWITCH` and run one at a time.

#[path = "../common/mod.rs"]
mod common;

mod prefill_gemm_bf16;
mod prefill_gemm_int8;

/// The products' switch is process-wide and the tests of a binary run on threads: one at a time.
static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
