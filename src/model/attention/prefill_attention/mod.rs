//! Attention of a prompt's many queries (prefill) on the CPU in f32, with AVX-512.
//!
//! Through candle, prefill attention copied the shared header's keys and values before every
//! row's own, multiplied queries and keys with the general GEMM (inner dimension 64: packing
//! its operands cost about as much as the product), swept the scores in separate passes
//! (mask, softmax) over blocks that left L2, and multiplied again: 2.8 s of a 16-item json run
//! on Qwen2.5-0.5B (timed), about a third of two cores' FMA peak. Here: 1.8 s, then less with
//! the exponential below.
//!
//! One task takes a (row, key head) and a few queries of every head that shares that key
//! head (40 to 64 query rows): their scores against the keys up to the last one those queries
//! can see, from key panels laid out once per (row, key head) — the shared header's once per key
//! head — so that one register holds one dimension of 16 keys (no sums across lanes); then
//! mask, softmax (Cephes' expf, within two ulps of libm's) and the mix of the values, while the
//! scores are in L2; the mix is normalised at the end (d divisions per query, not one per
//! key). Keys and values are read where they lie (a header shared by every row, a decoding
//! cache).
//!
//! A row's numbers depend on its own queries, keys, values and mask only, and not on how far
//! a block reaches: every score is one chain over the head dimension; a masked key adds an
//! exact zero to the softmax's sum (element j in lane j mod 16, for every j) and to the mix
//! (y = fma(0, v, y) = y). So a sequence gets the same bits alone or padded among others
//! (tested), as `few_queries` gives decoding steps.

use crate::model::attention::few_queries::{FEW_QUERIES, Rows, with_rows};
use crate::model::attention::plan::{AttentionPlan, LayerKv, ScoreScaling};
use crate::model::backend::cpu_tensor::Data;
use candle_core::{CpuStorage, DType, Result, Storage, Tensor, bail};
use rayon::prelude::*;
use std::ops::Range;

/// Keys per panel: one AVX-512 register of f32.
const LANES: usize = 16;

/// Tasks whose outputs are held at once before they are copied into place.
const TASKS_AT_ONCE: usize = 256;

/// Whether `attend` runs for these queries (n of them per row): f32 on a CPU with AVX-512,
/// head dimension a multiple of 64, more queries than `few_queries` takes.
pub fn takes(q: &Tensor, n: usize) -> bool {
    let d = q.dims().last().copied().unwrap_or(0);
    q.device().is_cpu()
        && q.dtype() == DType::F32
        && n > FEW_QUERIES
        && d.is_multiple_of(64)
        && avx512_available()
}

fn avx512_available() -> bool {
    crate::model::backend::cpu::avx512()
}

