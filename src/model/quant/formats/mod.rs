//! The block formats as stored: their layouts, and conversions between them.

pub(crate) mod iquant_grids;
pub mod iquant_held;
pub mod iquants;
pub mod kquants;
pub(crate) mod q8_0_blocks;
