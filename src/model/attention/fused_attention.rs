//! Attention of a prompt in one pass per query: scores, mask, softmax and values fused, the
//! scores never written out. On CUDA, attention of `transformer::FUSED_FROM_QUERIES` queries a
//! row or more (prefill) runs here unless --gpu-kernels candle: on an H200 the unfused path —
//! scores materialised in blocks of 256 queries through candle's ops — takes 82 ms of an 8B's
//! 130 ms prefill of a 1,643-token prompt, and stored prefill runs 1.5× faster through this op.
//! Decoding a token at a time it is slower (37 against 98 tok/s: one query in a block of 64),
//! hence the threshold.
//!
//! An op with two bodies, as candle-nn's norms: the CUDA one is `kernels/attention.cu` (bf16,
//! compiled at run time by NVRTC): on tensor cores (`mma.sync`, FlashAttention-2's layout) for
//! head dims that are multiples of 16 on compute capability 8.0 and later, one warp per query
//! otherwise; the CPU one is the one-warp kernel's arithmetic in Rust — keys in tiles of 32,
//! FlashAttention's online softmax in f32, the mask computed from every key's position and
//! segment. `tests/suite/fused_attention.rs` holds either body to attention computed in f64 from its
//! definition (on a GPU at real judges' shapes too); `runtime_parity` runs the models through it.
//!
//! A prefix every row continues (a judge's header) is read from its one copy, and each row's own
//! keys where they lie (a decoding cache's rows, strided): without copying either for every row
//! and layer, as the unfused path does. (Rows that continue caches of different lengths can go
//! in one call, `row_span`: json mode's decoding steps measure slower this way, 0.91 against
//! 0.96 items/s, and do not call it.
//! Decoding steps on a GPU go through `decode_attention`, a kernel made for a few queries.)

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor, bail};

#[cfg(feature = "cuda")]
const ATTENTION_CU: &str = include_str!("../../../kernels/attention.cu");

/// Keys per tile: the kernel's warp width.
const TILE: usize = 32;
/// What the unfused path adds to a score its query does not see (`batch::MASKED`).
const MASKED: f32 = f32::MIN;

/// softmax(q·kᵀ·scale + mask)·v for q (rows, heads, len, d) contiguous and the keys and values
/// of `shared` ((1, kv_heads, h, d) contiguous: a prefix every row continues, one copy)
/// followed by k, v (rows, kv_heads, own, d), read where they lie (keys d apart, rows and heads
/// at any stride: a decoding cache's rows), where the queries are the last `len` of
/// `prefix + len = h + own` keys; `positions`: `key_pos` and `key_seg` (rows, ≥ keys) f32 give every key's
/// position and segment (`Batch`). Keys after the last query of a block of 8 queries are left
/// out (masked for all of them).
pub struct FusedAttention {
    /// (key_pos, key_seg); None: every row is one sequence whose positions are its key indices.
    pub positions: Option<(Tensor, Tensor)>,
    /// (rows, 2) u32: each row's own prefix and number of queries (≤ len; its padding
    /// queries' outputs are zero), for rows of a decoding step that continue caches of
    /// different lengths, all in one call. Only with `positions` None; `prefix` is then unused.
    pub row_span: Option<Tensor>,
    pub shared: Option<(Tensor, Tensor)>,
    pub prefix: usize,
    pub window: Option<usize>,
    pub scale: f32,
    pub softcap: Option<f32>,
}

/// Queries per CUDA block, whose last query bounds the keys the block reads: the one-warp-per-
/// query kernel's and the tensor-core kernel's (16 queries a warp, 4 warps). The keys one reads
/// and the other does not are masked for every query that could read them, so both give the
/// CPU body's result.
const QUERY_BLOCK: usize = 8;
#[cfg(feature = "cuda")]
const MMA_QUERY_BLOCK: usize = 64;

impl FusedAttention {
    /// The op on q, k and v as they are: k and v read where they lie when their keys are d
    /// apart and they are laid out alike (a decoding cache's rows), copied otherwise.
    pub fn apply(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let in_place = |t: &Tensor| strides(t.layout()).is_some_and(|s| s[2..] == [t.dims()[3], 1]);
        let alike = strides(k.layout()) == strides(v.layout());
        let (k, v) = match in_place(k) && in_place(v) && alike {
            true => (k.clone(), v.clone()),
            false => (k.contiguous()?, v.contiguous()?),
        };
        q.contiguous()?.apply_op3_no_bwd(&k, &v, self)
    }

