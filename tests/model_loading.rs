//! Loading judge models the ways users name them: a folder, sharded safetensors, a Hugging Face
//! id read from a copied hub cache with HF_HUB_OFFLINE=1, checksums, and the errors for what is
//! missing or unsupported.

mod common;

use candle_core::{DType, Device};
use hyoka::model::load::source::{Format, resolve, verify_sha256};
use hyoka::model::load_safetensors_dir;
use hyoka::model::{Batch, ModelError};
use std::path::Path;

fn tiny(arch: &str) -> std::path::PathBuf {
    common::fixtures().join("tiny").join(arch)
}

fn last_logits(dir: &Path) -> Vec<f32> {
    let m = load_safetensors_dir(dir, DType::F32, &Device::Cpu, Default::default()).unwrap();
    let ids = vec![5u32, 9, 17, 3];
    let b = Batch::new(std::slice::from_ref(&ids), 0, m.device()).unwrap();
    let h = m.forward(&b, None).unwrap();
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

    // A shard of a split GGUF, in a folder of the repository as some repositories keep them,
    // brings its other shards; one not in the cache is named.
    let split_repo = home
        .path()
        .join("hub")
        .join("models--hyoka-test--split-gguf");
    let split_snap = split_repo.join("snapshots").join(commit).join("Q4_K_M");
    std::fs::create_dir_all(&split_snap).unwrap();
    std::fs::create_dir_all(split_repo.join("refs")).unwrap();
    std::fs::write(split_repo.join("refs").join("main"), commit).unwrap();
    let shards = split_shards();
    for shard in &shards[..2] {
        std::fs::copy(shard, split_snap.join(shard.file_name().unwrap())).unwrap();
    }
    let name = "hyoka-test/split-gguf:Q4_K_M/q4_k_m-00001-of-00003.gguf";
    let err = resolve(name).unwrap_err().to_string();
    assert!(
        err.contains("Q4_K_M/q4_k_m-00003-of-00003.gguf is not in the Hugging Face cache"),
        "{err}"
    );
    std::fs::copy(&shards[2], split_snap.join(shards[2].file_name().unwrap())).unwrap();
    let files = resolve(name).unwrap();
    assert_eq!(files.format, Format::Gguf);
    assert_eq!(files.revision.as_deref(), Some(commit));
    assert_eq!(files.path, split_snap.join("q4_k_m-00001-of-00003.gguf"));
    let model = hyoka::model::load_gguf(&files.path, DType::F32, &Device::Cpu, Default::default());
    assert!(model.is_ok(), "{:?}", model.err());
    // A quantization tag instead of a file name, as llama.cpp's -hf takes it.
    let by_tag = resolve("hyoka-test/split-gguf:q4_k_m").unwrap();
    assert_eq!(by_tag.path, files.path);
    let err = resolve("hyoka-test/split-gguf:Q8_0")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no .gguf file names Q8_0")
            && err.contains("Q4_K_M/q4_k_m-00001-of-00003.gguf"),
        "{err}"
    );
    // A GGUF repository named as if it were a checkpoint: what to name instead.
    let err = resolve("hyoka-test/split-gguf").unwrap_err().to_string();
    assert!(
        err.contains("a repository of GGUF files")
            && err.contains("hyoka-test/split-gguf:TAG")
            && err.contains("Q4_K_M/q4_k_m-00001-of-00003.gguf"),
        "{err}"
    );
}

/// The qwen2 converter fixture's q4_k_m file split into 3 shards by llama.cpp's llama-gguf-split
/// (scripts/fixtures/make_split_gguf_fixtures.py).
fn split_shards() -> Vec<std::path::PathBuf> {
    let dir = common::fixtures().join("converter/qwen2/split");
    (1..=3)
        .map(|k| dir.join(format!("q4_k_m-{k:05}-of-00003.gguf")))
        .collect()
}

/// A split GGUF loads whole or not at all: a missing shard, a shard of another file under its
/// name, a shard renamed out of llama-gguf-split's naming — each named, with what to do. Its
/// sha256 is of its shards' bytes in order (`cat … | sha256sum`), checked by --sha256.
#[test]
fn split_ggufs_name_what_is_missing_mixed_or_renamed() {
    let shards = split_shards();
    let load = |p: &Path| {
        hyoka::model::load_gguf(p, DType::F32, &Device::Cpu, Default::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let dir = tempfile::tempdir().unwrap();
    let at = |k: usize| dir.path().join(shards[k].file_name().unwrap());
    std::fs::copy(&shards[0], at(0)).unwrap();
    std::fs::copy(&shards[2], at(2)).unwrap();
    let err = load(&at(2));
    assert!(
        err.contains("shard 2 of 3") && err.contains(&at(1).display().to_string()),
        "{err}"
    );
    std::fs::copy(&shards[0], at(1)).unwrap();
    let err = load(&at(0));
    assert!(err.contains("is not shard 2 of 3"), "{err}");
    let renamed = dir.path().join("model.gguf");
    std::fs::copy(&shards[0], &renamed).unwrap();
    let err = load(&renamed);
    assert!(
        err.contains("not named PREFIX-00001-of-00003.gguf")
            && err.contains("llama-gguf-split --merge"),
        "{err}"
    );

    let mut all = Vec::new();
    for shard in &shards {
        all.extend(std::fs::read(shard).unwrap());
    }
    let expected = hyoka::checksum::sha256_hex(&all);
    // The fixture carries no chat template.
    let template = dir.path().join("template.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    )
    .unwrap();
    let load_checked = |sha: Option<&str>| {
        hyoka::model::LoadedModel::load(
            &hyoka::model::ModelRequest {
                chat_template: Some(&template),
                expect_sha256: sha,
                ..hyoka::model::ModelRequest::new(shards[1].to_str().unwrap())
            },
            &Device::Cpu,
            &hyoka::model::RuntimeSettings::new(DType::F32),
        )
    };
    let model = load_checked(Some(&expected)).unwrap();
    assert_eq!(model.sha256, expected);
    let Err(err) = load_checked(Some(&"0".repeat(64))) else {
        panic!("a wrong sha256 passed")
    };
    assert!(
        err.to_string().contains("and its other 2 shards, in order"),
        "{err}"
    );
}

/// Files in types hyoka does not read (llama.cpp's ternary TQ2_0 here; scripts/
/// make_split_gguf_fixtures.py) are refused naming each type, a tensor of it, and what to take
/// instead. (i-quant files load: tests/suite/gguf_converter.rs.)
#[test]
fn files_of_other_types_are_refused_naming_them() {
    let path = common::fixtures().join("converter/qwen2/tq2_0.gguf");
    let Err(err) = hyoka::model::load_gguf(&path, DType::F32, &Device::Cpu, Default::default())
    else {
        panic!("a TQ2_0 file loaded")
    };
    assert!(matches!(err, ModelError::Unsupported { .. }), "{err}");
    let err = err.to_string();
    for want in [
        "TQ2_0 (GGML type 35) in 2 tensors",
        "first blk.",
        "IQ4_XS",
        "Q4_K_M",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
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
