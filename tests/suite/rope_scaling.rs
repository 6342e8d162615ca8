//! Rope scaling read from config.json against transformers: the inverse frequencies and the
//! attention factor its `ROPE_INIT_FUNCTIONS` compute for YaRN (Qwen2.5's long-context setting,
//! betas, no truncation, an explicit attention_factor, mscale / mscale_all_dim, a top-level
//! original context, the older `rope_scaling` key), llama3 and linear
//! (fixtures: scripts/fixtures/make_rope_fixtures.py). GGUF files with YaRN: tests/suite/gguf_converter.rs.

use crate::common;

use hyoka::model::TransformerConfig;
use serde_json::Value;

#[test]
fn rope_scaling_matches_transformers() {
    let path = common::fixtures().join("rope").join("scaling.json");
    let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(cases.len(), 8);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let cfg = TransformerConfig::from_hf(&case["config"], name).unwrap();
        let rope = &cfg.ropes[0];
        let expected: Vec<f64> = serde_json::from_value(case["inv_freq"].clone()).unwrap();
        let got = rope.frequencies(cfg.head_dim);
        assert_eq!(got.len(), expected.len(), "{name}");
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            // transformers computes in f32: within a few of its ulps.
            let rel = (g - e).abs() / e.abs();
            assert!(
                rel < 1e-6,
                "{name}: frequency {i}: {g} vs transformers {e} (rel {rel:.1e})"
            );
        }
        let (g, e) = (
            rope.attention_factor(),
            case["attention_factor"].as_f64().unwrap(),
        );
        assert!(
            (g - e).abs() < 1e-12,
            "{name}: attention factor {g} vs transformers {e}"
        );
    }
}

/// Settings transformers could not compute with are refused by name, not guessed.
#[test]
fn broken_yarn_settings_are_refused() {
    let base = serde_json::json!({
        "model_type": "qwen2", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 1, "num_attention_heads": 4, "max_position_embeddings": 4096,
    });
    for (rope, says) in [
        (
            serde_json::json!({"rope_type": "yarn", "original_max_position_embeddings": 64}),
            "without factor",
        ),
        (
            serde_json::json!({"rope_type": "yarn", "factor": -2.0}),
            "factor -2",
        ),
        (
            serde_json::json!({"rope_type": "yarn", "factor": 4.0, "beta_fast": 1.0, "beta_slow": 2.0}),
            "beta_fast 1",
        ),
        (
            serde_json::json!({"rope_type": "longrope", "factor": 4.0}),
            "\"longrope\"",
        ),
    ] {
        let mut cfg = base.clone();
        cfg["rope_scaling"] = rope;
        let err = TransformerConfig::from_hf(&cfg, "config.json")
            .expect_err("refused")
            .to_string();
        assert!(err.contains(says) && err.contains("config.json"), "{err}");
    }
}

/// YaRN settings of a GGUF (llama.cpp's converter's qwen2-yarn fixture, its metadata edited):
/// transformers' settings are read; llama.cpp-only ones that change the numbers are refused by
/// key unless neutral; no original context falls back to the training context, as llama.cpp.
#[test]
fn gguf_yarn_settings() {
    use candle_core::quantized::gguf_file::{Content, Value as Meta};
    use hyoka::model::load::rope::RopeScaling;
    let path = common::fixtures().join("converter/qwen2-yarn/f16.gguf");
    let original = Content::read(&mut std::fs::File::open(path).unwrap()).unwrap();
    let with = |edits: &[(&str, Option<Meta>)]| {
        let mut ct = Content {
            magic: original.magic,
            metadata: original.metadata.clone(),
            tensor_infos: Default::default(),
            tensor_data_offset: original.tensor_data_offset,
        };
        for (key, value) in edits {
            let key = format!("qwen2.rope.scaling.{key}");
            match value {
                Some(v) => ct.metadata.insert(key, v.clone()),
                None => ct.metadata.remove(&key),
            };
        }
        TransformerConfig::from_gguf(&ct, 100, "model.gguf").map(|c| c.ropes[0].scaling.clone())
    };
    let Ok(RopeScaling::Yarn {
        factor,
        original_max_position,
        beta_fast,
        beta_slow,
        attention_factor,
        truncate,
    }) = with(&[])
    else {
        panic!("yarn expected")
    };
    assert_eq!(
        (
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            truncate
        ),
        (4.0, 64.0, 32.0, 1.0, true)
    );
    assert!((attention_factor - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-12);
    let Ok(RopeScaling::Yarn {
        original_max_position,
        beta_fast,
        attention_factor,
        ..
    }) = with(&[
        ("original_context_length", None),
        ("yarn_beta_fast", Some(Meta::F32(16.0))),
        ("yarn_attn_factor", Some(Meta::F32(1.25))),
    ])
    else {
        panic!("yarn expected")
    };
    assert_eq!(
        (original_max_position, beta_fast, attention_factor),
        (4096.0, 16.0, 1.25)
    );
    for (edit, says) in [
        (("yarn_ext_factor", Meta::F32(0.5)), "yarn_ext_factor 0.5"),
        (
            ("yarn_log_multiplier", Meta::F32(0.1)),
            "yarn_log_multiplier",
        ),
        (("attn_factor", Meta::F32(2.0)), "attn_factor 2"),
        (("factor", Meta::F32(-1.0)), "factor -1"),
        (("type", Meta::String("longrope".into())), "\"longrope\""),
    ] {
        let err = with(&[(edit.0, Some(edit.1))])
            .expect_err("refused")
            .to_string();
        assert!(err.contains(says) && err.contains("model.gguf"), "{err}");
    }
    // Neutral values of llama.cpp's own settings are accepted.
    assert!(
        with(&[
            ("yarn_ext_factor", Some(Meta::F32(1.0))),
            ("attn_factor", Some(Meta::F32(1.0)))
        ])
        .is_ok()
    );
}
