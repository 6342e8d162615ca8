//! A translation run as a scorer of the results layer: texts planned into batches of prompts,
//! each batch decoded greedily together (`model::decoder::generate::greedy_batch`).

use super::TranslateError;
use super::prompt::TranslatePrompt;
use super::texts::Text;
use crate::model::decoder::generate::greedy_batch;
use crate::model::tokenizer::TextFit;
use crate::model::{LoadedModel, PrefixKv};
use crate::results::record::TranslationRecord;
use crate::results::runner::{Outcome, ScoreTask};
use crate::results::{Body, Provenance, Task};
use serde_json::{Map, json};
use std::collections::HashMap;

/// Memory the keys and values of one batch of prompts may take unless told otherwise.
pub const DEFAULT_CACHE_BYTES: usize = 2 << 30;

/// How texts are translated; every setting that changes a translation is in the provenance.
#[derive(Clone, Copy, Debug)]
pub struct TranslateOptions {
    /// Most tokens a translation may take; None: 16 + 4 × the text's own tokens.
    pub max_new_tokens: Option<usize>,
    /// Memory for the keys and values of the prompts decoded together (at least one).
    pub cache_bytes: usize,
    /// Most prompts decoded together.
    pub max_rows: usize,
    /// Keep a translation cut at its limit (marked unfinished) instead of failing its text. It
    /// changes no translation, only whether a cut one is accepted, so it is not in the
    /// provenance: a rerun with it accepts what a run without it failed.
    pub keep_unfinished: bool,
}

impl Default for TranslateOptions {
    fn default() -> Self {
        TranslateOptions {
            max_new_tokens: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
            max_rows: 32,
            keep_unfinished: false,
        }
    }
}

/// One text's prompt, ready to decode.
struct Prepared {
    /// The prompt's tokens, the header's included.
    tokens: Vec<u32>,
    limit: usize,
    /// Whether the prompt starts with the header (else it is decoded without it).
    headed: bool,
}

/// Translates texts with one model and one prompt.
pub struct Translator<'m> {
    model: &'m LoadedModel,
    prompt: &'m TranslatePrompt,
    opts: TranslateOptions,
    stop: Vec<u32>,
    /// The tokens every prompt of this template starts with, computed once per run.
    header: Vec<u32>,
    header_kv: Option<PrefixKv>,
    prepared: HashMap<usize, Result<Prepared, String>>,
    /// Tokens written so far by this run.
    pub tokens_written: usize,
}

impl<'m> Translator<'m> {
    pub fn new(
        model: &'m LoadedModel,
        prompt: &'m TranslatePrompt,
        opts: TranslateOptions,
    ) -> Self {
        Translator {
            model,
            prompt,
            opts,
            stop: model.stop_tokens(),
            header: Vec::new(),
            header_kv: None,
            prepared: HashMap::new(),
            tokens_written: 0,
        }
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, TranslateError> {
        self.model
            .tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TranslateError::Tokenizer(e.to_string()))
    }

    /// The tokens every prompt of the template shares, whatever its text: the longest common
    /// start of prompts for unlike probe texts, less one token (a text's first characters may
    /// merge with what precedes them). It depends on the template only, so a text is decoded
    /// the same way in any run.
    fn template_header(&self) -> Result<Vec<u32>, TranslateError> {
        let template = &self.model.chat_template;
        let probes = ["a", "\u{3042}", "1", "\"", " "]
            .iter()
            .map(|t| self.encode(&self.prompt.render(template, t)?))
            .collect::<Result<Vec<_>, _>>()?;
        let first = &probes[0];
        let common = (0..first.len())
            .take_while(|&i| probes.iter().all(|p| p.get(i) == Some(&first[i])))
            .count();
        Ok(first[..common.saturating_sub(1)].to_vec())
    }

    fn prepare(
        &self,
        text: &str,
        fit: &TextFit,
    ) -> Result<Result<Prepared, String>, TranslateError> {
        if text.len() > fit.max_bytes {
            return Ok(Err(format!(
                "the text is {} bytes, more than a prompt of {} tokens (the model's context) can hold; not tokenized",
                text.len(),
                fit.max_tokens
            )));
        }
        let tokens = self.encode(&self.prompt.render(&self.model.chat_template, text)?)?;
        let limit = match self.opts.max_new_tokens {
            Some(n) => n,
            None => 16 + 4 * self.encode(text)?.len(),
        };
        if tokens.len() + limit > fit.max_tokens {
            return Ok(Err(format!(
                "the prompt takes {} tokens and its translation up to {limit} more, beyond the model's context of {} tokens",
                tokens.len(),
                fit.max_tokens
            )));
        }
        let headed = tokens.len() > self.header.len() && tokens.starts_with(&self.header);
        Ok(Ok(Prepared {
            tokens,
            limit,
            headed,
        }))
    }
}

