//! Prefill's products on the CPU: the weight matrix expanded to f32 into a buffer the calling
//! thread keeps from one product to the next, then one GEMM writing an output it never zeroes
//! (a matrix of over 64 MiB in f32: a block of its rows at a time, `EXPANDED_VALUES`).
//!
//! Through candle (expand into a fresh tensor, `matmul`), every product would zero a new f32
//! copy of its matrix (235 MB for an 8B FFN matrix) and a new output, and the kernel would clear
//! both page by page: memset and page clearing cost 4.6% of an 8B prefill that way (perf). The
//! arithmetic is candle's: the GEMM is called as candle's `matmul` calls it, on the values candle's
//! conversions give; dense f32 matrices (`--weights expanded`) take the same call, so both
//! weights modes still give the same bits.
//!
//! Padding rows are left out of the GEMM: a batch of prompts is right-padded to its longest
//! (json mode's first step on 12 DBDC3 items: 3,948 rows for 2,122 tokens), and no one reads
//! a padding row's product. gemm's sums over k do not depend on how many rows it multiplies
//! (its k blocking follows k and the caches only), so a real row keeps its bits.

use crate::model::backend::cpu_tensor::Data;
use crate::model::error::ModelError;
use crate::model::quant::cpu::bf16_gemm;
use crate::model::quant::cpu::expand_blocks::{expand_rows_into, expands_on_cpu};
use crate::model::quant::cpu::int8_products;
pub use crate::model::quant::matrix::PrefillGemm;
use crate::model::quant::matrix::{Matrix, RowKernels, WeightsMode};
use candle_core::{CpuStorage, DType, Device, Result, Storage, Tensor, bail};
use rayon::prelude::*;
use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

impl PrefillGemm {
    /// Whether this CPU has the instructions it needs (AVX512-BF16; AVX2, FMA and F16C).
    pub fn available(self) -> bool {
        match self {
            PrefillGemm::F32 => true,
            PrefillGemm::Bf16 => bf16_gemm::available(),
            PrefillGemm::Int8 => int8_products::available(),
        }
    }

    #[cfg(test)]
    pub(crate) const ALL: [PrefillGemm; 3] =
        [PrefillGemm::F32, PrefillGemm::Bf16, PrefillGemm::Int8];
}

/// `--prefill-gemm`: bf16 and int8 are refused where they do not apply — a device other than
/// the CPU, a compute dtype other than f32 (a GPU's bf16 is `--dtype bf16`), a CPU without the
/// instructions (AVX512-BF16; AVX2, FMA and F16C) — and int8 with weights expanded at load (it
/// multiplies the integers of GGUF blocks kept as stored). A `HYOKA_TEST_INT8_BODY` this CPU does
/// not run is refused too, whatever the flag (json mode's runs take the 8-bit products).
pub fn check_prefill_gemm(
    gemm: PrefillGemm,
    device: &Device,
    dtype: DType,
    weights: WeightsMode,
) -> std::result::Result<(), ModelError> {
    let refuse = |message: &str| ModelError::Device {
        spec: crate::model::backend::device::device_name(device),
        message: format!("--prefill-gemm {} {message}", gemm.name()),
    };
    if gemm != PrefillGemm::F32 && (!device.is_cpu() || dtype != DType::F32) {
        return Err(refuse("applies to f32 on the CPU (on a GPU, --dtype bf16)"));
    }
    if gemm == PrefillGemm::Int8 && weights == WeightsMode::Expanded {
        return Err(refuse(
            "multiplies the integers of GGUF blocks kept as stored; --weights expanded holds none",
        ));
    }
    if gemm == PrefillGemm::Bf16 && !gemm.available() {
        return Err(refuse(
            "needs AVX512-BF16 (AMD Zen 4 and later, Intel Sapphire Rapids and later), which this CPU lacks",
        ));
    }
    if gemm == PrefillGemm::Int8 && !gemm.available() {
        return Err(refuse(
            "needs AVX2, FMA and F16C (x86-64 CPUs since Intel Haswell and AMD Zen), which this CPU lacks",
        ));
    }
    if device.is_cpu() {
        int8_products::requested_body().map_err(|message| ModelError::Device {
            spec: crate::model::backend::device::device_name(device),
            message,
        })?;
    }
    Ok(())
}

