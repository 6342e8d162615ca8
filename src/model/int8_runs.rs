//! A decoding step's runs of several tokens (json's `",\n  "<key>": `) through 8-bit integer
//! products with sixteen tokens in the lanes, for the 32-value block types without a minimum
//! (Q4_0, Q5_0, Q8_0: most of Qwen2.5-0.5B's weights, whose 896 columns take no K-quant).
//!
//! The f32 products on expanded weight rows (`expanded_dots`) multiply sixteen values per
//! instruction; one VNNI instruction here multiplies four weights by four activations of each
//! of sixteen tokens (64 products), and the weight's four bytes are read once for all sixteen.
//! Measured on 16 items of roleplay8-ja with Qwen2.5-0.5B: see the README.
//!
//! The numbers are those of the integer kernels for single tokens, up to the order of the
//! f32 sums: activations rounded to 8 bits per 32 values (`Q8Rows`, llama.cpp's Q8_0), each
//! block's integer dot exact, and per (token, weight row) one f32 chain over the blocks in
//! order, acc = fma(d_w·d_x, dot, acc). A token's result depends on its own activations only,
//! not on the other tokens of its group or the tile.

use super::block_dots::{self, BLOCK, BlockKind, Q8Rows};
use super::matrix::by_weight_rows;
use candle_core::{Result, bail};

/// Tokens per lane group: one AVX-512 register of i32.
const TOKENS: usize = 16;

/// Weight rows per task: unpacked to bytes once, then multiplied with every token group.
const TASK_ROWS: usize = 32;

/// Whether `products` runs for this block type here.
pub fn applies(kind: BlockKind) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        !kind.has_min()
            && block_dots::has_avx2_fma_f16c()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = kind;
        false
    }
}

/// xs (n, k) · Wᵀ for the `out` rows of `data` (blocks of `kind`): y (n, out). Call only
/// where `applies`.
pub fn products(
    kind: BlockKind,
    data: &[u8],
    out: usize,
    k: usize,
    xs: &[f32],
) -> Result<Vec<f32>> {
    let n = xs.len() / k.max(1);
    let row_bytes = kind.row_bytes(k);
    if !k.is_multiple_of(BLOCK) || xs.len() != n * k || data.len() != out * row_bytes {
        bail!(
            "8-bit run products: {out}×{k} {kind:?} weights for {} values",
            xs.len()
        );
    }
    let lanes = Lanes::new(&Q8Rows::quantize(xs, k, false), n, k);
    by_weight_rows(out, n, TASK_ROWS, |rows, part| {
        let weights = Unpacked::new(kind, &data[rows.start * row_bytes..rows.end * row_bytes], k);
        part.resize(rows.len() * n, 0.0);
        // SAFETY: `applies` detected the features before any call.
        unsafe { weights.times(&lanes, part) };
        Ok(())
    })
}

/// Activations of n tokens in groups of 16, interleaved for the lanes: per group and block,
/// bytes 4g..4g + 4 of token t at `[(g·16 + t)·4..]`; each token's block scale d, and 128 × its
/// block sum (what the weights' offset of 128 adds); zeros for tokens past n.
struct Lanes {
    blocks: usize,
    qs: Vec<i8>,
    d: Vec<f32>,
    offsets: Vec<i32>,
}

impl Lanes {
    fn new(acts: &Q8Rows, n: usize, k: usize) -> Self {
        let blocks = k / BLOCK;
        let groups = n.div_ceil(TOKENS);
        let mut lanes = Lanes {
            blocks,
            qs: vec![0; groups * blocks * BLOCK * TOKENS],
            d: vec![0.0; groups * blocks * TOKENS],
            offsets: vec![0; groups * blocks * TOKENS],
        };
        let (values, scales) = (acts.values(), acts.scales());
        for token in 0..n {
            let (group, t) = (token / TOKENS, token % TOKENS);
            for b in 0..blocks {
                let x = &values[token * k + b * BLOCK..token * k + (b + 1) * BLOCK];
                let at = (group * blocks + b) * TOKENS + t;
                let base = (group * blocks + b) * BLOCK * TOKENS;
                for (g, four) in x.chunks_exact(4).enumerate() {
                    let to = base + (g * TOKENS + t) * 4;
                    lanes.qs[to..to + 4].copy_from_slice(four);
                }
                lanes.d[at] = scales[token * blocks + b];
                lanes.offsets[at] = 128 * x.iter().map(|&q| q as i32).sum::<i32>();
            }
        }
        lanes
    }

