//! Attention of a few queries over a long key/value cache — decoding steps — on the CPU in f32.
//!
//! Through candle, a step's attention is two matmuls per key head (7 queries × 1,600 cached keys
//! for Qwen2.5-0.5B), each packing its operands for the general GEMM: 27% of batch-1 decoding
//! (perf). Here every score is one dot product with a key where it lies in the cache (no copy,
//! no packing) and every output an accumulation of value rows, one task per (row, key head).
//! A task reads each cached key and value once for all the queries of the heads sharing it
//! (7 heads × the step's tokens for Qwen2.5-0.5B), not once per query: a cache of 2,000 keys is
//! 1 MB per key head in f32, the size of the L2 it was re-read from. With AVX-512, tiles of
//! queries × keys, and of queries × value dimensions, stay in registers (`attention_products`):
//! a json step's runs of 9 to 14 tokens come here too (through the general path, each copied
//! the header's keys and values and packed them for the GEMM: 24% of such a step).
//! A row's result depends on its own queries, keys, values and mask only; the order of every
//! sum is fixed, so a sequence gets the same numbers alone or among others.

use super::attention_products::Kernels;
use super::expf_lanes::exp_in_place;
use super::transformer::LayerKv;
use candle_core::{CpuStorage, DType, Layout, Result, Storage, Tensor, bail};
use rayon::prelude::*;

/// Queries per row up to which decoding attention runs here (a step's tokens: one, or a run of
/// forced ones such as json's `",\n  "<key>": `; never a prompt).
pub const FEW_QUERIES: usize = 16;

/// Whether `attend` runs for these queries (n of them per row).
pub fn runs(q: &Tensor, n: usize) -> bool {
    q.device().is_cpu() && q.dtype() == DType::F32 && n <= FEW_QUERIES
}

/// softmax(q·kᵀ·scale, soft-capped, + mask)·v: q (b, heads, n, d); k and v (b, kv_heads, ≥ own
/// keys, d), read over their first `keys − h` (views of a cache are read in place), after the
/// `h` keys and values of `shared` ((1, kv_heads, h, d), read in place by every row: a header
/// that all rows continue); mask (b, 1, n, keys), added to the scores. The heads sharing a key
/// head are consecutive. Returns (b, heads, n, d).
#[allow(clippy::too_many_arguments)]
pub fn attend(
    q: &Tensor,
    shared: Option<&LayerKv>,
    k: &Tensor,
    v: &Tensor,
    mask: &Tensor,
    keys: usize,
    scale: f64,
    softcap: Option<f64>,
) -> Result<Tensor> {
    let (b, heads, n, d) = q.dims4()?;
    let kv_heads = k.dim(1)?;
    let group = heads / kv_heads;
    // Scaled before the product, as the general path does.
    let qs: Vec<f32> = (q * scale)?.flatten_all()?.to_vec1()?;
    let mask: Vec<f32> = mask.flatten_all()?.to_vec1()?;
    if mask.len() != b * n * keys {
        bail!(
            "few-query attention: a mask of {} values for {b}×{n}×{keys}",
            mask.len()
        );
    }
    let kernels = Kernels::for_this_cpu();
    let parts: Vec<Vec<f32>> = with_rows(shared, k, v, keys, d, |keys_of, values_of| {
        (0..b * kv_heads)
            .into_par_iter()
            .map(|task| {
                let (r, kh) = (task / kv_heads, task % kv_heads);
                // The group's queries, in (head, query) order: the rows of this task's output.
                let at = (r * heads + kh * group) * n * d;
                let queries: Vec<&[f32]> = qs[at..at + group * n * d].chunks_exact(d).collect();
                let mask_of = |i: usize| &mask[(r * n + i) * keys..(r * n + i + 1) * keys];
                let mut scores = vec![0f32; group * n * keys];
                // Each key is read once for a tile of the group's queries (it stays in L1 between
                // them); every score is one product of a query and a key, whatever the tile.
                let key_rows: Vec<&[f32]> = keys_of.of(r, kh, keys).collect();
                (kernels.scores)(&queries, &key_rows, &mut scores);
                for (qi, row) in scores.chunks_exact_mut(keys).enumerate() {
                    if let Some(cap) = softcap {
                        let cap = cap as f32;
                        row.iter_mut().for_each(|s| *s = (*s / cap).tanh() * cap);
                    }
                    row.iter_mut()
                        .zip(mask_of(qi % n))
                        .for_each(|(s, m)| *s += m);
                    softmax(row);
                }
                // Values likewise: each output accumulates its values in key order, as alone.
                let mut out = vec![0f32; group * n * d];
                let value_rows: Vec<&[f32]> = values_of.of(r, kh, keys).collect();
                (kernels.mix)(&scores, &value_rows, &mut out);
                out
            })
            .collect()
    })?;
    // parts[r·kv + h] holds heads h·group.. of row r, in (head, query, d) order: concatenated
    // in task order they are (b, heads, n, d).
    let flat: Vec<f32> = parts.into_iter().flatten().collect();
    Tensor::from_vec(flat, (b, heads, n, d), q.device())
}

