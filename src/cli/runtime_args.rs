//! The flags every model-running command shares.

/// How to run a judge model: flags shared by `judge` and `bench`.
#[derive(clap::Args, Debug)]
pub struct RuntimeArgs {
    /// tokenizer.json (or a folder with tokenizer.json and tokenizer_config.json) for models
    /// that lack one, e.g. Gemma GGUF files.
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<std::path::PathBuf>,
    /// The chat template to render prompts with, instead of the model's own: a .jinja file, a
    /// tokenizer_config.json, a GGUF or a model folder. For models that carry none (many GGUFs
    /// of 2023 models) or a wrong one; special tokens it does not define (bos_token…) come from
    /// the model. Its hash is in every output's provenance.
    #[arg(long, value_name = "PATH")]
    pub chat_template: Option<std::path::PathBuf>,
    /// The text a chat template's `strftime_now` prints (Llama 3.1's prints the date in its
    /// system message). By default a fixed 2024-01-01, so that a judge's prompt does not change
    /// from day to day; a given date is recorded in the provenance.
    #[arg(long, value_name = "TEXT")]
    pub template_date: Option<String>,
    /// cpu, cuda or cuda:N (a build with --features cuda; compute capability 7.5 or later).
    /// metal needs a build with --features metal, which has never been built or run.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// f32, bf16 or f16. Default by device: f32 on the CPU; bf16 on NVIDIA GPUs of compute
    /// capability ≥ 8.0 (A100, RTX 30xx/40xx, H100); f16 on 7.5 (T4, RTX 20xx: candle has no
    /// bf16 kernels for them; 7.0 and older are unsupported) and on Apple GPUs. Softmax, norms and masks run in f32 in
    /// every dtype (and the residual stream too in f16). The dtype is in every output's
    /// provenance. Measured on the CPU against transformers in f32: bf16 moved a judge's
    /// expected scores by up to 0.12, f16 by 0.01 (docs/gpu.md, "Parity by dtype").
    #[arg(long)]
    pub dtype: Option<String>,
    /// How weights are held: `stored` keeps GGUF blocks quantized and safetensors in their
    /// dtype, expanding one matrix at a time for a prompt's GEMMs (an 8B Q4_K_M judge needs
    /// about its file size); `expanded` converts every weight to --dtype at load (≈ 6× a
    /// Q4_K_M file in f32), for comparison. Prompt scores are the same either way; decoding
    /// (json rubrics, --greedy-baseline) uses quantized kernels when stored. `q8_0` quantizes a
    /// safetensors checkpoint's matrices to Q8_0 at load, as llama.cpp's converter writes a
    /// q8_0 GGUF (a 13B bf16 judge in about 14 GB, not 26; scores then those of that GGUF);
    /// GGUF files stay as stored.
    #[arg(long, value_enum, default_value = "stored")]
    pub weights: crate::model::WeightsMode,
    /// The CPU's products for prompts (prefill, a judge's scored prompts; with --weights
    /// expanded, decoding's too): `f32` gives the expanded f32 model's numbers to the bit;
    /// `bf16` rounds both operands to bf16 and sums in f32 on AVX512-BF16, as a GPU's bf16 —
    /// faster on AMD Zen 4/5, slower on Intel Xeons (their bf16 instruction is quarter-rate);
    /// `int8` rounds activations to 8 bits per 32 values and multiplies them with a GGUF's
    /// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, Q2_K…Q6_K and i-quant blocks as integers (AVX-512 VNNI, or
    /// AVX2 with the same numbers), as llama.cpp does (other matrices stay f32; not with
    /// --weights expanded). bf16 and int8 are faster and less exact: recorded in the
    /// provenance; measured in docs/benchmarks.md. Refused on CPUs without the
    /// instructions, on GPUs, and with --dtype other than f32.
    #[arg(long, value_enum, default_value = "f32")]
    pub prefill_gemm: crate::model::quant::PrefillGemm,
    /// On CUDA: `hyoka` runs hyoka's kernels where they apply (fused prefill attention,
    /// decoding attention, GGUF blocks expanded to bf16); `candle` runs candle's ops for all of
    /// them, to compare or to get around a fault in a kernel. The numbers differ in their last
    /// bits; `candle` is recorded in the provenance. Nothing changes on the CPU.
    #[arg(long, value_enum, default_value = "hyoka")]
    pub gpu_kernels: crate::model::backend::gpu_kernels::GpuKernels,
}

impl RuntimeArgs {
    /// The library's runtime options these flags name.
    pub fn options(&self) -> crate::model::RuntimeOptions {
        crate::model::RuntimeOptions {
            device: self.device.clone(),
            dtype: self.dtype.clone(),
            weights: self.weights,
            prefill_gemm: self.prefill_gemm,
            gpu_kernels: self.gpu_kernels,
            template_date: self.template_date.clone(),
            tokenizer: self.tokenizer.clone(),
            chat_template: self.chat_template.clone(),
        }
    }
}
