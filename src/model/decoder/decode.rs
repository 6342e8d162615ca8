//! Many sequences decoded at once, each row keeping its keys and values in one preallocated
//! cache that every step writes into in place.
//!
//! Token-by-token decoding through `Transformer::extend` concatenates the whole past with each
//! new token (every layer's keys and values copied per token: O(T²)) and runs one sequence per
//! forward pass (every weight read once per token per sequence). Here a step feeds every row
//! its next tokens together: the weights are read once per step, and the past is only read.
//!
//! Every row continues one header (the rubric's instructions, most of a judge's prompt), whose
//! keys and values are kept once and read by every row beside its own: a row's token at
//! position p lives in slot p − h of its row (h: the header's length), so a row's past is the
//! header and then the slots before its next token, with nothing of other rows or of padding
//! in between. Attention
//! runs each row's trunk, and each of its branches, on its own over exactly those slots
//! (`Segment`): a row gets the arithmetic it gets when decoded alone, whatever else the batch
//! holds. That matters beyond rounding: the quantized kernels round the activations to 8 bits,
//! so a difference in the last bit (a softmax over padded keys sums in another order) can move
//! an activation by a whole quantization step — measured, one padded row's logits moved by 0.36
//! after two tokens, and judged score distributions by 0.056.

use crate::model::attention::decode_attention;
use crate::model::attention::door::Segments;
use crate::model::attention::plan::LayerKv;
use crate::model::decoder::batch::{Batch, Row};
use crate::model::decoder::transformer::{PrefixKv, Transformer};
use crate::model::quant::Products;
use candle_core::{Result, Tensor};

/// The keys and values of `rows` sequences: slot p of row r holds its token at position p.
pub struct KvCache {
    /// Per layer: (rows, kv_heads, capacity, head_dim), the model's dtype.
    layers: Vec<LayerKv>,
    /// The header's keys and values, (1, kv_heads, h, head_dim) per layer: every row's first h.
    header: Option<PrefixKv>,
    /// Slots per row, after the header.
    capacity: usize,
    /// Per row: the position of its next token (its slots before it are written).
    next: Vec<usize>,
}

/// Which sequence each row of a `KvCache` continues, while some sequences end before others:
/// a finished row only pads until a quarter of the rows do, then they are dropped together
/// (dropping rows copies the cache).
pub struct LiveRows {
    live: Vec<usize>,
}

impl LiveRows {
    /// Row r continues sequence r, for `n` sequences.
    pub fn all(n: usize) -> Self {
        LiveRows {
            live: (0..n).collect(),
        }
    }

    /// The sequence of each row of the cache, in row order.
    pub fn sequences(&self) -> &[usize] {
        &self.live
    }

    /// Drop the rows of the sequences that are done (`running` false) from `cache`, once
    /// they are a quarter of its rows and some other still runs.
    pub fn drop_done(
        &mut self,
        cache: &mut KvCache,
        running: impl Fn(usize) -> bool,
    ) -> Result<()> {
        let keep: Vec<usize> = (0..self.live.len())
            .filter(|&r| running(self.live[r]))
            .collect();
        if !keep.is_empty() && (self.live.len() - keep.len()) * 4 >= self.live.len() {
            cache.retain(&keep)?;
            self.live = keep.iter().map(|&r| self.live[r]).collect();
        }
        Ok(())
    }
}

impl KvCache {
    /// `rows` sequences that all continue `header` (its keys and values shared, not copied),
    /// with room for `capacity` slots of their own; the cache grows when a step needs more.
    pub fn new(
        model: &Transformer,
        rows: usize,
        header: Option<&PrefixKv>,
        capacity: usize,
    ) -> Result<Self> {
        let h = header.map_or(0, |p| p.len);
        let mut cache = KvCache {
            layers: Vec::new(),
            header: header.cloned(),
            capacity: capacity.max(1),
            next: vec![h; rows],
        };
        cache.layers = (0..model.cfg.num_layers())
            .map(|_| cache.empty_layer(model, rows))
            .collect::<Result<_>>()?;
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
        if keep.is_empty() {
            // Zero-row views: on CUDA a zero-length index or allocation is an error
            // (CUDA_ERROR_INVALID_VALUE), not an empty tensor.
            for (k, v) in &mut self.layers {
                *k = k.narrow(0, 0, 0)?;
                *v = v.narrow(0, 0, 0)?;
            }
            self.next.clear();
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
        self.next = keep.iter().map(|&r| self.next[r]).collect();
        Ok(())
    }

    /// Room up to position `need` in every row: at least double the capacity when it grows,
    /// so that growing costs O(1) copies per slot over a run.
    fn reserve(&mut self, model: &Transformer, need: usize) -> Result<()> {
        let need = need.saturating_sub(self.header.as_ref().map_or(0, |p| p.len));
        if need <= self.capacity {
            return Ok(());
        }
        self.capacity = need.max(2 * self.capacity);
        let rows = self.rows();
        let bigger: Vec<LayerKv> = (0..self.layers.len())
            .map(|_| self.empty_layer(model, rows))
            .collect::<Result<_>>()?;
        for ((bk, bv), (k, v)) in bigger.iter().zip(&self.layers) {
            bk.slice_set(k, 2, 0)?;
            bv.slice_set(v, 2, 0)?;
        }
        self.layers = bigger;
        Ok(())
    }
}

impl Transformer {
    /// One step of every row of `cache`: row r continues with `rows[r]` (its trunk kept, its
    /// branches read and then dropped; an empty row only pads). Returns the hidden states
    /// (rows, len, hidden) in `residual_dtype`: read them with `decode_logits` at
    /// `Row::ends()` (the trunk's last token and each branch's) — the only final ones
    /// (`Batch::reading`; `step_reading` names others).
    pub fn step(&self, cache: &mut KvCache, rows: &[Row], products: Products) -> Result<Tensor> {
        let read: Vec<(usize, usize)> = rows
            .iter()
            .enumerate()
            .flat_map(|(r, row)| row.ends().map(move |p| (r, p)))
            .collect();
        self.step_reading(cache, rows, products, &read)
    }

    /// `step`, whose final hidden states are those at `read` ((row, index within the row)).
    pub fn step_reading(
        &self,
        cache: &mut KvCache,
        rows: &[Row],
        products: Products,
        read: &[(usize, usize)],
    ) -> Result<Tensor> {
        assert_eq!(rows.len(), cache.rows(), "one row per cached sequence");
        let need = rows
            .iter()
            .zip(&cache.next)
            .map(|(row, &next)| next + row.len());
        cache.reserve(self, need.max().unwrap_or(0))?;
        let h = cache.header.as_ref().map_or(0, |p| p.len);
        let one_launch = decode_attention::takes_on(
            self.device(),
            self.dtype(),
            self.cfg.head_dim,
            self.gpu_kernels(),
        );
        let segments = Segments::new(rows, &cache.next, h, one_launch, self.device())?;
        let batch = Batch::stepping(rows, &cache.next, self.device())?
            .with_products(products)
            .reading(read)?;
        let header = cache.header.as_ref().map(|p| p.layers.as_slice());
        let hidden = self.forward_cached(&batch, &cache.layers, header, &segments)?;
        for (next, row) in cache.next.iter_mut().zip(rows) {
            *next += row.trunk.len();
        }
        Ok(hidden)
    }
}
