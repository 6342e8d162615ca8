//! A whole judge run: items × rubric × one or more judge models → scores.jsonl, resumable.

use super::json::{Decoding, JsonFormat, JsonJudgment, item_seed};
use super::layout::{ItemLayout, common_header, layout_item, layout_prompt};
use super::{JudgeError, Scorer};
use crate::data::Item;
use crate::model::LoadedModel;
use crate::model::plan_batches;
use crate::model::tokenizer::TextFit;
use crate::prompt::PromptBuilder;
use crate::results::record::{Answer, JudgeAnswer};
use crate::results::runner::{self, Outcome, RunError, RunSummary, ScoreTask};
use crate::results::scores::{AspectScore, Greedy};
use crate::results::{Body, JudgeRecord, Provenance, RubricId, Task};
use crate::rubric::{OutputMode, Rubric};
use serde_json::{Map, json};
use std::path::Path;

#[derive(Clone, Debug)]
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
    /// json mode: memory for a decoding batch's keys and values (`JSON_CACHE_BYTES` by
    /// default); it decides how many items decode at once, never what they write.
    pub json_cache_bytes: usize,
}

/// One judge's result for one item: per-aspect scores, and in json mode the reason and the
/// object it wrote.
#[derive(Clone, Debug)]
struct Judgment {
    aspects: Vec<AspectScore>,
    answer: Option<Answer>,
}

impl From<JsonJudgment> for Judgment {
    fn from(j: JsonJudgment) -> Self {
        Judgment {
            aspects: j.aspects,
            answer: Some(Answer {
                reason: j.reason,
                text: j.text,
            }),
        }
    }
}

/// What the judge's prompts cost, for the closing summary.
#[derive(Debug, Default)]
pub struct JudgeStats {
    /// Tokens prefilled, and what one full prompt per aspect would have needed.
    pub forward_tokens: usize,
    pub naive_tokens: usize,
    pub truncated: usize,
}

impl JudgeStats {
    /// A run's figures for the user: items scored and their rate, already done, failed,
    /// truncated; the forward tokens the shared prefixes saved. `place`: where the lines went.
    pub fn describe(&self, summary: &RunSummary, secs: f64, place: &str) -> Vec<String> {
        self.describe_units(summary, secs, place, "items")
    }

    /// `describe` of a run over other units than items (`pairs`).
    pub fn describe_units(
        &self,
        summary: &RunSummary,
        secs: f64,
        place: &str,
        units: &str,
    ) -> Vec<String> {
        let mut lines = vec![format!(
            "scored {} {units} in {secs:.1}s ({:.2} {units}/s); {} already in {place}; {} failed; {} truncated to fit",
            summary.scored,
            summary.scored as f64 / secs.max(1e-9),
            summary.skipped_finished,
            summary.failed.len(),
            self.truncated,
        )];
        if self.naive_tokens > 0 {
            lines.push(format!(
                "forward tokens: {} (one full prompt per aspect would be {}: {:.1}× fewer)",
                self.forward_tokens,
                self.naive_tokens,
                self.naive_tokens as f64 / self.forward_tokens.max(1) as f64
            ));
        }
        lines
    }
}

pub struct Judge<'a> {
    pub models: &'a [LoadedModel],
    pub rubric: &'a Rubric,
    pub rubric_source: &'a str,
}

