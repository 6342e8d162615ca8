//! The products of a stored matrix: expansion for a GEMM, the integer row kernels for a few
//! rows, candle's kernels elsewhere, each chosen here.

use crate::model::backend::gpu_kernels::GpuKernels;
use crate::model::backend::stage_times;
use crate::model::quant::candle_products::quantized_product;
use crate::model::quant::cpu::block_dots::Q8Rows;
use crate::model::quant::cpu::dense_rows;
use crate::model::quant::cpu::expand_blocks::expand_on_threads;
use crate::model::quant::cpu::iq_dots;
use crate::model::quant::cpu::kernels::kernels;
use crate::model::quant::cpu::kquant_dots::Q8KRows;
use crate::model::quant::cpu::prefill_gemm;
use crate::model::quant::cpu::prefill_gemm::PrefillGemm;
use crate::model::quant::cpu::row_tasks::by_weight_rows;
use crate::model::quant::cpu::token_runs;
use crate::model::quant::formats::block_format::BlockFormat;
use crate::model::quant::matrix::{DECODE_ROWS, Matrix, Plan, Products, RowKernels};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Result, Tensor};
use std::sync::Arc;

impl Matrix {
    /// From a GGUF tensor: quantized types stay quantized; F32/F16/BF16 become dense tensors of
    /// that dtype.
    pub fn from_qtensor(q: QTensor) -> Result<Self> {
        let device = q.device();
        Ok(match q.dtype() {
            GgmlDType::F32 => Matrix::Dense(q.dequantize(&device)?),
            GgmlDType::F16 => Matrix::Dense(q.dequantize_f16(&device)?),
            GgmlDType::BF16 => Matrix::Dense(q.dequantize(&device)?.to_dtype(DType::BF16)?),
            _ => Matrix::Quantized(Arc::new(q)),
        })
    }

    pub fn dims(&self) -> Result<(usize, usize)> {
        match self {
            Matrix::Dense(t) => t.dims2(),
            Matrix::Quantized(q) => q.shape().dims2(),
            Matrix::Iq(m) => Ok(m.dims()),
        }
    }

    pub fn elem_count(&self) -> usize {
        match self {
            Matrix::Dense(t) => t.elem_count(),
            Matrix::Quantized(q) => q.shape().elem_count(),
            Matrix::Iq(m) => m.dims().0 * m.dims().1,
        }
    }

    /// Bytes held in memory.
    pub fn bytes(&self) -> usize {
        match self {
            Matrix::Dense(t) => t.elem_count() * t.dtype().size_in_bytes(),
            Matrix::Quantized(q) => q.storage_size_in_bytes(),
            Matrix::Iq(m) => m.data().len(),
        }
    }

    /// The whole matrix in `dtype` (a temporary for one GEMM, unless already in that dtype).
    pub fn expand(&self, dtype: DType) -> Result<Tensor> {
        self.expand_with(dtype, GpuKernels::Hyoka)
    }

    /// `expand` on CUDA through `kernels`' expansion of GGUF blocks to bf16.
    pub fn expand_with(&self, dtype: DType, kernels: GpuKernels) -> Result<Tensor> {
        let device = match self {
            Matrix::Dense(t) => t.device().clone(),
            Matrix::Quantized(q) => q.device(),
            Matrix::Iq(_) => Device::Cpu,
        };
        stage_times::time(&device, "weights: expand", || {
            self.expand_untimed(dtype, kernels)
        })
    }

    fn expand_untimed(&self, dtype: DType, kernels: GpuKernels) -> Result<Tensor> {
        match self {
            Matrix::Dense(t) => t.to_dtype(dtype),
            Matrix::Quantized(q) if dtype == DType::F16 => q.dequantize_f16(&q.device()),
            Matrix::Quantized(q)
                if dtype == DType::BF16 && q.device().is_cuda() && kernels.hyoka() =>
            {
                match crate::model::quant::cuda::cuda_expand::expand_bf16(q)? {
                    Some(w) => Ok(w),
                    None => q.dequantize(&q.device())?.to_dtype(dtype),
                }
            }
            Matrix::Quantized(q) => match expand_on_threads(q)? {
                Some(w) => w.to_dtype(dtype),
                None => q.dequantize(&q.device())?.to_dtype(dtype),
            },
            Matrix::Iq(m) => {
                let mut ys = vec![0f32; self.elem_count()];
                m.expand_into(&mut ys)?;
                Tensor::from_vec(ys, m.dims(), &Device::Cpu)?.to_dtype(dtype)
            }
        }
    }

