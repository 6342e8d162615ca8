//! Decoding products of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 matrices in integers, on activations rounded
//! to 8 bits: llama.cpp's and candle's quantized products, for several sequences at once.
//!
//! A decoding step multiplies a handful of activation rows by every weight row. Expanding the
//! weights to f32 costs a conversion per value and four bytes of cache traffic per product;
//! llama.cpp instead rounds each activation row to 8-bit blocks (`Q8_0`, or `Q8_1` with the
//! block sums for the types with a minimum) and multiplies 32 integer pairs per instruction.
//! These are those kernels, with AVX2 bodies for every type (candle's Q4_1/Q5_0/Q5_1 products
//! are scalar loops) and an AVX-512 VNNI body where the CPU has one (`avx2`). One activation row
//! (a batch-1 step) is multiplied by eight weight rows at once, one per lane, each activation
//! block loaded once for the eight — llama.cpp gets there by repacking eight rows' blocks
//! together; here they stay as stored; several activation rows by one weight row at a time,
//! each weight block unpacked once for up to eight of them. Whatever the body and the other
//! rows, every pair of rows gets candle's reference loop (`vec_dot_unopt`) to the bit: per
//! block the exact integer sum, then sum += sumi·d·dₓ (+ m·sₓ).

use super::act_rounding::Rounding;
use candle_core::quantized::GgmlDType;
use half::f16;

/// Values per block of these types and of the 8-bit activations.
pub const BLOCK: usize = 32;

/// The block types multiplied here: what llama.cpp writes for matrices whose rows are no whole
/// number of 256-value K-quant blocks (Qwen2.5-0.5B's 896 columns, Gemma 3 270m's 640), and
/// Q8_0, common for output heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// d: f16, 16 bytes of 4-bit values: d·(q − 8).
    Q4_0,
    /// d: f16, m: f16, 16 bytes of 4-bit values: d·q + m.
    Q4_1,
    /// d: f16, 4 bytes of fifth bits, 16 bytes of 4-bit values: d·(q − 16).
    Q5_0,
    /// d: f16, m: f16, 4 bytes of fifth bits, 16 bytes of 4-bit values: d·q + m.
    Q5_1,
    /// d: f16, 32 signed bytes: d·q.
    Q8_0,
}

impl BlockKind {
    pub fn of(dtype: GgmlDType) -> Option<Self> {
        match dtype {
            GgmlDType::Q4_0 => Some(BlockKind::Q4_0),
            GgmlDType::Q4_1 => Some(BlockKind::Q4_1),
            GgmlDType::Q5_0 => Some(BlockKind::Q5_0),
            GgmlDType::Q5_1 => Some(BlockKind::Q5_1),
            GgmlDType::Q8_0 => Some(BlockKind::Q8_0),
            _ => None,
        }
    }

    /// Bytes of one block.
    pub fn block_bytes(self) -> usize {
        match self {
            BlockKind::Q4_0 => 18,
            BlockKind::Q4_1 => 20,
            BlockKind::Q5_0 => 22,
            BlockKind::Q5_1 => 24,
            BlockKind::Q8_0 => 34,
        }
    }

    /// Bytes of one row of `cols` values.
    pub fn row_bytes(self, cols: usize) -> usize {
        cols / BLOCK * self.block_bytes()
    }

    /// Offsets in a block of its min (if any), fifth bits (if any) and values.
    fn layout(self) -> (Option<usize>, Option<usize>, usize) {
        match self {
            BlockKind::Q4_0 => (None, None, 2),
            BlockKind::Q4_1 => (Some(2), None, 4),
            BlockKind::Q5_0 => (None, Some(2), 6),
            BlockKind::Q5_1 => (Some(2), Some(4), 8),
            BlockKind::Q8_0 => (None, None, 2),
        }
    }

    /// Whether the block has a minimum (its activations then carry their block sums: Q8_1).
    pub fn has_min(self) -> bool {
        self.layout().0.is_some()
    }
}

