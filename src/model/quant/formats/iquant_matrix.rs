//! An i-quant matrix as a file stores it: its blocks row after row in host memory. Its
//! expansion and products are the CPU's (`cpu::iq_rows`, `cpu::iq_dots`).

use super::iquants::IQuant;
use candle_core::{Result, bail};

/// A (rows, cols) matrix of an `IQuant` in its blocks, row after row, in host memory.
pub struct IqMatrix {
    kind: IQuant,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl IqMatrix {
    pub fn new(kind: IQuant, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self> {
        let block = kind.block_values();
        if !cols.is_multiple_of(block) || data.len() != rows * kind.row_bytes(cols) {
            bail!(
                "{} matrix {rows}×{cols}: {} bytes are not its whole {block}-value blocks",
                kind.name(),
                data.len()
            );
        }
        Ok(IqMatrix {
            kind,
            rows,
            cols,
            data,
        })
    }

    pub fn kind(&self) -> IQuant {
        self.kind
    }

    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Row r's blocks.
    pub fn row(&self, r: usize) -> &[u8] {
        let b = self.kind.row_bytes(self.cols);
        &self.data[r * b..(r + 1) * b]
    }

    /// The matrix with its rows reordered: row i of the result is row `order[i]` of this one.
    pub fn permute_rows(&self, order: &[usize]) -> Result<Self> {
        let mut data = Vec::with_capacity(order.len() * self.kind.row_bytes(self.cols));
        for &r in order {
            if r >= self.rows {
                bail!("row {r} of a {}-row matrix", self.rows);
            }
            data.extend_from_slice(self.row(r));
        }
        IqMatrix::new(self.kind, order.len(), self.cols, data)
    }
}