    /// x (rows, in) · Wᵀ → (rows, out) in x's dtype: expansion and GEMM for many rows, the
    /// quantized kernels for at most [`DECODE_ROWS`].
    pub fn matmul_t(&self, x: &Tensor) -> Result<Tensor> {
        self.product(x, Products::ByRowCount.into())
    }

    /// x · Wᵀ with the kernels `plan` chooses.
    pub fn product(&self, x: &Tensor, plan: Plan<'_>) -> Result<Tensor> {
        stage_times::time(x.device(), "weights: products (GEMM, kernels)", || {
            self.product_untimed(x, plan)
        })
    }

    fn product_untimed(&self, x: &Tensor, plan: Plan<'_>) -> Result<Tensor> {
        let rows = x.dim(0)?;
        match (self, plan.products) {
            (Matrix::Quantized(q), Products::RowWise)
                if integer_products(q) && token_runs::takes(x, plan.runs) =>
            {
                self.by_runs(x, plan.runs.unwrap_or_default())
            }
            // Integer products here read each weight block once for every row (candle's read
            // the matrix once per row, and are scalar loops for Q4_1/Q5_0/Q5_1).
            (Matrix::Quantized(q), Products::RowWise) if integer_products(q) => self.dots_t(x),
            (Matrix::Quantized(q), Products::ByRowCount)
                if integer_products(q) && rows <= DECODE_ROWS =>
            {
                self.dots_t(x)
            }
            (Matrix::Iq(_), Products::RowWise) if token_runs::takes(x, plan.runs) => {
                self.by_runs(x, plan.runs.unwrap_or_default())
            }
            (Matrix::Iq(_), Products::RowWise) => self.dots_t(x),
            (Matrix::Iq(_), Products::ByRowCount) if rows <= DECODE_ROWS => self.dots_t(x),
            // Row by row through candle's kernels (the block types hyoka's own do not cover). On
            // CUDA in launches of up to eight rows instead: candle's mat-vec kernel (`fast_mmvq`)
            // takes them in one pass over the weights. A row's result then depends on the rows
            // sharing its launch (in the last bits), which breaks nothing that holds on CUDA:
            // there cuBLAS picks the prefill's GEMM kernels by shape, so a batch's scores already
            // differ from one-at-a-time ones (docs/gpu.md, "Batch invariance"). On an H200 (synthetic 8B, 20 rows): 111 tok/s row by row, 205 in launches
            // of eight; one row unchanged.
            (Matrix::Quantized(q), Products::RowWise) if rows > 1 => {
                let launch = if q.device().is_cuda() { DECODE_ROWS } else { 1 };
                let each: Vec<Tensor> = (0..rows)
                    .step_by(launch)
                    .map(|r| quantized_product(q, &x.narrow(0, r, launch.min(rows - r))?))
                    .collect::<Result<_>>()?;
                Tensor::cat(&each, 0)
            }
            (Matrix::Quantized(q), Products::RowWise) => quantized_product(q, x),
            (Matrix::Quantized(q), Products::ByRowCount) if rows <= DECODE_ROWS => {
                quantized_product(q, x)
            }
            // Dense weights on the CPU, decoding: each row on its own (gemm's few-row
            // products round a row by the rows beside it).
            (Matrix::Dense(w), Products::RowWise) if dense_rows::takes(w, x) => {
                dense_rows::product(w, x)
            }
            (Matrix::Dense(w), Products::ByRowCount)
                if rows <= DECODE_ROWS && dense_rows::takes(w, x) =>
            {
                dense_rows::product(w, x)
            }
            _ if prefill_gemm::takes(self, x) => {
                prefill_gemm::product(self, x, plan.runs, plan.gemm)
            }
            (Matrix::Dense(w), Products::Prefill) if w.dtype() == x.dtype() => x.matmul(&w.t()?),
            _ => x.matmul(&self.expand_with(x.dtype(), plan.gpu_kernels)?.t()?),
        }
    }

