//! Weight formats and their products: the stored matrix and its dispatch (`matrix`), one
//! description per block format (`formats`), the kernels per ISA (`cpu`) and for CUDA (`cuda`).

pub(crate) mod candle_products;
pub mod cpu;
pub mod cuda;
pub mod formats;
pub mod matrix;
pub mod products;
