//! The block formats as stored: each family's layouts and sizes (`legacy`, `kquants`,
//! `iquants`), every format as one type (`block_format`), and conversions between them.

pub mod block_format;
pub(crate) mod iquant_grids;
pub mod iquant_held;
pub mod iquants;
pub mod kquants;
pub mod legacy;
pub(crate) mod q8_0_blocks;
