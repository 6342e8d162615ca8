//! GGUF files written by llama.cpp itself (convert_hf_to_gguf.py from the llama-cpp-python sdist
//! for f16 and q8_0, its quantizer for q4_k_m, q5_k_m, q3_k_s, q2_k and the i-quant mixes iq4_xs,
//! iq3_s, iq3_xxs, iq2_xxs, iq2_xs, iq2_m, iq1_s and iq1_m (the last six with an importance
//! matrix); fixtures:
//! scripts/fixtures/make_converter_fixtures.py) of
//! llama (llama3 rope), mistral, gemma2, gemma3, qwen2 and qwen3, against HF transformers on the
//! weights it dequantizes from each file: every position's logits, in both weights modes.
//! Device and dtype from HYOKA_TEST_DEVICE / HYOKA_TEST_DTYPE (scripts/gpu/gpu_check.sh runs them on
//! a GPU in bf16, f16 and f32).

use crate::common;

use candle_core::{DType, Device};
use common::{max_diff, max_share_of_range};
use hyoka::model::{WeightsMode, load_gguf};

/// Largest |Δlogit| at any position, in the dtype the test runs in. bf16 and f16 are held to what
/// those formats give: measured on the CPU (`HYOKA_TEST_DTYPE=bf16|f16`), worst 0.093 and 0.012
/// over the six architectures, three files and both modes (these models' logits span 4–7).
fn tol() -> f32 {
    common::tol(1e-4, 0.25, 0.04) as f32
}
/// i-quants held as Q8_0 or Q5_0 (stored, on a GPU) have each 32
/// values' scale (the block's f16 times a 4–6 bit sub-scale) rounded to f16 (`model::iquants`):
/// every weight moves by up to 2⁻¹¹ of itself, the same for a whole group. Measured in f32 over
/// the seven models' iq4_xs files and llama3-rope's and qwen2's iq3_s when all were held so
/// (logits spanning 4–7): worst |Δlogit| 1.58e-3 (qwen2 iq3_s; IQ4_NL alone, kept exactly,
/// 7e-6); bound 3×. A level, grid or sign read wrong moves logits by whole units. (The same
/// conversion forced on the CPU: iq3_xxs, iq2_xxs, iq1_s 1.0–1.2e-3.)
const IQUANT_SCALES: f32 = 3.0 * 1.6e-3;
/// Where two scales share 32 values (IQ2_XS, IQ2_S, IQ1_M: the iq2_xs, iq2_m and iq1_m files),
/// the Q8_0 block is quantized again from the values, half a step of 1/127 of its largest value
/// at most. Measured in f32 with that conversion forced on the CPU (logits spanning 5–6): worst |Δlogit| 2.72e-2 (qwen2 iq2_m), 1.4–2.7e-2 over the six files; bound 3×.
const IQUANT_REQUANTIZED: f32 = 3.0 * 2.8e-2;

/// What a kind's logits may differ by from transformers' where no 8-bit activations enter. On
/// the CPU, i-quant matrices are kept in their blocks (`model::iq_rows`) and read exactly (the
/// expanded model too): those files are held to `tol()`.
fn tol_for(kind: &str) -> f32 {
    if !kind.starts_with("iq") || common::device().is_cpu() {
        tol()
    } else if ["iq2_xs", "iq2_m", "iq1_m"].contains(&kind) {
        tol() + IQUANT_REQUANTIZED
    } else {
        tol() + IQUANT_SCALES
    }
}
/// Stored quantized weights run quantized kernels for passes of at most 8 tokens, which round
/// activations to 8 bits as llama.cpp's do: there hyoka's distance to transformers must be of
/// the size of llama.cpp's own (its CPU backend) on the same file, per prompt (measured ratios
/// on the CPU 0.7–1.3).
const QUANTIZED_KERNELS_RATIO: f32 = 1.5;
/// On CUDA, candle's kernels (llama.cpp's CUDA ones) apply the offset of Q4_0/Q4_1/Q5_0/Q5_1
/// through the sum of the activations before rounding, which weights each rounding error by the
/// unsigned quant instead of the centred one: √(E q² / E (q−16)²) = √(325.5 / 85.5) = 1.95 for
/// uniform 5-bit quants, √(77.5 / 21.5) = 1.90 for 4-bit (tests/suite/backend_ops.rs measures each
/// kernel: about 2× the CPU's). These files are mostly such blocks: llama.cpp's fallback for rows
/// of 64 values is Q5_0 in q4_k_m, Q5_1 in q5_k_m, Q4_0 in q3_k_s and q2_k.
const CUDA_OFFSET_FORMATS: f32 = 1.95;
/// Around that centre the per-prompt ratios spread wider on CUDA than on the CPU. Measured on an
/// H200 (f32, all six architectures): q8_0 0.84–1.33, q4_k_m 0.97–2.31, q5_k_m 1.08–2.34,
/// q3_k_s 1.04–2.96, q2_k 1.15–3.57 (a 1-token prompt; the RMS ratios spread as widely,
/// 0.85–3.25). Bound there 2 × 1.95 = 3.9, which a kernel with a wrong scale or block layout
/// still fails by far (tests/suite/backend_ops.rs bounds each kernel more tightly).
const CUDA_SPREAD: f32 = 2.0;

