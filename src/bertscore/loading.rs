//! An encoder for BERTScore as a user names it — a model, or bert_score's default for a
//! language, never another in its place — and the rescaling baseline for it.

use super::{BertScoreError, BertScorer, Depth, LoadedScorer, baseline, defaults};
use crate::model::ModelError;
use crate::model::load::default_model::{HoldsModelError, ModelKind, load_default};
use crate::results::prf::Prf;
use candle_core::{DType, Device};
use std::path::Path;

impl HoldsModelError for BertScoreError {
    fn model_error(&self) -> Option<&ModelError> {
        match self {
            BertScoreError::Model(e) => Some(e),
            _ => None,
        }
    }
}

/// The encoder `model` (a folder, a Hub id or one of bert_score's bare names), or else
/// bert_score's encoder for `lang` from the Hub or its cache: never another in its place.
/// `flag` is how the caller names the encoder (`--bertscore-model` in eval, `model_type=` in
/// Python), which the advice for a default that cannot be had tells the user to pass.
pub fn load_encoder(
    model: Option<&str>,
    lang: &str,
    depth: Depth,
    dtype: DType,
    device: &Device,
    flag: &str,
) -> Result<LoadedScorer, BertScoreError> {
    // Its errors name the model's files or repository.
    let load = |name: &str| BertScorer::load(name, depth, dtype, device);
    match model {
        Some(name) => {
            eprintln!("loading {name} ...");
            load(name)
        }
        None => {
            let name = defaults::encoder_for_lang(lang);
            let repo = defaults::hub_repository(name).unwrap_or(name);
            let layer = defaults::default_layer(name)
                .map(|l| format!(", layer {l}"))
                .unwrap_or_default();
            load_default(
                &format!(
                    "the default encoder for lang {lang}, bert_score's {name} ({repo} on the Hugging Face Hub{layer})"
                ),
                repo,
                ModelKind::Encoder,
                flag,
                load,
            )
        }
    }
}

/// The rescaling baseline at the encoder's layer, and where it is from: a file in bert_score's
/// format, or with `rescale` the one shipped for (`lang`, the encoder). None: no rescaling.
pub fn resolve_baseline(
    file: Option<&Path>,
    rescale: bool,
    lang: Option<&str>,
    loaded: &LoadedScorer,
) -> Result<Option<(String, Prf)>, BertScoreError> {
    if let Some(p) = file {
        return Ok(Some((
            p.display().to_string(),
            baseline::read_layer(p, loaded.layer)?,
        )));
    }
    if !rescale {
        return Ok(None);
    }
    let lang = lang.ok_or_else(|| ModelError::Setting {
        flag: "--rescale".into(),
        message: "needs --lang: the shipped baselines are per language".into(),
    })?;
    let shipped = baseline::builtin_baseline(lang, &loaded.model.name).ok_or_else(|| {
        BertScoreError::NoBaseline {
            model: loaded.model.name.clone(),
            lang: lang.to_string(),
            shipped: baseline::builtin_baselines().join(", "),
        }
    })?;
    Ok(Some((shipped.source.clone(), shipped.layer(loaded.layer)?)))
}