impl<'a> Judge<'a> {
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
        // Runtime settings that change numbers (the template's date, products, kernels; how
        // weights are held when the run decodes).
        let decodes = self.rubric.output == OutputMode::Json || opts.greedy_baseline.is_some();
        self.models[0].settings().record(decodes, &mut settings);
        Provenance::of_models(
            Task::Judge,
            Some(RubricId::of(self.rubric, self.rubric_source)),
            self.models,
            settings,
        )
    }

    /// Score every item not yet in `output`, appending one line per item (`results::runner`).
    /// `progress` is called with (items done, items to do).
    pub fn run(
        &self,
        items: &[Item],
        output: &Path,
        opts: &RunOptions,
        progress: &mut crate::results::Progress<'_>,
    ) -> Result<(RunSummary, JudgeStats), RunError<JudgeError>> {
        let mut task = self.task(items, opts)?;
        let summary = runner::run(&mut task, items, output, opts.overwrite, progress)?;
        Ok((summary, task.stats))
    }

    /// Score every item into memory: the line `run` would write for each item (the same
    /// bits), in the items' order, with no file read or written.
    pub fn score_lines(
        &self,
        items: &[Item],
        opts: &RunOptions,
        progress: &mut crate::results::Progress<'_>,
    ) -> Result<(RunSummary, JudgeStats, Vec<String>), RunError<JudgeError>> {
        let mut task = self.task(items, opts)?;
        let (summary, lines) = runner::run_in_memory(&mut task, items, progress)?;
        Ok((summary, task.stats, lines))
    }

    fn task<'j>(
        &'j self,
        items: &[Item],
        opts: &'j RunOptions,
    ) -> Result<JudgeTask<'j, 'a>, RunError<JudgeError>> {
        if self.rubric.pairwise.is_some() {
            return Err(RunError::Task(JudgeError::RubricKind(format!(
                "rubric {}: pairwise (it compares two responses): judge pairs with hyoka compare",
                self.rubric.name
            ))));
        }
        if let Some(why) = self.rubric.scope_mismatch(items) {
            return Err(RunError::Task(JudgeError::RubricKind(why)));
        }
        Ok(JudgeTask {
            judge: self,
            opts,
            builder: PromptBuilder::new(self.rubric)
                .map_err(|e| RunError::Task(JudgeError::from(e)))?,
            per_model: Vec::new(),
            formats: Vec::new(),
            scorers: Vec::new(),
            stats: JudgeStats::default(),
        })
    }

    fn aspect_keys(&self) -> impl Iterator<Item = String> + '_ {
        self.rubric.aspects.iter().map(|a| a.key.clone())
    }
}

/// A judge run as the results runner drives it.
struct JudgeTask<'j, 'a> {
    judge: &'j Judge<'a>,
    opts: &'j RunOptions,
    builder: PromptBuilder,
    /// Per judge, per item: its layout, or why it has none.
    per_model: Vec<Vec<Result<ItemLayout, String>>>,
    formats: Vec<Option<JsonFormat>>,
    scorers: Vec<Scorer<'a>>,
    stats: JudgeStats,
}

impl ScoreTask for JudgeTask<'_, '_> {
    type Error = JudgeError;
    type Unit = Item;

    fn provenance(&self) -> Provenance {
        self.judge.provenance(self.opts)
    }

    fn plan(&mut self, items: &[Item], todo: &[usize]) -> Result<Vec<Vec<usize>>, JudgeError> {
        if todo.is_empty() {
            // Nothing left to score: no layouts, no header prefill.
            return Ok(Vec::new());
        }
        let builder = &self.builder;
        let prepared = prepare(
            self.judge,
            self.opts,
            items,
            &crate::prompt::probe_items(),
            |m, fit, reserve, it| {
                Ok(vec![match reserve {
                    Some(reserve) => {
                        layout_prompt(builder, &m.chat_template, &m.tokenizer, it, fit, reserve)?
                    }
                    None => layout_item(builder, &m.chat_template, &m.tokenizer, it, fit)?,
                }])
            },
        )?;
        self.stats.forward_tokens += prepared.header_tokens;
        let chunks = prepared.chunks(todo, self.opts.batch_tokens);
        self.per_model = prepared
            .per_model
            .into_iter()
            .map(|layouts| {
                layouts
                    .into_iter()
                    .map(|l| l.map(|mut ls| ls.remove(0)))
                    .collect()
            })
            .collect();
        self.formats = prepared.formats;
        self.scorers = prepared.scorers;
        Ok(chunks)
    }