    fn shared_len(&self) -> Result<usize> {
        Ok(match &self.shared {
            Some((k, _)) => k.dim(2)?,
            None => 0,
        })
    }

    fn dims(&self, ql: &Layout, kl: &Layout, vl: &Layout) -> Result<Dims> {
        let (rows, heads, len, d) = ql.shape().dims4()?;
        let (krows, kv_heads, own, kd) = kl.shape().dims4()?;
        let (pos_rows, pos_stride) = match &self.positions {
            Some((p, _)) => p.dims2()?,
            None => (rows, 0),
        };
        let shared_len = self.shared_len()?;
        let keys = shared_len + own;
        if let Some((sk, sv)) = &self.shared {
            if sk.dims() != [1, kv_heads, shared_len, d] || sv.dims() != sk.dims() {
                bail!(
                    "fused attention: shared keys {:?}, values {:?}",
                    sk.dims(),
                    sv.dims()
                )
            }
            if !(sk.is_contiguous() && sv.is_contiguous()) {
                bail!("fused attention: the shared keys and values must be contiguous")
            }
        }
        if krows != rows || kd != d || vl.shape() != kl.shape() || heads % kv_heads.max(1) != 0 {
            bail!(
                "fused attention: q {:?}, k {:?}, v {:?}",
                ql.shape(),
                kl.shape(),
                vl.shape()
            )
        }
        let spans_ok = match &self.row_span {
            Some(span) => self.positions.is_none() && span.dims() == [rows, 2],
            None => keys == self.prefix + len,
        };
        let positions_ok = self.positions.is_none() || (pos_rows == rows && pos_stride >= keys);
        if !(spans_ok && positions_ok) {
            bail!(
                "fused attention: {keys} keys for prefix {} + {len} queries, positions {pos_rows}×{pos_stride}",
                self.prefix
            )
        }
        let (ks, vs) = (strides(kl), strides(vl));
        let in_place = ks.is_some_and(|s| s[2..] == [d, 1]) && ks == vs;
        if !(ql.is_contiguous() && in_place) {
            bail!(
                "fused attention: q contiguous, k and v with keys d apart, alike expected: q {:?}, k {:?}, v {:?}",
                ql.stride(),
                kl.stride(),
                vl.stride()
            )
        }
        Ok(Dims {
            rows,
            heads,
            kv_heads,
            len,
            keys,
            d,
            pos_stride,
            shared_len,
            row_stride: ks.map_or(0, |s| s[0]),
            head_stride: ks.map_or(0, |s| s[1]),
        })
    }
}

#[derive(Clone, Copy)]
struct Dims {
    rows: usize,
    heads: usize,
    kv_heads: usize,
    len: usize,
    keys: usize,
    d: usize,
    pos_stride: usize,
    shared_len: usize,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    row_stride: usize,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    head_stride: usize,
}

