//! A decoding step's runs of several tokens (json's `",\n  "<key>": `) through 8-bit integer
//! products with sixteen tokens in the lanes: Q4_0, Q5_0 and Q8_0 (most of Qwen2.5-0.5B's
//! weights, whose 896 columns take no K-quant), Q4_1 and Q5_1 (Q5_K_M's fallback there), and
//! Q2_K … Q6_K (Q2_K, Q3_K_M, Q4_K_M and Q5_K_M files of the 7–13B judges), and the i-quants
//! (their integers, `iq_rows`).
//!
//! The f32 products on expanded weight rows (`expanded_dots`) multiply sixteen values per
//! instruction; one VNNI instruction here multiplies four weights by four activations of each
//! of sixteen tokens (64 products), and the weight's four bytes are read once for all sixteen
//! (`vnni`). CPUs without VNNI take the AVX2 body (`avx2`: 32 products an instruction, the
//! same bits). Measured on 16 items of roleplay8-ja with Qwen2.5-0.5B: docs/benchmarks.md.
//! Prompts' products take them too under `--prefill-gemm int8` (`prefill_gemm`): llama.cpp's
//! arithmetic, with VNNI's four times the FMA's multiply-adds an instruction.
//!
//! The weights of a task's rows are unpacked to bytes once (`Unpacked`, `unpack`), the
//! activations interleaved for the lanes once per product (`Lanes`); the bodies read both
//! through `operands`.
//!
//! The numbers are those of the integer kernels for single tokens up to the order of the f32
//! sums: activations rounded to 8 bits per 32 values (`Q8Rows`, llama.cpp's Q8_0; finer than
//! the Q8_K, per 256 values, of the single-token K-quant kernels: on a real Q4_K_M judge
//! Q8_K's rounding moved expected scores about 1.5× as far from f32's); weights as
//! unsigned bytes (their integer plus an offset) with an f32 scale per 32 values (per 16 for
//! Q2_K, Q3_K and Q6_K) and for Q4_1, Q5_1, Q4_K and Q5_K a min per 32 values (Q2_K: per 16);
//! each unit's integer dot exact (the offset's part taken off with the activations' sums), and
//! per (token, weight row) one f32 chain over the blocks in order: acc = fma(scale·d_x, dot,
//! acc) (and acc −= min·(d_x·Σx) per min, d_x·Σx rounded once per token and unit of the min —
//! for Q4_1/Q5_1 the f16 s of llama.cpp's Q8_1, as their single-token kernels take it, with
//! min = −m; with two units of 16, acc = fma(scale₀·dot₀ + scale₁·dot₁, d_x, acc)). A
//! token's result depends on its own activations only, not on the other tokens of its group or
//! the tile.

use crate::model::quant::cpu::block_dots::Q8Rows;
use crate::model::quant::cpu::row_tasks::by_weight_columns;
use crate::model::quant::matrix::RowKernels;
use candle_core::{Result, bail};

#[cfg(target_arch = "x86_64")]
mod avx2;
mod layout;
#[cfg(target_arch = "x86_64")]
mod operands;
#[cfg(target_arch = "x86_64")]
mod unpack;
mod unpacked;
#[cfg(target_arch = "x86_64")]
mod vnni;

use crate::model::quant::formats::block_format::BlockFormat;
use layout::{Lanes, TASK_ROWS, Unpacked};

/// The instructions the products run on. Both give the same bits: each unit's dot is an exact
/// integer either way, and the float work is the same operations in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// AVX-512 VNNI (`vnni`): one `vpdpbusd`, 64 products, for sixteen tokens.
    Vnni,
    /// AVX2 (`avx2`): `vpmaddubsw` then `vpmaddwd`, 32 products, for eight tokens.
    Avx2,
}

impl Body {
    pub fn name(self) -> &'static str {
        match self {
            Body::Vnni => "vnni",
            Body::Avx2 => "avx2",
        }
    }

    /// The bodies this CPU runs, fastest first (each needs AVX2, FMA and F16C too: the
    /// weights' unpacking).
    pub fn here() -> &'static [Body] {
        static HERE: std::sync::OnceLock<Vec<Body>> = std::sync::OnceLock::new();
        HERE.get_or_init(|| {
            let mut here = Vec::new();
            #[cfg(target_arch = "x86_64")]
            if crate::model::backend::cpu::features().avx2_fma_f16c {
                if crate::model::backend::cpu::features().avx512_vnni {
                    here.push(Body::Vnni);
                }
                here.push(Body::Avx2);
            }
            here
        })
    }

    /// Whether a form's bytes are kept as its signed integers rather than + 128 (`avx2`).
    fn signed_bytes(self, form: BlockFormat) -> bool {
        self == Body::Avx2 && form.byte_offset() == 128
    }
}

