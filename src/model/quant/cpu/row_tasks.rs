//! A product y (n, out) = xs (n, k) · Wᵀ split into tasks of consecutive weight rows, one
//! task per thread at a time, each writing its columns of y in place. Two forms:
//! `by_weight_rows`, whose tasks return their outputs weight row by weight row (decoding's few
//! tokens: a task's part is small and the gathering cheap), and `by_weight_columns`, whose tasks
//! write token rows of y directly (prefill's thousands of tokens: gathering a 32-row task's
//! part at a stride of n tokens took 13% of an 8-bit prefill of Qwen2.5-0.5B).

use candle_core::Result;
use rayon::prelude::*;
use std::ops::Range;

/// y (n, out) of a product whose tasks each compute `chunk` weight rows: `task(rows, part)`
/// appends, weight row by weight row, that row's n outputs. Each task writes its outputs
/// straight into y, on its own thread: gathered afterwards on the calling thread (a 16 × 152k
/// output head per step), with a fresh buffer per task, the gathering, zeroing and page faults
/// took several percent of a 16-row json decoding run while the other threads waited.
pub(crate) fn by_weight_rows(
    out: usize,
    n: usize,
    chunk: usize,
    task: impl Fn(Range<usize>, &mut Vec<f32>) -> Result<()> + Sync,
) -> Result<Vec<f32>> {
    // Not zeroed: the tasks write every element (n outputs for each of the out weight rows).
    let mut y: Vec<f32> = Vec::with_capacity(n * out);
    let dst = Scattered(y.as_mut_ptr(), n * out);
    (0..out.div_ceil(chunk)).into_par_iter().try_for_each_init(
        <(Vec<f32>, Vec<f32>)>::default,
        |(part, line), b| {
            let rows = b * chunk..((b + 1) * chunk).min(out);
            part.clear();
            task(rows.clone(), part)?;
            assert_eq!(part.len(), rows.len() * n, "n outputs per weight row");
            // Row by row of y, each a contiguous run of this task's columns.
            for r in 0..n {
                line.clear();
                line.extend(part.iter().skip(r).step_by(n));
                // SAFETY: r < n and rows lie in 0..out, so the run lies in y; columns `rows`
                // of y are written by the one task that holds those weight rows, and y is not
                // read until every task is done.
                unsafe { dst.write(r * out + rows.start, line) };
            }
            Result::Ok(())
        },
    )?;
    // SAFETY: every task returned Ok having written all n outputs of its weight rows (asserted
    // per task), and the tasks cover rows 0..out, so all n × out elements are initialised.
    unsafe { y.set_len(n * out) };
    Ok(y)
}

/// y (n, out) of a product whose tasks each compute `chunk` weight rows: `task(columns)` writes
/// y[token][row] for its rows (`columns.rows()`) and every token through `columns`. y starts
/// zeroed (calloc: fresh pages, no pass over them), so an element a task leaves is 0, never
/// undefined.
pub(crate) fn by_weight_columns(
    out: usize,
    n: usize,
    chunk: usize,
    task: impl Fn(&Columns) -> Result<()> + Sync,
) -> Result<Vec<f32>> {
    let mut y = vec![0f32; n * out];
    let dst = Scattered(y.as_mut_ptr(), n * out);
    (0..out.div_ceil(chunk)).into_par_iter().try_for_each(|b| {
        let rows = b * chunk..((b + 1) * chunk).min(out);
        task(&Columns {
            y: &dst,
            out,
            n,
            rows,
        })
    })?;
    Ok(y)
}

/// One task's columns of y: rows `rows` of the weights, every token. Only `by_weight_columns`
/// makes one, with ranges that do not overlap, so a write through it is exclusive.
pub(crate) struct Columns<'a> {
    y: &'a Scattered,
    out: usize,
    n: usize,
    rows: Range<usize>,
}

