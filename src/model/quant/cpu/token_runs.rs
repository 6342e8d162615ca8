//! A decoding step's products by run: a token fed alone goes through the integer kernels, a
//! run of several tokens of one sequence (a trunk or branch fed at once) through 8-bit
//! products with sixteen tokens in the lanes where the CPU has AVX2 (or AVX-512 VNNI: the same
//! numbers) and the weights are Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, Q2_K … Q6_K or an i-quant
//! (`int8_products`), else through f32 products on weight rows expanded a few at a time
//! (`expanded_dots`).
//!
//! json mode feeds, after each score, the fixed text up to the next one (`",\n  "<key>": `,
//! about ten tokens per row) and reads the next score. Through the integer kernels each of
//! those tokens cost what a decoded token costs: with 16 rows on Qwen2.5-0.5B, 19 ms per
//! token and row, 60% of a json run (perf). Expanding the whole matrix and calling gemm
//! instead cost more than it saved: the expansion (1.4 GB of f32 written and read back) and
//! gemm's packing of it are paid per step, 0.8 s, whatever the tokens.
//!
//! A row must get what it gets when its sequence is decoded alone (`decode`), so its kernel is
//! chosen by its run, which is the same alone, and both kernels give a row numbers that do
//! not depend on the other rows.

use crate::model::quant::cpu::expanded_dots::expand_row;
use crate::model::quant::cpu::int8_products;
use crate::model::quant::cpu::prefill_gemm::with_expanded;
use crate::model::quant::cpu::row_tasks::by_weight_rows;
use crate::model::quant::matrix::{Matrix, RowKernels};
use candle_core::{DType, Device, Result, Tensor, bail};

/// Whether a RowWise product of x with these runs goes through `Matrix::by_runs`: an f32 CPU
/// product with a run of several tokens, or with padding (rows of a json batch that wait, or
/// are done, until enough of them are dropped: 11 of 12 rows cost as much as decoded ones).
pub fn takes(x: &Tensor, runs: Option<&[u32]>) -> bool {
    x.device().is_cpu()
        && x.dtype() == DType::F32
        && runs.is_some_and(|r| r.iter().any(|&n| n != 1))
}

/// Weight rows per task of `expanded_dots`: expanded together and multiplied with every
/// activation row before the next ones.
const EXPANDED_ROWS: usize = 24;

impl Matrix {
    /// x (n, in) · Wᵀ, row r through the integer kernels when `runs[r]` is 1, through
    /// `expanded_dots` when it is more, and 0 (padding, whose products no one reads) when it
    /// is 0. The matrix is one `Matrix::row_kernels` covers.
    pub(crate) fn by_runs(&self, x: &Tensor, runs: &[u32]) -> Result<Tensor> {
        let (n, _) = x.dims2()?;
        let (out, _) = self.dims()?;
        if runs.len() != n {
            bail!("{} runs for a product of {n} rows", runs.len());
        }
        let (mut alone, mut together) = (Vec::new(), Vec::new());
        for (r, &run) in runs.iter().enumerate() {
            match run {
                0 => {}
                1 => alone.push(r as u32),
                _ => together.push(r as u32),
            }
        }
        let mut y = vec![0f32; n * out];
        let mut scatter = |rows: &[u32], products: Tensor| -> Result<()> {
            let products: Vec<f32> = products.flatten_all()?.to_vec1()?;
            for (&r, p) in rows.iter().zip(products.chunks_exact(out)) {
                let r = r as usize;
                y[r * out..(r + 1) * out].copy_from_slice(p);
            }
            Ok(())
        };
        for (rows, in_runs) in [(&together, true), (&alone, false)] {
            if rows.is_empty() {
                continue;
            }
            let picked = x.index_select(&ids(rows, x.device())?, 0)?;
            let products = if in_runs {
                self.run_products(&picked)?
            } else {
                self.dots_t(&picked)?
            };
            scatter(rows, products)?;
        }
        Tensor::from_vec(y, (n, out), x.device())
    }

    /// x (n, in) · Wᵀ for tokens fed in runs: 8-bit products with the tokens in the lanes
    /// where `int8_products` applies, else f32 products on expanded weight rows. Either way a
    /// row's result does not depend on the others.
    fn run_products(&self, x: &Tensor) -> Result<Tensor> {
        let (out, k) = self.dims()?;
        let n = x.dim(0)?;
        let Some(kernels) = self.row_kernels()? else {
            bail!("run products of a matrix without integer row kernels");
        };
        let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
        let y = if int8_products::available() {
            int8_products::products(&kernels, out, k, &xs)?
        } else {
            expanded_products(&kernels, out, k, &xs)?
        };
        Tensor::from_vec(y, (n, out), x.device())
    }
}

/// xs (n, k) · Wᵀ in f32, each weight row expanded once (candle's values) and multiplied with
/// every row of xs.
fn expanded_products(kernels: &RowKernels, out: usize, k: usize, xs: &[f32]) -> Result<Vec<f32>> {
    let n = xs.len() / k.max(1);
    let dots = crate::model::quant::cpu::kernels::kernels().expanded;
    by_weight_rows(out, n, EXPANDED_ROWS, |rows, part| {
        // The thread's kept buffer (467 KB for 24 rows of Qwen2.5-0.5B's 4,864-wide down
        // projection): a fresh one per task would be mapped, faulted in and zeroed. Every value is
        // written by the expansion.
        with_expanded(rows.len() * k, |w| {
            for (v, buf) in rows.clone().zip(w.chunks_exact_mut(k)) {
                expand_row(kernels.format, row_bytes(kernels, v, k), buf)?;
            }
            part.resize(rows.len() * n, 0.0);
            dots(xs, w, k, part);
            Ok(())
        })
    })
}

