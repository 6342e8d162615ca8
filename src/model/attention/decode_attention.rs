//! Attention of a decoding step on a GPU in one launch for all its rows.
//!
//! Batched decoding (`decode`) attends each segment of a step — a row's trunk, or one of its
//! branches — on its own. Through candle's ops that takes ~20 launches a segment and layer, and a
//! copy of the header's keys and values for each (`after_shared`): with 6 rows of an 8B on an
//! H200 attention takes 61% of a step that way, 3,072 calls in 16 steps. Here the
//! step's trunks are written into the cache by one launch each for keys and values
//! (`append_keys`), and every segment of a few queries attends in one launch
//! (`kernels/decode_attention.cu`) over the keys it sees where they lie: the header (one copy),
//! its row's cache slots, its own keys among the step's. One query is one block, whose warps
//! take the key tiles in turn and are combined in a fixed order: a query's numbers depend on its
//! keys and on nothing else in the step. On an H200 this decodes 12 sequences 1.6× (stored) and
//! 2.1× (expanded) as fast as candle's ops. A warp waiting for each value row in turn made one
//! sequence slower (57 against 98 tok/s): value rows are loaded `VALUE_GROUP` at a time, and a
//! block holds 16 warps.
//!
//! An op with two bodies, as candle-nn's norms: the CPU one (tests; the CPU's decoding runs in
//! `few_queries`) is the same attention computed plainly in f32. `tests/suite/decode_attention.rs`
//! holds both, and the CUDA source run on the CPU through tests/emulation, to attention computed
//! in f64 from its definition.

use crate::model::attention::fused_attention::cpu_storage_like;
use crate::model::attention::plan::LayerKv;
use crate::model::backend::gpu_kernels::GpuKernels;
use candle_core::{CpuStorage, CustomOp3, DType, InplaceOp3, Layout, Result, Shape, Tensor, bail};

#[cfg(feature = "cuda")]
const DECODE_ATTENTION_CU: &str = include_str!("../../../kernels/decode_attention.cu");

/// Queries a segment up to which a step's attention runs here on a GPU (longer ones, a prompt
/// fed in the first step, go through `fused_attention`).
pub const DECODE_QUERIES: usize = 16;

/// The kernel's warps a block (`DECODE_WARPS` of the source).
#[cfg(feature = "cuda")]
const WARPS: u32 = 16;

/// One segment of a step: row `row`'s queries `start .. start + len` of the step, whose past is
/// the header and then `past` slots of the row's cache. As a row of the segment table (u32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepSegment {
    pub row: usize,
    pub start: usize,
    pub len: usize,
    pub past: usize,
}

/// Segments as the kernels read them: (n, 4) u32 on `device`.
pub fn segment_table(segments: &[StepSegment], device: &candle_core::Device) -> Result<Tensor> {
    let flat: Vec<u32> = segments
        .iter()
        .flat_map(|s| [s.row, s.start, s.len, s.past].map(|x| x as u32))
        .collect();
    Tensor::from_vec(flat, (segments.len(), 4), device)
}

/// Whether a step's attention of a model on `device` in `dtype` with heads of `head_dim` runs
/// here: CUDA, a head dim the kernels are built for, hyoka's kernels in use (`GpuKernels`).
pub fn takes_on(
    device: &candle_core::Device,
    dtype: DType,
    head_dim: usize,
    kernels: GpuKernels,
) -> bool {
    device.is_cuda()
        && kernels.hyoka()
        && matches!(dtype, DType::BF16 | DType::F16 | DType::F32)
        && matches!(head_dim, 8 | 16 | 32 | 64 | 128 | 256)
}

/// `takes_on` for the queries q (rows, heads, len, d).
pub fn takes(q: &Tensor, kernels: GpuKernels) -> bool {
    let d = q.dims().last().copied().unwrap_or(0);
    takes_on(q.device(), q.dtype(), d, kernels)
}