    fn groups(&self) -> usize {
        self.d.len() / (self.blocks * TOKENS).max(1)
    }
}

/// Weight rows as bytes w + 128 (unsigned, as the instruction takes them), each block's d.
struct Unpacked {
    k: usize,
    bytes: Vec<u8>,
    d: Vec<f32>,
}

impl Unpacked {
    fn new(kind: BlockKind, data: &[u8], k: usize) -> Self {
        let blocks = data.len() / kind.block_bytes();
        let mut w = Unpacked {
            k,
            bytes: vec![0; blocks * BLOCK],
            d: Vec::with_capacity(blocks),
        };
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `applies` detected AVX2 before any call.
        unsafe {
            avx2::unpack(kind, data, &mut w.bytes)
        };
        w.d.extend(
            data.chunks_exact(kind.block_bytes())
                .map(|block| block_dots::read_f16(block, 0)),
        );
        w
    }

    fn rows(&self) -> usize {
        self.bytes.len() / self.k.max(1)
    }

    /// part[r·n + token] = weight row r · token, for every row and token.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn times(&self, lanes: &Lanes, part: &mut [f32]) {
        let rows = self.rows();
        let n = part.len() / rows.max(1);
        for group in 0..lanes.groups() {
            let tokens = (n - group * TOKENS).min(TOKENS);
            for r0 in (0..rows).step_by(avx512::ROWS) {
                let rn = (rows - r0).min(avx512::ROWS);
                // A tile past the last row repeats it; its sums are dropped.
                let tile: [usize; avx512::ROWS] = std::array::from_fn(|i| r0 + i.min(rn - 1));
                let sums = avx512::tile(self, tile, lanes, group);
                for (i, sum) in sums.iter().enumerate().take(rn) {
                    let at = (r0 + i) * n + group * TOKENS;
                    part[at..at + tokens].copy_from_slice(&sum[..tokens]);
                }
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn times(&self, _: &Lanes, _: &mut [f32]) {
        unreachable!("`applies` is false off x86_64")
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{BLOCK, BlockKind, block_dots};
    use std::arch::x86_64::*;

    /// Every block's 32 values as bytes w + 128.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn unpack(kind: BlockKind, data: &[u8], bytes: &mut [u8]) {
        let blocks = data.chunks_exact(kind.block_bytes());
        assert!(bytes.len() >= blocks.len() * BLOCK);
        for (block, out) in blocks.zip(bytes.chunks_exact_mut(BLOCK)) {
            let q = block_dots::avx2::unpack(kind, block);
            let q = _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN));
            // SAFETY: 32 bytes into a chunk of 32.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, q) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
// Register tiles are indexed by row and by group together; iterators would hide that.
#[allow(clippy::needless_range_loop)]
mod avx512 {
    use super::{BLOCK, Lanes, TOKENS, Unpacked};
    use std::arch::x86_64::*;

    /// Weight rows per tile: their block chains in flight together.
    pub const ROWS: usize = 4;

    /// Rows `tile` of w times the 16 tokens of `group`: per token and row, the f32 chain over
    /// the blocks.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub fn tile(
        w: &Unpacked,
        tile: [usize; ROWS],
        lanes: &Lanes,
        group: usize,
    ) -> [[f32; TOKENS]; ROWS] {
        let blocks = lanes.blocks;
        assert!(w.k == blocks * BLOCK && group < lanes.groups());
        assert!(tile.iter().all(|&r| r < w.rows()));
        let mut acc = [_mm512_setzero_ps(); ROWS];
        for b in 0..blocks {
            let at = (group * blocks + b) * TOKENS;
            let base = at * BLOCK;
            // SAFETY: the group's block b lies in the lanes (group < groups, b < blocks): 512
            // bytes of values, 16 scales and 16 offsets.
            let (x, dx, offsets) = unsafe {
                let x: [__m512i; 8] = std::array::from_fn(|g| {
                    _mm512_loadu_si512(lanes.qs.as_ptr().add(base + g * 64) as *const _)
                });
                let dx = _mm512_loadu_ps(lanes.d.as_ptr().add(at));
                let offsets = _mm512_loadu_si512(lanes.offsets.as_ptr().add(at) as *const _);
                (x, dx, offsets)
            };
            for i in 0..ROWS {
                let row = tile[i] * w.k + b * BLOCK;
                // Two chains of four, added exactly: the integer dot of the block.
                let (mut even, mut odd) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                for g in (0..8).step_by(2) {
                    // SAFETY: row + 4g + 8 ≤ (tile[i] + 1)·k, within the unpacked rows.
                    let (a, c) = unsafe {
                        let p = w.bytes.as_ptr().add(row + 4 * g) as *const i32;
                        (
                            _mm512_set1_epi32(p.read_unaligned()),
                            _mm512_set1_epi32(p.add(1).read_unaligned()),
                        )
                    };
                    even = _mm512_dpbusd_epi32(even, a, x[g]);
                    odd = _mm512_dpbusd_epi32(odd, c, x[g + 1]);
                }
                let dot = _mm512_sub_epi32(_mm512_add_epi32(even, odd), offsets);
                let scale = _mm512_mul_ps(_mm512_set1_ps(w.d[tile[i] * blocks + b]), dx);
                acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc[i]);
            }
        }
        let mut sums = [[0f32; TOKENS]; ROWS];
        for i in 0..ROWS {
            // SAFETY: 16 values into an array of 16.
            unsafe { _mm512_storeu_ps(sums[i].as_mut_ptr(), acc[i]) };
        }
        sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    fn random(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
        crate::rng::SplitMix64(seed).symmetric_f32s(rows * cols)
    }

    /// Each product is the chain over the blocks of fma(d_w·d_x, Σ w·x, ·) from zero, with the
    /// activations rounded as for single tokens, whatever the token's lane and the row's
    /// tile: 37 tokens (a partial group), 45 rows (partial tiles and tasks).
    #[test]
    fn each_product_is_one_chain_over_the_blocks() -> anyhow::Result<()> {
        let (out, k, n) = (45, 256, 37);
        for (dtype, kind) in [
            (GgmlDType::Q4_0, BlockKind::Q4_0),
            (GgmlDType::Q5_0, BlockKind::Q5_0),
            (GgmlDType::Q8_0, BlockKind::Q8_0),
        ] {
            if !applies(kind) {
                return Ok(());
            }
            let w = Tensor::from_vec(random(out, k, 1), (out, k), &Device::Cpu)?;
            let q = QTensor::quantize(&w, dtype)?;
            let data = q.data()?;
            let wf: Vec<f32> = q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1()?;
            let xs = random(n, k, 2);
            let got = products(kind, &data, out, k, &xs)?;
            let acts = Q8Rows::quantize(&xs, k, false);
            let row_bytes = kind.row_bytes(k);
            for t in 0..n {
                for r in 0..out {
                    let mut acc = 0f32;
                    for b in 0..k / BLOCK {
                        let block = &data[r * row_bytes + b * kind.block_bytes()..];
                        let dw = block_dots::read_f16(block, 0);
                        let dx = acts.scales()[t * (k / BLOCK) + b];
                        let dot: i32 = (0..BLOCK)
                            .map(|j| {
                                let at = r * k + b * BLOCK + j;
                                // The weight's integer: its value over its block's d.
                                let w = (wf[at] / dw).round() as i32;
                                w * acts.values()[t * k + b * BLOCK + j] as i32
                            })
                            .sum();
                        acc = (dw * dx).mul_add(dot as f32, acc);
                    }
                    assert_eq!(
                        got[t * out + r].to_bits(),
                        acc.to_bits(),
                        "{kind:?} {t} {r}"
                    );
                }
            }
        }
        Ok(())
    }
}