    /// x · Wᵀ through the quantized kernels whatever the rows (each row on its own, so the
    /// result of a row does not depend on the others); dense matrices as `matmul_t`.
    pub fn matvec_t(&self, x: &Tensor) -> Result<Tensor> {
        self.product(x, Products::RowWise.into())
    }

    /// x (n, in) · Wᵀ for decoding, each row's result the same whatever the other rows, and
    /// each weight block read once for all of them. On the CPU, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 and
    /// (with AVX2) Q2_K … Q6_K in integers on 8-bit activations (`block_dots`, `kquant_dots`:
    /// llama.cpp's and candle's quantized products, a row's result candle's to the bit), the
    /// i-quants likewise (`iq_dots`; all but IQ4_NL on activations rounded per 256 as
    /// llama.cpp); other matrices expanded to f32 [`DOT_BLOCK_ROWS`] rows at a time, each
    /// output one f32 dot product summed in a fixed order. For decoding several sequences, where candle would
    /// multiply one row at a time ([`integer_products`]).
    pub fn dots_t(&self, x: &Tensor) -> Result<Tensor> {
        let (out, k) = self.dims()?;
        let n = x.dim(0)?;
        if n == 0 {
            return Tensor::zeros((0, out), x.dtype(), x.device());
        }
        let xs: Vec<f32> = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        let y = match self.row_kernels()? {
            Some(RowKernels {
                format: BlockFormat::Legacy(kind),
                data,
            }) => {
                let acts = Q8Rows::quantize(&xs, k, kind.has_min());
                let (dot, row_bytes) = (kernels().legacy_rows, kind.row_bytes(k));
                // A task's rows at once: with one activation row, eight weight rows are
                // multiplied together.
                by_weight_rows(out, n, INT_DOT_ROWS, |rows, part| {
                    dot(
                        kind,
                        &data[rows.start * row_bytes..rows.end * row_bytes],
                        &acts,
                        part,
                    );
                    Ok(())
                })?
            }
            Some(RowKernels {
                format: BlockFormat::IQuant(kind),
                data,
            }) => {
                let acts = iq_dots::Activations::quantize(kind, &xs, k);
                let dot = kernels().iquant_rows;
                by_row_bytes(out, n, &data, kind.row_bytes(k), |w, part| {
                    dot(kind, w, &acts, part)
                })?
            }
            Some(RowKernels {
                format: BlockFormat::KQuant(kind),
                data,
            }) => {
                let acts = Q8KRows::quantize(&xs, k);
                // `row_kernels` gives K-quant blocks only where this CPU has their kernel.
                let dot = kernels().kquant_rows.ok_or_else(|| {
                    candle_core::Error::Msg("no K-quant row kernel on this CPU".into())
                })?;
                by_row_bytes(out, n, &data, kind.row_bytes(k), |w, part| {
                    dot(kind, w, &acts, part)
                })?
            }
            None => {
                let dot = kernels().f32_rows;
                by_weight_rows(out, n, DOT_BLOCK_ROWS, |rows, part| {
                    // Each weight row expanded once and read once for every x row.
                    let ids = Tensor::arange(rows.start as u32, rows.end as u32, &Device::Cpu)?;
                    let w: Vec<f32> = self.rows(&ids, DType::F32)?.flatten_all()?.to_vec1()?;
                    for wv in w.chunks_exact(k) {
                        dot(&xs, wv, part);
                    }
                    Ok(())
                })?
            }
        };
        Tensor::from_vec(y, (n, out), x.device())?.to_dtype(x.dtype())
    }

    /// x · Wᵀ with the matrix expanded `chunk` rows at a time: the arithmetic of the expanded
    /// matrix, with at most `chunk` rows of it expanded at once (an output head of 128k
    /// vocabulary rows would otherwise be a 2 GB temporary in f32).
    pub fn matmul_t_chunked(&self, x: &Tensor, chunk: usize) -> Result<Tensor> {
        let (out, _) = self.dims()?;
        if let Matrix::Dense(w) = self
            && w.dtype() == x.dtype()
            && !prefill_gemm::takes(self, x)
        {
            return x.matmul(&w.t()?);
        }
        if prefill_gemm::takes(self, x) {
            // On the CPU: f32 products (whatever `--prefill-gemm` says), expanded a block of
            // 64 MiB at a time into the thread's kept buffer, each block's products written
            // into the output's columns (a 13B's 16k-row chunk expanded whole would take 335 MB,
            // and chunk outputs copied into a whole output would hold it twice).
            return prefill_gemm::product(self, x, None, PrefillGemm::F32);
        }
        let mut parts = Vec::with_capacity(out.div_ceil(chunk));
        for start in (0..out).step_by(chunk.max(1)) {
            let end = (start + chunk).min(out);
            let ids = Tensor::arange(start as u32, end as u32, x.device())?;
            parts.push(x.matmul(&self.rows(&ids, x.dtype())?.t()?)?);
        }
        Tensor::cat(&parts, 1)
    }

