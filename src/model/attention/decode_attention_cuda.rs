//! The CUDA bodies of `decode_attention`'s ops: launches of `kernels/decode_attention.cu`.

use crate::model::attention::decode_attention::{
    AppendKeys, DECODE_ATTENTION_CU, DecodeAttention, Dims, WARPS,
};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaDType;
use candle_core::cuda_backend::WrapErr;
use candle_core::cuda_backend::cudarc::driver::{
    CudaView, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use candle_core::{CudaStorage, DType, Layout, Result, Shape, Storage, bail};

fn view<'a, T: CudaDType>(s: &'a CudaStorage, l: &Layout) -> Result<CudaView<'a, T>> {
    Ok(s.as_cuda_slice::<T>()?.slice(l.start_offset()..))
}

/// Views of a pair of tensors' storage (keys and values) held by `g`.
#[allow(clippy::type_complexity)]
fn pair<'a, T: CudaDType, G: std::ops::Deref<Target = Storage>>(
    g: &'a Option<((G, &'a Layout), (G, &'a Layout))>,
) -> Result<Option<(CudaView<'a, T>, CudaView<'a, T>)>> {
    let Some(((a, al), (b, bl))) = g else {
        return Ok(None);
    };
    let (Storage::Cuda(a), Storage::Cuda(b)) = (&**a, &**b) else {
        bail!("decode attention: keys not on the GPU")
    };
    Ok(Some((view::<T>(a, al)?, view::<T>(b, bl)?)))
}

