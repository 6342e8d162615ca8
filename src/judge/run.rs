//! A whole judge run: items × rubric × one or more judge models → scores.jsonl, resumable.

use super::json::{Decoding, JsonFormat, JsonJudgment, item_seed};
use super::layout::{ItemLayout, common_header, layout_item, layout_prompt};
use super::{AspectScore, JudgeError, Scorer, plan_batches};
use crate::data::Item;
use crate::model::LoadedModel;
use crate::model::device::{device_name, dtype_name};
use crate::prompt::PromptBuilder;
use crate::results::{ModelId, Provenance, ResultsError, ResultsFile, RubricId};
use crate::rubric::{OutputMode, Rubric};
use serde_json::{Map, Value, json};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Judge(#[from] JudgeError),
    #[error(transparent)]
    Results(#[from] ResultsError),
}

pub struct RunOptions {
    /// Padded tokens per forward pass.
    pub batch_tokens: usize,
    /// Longest prompt, in tokens (default: each model's context length).
    pub max_prompt_tokens: Option<usize>,
    pub overwrite: bool,
    /// Also generate greedily (up to this many tokens) after each answer prefix and parse the
    /// first integer: the peers' method, recorded next to the distribution for comparison.
    pub greedy_baseline: Option<usize>,
    /// json mode: greedy or seeded sampling of the reason (and of the integers).
    pub decoding: Decoding,
}

/// One judge's result for one item: per-aspect scores, and in json mode the reason and the
/// object it wrote.
#[derive(Clone, Debug)]
struct Judgment {
    aspects: Vec<AspectScore>,
    answer: Option<(String, String)>,
}

impl From<JsonJudgment> for Judgment {
    fn from(j: JsonJudgment) -> Self {
        Judgment {
            aspects: j.aspects,
            answer: Some((j.reason, j.text)),
        }
    }
}

/// What a run did, for the closing summary.
#[derive(Debug, Default)]
pub struct RunSummary {
    pub scored: usize,
    pub skipped_finished: usize,
    /// Error lines of an earlier run taken out of the file, their items scored again.
    pub retried: usize,
    pub failed: Vec<String>,
    /// Tokens prefilled, and what one full prompt per aspect would have needed.
    pub forward_tokens: usize,
    pub naive_tokens: usize,
    pub truncated: usize,
}

pub struct Judge<'a> {
    pub models: &'a [LoadedModel],
    pub rubric: &'a Rubric,
    pub rubric_source: &'a str,
}