/// The attention of `Transformer::attend`: q (b, heads, len, d), after the `prefix` keys
/// (the `h` of `shared`, then the rest of k and v's own), each row's own; `mask(rows,
/// queries, keys)` the (rows, 1, queries, keys) additive mask of a block of `plan`. Returns
/// (b, heads, len, d). Call only where `takes`.
pub fn attend(
    q: &Tensor,
    shared: Option<&LayerKv>,
    (k, v): (&Tensor, &Tensor),
    prefix: usize,
    plan: &AttentionPlan,
    mut mask: impl FnMut(Range<usize>, Range<usize>, usize) -> Result<Tensor>,
    scaling: ScoreScaling,
) -> Result<Tensor> {
    let ScoreScaling { scale, softcap } = scaling;
    let (b, heads, len, d) = q.dims4()?;
    let kv_heads = k.dim(1)?;
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        bail!("prefill attention: {heads} query heads for {kv_heads} key heads");
    }
    let shape = Shape {
        heads,
        group: heads / kv_heads,
        len,
        d,
        prefix,
    };
    // Read in place, each task scaling its own queries (a copy of q scaled, and the tensor
    // the scaling makes, would be two (rows, heads, queries, d) temporaries: 170 MB at 4,096
    // tokens of a 13B).
    let q = q.contiguous()?;
    let q_data = Data::of(&q, "prefill attention")?;
    let qs = q_data.slice();
    let keys = prefix + len;
    let mut out = vec![0f32; b * heads * len * d];
    // The header's whole panels are the same for every row: laid out once per key head (a
    // batch of ten 13B rows after a 1,500-key header held ten copies, 0.3 GB a layer).
    let header = shared.map_or(0, |_| prefix / LANES * LANES);
    with_rows(shared, k, v, keys, d, |keys_of, values_of| -> Result<()> {
        let header_panels: Vec<Vec<f32>> = (0..kv_heads)
            .into_par_iter()
            .map(|kh| panels(keys_of.of(0, kh, keys).take(header), header, d))
            .collect();
        let own_panels: Vec<Vec<f32>> = (0..b * kv_heads)
            .into_par_iter()
            .map(|task| {
                let (r, kh) = (task / kv_heads, task % kv_heads);
                panels(keys_of.of(r, kh, keys).skip(header), keys - header, d)
            })
            .collect();
        for rows in plan.row_chunks() {
            for queries in plan.query_blocks() {
                let block_keys = prefix + queries.end;
                let m = mask(rows.clone(), queries.clone(), block_keys)?;
                let (storage, layout) = m.storage_and_layout();
                let Storage::Cpu(CpuStorage::F32(data)) = &*storage else {
                    bail!("prefill attention: an f32 mask on the CPU only")
                };
                let at = layout.start_offset();
                let count = rows.len() * queries.len() * block_keys;
                if !layout.is_contiguous() || layout.shape().elem_count() != count {
                    bail!("prefill attention: a contiguous mask of {count} values expected");
                }
                let block = Block {
                    rows: rows.clone(),
                    queries: queries.clone(),
                    keys: block_keys,
                    mask: &data[at..at + count],
                };
                let sub = sub_block(shape.group);
                let tasks: Vec<(usize, usize, usize)> = rows
                    .clone()
                    .flat_map(|r| (0..kv_heads).map(move |kh| (r, kh)))
                    .flat_map(|(r, kh)| queries.clone().step_by(sub).map(move |s0| (r, kh, s0)))
                    .collect();
                // A bounded number of tasks' outputs at a time before they are copied into
                // place (all of a block's at once would be another copy of the output).
                for tasks in tasks.chunks(TASKS_AT_ONCE) {
                    let parts: Vec<Vec<f32>> = tasks
                        .par_iter()
                        .map(|&(r, kh, s0)| {
                            let s = s0..(s0 + sub).min(block.queries.end);
                            let panel = Panels {
                                header: header_panels.get(kh).map_or(&[], |p| p.as_slice()),
                                own: &own_panels[r * kv_heads + kh],
                                d,
                            };
                            let scaling = (scale, softcap);
                            shape.task(qs, panel, values_of, &block, (r, kh), s, scaling)
                        })
                        .collect();
                    for (&(r, kh, s0), part) in tasks.iter().zip(parts) {
                        let sn = sub.min(block.queries.end - s0);
                        for (i, row) in part.chunks_exact(d).enumerate() {
                            let (g, qi) = (i / sn, s0 + i % sn);
                            let at = ((r * heads + kh * shape.group + g) * len + qi) * d;
                            out[at..at + d].copy_from_slice(row);
                        }
                    }
                }
            }
        }
        Ok(())
    })??;
    Tensor::from_vec(out, (b, heads, len, d), q.device())
}

/// Queries per task: with the heads sharing a key head, 40 to 64 query rows for groups of up
/// to 8 heads (a multiple of 8, the score tiles' height), so that each key panel read from L2
/// serves five to eight tiles while the task's scores stay in L2.
fn sub_block(group: usize) -> usize {
    8 * (8 / group).max(1)
}

struct Shape {
    heads: usize,
    group: usize,
    len: usize,
    d: usize,
    prefix: usize,
}

/// A block of the plan: its rows, queries, the keys they may see, and its mask.
struct Block<'a> {
    rows: Range<usize>,
    queries: Range<usize>,
    keys: usize,
    mask: &'a [f32],
}

