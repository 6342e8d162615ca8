//! A CPU f32 tensor's contiguous data, borrowed by a kernel that reads it in place (the fused
//! encoder blocks, the prefill products, prefill attention).

use candle_core::{CpuStorage, Result, Storage, StorageRef, Tensor, bail};

/// A CPU f32 tensor's contiguous data (a weight the op holds, or an operand), borrowed for the
/// op's duration.
pub(crate) struct Data<'a> {
    storage: StorageRef<'a>,
    range: std::ops::Range<usize>,
}

impl<'a> Data<'a> {
    pub(crate) fn of(t: &'a Tensor, op: &str) -> Result<Self> {
        let (storage, layout) = t.storage_and_layout();
        let Some((start, end)) = layout.contiguous_offsets() else {
            bail!("{op}: a tensor is not contiguous")
        };
        if !matches!(&*storage, Storage::Cpu(CpuStorage::F32(_))) {
            bail!("{op}: a tensor is not f32 on the CPU");
        }
        Ok(Data {
            storage,
            range: start..end,
        })
    }

    pub(crate) fn slice(&self) -> &[f32] {
        match &*self.storage {
            Storage::Cpu(CpuStorage::F32(v)) => &v[self.range.clone()],
            _ => unreachable!("checked by Data::of"),
        }
    }
}