/// Activation rows rounded to 8 bits as candle's `BlockQ8_0` / `BlockQ8_1::from_float` do:
/// per 32 values, d = max|x| / 127 (kept as f16), q = round(x / d) (halves away from zero) and,
/// for Q8_1, s = f16(Σq)·d in f16.
pub struct Q8Rows {
    cols: usize,
    qs: Vec<i8>,
    /// Per block: d as f32 (an f16 value).
    d: Vec<f32>,
    /// Per block: s as f32 (an f16 value); empty for Q8_0.
    s: Vec<f32>,
    /// Per block: Σq, exact.
    sum: Vec<i32>,
}

impl Q8Rows {
    /// `xs`: rows of `cols` values, `cols` a multiple of 32. `with_sums` for Q8_1.
    pub fn quantize(xs: &[f32], cols: usize, with_sums: bool) -> Self {
        Self::quantize_with(xs, cols, with_sums, Rounding::for_machine())
    }

    fn quantize_with(xs: &[f32], cols: usize, with_sums: bool, rounding: Rounding) -> Self {
        assert!(cols.is_multiple_of(BLOCK) && xs.len().is_multiple_of(cols));
        let blocks = xs.len() / BLOCK;
        let mut rows = Q8Rows {
            cols,
            qs: vec![0; xs.len()],
            d: Vec::with_capacity(blocks),
            s: Vec::with_capacity(if with_sums { blocks } else { 0 }),
            sum: Vec::with_capacity(blocks),
        };
        for (x, q) in xs.chunks_exact(BLOCK).zip(rows.qs.chunks_exact_mut(BLOCK)) {
            let amax = (rounding.max_abs)(x);
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let d16 = f16::from_f32(d);
            let sum = (rounding.round)(x, id, q);
            rows.d.push(d16.to_f32());
            rows.sum.push(sum);
            if with_sums {
                rows.s.push((f16::from_f32(sum as f32) * d16).to_f32());
            }
        }
        rows
    }

    pub fn len(&self) -> usize {
        self.d.len() * BLOCK / self.cols.max(1)
    }

    /// The rounded values, row after row.
    pub fn values(&self) -> &[i8] {
        &self.qs
    }

    /// Each block's d, row after row.
    pub fn scales(&self) -> &[f32] {
        &self.d
    }

    /// Each block's s (Q8_1: quantized `with_sums`), row after row; empty for Q8_0.
    pub(super) fn sums(&self) -> &[f32] {
        &self.s
    }

    pub fn is_empty(&self) -> bool {
        self.qs.is_empty()
    }

    fn row(&self, r: usize) -> Q8Row<'_> {
        let blocks = self.cols / BLOCK;
        let at = r * blocks;
        Q8Row {
            qs: &self.qs[r * self.cols..(r + 1) * self.cols],
            d: &self.d[at..at + blocks],
            s: self.s.get(at..at + blocks).unwrap_or(&[]),
            sum: &self.sum[at..at + blocks],
        }
    }
}

#[derive(Clone, Copy)]
struct Q8Row<'a> {
    qs: &'a [i8],
    d: &'a [f32],
    s: &'a [f32],
    sum: &'a [i32],
}

/// Appends w_v · x_r for every weight row v of `w` (whole rows of `xs`' columns, one after
/// another) and every row r of `xs`, in (v, r) order, to `out`.
pub type DotRows = fn(BlockKind, &[u8], &Q8Rows, &mut Vec<f32>);

