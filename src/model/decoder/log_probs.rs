//! Log-probabilities read from logits: a log-softmax over the vocabulary, on the device, a block
//! of rows at a time, and only the tokens a scorer reads come back to the host.

use candle_core::{D, DType, Result, Tensor};

/// Rows normalised over the vocabulary at a time: candle's log-softmax holds about three tensors
/// of its input's size (32 rows × a 152k vocabulary × 4 bytes × 3: 58 MB; 300 rows at once would
/// take 0.55 GB).
pub const LOG_SOFTMAX_ROWS: usize = 32;

/// The tokens read in each row of logits.
#[derive(Clone, Copy, Debug)]
pub enum Columns<'a> {
    /// The same tokens in every row (a judge's score tokens).
    Same(&'a [u32]),
    /// Each row's own tokens, one list per row (the tokens of a scored text).
    PerRow(&'a [Vec<u32>]),
}

impl Columns<'_> {
    fn of_row(&self, row: usize) -> &[u32] {
        match self {
            Columns::Same(c) => c,
            Columns::PerRow(c) => &c[row],
        }
    }
}

/// For each row of `logits` (rows, vocabulary), the log-softmax over the vocabulary at that
/// row's columns, in the columns' order.
pub fn log_probs_at(logits: &Tensor, columns: Columns<'_>) -> Result<Vec<Vec<f32>>> {
    log_probs_in_blocks(logits, columns, LOG_SOFTMAX_ROWS)
}

/// `log_probs_at`, `block` rows at a time. Each row's arithmetic is its own, so the block size
/// changes no bit (tested).
fn log_probs_in_blocks(
    logits: &Tensor,
    columns: Columns<'_>,
    block: usize,
) -> Result<Vec<Vec<f32>>> {
    let (n, vocab) = logits.dims2()?;
    if let Columns::PerRow(c) = columns
        && c.len() != n
    {
        candle_core::bail!("{} rows of logits, {} lists of columns", n, c.len());
    }
    let block = block.max(1);
    let mut out = Vec::with_capacity(n);
    for start in (0..n).step_by(block) {
        let rows = block.min(n - start);
        let lp = candle_nn::ops::log_softmax(&logits.narrow(0, start, rows)?, D::Minus1)?;
        let mut flat = Vec::new();
        for i in 0..rows {
            let row = columns.of_row(start + i);
            if let Some(&t) = row.iter().find(|&&t| t as usize >= vocab) {
                candle_core::bail!("token {t} is outside a vocabulary of {vocab}");
            }
            flat.extend(row.iter().map(|&t| (i * vocab) as u32 + t));
        }
        let count = flat.len();
        let picked = if count == 0 {
            Vec::new()
        } else {
            let idx = Tensor::from_vec(flat, count, lp.device())?;
            (lp.flatten_all()?.index_select(&idx, 0)?)
                .to_dtype(DType::F32)?
                .to_vec1::<f32>()?
        };
        let mut values = picked.into_iter();
        for i in 0..rows {
            let k = columns.of_row(start + i).len();
            out.push(values.by_ref().take(k).collect());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Blocks of rows (one, several with a short last one, all, more than all) give the whole
    /// log-softmax's values at the columns, to the bit, for shared and per-row columns.
    #[test]
    fn log_probs_by_blocks_are_the_whole_log_softmax_at_the_columns() {
        let logits = (Tensor::randn(0f32, 4.0, (70, 1000), &Device::Cpu).unwrap() + 1.0).unwrap();
        let whole = candle_nn::ops::log_softmax(&logits, D::Minus1)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let same = [0u32, 3, 17, 500, 999];
        let per_row: Vec<Vec<u32>> = (0..70u32)
            .map(|r| (0..r % 4).map(|k| (r * 13 + k * 101) % 1000).collect())
            .collect();
        for block in [1, 32, 70, 100] {
            for columns in [Columns::Same(&same), Columns::PerRow(&per_row)] {
                let got = log_probs_in_blocks(&logits, columns, block).unwrap();
                assert_eq!(got.len(), 70);
                for (r, g) in got.iter().enumerate() {
                    let want: Vec<f32> = (columns.of_row(r).iter())
                        .map(|&t| whole[r][t as usize])
                        .collect();
                    assert_eq!(g.len(), want.len(), "block {block} row {r}");
                    assert!(
                        g.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "block {block} row {r}"
                    );
                }
            }
        }
        let outside = [1000u32];
        assert!(log_probs_at(&logits, Columns::Same(&outside)).is_err());
    }
}