/// The body `HYOKA_TEST_INT8_BODY` sets for the 8-bit products, when it is set (and valid).
pub fn int8_body_override() -> Option<&'static str> {
    int8_products::requested_body()
        .ok()
        .flatten()
        .map(|body| body.name())
}

/// The instructions of the CPU's 8-bit products (`--prefill-gemm int8`, json mode's runs):
/// `vnni` or `avx2` (the same numbers), None where this CPU has neither. For benchmarks.
pub fn int8_body() -> Option<&'static str> {
    int8_products::body().map(|body| body.name())
}

/// A word for the user where a choice is slower on this CPU than the default: Intel's cores
/// (Sapphire and Emerald Rapids) run `vdpbf16ps` at a quarter of the f32 FMA's rate, so bf16
/// products there take longer than f32 ones (docs/benchmarks.md).
pub fn advice(gemm: PrefillGemm) -> Option<&'static str> {
    (gemm == PrefillGemm::Bf16 && bf16_gemm::quarter_rate_here()).then_some(
        "--prefill-gemm bf16 is slower than f32 on this Intel CPU (its bf16 dot product runs at a \
         quarter of the f32 FMA's rate: 0.59× f32's prefill on a Xeon); int8 is the faster choice here",
    )
}

const OP: &str = "x · Wᵀ";

