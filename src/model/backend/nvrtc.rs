//! hyoka's CUDA kernels (kernels/*.cu), compiled by NVRTC for the GPU at hand on first use, once
//! per process: candle builds its own kernels with nvcc at build time, but a file of ours would
//! need a build script and nvcc on every machine that builds hyoka.

use candle_core::{CudaDevice, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The PTX of `source` (named `file` in errors) for `dev`'s compute capability.
pub fn ptx(dev: &CudaDevice, file: &'static str, source: &'static str) -> Result<Arc<str>> {
    use candle_core::cuda_backend::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
    type Compiled = std::result::Result<Arc<str>, String>;
    static DONE: Mutex<Option<HashMap<&'static str, Compiled>>> = Mutex::new(None);
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    let compiled = done
        .get_or_insert_with(HashMap::new)
        .entry(file)
        .or_insert_with(|| {
            let (major, minor) = compute_capability(dev);
            let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());
            let opts = CompileOptions {
                arch: Some(arch),
                ..Default::default()
            };
            compile_ptx_with_opts(source, opts)
                .map(|p| Arc::from(p.to_src()))
                .map_err(|e| format!("{e:?}"))
        });
    compiled.clone().map_err(|e| {
        candle_core::Error::Msg(format!(
            "{file}: NVRTC could not compile it for this GPU ({e}); \
             --gpu-kernels candle runs candle's kernels instead"
        ))
    })
}

/// (major, minor) compute capability of `dev` ((8, 0) if the driver does not say).
pub fn compute_capability(dev: &CudaDevice) -> (i32, i32) {
    crate::model::backend::device::compute_capability(&candle_core::Device::Cuda(dev.clone()))
        .unwrap_or((8, 0))
}