impl CustomOp3 for FusedAttention {
    fn name(&self) -> &'static str {
        "fused-attention"
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
        // Every tensor in logical order (k and v: (rows, kv_heads, own, d)).
        let f32s = |s: &CpuStorage, l: &Layout| -> Result<Vec<f32>> {
            Ok(match s {
                CpuStorage::F32(x) => indices(l)?.map(|i| x[i]).collect(),
                CpuStorage::BF16(x) => indices(l)?.map(|i| x[i].to_f32()).collect(),
                CpuStorage::F16(x) => indices(l)?.map(|i| x[i].to_f32()).collect(),
                _ => bail!("fused attention: f32, bf16 or f16 expected"),
            })
        };
        let (q, k, v) = (f32s(qs, ql)?, f32s(ks, kl)?, f32s(vs, vl)?);
        let shared = |t: &Tensor| -> Result<Vec<f32>> {
            t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
        };
        let (sk, sv) = match &self.shared {
            Some((k, v)) => (shared(k)?, shared(v)?),
            None => (Vec::new(), Vec::new()),
        };
        let (h, own) = (n.shared_len, n.keys - n.shared_len);
        let positions = match &self.positions {
            Some((p, s)) => Some((
                p.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
                s.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
            )),
            None => None,
        };
        let span = match &self.row_span {
            Some(t) => Some(t.flatten_all()?.to_vec1::<u32>()?),
            None => None,
        };
        let mut out = vec![0f32; q.len()];
        let products = fma::Products::for_this_cpu();
        let group = n.heads / n.kv_heads;
        for row in 0..n.rows {
            // A key's position and segment (none given: its index, segment 0).
            let place_of = |key: usize| match &positions {
                Some((p, s)) => (p[row * n.pos_stride + key], s[row * n.pos_stride + key]),
                None => (key as f32, 0.0),
            };
            let (first, queries) = match &span {
                Some(sp) => (sp[2 * row] as usize, sp[2 * row + 1] as usize),
                None => (self.prefix, n.len),
            };
            for head in 0..n.heads {
                let kvh = head / group;
                let (shared_at, own_at) = (kvh * h * n.d, (row * n.kv_heads + kvh) * own * n.d);
                let place = KeyPlace {
                    h,
                    keys: n.keys,
                    d: n.d,
                    shared_at,
                    own_at,
                };
                let (krows, vrows) = (place.rows(&k, &sk), place.rows(&v, &sv));
                for query in 0..queries.min(n.len) {
                    let at = ((row * n.heads + head) * n.len + query) * n.d;
                    let last = (queries.min((query / QUERY_BLOCK + 1) * QUERY_BLOCK)) - 1;
                    let key_end = n.keys.min(first + last + 1);
                    let qv: Vec<f32> = q[at..at + n.d].iter().map(|x| x * self.scale).collect();
                    let (pq, sq) = place_of(first + query);
                    let (mut m, mut l, mut o) = (f32::NEG_INFINITY, 0f32, vec![0f32; n.d]);
                    for start in (0..key_end).step_by(TILE) {
                        let s: Vec<f32> = (start..(start + TILE).min(key_end))
                            .map(|key| {
                                let kr = krows[key];
                                let mut s = (products.dot)(&qv, kr);
                                if let Some(cap) = self.softcap {
                                    s = (s / cap).tanh() * cap;
                                }
                                let (pk, sk) = place_of(key);
                                let behind = pk - pq;
                                let seen = behind <= 0.0
                                    && self.window.is_none_or(|w| behind > -(w as f32))
                                    && sk * (sk - sq) == 0.0;
                                if seen { s } else { s + MASKED }
                            })
                            .collect();
                        let m_new = s.iter().fold(m, |a, &x| a.max(x));
                        let alpha = (m - m_new).exp();
                        let p: Vec<f32> = s.iter().map(|x| (x - m_new).exp()).collect();
                        l = l * alpha + p.iter().sum::<f32>();
                        o.iter_mut().for_each(|x| *x *= alpha);
                        for (j, pj) in p.iter().enumerate() {
                            let vr = vrows[start + j];
                            (products.axpy)(*pj, vr, &mut o);
                        }
                        m = m_new;
                    }
                    out[at..at + n.d]
                        .iter_mut()
                        .zip(&o)
                        .for_each(|(dst, x)| *dst = x / l);
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
        use candle_core::Storage;
        use candle_core::backend::BackendStorage;
        use candle_core::cuda_backend::WrapErr;
        use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
        let n = self.dims(ql, kl, vl)?;
        if !cuda_takes(qs.dtype(), n.d) {
            bail!("fused attention on CUDA: bf16 and head dims 8, 16, 32, 64, 128, 256 only")
        }
        let dev = qs.device();
        fn bf16s<'a>(
            s: &'a candle_core::CudaStorage,
            l: &Layout,
        ) -> Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, half::bf16>> {
            Ok(s.as_cuda_slice::<half::bf16>()?.slice(l.start_offset()..))
        }
        let (q, k, v) = (bf16s(qs, ql)?, bf16s(ks, kl)?, bf16s(vs, vl)?);
        let pos_guards = (self.positions.as_ref())
            .map(|(p, s)| (p.storage_and_layout(), s.storage_and_layout()));
        let positions = match &pos_guards {
            Some(((pos_st, pos_l), (seg_st, seg_l))) => {
                let (Storage::Cuda(pos_st), Storage::Cuda(seg_st)) = (&**pos_st, &**seg_st) else {
                    bail!("fused attention: positions not on the GPU")
                };
                if !(pos_l.is_contiguous() && seg_l.is_contiguous()) {
                    bail!("fused attention: positions must be contiguous")
                }
                Some((
                    pos_st.as_cuda_slice::<f32>()?.slice(pos_l.start_offset()..),
                    seg_st.as_cuda_slice::<f32>()?.slice(seg_l.start_offset()..),
                ))
            }
            None => None,
        };
        let span_guard = self.row_span.as_ref().map(|t| t.storage_and_layout());
        let span = match &span_guard {
            Some((st, l)) => {
                let Storage::Cuda(st) = &**st else {
                    bail!("fused attention: row spans not on the GPU")
                };
                if !l.is_contiguous() {
                    bail!("fused attention: row spans must be contiguous")
                }
                Some(st.as_cuda_slice::<u32>()?.slice(l.start_offset()..))
            }
            None => None,
        };
        // An absent array is a null pointer.
        let null = 0u64;
        let shared_st = (self.shared.as_ref())
            .map(|(sk, sv)| (sk.storage_and_layout(), sv.storage_and_layout()));
        let (sk, sv, shared_even) = match &shared_st {
            Some(((sk_st, sk_l), (sv_st, sv_l))) => {
                let (Storage::Cuda(a), Storage::Cuda(b)) = (&**sk_st, &**sv_st) else {
                    bail!("fused attention: shared keys not on the GPU")
                };
                let even = sk_l.start_offset() % 2 == 0 && sv_l.start_offset() % 2 == 0;
                (bf16s(a, sk_l)?, bf16s(b, sv_l)?, even)
            }
            // Never read (no shared keys): any bf16 buffer.
            None => (bf16s(qs, ql)?, bf16s(qs, ql)?, true),
        };
        let ptx = crate::model::backend::nvrtc::ptx(dev, "kernels/attention.cu", ATTENTION_CU)?;
        let tensor_cores = crate::model::backend::nvrtc::compute_capability(dev).0 >= 8;
        // The tensor-core kernel reads 32-bit words: every operand starts at an even element.
        let aligned = [ql, kl, vl].iter().all(|l| l.start_offset() % 2 == 0) && shared_even;
        let mma = tensor_cores && n.d % 16 == 0 && aligned;
        let (name, queries, threads) = match mma {
            true => ("attention_mma_bf16_d", MMA_QUERY_BLOCK, 128),
            false => ("attention_bf16_d", QUERY_BLOCK, 32 * QUERY_BLOCK as u32),
        };
        let func =
            dev.get_or_load_custom_func(&format!("{name}{}", n.d), "hyoka_attention", &ptx)?;
        // SAFETY: every element is written by the kernel (each real query's row).
        let out = unsafe { dev.alloc::<half::bf16>(n.rows * n.heads * n.len * n.d)? };
        let cfg = LaunchConfig {
            grid_dim: (
                n.len.div_ceil(queries) as u32,
                n.heads as u32,
                n.rows as u32,
            ),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let ints = [
            n.heads,
            n.kv_heads,
            n.len,
            n.keys,
            self.prefix,
            n.pos_stride,
            self.window.unwrap_or(0),
            n.shared_len,
        ]
        .map(|x| x as i32);
        let strides = [n.row_stride, n.head_stride].map(|x| x as i64);
        let (scale, softcap) = (self.scale, self.softcap.unwrap_or(0.0));
        let mut b = func.builder();
        b.arg(&q);
        b.arg(&k);
        b.arg(&v);
        b.arg(&sk);
        b.arg(&sv);
        match &positions {
            Some((pos, seg)) => {
                b.arg(pos);
                b.arg(seg);
            }
            None => {
                b.arg(&null);
                b.arg(&null);
            }
        }
        b.arg(&out);
        for x in &ints {
            b.arg(x);
        }
        for x in &strides {
            b.arg(x);
        }
        match &span {
            Some(span) => b.arg(span),
            None => b.arg(&null),
        };
        b.arg(&scale);
        b.arg(&softcap);
        // SAFETY: the arguments match the kernel's signature; the sizes were checked above.
        unsafe { b.launch(cfg) }.w()?;
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out, dev.clone()),
            ql.shape().clone(),
        ))
    }
}