impl Columns<'_> {
    pub fn rows(&self) -> Range<usize> {
        self.rows.clone()
    }

    /// n: the rows of y.
    pub fn tokens(&self) -> usize {
        self.n
    }

    /// Asks the cache for this task's columns of y at `tokens` before they are written (a hint:
    /// nothing is read or written). A prompt's y (92 MB for an 8B's up projection) is out of
    /// cache; written only when a tile's outputs are done, each line's store would wait on
    /// memory (perf: 5% of an 8-bit prefill, on the stores).
    pub fn prefetch(&self, tokens: Range<usize>) {
        #[cfg(target_arch = "x86_64")]
        for t in tokens.start..tokens.end.min(self.n) {
            let columns = t * self.out + self.rows.start..t * self.out + self.rows.end;
            // The line of every 16th column, and of the last.
            for i in columns.clone().step_by(16).chain(columns.last()) {
                // SAFETY: a prefetch reads and writes nothing; i < n·out, so the address
                // lies in y.
                unsafe {
                    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                    _mm_prefetch::<_MM_HINT_T0>(self.y.0.add(i) as *const i8)
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = tokens;
    }

    /// y[token + t][row + r] = values[r][t] for t < tokens, r < rows: a tile of weight rows
    /// (each a register of T tokens' outputs) written token by token.
    pub fn put_tile<const R: usize, const T: usize>(
        &self,
        (token, tokens): (usize, usize),
        (row, rows): (usize, usize),
        values: &[[f32; T]; R],
    ) {
        assert!(
            tokens <= T && token + tokens <= self.n,
            "tokens of the product"
        );
        assert!(
            rows <= R && row >= self.rows.start && row + rows <= self.rows.end,
            "rows outside the task's columns"
        );
        // t picks a column of every row of the tile, not an element of one slice.
        #[allow(clippy::needless_range_loop)]
        for t in 0..tokens {
            let line: [f32; R] = std::array::from_fn(|r| values[r][t]);
            let at = (token + t) * self.out + row;
            // SAFETY: token + t < n and row..row + rows lies in this task's columns (asserted),
            // which no other task writes; y is not read until every task is done.
            unsafe {
                if rows == R {
                    // One store of R values, not a call to copy a run of unknown length.
                    self.y.write_array(at, line)
                } else {
                    self.y.write(at, &line[..rows])
                }
            }
        }
    }
}

/// The output of a product, written by its tasks at disjoint indices.
struct Scattered(*mut f32, usize);

// SAFETY: the tasks write disjoint elements (see `by_weight_rows`, `Columns`), and the buffer
// outlives them.
unsafe impl Sync for Scattered {}

impl Scattered {
    /// # Safety
    /// No other thread reads or writes elements `i..i + values.len()` meanwhile.
    unsafe fn write(&self, i: usize, values: &[f32]) {
        assert!(i + values.len() <= self.1, "a run in the output");
        // SAFETY: in bounds (asserted); exclusive by the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.0.add(i), values.len()) }
    }

    /// # Safety
    /// As `write`.
    unsafe fn write_array<const R: usize>(&self, i: usize, values: [f32; R]) {
        assert!(i + R <= self.1, "a run in the output");
        // SAFETY: in bounds (asserted); exclusive by the caller's contract.
        unsafe { self.0.add(i).cast::<[f32; R]>().write_unaligned(values) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both forms put task outputs at y[token][row], for a last task of fewer rows.
    #[test]
    fn both_forms_write_each_output_at_its_token_and_row() -> Result<()> {
        let (out, n) = (11, 5);
        let value = |t: usize, r: usize| (t * 100 + r) as f32;
        let want: Vec<f32> = (0..n * out).map(|i| value(i / out, i % out)).collect();
        let rows = by_weight_rows(out, n, 4, |rows, part| {
            part.extend(rows.flat_map(|r| (0..n).map(move |t| value(t, r))));
            Ok(())
        })?;
        assert_eq!(rows, want);
        let columns = by_weight_columns(out, n, 4, |c| {
            for r0 in c.rows().step_by(2) {
                let rn = (c.rows().end - r0).min(2);
                let tile: [[f32; 4]; 2] =
                    std::array::from_fn(|r| std::array::from_fn(|t| value(t, r0 + r)));
                c.put_tile((0, 4), (r0, rn), &tile);
                let last: [[f32; 4]; 2] =
                    std::array::from_fn(|r| std::array::from_fn(|t| value(4 + t, r0 + r)));
                c.put_tile((4, 1), (r0, rn), &last);
            }
            Ok(())
        })?;
        assert_eq!(columns, want);
        Ok(())
    }

    #[test]
    #[should_panic(expected = "rows outside the task's columns")]
    fn a_task_cannot_write_outside_its_rows() {
        let _ = by_weight_columns(8, 2, 4, |c| {
            c.put_tile((0, 1), (c.rows().start + 1, 4), &[[0f32; 1]; 4]);
            Ok(())
        });
    }
}