impl Judge<'_> {
    pub fn provenance(&self, opts: &RunOptions) -> Provenance {
        let mut settings = Map::new();
        if self.rubric.output == OutputMode::Json {
            settings.insert("temperature".into(), json!(opts.decoding.temperature));
            if opts.decoding.temperature > 0.0 {
                settings.insert("seed".into(), json!(opts.decoding.seed));
            }
        }
        // Settings that change which items are truncated or what is written.
        if let Some(n) = opts.max_prompt_tokens {
            settings.insert("max_prompt_tokens".into(), json!(n));
        }
        if let Some(n) = opts.greedy_baseline {
            settings.insert("greedy_baseline".into(), json!(n));
        }
        let first = &self.models[0].transformer;
        // Decoding (json rubrics, greedy baselines) runs quantized kernels when weights are
        // kept as stored; prompt scores are the same either way.
        if self.rubric.output == OutputMode::Json || opts.greedy_baseline.is_some() {
            settings.insert("weights".into(), json!(first.weights_mode().name()));
        }
        Provenance {
            hyoka: crate::VERSION.into(),
            task: "judge".into(),
            rubric: Some(RubricId {
                name: self.rubric.name.clone(),
                source: self.rubric_source.into(),
                hash: self.rubric.hash(),
            }),
            models: self
                .models
                .iter()
                .map(|m| ModelId {
                    name: m.files.name.clone(),
                    revision: m.files.revision.clone(),
                    sha256: m.sha256.clone(),
                    arch: m.transformer.cfg.arch.name().into(),
                    chat_template: Some(crate::rubric::sha256_hex(
                        m.chat_template.source().as_bytes(),
                    )),
                })
                .collect(),
            dtype: dtype_name(first.dtype()).into(),
            device: device_name(first.device()),
            settings,
        }
    }

    /// Score every item not yet in `output`, appending one line per item.
    /// `progress` is called with (items done, items to do).
    pub fn run(
        &self,
        items: &[Item],
        output: &Path,
        opts: &RunOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<RunSummary, RunError> {
        let provenance = self.provenance(opts);
        let provenance_value = serde_json::to_value(&provenance).expect("provenance serialises");
        let mut file = ResultsFile::open(output, &provenance, opts.overwrite)?;
        let builder = PromptBuilder::new(self.rubric).expect("a validated rubric compiles");
        let todo: Vec<&Item> = items
            .iter()
            .filter(|i| !file.finished.contains(&i.id))
            .collect();
        let mut summary = RunSummary {
            skipped_finished: items.len() - todo.len(),
            retried: file.retried(),
            ..Default::default()
        };

        // Lay out every item for every judge first (tokenization is cheap next to the model):
        // the header shared by all items is then the same however the run is cut up.
        let mut per_model: Vec<Vec<Result<ItemLayout, String>>> = Vec::new();
        let mut headers = Vec::new();
        let mut formats: Vec<Option<JsonFormat>> = Vec::new();
        for m in self.models {
            let max = opts
                .max_prompt_tokens
                .unwrap_or(m.transformer.cfg.max_position);
            let format = match self.rubric.output {
                OutputMode::Json => Some(JsonFormat::new(self.rubric, &m.tokenizer)?),
                OutputMode::Score => None,
            };
            let layouts: Vec<Result<ItemLayout, String>> = items
                .iter()
                .map(|it| match &format {
                    Some(f) => layout_prompt(
                        &builder,
                        &m.chat_template,
                        &m.tokenizer,
                        it,
                        max,
                        f.reserve(),
                    ),
                    None => layout_item(&builder, &m.chat_template, &m.tokenizer, it, max),
                })
                .map(|l| l.map_err(|e| e.to_string()))
                .collect();
            formats.push(format);
            let ok: Vec<&ItemLayout> = layouts.iter().filter_map(|l| l.as_ref().ok()).collect();
            let header = common_header(&ok);
            headers.push(
                ok.first()
                    .map(|l| l.trunk[..header].to_vec())
                    .unwrap_or_default(),
            );
            per_model.push(layouts);
        }
        let index: std::collections::HashMap<&str, usize> = items
            .iter()
            .enumerate()
            .map(|(i, it)| (it.id.as_str(), i))
            .collect();
        let todo_idx: Vec<usize> = todo.iter().map(|it| index[it.id.as_str()]).collect();

        let scorers: Vec<Scorer> = self
            .models
            .iter()
            .zip(&headers)
            .map(|(m, h)| Scorer::new(&m.transformer, h))
            .collect::<Result<_, _>>()?;
        summary.forward_tokens += headers.iter().map(Vec::len).sum::<usize>();

        // Batches are planned on the first judge's layout; every judge scores the same chunk,
        // and its lines are written once all judges are done with it.
        let lens: Vec<usize> = todo_idx
            .iter()
            .map(|&i| {
                per_model[0][i]
                    .as_ref()
                    .map_or(1, |l| l.row_tokens(scorers[0].header_len()))
            })
            .collect();
        let plan = plan_batches(&lens, opts.batch_tokens);
        let total = todo_idx.len();
        let mut done = 0;
        progress(0, total);
        for chunk in plan {
            let chunk: Vec<usize> = chunk.into_iter().map(|k| todo_idx[k]).collect();
            // results[j][judge] = per-aspect scores, or the item's error.
            let mut results: Vec<Vec<Result<Judgment, String>>> = vec![Vec::new(); chunk.len()];
            for (m, scorer) in scorers.iter().enumerate() {
                let ok: Vec<(usize, &ItemLayout)> = chunk
                    .iter()
                    .enumerate()
                    .filter_map(|(j, &i)| per_model[m][i].as_ref().ok().map(|l| (j, l)))
                    .collect();
                let layouts: Vec<&ItemLayout> = ok.iter().map(|(_, l)| *l).collect();
                let mut scored: Vec<Judgment> = match &formats[m] {
                    Some(format) => ok
                        .iter()
                        .map(|(j, l)| {
                            let seed = item_seed(opts.decoding.seed, m, &items[chunk[*j]].id);
                            Ok(scorer.write_json(format, l, opts.decoding, seed)?.into())
                        })
                        .collect::<Result<_, JudgeError>>()?,
                    None if layouts.is_empty() => Vec::new(),
                    None => scorer
                        .score(&layouts)?
                        .into_iter()
                        .map(|aspects| Judgment {
                            aspects,
                            answer: None,
                        })
                        .collect(),
                };
                if let Some(max_new) = opts.greedy_baseline {
                    let model = &self.models[m];
                    let stop = stop_tokens(model);
                    for (l, judgment) in layouts.iter().zip(scored.iter_mut()) {
                        for (a, score) in judgment
                            .aspects
                            .iter_mut()
                            .enumerate()
                            .take(l.aspects.len())
                        {
                            let ids = scorer.greedy(l, a, max_new, &stop)?;
                            let text = model
                                .tokenizer
                                .decode(&ids, true)
                                .map_err(|e| JudgeError::Tokenizer(e.to_string()))?;
                            let valid = &l.aspects[a].scores;
                            score.greedy = Some(super::Greedy {
                                score: super::parse_score(&text, valid),
                                text,
                            });
                        }
                    }
                }
                let mut scored = scored.into_iter();
                for l in &layouts {
                    summary.forward_tokens += l.row_tokens(scorer.header_len());
                    summary.naive_tokens += l.naive_tokens;
                }
                let mut ok_iter = ok.iter().map(|(j, _)| *j).peekable();
                for (j, &i) in chunk.iter().enumerate() {
                    if ok_iter.peek() == Some(&j) {
                        ok_iter.next();
                        results[j].push(Ok(scored.next().expect("one result per layout")));
                    } else {
                        results[j].push(Err(per_model[m][i]
                            .as_ref()
                            .err()
                            .cloned()
                            .unwrap_or_default()));
                    }
                }
            }
            let mut lines = Vec::with_capacity(chunk.len());
            for (j, &i) in chunk.iter().enumerate() {
                let item = &items[i];
                let (dropped, truncated) = per_model[0][i]
                    .as_ref()
                    .map_or((0, false), |l| (l.dropped_turns, l.truncated));
                let mut line = Map::new();
                line.insert("id".into(), json!(item.id));
                match results[j].iter().find_map(|r| r.as_ref().err()) {
                    Some(err) => {
                        summary.failed.push(format!("{}: {err}", item.id));
                        line.insert("error".into(), json!(err));
                    }
                    None => {
                        let per_judge: Vec<&Judgment> = results[j]
                            .iter()
                            .map(|r| r.as_ref().expect("no error"))
                            .collect();
                        let aspects: Vec<&Vec<AspectScore>> =
                            per_judge.iter().map(|r| &r.aspects).collect();
                        line.insert("scores".into(), self.aspects_json(&mean_scores(&aspects)));
                        if per_judge.len() == 1 {
                            add_answer(&mut line, per_judge[0]);
                        } else {
                            let judges: Vec<Value> = per_judge
                                .iter()
                                .zip(self.models)
                                .map(|(r, m)| {
                                    let mut judge = Map::new();
                                    judge.insert("model".into(), json!(m.files.name));
                                    judge.insert("scores".into(), self.aspects_json(&r.aspects));
                                    add_answer(&mut judge, r);
                                    Value::Object(judge)
                                })
                                .collect();
                            line.insert("judges".into(), Value::Array(judges));
                        }
                        summary.scored += 1;
                    }
                }
                summary.truncated += usize::from(truncated);
                line.insert("dropped_turns".into(), json!(dropped));
                line.insert("truncated".into(), json!(truncated));
                line.insert("provenance".into(), provenance_value.clone());
                lines.push(Value::Object(line).to_string());
            }
            file.append(&lines)?;
            done += chunk.len();
            progress(done, total);
        }
        Ok(summary)
    }

    fn aspects_json(&self, scores: &[AspectScore]) -> Value {
        let map: Map<String, Value> = self
            .rubric
            .aspects
            .iter()
            .zip(scores)
            .map(|(a, s)| {
                (
                    a.key.clone(),
                    serde_json::to_value(s).expect("scores serialise"),
                )
            })
            .collect();
        Value::Object(map)
    }
}