fn quantized_kernels_ratio() -> f32 {
    if common::device().is_cuda() {
        CUDA_SPREAD * CUDA_OFFSET_FORMATS
    } else {
        QUANTIZED_KERNELS_RATIO
    }
}

struct Case {
    ids: Vec<u32>,
    /// Expected logits of the last `logits.len()` positions.
    logits: Vec<Vec<f32>>,
    /// llama.cpp's logits at every position, for prompts of at most 8 tokens of quantized files.
    llama_cpp: Option<Vec<Vec<f32>>>,
}

fn cases(name: &str, kind: &str) -> Vec<Case> {
    let dir = common::fixtures().join("converter").join(name);
    let expected = candle_core::safetensors::load(
        dir.join(format!("expected.{kind}.safetensors")),
        &Device::Cpu,
    )
    .unwrap();
    common::prompt_cases(&expected)
        .into_iter()
        .enumerate()
        .map(|(n, (ids, logits))| Case {
            ids,
            logits,
            llama_cpp: expected
                .get(&format!("llama_cpp.logits.{n}"))
                .map(|t| t.to_vec2::<f32>().unwrap()),
        })
        .collect()
}

/// The largest difference at any position.
fn max_abs_diff(got: &[Vec<f32>], expected: &[Vec<f32>]) -> f32 {
    got.iter()
        .zip(expected)
        .map(|(g, e)| max_diff(g, e))
        .fold(0.0f32, f32::max)
}

/// The files every model has.
const KINDS: [&str; 7] = [
    "f16", "q8_0", "q4_k_m", "q5_k_m", "q3_k_s", "q2_k", "iq4_xs",
];