    fn score(&mut self, items: &[Item], chunk: &[usize]) -> Result<Vec<Outcome>, JudgeError> {
        let opts = self.opts;
        // results[j][judge] = per-aspect scores, or the item's error.
        let mut results: Vec<Vec<Result<Judgment, String>>> = vec![Vec::new(); chunk.len()];
        for (m, scorer) in self.scorers.iter().enumerate() {
            let ok: Vec<(usize, &ItemLayout)> = chunk
                .iter()
                .enumerate()
                .filter_map(|(j, &i)| self.per_model[m][i].as_ref().ok().map(|l| (j, l)))
                .collect();
            let layouts: Vec<&ItemLayout> = ok.iter().map(|(_, l)| *l).collect();
            let mut scored: Vec<Result<Judgment, String>> = match &self.formats[m] {
                None | Some(_) if layouts.is_empty() => Vec::new(),
                Some(format) => {
                    let seeds: Vec<u64> = ok
                        .iter()
                        .map(|(j, _)| item_seed(opts.decoding.seed, m, &items[chunk[*j]].id))
                        .collect();
                    scorer
                        .write_json(
                            format,
                            &layouts,
                            opts.decoding,
                            &seeds,
                            opts.json_cache_bytes,
                        )?
                        .into_iter()
                        .map(|j| j.map(Judgment::from))
                        .collect()
                }
                None => scorer
                    .score(&layouts)?
                    .into_iter()
                    .map(|scores| {
                        scores.map(|aspects| Judgment {
                            aspects,
                            answer: None,
                        })
                    })
                    .collect(),
            };
            if let Some(max_new) = opts.greedy_baseline {
                greedy_baseline(
                    &self.judge.models[m],
                    scorer,
                    &layouts,
                    &mut scored,
                    max_new,
                )?;
            }
            let mut scored = scored.into_iter();
            for l in &layouts {
                self.stats.forward_tokens += l.row_tokens(scorer.header_len());
                self.stats.naive_tokens += l.naive_tokens;
            }
            let mut ok_iter = ok.iter().map(|(j, _)| *j).peekable();
            for (j, &i) in chunk.iter().enumerate() {
                if ok_iter.peek() == Some(&j) {
                    ok_iter.next();
                    results[j].push(scored.next().expect("one result per layout"));
                } else {
                    results[j].push(Err(self.per_model[m][i]
                        .as_ref()
                        .err()
                        .cloned()
                        .unwrap_or_default()));
                }
            }
        }
        Ok(chunk
            .iter()
            .zip(results)
            .map(|(&i, per_judge)| {
                if let Some(err) = per_judge.iter().find_map(|r| r.as_ref().err()) {
                    return Outcome::Failed(err.clone());
                }
                let per_judge: Vec<Judgment> = per_judge.into_iter().flatten().collect();
                let (dropped_turns, truncated) = self.per_model[0][i]
                    .as_ref()
                    .map_or((0, false), |l| (l.dropped_turns, l.truncated));
                self.stats.truncated += usize::from(truncated);
                Outcome::Scored(Body::Judge(self.record(
                    per_judge,
                    dropped_turns,
                    truncated,
                )))
            })
            .collect())
    }
}

impl JudgeTask<'_, '_> {
    /// One item's record from every judge's judgment (several: their mean, and each one's own).
    fn record(
        &self,
        per_judge: Vec<Judgment>,
        dropped_turns: usize,
        truncated: bool,
    ) -> JudgeRecord {
        let keyed = |aspects: Vec<AspectScore>| -> Vec<(String, AspectScore)> {
            self.judge.aspect_keys().zip(aspects).collect()
        };
        let aspects: Vec<&Vec<AspectScore>> = per_judge.iter().map(|r| &r.aspects).collect();
        let scores = keyed(mean_scores(&aspects));
        let (answer, judges) = if per_judge.len() == 1 {
            (
                per_judge.into_iter().next().and_then(|j| j.answer),
                Vec::new(),
            )
        } else {
            let judges = per_judge
                .into_iter()
                .zip(self.judge.models)
                .map(|(j, m)| JudgeAnswer {
                    model: m.files.name.clone(),
                    scores: keyed(j.aspects),
                    answer: j.answer,
                })
                .collect();
            (None, judges)
        };
        JudgeRecord {
            scores,
            answer,
            judges,
            dropped_turns,
            truncated,
        }
    }
}

/// Every judge's layouts of a run's units, its json format and its scorer (with the rubric's
/// header computed).
pub(super) struct Prepared<'a> {
    /// Per judge, per unit: its layouts (one row each), or why it has none.
    pub per_model: Vec<Vec<Result<Vec<ItemLayout>, String>>>,
    pub formats: Vec<Option<JsonFormat>>,
    pub scorers: Vec<Scorer<'a>>,
    /// Tokens of the judges' headers, prefilled once.
    pub header_tokens: usize,
}

/// How a unit is laid out for one judge: (model, fit, json mode's answer reserve, unit).
type LayOut<'f, U> =
    dyn Fn(&LoadedModel, &TextFit, Option<usize>, &U) -> Result<Vec<ItemLayout>, JudgeError> + 'f;

