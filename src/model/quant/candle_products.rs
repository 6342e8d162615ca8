//! candle's quantized product: what the integer kernels fall back on, and their tests' reference.

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Module, Result, Tensor};
use std::sync::Arc;

/// x · Wᵀ through candle's quantized kernels, which take f32 activations.
pub(crate) fn quantized_product(q: &Arc<QTensor>, x: &Tensor) -> Result<Tensor> {
    let y = QMatMul::from_arc(q.clone())?.forward(&x.to_dtype(DType::F32)?.contiguous()?)?;
    y.to_dtype(x.dtype())
}

/// The reference of the integer kernels' tests: candle's quantized product of each row of x
/// (n, in) on its own, as (n, out) values.
#[cfg(test)]
pub(crate) fn candle_product_by_row(q: &Arc<QTensor>, x: &Tensor) -> Vec<Vec<f32>> {
    (0..x.dim(0).expect("a matrix"))
        .map(|r| {
            let row = x.narrow(0, r, 1).expect("row r");
            let y = quantized_product(q, &row).expect("candle's product");
            y.flatten_all()
                .and_then(|y| y.to_vec1())
                .expect("f32 values")
        })
        .collect()
}