/// Every position's logits of `name`'s GGUFs (KINDS and `more`) against transformers, in both
/// weights modes, each against the checkpoint holding the weights transformers dequantizes from
/// it.
fn check(name: &str, more: &[&str]) {
    let failures: Vec<String> = KINDS
        .iter()
        .chain(more)
        .flat_map(|kind| check_kind(name, kind))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn check_kind(name: &str, kind: &str) -> Vec<String> {
    let path = common::fixtures()
        .join("converter")
        .join(name)
        .join(format!("{kind}.gguf"));
    check_file(name, kind, &path)
}

/// `path` (`name`'s `kind` file, or a shard of it) against the expectations of that file. The
/// comparisons with llama.cpp's quantized kernels are returned when they fail, so that a run
/// reports every file's before it stops.
fn check_file(name: &str, kind: &str, path: &std::path::Path) -> Vec<String> {
    let mut failures = Vec::new();
    let cases = cases(name, kind);
    assert!(cases.iter().any(|c| c.ids.len() > 256));
    let f32_run = common::dtype() == DType::F32;
    for mode in [WeightsMode::Stored, WeightsMode::Expanded] {
        let model = load_gguf(path, common::dtype(), &common::device(), mode).unwrap();
        let mut worst = 0f32;
        for (n, case) in cases.iter().enumerate() {
            let got = common::every_position_logits(&model, &case.ids);
            let first = case.ids.len() - case.logits.len();
            let quantized_kernels =
                kind != "f16" && mode == WeightsMode::Stored && case.ids.len() <= 8;
            let llama_cpp =
                quantized_kernels.then(|| case.llama_cpp.as_ref().expect("llama.cpp's logits"));
            if let Some(llama_cpp) = llama_cpp {
                // Per prompt: at one position two independent roundings' largest errors differ
                // by chance; over a prompt, their sizes compare.
                let ratio = quantized_kernels_ratio();
                let what = format!(
                    "{name} {kind} {:?} prompt {n} ({} tokens, quantized kernels)",
                    common::dtype(),
                    case.ids.len()
                );
                if f32_run {
                    let ours = max_share_of_range(&got[first..], &case.logits);
                    let theirs = max_share_of_range(&llama_cpp[first..], &case.logits);
                    eprintln!(
                        "{what}: {:.2}× llama.cpp's error (bound {ratio:.2})",
                        ours / theirs
                    );
                    if ours > ratio * theirs {
                        failures.push(format!(
                            "{what}: {ours} of the logit range from transformers, llama.cpp {theirs}"
                        ));
                    }
                } else {
                    // bf16/f16 carry both errors: the format's and the 8-bit activations'.
                    let ours = max_abs_diff(&got[first..], &case.logits);
                    let theirs = max_abs_diff(&llama_cpp[first..], &case.logits);
                    let bound = tol_for(kind) + ratio * theirs;
                    eprintln!("{what}: max |Δlogit| {ours:.3e}, bound {bound:.3e}");
                    if ours > bound {
                        failures.push(format!(
                            "{what}: max |diff| {ours} > {} + {ratio} × llama.cpp's {theirs}",
                            tol_for(kind)
                        ));
                    }
                }
                continue;
            }
            for (i, e) in case.logits.iter().enumerate() {
                let d = max_diff(&got[first + i], e);
                worst = worst.max(d);
                assert!(
                    d <= tol_for(kind),
                    "{name} {kind} {mode:?} prompt {n} position {}: max |diff| {d} > {}",
                    first + i,
                    tol_for(kind)
                );
            }
        }
        eprintln!(
            "{name} {kind} {mode:?} {:?}: worst |Δlogit| {worst:.3e}",
            common::dtype()
        );
    }
    failures
}

/// Llama 3.1's rope scaling reaches hyoka from GGUF only as llama.cpp's `rope_freqs.weight`
/// (the metadata says "no scaling"): positions past the original context (64 here) only match
/// transformers with it.
/// The i-quant mixes that only llama3-rope and qwen2 have: one file per i-quant type.
const MORE_IQUANTS: [&str; 7] = [
    "iq3_s", "iq3_xxs", "iq2_xxs", "iq2_xs", "iq2_m", "iq1_s", "iq1_m",
];

#[test]
fn llama_with_llama3_rope_scaling() {
    check("llama3-rope", &MORE_IQUANTS);
}

#[test]
fn mistral() {
    check("mistral", &[]);
}

/// Gemma 2: soft-capping, sliding windows, norms stored as 1 + w by the converter.
#[test]
fn gemma2() {
    check("gemma2", &[]);
}

/// Gemma 3: sliding and full layers with their own rope bases, q/k norms.
#[test]
fn gemma3() {
    check("gemma3", &[]);
}

/// Qwen2 (Qwen2.5): q/k/v biases, untied head.
#[test]
fn qwen2() {
    check("qwen2", &MORE_IQUANTS);
}

/// Qwen3: q/k norms, a head size apart from hidden / heads, tied head.
#[test]
fn qwen3() {
    check("qwen3", &[]);
}

/// Qwen2 with YaRN as Qwen2.5 documents it for long contexts (factor 4; original context 64
/// here): the metadata's `rope.scaling.type = yarn`, factor and original context. Every
/// position differs from unscaled rope (interpolated frequencies, cos and sin × 1.139).
#[test]
fn qwen2_with_yarn_rope_scaling() {
    check("qwen2-yarn", &[]);
}

/// A GGUF split into shards by llama.cpp's `llama-gguf-split` (as Qwen's repositories ship
/// their 7B/14B files; scripts/fixtures/make_split_gguf_fixtures.py), loaded from its first or its last
/// shard: against transformers as the whole file is, in both weights modes, and bit for bit the
/// whole file's logits. llama3-rope's first shard holds metadata only
/// (`--no-tensor-first-split`), its `rope_freqs.weight` a later one.
#[test]
fn split_files_load_as_the_whole_file() {
    for (name, kind) in [("qwen2", "q4_k_m"), ("llama3-rope", "f16")] {
        let dir = common::fixtures().join("converter").join(name);
        let shard = |k: usize| dir.join(format!("split/{kind}-{k:05}-of-00003.gguf"));
        for k in [1, 3] {
            let failures = check_file(name, kind, &shard(k));
            assert!(failures.is_empty(), "{}", failures.join("\n"));
        }
        let whole = dir.join(format!("{kind}.gguf"));
        let load = |p: &std::path::Path| {
            load_gguf(p, common::dtype(), &common::device(), WeightsMode::Stored).unwrap()
        };
        let (whole, split) = (load(&whole), load(&shard(1)));
        for case in cases(name, kind) {
            assert_eq!(
                common::every_position_logits(&split, &case.ids),
                common::every_position_logits(&whole, &case.ids),
                "{name} {kind}: {} tokens",
                case.ids.len()
            );
        }
    }
}

/// The quantized files hold what llama.cpp writes for real small models (q2_k: quantized
/// `--pure`): K-quant blocks where a row is whole 256-value blocks (ffn_down), 32-value blocks
/// elsewhere (Q5_0, Q5_1 or Q4_0, and Q8_0) — so the test above covers both kinds of kernels,
/// and each K-quant type.
#[test]
fn quantized_files_mix_k_quants_and_fallbacks() {
    use candle_core::quantized::{GgmlDType, gguf_file::Content};
    for (kind, want) in [
        (
            "q4_k_m",
            &[
                GgmlDType::Q4K,
                GgmlDType::Q6K,
                GgmlDType::Q5_0,
                GgmlDType::Q8_0,
            ][..],
        ),
        (
            "q5_k_m",
            &[
                GgmlDType::Q5K,
                GgmlDType::Q6K,
                GgmlDType::Q5_1,
                GgmlDType::Q8_0,
            ],
        ),
        (
            "q3_k_s",
            &[GgmlDType::Q3K, GgmlDType::Q4_0, GgmlDType::Q8_0],
        ),
        ("q2_k", &[GgmlDType::Q2K, GgmlDType::Q4_0]),
    ] {
        let path = common::fixtures().join(format!("converter/qwen3/{kind}.gguf"));
        let content = Content::read(&mut std::fs::File::open(path).unwrap()).unwrap();
        let types: Vec<GgmlDType> = content
            .tensor_infos
            .values()
            .map(|t| t.ggml_dtype)
            .collect();
        for t in want {
            assert!(types.contains(t), "{kind}: {t:?} in {types:?}");
        }
    }
    // i-quant mixes: their type where rows are whole 256-value blocks, IQ4_NL elsewhere.
    for (kind, want) in [
        ("iq4_xs", &["IQ4_NL", "IQ4_XS"][..]),
        ("iq3_s", &["IQ3_S", "IQ4_NL"]),
        ("iq3_xxs", &["IQ3_XXS", "IQ4_NL"]),
        ("iq2_xxs", &["IQ2_XXS", "IQ4_NL"]),
        ("iq2_xs", &["IQ2_XS", "IQ4_NL"]),
        ("iq2_m", &["IQ2_S", "IQ4_NL"]),
        ("iq1_s", &["IQ1_S", "IQ4_NL"]),
        ("iq1_m", &["IQ1_M", "IQ4_NL"]),
    ] {
        let path = common::fixtures().join(format!("converter/qwen2/{kind}.gguf"));
        let files = hyoka::model::load::gguf_files::GgufFiles::open(&path).unwrap();
        let types: Vec<&str> = files.iquant_types().iter().map(|t| t.name()).collect();
        assert_eq!(types, want, "{kind}");
        // What the loaded model says it holds in other blocks (printed by the CLI): on the CPU
        // nothing, every i-quant's blocks being kept; nothing when expanded.
        use hyoka::model::load::gguf_files::GgufFiles;
        use hyoka::model::load_gguf_files;
        for mode in [WeightsMode::Stored, WeightsMode::Expanded] {
            let held: &[&str] = &[];
            let files = GgufFiles::open(&path).unwrap();
            let (_, converted) = load_gguf_files(files, DType::F32, &Device::Cpu, mode).unwrap();
            let got: Vec<&str> = converted.iter().map(|(t, _)| t.name()).collect();
            assert_eq!(got, held, "{kind} {mode:?}");
            assert!(converted.iter().all(|&(_, n)| n > 0), "{kind}");
        }
    }
}