/// `HYOKA_TEST_INT8_BODY`: `avx2` or `vnni` picks the body of the 8-bit products, so that the
/// tests and benchmarks check and measure on one machine what a CPU without VNNI runs; unset or
/// empty, the fastest this CPU has. Read once; the numbers do not depend on it, and a judge
/// records it in its provenance when set.
pub const INT8_BODY: &str = "HYOKA_TEST_INT8_BODY";

/// The body `HYOKA_TEST_INT8_BODY` asks for, where it names one this CPU has (`Ok(None)`: unset); an
/// error saying why not.
pub fn requested_body() -> std::result::Result<Option<Body>, String> {
    let asked = std::env::var(INT8_BODY).unwrap_or_default();
    if asked.is_empty() {
        return Ok(None);
    }
    let here = Body::here();
    match here.iter().find(|b| b.name() == asked) {
        Some(body) => Ok(Some(*body)),
        None => Err(format!(
            "{INT8_BODY}={asked}: this CPU runs {} (values: vnni, avx2)",
            if here.is_empty() {
                "neither".to_string()
            } else {
                here.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ")
            }
        )),
    }
}

/// The body in use: `HYOKA_TEST_INT8_BODY`'s (refused up front where it is not understood,
/// `prefill_gemm::check_prefill_gemm`), else the fastest this CPU has; None without AVX2.
pub fn body() -> Option<Body> {
    static BODY: std::sync::OnceLock<Option<Body>> = std::sync::OnceLock::new();
    *BODY.get_or_init(|| match requested_body() {
        Ok(Some(body)) => Some(body),
        _ => Body::here().first().copied(),
    })
}

/// Whether this CPU has the instructions (AVX2, FMA and F16C; AVX-512 VNNI is faster): then
/// `products` takes every type with row kernels (all of `BlockKind`, `KQuantKind` and
/// `IQuant`).
pub fn available() -> bool {
    body().is_some()
}

/// xs (n, k) · Wᵀ for the `out` rows of the weights: y (n, out); an error where not
/// `available`.
pub fn products(kernels: &RowKernels, out: usize, k: usize, xs: &[f32]) -> Result<Vec<f32>> {
    let Some(body) = body() else {
        bail!("8-bit run products need AVX2, FMA and F16C");
    };
    products_on(body, kernels, out, k, xs)
}

/// `products` on a given body, which this CPU must have (`Body::here`).
fn products_on(
    body: Body,
    kernels: &RowKernels,
    out: usize,
    k: usize,
    xs: &[f32],
) -> Result<Vec<f32>> {
    let (values, bytes) = kernels.format.block_shape();
    if data_of(kernels).len() != out * (k / values.max(1) * bytes) {
        bail!(
            "8-bit run products: {out}×{k} {:?} weights in {} bytes",
            kernels.format,
            data_of(kernels).len()
        );
    }
    let acts = Activations::new(kernels, k, xs)?;
    rows_products_on(body, kernels, 0..out, &acts)
}

fn data_of<'a>(kernels: &'a RowKernels) -> &'a [u8] {
    &kernels.data
}

/// n tokens' activations rounded and laid out for the products of one form of weights, once
/// for every block of weight rows multiplied with them (`rows_products`).
pub struct Activations {
    form: BlockFormat,
    n: usize,
    k: usize,
    lanes: Lanes,
}

impl Activations {
    /// xs (n, k), for weights of `kernels`' form.
    pub fn new(kernels: &RowKernels, k: usize, xs: &[f32]) -> Result<Self> {
        let form = kernels.format;
        let n = xs.len() / k.max(1);
        if !k.is_multiple_of(form.block_shape().0) || xs.len() != n * k {
            bail!(
                "8-bit run products: {k} columns of {form:?} weights for {} values",
                xs.len()
            );
        }
        let acts = Q8Rows::quantize(xs, k, form.takes_q8_1_sums());
        let lanes = Lanes::new(&acts, n, k, form);
        Ok(Activations { form, n, k, lanes })
    }