/// softmax(q·kᵀ·scale, soft-capped)·v of a step's segments: q (rows, heads, len, d)
/// contiguous; k, v the step's (rows, kv_heads, len, d) contiguous; `segments` ((n, 4) u32, see
/// `StepSegment`, each of at most `queries` queries) on q's device. Query i of a segment is at
/// position h + past + i and sees, within `window` of it, the header's h keys (`header`, (1,
/// kv_heads, h, d) contiguous), its row's first `past` slots of `cache` ((rows, kv_heads, slots,
/// d), keys d apart) and its segment's own keys up to itself. The output is q's shape, zero
/// where no segment has a query.
pub struct DecodeAttention {
    pub header: Option<LayerKv>,
    pub cache: Option<LayerKv>,
    pub segments: Tensor,
    pub queries: usize,
    pub window: Option<usize>,
    pub scale: f32,
    pub softcap: Option<f32>,
}

impl DecodeAttention {
    pub fn apply(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        q.contiguous()?
            .apply_op3_no_bwd(&k.contiguous()?, &v.contiguous()?, self)
    }

    fn dims(&self, ql: &Layout, kl: &Layout, vl: &Layout) -> Result<Dims> {
        let (rows, heads, len, d) = ql.shape().dims4()?;
        let (krows, kv_heads, klen, kd) = kl.shape().dims4()?;
        if krows != rows || klen != len || kd != d || vl.shape() != kl.shape() {
            bail!(
                "decode attention: q {:?}, k {:?}, v {:?}",
                ql.shape(),
                kl.shape(),
                vl.shape()
            )
        }
        if kv_heads == 0 || heads % kv_heads != 0 {
            bail!("decode attention: {heads} heads for {kv_heads} key heads")
        }
        if !(ql.is_contiguous() && kl.is_contiguous() && vl.is_contiguous()) {
            bail!("decode attention: q, k and v must be contiguous")
        }
        let h = match &self.header {
            Some((hk, hv)) => {
                let h = hk.dim(2)?;
                if hk.dims() != [1, kv_heads, h, d] || hv.dims() != hk.dims() {
                    bail!(
                        "decode attention: header {:?} for q {:?}",
                        hk.dims(),
                        ql.dims()
                    )
                }
                if !(hk.is_contiguous() && hv.is_contiguous()) {
                    bail!("decode attention: the header's keys and values must be contiguous")
                }
                h
            }
            None => 0,
        };
        let slots = match &self.cache {
            Some((ck, cv)) => {
                let (crows, ckv, slots, cd) = ck.dims4()?;
                let st = ck.layout().stride();
                if crows != rows || ckv != kv_heads || cd != d || cv.layout() != ck.layout() {
                    bail!(
                        "decode attention: cache {:?} for q {:?}",
                        ck.dims(),
                        ql.dims()
                    )
                }
                if st[3] != 1 || st[2] != d {
                    bail!("decode attention: cache keys must lie d apart ({st:?})")
                }
                slots
            }
            None => 0,
        };
        if self.segments.dtype() != DType::U32 || self.segments.dim(1)? != 4 {
            bail!("decode attention: segments must be (n, 4) u32")
        }
        Ok(Dims {
            rows,
            heads,
            kv_heads,
            len,
            d,
            h,
            slots,
        })
    }
}

#[derive(Clone, Copy)]
struct Dims {
    rows: usize,
    heads: usize,
    kv_heads: usize,
    len: usize,
    d: usize,
    h: usize,
    slots: usize,
}

/// The segment table back on the host, each checked against the step's and cache's sizes.
fn read_segments(table: &Tensor, n: Dims, queries: usize) -> Result<Vec<StepSegment>> {
    let rows = table
        .to_device(&candle_core::Device::Cpu)?
        .to_vec2::<u32>()?;
    rows.into_iter()
        .map(|r| {
            let s = StepSegment {
                row: r[0] as usize,
                start: r[1] as usize,
                len: r[2] as usize,
                past: r[3] as usize,
            };
            if s.row >= n.rows || s.start + s.len > n.len || s.len > queries || s.past > n.slots {
                bail!("decode attention: segment {s:?} outside the step or the cache")
            }
            Ok(s)
        })
        .collect()
}