impl ScoreTask for Translator<'_> {
    type Error = TranslateError;
    type Unit = Text;

    fn provenance(&self) -> Provenance {
        let mut settings = Map::new();
        settings.insert("prompt".into(), json!(self.prompt.name));
        settings.insert("prompt_sha256".into(), json!(self.prompt.hash()));
        settings.insert("from".into(), json!(self.prompt.from));
        settings.insert("to".into(), json!(self.prompt.to));
        settings.insert("decoding".into(), json!("greedy"));
        settings.insert(
            "max_new_tokens".into(),
            match self.opts.max_new_tokens {
                Some(n) => json!(n),
                None => json!("16 + 4 x the text's tokens"),
            },
        );
        self.model.settings().record(true, &mut settings);
        Provenance::of_models(
            Task::Translate,
            None,
            std::slice::from_ref(self.model),
            settings,
        )
    }

    fn plan(&mut self, texts: &[Text], todo: &[usize]) -> Result<Vec<Vec<usize>>, TranslateError> {
        if todo.is_empty() {
            return Ok(Vec::new());
        }
        let t = &self.model.transformer;
        self.header = self.template_header()?;
        if !self.header.is_empty() {
            self.header_kv = Some(t.prefix(&self.header)?);
        }
        let fit = TextFit::new(&self.model.tokenizer, t.cfg.max_position);
        let mut failed = Vec::new();
        // Headed prompts, then the others: each group's batches share how they start.
        let mut groups: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
        for &i in todo {
            let prepared = self.prepare(&texts[i].text, &fit)?;
            match &prepared {
                Ok(p) => groups[usize::from(!p.headed)].push(i),
                Err(_) => failed.push(vec![i]),
            }
            self.prepared.insert(i, prepared);
        }
        let slot = t.kv_bytes_per_slot().max(1);
        let mut chunks = failed;
        for (g, group) in groups.iter_mut().enumerate() {
            let skip = if g == 0 { self.header.len() } else { 0 };
            let need = |i: &usize| match &self.prepared[i] {
                Ok(p) => p.tokens.len() - skip + p.limit,
                Err(_) => 0,
            };
            // Longest first: a batch's rows are about as long as each other.
            group.sort_by_key(|i| (std::cmp::Reverse(need(i)), *i));
            let mut current: Vec<usize> = Vec::new();
            for &i in group.iter() {
                let longest = current.first().map_or(need(&i), need);
                let rows = (self.opts.cache_bytes / (slot * longest)).clamp(1, self.opts.max_rows);
                if current.len() >= rows {
                    chunks.push(std::mem::take(&mut current));
                }
                current.push(i);
            }
            if !current.is_empty() {
                chunks.push(current);
            }
        }
        Ok(chunks)
    }

    fn score(&mut self, texts: &[Text], chunk: &[usize]) -> Result<Vec<Outcome>, TranslateError> {
        let ready: Vec<(usize, &Prepared)> = chunk
            .iter()
            .filter_map(|i| self.prepared[i].as_ref().ok().map(|p| (*i, p)))
            .collect();
        let mut written = HashMap::new();
        if let Some((_, first)) = ready.first() {
            let (header, skip) = match first.headed {
                true => (self.header_kv.as_ref(), self.header.len()),
                false => (None, 0),
            };
            let prompts: Vec<&[u32]> = ready.iter().map(|(_, p)| &p.tokens[skip..]).collect();
            let limits: Vec<usize> = ready.iter().map(|(_, p)| p.limit).collect();
            crate::heap::release_freed_memory();
            let generated = greedy_batch(
                &self.model.transformer,
                header,
                &prompts,
                &limits,
                &self.stop,
            )?;
            for ((i, _), g) in ready.iter().zip(generated) {
                written.insert(*i, g);
            }
        }
        let mut out = Vec::with_capacity(chunk.len());
        for i in chunk {
            let outcome = match (&self.prepared[i], written.remove(i)) {
                (Err(why), _) => Outcome::Failed(why.clone()),
                (Ok(p), Some(g)) if !g.finished && !self.opts.keep_unfinished => {
                    Outcome::Failed(format!(
                        "the translation did not end within {} tokens (a model that repeats itself never ends: raise the limit, translate with another model, or keep it cut, marked unfinished)",
                        p.limit
                    ))
                }
                (Ok(_), Some(g)) => {
                    self.tokens_written += g.tokens.len();
                    let text = self
                        .model
                        .tokenizer
                        .decode(&g.tokens, true)
                        .map_err(|e| TranslateError::Tokenizer(e.to_string()))?;
                    Outcome::Scored(Body::Translation(TranslationRecord {
                        source: texts[*i].text.clone(),
                        text: text.trim().to_string(),
                        tokens: g.tokens.len(),
                        finished: g.finished,
                    }))
                }
                (Ok(_), None) => unreachable!("every ready text is decoded"),
            };
            out.push(outcome);
        }
        Ok(out)
    }
}
