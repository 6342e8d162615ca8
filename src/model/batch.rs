//! A batch of prompts of different lengths for one forward pass: right-padded token ids, per-row
//! positions, and additive attention masks (causal, key padding, sliding window), all relative
//! to an optional shared prefix whose keys and values were computed once.

use candle_core::{DType, Device, Result, Tensor};
use std::collections::BTreeMap;

pub struct Batch {
    /// (batch, len) token ids, right-padded with 0.
    pub ids: Tensor,
    /// (batch, len) absolute positions: prefix length + index.
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
    /// `rows` continue a shared prefix of `prefix_len` tokens (0 for none). `windows` lists the
    /// sliding windows the model's layers use (None for full attention).
    pub fn new(rows: &[Vec<u32>], prefix_len: usize, windows: &[Option<usize>], dtype: DType, device: &Device) -> Result<Self> {
        let b = rows.len();
        let len = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut ids = vec![0u32; b * len];
        let mut positions = vec![0u32; b * len];
        for (r, row) in rows.iter().enumerate() {
            ids[r * len..r * len + row.len()].copy_from_slice(row);
            for i in 0..len {
                positions[r * len + i] = (prefix_len + i) as u32;
            }
        }
        let lens: Vec<usize> = rows.iter().map(Vec::len).collect();
        let keys = prefix_len + len;
        let neg = mask_value(dtype);
        let mut masks = BTreeMap::new();
        for &window in windows {
            if masks.contains_key(&window) {
                continue;
            }
            let mut m = vec![0f32; b * len * keys];
            for (r, &row_len) in lens.iter().enumerate() {
                for i in 0..len {
                    let q = prefix_len + i;
                    for k in 0..keys {
                        let padding = k >= prefix_len && k - prefix_len >= row_len;
                        let future = k > q;
                        let outside = window.is_some_and(|w| q - k.min(q) >= w);
                        if padding || future || outside {
                            m[(r * len + i) * keys + k] = neg;
                        }
                    }
                }
            }
            let t = Tensor::from_vec(m, (b, 1, len, keys), device)?.to_dtype(dtype)?;
            masks.insert(window, t);
        }
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

    pub fn size(&self) -> usize {
        self.lens.len()
    }
}
