//! Decoding attention on the CPU (`few_queries`) timed on a Llama-3.1-8B step: one query token
//! per row, HEADS heads (default 32) over KV_HEADS key heads (default 8) of 128 dimensions
//! (llm-jp-3-13b: 40 over 40), ROWS rows (default 1) each with KEYS
//! keys of its own (default 1,615: a dialogue6-ja judge prompt of DBDC3) after a HEADER of
//! shared keys (default 0; json mode keeps the rubric's instructions once for all rows), LAYERS
//! layers (default 32) each with its own cache, so that the keys and values come from memory as
//! in a real step, not from the cache the previous call left. Times the rows attended one call
//! each and all in one call
//! (`attend_sequences`, the header read once); prints the best of PASSES steps (default 20) and
//! the bandwidth the step implies (bytes of keys and values it must read: the header once, each
//! row's own). Run with RAYON_NUM_THREADS as the judge runs. A benchmark, not a test:
//! `cargo run --release --example bench_decode_attention`.

use candle_core::{DType, Device, Tensor};
use hyoka::model::attention::few_queries::{self, Sequence};
use hyoka::model::attention::plan::ScoreScaling;
use std::time::Instant;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let (heads, kv_heads, d) = (setting("HEADS", 32), setting("KV_HEADS", 8), 128usize);
    let keys = setting("KEYS", 1615);
    let (header, rows, layers) = (
        setting("HEADER", 0),
        setting("ROWS", 1),
        setting("LAYERS", 32),
    );
    let cap = keys + 16;
    let dev = Device::Cpu;
    let mut rng = hyoka::rng::SplitMix64(5);
    let mut random = |shape: (usize, usize, usize, usize)| {
        let n = shape.0 * shape.1 * shape.2 * shape.3;
        Tensor::from_vec(rng.symmetric_f32s(n), shape, &dev)
    };
    struct Layer {
        header: Option<(Tensor, Tensor)>,
        k: Tensor,
        v: Tensor,
    }
    let mut caches = Vec::new();
    for _ in 0..layers {
        let header = match header {
            0 => None,
            h => Some((random((1, kv_heads, h, d))?, random((1, kv_heads, h, d))?)),
        };
        let (k, v) = (
            random((rows, kv_heads, cap, d))?,
            random((rows, kv_heads, cap, d))?,
        );
        caches.push(Layer { header, k, v });
    }
    let q = random((rows, heads, 1, d))?;
    let mask = Tensor::zeros((1, 1, 1, header + keys), DType::F32, &dev)?;
    let scale = 1.0 / (d as f64).sqrt();
    // Per layer and row: q, keys and values (views of the layer's cache).
    let views: Vec<Vec<(Tensor, Tensor, Tensor)>> = caches
        .iter()
        .map(|l| {
            (0..rows)
                .map(|r| {
                    Ok((
                        q.narrow(0, r, 1)?,
                        l.k.narrow(0, r, 1)?.narrow(2, 0, keys)?,
                        l.v.narrow(0, r, 1)?.narrow(2, 0, keys)?,
                    ))
                })
                .collect::<candle_core::Result<Vec<_>>>()
        })
        .collect::<candle_core::Result<_>>()?;
    let bytes = (layers * kv_heads * d * 2 * 4 * (header + rows * keys)) as f64;
    let passes = setting("PASSES", 20);
    for together in [false, true] {
        let mut best = f64::MAX;
        for _ in 0..passes {
            let t = Instant::now();
            for (layer, views) in caches.iter().zip(&views) {
                let all: Vec<Sequence> = (views.iter())
                    .map(|(q, k, v)| Sequence {
                        q,
                        k,
                        v,
                        mask: &mask,
                        keys: header + keys,
                    })
                    .collect();
                let scaling = ScoreScaling {
                    scale,
                    softcap: None,
                };
                if together {
                    few_queries::attend_sequences(layer.header.as_ref(), &all, scaling)?;
                } else {
                    for one in all.chunks(1) {
                        few_queries::attend_sequences(layer.header.as_ref(), one, scaling)?;
                    }
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{rows} rows × {keys} keys after a header of {header}, {layers} layers, {}: \
             {:.2} ms a step, {:.1} GB/s of keys and values",
            if together {
                "one call"
            } else {
                "a call per row"
            },
            best * 1e3,
            bytes / best / 1e9
        );
    }
    Ok(())
}