/// Lay out every unit for every judge (tokenization is cheap next to the model) and compute
/// each judge's header. The header computed once is what the rubric's prompts share (the
/// tokens common to `probes`, units that differ in every field), never what this file's units
/// happen to share: a unit's row, and so its score, is the same alone, among others, in a
/// shard or after a resume.
pub(super) fn prepare<'a, U>(
    judge: &Judge<'a>,
    opts: &RunOptions,
    units: &[U],
    probes: &[U],
    lay_out: impl Fn(&LoadedModel, &TextFit, Option<usize>, &U) -> Result<Vec<ItemLayout>, JudgeError>,
) -> Result<Prepared<'a>, JudgeError> {
    let lay_out: &LayOut<U> = &lay_out;
    let mut prepared = Prepared {
        per_model: Vec::new(),
        formats: Vec::new(),
        scorers: Vec::new(),
        header_tokens: 0,
    };
    let mut headers = Vec::new();
    for m in judge.models {
        let max = opts
            .max_prompt_tokens
            .unwrap_or(m.transformer.cfg.max_position);
        let format = match judge.rubric.output {
            OutputMode::Json => Some(JsonFormat::new(judge.rubric, &m.tokenizer)?),
            OutputMode::Score => None,
        };
        let reserve = format.as_ref().map(JsonFormat::reserve);
        let fit = TextFit::new(&m.tokenizer, max);
        let mut layouts: Vec<Result<Vec<ItemLayout>, String>> = Vec::with_capacity(units.len());
        for u in units {
            layouts.push(match lay_out(m, &fit, reserve, u) {
                Err(e) if e.template_at_fault() => return Err(e),
                laid => laid.map_err(|e| e.to_string()),
            });
        }
        let probed: Vec<ItemLayout> = probes
            .iter()
            .filter_map(|p| lay_out(m, &fit, reserve, p).ok())
            .flatten()
            .collect();
        if probed.is_empty()
            && let Some(max) = opts.max_prompt_tokens
        {
            let why = probes
                .iter()
                .find_map(|p| lay_out(m, &fit, reserve, p).err())
                .map(|e| e.to_string())
                .unwrap_or_default();
            return Err(JudgeError::PromptLimit { max, why });
        }
        prepared.formats.push(format);
        // Units are kept in the count only as a guard: a unit whose tokens leave the rubric's
        // header part-way (a tokenizer merging across its first field) shortens it rather
        // than being scored against a header it does not start with.
        let shared: Vec<&ItemLayout> = probed
            .iter()
            .chain(layouts.iter().filter_map(|l| l.as_ref().ok()).flatten())
            .collect();
        let header = if probed.is_empty() {
            0
        } else {
            common_header(&shared)
        };
        headers.push(
            shared
                .first()
                .map(|l| l.trunk[..header].to_vec())
                .unwrap_or_default(),
        );
        prepared.per_model.push(layouts);
    }
    prepared.scorers = judge
        .models
        .iter()
        .zip(&headers)
        .map(|(m, h)| Scorer::new(&m.transformer, h))
        .collect::<Result<_, _>>()?;
    prepared.header_tokens = headers.iter().map(Vec::len).sum();
    Ok(prepared)
}

impl Prepared<'_> {
    /// Batches of `todo` planned on the first judge's layouts: every judge scores the same
    /// chunk, and its lines are written once all judges are done with it.
    pub fn chunks(&self, todo: &[usize], batch_tokens: usize) -> Vec<Vec<usize>> {
        let header = self.scorers[0].header_len();
        let lens: Vec<usize> = todo
            .iter()
            .map(|&i| {
                self.per_model[0][i].as_ref().map_or(1, |ls| {
                    ls.iter().map(|l| l.row_tokens(header)).sum::<usize>()
                })
            })
            .collect();
        plan_batches(&lens, batch_tokens)
            .into_iter()
            .map(|chunk| chunk.into_iter().map(|k| todo[k]).collect())
            .collect()
    }
}

/// `--greedy-baseline`: what greedy generation answers after each aspect's answer prefix, and
/// the first valid integer in it, next to each distribution.
fn greedy_baseline(
    model: &LoadedModel,
    scorer: &Scorer,
    layouts: &[&ItemLayout],
    scored: &mut [Result<Judgment, String>],
    max_new: usize,
) -> Result<(), JudgeError> {
    let stop = model.stop_tokens();
    for (l, judgment) in layouts.iter().zip(scored.iter_mut()) {
        let Ok(judgment) = judgment else { continue };
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
            score.greedy = Some(Greedy {
                score: super::parse_score(&text, valid),
                text,
            });
        }
    }
    Ok(())
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
