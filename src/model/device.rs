//! `--device` and `--dtype`.

use super::ModelError;
use candle_core::{DType, Device};

/// `cpu`, `cuda`, `cuda:N` or `metal`. Fails clearly when this binary was built without that
/// backend.
pub fn parse_device(spec: &str) -> Result<Device, ModelError> {
    let unavailable = |what: &str, feature: &str, e: candle_core::Error| ModelError::Device {
        spec: spec.into(),
        message: format!(
            "{what} is not usable: {e} (this binary needs to be built with `--features {feature}`)"
        ),
    };
    match spec {
        "cpu" => Ok(Device::Cpu),
        "metal" => {
            if !candle_core::utils::metal_is_available() {
                return Err(ModelError::Device {
                    spec: spec.into(),
                    message: "this binary was built without Metal (`--features metal`)".into(),
                });
            }
            Device::new_metal(0).map_err(|e| unavailable("Metal", "metal", e))
        }
        s if s == "cuda" || s.starts_with("cuda:") => {
            let ordinal = match s.strip_prefix("cuda:") {
                Some(n) => n.parse::<usize>().map_err(|_| ModelError::Device {
                    spec: spec.into(),
                    message: "expected cuda:N with N a GPU number".into(),
                })?,
                None => 0,
            };
            if !candle_core::utils::cuda_is_available() {
                return Err(ModelError::Device { spec: spec.into(), message: "this binary was built without CUDA (`cargo build --release --features cuda`)".into() });
            }
            Device::new_cuda(ordinal).map_err(|e| unavailable(&format!("GPU {ordinal}"), "cuda", e))
        }
        other => Err(ModelError::Device {
            spec: other.into(),
            message: "expected cpu, cuda, cuda:N or metal".into(),
        }),
    }
}

/// `f32`, `bf16` or `f16`; the default is f32 on CPU (fast GEMM, exact) and bf16 on GPUs.
pub fn parse_dtype(spec: Option<&str>, device: &Device) -> Result<DType, ModelError> {
    match spec {
        None if device.is_cpu() => Ok(DType::F32),
        None => Ok(DType::BF16),
        Some("f32") => Ok(DType::F32),
        Some("bf16") => Ok(DType::BF16),
        Some("f16") => Ok(DType::F16),
        Some(other) => Err(ModelError::Dtype {
            spec: other.into(),
            message: "must be f32, bf16 or f16".into(),
        }),
    }
}

/// How a device is named in outputs.
pub fn device_name(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        _ => "other",
    }
}