/// A 4-dimensional layout's strides as they matter: a dimension of one element may have any
/// stride (candle counts such a tensor contiguous and does not copy it), so its own is taken
/// as what a contiguous tensor's would be.
fn strides(l: &Layout) -> Option<[usize; 4]> {
    let (dims, st) = (l.dims(), l.stride());
    if dims.len() != 4 {
        return None;
    }
    let mut out = [0; 4];
    let mut dense = 1;
    for i in (0..4).rev() {
        out[i] = if dims[i] == 1 { dense } else { st[i] };
        dense = out[i] * dims[i];
    }
    Some(out)
}

/// A 4-dimensional layout's elements in logical order.
fn indices(l: &Layout) -> Result<impl Iterator<Item = usize> + '_> {
    let (a, b, c, e) = l.shape().dims4()?;
    let st = l.stride();
    Ok((0..a * b * c * e).map(move |i| {
        let (i3, i2, i1, i0) = (i % e, i / e % c, i / (e * c) % b, i / (e * c * b));
        l.start_offset() + i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3]
    }))
}

/// Where a (row, kv head)'s keys lie in the CPU body's copies: the shared prefix's `h` at
/// `shared_at` of the shared copy, then the row's own at `own_at` of its copy, `d` values each.
struct KeyPlace {
    h: usize,
    keys: usize,
    d: usize,
    shared_at: usize,
    own_at: usize,
}