/// Weight row v (of k values) of a matrix's blocks.
fn row_bytes<'a>(kernels: &'a RowKernels<'_>, v: usize, k: usize) -> &'a [u8] {
    let b = kernels.format.row_bytes(k);
    &kernels.data[v * b..(v + 1) * b]
}

fn ids(rows: &[u32], device: &Device) -> Result<Tensor> {
    Tensor::from_vec(rows.to_vec(), rows.len(), device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::quant::cpu::kquant_dots::KQuantKind;
    use crate::model::quant::matrix::{Plan, Products};
    use candle_core::quantized::{GgmlDType, QTensor};

    fn random(rows: usize, cols: usize, seed: u64) -> Tensor {
        let mut rng = crate::rng::SplitMix64(seed);
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| (rng.next_f64() as f32 - 0.5) * 2.0)
            .collect();
        Tensor::from_vec(v, (rows, cols), &Device::Cpu).expect("shape")
    }

    fn row_wise(runs: &[u32]) -> Plan<'_> {
        Plan {
            products: Products::RowWise,
            runs: Some(runs),
            gemm: Default::default(),
            gpu_kernels: Default::default(),
        }
    }

    /// A row's products are the same bits whatever else the step multiplies: a run of three
    /// tokens alone (as `extend` feeds it) and among other runs, single tokens and padding;
    /// a run's products within rounding of the expanded matrix's GEMM (through 8 bits where
    /// `int8_products` applies: then also those of the integer kernels), single tokens the integer
    /// kernels' (`dots_t`), padding zeros (also in a step of single tokens only).
    #[test]
    fn a_runs_products_do_not_depend_on_the_step() -> anyhow::Result<()> {
        for (dtype, out, k) in [
            (GgmlDType::Q8_0, 64, 1024),
            (GgmlDType::Q5_0, 37, 96),
            (GgmlDType::Q4_0, 30, 64),
            (GgmlDType::Q4_1, 29, 128),
            (GgmlDType::Q5_1, 31, 96),
            (GgmlDType::Q2K, 34, 512),
            (GgmlDType::Q3K, 36, 256),
            (GgmlDType::Q4K, 40, 512),
            (GgmlDType::Q5K, 33, 512),
            (GgmlDType::Q6K, 35, 256),
        ] {
            let w = Matrix::from_qtensor(QTensor::quantize(&random(out, k, 1), dtype)?)?;
            let x = random(40, k, 2 + out as u64);
            // The run alone; in the step it is rows 7..10.
            let alone = w.product(&x.narrow(0, 7, 3)?, row_wise(&[3, 3, 3]))?;
            let mut runs = vec![1u32; 40];
            runs[7..10].fill(3);
            runs[20..28].fill(8);
            runs[30..32].fill(0);
            let step = w.product(&x, row_wise(&runs))?;
            let bits = |t: &Tensor| -> anyhow::Result<Vec<u32>> {
                Ok(t.flatten_all()?
                    .to_vec1::<f32>()?
                    .iter()
                    .map(|v| v.to_bits())
                    .collect())
            };
            assert_eq!(bits(&alone)?, bits(&step.narrow(0, 7, 3)?)?, "{dtype:?}");
            let run = x.narrow(0, 7, 3)?;
            let gemm = run.matmul(&w.expand(DType::F32)?.t()?)?;
            let diff = |a: &Tensor, b: &Tensor| -> anyhow::Result<f32> {
                Ok((a - b)?.abs()?.max_all()?.to_scalar::<f32>()?)
            };
            let int8 = w.row_kernels()?.is_some() && int8_products::available();
            if int8 {
                // For the 32-value blocks, the integer kernels' numbers (activations rounded
                // alike, each block's dot exact) summed in another order (K-quants' kernels
                // round activations per 256 values instead); and the GEMM's within that
                // rounding.
                if KQuantKind::of(dtype).is_none() {
                    let integer = w.dots_t(&run)?;
                    let d = diff(&alone, &integer)?;
                    let scale = integer.abs()?.max_all()?.to_scalar::<f32>()?;
                    assert!(d <= 1e-6 * scale, "{dtype:?}: {d} from the integer kernels");
                }
                // Rounding x to 8 bits moves each product by up to |w|·max|x|/254: with w and
                // x uniform in ±1, about 0.0013·√k in one standard deviation; five allowed.
                let d = diff(&alone, &gemm)?;
                assert!(
                    d < 0.0065 * (k as f32).sqrt(),
                    "{dtype:?}: {d} from the GEMM"
                );
            } else {
                let d = diff(&alone, &gemm)?;
                assert!(d < 1e-3, "{dtype:?}: {d}");
            }
            let single = w.dots_t(&x.narrow(0, 0, 1)?)?;
            assert_eq!(bits(&single)?, bits(&step.narrow(0, 0, 1)?)?, "{dtype:?}");
            let padding = step
                .narrow(0, 30, 2)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert_eq!(padding, 0.0, "{dtype:?}");
            // Single tokens beside padding only (rows that wait, or are done): each the
            // integer kernels' bits, the padding not multiplied.
            let mut runs = vec![1u32; 40];
            runs[3..30].fill(0);
            let step = w.product(&x, row_wise(&runs))?;
            for r in [0, 2, 30, 39] {
                let single = w.dots_t(&x.narrow(0, r, 1)?)?;
                assert_eq!(bits(&single)?, bits(&step.narrow(0, r, 1)?)?, "{dtype:?}");
            }
            let padding = step.narrow(0, 3, 27)?.abs()?.max_all()?;
            assert_eq!(padding.to_scalar::<f32>()?, 0.0, "{dtype:?}");
        }
        Ok(())
    }
}