thread_local! {
    /// The last expanded matrix's buffer, grown to the largest matrix multiplied on this thread.
    static EXPANDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether `product` computes x · Wᵀ: f32 activations on the CPU, and a matrix that is f32,
/// bf16 or f16 there, or in blocks the CPU expands.
pub fn takes(w: &Matrix, x: &Tensor) -> bool {
    x.device().is_cpu()
        && x.dtype() == DType::F32
        && match w {
            Matrix::Dense(t) => {
                t.device().is_cpu() && matches!(t.dtype(), DType::F32 | DType::BF16 | DType::F16)
            }
            Matrix::Quantized(q) => expands_on_cpu(q),
            Matrix::Iq(_) => true,
        }
}

/// x (rows, in) · Wᵀ → (rows, out), f32 on the CPU (see `takes`), with the products `gemm`
/// says (an output head's are f32 whatever the model's setting). With `runs` (one per row of x,
/// `Plan::runs`), the rows whose run is 0 are padding: their products are 0, not computed.
pub fn product(w: &Matrix, x: &Tensor, runs: Option<&[u32]>, gemm: PrefillGemm) -> Result<Tensor> {
    let (out, k) = w.dims()?;
    on_real_rows(x.clone(), k, out, runs, |lhs, _, room| {
        packed_product(w, lhs, room, gemm)
    })
}

/// lhs (rows × k, no padding) · Wᵀ → (rows, out) in a vector with room for `room` rows, as
/// `gemm` says (a matrix of over `EXPANDED_VALUES` in f32 a block of its rows at a time).
pub(crate) fn packed_product(
    w: &Matrix,
    lhs: &[f32],
    room: usize,
    gemm: PrefillGemm,
) -> Result<Vec<f32>> {
    let (_, k) = w.dims()?;
    Operand::new(w, lhs, k, gemm, None)?.product(room, EXPANDED_VALUES)
}

/// The rows of x a product reads (its padding, run 0, left out), and what `f(lhs, rows, room)`
/// computes from them — (rows, n) values in a vector with room for all of x's `room` rows —
/// as an (x's rows, n) tensor whose padding rows are zeros.
pub(crate) fn on_real_rows(
    x: Tensor,
    k: usize,
    n: usize,
    runs: Option<&[u32]>,
    f: impl FnOnce(&[f32], usize, usize) -> Result<Vec<f32>>,
) -> Result<Tensor> {
    let x = x.contiguous()?;
    let (m, xk) = x.dims2()?;
    if xk != k {
        bail!("{OP}: x has {xk} columns, W {k}");
    }
    let real: Option<Vec<usize>> = runs
        .filter(|r| r.len() == m && r.contains(&0))
        .map(|r| (0..m).filter(|&i| r[i] > 0).collect());
    let mut y = match &real {
        // No row is read (the last layer of a header): nothing to expand or multiply.
        Some(real) if real.is_empty() => return Tensor::zeros((m, n), DType::F32, &Device::Cpu),
        Some(real) => {
            let packed = gather(Data::of(&x, OP)?.slice(), k, real);
            // Freed here where the caller moved its only handle in (a gated MLP's input).
            drop(x);
            f(&packed, real.len(), m)?
        }
        None => f(Data::of(&x, OP)?.slice(), m, m)?,
    };
    let rows = real.as_ref().map_or(m, Vec::len);
    if y.len() != rows * n {
        bail!("{OP}: {} values for {rows} rows of {n}", y.len());
    }
    if let Some(real) = &real {
        spread(&mut y, n, real, m);
    }
    Tensor::from_vec(y, (m, n), &Device::Cpu)
}

/// A weight matrix about to multiply rows `lhs` (rows × k) a block of its rows at a time
/// (`rows_product`): through the 8-bit products under `--prefill-gemm int8` where its blocks
/// have them (the rows' activations then rounded and laid out once for every block), else in
/// f32 (or bf16) GEMMs on the block expanded.
pub(crate) struct Operand<'a> {
    w: &'a Matrix,
    lhs: &'a [f32],
    k: usize,
    gemm: PrefillGemm,
    int8: Option<(RowKernels<'a>, Arc<int8_products::Activations>)>,
}

impl<'a> Operand<'a> {
    /// `like`: another operand of the same rows, whose 8-bit activations are taken where they
    /// fit w's blocks (a gated MLP's gate and up matrices are usually of one type).
    pub fn new(
        w: &'a Matrix,
        lhs: &'a [f32],
        k: usize,
        gemm: PrefillGemm,
        like: Option<&Operand>,
    ) -> Result<Self> {
        let kernels = match gemm {
            PrefillGemm::Int8 => w.row_kernels()?.filter(|_| int8_products::available()),
            _ => None,
        };
        let int8 = match kernels {
            Some(kernels) => {
                let shared = like
                    .and_then(|o| o.int8.as_ref())
                    .filter(|(_, acts)| acts.fit(&kernels))
                    .map(|(_, acts)| acts.clone());
                let acts = match shared {
                    Some(acts) => acts,
                    None => Arc::new(int8_products::Activations::new(&kernels, k, lhs)?),
                };
                Some((kernels, acts))
            }
            None => None,
        };
        Ok(Operand {
            w,
            lhs,
            k,
            gemm,
            int8,
        })
    }

    /// lhs · Wᵀ for all of W's rows: (rows, out) in a vector with room for `room` rows. A
    /// matrix its products expand is expanded `limit` values at most at a time (`weight_blocks`).
    pub fn product(&self, room: usize, limit: usize) -> Result<Vec<f32>> {
        let (out, k) = self.w.dims()?;
        let blocks = if self.expands() {
            weight_blocks(out, k, limit, 1)
        } else {
            1
        };
        if blocks == 1 {
            return self.rows_product(0..out, room);
        }
        let rows = self.lhs.len() / k.max(1);
        let mut y = Vec::with_capacity(room.max(rows) * out);
        y.resize(rows * out, 0f32);
        for range in equal_blocks(out, blocks) {
            let part = self.rows_product(range.clone(), rows)?;
            for (to, from) in y.chunks_exact_mut(out).zip(part.chunks_exact(range.len())) {
                to[range.clone()].copy_from_slice(from);
            }
        }
        Ok(y)
    }

    /// Whether its products expand W's rows to f32: neither the 8-bit products nor an f32
    /// matrix read in place.
    fn expands(&self) -> bool {
        self.int8.is_none() && !matches!(self.w, Matrix::Dense(t) if t.dtype() == DType::F32)
    }

    /// lhs · Wᵀ for weight rows `range`: (rows, range.len()) in a vector with room for `room`
    /// rows. Each value is what the whole matrix's product gives it, for blocks of at least
    /// `BLOCK_ROWS_MIN` rows (tested).
    pub fn rows_product(&self, range: Range<usize>, room: usize) -> Result<Vec<f32>> {
        let (k, n) = (self.k, range.len());
        let rows = self.lhs.len() / k.max(1);
        if let Some((kernels, acts)) = &self.int8 {
            return int8_products::rows_products(kernels, range, acts);
        }
        if let Matrix::Dense(t) = self.w
            && t.dtype() == DType::F32
        {
            let t = t.contiguous()?;
            let ws = Data::of(&t, OP)?;
            let Some(ws) = ws.slice().get(range.start * k..range.end * k) else {
                bail!("{OP}: rows {range:?} of a {:?} matrix", t.dims());
            };
            return Ok(multiply(self.lhs, rows, k, ws, n, room, self.gemm));
        }
        with_expanded(n * k, |buf| {
            expand(self.w, range, buf)?;
            Ok(multiply(self.lhs, rows, k, buf, n, room, self.gemm))
        })
    }
}

/// Rows `rows` of x (row length k), one after the other.
fn gather(x: &[f32], k: usize, rows: &[usize]) -> Vec<f32> {
    let mut packed = Vec::with_capacity(rows.len() * k);
    for &r in rows {
        packed.extend_from_slice(&x[r * k..(r + 1) * k]);
    }
    packed
}

/// y's rows (row length n) moved to `rows` (ascending) of an m-row output, in place (y has
/// room for m rows), and zeros elsewhere. From the last row down a row only moves up to a
/// place no unmoved row is read from (rows[i] ≥ i).
fn spread(y: &mut Vec<f32>, n: usize, rows: &[usize], m: usize) {
    y.resize(m * n, 0.0);
    for (i, &r) in rows.iter().enumerate().rev() {
        if r != i {
            y.copy_within(i * n..(i + 1) * n, r * n);
        }
    }
    let mut real = rows.iter().peekable();
    for p in 0..m {
        if real.next_if_eq(&&p).is_none() {
            y[p * n..(p + 1) * n].fill(0.0);
        }
    }
}

/// `f` on a buffer of `len` values: this thread's kept one, or (when a product on this thread
/// is already using it: rayon may run another task here while it waits) a fresh one. Also
/// the buffer of a decoding step's expanded weight rows (`token_runs`), on the worker threads.
pub(crate) fn with_expanded<R>(len: usize, f: impl FnOnce(&mut [f32]) -> Result<R>) -> Result<R> {
    EXPANDED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                // Grown once to the largest matrix; its pages stay mapped from then on.
                buf.resize(len, 0.0);
            }
            f(&mut buf[..len])
        }
        Err(_) => f(&mut vec![0f32; len]),
    })
}

