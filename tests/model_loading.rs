//! Loading judge models the ways users name them: a folder, sharded safetensors, a Hugging Face
//! id read from a copied hub cache with HF_HUB_OFFLINE=1, checksums, and the errors for what is
//! missing or unsupported.

mod common;

use candle_core::{DType, Device};
use hyoka::model::source::{Format, resolve, verify_sha256};
use hyoka::model::{Batch, ModelError, load_safetensors_dir};
use std::path::Path;

fn tiny(arch: &str) -> std::path::PathBuf {
    common::fixtures().join("tiny").join(arch)
}

fn last_logits(dir: &Path) -> Vec<f32> {
    let m = load_safetensors_dir(dir, DType::F32, &Device::Cpu, Default::default()).unwrap();
    let ids = vec![5u32, 9, 17, 3];
    let b = Batch::new(std::slice::from_ref(&ids), 0, m.device()).unwrap();
    let (h, _) = m.forward(&b, None).unwrap();
    m.logits_at(&h, &[(0, 3)], None)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap()
        .remove(0)
}

#[test]
fn sharded_checkpoints_load_like_single_files() {
    let dir = tempfile::tempdir().unwrap();
    let src = tiny("qwen2");
    std::fs::copy(src.join("config.json"), dir.path().join("config.json")).unwrap();
    // Split the tensors over two shards with an index, as transformers writes large models.
    let tensors =
        candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).unwrap();
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let (a, b) = names.split_at(names.len() / 2);
    let mut map = serde_json::Map::new();
    for (shard, part) in [
        ("model-00001-of-00002.safetensors", a),
        ("model-00002-of-00002.safetensors", b),
    ] {
        let sub: std::collections::HashMap<String, candle_core::Tensor> = part
            .iter()
            .map(|n| ((*n).clone(), tensors[*n].clone()))
            .collect();
        candle_core::safetensors::save(&sub, dir.path().join(shard)).unwrap();
        for n in part.iter() {
            map.insert((*n).clone(), serde_json::json!(shard));
        }
    }
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        serde_json::json!({"weight_map": map}).to_string(),
    )
    .unwrap();
    assert_eq!(last_logits(dir.path()), last_logits(&src));
}

#[test]
fn hub_ids_resolve_from_a_copied_cache_offline() {
    let home = tempfile::tempdir().unwrap();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let repo = home
        .path()
        .join("hub")
        .join("models--hyoka-test--tiny-llama");
    let snap = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join("main"), commit).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(tiny("llama").join(f), snap.join(f)).unwrap();
    }
    // A checkpoint's tokenizer files are fetched too; the tiny model has none, so stand-ins.
    std::fs::write(snap.join("tokenizer.json"), "{}").unwrap();
    std::fs::write(snap.join("tokenizer_config.json"), "{}").unwrap();
    // SAFETY (test): this test is the only one touching these variables.
    unsafe {
        std::env::set_var("HF_HOME", home.path());
        std::env::set_var("HF_HUB_OFFLINE", "1");
    }
    let files = resolve("hyoka-test/tiny-llama").unwrap();
    assert_eq!(files.format, Format::Safetensors);
    assert_eq!(files.revision.as_deref(), Some(commit));
    assert_eq!(last_logits(&files.path), last_logits(&tiny("llama")));
    let err = resolve("hyoka-test/not-there").unwrap_err().to_string();
    assert!(
        err.contains("not in the Hugging Face cache") && err.contains("HF_HUB_OFFLINE"),
        "{err}"
    );
}

#[test]
fn clear_errors_for_missing_unsupported_and_mismatched() {
    let err = resolve("./no/such/model").unwrap_err().to_string();
    assert!(err.contains("no such file or folder"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"model_type": "gpt_neox", "hidden_size": 8}"#,
    )
    .unwrap();
    let Err(err) = load_safetensors_dir(dir.path(), DType::F32, &Device::Cpu, Default::default())
    else {
        panic!("gpt_neox loaded")
    };
    assert!(matches!(err, ModelError::Unsupported { .. }), "{err}");
    assert!(
        err.to_string().contains("architecture \"gpt_neox\""),
        "{err}"
    );

    let weights = tiny("llama").join("model.safetensors");
    let err = verify_sha256(&weights, &"0".repeat(64))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sha256") && err.contains("expected 0000"),
        "{err}"
    );
}
