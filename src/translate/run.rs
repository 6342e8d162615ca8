//! A translation run end to end: items → distinct texts → the store (resumed) → translated
//! items. What `hyoka translate` and `hyoka eval --translate` run.

use super::task::{TranslateOptions, Translator};
use super::texts::{distinct_texts, read_store, translated_items, translations_in};
use super::{TranslateError, TranslatePrompt};
use crate::data::Item;
use crate::model::LoadedModel;
use crate::results::runner::{self, RunError, RunSummary, ScoreTask};
use crate::results::{Progress, Provenance};
use std::path::Path;

/// What a translation run did.
pub struct TranslationRun {
    /// Per distinct text (the store's units).
    pub summary: RunSummary,
    /// The texts to translate, and the tokens this run wrote for them.
    pub texts: usize,
    pub tokens_written: usize,
    pub provenance: Provenance,
    /// Translations cut at their limit and kept (keep_unfinished).
    pub cut: usize,
    /// Translations in the store cut at their limit by a run that kept them, not used by this
    /// one (without keep_unfinished): their texts count as without a translation.
    pub cut_in_store: usize,
    /// The translated items, or the texts still without a translation (each once): nothing is
    /// returned for the items until every text has one.
    pub items: Result<Vec<Item>, Vec<String>>,
}

/// Translate every text of `items` not yet in the store `store` (continued when it holds lines
/// of the same run), then rebuild the items from the store's translations.
pub fn translate_items(
    model: &LoadedModel,
    prompt: &TranslatePrompt,
    opts: TranslateOptions,
    items: &[Item],
    store: &Path,
    progress: &mut Progress<'_>,
) -> Result<TranslationRun, RunError<TranslateError>> {
    translate(model, prompt, opts, items, Some(store), progress)
}

/// `translate_items` in memory: no store read or written (a killed call starts again).
pub fn translate_in_memory(
    model: &LoadedModel,
    prompt: &TranslatePrompt,
    opts: TranslateOptions,
    items: &[Item],
    progress: &mut Progress<'_>,
) -> Result<TranslationRun, RunError<TranslateError>> {
    translate(model, prompt, opts, items, None, progress)
}

fn translate(
    model: &LoadedModel,
    prompt: &TranslatePrompt,
    opts: TranslateOptions,
    items: &[Item],
    store: Option<&Path>,
    progress: &mut Progress<'_>,
) -> Result<TranslationRun, RunError<TranslateError>> {
    let texts = distinct_texts(items).map_err(RunError::Task)?;
    let mut translator = Translator::new(model, prompt, opts);
    let provenance = translator.provenance();
    let (summary, mut translations) = match store {
        Some(store) => {
            let summary = runner::run(&mut translator, &texts, store, false, progress)?;
            (summary, read_store(store, &provenance)?)
        }
        None => {
            let (summary, lines) = runner::run_in_memory(&mut translator, &texts, progress)?;
            let origin = Path::new("translations in memory");
            let translations =
                translations_in(lines.iter().map(String::as_str), origin, &provenance)?;
            (summary, translations)
        }
    };
    // A translation cut at its limit is one only where cut ones are asked for: a store that an
    // earlier run with keep_unfinished filled is read by this one as texts without one.
    let cut_in_store = if opts.keep_unfinished {
        0
    } else {
        let before = translations.len();
        translations.retain(|_, t| t.finished);
        before - translations.len()
    };
    let cut = translations.values().filter(|t| !t.finished).count();
    let by = serde_json::to_value(&provenance).expect("provenance serialises");
    Ok(TranslationRun {
        summary,
        cut,
        cut_in_store,
        texts: texts.len(),
        tokens_written: translator.tokens_written,
        items: translated_items(items, &translations, (&prompt.from, &prompt.to), &by),
        provenance,
    })
}