/// The most values of a matrix expanded to f32 at once (64 MiB). A larger matrix is expanded
/// and multiplied a block of its rows at a time, into the output's columns: the buffer kept
/// for the largest matrix would otherwise be 283 MB for a 13B's FFN, and gemm's sums over k do not depend on
/// how many columns it computes (its k blocking follows k and the caches; every block here has
/// more than 64 columns, where gemm's small-size path would block k otherwise: tested).
pub(crate) const EXPANDED_VALUES: usize = 1 << 24;

/// How many blocks of its rows a matrix of `out` rows of `k` values is multiplied in: at
/// least `at_least`, enough that none expands more than `limit` values, none of fewer than
/// `BLOCK_ROWS_MIN` rows (blocks of equal size but one row: `equal_blocks`).
pub(crate) fn weight_blocks(out: usize, k: usize, limit: usize, at_least: usize) -> usize {
    (out * k)
        .div_ceil(limit.max(1))
        .max(at_least)
        .min(out / BLOCK_ROWS_MIN)
        .max(1)
}

/// 0..n in `blocks` ranges of equal length but one (the first n % blocks one longer).
pub(crate) fn equal_blocks(n: usize, blocks: usize) -> impl Iterator<Item = Range<usize>> {
    let blocks = blocks.max(1);
    (0..blocks).scan(0, move |start, b| {
        let len = n / blocks + usize::from(b < n % blocks);
        let range = *start..*start + len;
        *start += len;
        Some(range)
    })
}

