//! The block formats as stored: each family's layouts and sizes (`legacy`, `kquants`,
//! `iquants`), every format as one type (`block_format`), how its values read as bytes for the
//! 8-bit products (`byte_form`), and conversions between them.

pub mod activations;
pub mod block_format;
pub mod byte_form;
pub mod ggml_types;
pub(crate) mod iquant_grids;
pub mod iquant_held;
pub mod iquant_matrix;
pub mod iquants;
pub mod kquants;
pub mod legacy;
pub(crate) mod q8_0_blocks;