/// The launch in the element type T (bf16, f16 or f32).
#[allow(clippy::too_many_arguments)]
fn launch_typed<T: CudaDType + DeviceRepr + ValidAsZeroBits>(
    op: &DecodeAttention,
    n: Dims,
    name: &str,
    segments: usize,
    (qs, ql): (&CudaStorage, &Layout),
    (ks, kl): (&CudaStorage, &Layout),
    (vs, vl): (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Shape)> {
    let dev = qs.device();
    let (q, k, v) = (view::<T>(qs, ql)?, view::<T>(ks, kl)?, view::<T>(vs, vl)?);
    let header_g =
        (op.header.as_ref()).map(|(a, b)| (a.storage_and_layout(), b.storage_and_layout()));
    let cache_g =
        (op.cache.as_ref()).map(|(a, b)| (a.storage_and_layout(), b.storage_and_layout()));
    let (header, cache) = (pair::<T, _>(&header_g)?, pair::<T, _>(&cache_g)?);
    let (seg_st, seg_l) = op.segments.storage_and_layout();
    let Storage::Cuda(seg_st) = &*seg_st else {
        bail!("decode attention: segments not on the GPU")
    };
    if !seg_l.is_contiguous() {
        bail!("decode attention: segments must be contiguous")
    }
    let segs = view::<u32>(seg_st, seg_l)?;
    let ptx =
        crate::model::backend::nvrtc::ptx(dev, "kernels/decode_attention.cu", DECODE_ATTENTION_CU)?;
    let func = dev.get_or_load_custom_func(
        &format!("decode_attention_{name}_d{}", n.d),
        "hyoka_decode_attention",
        &ptx,
    )?;
    // Zero where no segment has a query (padding), as the per-segment path gives.
    let out = dev.alloc_zeros::<T>(n.rows * n.heads * n.len * n.d)?;
    if segments > 0 && op.queries > 0 {
        let cfg = LaunchConfig {
            grid_dim: (op.queries as u32, n.heads as u32, segments as u32),
            block_dim: (32 * WARPS, 1, 1),
            shared_mem_bytes: 0,
        };
        let c_row = (n.kv_heads * n.slots * n.d) as i64;
        let c_head = (n.slots * n.d) as i64;
        let ints = [n.h, n.heads, n.kv_heads, n.len, op.window.unwrap_or(0)].map(|x| x as i32);
        let (scale, softcap) = (op.scale, op.softcap.unwrap_or(0.0));
        let mut b = func.builder();
        b.arg(&q);
        b.arg(&k);
        b.arg(&v);
        // Absent arrays: any buffer of the type, never read (no key lies there).
        let (ck, cv) = match &cache {
            Some((a, b)) => (a, b),
            None => (&q, &q),
        };
        b.arg(ck);
        b.arg(cv);
        b.arg(&c_row);
        b.arg(&c_head);
        let (hk, hv) = match &header {
            Some((a, b)) => (a, b),
            None => (&q, &q),
        };
        b.arg(hk);
        b.arg(hv);
        b.arg(&ints[0]);
        b.arg(&segs);
        b.arg(&out);
        for x in &ints[1..] {
            b.arg(x);
        }
        b.arg(&scale);
        b.arg(&softcap);
        // SAFETY: arguments as the kernel's signature; every segment was built within the
        // step's and the cache's sizes (`StepSegment`, checked by the CPU body's tests).
        unsafe { b.launch(cfg) }.w()?;
    }
    Ok((
        CudaStorage::wrap_cuda_slice(out, dev.clone()),
        ql.shape().clone(),
    ))
}

impl DecodeAttention {
    /// The op's CUDA body: one launch of the kernel for `name`'s dtype and head width.
    pub(super) fn launch(
        &self,
        n: Dims,
        name: &str,
        segments: usize,
        q: (&CudaStorage, &Layout),
        k: (&CudaStorage, &Layout),
        v: (&CudaStorage, &Layout),
    ) -> Result<(CudaStorage, Shape)> {
        match q.0.dtype() {
            DType::BF16 => launch_typed::<half::bf16>(self, n, name, segments, q, k, v),
            DType::F16 => launch_typed::<half::f16>(self, n, name, segments, q, k, v),
            _ => launch_typed::<f32>(self, n, name, segments, q, k, v),
        }
    }
}

impl AppendKeys {
    /// The op's CUDA body.
    pub(super) fn append(
        &self,
        cache: (&mut CudaStorage, &Layout),
        keys: (&CudaStorage, &Layout),
        table: (&CudaStorage, &Layout),
    ) -> Result<()> {
        append(self.queries, cache, keys, table)
    }
}

fn append(
    queries: usize,
    (cs, cl): (&mut CudaStorage, &Layout),
    (ks, kl): (&CudaStorage, &Layout),
    (ts, tl): (&CudaStorage, &Layout),
) -> Result<()> {
    if ks.dtype() != cs.dtype() {
        bail!(
            "append keys: keys {:?} for a cache {:?}",
            ks.dtype(),
            cs.dtype()
        )
    }
    match cs.dtype() {
        DType::BF16 => append_typed::<half::bf16>(queries, "b16", (cs, cl), (ks, kl), (ts, tl)),
        DType::F16 => append_typed::<half::f16>(queries, "b16", (cs, cl), (ks, kl), (ts, tl)),
        DType::F32 => append_typed::<f32>(queries, "b32", (cs, cl), (ks, kl), (ts, tl)),
        other => bail!("append keys on CUDA: {other:?}"),
    }
}

/// `append` in the element type T; the kernel copies elements of T's size (`size`).
fn append_typed<T: CudaDType + DeviceRepr>(
    queries: usize,
    size: &str,
    (cs, cl): (&mut CudaStorage, &Layout),
    (ks, kl): (&CudaStorage, &Layout),
    (ts, tl): (&CudaStorage, &Layout),
) -> Result<()> {
    let dev = cs.device().clone();
    let (_, kv_heads, slots, d) = cl.shape().dims4()?;
    let len = kl.shape().dims4()?.2;
    let trunks = tl.shape().dims()[0];
    if trunks == 0 || queries == 0 {
        return Ok(());
    }
    let ptx = crate::model::backend::nvrtc::ptx(
        &dev,
        "kernels/decode_attention.cu",
        DECODE_ATTENTION_CU,
    )?;
    let func = dev.get_or_load_custom_func(
        &format!("append_keys_{size}"),
        "hyoka_decode_attention",
        &ptx,
    )?;
    let cfg = LaunchConfig {
        grid_dim: (queries as u32, kv_heads as u32, trunks as u32),
        block_dim: (d.min(128) as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let (c_row, c_head) = ((kv_heads * slots * d) as i64, (slots * d) as i64);
    let ints = [kv_heads, len, d].map(|x| x as i32);
    let table = view::<u32>(ts, tl)?;
    let k = view::<T>(ks, kl)?;
    let mut cache = cs.as_cuda_slice_mut::<T>()?.slice_mut(cl.start_offset()..);
    let mut b = func.builder();
    b.arg(&mut cache);
    b.arg(&c_row);
    b.arg(&c_head);
    b.arg(&k);
    b.arg(&table);
    for x in &ints {
        b.arg(x);
    }
    // SAFETY: arguments as the kernel's signature; the segments lie within the step and the
    // cache (built by `decode` within its capacity, checked by the CPU body's tests).
    unsafe { b.launch(cfg) }.w()?;
    Ok(())
}