/// `f` with the first `keys` keys and values of every row (the `h` of `shared` first, then
/// the row's own `keys − h` of k and v), read where they lie.
pub(super) fn with_rows<T>(
    shared: Option<&LayerKv>,
    k: &Tensor,
    v: &Tensor,
    keys: usize,
    d: usize,
    f: impl FnOnce(&Rows, &Rows) -> T,
) -> Result<T> {
    let h = match shared {
        Some((sk, _)) => sk.dim(2)?,
        None => 0,
    };
    if keys < h {
        bail!("attention: {keys} keys, fewer than the {h} shared ones");
    }
    let (ks, kl) = k.storage_and_layout();
    let (vs, vl) = v.storage_and_layout();
    let shared_guards = shared.map(|(sk, sv)| (sk.storage_and_layout(), sv.storage_and_layout()));
    let (shared_k, shared_v) = match &shared_guards {
        Some(((sks, skl), (svs, svl))) => (
            Some(InPlace::new(sks, skl, h)?),
            Some(InPlace::new(svs, svl, h)?),
        ),
        None => (None, None),
    };
    let keys_of = Rows::new(shared_k, InPlace::new(&ks, kl, keys - h)?, h, d);
    let values_of = Rows::new(shared_v, InPlace::new(&vs, vl, keys - h)?, h, d);
    Ok(f(&keys_of, &values_of))
}

/// A (rows, heads, ≥ keys, d) f32 tensor on the CPU, read where it lies.
struct InPlace<'a> {
    data: &'a [f32],
    strides: [usize; 3],
    offset: usize,
}

impl<'a> InPlace<'a> {
    fn new(storage: &'a Storage, layout: &Layout, keys: usize) -> Result<Self> {
        let Storage::Cpu(CpuStorage::F32(data)) = storage else {
            bail!("few-query attention: f32 keys and values on the CPU only")
        };
        let (st, dims) = (layout.stride(), layout.dims());
        if st.len() != 4 || st[3] != 1 || dims[2] < keys {
            bail!("few-query attention: keys and values need unit stride in their last dimension");
        }
        Ok(InPlace {
            data,
            strides: [st[0], st[1], st[2]],
            offset: layout.start_offset(),
        })
    }

    fn row(&self, r: usize, h: usize, j: usize, d: usize) -> &'a [f32] {
        let at = self.offset + r * self.strides[0] + h * self.strides[1] + j * self.strides[2];
        &self.data[at..at + d]
    }
}

/// The keys (or values) a row reads, in order: the shared header's h, then the row's own.
pub(super) struct Rows<'a> {
    shared: Option<InPlace<'a>>,
    own: InPlace<'a>,
    h: usize,
    d: usize,
}

impl<'a> Rows<'a> {
    fn new(shared: Option<InPlace<'a>>, own: InPlace<'a>, h: usize, d: usize) -> Self {
        Rows { shared, own, h, d }
    }

    /// The first `keys` of row r, key head kh: one order, so that sums over them are those
    /// over a cache holding the header's copy before the row's own.
    pub(super) fn of(
        &self,
        r: usize,
        kh: usize,
        keys: usize,
    ) -> impl Iterator<Item = &'a [f32]> + '_ {
        let shared = self
            .shared
            .iter()
            .flat_map(move |s| (0..self.h).map(move |j| s.row(0, kh, j, self.d)));
        let own = (0..keys - self.h).map(move |j| self.own.row(r, kh, j, self.d));
        shared.chain(own)
    }
}

