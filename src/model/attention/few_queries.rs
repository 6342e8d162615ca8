//! Attention of a few queries over a long key/value cache — decoding steps — on the CPU in f32.
//!
//! Through candle, a step's attention is two matmuls per key head (7 queries × 1,600 cached keys
//! for Qwen2.5-0.5B), each packing its operands for the general GEMM: 27% of batch-1 decoding
//! (perf). Here every score is one dot product with a key where it lies in the cache (no copy,
//! no packing) and every output an accumulation of value rows, one task per key head (and run
//! of rows). A task reads each cached key and value once for all the queries of the heads
//! sharing it (7 heads × the step's tokens for Qwen2.5-0.5B), not once per query: a cache of
//! 2,000 keys is 1 MB per key head in f32, the size of the L2 it would be re-read from; and the
//! header's once for all the rows of a step (`attend_sequences`). With AVX-512, tiles of
//! queries × keys, and of queries × value dimensions, stay in registers (`attention_products`):
//! a json step's runs of 9 to 14 tokens come here too (through the general path, each copied
//! the header's keys and values and packed them for the GEMM: 24% of such a step).
//! A row's result depends on its own queries, keys, values and mask only; the order of every
//! sum is fixed, so a sequence gets the same numbers alone or among others.

use crate::model::attention::attention_products::Kernels;
use crate::model::attention::expf_lanes::exp_in_place;
use crate::model::attention::plan::{LayerKv, ScoreScaling};
use candle_core::{CpuStorage, DType, Layout, Result, Storage, Tensor, bail};
use rayon::prelude::*;

/// Queries per row up to which decoding attention runs here (a step's tokens: one, or a run of
/// forced ones such as json's `",\n  "<key>": `; never a prompt).
pub const FEW_QUERIES: usize = 16;

/// Whether `attend` runs for these queries (n of them per row).
pub fn takes(q: &Tensor, n: usize) -> bool {
    q.device().is_cpu() && q.dtype() == DType::F32 && n <= FEW_QUERIES
}

/// softmax(q·kᵀ·scale, soft-capped, + mask)·v: q (b, heads, n, d); k and v (b, kv_heads, ≥ own
/// keys, d), read over their first `keys − h` (views of a cache are read in place), after the
/// `h` keys and values of `shared` ((1, kv_heads, h, d), read in place by every row: a header
/// that all rows continue); mask (b, 1, n, keys), added to the scores. The heads sharing a key
/// head are consecutive. Returns (b, heads, n, d). The rows are `attend_sequences`' sequences.
pub fn attend(
    q: &Tensor,
    shared: Option<&LayerKv>,
    k: &Tensor,
    v: &Tensor,
    mask: &Tensor,
    keys: usize,
    scaling: ScoreScaling,
) -> Result<Tensor> {
    let b = q.dim(0)?;
    let row = |t: &Tensor, r: usize| t.narrow(0, r, 1);
    let rows = (0..b)
        .map(|r| Ok((row(q, r)?, row(k, r)?, row(v, r)?, row(mask, r)?)))
        .collect::<Result<Vec<_>>>()?;
    let sequences: Vec<Sequence> = rows
        .iter()
        .map(|(q, k, v, mask)| Sequence {
            q,
            k,
            v,
            mask,
            keys,
        })
        .collect();
    let mut outs = attend_sequences(shared, &sequences, scaling)?;
    match outs.len() {
        0 => Tensor::zeros(q.shape(), DType::F32, q.device()),
        1 => Ok(outs.remove(0)),
        _ => Tensor::cat(&outs, 0),
    }
}

/// One sequence's few queries over its keys: q (1, heads, n, d); k and v (1, kv_heads, ≥ keys
/// − h, d), read over their first `keys − h` after the header's h; mask (1, 1, n, keys).
pub struct Sequence<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub mask: &'a Tensor,
    pub keys: usize,
}