    /// Rows `ids` of the matrix in `dtype`: embedding lookups, and the output head restricted
    /// to a few vocabulary entries. Only those rows are expanded.
    pub fn rows(&self, ids: &Tensor, dtype: DType) -> Result<Tensor> {
        match self {
            Matrix::Dense(t) => t.index_select(ids, 0)?.to_dtype(dtype),
            Matrix::Quantized(q) => q.embedding(ids)?.to_dtype(dtype),
            Matrix::Iq(m) => {
                let ids: Vec<u32> = ids.flatten_all()?.to_vec1()?;
                let (_, cols) = m.dims();
                Tensor::from_vec(m.rows_f32(&ids)?, (ids.len(), cols), &Device::Cpu)?
                    .to_dtype(dtype)
            }
        }
    }

    /// The matrix with its rows reordered, on `device`: row i of the result is row `order[i]`
    /// of this one. Quantized blocks run along rows, so a row permutation moves whole rows of
    /// bytes.
    pub fn permute_rows(&self, order: &[usize], device: &candle_core::Device) -> Result<Matrix> {
        match self {
            Matrix::Dense(t) => {
                let idx = Tensor::from_vec(
                    order.iter().map(|&i| i as u32).collect::<Vec<_>>(),
                    order.len(),
                    t.device(),
                )?;
                Ok(Matrix::Dense(t.index_select(&idx, 0)?.to_device(device)?))
            }
            Matrix::Quantized(q) => {
                let (rows, cols) = q.shape().dims2()?;
                let data = q.data()?;
                let row_bytes = data.len() / rows;
                debug_assert_eq!(
                    row_bytes,
                    cols / q.dtype().block_size() * q.dtype().type_size()
                );
                let mut out = Vec::with_capacity(data.len());
                for &r in order {
                    out.extend_from_slice(&data[r * row_bytes..(r + 1) * row_bytes]);
                }
                let permuted = candle_core::quantized::ggml_file::qtensor_from_ggml(
                    q.dtype(),
                    &out,
                    vec![rows, cols],
                    device,
                )?;
                Ok(Matrix::Quantized(Arc::new(permuted)))
            }
            Matrix::Iq(m) if device.is_cpu() => Ok(Matrix::Iq(Arc::new(m.permute_rows(order)?))),
            Matrix::Iq(_) => candle_core::bail!("i-quant blocks are kept on the CPU only"),
        }
    }
}

impl Matrix {
    pub(crate) fn row_kernels(&self) -> Result<Option<RowKernels<'_>>> {
        let q = match self {
            Matrix::Quantized(q) => q,
            Matrix::Iq(m) => {
                return Ok(Some(RowKernels {
                    format: BlockFormat::IQuant(m.kind()),
                    data: m.data().into(),
                }));
            }
            Matrix::Dense(_) => return Ok(None),
        };
        if !integer_products(q) {
            return Ok(None);
        }
        Ok(match BlockFormat::of(q.dtype()) {
            Some(format) => Some(RowKernels {
                format,
                data: q.data()?,
            }),
            None => None,
        })
    }
}

/// y (n, out) of an integer row kernel: `dot(w, part)` appends weight row w's n outputs (each
/// row `row_bytes` of `data`), [`INT_DOT_ROWS`] weight rows per task.
fn by_row_bytes(
    out: usize,
    n: usize,
    data: &[u8],
    row_bytes: usize,
    dot: impl Fn(&[u8], &mut Vec<f32>) + Sync,
) -> Result<Vec<f32>> {
    by_weight_rows(out, n, INT_DOT_ROWS, |rows, part| {
        for v in rows {
            dot(&data[v * row_bytes..(v + 1) * row_bytes], part);
        }
        Ok(())
    })
}

