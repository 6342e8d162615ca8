//! How to run judge models as a user names it (the command line's flags, the Python package's
//! keyword arguments): the device and dtype by name, the runtime settings, and a tokenizer or
//! chat template for models that lack one. Resolved once into a device and `RuntimeSettings`.

use crate::model::backend::device::{describe_device, dtype_name, parse_device_for, parse_dtype};
use crate::model::backend::gpu_kernels::GpuKernels;
use crate::model::error::ModelError;
use crate::model::loaded_model::{LoadedModel, ModelRequest};
use crate::model::quant::{PrefillGemm, WeightsMode, advice, check_prefill_gemm};
use crate::model::settings::RuntimeSettings;
use candle_core::Device;
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// cpu, cuda, cuda:N or metal.
    pub device: String,
    /// f32, bf16 or f16; None: the device's default.
    pub dtype: Option<String>,
    pub weights: WeightsMode,
    pub prefill_gemm: PrefillGemm,
    pub gpu_kernels: GpuKernels,
    /// The text a chat template's `strftime_now` prints; None: a fixed 2024-01-01.
    pub template_date: Option<String>,
    /// tokenizer.json (or a folder with it) for models that lack one.
    pub tokenizer: Option<PathBuf>,
    /// A chat template to render prompts with instead of the model's own.
    pub chat_template: Option<PathBuf>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            device: "cpu".into(),
            dtype: None,
            weights: WeightsMode::default(),
            prefill_gemm: PrefillGemm::default(),
            gpu_kernels: GpuKernels::default(),
            template_date: None,
            tokenizer: None,
            chat_template: None,
        }
    }
}

impl RuntimeOptions {
    /// The device named and the runtime settings on it: the dtype by device when not given,
    /// the prefill products checked for the device, dtype and weights.
    pub fn settings(&self) -> Result<(Device, RuntimeSettings), ModelError> {
        let device = parse_device_for(&self.device, self.gpu_kernels)?;
        let dtype = parse_dtype(self.dtype.as_deref(), &device)?;
        check_prefill_gemm(self.prefill_gemm, &device, dtype, self.weights)?;
        if let Some(word) = advice(self.prefill_gemm) {
            eprintln!("{word}");
        }
        if self.dtype.is_none() && !device.is_cpu() {
            eprintln!(
                "dtype {} (the default on {}; --dtype overrides)",
                dtype_name(dtype),
                describe_device(&device)
            );
        }
        let settings = RuntimeSettings {
            dtype,
            weights: self.weights,
            prefill_gemm: self.prefill_gemm,
            gpu_kernels: self.gpu_kernels,
            template_date: self.template_date.clone(),
        };
        Ok((device, settings))
    }

    /// Load judge model `name` on `device` with `settings` (`settings()`), with this
    /// tokenizer and chat template; `expect_sha256`: the weights' checksum, checked.
    pub fn load_model(
        &self,
        name: &str,
        device: &Device,
        settings: &RuntimeSettings,
        expect_sha256: Option<&str>,
    ) -> Result<LoadedModel, ModelError> {
        let request = ModelRequest {
            name,
            tokenizer: self.tokenizer.as_deref(),
            chat_template: self.chat_template.as_deref(),
            expect_sha256,
        };
        // Its errors name the model's files or repository.
        let model = LoadedModel::load(&request, device, settings)?;
        if !model.iquants_converted.is_empty() {
            let held: Vec<String> = model
                .iquants_converted
                .iter()
                .map(|(t, n)| format!("{n} {} tensors as {:?}", t.name(), t.held_as()))
                .collect();
            eprintln!(
                "{name}: {} blocks on the GPU (values slightly rounded: docs/models.md); \
                 hyoka keeps i-quants in their own blocks on the CPU only; `--weights expanded` \
                 reads their values exactly",
                held.join(", ")
            );
        }
        Ok(model)
    }
}

/// A named choice (`weights`, `prefill_gemm`, `gpu_kernels`) from its value's name; another
/// name is a usage error listing the choices.
pub fn parse_choice<T: clap::ValueEnum>(setting: &str, value: &str) -> Result<T, ModelError> {
    T::from_str(value, false).map_err(|_| {
        let names: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_string()))
            .collect();
        ModelError::Setting {
            flag: setting.to_string(),
            message: format!("`{value}` is not one of {}", names.join(", ")),
        }
    })
}
