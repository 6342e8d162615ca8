//! The activations' 8-bit block formats the integer products multiply weights with (llama.cpp's
//! `vec_dot_type`s): Q8_0/Q8_1 rows for the 32-value blocks, Q8_K rows for the K-quants and most
//! i-quants. Their quantizers are the kernels' (`cpu::block_dots`, `cpu::kquant_dots`,
//! `cpu::iq_dots`), with the CPU's rounding bodies.

/// Activation rows rounded to 8 bits as candle's `BlockQ8_0` / `BlockQ8_1::from_float` do:
/// per 32 values, d = max|x| / 127 (kept as f16), q = round(x / d) (halves away from zero) and,
/// for Q8_1, s = f16(Σq)·d in f16.
pub struct Q8Rows {
    pub(crate) cols: usize,
    pub(crate) qs: Vec<i8>,
    /// Per block: d as f32 (an f16 value).
    pub(crate) d: Vec<f32>,
    /// Per block: s as f32 (an f16 value); empty for Q8_0.
    pub(crate) s: Vec<f32>,
    /// Per block: Σq, exact.
    pub(crate) sum: Vec<i32>,
}

/// Activation rows rounded as candle's `BlockQ8K::from_float`: per 256 values, the value of
/// largest magnitude m (the first such), q = round(−127/m · x) clamped to i8, d = 1/(−127/m),
/// and the sums of each 16 q.
pub struct Q8KRows {
    pub(crate) cols: usize,
    pub(crate) qs: Vec<i8>,
    pub(crate) d: Vec<f32>,
    pub(crate) bsums: Vec<i16>,
}

/// Activation rows rounded to 8 bits the way a kind's products take them.
pub enum Activations {
    /// For IQ4_NL: per 32 values.
    Q8_0(Q8Rows),
    /// For the others: per 256 values.
    Q8K(Q8KRows),
}