/// Softmax in place: max, e^(x − max) (libm's values, eight at a time: `expf_lanes`), sum,
/// divide. The sum runs in 16 lanes (element i in lane i mod 16; the lanes then added in
/// halves, the tail last): one sum in order was a chain of 2,000 dependent additions per query,
/// 5% of a json step.
fn softmax(xs: &mut [f32]) {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let whole = xs.len() - xs.len() % LANES;
    for chunk in xs[..whole].chunks_exact(LANES) {
        lanes
            .iter_mut()
            .zip(chunk)
            .for_each(|(m, &x)| *m = m.max(x));
    }
    let max = lanes
        .iter()
        .chain(&xs[whole..])
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    xs.iter_mut().for_each(|x| *x -= max);
    exp_in_place(xs);
    let sum = lane_sum(xs);
    xs.iter_mut().for_each(|x| *x /= sum);
}

const LANES: usize = 16;

/// Σ xs: element i into lane i mod 16 in order, the lanes added in halves (8, 4, 2, 1), then
/// the elements after the last whole 16 in order.
fn lane_sum(xs: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let whole = xs.len() - xs.len() % LANES;
    for chunk in xs[..whole].chunks_exact(LANES) {
        lanes.iter_mut().zip(chunk).for_each(|(s, &x)| *s += x);
    }
    let mut width = LANES / 2;
    while width > 0 {
        for i in 0..width {
            lanes[i] += lanes[i + width];
        }
        width /= 2;
    }
    xs[whole..].iter().fold(lanes[0], |s, &x| s + x)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::batch::MASKED;
    use candle_core::{D, Device};

    /// A header read in place before each row's own keys gives the bits of a cache holding
    /// the header's keys copied into every row (how the decoding cache was laid out before).
    #[test]
    fn a_shared_header_reads_as_if_copied_into_every_row() {
        // 24: the AVX2 products; 64, a multiple of 16: the AVX-512 ones where there are.
        for d in [24, 64] {
            shared_header_reads_as_if_copied(d);
        }
    }

    fn shared_header_reads_as_if_copied(d: usize) {
        let dev = Device::Cpu;
        let (b, kv, group, h, own, cap) = (3, 2, 2, 11, 6, 9);
        let heads = kv * group;
        let hk = Tensor::randn(0f32, 1.0, (1, kv, h, d), &dev).unwrap();
        let hv = Tensor::randn(0f32, 1.0, (1, kv, h, d), &dev).unwrap();
        let cache_k = Tensor::randn(0f32, 1.0, (b, kv, cap, d), &dev).unwrap();
        let cache_v = Tensor::randn(0f32, 1.0, (b, kv, cap, d), &dev).unwrap();
        let (k, v) = (
            cache_k.narrow(2, 0, own).unwrap(),
            cache_v.narrow(2, 0, own).unwrap(),
        );
        let copied = |header: &Tensor, rows: &Tensor| {
            let header = header.broadcast_as((b, kv, h, d)).unwrap();
            Tensor::cat(&[&header.contiguous().unwrap(), rows], 2).unwrap()
        };
        let (all_k, all_v) = (copied(&hk, &k), copied(&hv, &v));
        let keys = h + own;
        for n in [1, 3] {
            let q = Tensor::randn(0f32, 1.0, (b, heads, n, d), &dev).unwrap();
            // Row 1 masks two header keys and one of its own.
            let mut m = vec![0f32; b * n * keys];
            for i in 0..n {
                for j in [3, 4, h + 1] {
                    m[(n + i) * keys + j] = MASKED;
                }
            }
            let mask = Tensor::from_vec(m, (b, 1, n, keys), &dev).unwrap();
            let header = (hk.clone(), hv.clone());
            let got = attend(&q, Some(&header), &k, &v, &mask, keys, 0.2, None).unwrap();
            let want = attend(&q, None, &all_k, &all_v, &mask, keys, 0.2, None).unwrap();
            let (got, want) = (
                got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                want.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            );
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            );
        }
    }

    /// The same attention through candle's ops (each query head against its key head's rows
    /// copied out), with keys and values read from a view of a larger cache, masked entries
    /// and a soft cap.
    #[test]
    fn matches_candles_ops_on_cache_views() {
        for (d, group) in [(40, 3), (64, 7), (128, 4)] {
            matches_candles_ops(d, group);
        }
    }

    fn matches_candles_ops(d: usize, group: usize) {
        let dev = Device::Cpu;
        let (b, kv, cap, keys) = (2, 2, 50, 37);
        let heads = kv * group;
        let cache_k = Tensor::randn(0f32, 1.0, (b, kv, cap, d), &dev).unwrap();
        let cache_v = Tensor::randn(0f32, 1.0, (b, kv, cap, d), &dev).unwrap();
        let (k, v) = (
            cache_k.narrow(2, 0, keys + 3).unwrap(),
            cache_v.narrow(2, 0, keys + 3).unwrap(),
        );
        for (n, softcap) in [(1, None), (3, Some(20.0)), (FEW_QUERIES, None)] {
            let q = Tensor::randn(0f32, 1.0, (b, heads, n, d), &dev).unwrap();
            // Row 1 sees only keys 5.. (as a sliding window would), row 0 all of them; in
            // both, query i does not see the step's later keys (causal, as in a forced run).
            let mut m = vec![0f32; b * n * keys];
            for i in 0..n {
                for j in 0..5 {
                    m[(n + i) * keys + j] = MASKED;
                }
                for r in 0..b {
                    for j in keys - (n - 1 - i)..keys {
                        m[(r * n + i) * keys + j] = MASKED;
                    }
                }
            }
            let mask = Tensor::from_vec(m, (b, 1, n, keys), &dev).unwrap();
            let scale = 0.125;
            let got = attend(&q, None, &k, &v, &mask, keys, scale, softcap).unwrap();
            let want = candle_attention(&q, &k, &v, &mask, scale, softcap);
            let diff = max_abs_diff(&got, &want);
            assert!(diff < 1e-5, "d={d}, n={n}: {diff}");
        }
    }

    /// softmax(q·kᵀ·scale, soft-capped, + mask)·v through candle's ops, head by head: q (b,
    /// heads, n, d); k and v (b, kv_heads, ≥ keys, d), the heads sharing a key head
    /// consecutive, read over their first `keys` (the mask's last dimension); mask (b, 1, n,
    /// keys).
    pub(crate) fn candle_attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &Tensor,
        scale: f64,
        softcap: Option<f64>,
    ) -> Tensor {
        let (b, heads, n, d) = q.dims4().unwrap();
        let (group, keys) = (heads / k.dim(1).unwrap(), mask.dim(3).unwrap());
        let mut want = Vec::new();
        for r in 0..b {
            for h in 0..heads {
                let qh = q.get(r).unwrap().get(h).unwrap();
                let own = |t: &Tensor| {
                    let t = t.get(r).unwrap().get(h / group).unwrap();
                    t.narrow(0, 0, keys).unwrap().contiguous().unwrap()
                };
                let (kh, vh) = (own(k), own(v));
                let mut s = (qh * scale).unwrap().matmul(&kh.t().unwrap()).unwrap();
                if let Some(c) = softcap {
                    s = ((s / c).unwrap().tanh().unwrap() * c).unwrap();
                }
                let s = s
                    .broadcast_add(&mask.get(r).unwrap().get(0).unwrap())
                    .unwrap();
                let p = candle_nn::ops::softmax(&s, D::Minus1).unwrap();
                want.push(p.matmul(&vh).unwrap());
            }
        }
        let want = Tensor::stack(&want, 0).unwrap();
        want.reshape((b, heads, n, d)).unwrap()
    }

    pub(crate) fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        let diff = (a - b).unwrap().abs().unwrap();
        diff.max_all().unwrap().to_scalar().unwrap()
    }

    fn random_rows(rows: usize, d: usize, seed: u64) -> Vec<f32> {
        crate::rng::SplitMix64(seed).symmetric_f32s(rows * d)
    }

    /// The softmax's sum: lanes of every 16th element in order, added in halves, then the
    /// tail; a sum of one element, of fewer than 16, of a multiple of 16.
    #[test]
    fn the_lane_sum_adds_in_its_order() {
        for len in [1, 7, 16, 37, 2000] {
            let xs = random_rows(1, len, len as u64);
            let mut lanes = [0f32; 16];
            let whole = len / 16 * 16;
            for (i, &x) in xs[..whole].iter().enumerate() {
                lanes[i % 16] += x;
            }
            let l8: Vec<f32> = (0..8).map(|i| lanes[i] + lanes[i + 8]).collect();
            let l4: Vec<f32> = (0..4).map(|i| l8[i] + l8[i + 4]).collect();
            let l2: Vec<f32> = (0..2).map(|i| l4[i] + l4[i + 2]).collect();
            let mut want = l2[0] + l2[1];
            for &x in &xs[whole..] {
                want += x;
            }
            assert_eq!(lane_sum(&xs).to_bits(), want.to_bits(), "{len} values");
            let exact: f64 = xs.iter().map(|&x| x as f64).sum();
            assert!((lane_sum(&xs) as f64 - exact).abs() < 1e-3, "{len} values");
        }
    }
}