/// Where key (or value) j of a segment's head lies in the CPU body's copies: the header's,
/// then its row's cache slots, then its own among the step's.
struct KeyPlace<'a> {
    n: Dims,
    s: &'a StepSegment,
    kv: usize,
}

impl KeyPlace<'_> {
    fn row<'t>(&self, step: &'t [f32], header: &'t [f32], cache: &'t [f32], j: usize) -> &'t [f32] {
        let (n, s, kv) = (self.n, self.s, self.kv);
        let at = |x: &'t [f32], i: usize| &x[i * n.d..(i + 1) * n.d];
        if j < n.h {
            at(header, kv * n.h + j)
        } else if j < n.h + s.past {
            at(cache, (s.row * n.kv_heads + kv) * n.slots + j - n.h)
        } else {
            at(
                step,
                (s.row * n.kv_heads + kv) * n.len + s.start + j - n.h - s.past,
            )
        }
    }
}

/// A contiguous tensor's values as f32.
fn f32s(s: &CpuStorage, l: &Layout) -> Result<Vec<f32>> {
    let range = l.start_offset()..l.start_offset() + l.shape().elem_count();
    Ok(match s {
        CpuStorage::F32(x) => x[range].to_vec(),
        CpuStorage::BF16(x) => x[range].iter().map(|v| v.to_f32()).collect(),
        CpuStorage::F16(x) => x[range].iter().map(|v| v.to_f32()).collect(),
        _ => bail!("decode attention: f32, bf16 or f16 expected"),
    })
}

fn tensor_f32s(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
}

impl CustomOp3 for DecodeAttention {
    fn name(&self) -> &'static str {
        "decode-attention"
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let n = self.dims(ql, kl, vl)?;
        let segments = read_segments(&self.segments, n, self.queries)?;
        let (q, k, v) = (f32s(qs, ql)?, f32s(ks, kl)?, f32s(vs, vl)?);
        let (hk, hv) = match &self.header {
            Some((a, b)) => (tensor_f32s(a)?, tensor_f32s(b)?),
            None => (Vec::new(), Vec::new()),
        };
        let (ck, cv) = match &self.cache {
            Some((a, b)) => (tensor_f32s(a)?, tensor_f32s(b)?),
            None => (Vec::new(), Vec::new()),
        };
        let (d, h, group) = (n.d, n.h, n.heads / n.kv_heads);
        let mut out = vec![0f32; q.len()];
        for s in &segments {
            for head in 0..n.heads {
                let kv = head / group;
                let place = KeyPlace { n, s, kv };
                for i in 0..s.len {
                    let at = ((s.row * n.heads + head) * n.len + s.start + i) * d;
                    let last = h + s.past + i;
                    let first = self.window.map_or(0, |w| (last + 1).saturating_sub(w));
                    let scores: Vec<f32> = (first..=last)
                        .map(|j| {
                            let key = place.row(&k, &hk, &ck, j);
                            let x: f32 = (0..d).map(|e| q[at + e] * self.scale * key[e]).sum();
                            self.softcap.map_or(x, |c| (x / c).tanh() * c)
                        })
                        .collect();
                    let top = scores.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                    let p: Vec<f32> = scores.iter().map(|x| (x - top).exp()).collect();
                    let sum: f32 = p.iter().sum();
                    for (j, pj) in (first..=last).zip(&p) {
                        let value = place.row(&v, &hv, &cv, j);
                        for e in 0..d {
                            out[at + e] += pj / sum * value[e];
                        }
                    }
                }
            }
        }
        let shape = ql.shape().clone();
        Ok((cpu_storage_like(qs, out), shape))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        qs: &candle_core::CudaStorage,
        ql: &Layout,
        ks: &candle_core::CudaStorage,
        kl: &Layout,
        vs: &candle_core::CudaStorage,
        vl: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::backend::BackendStorage;
        let n = self.dims(ql, kl, vl)?;
        let name = match qs.dtype() {
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            other => bail!("decode attention on CUDA: {other:?}"),
        };
        if !matches!(n.d, 8 | 16 | 32 | 64 | 128 | 256) {
            bail!("decode attention on CUDA: head dim {}", n.d)
        }
        let segments = self.segments.dim(0)?;
        self.launch(n, name, segments, (qs, ql), (ks, kl), (vs, vl))
    }
}