impl Shape {
    /// Row r's queries `s` of every head sharing key head kh, in (head, query) order: their
    /// attention outputs, one row of d each.
    #[allow(clippy::too_many_arguments)]
    fn task(
        &self,
        qs: &[f32],
        panel: Panels,
        values_of: &Rows,
        block: &Block,
        (r, kh): (usize, usize),
        s: Range<usize>,
        (scale, softcap): (f64, Option<f64>),
    ) -> Vec<f32> {
        let (d, len) = (self.d, self.len);
        // Keys after the last query of `s` are masked for all of them: never computed.
        let seen = self.prefix + s.end;
        let stride = seen.next_multiple_of(LANES);
        // Scaled before the product as candle's path scales them (`q * scale`: its affine
        // map, v · scale + 0 in f32).
        let (mul, add) = (scale as f32, 0f32);
        let scaled: Vec<f32> = (0..self.group)
            .flat_map(|g| {
                let head = r * self.heads + kh * self.group + g;
                s.clone().map(move |i| (head * len + i) * d)
            })
            .flat_map(|at| qs[at..at + d].iter().map(|&v| v * mul + add))
            .collect();
        let queries: Vec<&[f32]> = scaled.chunks_exact(d).collect();
        let mut scores = vec![0f32; queries.len() * stride];
        let mut sums = Vec::with_capacity(queries.len());
        let mut out = vec![0f32; queries.len() * d];
        let values: Vec<&[f32]> = values_of.of(r, kh, seen).collect();
        let nq = block.queries.len();
        // SAFETY (every call below): `takes` detected the features before `attend` was called.
        unsafe {
            avx512::scores(panel, &queries, &mut scores, stride);
            for (i, row) in scores.chunks_exact_mut(stride).enumerate() {
                let qi = s.start + i % s.len();
                let at = ((r - block.rows.start) * nq + qi - block.queries.start) * block.keys;
                if let Some(cap) = softcap {
                    let cap = cap as f32;
                    row[..seen]
                        .iter_mut()
                        .for_each(|s| *s = (*s / cap).tanh() * cap);
                }
                let max = avx512::mask_max(row, &block.mask[at..at + seen]);
                avx512::exp_below(row, max);
                sums.push(avx512::lane_sum(row));
            }
            avx512::mix(&scores, stride, &values, &mut out);
        }
        // Normalised after the mix: d divisions per query instead of one per key.
        for (row, sum) in out.chunks_exact_mut(d).zip(sums) {
            row.iter_mut().for_each(|x| *x /= sum);
        }
        out
    }
}

/// A (row, key head)'s key panels: the header's whole panels (shared by every row), then the
/// row's from there on, the first of which may begin with the header's last keys.
#[derive(Clone, Copy)]
struct Panels<'a> {
    header: &'a [f32],
    own: &'a [f32],
    d: usize,
}

impl<'a> Panels<'a> {
    fn count(&self) -> usize {
        (self.header.len() + self.own.len()) / (self.d * LANES)
    }

    /// Panel c: 16 keys' d dimensions.
    fn panel(&self, c: usize) -> &'a [f32] {
        let size = self.d * LANES;
        let in_header = self.header.len() / size;
        let (from, c) = match c.checked_sub(in_header) {
            None => (self.header, c),
            Some(c) => (self.own, c),
        };
        &from[c * size..(c + 1) * size]
    }
}

/// The first `count` keys in panels of 16: dimension t of key 16c + l at `[(c·d + t)·16 + l]`,
/// zeros after the last key.
fn panels<'a>(keys: impl Iterator<Item = &'a [f32]>, count: usize, d: usize) -> Vec<f32> {
    let mut panels = vec![0f32; count.next_multiple_of(LANES) * d];
    for (j, key) in keys.enumerate() {
        let (c, l) = (j / LANES, j % LANES);
        let panel = &mut panels[c * d * LANES..(c + 1) * d * LANES];
        for (t, &x) in key.iter().enumerate() {
            panel[t * LANES + l] = x;
        }
    }
    panels
}

#[cfg(target_arch = "x86_64")]
// Register tiles are indexed by query and by panel together; iterators would hide that.
#[allow(clippy::needless_range_loop)]
mod avx512 {
    use super::{LANES, Panels};
    use std::arch::x86_64::*;

    /// Query rows × panels per tile: 24 accumulators, 8 broadcasts and 3 loads for every 24
    /// multiply-adds.
    const QR: usize = 8;
    const PC: usize = 3;

