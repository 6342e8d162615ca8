//! The files of a checkpoint: a safetensors folder's shards, a GGUF's header.

use crate::model::error::ModelError;
use crate::model::load::gguf_files::GgufFiles;
use candle_core::quantized::gguf_file;
use std::path::{Path, PathBuf};

/// The file whose sha256 identifies a checkpoint folder: model.safetensors, or the shard index.
pub fn checkpoint_id_file(dir: &Path) -> Result<PathBuf, ModelError> {
    let main = safetensors_files(dir)?;
    Ok(if main.len() == 1 {
        main[0].clone()
    } else {
        dir.join("model.safetensors.index.json")
    })
}

/// The safetensors files of a checkpoint folder (single file or sharded).
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).map_err(|_| ModelError::Missing {
        origin: dir.display().to_string(),
        message: "no model.safetensors or model.safetensors.index.json".into(),
    })?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Config {
        origin: index.display().to_string(),
        field: String::new(),
        message: format!("not valid JSON: {e}"),
    })?;
    let mut files: Vec<PathBuf> = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| ModelError::Config {
            origin: index.display().to_string(),
            field: "weight_map".into(),
            message: "missing".into(),
        })?
        .values()
        .filter_map(|v| v.as_str())
        .map(|f| dir.join(f))
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Read a GGUF model's header: metadata and tensor descriptions (of every shard of a split one).
pub fn read_gguf(path: &Path) -> Result<gguf_file::Content, ModelError> {
    Ok(GgufFiles::open(path)?.content)
}
