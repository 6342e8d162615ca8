//! A batch of prompts of different lengths for one forward pass: right-padded token ids, per-row
//! positions, and additive attention masks (causal, key padding, sliding window), all relative
//! to an optional shared prefix whose keys and values were computed once.
//!
//! A row can also be a small tree: a trunk followed by branches that each see the trunk and
//! themselves but not each other, with positions continuing from the end of the trunk. The judge
//! puts an item's prompt in the trunk and one branch per aspect, so every aspect shares one
//! prefill of the item.

use candle_core::{DType, Device, Result, Tensor};
use std::collections::BTreeMap;

/// One row: a trunk and branches that continue it independently.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub trunk: Vec<u32>,
    pub branches: Vec<Vec<u32>>,
}

impl Row {
    pub fn plain(tokens: Vec<u32>) -> Self {
        Row {
            trunk: tokens,
            branches: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.trunk.len() + self.branches.iter().map(Vec::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Index within the row of the last token of the trunk, and of each branch.
    pub fn trunk_end(&self) -> Option<usize> {
        self.trunk.len().checked_sub(1)
    }

    pub fn branch_start(&self, branch: usize) -> usize {
        self.trunk.len() + self.branches[..branch].iter().map(Vec::len).sum::<usize>()
    }
}

pub struct Batch {
    /// (batch, len) token ids, right-padded with 0.
    pub ids: Tensor,
    /// (batch, len) absolute positions.
    pub positions: Tensor,
    /// Real length of each row (without padding).
    pub lens: Vec<usize>,
    /// Length of the shared prefix every row continues.
    pub prefix_len: usize,
    /// Additive masks (batch, 1, len, prefix + len), one per sliding window (None = full).
    masks: BTreeMap<Option<usize>, Tensor>,
}

/// The most negative finite value of a dtype: masked scores must stay finite so that a row with
/// every key masked (a padding row) gives a uniform softmax instead of NaN.
pub fn mask_value(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => -65504.0,
        DType::BF16 => -3.38e38,
        _ => f32::MIN,
    }
}

impl Batch {
    /// Plain rows (no branches) continuing a shared prefix of `prefix_len` tokens.
    pub fn new(
        rows: &[Vec<u32>],
        prefix_len: usize,
        windows: &[Option<usize>],
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let rows: Vec<Row> = rows.iter().map(|r| Row::plain(r.clone())).collect();
        Self::from_rows(&rows, prefix_len, windows, dtype, device)
    }

    /// `windows` lists the sliding windows the model's layers use (None for full attention).
    pub fn from_rows(
        rows: &[Row],
        prefix_len: usize,
        windows: &[Option<usize>],
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let b = rows.len();
        let len = rows.iter().map(Row::len).max().unwrap_or(0).max(1);
        let mut ids = vec![0u32; b * len];
        // Per token: absolute position and segment (0 = trunk, k = branch k).
        let mut pos = vec![0usize; b * len];
        let mut seg = vec![0usize; b * len];
        for (r, row) in rows.iter().enumerate() {
            let base = r * len;
            let mut i = 0;
            for (t, &tok) in row.trunk.iter().enumerate() {
                ids[base + i] = tok;
                pos[base + i] = prefix_len + t;
                i += 1;
            }
            for (k, branch) in row.branches.iter().enumerate() {
                for (t, &tok) in branch.iter().enumerate() {
                    ids[base + i] = tok;
                    pos[base + i] = prefix_len + row.trunk.len() + t;
                    seg[base + i] = k + 1;
                    i += 1;
                }
            }
            for j in i..len {
                // Padding continues the positions so that tables stay in range.
                pos[base + j] = prefix_len + j;
            }
        }
        let lens: Vec<usize> = rows.iter().map(Row::len).collect();
        let keys = prefix_len + len;
        let neg = mask_value(dtype);
        let mut masks = BTreeMap::new();
        for &window in windows {
            if masks.contains_key(&window) {
                continue;
            }
            let mut m = vec![neg; b * len * keys];
            for (r, &row_len) in lens.iter().enumerate() {
                let base = r * len;
                for i in 0..len {
                    let q_pos = pos[base + i];
                    let within = |k_pos: usize| window.is_none_or(|w| q_pos - k_pos < w);
                    let out = &mut m[(base + i) * keys..(base + i + 1) * keys];
                    for (k, slot) in out.iter_mut().enumerate().take(prefix_len) {
                        if k <= q_pos && within(k) {
                            *slot = 0.0;
                        }
                    }
                    if i >= row_len {
                        // A padding query: let it see the prefix or itself so it stays finite.
                        out[prefix_len + i] = 0.0;
                        continue;
                    }
                    for j in 0..=i {
                        let (k_pos, k_seg, q_seg) = (pos[base + j], seg[base + j], seg[base + i]);
                        if (k_seg == 0 || k_seg == q_seg) && within(k_pos) {
                            out[prefix_len + j] = 0.0;
                        }
                    }
                }
            }
            let t = Tensor::from_vec(m, (b, 1, len, keys), device)?.to_dtype(dtype)?;
            masks.insert(window, t);
        }
        let positions: Vec<u32> = pos.iter().map(|&p| p as u32).collect();
        Ok(Batch {
            ids: Tensor::from_vec(ids, (b, len), device)?,
            positions: Tensor::from_vec(positions, (b, len), device)?,
            lens,
            prefix_len,
            masks,
        })
    }

    pub fn mask(&self, window: Option<usize>) -> &Tensor {
        &self.masks[&window]
    }
}