/// `attend` of several sequences that continue one header (`shared`), each with its own
/// queries, keys, values and mask: a decoding step's rows. Each task takes one key head and a
/// run of sequences, and reads the header's keys and values once for all their queries (the
/// scores of a key with all of them, then every query's mix of a value): a json step of 16 rows
/// over a judge prompt read the header 16 times, 423 MB each time for an 8B (f32, 1,615 keys),
/// more than the step's weights. A sequence's numbers are those it gets alone: every score is
/// one product of a query and a key, whatever the tile; each query's softmax runs over its
/// header's scores then its own, as one row; each output is one chain of multiply-adds over the
/// values in key order (the mix over the header's values is continued over the sequence's own).
/// Returns each sequence's (1, heads, n, d).
pub fn attend_sequences(
    shared: Option<&LayerKv>,
    sequences: &[Sequence],
    scaling: ScoreScaling,
) -> Result<Vec<Tensor>> {
    let ScoreScaling { scale, softcap } = scaling;
    let Some(first) = sequences.first() else {
        return Ok(Vec::new());
    };
    let (_, heads, _, d) = first.q.dims4()?;
    let kv_heads = first.k.dim(1)?;
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        bail!("few-query attention: {heads} query heads for {kv_heads} key heads");
    }
    let group = heads / kv_heads;
    let h = match shared {
        Some((sk, _)) => sk.dim(2)?,
        None => 0,
    };
    // Queries scaled before the product, as the general path does.
    let inputs = sequences
        .iter()
        .map(|s| {
            let (one, sh, n, sd) = s.q.dims4()?;
            if one != 1 || sh != heads || sd != d || s.k.dim(1)? != kv_heads || s.keys < h + n {
                bail!(
                    "few-query attention: q {:?} with {kv_heads} key heads, {} keys, {h} shared",
                    s.q.dims(),
                    s.keys
                );
            }
            let qs: Vec<f32> = (s.q * scale)?.flatten_all()?.to_vec1()?;
            let mask: Vec<f32> = s.mask.flatten_all()?.to_vec1()?;
            if mask.len() != n * s.keys {
                bail!(
                    "few-query attention: a mask of {} values for {n}×{}",
                    mask.len(),
                    s.keys
                );
            }
            Ok(Prepared {
                qs,
                mask,
                n,
                own: s.keys - h,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let kernels = Kernels::for_this_cpu();
    // Runs of sequences per key head: enough tasks for the threads, each run reading the
    // header once.
    let runs = rayon::current_num_threads()
        .div_ceil(kv_heads)
        .clamp(1, sequences.len());
    let spans: Vec<std::ops::Range<usize>> = (0..runs)
        .map(|i| i * sequences.len() / runs..(i + 1) * sequences.len() / runs)
        .collect();
    let own: Vec<(&Tensor, &Tensor, usize)> = (sequences.iter().zip(&inputs))
        .map(|(s, p)| (s.k, s.v, p.own))
        .collect();
    let parts: Vec<Vec<f32>> = with_sequences(shared, &own, d, |keys_of, values_of| {
        let tasks: Vec<(usize, std::ops::Range<usize>)> = (0..kv_heads)
            .flat_map(|kh| spans.iter().map(move |span| (kh, span.clone())))
            .collect();
        tasks
            .into_par_iter()
            .map(|(kh, span)| {
                let task = HeadTask {
                    kernels: &kernels,
                    inputs: &inputs[span.clone()],
                    keys_of: &keys_of[span.clone()],
                    values_of: &values_of[span],
                    kh,
                    group,
                    d,
                    h,
                    softcap,
                };
                task.run()
            })
            .collect()
    })?;
    // parts[kh·runs + i] holds, sequence after sequence of span i, heads kh·group.. in (head,
    // query, d) order: taken per key head in order they are each sequence's (heads, n, d).
    let mut outs: Vec<Vec<f32>> = inputs
        .iter()
        .map(|p| Vec::with_capacity(heads * p.n * d))
        .collect();
    for (t, part) in parts.iter().enumerate() {
        let span = spans[t % runs].clone();
        let mut at = 0;
        for s in span {
            let len = group * inputs[s].n * d;
            outs[s].extend_from_slice(&part[at..at + len]);
            at += len;
        }
    }
    outs.into_iter()
        .zip(&inputs)
        .map(|(out, p)| Tensor::from_vec(out, (1, heads, p.n, d), first.q.device()))
        .collect()
}

/// A sequence's queries scaled, (heads, n, d); its mask, (n, h + own); its own keys' count.
struct Prepared {
    qs: Vec<f32>,
    mask: Vec<f32>,
    n: usize,
    own: usize,
}

/// One key head's attention for a run of sequences: their queries (the heads of the group,
/// each sequence's in (head, query) order, one sequence after another).
struct HeadTask<'t, 'a> {
    kernels: &'t Kernels,
    inputs: &'t [Prepared],
    keys_of: &'t [Rows<'a>],
    values_of: &'t [Rows<'a>],
    kh: usize,
    group: usize,
    d: usize,
    h: usize,
    softcap: Option<f64>,
}

impl HeadTask<'_, '_> {
    fn run(&self) -> Vec<f32> {
        let (d, h) = (self.d, self.h);
        let queries: Vec<&[f32]> = (self.inputs.iter())
            .flat_map(|p| {
                let at = self.kh * self.group * p.n * d;
                p.qs[at..at + self.group * p.n * d].chunks_exact(d)
            })
            .collect();
        // The header's keys are read once for all the queries (they stay in L1 between those
        // of a tile).
        let mut header = vec![0f32; queries.len() * h];
        if let Some(rows) = self.keys_of.first().filter(|_| h > 0) {
            let keys: Vec<&[f32]> = rows.header(self.kh).collect();
            (self.kernels.scores)(&queries, &keys, &mut header);
        }
        let mut own_probs = Vec::with_capacity(self.inputs.len());
        let mut row = Vec::new();
        let mut first = 0;
        for (
            s,
            &Prepared {
                ref mask,
                n,
                own: own_keys,
                ..
            },
        ) in self.inputs.iter().enumerate()
        {
            let count = self.group * n;
            let keys: Vec<&[f32]> = self.keys_of[s].own(0, self.kh, own_keys).collect();
            let mut own = vec![0f32; count * own_keys];
            (self.kernels.scores)(&queries[first..first + count], &keys, &mut own);
            for qi in 0..count {
                let header_row = &mut header[(first + qi) * h..(first + qi + 1) * h];
                let own_row = &mut own[qi * own_keys..(qi + 1) * own_keys];
                row.clear();
                row.extend_from_slice(header_row);
                row.extend_from_slice(own_row);
                if let Some(cap) = self.softcap {
                    let cap = cap as f32;
                    row.iter_mut().for_each(|s| *s = (*s / cap).tanh() * cap);
                }
                let mask_row = &mask[(qi % n) * (h + own_keys)..(qi % n + 1) * (h + own_keys)];
                row.iter_mut().zip(mask_row).for_each(|(s, m)| *s += m);
                softmax(&mut row);
                header_row.copy_from_slice(&row[..h]);
                own_row.copy_from_slice(&row[h..]);
            }
            own_probs.push(own);
            first += count;
        }
        // Values likewise: the header's once for all the queries, then each sequence's own,
        // each output continuing its chain over the keys in order.
        let mut out = vec![0f32; queries.len() * d];
        if let Some(rows) = self.values_of.first().filter(|_| h > 0) {
            let values: Vec<&[f32]> = rows.header(self.kh).collect();
            (self.kernels.mix)(&header, &values, &mut out);
        }
        let mut first = 0;
        for (s, (p, probs)) in self.inputs.iter().zip(&own_probs).enumerate() {
            let count = self.group * p.n;
            let values: Vec<&[f32]> = self.values_of[s].own(0, self.kh, p.own).collect();
            (self.kernels.mix)(probs, &values, &mut out[first * d..(first + count) * d]);
            first += count;
        }
        out
    }
}

/// `f` with the first `keys` keys and values of every row (the `h` of `shared` first, then
/// the row's own `keys − h` of k and v), read where they lie.
pub(crate) fn with_rows<T>(
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
    with_sequences(shared, &[(k, v, keys - h)], d, |ks, vs| f(&ks[0], &vs[0]))
}

/// `f` with the keys and values of sequences (k, v, own): the header's of `shared`, then the
/// first `own` of k's and v's, per sequence, read where they lie.
fn with_sequences<T>(
    shared: Option<&LayerKv>,
    sequences: &[(&Tensor, &Tensor, usize)],
    d: usize,
    f: impl FnOnce(&[Rows], &[Rows]) -> T,
) -> Result<T> {
    let h = match shared {
        Some((sk, _)) => sk.dim(2)?,
        None => 0,
    };
    let shared_guards = shared.map(|(sk, sv)| (sk.storage_and_layout(), sv.storage_and_layout()));
    let (shared_k, shared_v) = match &shared_guards {
        Some(((sks, skl), (svs, svl))) => (
            Some(InPlace::new(sks, skl, h)?),
            Some(InPlace::new(svs, svl, h)?),
        ),
        None => (None, None),
    };
    let guards: Vec<_> = sequences
        .iter()
        .map(|(k, v, _)| (k.storage_and_layout(), v.storage_and_layout()))
        .collect();
    let mut keys_of = Vec::with_capacity(sequences.len());
    let mut values_of = Vec::with_capacity(sequences.len());
    for (((ks, kl), (vs, vl)), &(_, _, own)) in guards.iter().zip(sequences) {
        keys_of.push(Rows::new(shared_k, InPlace::new(ks, kl, own)?, h, d));
        values_of.push(Rows::new(shared_v, InPlace::new(vs, vl, own)?, h, d));
    }
    Ok(f(&keys_of, &values_of))
}

/// A (rows, heads, ≥ keys, d) f32 tensor on the CPU, read where it lies.
#[derive(Clone, Copy)]
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
pub(crate) struct Rows<'a> {
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
    pub(crate) fn of(
        &self,
        r: usize,
        kh: usize,
        keys: usize,
    ) -> impl Iterator<Item = &'a [f32]> + '_ {
        self.header(kh).chain(self.own(r, kh, keys - self.h))
    }

    /// The header's h rows of key head kh (none without a header).
    fn header(&self, kh: usize) -> impl Iterator<Item = &'a [f32]> + '_ {
        self.shared
            .iter()
            .flat_map(move |s| (0..self.h).map(move |j| s.row(0, kh, j, self.d)))
    }

    /// The first `count` of row r's own rows, key head kh.
    fn own(&self, r: usize, kh: usize, count: usize) -> impl Iterator<Item = &'a [f32]> + '_ {
        (0..count).map(move |j| self.own.row(r, kh, j, self.d))
    }
}

