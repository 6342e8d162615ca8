//! How a judge model runs: every setting that can change a number it computes, as one value.

use candle_core::DType;
use serde_json::{Map, Value, json};

use crate::model::backend::gpu_kernels::GpuKernels;
use crate::model::quant::{PrefillGemm, WeightsMode, int8_body_override};

/// A judge model's runtime settings: built once (by the command line, the Python package or a
/// library caller), given to `LoadedModel::load`, which applies each to the part it concerns,
/// and read back whole from the loaded model (`LoadedModel::settings`) into every output's
/// provenance (`record`). The device is given beside it: the provenance names it on its own.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeSettings {
    /// Activations, and weights expanded from their stored type.
    pub dtype: DType,
    /// Weights kept as stored, expanded at load, or quantized to Q8_0 at load.
    pub weights: WeightsMode,
    /// The CPU's products for prompts (f32, bf16 or int8).
    pub prefill_gemm: PrefillGemm,
    /// Whose kernels run on CUDA where both hyoka and candle have one.
    pub gpu_kernels: GpuKernels,
    /// The text a chat template's `strftime_now` prints; None: a fixed 2024-01-01.
    pub template_date: Option<String>,
}

impl RuntimeSettings {
    /// `dtype` with every other setting at its default.
    pub fn new(dtype: DType) -> Self {
        RuntimeSettings {
            dtype,
            weights: WeightsMode::default(),
            prefill_gemm: PrefillGemm::default(),
            gpu_kernels: GpuKernels::default(),
            template_date: None,
        }
    }

    /// Write into a provenance's `settings` every setting that can change this run's numbers
    /// and is not at its default (the dtype has its own provenance field): a file continued
    /// by a run that differs in one of them is refused, and one that differs only in a
    /// setting without effect (how weights are held, when nothing is decoded) is not.
    /// `decodes`: the run generates tokens (json rubrics, greedy baselines), where the
    /// weights' form matters. A test override of the 8-bit products' instructions is recorded
    /// when set.
    pub fn record(&self, decodes: bool, settings: &mut Map<String, Value>) {
        if let Some(date) = &self.template_date {
            settings.insert("template_date".into(), json!(date));
        }
        if decodes {
            settings.insert("weights".into(), json!(self.weights.name()));
        }
        if self.prefill_gemm != PrefillGemm::default() {
            settings.insert("prefill_gemm".into(), json!(self.prefill_gemm.name()));
        }
        if self.gpu_kernels != GpuKernels::default() {
            settings.insert("gpu_kernels".into(), json!(self.gpu_kernels.name()));
        }
        if let Some(body) = int8_body_override() {
            settings.insert("test_int8_body".into(), json!(body));
        }
        if let Some(cpu) = crate::model::backend::cpu::test_override() {
            settings.insert("test_cpu".into(), json!(cpu));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_record_nothing_and_each_setting_records_itself() {
        let mut map = Map::new();
        let defaults = RuntimeSettings::new(DType::F32);
        defaults.record(false, &mut map);
        map.remove("test_int8_body");
        map.remove("test_cpu");
        assert!(map.is_empty(), "{map:?}");
        let set = RuntimeSettings {
            weights: WeightsMode::Expanded,
            prefill_gemm: PrefillGemm::Int8,
            gpu_kernels: GpuKernels::Candle,
            template_date: Some("26 Jul 2024".into()),
            ..defaults
        };
        let mut map = Map::new();
        set.record(true, &mut map);
        assert_eq!(map["weights"], "expanded");
        assert_eq!(map["prefill_gemm"], "int8");
        assert_eq!(map["gpu_kernels"], "candle");
        assert_eq!(map["template_date"], "26 Jul 2024");
        let mut map = Map::new();
        set.record(false, &mut map);
        assert!(!map.contains_key("weights"));
    }
}
