//! The lookup tables of llama.cpp's i-quants, from ggml's ggml-common.h (llama-cpp-python
//! 0.3.36's vendored llama.cpp). Written by scripts/fixtures/make_iquant_grids.py; do not edit.
//! A grid entry's bytes, little-endian, are the values of consecutive weights.

mod iq1;
mod iq2_iq3_iq4;

pub use iq1::IQ1S_GRID;
pub use iq2_iq3_iq4::{
    IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS, KVALUES_IQ4NL,
};