/// json mode: the reason and the whole object as the judge wrote it.
fn add_answer(line: &mut Map<String, Value>, judgment: &Judgment) {
    if let Some((reason, text)) = &judgment.answer {
        line.insert("reason".into(), json!(reason));
        line.insert("answer".into(), json!(text));
    }
}

/// Tokens that end an answer: the model's eos and the usual end-of-turn markers.
fn stop_tokens(model: &LoadedModel) -> Vec<u32> {
    let mut names: Vec<String> = model
        .chat_template
        .special_tokens()
        .get("eos_token")
        .cloned()
        .into_iter()
        .collect();
    names.extend(
        [
            "<|im_end|>",
            "<|endoftext|>",
            "<end_of_turn>",
            "<|eot_id|>",
            "</s>",
        ]
        .map(String::from),
    );
    names
        .iter()
        .filter_map(|n| model.tokenizer.token_to_id(n))
        .collect()
}

/// Several judges' results averaged: mean distribution, its argmax and expectation.
fn mean_scores(per_judge: &[&Vec<AspectScore>]) -> Vec<AspectScore> {
    if per_judge.len() == 1 {
        return per_judge[0].clone();
    }
    let n = per_judge.len() as f64;
    (0..per_judge[0].len())
        .map(|a| {
            let scores: Vec<i64> = per_judge[0][a]
                .distribution
                .keys()
                .map(|k| k.parse().expect("score keys are integers"))
                .collect();
            let mut dist = vec![0.0; scores.len()];
            let mut off = 0.0;
            for j in per_judge {
                for (d, p) in dist.iter_mut().zip(j[a].probabilities()) {
                    *d += p / n;
                }
                off += j[a].off_scale / n;
            }
            AspectScore::from_distribution(&scores, &dist, off)
        })
        .collect()
}
