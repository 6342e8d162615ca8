//! Rotary position embeddings: each kind of scaling transformers and llama.cpp apply to the
//! frequencies (linear, llama3, llama.cpp's per-frequency factors, YaRN), read from config.json
//! or GGUF metadata and checked, and the frequencies they give.

use crate::model::error::ModelError;
use serde_json::Value;

/// Rotary embedding of one kind of layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    pub theta: f64,
    pub scaling: RopeScaling,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor`.
    Linear {
        factor: f64,
    },
    /// Llama 3.x frequency-dependent scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position: f64,
    },
    /// One divisor per frequency, as llama.cpp stores any frequency-dependent scaling in GGUF
    /// (`rope_freqs.weight`: Llama 3.1's llama3 factors, computed by its converter).
    Factors(Vec<f64>),
    /// YaRN (Qwen2.5/Qwen3 long-context configs): frequencies blended between interpolated
    /// (÷ factor) and kept along a ramp between the dimensions that turn `beta_fast` and
    /// `beta_slow` times over the original context; cos and sin multiplied by
    /// `attention_factor`. transformers' `_compute_yarn_parameters`, llama.cpp's `rope_yarn`.
    Yarn {
        factor: f64,
        original_max_position: f64,
        beta_fast: f64,
        beta_slow: f64,
        attention_factor: f64,
        /// Ramp ends rounded to whole dimensions (transformers' `truncate`; llama.cpp always).
        truncate: bool,
    },
}

impl Rope {
    /// The inverse frequencies (head_dim / 2 of them), after scaling: f64 here, rounded to f32
    /// once (transformers computes them in f32; the difference is within its rounding).
    pub fn frequencies(&self, head_dim: usize) -> Vec<f64> {
        let dim = head_dim as f64;
        // YaRN's ramp over frequency indices, between the dimensions where a frequency turns
        // `rotations` times over the original context (transformers' find_correction_dim,
        // llama.cpp's ggml_rope_yarn_corr_dim).
        let correction_dim = |rotations: f64, original: f64| {
            dim * (original / (rotations * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * self.theta.ln())
        };
        (0..head_dim / 2)
            .map(|i| {
                let f = 1.0 / self.theta.powf(2.0 * i as f64 / dim);
                match self.scaling {
                    RopeScaling::None => f,
                    RopeScaling::Linear { factor } => f / factor,
                    // llama.cpp: theta / freq_factors[i] (checked to have head_dim / 2 at load).
                    RopeScaling::Factors(ref factors) => f / factors[i],
                    RopeScaling::Llama3 {
                        factor,
                        low_freq_factor,
                        high_freq_factor,
                        original_max_position,
                    } => {
                        let low_wavelen = original_max_position / low_freq_factor;
                        let high_wavelen = original_max_position / high_freq_factor;
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_max_position / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    }
                    RopeScaling::Yarn {
                        factor,
                        original_max_position,
                        beta_fast,
                        beta_slow,
                        truncate,
                        ..
                    } => {
                        let (mut low, mut high) = (
                            correction_dim(beta_fast, original_max_position),
                            correction_dim(beta_slow, original_max_position),
                        );
                        if truncate {
                            (low, high) = (low.floor(), high.ceil());
                        }
                        let (low, high) = (low.max(0.0), high.min(dim - 1.0));
                        let span = if low == high { 0.001 } else { high - low };
                        // 0: the frequency kept (extrapolated); 1: divided by the factor.
                        let ramp = ((i as f64 - low) / span).clamp(0.0, 1.0);
                        f / factor * ramp + f * (1.0 - ramp)
                    }
                }
            })
            .collect()
    }

    /// What the rotary cos and sin tables are multiplied by (YaRN's attention factor, else 1).
    pub fn attention_factor(&self) -> f64 {
        match self.scaling {
            RopeScaling::Yarn {
                attention_factor, ..
            } => attention_factor,
            _ => 1.0,
        }
    }
}

/// YaRN's attention factor from its scale factor: 0.1 · mscale · ln(factor) + 1 (1 for factor ≤ 1).
fn yarn_mscale(factor: f64, mscale: f64) -> f64 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * mscale * factor.ln() + 1.0
    }
}

/// The rope scaling of a config.json (`rope_scaling`, or transformers 5's `rope_parameters`);
/// `context`: the config's top-level original_max_position_embeddings and max_position_embeddings,
/// which as in transformers give YaRN's original context (the former before the rope's own).
pub(crate) fn rope_scaling(
    p: &Value,
    context: (Option<f64>, Option<f64>),
    origin: &str,
) -> Result<RopeScaling, ModelError> {
    let kind = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let f = |k: &str, d: f64| p.get(k).and_then(Value::as_f64).unwrap_or(d);
    let unsupported = |what: String| ModelError::Unsupported {
        origin: origin.to_string(),
        what,
    };
    Ok(match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: f("factor", 1.0),
        },
        "llama3" => RopeScaling::Llama3 {
            factor: f("factor", 8.0),
            low_freq_factor: f("low_freq_factor", 1.0),
            high_freq_factor: f("high_freq_factor", 4.0),
            original_max_position: f("original_max_position_embeddings", 8192.0),
        },
        "yarn" => {
            let original = context
                .0
                .or_else(|| {
                    p.get("original_max_position_embeddings")
                        .and_then(Value::as_f64)
                })
                .or(context.1);
            let Some(factor) = p.get("factor").and_then(Value::as_f64) else {
                return Err(unsupported("yarn rope scaling without factor".into()));
            };
            let Some(original) = original else {
                return Err(unsupported(
                    "yarn rope scaling without original_max_position_embeddings".into(),
                ));
            };
            // As transformers: an explicit attention_factor, else from mscale / mscale_all_dim.
            let nonzero = |k: &str| p.get(k).and_then(Value::as_f64).filter(|v| *v != 0.0);
            let attention_factor = match (
                p.get("attention_factor").and_then(Value::as_f64),
                nonzero("mscale"),
                nonzero("mscale_all_dim"),
            ) {
                (Some(a), _, _) => a,
                (None, Some(m), Some(all)) => yarn_mscale(factor, m) / yarn_mscale(factor, all),
                _ => yarn_mscale(factor, 1.0),
            };
            yarn(
                factor,
                original,
                (nonzero("beta_fast"), nonzero("beta_slow")),
                attention_factor,
                p.get("truncate").and_then(Value::as_bool).unwrap_or(true),
            )
            .map_err(unsupported)?
        }
        other => {
            return Err(unsupported(format!(
                "rope scaling {other:?} (supported: default, linear, llama3, yarn)"
            )));
        }
    })
}

/// YaRN from a GGUF's `rope.scaling.*` keys (`get`: a key after `{arch}.`), as llama.cpp's
/// converter writes transformers' settings: the original context (default: the training
/// context), beta_fast/beta_slow when given, yarn_attn_factor for an explicit attention_factor.
/// Settings llama.cpp keeps that transformers has no equivalent for are refused when not neutral.
pub(crate) fn gguf_yarn(
    factor: Option<f64>,
    get: &dyn Fn(&str) -> Option<f64>,
    context_length: Option<usize>,
) -> Result<RopeScaling, String> {
    let factor = factor.ok_or("yarn rope scaling without rope.scaling.factor")?;
    let original = get("rope.scaling.original_context_length")
        .or(context_length.map(|c| c as f64))
        .ok_or("yarn rope scaling without rope.scaling.original_context_length")?;
    for (key, neutral) in [
        ("rope.scaling.yarn_ext_factor", 1.0),
        ("rope.scaling.yarn_log_multiplier", 0.0),
        ("rope.scaling.attn_factor", 1.0),
    ] {
        if let Some(v) = get(key).filter(|v| *v != neutral) {
            return Err(format!(
                "yarn rope scaling with {key} {v} (supported: {neutral})"
            ));
        }
    }
    let attention_factor =
        get("rope.scaling.yarn_attn_factor").unwrap_or_else(|| yarn_mscale(factor, 1.0));
    let betas = (
        get("rope.scaling.yarn_beta_fast"),
        get("rope.scaling.yarn_beta_slow"),
    );
    yarn(factor, original, betas, attention_factor, true)
}

/// YaRN's settings, checked: every number finite and positive, beta_fast above beta_slow.
fn yarn(
    factor: f64,
    original_max_position: f64,
    (beta_fast, beta_slow): (Option<f64>, Option<f64>),
    attention_factor: f64,
    truncate: bool,
) -> Result<RopeScaling, String> {
    let (beta_fast, beta_slow) = (beta_fast.unwrap_or(32.0), beta_slow.unwrap_or(1.0));
    let named = [
        ("factor", factor),
        ("original context", original_max_position),
        ("beta_fast", beta_fast),
        ("beta_slow", beta_slow),
        ("attention factor", attention_factor),
    ];
    if let Some((name, v)) = named.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
        return Err(format!(
            "yarn rope scaling with {name} {v}: must be finite and > 0"
        ));
    }
    if beta_fast <= beta_slow {
        return Err(format!(
            "yarn rope scaling with beta_fast {beta_fast} ≤ beta_slow {beta_slow}"
        ));
    }
    Ok(RopeScaling::Yarn {
        factor,
        original_max_position,
        beta_fast,
        beta_slow,
        attention_factor,
        truncate,
    })
}
