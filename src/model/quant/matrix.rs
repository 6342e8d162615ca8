//! A weight matrix kept as its file stores it, expanded only for the GEMM that uses it.
//!
//! An 8B judge in Q4_K_M is 4.9 GB as a GGUF file and 32 GB as f32: expanding every weight at
//! load puts real judges out of reach of a 24 GB machine or GPU. Here a GGUF matrix stays in
//! its quantized blocks and a safetensors matrix in its file dtype. A product with many rows
//! (prefill: a batch of prompts, hundreds to thousands of tokens) expands the one matrix it
//! needs to the compute dtype just before its GEMM — the expansion costs about one pass over
//! the weight, amortised over every row — on the CPU into one buffer reused by every product
//! (`prefill_gemm`), elsewhere into a temporary freed after; a product with few rows
//! (token-by-token decoding) multiplies the blocks in integers with the activations rounded to
//! 8 bits, as llama.cpp and candle do (`block_dots`, `kquant_dots`, `iq_dots`, else candle's
//! kernels).
//! Prefill numbers are exactly those of the expanded model (the same f32 weights, the same
//! GEMM); decoding differs by the activations' rounding, except for a decoding step's runs of
//! several tokens, multiplied in f32 (`token_runs`).

use crate::model::backend::gpu_kernels::GpuKernels;
use crate::model::quant::formats::block_format::BlockFormat;
use crate::model::quant::formats::iquant_matrix::IqMatrix;
use candle_core::Tensor;
use candle_core::quantized::QTensor;
use std::sync::Arc;

/// How weights are held in memory (`--weights`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightsMode {
    /// As stored: GGUF blocks stay quantized, safetensors keep their dtype.
    #[default]
    Stored,
    /// Every weight expanded to the compute dtype at load (more memory; for comparison).
    Expanded,
    /// A safetensors checkpoint's matrices quantized to Q8_0 at load, as llama.cpp's converter
    /// writes a q8_0 GGUF (8.5 bits a weight: a 13B bf16 judge in 14 GB instead of 26); GGUF
    /// files stay as stored.
    #[value(name = "q8_0")]
    Q8_0,
}

impl WeightsMode {
    pub fn name(self) -> &'static str {
        match self {
            WeightsMode::Stored => "stored",
            WeightsMode::Expanded => "expanded",
            WeightsMode::Q8_0 => "q8_0",
        }
    }
}

/// Rows up to which a quantized product uses the matrix-vector kernels rather than expansion
/// and GEMM: decoding steps (one row per sequence), never a prompt's prefill.
pub const DECODE_ROWS: usize = 8;

/// How a product with a quantized matrix chooses its kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// Expansion and GEMM above [`DECODE_ROWS`] rows, the quantized kernels at or below: a
    /// prompt's prefill, or a few tokens.
    #[default]
    ByRowCount,
    /// Each row on its own, whatever the rows (`Matrix::dots_t`, or candle's kernels row by
    /// row for the types it does not cover): decoding many sequences at once,
    /// where each row's result must be what it is when that sequence is decoded alone. On
    /// CUDA, launches of up to [`DECODE_ROWS`] rows instead (see `product`).
    /// candle's x86 kernels for several rows (repacked Q4_K/Q6_K/Q8_0 tiles) do not give each
    /// row what it gets alone: measured on SmolLM2's GGUF, logits moved by up to 0.57.
    /// With the rows' runs known (`Plan::runs`), runs of several tokens go through 8-bit
    /// products with tokens in the lanes, or f32 products on weight rows expanded a few at a
    /// time, instead (`token_runs`).
    RowWise,
    /// Expansion and GEMM (a prompt's prefill products) whatever the rows: a judge's scoring
    /// pass, where a row's bits must not depend on how many rows the pass holds (a few in the
    /// last layer of a lone item's pass, many in a batch's). On the CPU each row of the GEMM
    /// keeps its bits whatever the rows beside it (`prefill_gemm`).
    Prefill,
}

/// How one product chooses its kernels: the batch's `products`, for `RowWise` the run of
/// every row of x, and the precision of a prompt's products on the CPU (the model's setting).
#[derive(Clone, Copy, Debug, Default)]
pub struct Plan<'a> {
    pub products: Products,
    /// Per row of x: how many tokens of its sequence the pass feeds together with it (a
    /// decoding step's trunk, or one of its branches); 0 for padding. None: not known.
    pub runs: Option<&'a [u32]>,
    pub gemm: PrefillGemm,
    /// Whether GGUF blocks are expanded by hyoka's CUDA kernel (`cuda_expand`) or candle's.
    pub gpu_kernels: GpuKernels,
}

impl From<Products> for Plan<'_> {
    fn from(products: Products) -> Self {
        Plan {
            products,
            runs: None,
            gemm: PrefillGemm::F32,
            gpu_kernels: GpuKernels::Hyoka,
        }
    }
}

/// A (out, in) weight matrix.
#[derive(Clone)]
pub enum Matrix {
    /// A dense tensor, in the dtype it was stored in (or the compute dtype when expanded).
    Dense(Tensor),
    /// GGUF blocks (Q4_0 … Q6_K, Q8_0).
    Quantized(Arc<QTensor>),
    /// I-quant blocks on the CPU, which candle's `QTensor` cannot hold (`iq_rows`).
    Iq(Arc<IqMatrix>),
}

/// A CPU matrix's blocks and their format, whose integer row kernels multiply them.
pub(crate) struct RowKernels<'a> {
    pub(crate) format: BlockFormat,
    pub(crate) data: std::borrow::Cow<'a, [u8]>,
}

/// How prompts' products are computed on the CPU (`--prefill-gemm`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PrefillGemm {
    /// In f32: the expanded f32 model's numbers, to the bit.
    #[default]
    F32,
    /// Both operands rounded to bf16, products summed in f32, on AVX512-BF16 (`bf16_gemm`).
    Bf16,
    /// Activations rounded to 8 bits per 32 values (llama.cpp's Q8_0) and multiplied with the
    /// weights' own integers on AVX-512 VNNI or AVX2 (`int8_products`, the same bits on either),
    /// for GGUF matrices in Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K … Q6_K or an i-quant; every
    /// other matrix in f32.
    Int8,
}

impl PrefillGemm {
    pub fn name(self) -> &'static str {
        match self {
            PrefillGemm::F32 => "f32",
            PrefillGemm::Bf16 => "bf16",
            PrefillGemm::Int8 => "int8",
        }
    }
}
