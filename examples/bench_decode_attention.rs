//! Decoding attention on the CPU (`few_queries::attend`) timed on a Llama-3.1-8B step: one
//! query token, 32 heads over 8 key heads of 128 dimensions, KEYS cached keys (default 1,615:
//! a dialogue6-ja judge prompt of DBDC3), LAYERS layers (default 32) each with its own cache, so
//! that the keys and values come from memory as in a real step, not from the cache the previous
//! call left. Prints the best of PASSES steps (default 20) and the bandwidth it implies (bytes
//! of keys and values read). Run with RAYON_NUM_THREADS as the judge runs. A benchmark, not a
//! test: `cargo run --release --example bench_decode_attention`.

use candle_core::{DType, Device, Tensor};
use hyoka::model::few_queries;
use std::time::Instant;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let (heads, kv_heads, d, cap) = (32usize, 8usize, 128usize, 2048usize);
    let keys = setting("KEYS", 1615).min(cap);
    let layers = setting("LAYERS", 32);
    let dev = Device::Cpu;
    let mut rng = hyoka::rng::SplitMix64(5);
    let mut cache = || {
        Tensor::from_vec(
            rng.symmetric_f32s(kv_heads * cap * d),
            (1, kv_heads, cap, d),
            &dev,
        )
    };
    let caches = (0..layers)
        .map(|_| Ok((cache()?, cache()?)))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let q = Tensor::from_vec(rng.symmetric_f32s(heads * d), (1, heads, 1, d), &dev)?;
    let mask = Tensor::zeros((1, 1, 1, keys), DType::F32, &dev)?;
    let scale = 1.0 / (d as f64).sqrt();
    let mut best = f64::MAX;
    for _ in 0..setting("PASSES", 20) {
        let t = Instant::now();
        for (k, v) in &caches {
            let (k, v) = (k.narrow(2, 0, keys)?, v.narrow(2, 0, keys)?);
            few_queries::attend(&q, None, &k, &v, &mask, keys, scale, None)?;
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    let bytes = (layers * kv_heads * keys * d * 2 * 4) as f64;
    println!(
        "{keys} keys, {layers} layers: {:.2} ms a step, {:.1} GB/s of keys and values",
        best * 1e3,
        bytes / best / 1e9
    );
    Ok(())
}