    /// `scores[i·stride + j] = queries[i] · key j` for the keys of the first `stride / 16`
    /// panels: each score one chain of fused multiply-adds over the dimensions in order, from
    /// zero, whatever its tile.
    #[target_feature(enable = "avx512f")]
    pub fn scores(panels: Panels, queries: &[&[f32]], scores: &mut [f32], stride: usize) {
        let (m, chunks, d) = (queries.len(), stride / LANES, panels.d);
        assert!(stride.is_multiple_of(LANES) && scores.len() >= m * stride);
        assert!(panels.count() >= chunks && queries.iter().all(|q| q.len() == d));
        if m == 0 {
            return;
        }
        for c0 in (0..chunks).step_by(PC) {
            let cs = (chunks - c0).min(PC);
            // A tile past the last panel or query repeats the last one; its sums are dropped.
            let p: [*const f32; PC] =
                std::array::from_fn(|x| panels.panel(c0 + x.min(cs - 1)).as_ptr());
            for q0 in (0..m).step_by(QR) {
                let qn = (m - q0).min(QR);
                let q: [*const f32; QR] =
                    std::array::from_fn(|i| queries[q0 + i.min(qn - 1)].as_ptr());
                let mut acc = [[_mm512_setzero_ps(); PC]; QR];
                for t in 0..d {
                    // SAFETY: t < d: within panel c0 + x (d·16 values, asserted) and within
                    // every query row (d values).
                    let pv: [__m512; PC] =
                        std::array::from_fn(|x| unsafe { _mm512_loadu_ps(p[x].add(t * LANES)) });
                    for i in 0..QR {
                        let qv = _mm512_set1_ps(unsafe { *q[i].add(t) });
                        for x in 0..PC {
                            acc[i][x] = _mm512_fmadd_ps(qv, pv[x], acc[i][x]);
                        }
                    }
                }
                for i in 0..qn {
                    for x in 0..cs {
                        let at = (q0 + i) * stride + (c0 + x) * LANES;
                        // SAFETY: at + 16 ≤ m·stride ≤ scores.len() (asserted).
                        unsafe { _mm512_storeu_ps(scores[at..].as_mut_ptr(), acc[i][x]) };
                    }
                }
            }
        }
    }