/// Softmax in place: max, e^(x − max) (libm's values, eight at a time: `expf_lanes`), sum,
/// divide. The sum runs in 16 lanes (element i in lane i mod 16; the lanes then added in
/// halves, the tail last): one sum in order would be a chain of 2,000 dependent additions per
/// query, 5% of a json step.
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
    use crate::model::attention::plan::MASKED;

    fn scaling(scale: f64, softcap: Option<f64>) -> ScoreScaling {
        ScoreScaling { scale, softcap }
    }
    use candle_core::{D, Device};

    /// A header read in place before each row's own keys gives the bits of a cache holding
    /// the header's keys copied into every row (the plain layout, as reference).
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
            let got = attend(&q, Some(&header), &k, &v, &mask, keys, scaling(0.2, None)).unwrap();
            let want = attend(&q, None, &all_k, &all_v, &mask, keys, scaling(0.2, None)).unwrap();
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

    /// Sequences attended together — one header read once for all, each with its own count of
    /// queries, own keys (views of a larger cache), mask and a soft cap — get the bits each gets
    /// attended alone, and candle's ops on the header's keys followed by its own. Key heads of
    /// one (runs of sequences split over the threads) and of two, head dimensions of the AVX-512
    /// products (64) and of the AVX2 ones (24).
    #[test]
    fn sequences_attended_together_get_their_bits_alone() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (d, kv, group) in [(64, 1, 3), (64, 2, 2), (24, 2, 3)] {
            pool.install(|| sequences_together(d, kv, group));
        }
    }

    fn sequences_together(d: usize, kv: usize, group: usize) {
        let dev = Device::Cpu;
        let (h, heads) = (13, kv * group);
        let hk = Tensor::randn(0f32, 1.0, (1, kv, h, d), &dev).unwrap();
        let hv = Tensor::randn(0f32, 1.0, (1, kv, h, d), &dev).unwrap();
        let header = (hk.clone(), hv.clone());
        // (queries, own keys) of five sequences.
        let shapes = [(1, 1), (3, 9), (1, 20), (FEW_QUERIES, 17), (2, 2)];
        let mut inputs = Vec::new();
        for (i, &(n, own)) in shapes.iter().enumerate() {
            let q = Tensor::randn(0f32, 1.0, (1, heads, n, d), &dev).unwrap();
            let cache = || Tensor::randn(0f32, 1.0, (1, kv, own + 4, d), &dev).unwrap();
            let (k, v) = (cache(), cache());
            let keys = h + own;
            // Causal over the sequence's own queries; sequence 1 also masks two header keys.
            let mut m = vec![0f32; n * keys];
            for qi in 0..n {
                for j in keys - (n - 1 - qi)..keys {
                    m[qi * keys + j] = MASKED;
                }
                if i == 1 {
                    m[qi * keys + 2] = MASKED;
                    m[qi * keys + 7] = MASKED;
                }
            }
            let mask = Tensor::from_vec(m, (1, 1, n, keys), &dev).unwrap();
            inputs.push((q, k, v, mask, keys));
        }
        let sequences: Vec<Sequence> = (inputs.iter())
            .map(|(q, k, v, mask, keys)| Sequence {
                q,
                k,
                v,
                mask,
                keys: *keys,
            })
            .collect();
        let bits = |t: &Tensor| -> Vec<u32> {
            let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            v.iter().map(|x| x.to_bits()).collect()
        };
        for softcap in [None, Some(5.0)] {
            let together =
                attend_sequences(Some(&header), &sequences, scaling(0.3, softcap)).unwrap();
            for (s, (got, (q, k, v, mask, keys))) in together.iter().zip(&inputs).enumerate() {
                let alone =
                    attend_sequences(Some(&header), &sequences[s..s + 1], scaling(0.3, softcap))
                        .unwrap();
                assert_eq!(bits(got), bits(&alone[0]), "d={d} kv={kv}: sequence {s}");
                let own = keys - h;
                let all = |head: &Tensor, t: &Tensor| {
                    Tensor::cat(&[head, &t.narrow(2, 0, own).unwrap()], 2).unwrap()
                };
                let want = candle_attention(q, &all(&hk, k), &all(&hv, v), mask, 0.3, softcap);
                let diff = max_abs_diff(got, &want);
                assert!(diff < 1e-5, "d={d} kv={kv}: sequence {s}: {diff}");
            }
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
            let got = attend(&q, None, &k, &v, &mask, keys, scaling(scale, softcap)).unwrap();
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