/// The step's keys (or values) of each trunk into the cache, in place: `cache.inplace_op3(&k,
/// &trunks, &AppendKeys)` with k (rows, kv_heads, len, d) contiguous and `trunks` a segment table
/// (`segment_table`) whose segment (row, start, len, past) writes its tokens to slots past .. of
/// its row (`queries`: the longest).
pub struct AppendKeys {
    pub queries: usize,
}

impl InplaceOp3 for AppendKeys {
    fn name(&self) -> &'static str {
        "append-keys"
    }

    fn cpu_fwd(
        &self,
        cs: &mut CpuStorage,
        cl: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        ts: &CpuStorage,
        tl: &Layout,
    ) -> Result<()> {
        let (rows, kv_heads, slots, d) = cl.shape().dims4()?;
        let len = kl.shape().dims4()?.2;
        check_append(cl, kl, tl, d)?;
        let CpuStorage::U32(table) = ts else {
            bail!("append keys: a u32 segment table expected")
        };
        let table = &table[tl.start_offset()..];
        let (c0, k0) = (cl.start_offset(), kl.start_offset());
        for seg in table.chunks_exact(4).take(tl.shape().dims()[0]) {
            let [row, start, n, past] = [seg[0], seg[1], seg[2], seg[3]].map(|x| x as usize);
            if row >= rows || start + n > len || past + n > slots {
                bail!("append keys: segment {seg:?} outside the step or the cache")
            }
            for kv in 0..kv_heads {
                for i in 0..n {
                    let dst = c0 + ((row * kv_heads + kv) * slots + past + i) * d;
                    let src = k0 + ((row * kv_heads + kv) * len + start + i) * d;
                    match (&mut *cs, ks) {
                        (CpuStorage::F32(c), CpuStorage::F32(k)) => {
                            c[dst..dst + d].copy_from_slice(&k[src..src + d])
                        }
                        (CpuStorage::BF16(c), CpuStorage::BF16(k)) => {
                            c[dst..dst + d].copy_from_slice(&k[src..src + d])
                        }
                        (CpuStorage::F16(c), CpuStorage::F16(k)) => {
                            c[dst..dst + d].copy_from_slice(&k[src..src + d])
                        }
                        _ => bail!("append keys: cache and keys of one float dtype expected"),
                    }
                }
            }
        }
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        cs: &mut candle_core::CudaStorage,
        cl: &Layout,
        ks: &candle_core::CudaStorage,
        kl: &Layout,
        ts: &candle_core::CudaStorage,
        tl: &Layout,
    ) -> Result<()> {
        let d = cl.shape().dims4()?.3;
        check_append(cl, kl, tl, d)?;
        self.append((cs, cl), (ks, kl), (ts, tl))
    }
}

/// The cache contiguous (the step's slots are written at computed offsets), keys and table too.
fn check_append(cl: &Layout, kl: &Layout, tl: &Layout, d: usize) -> Result<()> {
    let (rows, kv_heads, _, cd) = cl.shape().dims4()?;
    let (krows, kkv, _, kd) = kl.shape().dims4()?;
    if (krows, kkv, kd) != (rows, kv_heads, d) || cd != d {
        bail!(
            "append keys: keys {:?} for a cache {:?}",
            kl.shape(),
            cl.shape()
        )
    }
    if !(cl.is_contiguous() && kl.is_contiguous() && tl.is_contiguous()) {
        bail!("append keys: cache, keys and segment table must be contiguous")
    }
    if tl.shape().dims().get(1) != Some(&4) {
        bail!("append keys: segments must be (n, 4)")
    }
    Ok(())
}

#[cfg(feature = "cuda")]
#[path = "decode_attention_cuda.rs"]
mod cuda;
