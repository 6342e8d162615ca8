//! hyoka's i-quant decoding kernels (`model::iq_dots`) timed on the shapes and blocks
//! scripts/bench/bench_iq_kernels.c times llama.cpp's on: one thread (run with RAYON_NUM_THREADS=1;
//! the kernels themselves are single-threaded), a 4096 × 14336 matrix of random blocks (d = 2^-12
//! where the block starts with it), best of 20 passes, for 1 and 4 activation rows. Prints
//! "KIND ROWS ns/weight". A benchmark, not a test: scripts/bench/bench_iq_kernels.sh runs both.

use hyoka::model::quant::cpu::iq_dots::{self, Activations};
use hyoka::model::quant::formats::iquants::IQuant;
use std::time::Instant;

fn main() {
    let (rows, cols) = (4096usize, 14336usize);
    let mut rng = hyoka::rng::SplitMix64(3);
    let kernel = iq_dots::dot_rows_kernel();
    for kind in IQuant::ALL {
        if kind == IQuant::Iq4Nl {
            continue; // llama.cpp's IQ4_NL takes Q8_0 activations; the others Q8_K
        }
        let row_bytes = kind.row_bytes(cols);
        let mut data: Vec<u8> = (0..rows * row_bytes)
            .map(|_| (rng.next_u64() & 0xff) as u8)
            .collect();
        if kind != IQuant::Iq1M {
            for block in data.chunks_exact_mut(kind.block_bytes()) {
                block[..2].copy_from_slice(&[0x00, 0x0c]);
            }
        }
        for n in [1usize, 4] {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i % cols * 7919 % 1000) as f32 - 500.0) / 300.0)
                .collect();
            let acts = Activations::quantize(kind, &x, cols);
            let mut out = Vec::with_capacity(rows * n);
            let mut best = f64::MAX;
            for _ in 0..20 {
                out.clear();
                let t = Instant::now();
                for w in data.chunks_exact(row_bytes) {
                    kernel(kind, w, &acts, &mut out);
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!(
                "{} {n} {:.4}",
                kind.name(),
                best / (rows * cols) as f64 * 1e9
            );
        }
    }
}
