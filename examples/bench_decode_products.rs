//! hyoka's decoding products (`model::kquant_dots`, `model::block_dots`) timed as a batch-1
//! decoding step runs them: one activation row against eight 4096 × 14336 matrices (an 8B's MLP
//! shape) of random Q4_K, Q6_K, Q4_0, Q8_0, IQ4_XS and IQ2_XXS blocks — eight, 264 MB of Q4_K,
//! so that the weights come from memory, not from the cache a previous pass left — rows split
//! over rayon's threads in tasks of 32 as the judge splits them (Q4_0 and Q8_0 take a task's
//! rows in one call, as the judge calls them). Prints the best of PASSES passes (default 8) as
//! GB/s of weights read; ROWS and MATRICES replace the 4096 rows and the eight matrices
//! (ROWS=1024 MATRICES=1: 8 MB of Q4_K, from L3). Run with RAYON_NUM_THREADS as the judge runs.
//! A benchmark, not a test: `cargo run --release --example bench_decode_products`.

use hyoka::model::quant::cpu::block_dots::{self, Q8Rows};
use hyoka::model::quant::cpu::iq_dots::{self, Activations};
use hyoka::model::quant::cpu::kquant_dots::{KQuantKind, Q8KRows};
use hyoka::model::quant::formats::iquants::IQuant;
use hyoka::model::quant::formats::legacy::BlockKind;
use rayon::prelude::*;
use std::time::Instant;

/// Appends the products of a task's weight rows (whole rows, one after another) with the
/// activation row.
type TaskProduct<'a> = &'a (dyn Fn(&[u8], &mut Vec<f32>) + Sync);

/// A kernel that takes one weight row at a time, over a task's rows.
fn each_row(task: &[u8], row_bytes: usize, mut dot: impl FnMut(&[u8])) {
    task.chunks_exact(row_bytes).for_each(&mut dot);
}

fn main() {
    let Some(kquant_rows) = hyoka::model::quant::cpu::kernels::kernels().kquant_rows else {
        eprintln!("the K-quant kernels need AVX2, FMA and F16C");
        return;
    };
    let setting = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (rows, cols, matrices) = (setting("ROWS", 4096), 14336usize, setting("MATRICES", 8));
    let passes = setting("PASSES", 8);
    let mut rng = hyoka::rng::SplitMix64(3);
    let x: Vec<f32> = rng.symmetric_f32s(cols);
    let xs = Q8KRows::quantize(&x, cols);
    let x8 = Q8Rows::quantize(&x, cols, false);
    let block_kernel = block_dots::dot_rows_kernel();
    let iq_kernel = iq_dots::dot_rows_kernel();
    let (iq4, iq2) = (
        Activations::quantize(IQuant::Iq4Xs, &x, cols),
        Activations::quantize(IQuant::Iq2Xxs, &x, cols),
    );
    let (q4k, q6k) = (
        KQuantKind::Q4K.row_bytes(cols),
        KQuantKind::Q6K.row_bytes(cols),
    );
    let (iq4_bytes, iq2_bytes) = (
        IQuant::Iq4Xs.row_bytes(cols),
        IQuant::Iq2Xxs.row_bytes(cols),
    );
    let kinds: [(&str, usize, TaskProduct); 6] = [
        ("Q4_K", q4k, &|w, out| {
            each_row(w, q4k, |row| kquant_rows(KQuantKind::Q4K, row, &xs, out))
        }),
        ("Q6_K", q6k, &|w, out| {
            each_row(w, q6k, |row| kquant_rows(KQuantKind::Q6K, row, &xs, out))
        }),
        ("Q4_0", BlockKind::Q4_0.row_bytes(cols), &|w, out| {
            block_kernel(BlockKind::Q4_0, w, &x8, out)
        }),
        ("Q8_0", BlockKind::Q8_0.row_bytes(cols), &|w, out| {
            block_kernel(BlockKind::Q8_0, w, &x8, out)
        }),
        ("IQ4_XS", iq4_bytes, &|w, out| {
            each_row(w, iq4_bytes, |row| iq_kernel(IQuant::Iq4Xs, row, &iq4, out))
        }),
        ("IQ2_XXS", iq2_bytes, &|w, out| {
            each_row(w, iq2_bytes, |row| {
                iq_kernel(IQuant::Iq2Xxs, row, &iq2, out)
            })
        }),
    ];
    for (kind, row_bytes, dot) in kinds {
        // Random bytes below 64: finite f16 block scales wherever they lie in a block.
        let weights: Vec<Vec<u8>> = (0..matrices)
            .map(|_| {
                (0..rows * row_bytes)
                    .map(|_| (rng.next_u64() & 0x3f) as u8)
                    .collect()
            })
            .collect();
        let mut best = f64::MAX;
        for _ in 0..passes {
            let t = Instant::now();
            for w in &weights {
                let out: Vec<f32> = w
                    .par_chunks(row_bytes * 32)
                    .flat_map_iter(|task| {
                        let mut out = Vec::with_capacity(32);
                        dot(task, &mut out);
                        out
                    })
                    .collect();
                assert_eq!(out.len(), rows);
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        let bytes = (matrices * rows * row_bytes) as f64;
        println!("{kind}: {:.1} GB/s of weights", bytes / best / 1e9);
    }
}
