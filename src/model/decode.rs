//! Many sequences decoded at once, each row keeping its keys and values in one preallocated
//! cache that every step writes into in place.
//!
//! Token-by-token decoding through `Transformer::extend` concatenates the whole past with each
//! new token (every layer's keys and values copied per token: O(T²)) and runs one sequence per
//! forward pass (every weight read once per token per sequence). Here a step feeds every row
//! its next tokens together: the weights are read once per step, and the past is only read.
//!
//! All rows write a step at the same slots; a row feeding fewer tokens than the longest fills
//! the rest with dead slots, which attention never shows to a live query (`Batch::after_slots`).
//! A row may also feed branches after its tokens (the judge's probes of multi-token scores):
//! they see the row, are read once, and are dead from the next step on.

use super::batch::{Batch, Row, RowKeys};
use super::matrix::Products;
use super::transformer::{LayerKv, PrefixKv, Transformer};
use candle_core::{Result, Tensor};

/// The keys and values of `rows` sequences, and what attention needs to know of each slot.
pub struct KvCache {
    /// Per layer: (rows, kv_heads, capacity, head_dim), the model's dtype.
    layers: Vec<LayerKv>,
    capacity: usize,
    /// Slots written so far (the same for every row).
    slots: usize,
    /// Per row, per slot (rows × capacity): the slot's position and segment.
    positions: Vec<f32>,
    segments: Vec<f32>,
    /// Per row: the position its next token takes.
    next: Vec<usize>,
}

impl KvCache {
    /// `rows` sequences that all continue `header` (its keys copied into every row once), with
    /// room for `capacity` slots after it; the cache grows when a step needs more.
    pub fn new(
        model: &Transformer,
        rows: usize,
        header: Option<&PrefixKv>,
        capacity: usize,
    ) -> Result<Self> {
        let h = header.map_or(0, |p| p.len);
        let capacity = h + capacity.max(1);
        let mut cache = KvCache {
            layers: Vec::new(),
            capacity,
            slots: h,
            positions: vec![0.0; rows * capacity],
            segments: vec![0.0; rows * capacity],
            next: vec![h; rows],
        };
        cache.layers = (0..model.cfg.num_layers())
            .map(|_| cache.empty_layer(model, rows))
            .collect::<Result<_>>()?;
        if let Some(header) = header {
            for ((ck, cv), (hk, hv)) in cache.layers.iter().zip(&header.layers) {
                let (_, kv, _, d) = hk.dims4()?;
                ck.slice_set(&hk.broadcast_as((rows, kv, h, d))?.contiguous()?, 2, 0)?;
                cv.slice_set(&hv.broadcast_as((rows, kv, h, d))?.contiguous()?, 2, 0)?;
            }
            for r in 0..rows {
                for s in 0..h {
                    cache.positions[r * capacity + s] = s as f32;
                }
            }
        }
        Ok(cache)
    }

    fn empty_layer(&self, model: &Transformer, rows: usize) -> Result<LayerKv> {
        let c = &model.cfg;
        let shape = (rows, c.num_kv_heads, self.capacity, c.head_dim);
        let zeros = || Tensor::zeros(shape, model.dtype(), model.device());
        Ok((zeros()?, zeros()?))
    }

    pub fn rows(&self) -> usize {
        self.next.len()
    }

    /// Keep only the rows `keep` (in that order): finished sequences stop costing work.
    pub fn retain(&mut self, keep: &[usize]) -> Result<()> {
        if keep.len() == self.rows() && keep.iter().enumerate().all(|(i, &r)| i == r) {
            return Ok(());
        }
        let device = self.layers.first().map(|(k, _)| k.device().clone());
        if let Some(device) = device {
            let idx = Tensor::from_vec(
                keep.iter().map(|&r| r as u32).collect::<Vec<_>>(),
                keep.len(),
                &device,
            )?;
            for (k, v) in &mut self.layers {
                *k = k.index_select(&idx, 0)?;
                *v = v.index_select(&idx, 0)?;
            }
        }
        let c = self.capacity;
        let pick = |from: &[f32]| -> Vec<f32> {
            keep.iter()
                .flat_map(|&r| from[r * c..(r + 1) * c].iter().copied())
                .collect()
        };
        self.positions = pick(&self.positions);
        self.segments = pick(&self.segments);
        self.next = keep.iter().map(|&r| self.next[r]).collect();
        Ok(())
    }

    /// Room for `more` slots after those written: at least double the capacity when it grows,
    /// so that growing costs O(1) copies per slot over a run.
    fn reserve(&mut self, model: &Transformer, more: usize) -> Result<()> {
        let need = self.slots + more;
        if need <= self.capacity {
            return Ok(());
        }
        let old = self.capacity;
        self.capacity = need.max(2 * old);
        let rows = self.rows();
        let bigger: Vec<LayerKv> = (0..self.layers.len())
            .map(|_| self.empty_layer(model, rows))
            .collect::<Result<_>>()?;
        for ((bk, bv), (k, v)) in bigger.iter().zip(&self.layers) {
            bk.slice_set(k, 2, 0)?;
            bv.slice_set(v, 2, 0)?;
        }
        self.layers = bigger;
        let widen = |from: &[f32]| -> Vec<f32> {
            let mut out = vec![0.0; rows * self.capacity];
            for r in 0..rows {
                out[r * self.capacity..][..old].copy_from_slice(&from[r * old..][..old]);
            }
            out
        };
        self.positions = widen(&self.positions);
        self.segments = widen(&self.segments);
        Ok(())
    }
}

impl Transformer {
    /// One step of every row of `cache`: row r continues with `rows[r]` (its trunk kept, its
    /// branches read and then dropped; an empty row only pads). Returns the hidden states
    /// (rows, len, hidden) in `residual_dtype`: read them with `decode_logits` at
    /// `Row::trunk_end()` and at each branch's last token.
    pub fn step(&self, cache: &mut KvCache, rows: &[Row], products: Products) -> Result<Tensor> {
        assert_eq!(rows.len(), cache.rows(), "one row per cached sequence");
        let len = rows.iter().map(Row::len).max().unwrap_or(0).max(1);
        cache.reserve(self, len)?;
        let batch = Batch::after_slots(
            rows,
            &cache.next,
            RowKeys {
                positions: &cache.positions,
                segments: &cache.segments,
                slots: cache.slots,
                stride: cache.capacity,
            },
            self.device(),
        )?
        .with_products(products);
        let hidden = self.forward_cached(&batch, &cache.layers)?;
        let c = cache.capacity;
        for (r, slots) in Batch::slots_after(rows, &cache.next)
            .into_iter()
            .enumerate()
        {
            for (j, (p, s)) in slots.into_iter().enumerate() {
                cache.positions[r * c + cache.slots + j] = p;
                cache.segments[r * c + cache.slots + j] = s;
            }
            cache.next[r] += rows[r].trunk.len();
        }
        cache.slots += len;
        Ok(hidden)
    }
}