/// Weight rows `Matrix::dots_t` expands at once: 256 rows of 4096 f32 are 4 MiB.
const DOT_BLOCK_ROWS: usize = 256;

/// Weight rows per task of an integer product: small enough that a 128-row key projection
/// still spreads over the threads.
const INT_DOT_ROWS: usize = 32;

/// Whether `Matrix::dots_t` multiplies this matrix in integers itself (`block_dots`,
/// `kquant_dots`), several rows per pass over the weights.
fn integer_products(q: &QTensor) -> bool {
    q.device().is_cpu() && BlockFormat::of(q.dtype()).is_some_and(|f| kernels().integer_rows(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::quant::candle_products::candle_product_by_row;
    use crate::model::quant::cpu::block_dots::tests::BLOCK_TYPES;

    const K_QUANTS: [GgmlDType; 5] = [
        GgmlDType::Q2K,
        GgmlDType::Q3K,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
    ];

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    /// Every block type expanded on the threads is exactly what candle's `dequantize` gives.
    #[test]
    fn expanding_on_threads_gives_candles_dequantized_values() {
        let dev = Device::Cpu;
        // 300 rows: tasks of 64 rows and a shorter last one.
        let w = (Tensor::randn(0f32, 1.0, (300, 1024), &dev).unwrap() + 0.2).unwrap();
        for dtype in BLOCK_TYPES.into_iter().chain(K_QUANTS) {
            let q = QTensor::quantize(&w, dtype).unwrap();
            let want: Vec<f32> = q
                .dequantize(&dev)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let got = expand_on_threads(&q).unwrap().expect("a CPU block type");
            let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(got.len(), want.len());
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{dtype:?}"
            );
        }
    }

    /// `dots_t` is x · Wᵀ — for a dense matrix that of the GEMM, for a quantized one candle's
    /// quantized product on each row alone (8-bit activations; to the bit for K-quants, within
    /// float rounding for the 32-value blocks) — and a row's result is the same to the bit alone
    /// or among others, for every kind of matrix.
    #[test]
    fn dots_t_is_candles_product_row_by_row_and_row_independent() {
        let dev = Device::Cpu;
        // 600 output rows: several tasks' worth and a partial one. 256 columns are whole blocks
        // of every type; the dense matrix's 100 leave a tail after the eight lanes.
        let w = Tensor::randn(0f32, 1.0, (600, 256), &dev).unwrap();
        let x = Tensor::randn(0f32, 1.0, (5, 256), &dev).unwrap();
        let dense_w = Tensor::randn(0f32, 1.0, (300, 100), &dev).unwrap();
        let dense_x = Tensor::randn(0f32, 1.0, (5, 100), &dev).unwrap();
        let mut cases: Vec<(String, Matrix, &Tensor, Tensor, f32)> = vec![(
            "dense".into(),
            Matrix::Dense(dense_w.clone()),
            &dense_x,
            dense_x.matmul(&dense_w.t().unwrap()).unwrap(),
            1e-4,
        )];
        for dtype in BLOCK_TYPES.into_iter().chain(K_QUANTS) {
            let q = Arc::new(QTensor::quantize(&w, dtype).unwrap());
            let want = Tensor::new(candle_product_by_row(&q, &x), &dev).unwrap();
            // K-quants: candle's kernels operation for operation; Q4_1/Q5_0/Q5_1: candle's
            // reference loop, which `block_dots` reproduces; Q4_0 and Q8_0: candle's AVX2
            // products, which sum a block's products in lanes (llama.cpp's order).
            let exact = crate::model::quant::formats::kquants::KQuantKind::of(dtype).is_some()
                || matches!(dtype, GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1);
            let tol = if exact { 0.0 } else { 1e-4 };
            let m = Matrix::Quantized(q);
            cases.push((format!("{dtype:?}"), m, &x, want, tol));
        }
        for (name, m, x, want, tol) in &cases {
            let got = m.dots_t(x).unwrap();
            let d = max_diff(&got, want);
            assert!(d <= *tol, "{name}: {d}");
            for r in 0..5 {
                let alone = m.dots_t(&x.narrow(0, r, 1).unwrap()).unwrap();
                let together = got.narrow(0, r, 1).unwrap();
                let same = alone.flatten_all().unwrap().to_vec1::<f32>().unwrap()
                    == together.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                assert!(same, "{name} row {r}");
            }
        }
    }
}