    /// Whether these activations are laid out for `kernels`' weights.
    pub fn fit(&self, kernels: &RowKernels) -> bool {
        kernels.format == self.form
    }
}

/// The activations (n tokens) · Wᵀ for weight rows `rows` of `kernels`: y (n, rows.len()), each
/// value what `products` gives it for the whole matrix (a value depends on its token and weight
/// row only). An error where not `available`.
pub fn rows_products(
    kernels: &RowKernels,
    rows: std::ops::Range<usize>,
    acts: &Activations,
) -> Result<Vec<f32>> {
    let Some(body) = body() else {
        bail!("8-bit run products need AVX2, FMA and F16C");
    };
    rows_products_on(body, kernels, rows, acts)
}

fn rows_products_on(
    body: Body,
    kernels: &RowKernels,
    rows: std::ops::Range<usize>,
    acts: &Activations,
) -> Result<Vec<f32>> {
    if !Body::here().contains(&body) {
        bail!(
            "8-bit run products: this CPU lacks the {} body's instructions",
            body.name()
        );
    }
    let (form, n, k, data) = (acts.form, acts.n, acts.k, data_of(kernels));
    let (values, bytes) = form.block_shape();
    let row_bytes = k / values * bytes;
    if !acts.fit(kernels) || rows.start > rows.end || rows.end * row_bytes > data.len() {
        bail!(
            "8-bit run products: rows {rows:?} of {} bytes of {:?} weights for {k}-value {form:?} activations",
            data.len(),
            kernels.format,
        );
    }
    let data = &data[rows.start * row_bytes..rows.end * row_bytes];
    by_weight_columns(rows.len(), n, TASK_ROWS, |columns| {
        let rows = columns.rows();
        let data = &data[rows.start * row_bytes..rows.end * row_bytes];
        let weights = Unpacked::new(form, data, k, body.signed_bytes(form));
        weights.times(body, &acts.lanes, columns);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::quant::cpu::int8_products::layout::Unpacked;
    use crate::model::quant::cpu::kquant_dots::KQuantKind;
    use crate::model::quant::formats::block_format::BlockFormat;
    use crate::model::quant::formats::iquants::IQuant;
    use crate::model::quant::formats::legacy::{BLOCK, BlockKind};
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    fn random(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
        crate::rng::SplitMix64(seed).symmetric_f32s(rows * cols)
    }

    const FORMS: [(GgmlDType, BlockFormat); 10] = [
        (GgmlDType::Q4_0, BlockFormat::Legacy(BlockKind::Q4_0)),
        (GgmlDType::Q4_1, BlockFormat::Legacy(BlockKind::Q4_1)),
        (GgmlDType::Q5_0, BlockFormat::Legacy(BlockKind::Q5_0)),
        (GgmlDType::Q5_1, BlockFormat::Legacy(BlockKind::Q5_1)),
        (GgmlDType::Q8_0, BlockFormat::Legacy(BlockKind::Q8_0)),
        (GgmlDType::Q2K, BlockFormat::KQuant(KQuantKind::Q2K)),
        (GgmlDType::Q3K, BlockFormat::KQuant(KQuantKind::Q3K)),
        (GgmlDType::Q4K, BlockFormat::KQuant(KQuantKind::Q4K)),
        (GgmlDType::Q5K, BlockFormat::KQuant(KQuantKind::Q5K)),
        (GgmlDType::Q6K, BlockFormat::KQuant(KQuantKind::Q6K)),
    ];

    /// `out` random rows of k values (offset by 0.3, so that K-quants' mins matter), quantized by
    /// candle: its bytes and its dequantized values.
    fn weights(dtype: GgmlDType, out: usize, k: usize) -> anyhow::Result<(Vec<u8>, Vec<f32>)> {
        let w: Vec<f32> = random(out, k, 1).iter().map(|v| v + 0.3).collect();
        let q = QTensor::quantize(&Tensor::from_vec(w, (out, k), &Device::Cpu)?, dtype)?;
        let values = q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1()?;
        Ok((q.data()?.to_vec(), values))
    }

    /// i-quant rows made of the blocks of tests/fixtures/iquants (scales zero, subnormal, large and
    /// ordinary), cycled to fill out × k, with gguf-py's values of them.
    fn iq_weights(kind: IQuant, out: usize, k: usize) -> anyhow::Result<(Vec<u8>, Vec<f32>)> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/iquants/blocks.safetensors");
        let all = candle_core::safetensors::load(path, &Device::Cpu)?;
        let name = kind.name();
        let bytes: Vec<u8> = all[&format!("{name}.blocks")].flatten_all()?.to_vec1()?;
        let values: Vec<f32> = all[&format!("{name}.values")].flatten_all()?.to_vec1()?;
        let (bb, bv) = (kind.block_bytes(), kind.block_values());
        let have = bytes.len() / bb;
        let blocks = 0..out * k / bv;
        Ok((
            blocks
                .clone()
                .flat_map(|b| bytes[b % have * bb..][..bb].to_vec())
                .collect(),
            blocks
                .flat_map(|b| values[b % have * bv..][..bv].to_vec())
                .collect(),
        ))
    }

    /// A form, its weights' bytes and their values.
    type Case = (BlockFormat, Vec<u8>, Vec<f32>);

    /// Every form with its weights: candle's quantization of random rows, and the i-quant blocks.
    fn cases(out: usize, k: usize) -> anyhow::Result<Vec<Case>> {
        let mut cases = Vec::new();
        for (dtype, form) in FORMS {
            let (data, values) = weights(dtype, out, k)?;
            cases.push((form, data, values));
        }
        for kind in IQuant::ALL {
            let (data, values) = iq_weights(kind, out, k)?;
            cases.push((BlockFormat::IQuant(kind), data, values));
        }
        Ok(cases)
    }

    fn unit(form: BlockFormat) -> usize {
        BLOCK / form.scale_units()
    }

    /// Each weight read back from its byte, scale and min is candle's value to the bit (i-quants:
    /// gguf-py's).
    #[test]
    fn the_bytes_are_candles_values() -> anyhow::Result<()> {
        if !crate::model::backend::cpu::features().avx2_fma_f16c {
            return Ok(());
        }
        let (out, k) = (7, 512);
        for (form, data, values) in cases(out, k)? {
            // The AVX2 body's signed bytes too (`Body::signed_bytes`).
            for signed in [false, true] {
                if signed && form.byte_offset() != 128 {
                    continue;
                }
                let w = Unpacked::new(form, &data, k, signed);
                for (at, &want) in values.iter().enumerate() {
                    let (r, j) = (at / k, at % k);
                    let scale = w.scale_of(r, j);
                    let mut got = scale * w.integer(r, j) as f32;
                    if form.has_unit_min() {
                        got -= w.min_of(r, j);
                    }
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{form:?} (signed {signed}) row {r} value {j}: {got} for {want}"
                    );
                }
            }
        }
        Ok(())
    }

    /// The product of row r of `w` and token t of `acts` as the kernels are to compute it: the
    /// chain over the blocks of fma(scale·d_x, Σ integer·x, ·) from zero (for two units of 16
    /// fma(scale₀·dot₀ + scale₁·dot₁, d_x, ·); with a min then − min·(d_x·Σx) per unit,
    /// Q4_1/Q5_1's min·s), each dot exact.
    fn chain(w: &Unpacked, acts: &Q8Rows, t: usize, r: usize) -> f32 {
        let (form, k) = (w.form, w.k);
        let size = unit(form);
        let x = &acts.values()[t * k..(t + 1) * k];
        let mut acc = 0f32;
        for b in 0..k / BLOCK {
            let dx = acts.scales()[t * (k / BLOCK) + b];
            let dot = |u: usize| -> f32 {
                let dot: i32 = (u..u + size).map(|j| w.integer(r, j) * x[j] as i32).sum();
                dot as f32
            };
            let (first, second) = (b * BLOCK, b * BLOCK + size);
            if form.scales_per_16() {
                let part = dot(first) * w.scale_of(r, first);
                let part = dot(second).mul_add(w.scale_of(r, second), part);
                acc = part.mul_add(dx, acc);
            } else {
                acc = (w.scale_of(r, first) * dx).mul_add(dot(first), acc);
            }
            let with_min = if form.has_unit_min() {
                form.scale_units()
            } else {
                0
            };
            for start in [first, second].into_iter().take(with_min) {
                let sum: i32 = x[start..start + size].iter().map(|&q| q as i32).sum();
                let d_sum = if form.takes_q8_1_sums() {
                    acts.sums()[t * (k / BLOCK) + b]
                } else {
                    dx * sum as f32
                };
                acc = (-w.min_of(r, start)).mul_add(d_sum, acc);
            }
        }
        acc
    }

    /// Every product of `got` (tokens × rows of `w`) is `chain`'s, to the bit.
    fn assert_chains(got: &[f32], w: &Unpacked, acts: &Q8Rows, case: &str) {
        let n = acts.values().len() / w.k;
        assert_eq!(got.len(), n * w.rows, "{case}");
        for t in 0..n {
            for r in 0..w.rows {
                let want = chain(w, acts, t, r);
                let got = got[t * w.rows + r];
                assert_eq!(got.to_bits(), want.to_bits(), "{case} {:?} {t} {r}", w.form);
            }
        }
    }

    fn kernels(form: BlockFormat, data: &[u8]) -> RowKernels<'_> {
        let data = std::borrow::Cow::from(data);
        RowKernels { format: form, data }
    }

    /// Each product is `chain`, with the activations rounded as for single tokens, whatever the
    /// token's lane and the row's tile, on each body this CPU has (so the VNNI and AVX2 bodies
    /// give the same bits): 37 tokens (a pair of groups and a partial one), 45 rows (partial
    /// tiles and tasks), 768 values (a whole span of blocks and a part).
    #[test]
    fn each_product_is_one_chain_over_the_units() -> anyhow::Result<()> {
        let (out, k, n) = (45, 768, 37);
        if Body::here().is_empty() {
            return Ok(());
        }
        for (form, data, _) in cases(out, k)? {
            let xs = random(n, k, 2);
            let w = Unpacked::new(form, &data, k, false);
            let acts = Q8Rows::quantize(&xs, k, form.takes_q8_1_sums());
            for &body in Body::here() {
                let got = products_on(body, &kernels(form, &data), out, k, &xs)?;
                assert_chains(&got, &w, &acts, &format!("{body:?}"));
            }
        }
        Ok(())
    }

    /// Weights whose every integer is the form's largest in magnitude (`largest_integer`: the
    /// AVX2 body's i16 sums at their bound), unit scales, zero mins, times activations all
    /// −127 or all +127 (x = ∓1 rounded): every body's products are `chain`'s. A run one step
    /// longer than `i16_run` fails it for most forms (the sums saturate or wrap).
    #[test]
    fn the_largest_integers_stay_exact() -> anyhow::Result<()> {
        let (out, k, n) = (9, 512, 20);
        if Body::here().is_empty() {
            return Ok(());
        }
        for (form, data, _) in cases(out, k)? {
            for &body in Body::here() {
                let signed = body.signed_bytes(form);
                let largest = form.largest_integer() as i32;
                // Signed forms: −largest (Q8_0's −128); the others: their largest byte.
                let byte = if signed {
                    (-largest) as i8 as u8
                } else if form.byte_offset() == 128 {
                    (128 - largest) as u8
                } else {
                    largest as u8
                };
                for x in [-1f32, 1.0] {
                    let xs = vec![x; n * k];
                    let acts = Q8Rows::quantize(&xs, k, form.takes_q8_1_sums());
                    let lanes = Lanes::new(&acts, n, k, form);
                    let extreme = |rows: std::ops::Range<usize>| {
                        let mut w =
                            Unpacked::new(form, &data[..rows.len() * data.len() / out], k, signed);
                        w.bytes.iter_mut().for_each(|b| *b = byte);
                        w.scales.iter_mut().for_each(|s| *s = 1.0);
                        w.mins.iter_mut().for_each(|m| *m = 0.0);
                        w
                    };
                    let got = by_weight_columns(out, n, TASK_ROWS, |columns| {
                        assert!(Body::here().contains(&body));
                        extreme(columns.rows()).times(body, &lanes, columns);
                        Ok(())
                    })?;
                    let w = extreme(0..out);
                    let multiplied = if form.byte_offset() == 128 {
                        w.integer(0, 0).unsigned_abs() as usize
                    } else {
                        w.bytes[0] as usize
                    };
                    assert_eq!(multiplied, form.largest_integer(), "{form:?}");
                    assert_chains(&got, &w, &acts, &format!("{body:?}, x {x}"));
                }
            }
        }
        Ok(())
    }
}
