//! `--device` and `--dtype`.

use crate::model::backend::gpu_kernels::GpuKernels;
use crate::model::error::ModelError;
use candle_core::{DType, Device};

/// `cpu`, `cuda`, `cuda:N` or `metal`, opened for hyoka's own CUDA kernels (`parse_device_for`).
pub fn parse_device(spec: &str) -> Result<Device, ModelError> {
    parse_device_for(spec, GpuKernels::Hyoka)
}

/// `cpu`, `cuda`, `cuda:N` or `metal`, opened for `kernels` (`without_event_tracking`). Fails
/// clearly when this binary was built without that backend.
pub fn parse_device_for(spec: &str, kernels: GpuKernels) -> Result<Device, ModelError> {
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
            let device = Device::new_cuda(ordinal)
                .map_err(|e| unavailable(&format!("GPU {ordinal}"), "cuda", e))?;
            if kernels.hyoka() {
                without_event_tracking(&device);
            }
            Ok(device)
        }
        other => Err(ModelError::Device {
            spec: other.into(),
            message: "expected cpu, cuda, cuda:N or metal".into(),
        }),
    }
}

/// cudarc, under candle, creates two CUDA events with every allocation and destroys them with
/// it, for ordering memory shared between streams. They order nothing here: candle opens one
/// stream and cudarc uses the events only once a second is opened. Without them a decoding
/// step (hundreds of small allocations) is faster and steadier: on an H100 an 8B Q4_K_M
/// decodes one sequence at 94.6–95.2 tok/s without them, 80.6–90.1 with them. Prefill is the
/// same either way. `--gpu-kernels candle` leaves them on.
fn without_event_tracking(device: &Device) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        // SAFETY: called before any tensor exists on the device; hyoka opens no stream besides
        // candle's, so no memory is shared between streams.
        unsafe { d.disable_event_tracking() }
    }
    let _ = device;
}

/// `f32`, `bf16` or `f16`. The default (`None`) depends on the device: f32 on the CPU (its GEMMs
/// are fast and exact in f32); bf16 on NVIDIA GPUs of compute capability 8.0 or more (Ampere
/// on), whose bf16 kernels candle builds; f16 on 7.5 (T4: candle has no bf16 kernels for it) and on Apple GPUs (bf16 needs Metal 3.1). Softmax, norm statistics and
/// masks are f32 in every dtype.
pub fn parse_dtype(spec: Option<&str>, device: &Device) -> Result<DType, ModelError> {
    match spec {
        None => Ok(default_dtype(device)),
        Some("f32") => Ok(DType::F32),
        Some("bf16") => Ok(DType::BF16),
        Some("f16") => Ok(DType::F16),
        Some(other) => Err(ModelError::Dtype {
            spec: other.into(),
            message: "must be f32, bf16 or f16".into(),
        }),
    }
}

/// The dtype `parse_dtype` picks when none is asked for.
pub fn default_dtype(device: &Device) -> DType {
    match device.location() {
        candle_core::DeviceLocation::Cpu => DType::F32,
        candle_core::DeviceLocation::Metal { .. } => DType::F16,
        candle_core::DeviceLocation::Cuda { .. } => match compute_capability(device) {
            Some((major, _)) if major < 8 => DType::F16,
            _ => DType::BF16,
        },
    }
}

/// (major, minor) compute capability of a CUDA device; None elsewhere.
pub fn compute_capability(device: &Device) -> Option<(i32, i32)> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        use candle_core::cuda_backend::cudarc::driver::{result, sys::CUdevice_attribute as A};
        let cu = d.cuda_stream().context().cu_device();
        // Safety: `cu` is the device of a live context (held by `d`); reading an attribute
        // has no other precondition. candle reads the same attributes the same way.
        let get = |a| unsafe { result::device::get_attribute(cu, a) }.ok();
        return Some((
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ));
    }
    let _ = device;
    None
}

/// The device as the logs and `--help` describe it: `cuda:0 (compute capability 8.9)`.
pub fn describe_device(device: &Device) -> String {
    match compute_capability(device) {
        Some((major, minor)) => format!(
            "{} (compute capability {major}.{minor})",
            device_name(device)
        ),
        None => device_name(device),
    }
}

/// `--tf32`: f32 GEMMs on NVIDIA GPUs may run on TF32 tensor cores (inputs rounded to 10-bit
/// mantissas, f32 accumulation). Process-wide, as candle's switch is. Refused elsewhere.
pub fn set_tf32(device: &Device, on: bool) -> Result<(), ModelError> {
    #[cfg(feature = "cuda")]
    if device.is_cuda() {
        candle_core::cuda_backend::set_gemm_reduced_precision_f32(on);
        return Ok(());
    }
    if on {
        return Err(ModelError::Device {
            spec: device_name(device),
            message: "--tf32 applies to NVIDIA GPUs (--device cuda) only".into(),
        });
    }
    Ok(())
}

/// Whether f32 GEMMs may use TF32 (`set_tf32`), for the provenance.
pub fn tf32() -> bool {
    #[cfg(feature = "cuda")]
    {
        candle_core::cuda_backend::gemm_reduced_precision_f32()
    }
    #[cfg(not(feature = "cuda"))]
    false
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