impl KeyPlace {
    fn rows<'t>(&self, own: &'t [f32], shared: &'t [f32]) -> Vec<&'t [f32]> {
        (0..self.keys)
            .map(|key| match key < self.h {
                true => &shared[self.shared_at + key * self.d..][..self.d],
                false => &own[self.own_at + (key - self.h) * self.d..][..self.d],
            })
            .collect()
    }
}

/// f32 values as a CPU storage of `like`'s dtype (f32, bf16, else f16): an op's output in its
/// input's dtype.
pub(crate) fn cpu_storage_like(like: &CpuStorage, out: Vec<f32>) -> CpuStorage {
    match like {
        CpuStorage::F32(_) => CpuStorage::F32(out),
        CpuStorage::BF16(_) => {
            CpuStorage::BF16(out.iter().map(|&x| half::bf16::from_f32(x)).collect())
        }
        _ => CpuStorage::F16(out.iter().map(|&x| half::f16::from_f32(x)).collect()),
    }
}

/// Whether the CUDA body takes this dtype and head dim.
pub fn cuda_takes(dtype: DType, head_dim: usize) -> bool {
    dtype == DType::BF16 && matches!(head_dim, 8 | 16 | 32 | 64 | 128 | 256)
}

/// The CPU body's fused multiply-adds (the CUDA kernel's arithmetic, same order, same bits),
/// as instructions where the CPU has FMA: built for baseline x86-64, `f32::mul_add` is a call
/// into compiler-builtins' software dispatch for every product (20× the time of the loop).
mod fma {
    /// Σ a·b, one fused multiply-add after another from the first.
    pub type Dot = fn(&[f32], &[f32]) -> f32;
    /// o += p·v, each element one fused multiply-add.
    pub type Axpy = fn(f32, &[f32], &mut [f32]);

    /// The two products for this CPU, chosen once per call of the op.
    pub struct Products {
        pub dot: Dot,
        pub axpy: Axpy,
    }

    impl Products {
        pub fn for_this_cpu() -> Self {
            #[cfg(target_arch = "x86_64")]
            if crate::model::backend::cpu::features().avx2_fma {
                // SAFETY: the CPU has FMA, which the functions are compiled for.
                return Products {
                    dot: |a, b| unsafe { dot_fma(a, b) },
                    axpy: |p, v, o| unsafe { axpy_fma(p, v, o) },
                };
            }
            Products {
                dot: dot_any,
                axpy: axpy_any,
            }
        }
    }

    #[inline(always)]
    fn dot_any(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).fold(0f32, |acc, (x, y)| x.mul_add(*y, acc))
    }

    #[inline(always)]
    fn axpy_any(p: f32, v: &[f32], o: &mut [f32]) {
        o.iter_mut()
            .zip(v)
            .for_each(|(x, y)| *x = p.mul_add(*y, *x));
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    fn dot_fma(a: &[f32], b: &[f32]) -> f32 {
        dot_any(a, b)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    fn axpy_fma(p: f32, v: &[f32], o: &mut [f32]) {
        axpy_any(p, v, o)
    }
}