/// The kernel for this machine, chosen once per product.
pub fn dot_rows_kernel() -> DotRows {
    #[cfg(target_arch = "x86_64")]
    if has_avx512_vnni() {
        // SAFETY: the features the kernel is compiled for were just detected.
        return |kind, w, xs, out| unsafe { avx2::dot_rows_vnni(kind, w, xs, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma_f16c() {
        // SAFETY: the features the kernel is compiled for were just detected.
        return |kind, w, xs, out| unsafe { avx2::dot_rows(kind, w, xs, out) };
    }
    dot_rows_portable
}

/// Whether the CPU also runs the AVX-512 VNNI body (on 256-bit registers).
#[cfg(target_arch = "x86_64")]
fn has_avx512_vnni() -> bool {
    has_avx2_fma_f16c()
        && std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

/// Whether the CPU runs the AVX2 kernels here and in `kquant_dots` (AVX2, FMA, F16C).
pub fn has_avx2_fma_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The kernel without SIMD (any CPU).
pub fn dot_rows_portable(kind: BlockKind, w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
    let row_bytes = kind.row_bytes(xs.cols);
    assert!(
        row_bytes > 0 && w.len().is_multiple_of(row_bytes),
        "whole weight rows of {} values",
        xs.cols
    );
    for row in w.chunks_exact(row_bytes) {
        row_portable(kind, row, xs, out);
    }
}

/// One weight row times every row of `xs`: candle's reference loop.
fn row_portable(kind: BlockKind, w: &[u8], xs: &Q8Rows, out: &mut Vec<f32>) {
    let (min_at, high_at, qs_at) = kind.layout();
    let mut sums = vec![0f32; xs.len()];
    for (b, block) in w.chunks_exact(kind.block_bytes()).enumerate() {
        let d = read_f16(block, 0);
        let m = min_at.map_or(0.0, |at| read_f16(block, at));
        let high = high_at.map_or(0, |at| read_u32(block, at));
        let mut q = [0i32; BLOCK];
        for (j, q) in q.iter_mut().enumerate() {
            *q = if kind == BlockKind::Q8_0 {
                block[qs_at + j] as i8 as i32
            } else {
                let byte = block[qs_at + j % 16];
                let nibble = if j < 16 { byte & 0x0F } else { byte >> 4 };
                let v = (nibble | (((high >> j) & 1) << 4) as u8) as i32;
                match kind {
                    BlockKind::Q4_0 => v - 8,
                    BlockKind::Q5_0 => v - 16,
                    _ => v,
                }
            };
        }
        for (r, sum) in sums.iter_mut().enumerate() {
            let x = xs.row(r);
            let xq = &x.qs[b * BLOCK..(b + 1) * BLOCK];
            let sumi: i32 = q.iter().zip(xq).map(|(&a, &b)| a * b as i32).sum();
            *sum += scaled(kind, sumi, d, m, x, b);
        }
    }
    out.extend(sums);
}

/// A block's contribution, in candle's `vec_dot_unopt` order: sumi·d·dₓ (+ m·sₓ).
#[inline(always)]
fn scaled(kind: BlockKind, sumi: i32, d: f32, m: f32, x: Q8Row, b: usize) -> f32 {
    if kind.has_min() {
        sumi as f32 * d * x.d[b] + m * x.s[b]
    } else {
        sumi as f32 * d * x.d[b]
    }
}

pub(super) fn read_f16(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::matrix::candle_product_by_row;
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};

    /// Random weights (offset, so that Q4_1/Q5_1's minimum matters), quantized by candle: each
    /// row's products are those of candle's own quantized matrix product on that row alone (its
    /// 8-bit activations and kernels), for 1 to 9 rows at once (a load of eight where VNNI runs,
    /// and one more), on rows of 4 and 6 blocks
    /// (candle's debug builds refuse odd block counts for Q4_1): to the bit on the portable
    /// kernel where candle runs its reference loop (Q4_1/Q5_0/Q5_1), within float rounding
    /// otherwise (AVX2 sums the blocks in eight lanes, as llama.cpp and candle's AVX kernels).
    /// Every body this CPU runs is checked, not only the one it picks; and a row's products do
    /// not change by a bit with the other rows.
    #[test]
    fn products_are_candles_row_by_row() {
        for cols in [128, 192] {
            products_match_candle(cols, &bodies());
        }
    }

    /// Every body this CPU runs, not only the one it picks.
    fn bodies() -> Vec<(&'static str, DotRows)> {
        let mut kernels = vec![
            ("machine", dot_rows_kernel()),
            ("portable", dot_rows_portable as DotRows),
        ];
        #[cfg(target_arch = "x86_64")]
        if has_avx2_fma_f16c() {
            // SAFETY: the features the kernel is compiled for were just detected.
            kernels.push(("avx2", |kind, w, xs, out| unsafe {
                avx2::dot_rows(kind, w, xs, out)
            }));
        }
        #[cfg(target_arch = "x86_64")]
        if has_avx512_vnni() {
            // SAFETY: as above.
            kernels.push(("vnni", |kind, w, xs, out| unsafe {
                avx2::dot_rows_vnni(kind, w, xs, out)
            }));
        }
        kernels
    }

    /// Every body, for a task's weight rows at once (two groups of eight and three more) and 1
    /// to 9 activation rows, gives for each pair of rows exactly what candle's reference loop
    /// (`GgmlType::vec_dot_unopt`, called here on candle's own blocks) gives: one activation
    /// row takes the kernel across eight weight rows, several the kernel across activation
    /// rows, and neither may change a bit. Weights of 2·randn + 0.4 put values at both ends of
    /// every type's range; the activations include `awkward_rows`' ±127 and zero blocks.
    #[test]
    fn every_body_is_candles_reference_loop_to_the_bit() {
        use candle_core::quantized::k_quants::{
            BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, GgmlType,
        };
        fn check<T: GgmlType>(kind: BlockKind, kernels: &[(&str, DotRows)]) {
            let (cols, out) = (256, 19);
            let w: Vec<f32> = Tensor::randn(0.2f32, 2.0, out * cols, &Device::Cpu)
                .unwrap()
                .to_vec1()
                .unwrap();
            let xs = awkward_rows(cols, 9);
            let blocks = cols / BLOCK;
            let mut w_blocks = vec![T::zeros(); out * blocks];
            for (row, b) in w.chunks_exact(cols).zip(w_blocks.chunks_exact_mut(blocks)) {
                T::from_float(row, b);
            }
            assert_eq!(std::mem::size_of::<T>(), kind.block_bytes());
            // SAFETY: candle's blocks are plain bytes (repr(C), sizes asserted by candle and
            // above); read as u8, whose alignment any address has.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    w_blocks.as_ptr() as *const u8,
                    w_blocks.len() * kind.block_bytes(),
                )
            };
            let want: Vec<Vec<f32>> = xs
                .chunks_exact(cols)
                .map(|x| {
                    let mut ys = vec![T::VecDotType::zeros(); blocks];
                    T::VecDotType::from_float(x, &mut ys);
                    w_blocks
                        .chunks_exact(blocks)
                        .map(|wb| T::vec_dot_unopt(cols, wb, &ys))
                        .collect()
                })
                .collect();
            for n in 1..=9 {
                let first = 9 - n;
                let rows = Q8Rows::quantize(&xs[first * cols..], cols, kind.has_min());
                for &(name, kernel) in kernels {
                    let mut got = Vec::new();
                    kernel(kind, bytes, &rows, &mut got);
                    assert_eq!(got.len(), out * n, "{kind:?} {name}");
                    for v in 0..out {
                        for r in 0..n {
                            let (g, e) = (got[v * n + r], want[first + r][v]);
                            assert_eq!(
                                g.to_bits(),
                                e.to_bits(),
                                "{kind:?} {name}, {n} rows: weight row {v}, row {r}: {g} for {e}"
                            );
                        }
                    }
                }
            }
        }
        let kernels = bodies();
        check::<BlockQ4_0>(BlockKind::Q4_0, &kernels);
        check::<BlockQ4_1>(BlockKind::Q4_1, &kernels);
        check::<BlockQ5_0>(BlockKind::Q5_0, &kernels);
        check::<BlockQ5_1>(BlockKind::Q5_1, &kernels);
        check::<BlockQ8_0>(BlockKind::Q8_0, &kernels);
    }

    /// The VNNI body gives the AVX2 body's bits (the same integer lanes, the same float
    /// operations), every type, 1 to 9 rows; with the pairs at their extreme for Q8_0 (weight
    /// bytes −128 and 127, which no quantizer writes but a file may hold, against activations
    /// ±127): a body whose pair sums saturated or summed other lanes would differ.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_vnni_body_gives_the_avx2_bits() {
        if !has_avx512_vnni() {
            eprintln!("no AVX-512 VNNI on this CPU: nothing to compare");
            return;
        }
        let (cols, out) = (256, 5);
        let mut xs = awkward_rows(cols, 9);
        // The last row: ±127 everywhere (its scale is 1).
        for (i, v) in xs[8 * cols..].iter_mut().enumerate() {
            *v = if i % 3 == 0 { -127.0 } else { 127.0 };
        }
        let w = Tensor::randn(0f32, 1.0, (out, cols), &Device::Cpu).unwrap();
        for dtype in BLOCK_TYPES {
            let kind = BlockKind::of(dtype).unwrap();
            let mut data = QTensor::quantize(&w, dtype)
                .unwrap()
                .data()
                .unwrap()
                .to_vec();
            let row_bytes = kind.row_bytes(cols);
            if kind == BlockKind::Q8_0 {
                // Weight row 0's quantized bytes (after each block's f16 scale): −128 then 127
                // in alternate blocks.
                for (b, block) in data[..row_bytes]
                    .chunks_exact_mut(kind.block_bytes())
                    .enumerate()
                {
                    block[2..].fill(if b % 2 == 0 { 0x80 } else { 0x7F });
                }
            }
            // Up to nine rows: a whole load of eight and one left, and every smaller load.
            for n in 1..=9 {
                let rows = Q8Rows::quantize(&xs[(9 - n) * cols..], cols, kind.has_min());
                for v in 0..out {
                    let weights = &data[v * row_bytes..(v + 1) * row_bytes];
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    // SAFETY: both bodies' features were detected (has_avx512_vnni).
                    unsafe {
                        avx2::dot_rows(kind, weights, &rows, &mut a);
                        avx2::dot_rows_vnni(kind, weights, &rows, &mut b);
                    }
                    let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&a), bits(&b), "{dtype:?} n={n} weight row {v}");
                }
            }
        }
    }

    /// The block types multiplied here, as candle names them.
    pub(crate) const BLOCK_TYPES: [GgmlDType; 5] = [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
    ];

    /// Activation rows with the cases rounding gets wrong: values exactly halfway between two
    /// integers once scaled (amax 127: the scale is 1), ties of magnitude of either sign, an
    /// all-zero block, and random rows.
    pub(crate) fn awkward_rows(cols: usize, rows: usize) -> Vec<f32> {
        let mut xs: Vec<f32> = Tensor::randn(0f32, 1.0, rows * cols, &Device::Cpu)
            .unwrap()
            .to_vec1()
            .unwrap();
        for (i, v) in xs[..cols].iter_mut().enumerate() {
            *v = match i % 32 {
                0 => 127.0,
                j => (j as f32 - 16.0) * 4.0 + 0.5,
            };
        }
        if rows > 1 {
            for (i, v) in xs[cols..2 * cols].iter_mut().enumerate() {
                let sign = if i < cols / 2 { 1.0 } else { -1.0 };
                *v = sign
                    * match i % 7 {
                        0 => -3.0,
                        3 => 3.0,
                        _ => (i % 5) as f32 * 0.25 - 0.5,
                    };
            }
            xs[cols..cols + 32].fill(0.0);
        }
        xs
    }

    /// The activations' bytes are candle's `BlockQ8_0` / `BlockQ8_1` (its reference
    /// `from_float`), on the kernel this machine runs and on the portable loop.
    #[test]
    fn activations_round_as_candles() {
        let (cols, n) = (256, 4);
        let xs = awkward_rows(cols, n);
        let t = Tensor::from_vec(xs.clone(), (n, cols), &Device::Cpu).unwrap();
        for (dtype, sums) in [(GgmlDType::Q8_0, false), (GgmlDType::Q8_1, true)] {
            let want = QTensor::quantize(&t, dtype)
                .unwrap()
                .data()
                .unwrap()
                .to_vec();
            let bytes = if sums { 36 } else { 34 };
            for (name, rows) in [
                ("machine", Q8Rows::quantize(&xs, cols, sums)),
                (
                    "portable",
                    Q8Rows::quantize_with(&xs, cols, sums, Rounding::PORTABLE),
                ),
            ] {
                for (b, block) in want.chunks_exact(bytes).enumerate() {
                    let at = |i: usize| f16::from_le_bytes([block[i], block[i + 1]]).to_f32();
                    let qs: Vec<i8> = block[bytes - 32..].iter().map(|&q| q as i8).collect();
                    assert_eq!(
                        &rows.qs[b * 32..(b + 1) * 32],
                        &qs[..],
                        "{dtype:?} {name} {b}"
                    );
                    assert_eq!(
                        rows.d[b].to_bits(),
                        at(0).to_bits(),
                        "{dtype:?} {name} d {b}"
                    );
                    if sums {
                        assert_eq!(rows.s[b].to_bits(), at(2).to_bits(), "{name} s {b}");
                    }
                }
            }
        }
    }

    fn products_match_candle(cols: usize, kernels: &[(&str, DotRows)]) {
        let out = 9;
        let dev = Device::Cpu;
        let w = (Tensor::randn(0f32, 1.0, (out, cols), &dev).unwrap() + 0.3).unwrap();
        let x = Tensor::randn(0f32, 1.0, (9, cols), &dev).unwrap();
        let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        for dtype in BLOCK_TYPES {
            let q = std::sync::Arc::new(QTensor::quantize(&w, dtype).unwrap());
            let kind = BlockKind::of(dtype).unwrap();
            let data = q.data().unwrap();
            let row_bytes = kind.row_bytes(cols);
            assert_eq!(data.len(), out * row_bytes);
            let want = candle_product_by_row(&q, &x);
            // Each activation row rounded alone, once.
            let alone: Vec<Q8Rows> = (0..9)
                .map(|r| Q8Rows::quantize(&xs[r * cols..(r + 1) * cols], cols, kind.has_min()))
                .collect();
            for n in 1..=9 {
                let rows = Q8Rows::quantize(&xs[..n * cols], cols, kind.has_min());
                for &(name, kernel) in kernels {
                    let product = |v: usize, rows: &Q8Rows| {
                        let mut got = Vec::new();
                        kernel(
                            kind,
                            &data[v * row_bytes..(v + 1) * row_bytes],
                            rows,
                            &mut got,
                        );
                        got
                    };
                    // v indexes the weight rows and the reference's columns alike.
                    #[allow(clippy::needless_range_loop)]
                    for v in 0..out {
                        let got = product(v, &rows);
                        for (r, &g) in got.iter().enumerate() {
                            let e = want[r][v];
                            // Every body is candle's reference loop, which candle runs
                            // for these (it has AVX2 products for Q4_0 and Q8_0).
                            let exact =
                                matches!(kind, BlockKind::Q4_1 | BlockKind::Q5_0 | BlockKind::Q5_1);
                            let tol = if exact { 0.0 } else { 1e-4 + 1e-5 * e.abs() };
                            assert!(
                                (g - e).abs() <= tol,
                                "{dtype:?} {name} cols={cols} n={n} row {r} out {v}: {g} vs {e}"
                            );
                            // A row gets exactly what it gets alone (batching changes no bit).
                            let one = product(v, &alone[r]);
                            assert_eq!(g.to_bits(), one[0].to_bits(), "{dtype:?} {name} n={n}");
                        }
                    }
                }
            }
        }
    }
}