/// The fewest weight rows a block of `Operand::product` multiplies (see `EXPANDED_VALUES`).
const BLOCK_ROWS_MIN: usize = 256;

/// Rows `range` of W in f32 into `buf` (their count × in values): candle's block conversion,
/// or bf16/f16 widened as candle's `to_dtype` widens them (exactly).
fn expand(w: &Matrix, range: Range<usize>, buf: &mut [f32]) -> Result<()> {
    match w {
        Matrix::Quantized(q) => expand_rows_into(q, range, buf),
        Matrix::Iq(m) => m.expand_rows_into(range, buf),
        Matrix::Dense(t) => {
            let t = t.contiguous()?;
            let (ts, tl) = t.storage_and_layout();
            let cols = t.dim(1)?;
            let at = tl.start_offset() + range.start * cols;
            if buf.len() != range.len() * cols || range.end > t.dim(0)? {
                bail!(
                    "{OP}: rows {range:?} of a {:?} matrix into {}",
                    t.dims(),
                    buf.len()
                );
            }
            match &*ts {
                Storage::Cpu(CpuStorage::BF16(v)) => {
                    widen(&v[at..at + buf.len()], buf, |x| x.to_f32())
                }
                Storage::Cpu(CpuStorage::F16(v)) => {
                    widen(&v[at..at + buf.len()], buf, |x| x.to_f32())
                }
                _ => bail!("{OP}: no CPU expansion for a {:?} matrix", t.dtype()),
            }
            Ok(())
        }
    }
}

fn widen<T: Copy + Sync>(from: &[T], to: &mut [f32], f: impl Fn(T) -> f32 + Sync) {
    to.par_chunks_mut(1 << 16)
        .zip(from.par_chunks(1 << 16))
        .for_each(|(to, from)| to.iter_mut().zip(from).for_each(|(t, &x)| *t = f(x)));
}

/// x (m, k) · wᵀ on f32 weights as `gemm` says: `gemm_t`, or `bf16_gemm` (whose
/// availability `check_prefill_gemm` checked).
fn multiply(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    n: usize,
    room: usize,
    gemm: PrefillGemm,
) -> Vec<f32> {
    match gemm {
        PrefillGemm::Bf16 => {
            bf16_gemm::gemm_t(x, m, k, w, n, room).unwrap_or_else(|| gemm_t(x, m, k, w, n, room))
        }
        // int8 reaches here for the matrices its kernels do not take: those are f32.
        PrefillGemm::F32 | PrefillGemm::Int8 => gemm_t(x, m, k, w, n, room),
    }
}

/// x (m, k) · wᵀ (w: (n, k), row-major) → (m, n): gemm called with the arguments candle's CPU
/// `matmul` gives it for `x.matmul(&w.t())`; the vector has room for `room` ≥ m rows.
///
/// A row's bits do not depend on m: gemm multiplies a few rows by other paths than many (a
/// matrix-vector product for one, other blockings of k for a few) — other sums. Those shapes are
/// multiplied with zero rows added (`gemm_rows`) and the added rows dropped, so a prompt's row
/// gets the same bits alone as in a batch.
pub(crate) fn gemm_t(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, room: usize) -> Vec<f32> {
    let rows = gemm_rows(m, n);
    if rows == m {
        return gemm_t_as_given(x, m, k, w, n, room);
    }
    let mut padded = Vec::with_capacity(rows * k);
    padded.extend_from_slice(x);
    padded.resize(rows * k, 0.0);
    let mut y = gemm_t_as_given(&padded, rows, k, w, n, rows);
    y.truncate(m * n);
    y.reserve(room.saturating_sub(m) * n);
    y
}