    /// `row[j] += mask[j]` for the keys seen (`mask.len()` of them), −∞ after them; returns
    /// the row's largest value.
    #[target_feature(enable = "avx512f")]
    pub fn mask_max(row: &mut [f32], mask: &[f32]) -> f32 {
        let seen = mask.len();
        assert!(row.len().is_multiple_of(LANES) && seen <= row.len());
        let mut max = _mm512_set1_ps(f32::NEG_INFINITY);
        for c in (0..row.len()).step_by(LANES) {
            let p = row[c..].as_mut_ptr();
            // Lanes of the chunk that are seen keys.
            let keep: __mmask16 = match seen.saturating_sub(c) {
                n if n >= LANES => !0,
                n => (1u32 << n) as u16 - 1,
            };
            // SAFETY: c + 16 ≤ row.len(); the mask is read only in lanes c + l < seen.
            let x = unsafe {
                let m = _mm512_maskz_loadu_ps(keep, mask.as_ptr().wrapping_add(c));
                let x = _mm512_add_ps(_mm512_loadu_ps(p), m);
                _mm512_mask_blend_ps(keep, _mm512_set1_ps(f32::NEG_INFINITY), x)
            };
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(p, x) };
            max = _mm512_max_ps(max, x);
        }
        _mm512_reduce_max_ps(max)
    }

    /// The lowest x − max whose e^x `exp_below` computes; below it, 0.
    pub const LOWEST: f32 = -87.0;

    /// `row[j] = e^(row[j] − max)` for every j: Cephes' expf (range reduction by ln 2 in two
    /// parts, a degree-7 polynomial, then × 2ⁿ), within two ulps of libm's for the arguments
    /// a softmax has (≤ 0) down to −87, and exactly 0 below (masked keys, −∞): e^x leaves f32's
    /// normal numbers at −87.3, and each subnormal result cost the CPU a microcode assist —
    /// 72% of this function's samples in an 8B's prefill (perf), 4% of the run.
    /// A probability under 1.7e-38 beside the row's largest (1) changes neither the sum nor
    /// the mix. libm's own values eight at a time (`expf_lanes`) would cost 2% of a json run.
    #[target_feature(enable = "avx512f")]
    pub fn exp_below(row: &mut [f32], max: f32) {
        assert!(row.len().is_multiple_of(LANES));
        let m = _mm512_set1_ps(max);
        // From −87 up every result is a normal number (e^−87 = 1.6e-38 > 2^−126).
        let (lo, hi) = (_mm512_set1_ps(LOWEST), _mm512_set1_ps(88.0));
        let log2e = _mm512_set1_ps(std::f32::consts::LOG2_E);
        let (c1, c2) = (_mm512_set1_ps(0.693_359_4), _mm512_set1_ps(-2.121_944_4e-4));
        let p = [
            _mm512_set1_ps(1.987_569_1e-4),
            _mm512_set1_ps(1.398_199_9e-3),
            _mm512_set1_ps(8.333_452e-3),
            _mm512_set1_ps(4.166_579_6e-2),
            _mm512_set1_ps(1.666_666_5e-1),
            _mm512_set1_ps(0.5),
        ];
        let one = _mm512_set1_ps(1.0);
        for c in (0..row.len()).step_by(LANES) {
            let ptr = row[c..].as_mut_ptr();
            // SAFETY: c + 16 ≤ row.len().
            let x = unsafe { _mm512_loadu_ps(ptr) };
            let x = _mm512_sub_ps(x, m);
            // Lanes at or above the lowest (false for −∞ − max = −∞ and for NaN); the others
            // are computed from the lowest, then set to 0.
            let normal = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, lo);
            let x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
            let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_mul_ps(x, log2e),
            );
            let r = _mm512_fnmadd_ps(n, c2, _mm512_fnmadd_ps(n, c1, x));
            let mut y = p[0];
            for &coefficient in &p[1..] {
                y = _mm512_fmadd_ps(y, r, coefficient);
            }
            let y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, one));
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(ptr, _mm512_maskz_scalef_ps(normal, y, n)) };
        }
    }

    /// Σ row: element j into lane j mod 16 in order, then the lanes added in halves (8, 4,
    /// 2, 1). Zeros after the last key change nothing.
    #[target_feature(enable = "avx512f")]
    pub fn lane_sum(row: &[f32]) -> f32 {
        assert!(row.len().is_multiple_of(LANES));
        let mut acc = _mm512_setzero_ps();
        for c in (0..row.len()).step_by(LANES) {
            // SAFETY: c + 16 ≤ row.len().
            acc = _mm512_add_ps(acc, unsafe { _mm512_loadu_ps(row[c..].as_ptr()) });
        }
        let mut lanes = [0f32; LANES];
        // SAFETY: 16 values into an array of 16.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
        let mut width = LANES / 2;
        while width > 0 {
            for i in 0..width {
                lanes[i] += lanes[i + width];
            }
            width /= 2;
        }
        lanes[0]
    }

    /// Query rows × dimensions per tile of mixing: 24 accumulators, 4 loads and 6 broadcasts
    /// for every 24 multiply-adds.
    const MR: usize = 6;
    const MD: usize = 64;

    /// `out[i·d + t] = Σ_j probs[i·stride + j] · values[j][t]`, one chain of fused
    /// multiply-adds over the keys in order from zero, whatever the tile; d a multiple of 64.
    #[target_feature(enable = "avx512f")]
    pub fn mix(probs: &[f32], stride: usize, values: &[&[f32]], out: &mut [f32]) {
        let m = probs.len() / stride;
        let d = out.len() / m.max(1);
        assert!(values.len() <= stride && probs.len() == m * stride && out.len() == m * d);
        assert!(d.is_multiple_of(MD) && values.iter().all(|v| v.len() == d));
        for q0 in (0..m).step_by(MR) {
            let qn = (m - q0).min(MR);
            let p: [*const f32; MR] =
                std::array::from_fn(|i| probs[(q0 + i.min(qn - 1)) * stride..].as_ptr());
            for d0 in (0..d).step_by(MD) {
                let mut acc = [[_mm512_setzero_ps(); MD / LANES]; MR];
                for (j, value) in values.iter().enumerate() {
                    // SAFETY: d0 + 64 ≤ d, the length of every value row (asserted).
                    let v: [__m512; MD / LANES] = std::array::from_fn(|c| unsafe {
                        _mm512_loadu_ps(value.as_ptr().add(d0 + c * LANES))
                    });
                    for i in 0..MR {
                        // SAFETY: j < values.len() ≤ stride: within row i's probabilities.
                        let pv = _mm512_set1_ps(unsafe { *p[i].add(j) });
                        for c in 0..MD / LANES {
                            acc[i][c] = _mm512_fmadd_ps(pv, v[c], acc[i][c]);
                        }
                    }
                }
                for i in 0..qn {
                    for c in 0..MD / LANES {
                        let at = (q0 + i) * d + d0 + c * LANES;
                        // SAFETY: at + 16 ≤ m·d = out.len() (asserted).
                        unsafe { _mm512_storeu_ps(out[at..].as_mut_ptr(), acc[i][c]) };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