/// The rows gemm is given for an (m, k) · (k, n) product so that it takes its general path,
/// whose sums over k follow k and the caches only. gemm takes other paths for one row (a
/// matrix-vector product), for at most 16 × 16 outputs (dot products along k) and for at most
/// 64 rows and 64 columns (k blocked by 512): so at least 2 rows, more than 64 where n is at
/// most 64, and more than 256 outputs. m itself otherwise (and 0 stays 0).
pub(crate) fn gemm_rows(m: usize, n: usize) -> usize {
    if m == 0 || n == 0 {
        return m;
    }
    let mut rows = m.max(2);
    if n <= 64 {
        rows = rows.max(65);
    }
    if rows * n <= 256 {
        rows = 256 / n + 1;
    }
    rows
}

fn gemm_t_as_given(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, room: usize) -> Vec<f32> {
    assert!(x.len() == m * k && w.len() == n * k, "operand sizes");
    let threads = candle_core::utils::get_num_threads();
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    let mut y: Vec<f32> = Vec::with_capacity(room.max(m) * n);
    // SAFETY: y has room for m × n (row stride n); x is m × k (row stride k); w (n, k) is read
    // as its transpose, element (k', n') at n'·k + k'. Without read_dst gemm writes every
    // element of y and reads none, so y is initialised when its length is set.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            y.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
        y.set_len(m * n);
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use candle_core::quantized::{GgmlDType, QTensor};
    use std::sync::Arc;

    /// The same bits as expanding through candle and its `matmul`, for every kind of matrix;
    /// a second, smaller product reuses the buffer the first grew. One row is candle's product
    /// of that row among others (candle alone would multiply it as a matrix-vector product).
    #[test]
    fn products_are_candles_expansion_and_matmul_to_the_bit() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (160, 512), &dev).unwrap();
        let x = Tensor::randn(0f32, 1.0, (37, 512), &dev).unwrap();
        let mut cases = vec![
            ("f32".to_string(), Matrix::Dense(w.clone())),
            (
                "bf16".into(),
                Matrix::Dense(w.to_dtype(DType::BF16).unwrap()),
            ),
            ("f16".into(), Matrix::Dense(w.to_dtype(DType::F16).unwrap())),
        ];
        for dtype in [
            GgmlDType::Q4_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
            GgmlDType::Q4K,
            GgmlDType::Q6K,
        ] {
            let q = Matrix::Quantized(Arc::new(QTensor::quantize(&w, dtype).unwrap()));
            cases.push((format!("{dtype:?}"), q));
        }
        for rows in [37, 9, 3, 1] {
            let x = x.narrow(0, 0, rows).unwrap();
            for (name, m) in &cases {
                assert!(takes(m, &x), "{name}");
                let among = x.pad_with_zeros(0, 0, gemm_rows(rows, 160) - rows).unwrap();
                let want = among
                    .matmul(&m.expand(DType::F32).unwrap().t().unwrap())
                    .unwrap()
                    .narrow(0, 0, rows)
                    .unwrap();
                let got = product(m, &x, None, PrefillGemm::F32).unwrap();
                assert_eq!(got.dims(), want.dims());
                let (got, want) = (
                    got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    want.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                );
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name}, {rows} rows"
                );
            }
        }
    }

    /// Each row's bits are the same whatever rows are multiplied beside it — one alone, a few,
    /// many — for the shapes gemm treats apart (one row; at most 64 rows and columns with k
    /// over 512) and the usual ones.
    #[test]
    fn a_rows_product_does_not_depend_on_the_rows_beside_it() {
        let mut rng = SplitMix64(11);
        for (n, k) in [(40, 600), (64, 1000), (160, 512), (16, 64), (300, 96)] {
            let w = rng.symmetric_f32s(n * k);
            let x = rng.symmetric_f32s(90 * k);
            let all = gemm_t(&x, 90, k, &w, n, 90);
            for rows in [1, 2, 5, 64, 65, 89] {
                let start = 90 - rows;
                let part = gemm_t(&x[start * k..], rows, k, &w, n, rows);
                assert_eq!(part.len(), rows * n);
                for (i, (a, b)) in part.iter().zip(&all[start * n..]).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "({n}, {k}), {rows} rows, value {i}"
                    );
                }
            }
        }
    }

    /// A matrix expanded and multiplied a block of rows at a time gives the bits of the whole
    /// product, for every kind of matrix, few rows and many, in f32 and in bf16.
    #[test]
    fn products_by_blocks_of_weight_rows_are_the_whole_products() {
        let dev = Device::Cpu;
        let (out, k) = (900, 1024);
        let w = Tensor::randn(0f32, 1.0, (out, k), &dev).unwrap();
        let mut cases = vec![
            ("bf16", Matrix::Dense(w.to_dtype(DType::BF16).unwrap())),
            ("f16", Matrix::Dense(w.to_dtype(DType::F16).unwrap())),
        ];
        for (name, dtype) in [("Q4_0", GgmlDType::Q4_0), ("Q6K", GgmlDType::Q6K)] {
            let q = QTensor::quantize(&w, dtype).unwrap();
            cases.push((name, Matrix::Quantized(Arc::new(q))));
        }
        let mut gemms = vec![PrefillGemm::F32];
        if bf16_gemm::available() {
            gemms.push(PrefillGemm::Bf16);
        }
        for gemm in gemms {
            for rows in [1, 3, 9, 37, 80] {
                let x = SplitMix64(rows as u64).symmetric_f32s(rows * k);
                for (name, m) in &cases {
                    let w = Operand::new(m, &x, k, gemm, None).unwrap();
                    let whole = w.product(rows, usize::MAX).unwrap();
                    // Three blocks of 300 rows; two of 450.
                    for limit in [300 * k, 450 * k] {
                        let got = w.product(rows, limit).unwrap();
                        assert!(
                            got.iter()
                                .zip(&whole)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{gemm:?}, {name}, {rows} rows, {limit}"
                        );
                    }
                }
            }
        }
    }

    /// Padding rows (run 0) give zeros and every other row the bits it gets without padding,
    /// wherever the padding lies.
    #[test]
    fn padding_rows_are_left_out_and_real_rows_keep_their_bits() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (96, 256), &dev).unwrap();
        let q = Matrix::Quantized(Arc::new(QTensor::quantize(&w, GgmlDType::Q4K).unwrap()));
        let x = Tensor::randn(0f32, 1.0, (23, 256), &dev).unwrap();
        // Padding inside, at the end (a right-padded batch), and at the start.
        let patterns: [fn(u32) -> bool; 2] = [|i| i % 5 == 1 || i > 19, |i| i < 3 || i == 9];
        for (m, pad) in [
            (Matrix::Dense(w.clone()), patterns[0]),
            (q.clone(), patterns[0]),
            (q, patterns[1]),
        ] {
            let runs: Vec<u32> = (0..23u32).map(|i| if pad(i) { 0 } else { 3 }).collect();
            let want = x
                .matmul(&m.expand(DType::F32).unwrap().t().unwrap())
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            let got = product(&m, &x, Some(&runs), PrefillGemm::F32)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                if runs[r] == 0 {
                    assert!(g.iter().all(|&v| v == 0.0), "padding row {r}");
                } else {
                    assert!(
                        g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "row {r}"
                    );
                }
            }
        }
    }
}
