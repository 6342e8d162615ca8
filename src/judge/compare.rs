//! A pairwise judge run: pairs of responses × a pairwise rubric × one or more judge models →
//! per pair and aspect, the verdict distribution in both orders of the two responses.
//!
//! In score mode a pair is one row: both orders share its prefill up to where the responses
//! begin, and each order's rest and answer are branches of it. In json mode each order is a
//! prompt of its own, both decoded in the same batch.

use super::json::{WrittenJson, item_seed};
use super::layout::{ItemLayout, layout_pair, layout_pair_prompts, leading_order};
use super::run::{Judge, JudgeStats, RunOptions, prepare};
use super::scorer::ItemScores;
use super::{JudgeError, Scorer};
use crate::data::{Pair, Pairing};
use crate::prompt::PromptBuilder;
use crate::results::record::Answer;
use crate::results::runner::{self, Outcome, RunError, RunSummary, ScoreTask};
use crate::results::scores::AspectScore;
use crate::results::verdicts::{PairVerdict, VerdictProbs};
use crate::results::{Body, CompareRecord, Provenance, Task};
use crate::rubric::{PairwiseVerdicts, Shown};
use std::path::Path;

/// A judge that compares: its rubric is pairwise.
pub struct Compare<'a> {
    pub judge: Judge<'a>,
    /// How the pairs were formed (recorded in the provenance).
    pub pairing: Pairing,
}

impl<'a> Compare<'a> {
    /// The settings of a pairwise run: the judge's, the task and how pairs were formed.
    pub fn provenance(&self, opts: &RunOptions) -> Provenance {
        let mut p = self.judge.provenance(opts);
        p.task = Task::Compare;
        p.settings
            .insert("pairing".into(), self.pairing.describe().into());
        p
    }

    /// Judge every pair not yet in `output`, appending one line per pair (`results::runner`).
    pub fn run(
        &self,
        pairs: &[Pair],
        output: &Path,
        opts: &RunOptions,
        progress: &mut crate::results::Progress<'_>,
    ) -> Result<(RunSummary, JudgeStats), RunError<JudgeError>> {
        let mut task = self.task(opts)?;
        let summary = runner::run(&mut task, pairs, output, opts.overwrite, progress)?;
        Ok((summary, task.stats))
    }

    /// Judge every pair into memory: the line `run` would write for each pair, in order.
    pub fn score_lines(
        &self,
        pairs: &[Pair],
        opts: &RunOptions,
        progress: &mut crate::results::Progress<'_>,
    ) -> Result<(RunSummary, JudgeStats, Vec<String>), RunError<JudgeError>> {
        let mut task = self.task(opts)?;
        let (summary, lines) = runner::run_in_memory(&mut task, pairs, progress)?;
        Ok((summary, task.stats, lines))
    }

    fn task<'j>(
        &'j self,
        opts: &'j RunOptions,
    ) -> Result<CompareTask<'j, 'a>, RunError<JudgeError>> {
        let rubric = self.judge.rubric;
        let Some(verdicts) = rubric.pairwise else {
            return Err(RunError::Task(JudgeError::RubricKind(format!(
                "rubric {}: not pairwise (no [pairwise] table): compare with a pairwise rubric ({}), or score single responses with hyoka judge",
                rubric.name,
                pairwise_builtins().join(", ")
            ))));
        };
        if opts.greedy_baseline.is_some() {
            return Err(RunError::Task(JudgeError::RubricKind(
                "the greedy baseline reads single responses: judge them with hyoka judge".into(),
            )));
        }
        Ok(CompareTask {
            compare: self,
            opts,
            verdicts,
            builder: PromptBuilder::new(rubric).map_err(|e| RunError::Task(e.into()))?,
            per_model: Vec::new(),
            json: false,
            scorers: Vec::new(),
            formats: Vec::new(),
            stats: JudgeStats::default(),
        })
    }
}

/// The built-in pairwise rubrics' names.
pub fn pairwise_builtins() -> Vec<&'static str> {
    crate::rubric::builtin_names()
        .into_iter()
        .filter(|n| {
            crate::rubric::builtin(n).is_some_and(|r| r.is_ok_and(|r| r.pairwise.is_some()))
        })
        .collect()
}

struct CompareTask<'j, 'a> {
    compare: &'j Compare<'a>,
    opts: &'j RunOptions,
    verdicts: PairwiseVerdicts,
    builder: PromptBuilder,
    /// Per judge, per pair: its layouts (one row; json mode, one prompt per order).
    per_model: Vec<Vec<Result<Vec<ItemLayout>, String>>>,
    json: bool,
    formats: Vec<Option<super::json::JsonFormat>>,
    scorers: Vec<Scorer<'a>>,
    stats: JudgeStats,
}

/// One judge's verdicts for one pair, and in json mode what it wrote in each order.
#[derive(Clone)]
struct PairJudgment {
    verdicts: Vec<PairVerdict>,
    answers: Vec<Answer>,
}

impl ScoreTask for CompareTask<'_, '_> {
    type Error = JudgeError;
    type Unit = Pair;

    fn provenance(&self) -> Provenance {
        self.compare.provenance(self.opts)
    }

    fn plan(&mut self, pairs: &[Pair], todo: &[usize]) -> Result<Vec<Vec<usize>>, JudgeError> {
        if todo.is_empty() {
            return Ok(Vec::new());
        }
        let builder = &self.builder;
        let prepared = prepare(
            &self.compare.judge,
            self.opts,
            pairs,
            &crate::prompt::probe_pairs(),
            |m, fit, reserve, pair| match reserve {
                Some(reserve) => Ok(layout_pair_prompts(
                    builder,
                    &m.chat_template,
                    &m.tokenizer,
                    pair,
                    fit,
                    reserve,
                )?
                .into()),
                None => layout_pair(builder, &m.chat_template, &m.tokenizer, pair, fit),
            },
        )?;
        self.stats.forward_tokens += prepared.header_tokens;
        let chunks = prepared.chunks(todo, self.opts.batch_tokens);
        self.json = prepared.formats.iter().any(Option::is_some);
        self.per_model = prepared.per_model;
        self.formats = prepared.formats;
        self.scorers = prepared.scorers;
        Ok(chunks)
    }

    fn score(&mut self, pairs: &[Pair], chunk: &[usize]) -> Result<Vec<Outcome>, JudgeError> {
        let aspects = self.compare.judge.rubric.aspects.len();
        let mut results: Vec<Vec<Result<PairJudgment, String>>> = vec![Vec::new(); chunk.len()];
        for (m, scorer) in self.scorers.iter().enumerate() {
            let ok: Vec<(usize, &Vec<ItemLayout>)> = chunk
                .iter()
                .enumerate()
                .filter_map(|(j, &i)| self.per_model[m][i].as_ref().ok().map(|l| (j, l)))
                .collect();
            let layouts: Vec<&ItemLayout> = ok.iter().flat_map(|(_, ls)| ls.iter()).collect();
            for l in &layouts {
                self.stats.forward_tokens += l.row_tokens(scorer.header_len());
                self.stats.naive_tokens += l.naive_tokens;
            }
            // Per pair: each order's aspects, first system shown first, then second.
            let per_order: Vec<(ItemScores, Option<Answer>)> = match &self.formats[m] {
                _ if layouts.is_empty() => Vec::new(),
                Some(format) => {
                    let seeds: Vec<u64> = ok
                        .iter()
                        .flat_map(|(j, _)| {
                            let pair = &pairs[chunk[*j]];
                            [false, true].map(|swapped| {
                                item_seed(self.opts.decoding.seed, m, &order_key(pair, swapped))
                            })
                        })
                        .collect();
                    scorer
                        .write_json(
                            format,
                            &layouts,
                            self.opts.decoding,
                            &seeds,
                            self.opts.json_cache_bytes,
                        )?
                        .into_iter()
                        .map(|j: WrittenJson| match j {
                            Ok(j) => {
                                let answer = Answer {
                                    reason: j.reason,
                                    text: j.text,
                                };
                                (Ok(j.aspects), Some(answer))
                            }
                            Err(e) => (Err(e), None),
                        })
                        .collect()
                }
                None => {
                    // Each pair's rows' scores, in order: the leading order's aspects, then
                    // the other's (one row or two).
                    let mut rows = scorer.score(&layouts)?.into_iter();
                    ok.iter()
                        .flat_map(|(j, ls)| {
                            let lead: Result<Vec<Vec<AspectScore>>, String> =
                                rows.by_ref().take(ls.len()).collect();
                            let (lead, other) = match lead {
                                Ok(rows) => {
                                    let mut lead: Vec<AspectScore> =
                                        rows.into_iter().flatten().collect();
                                    let other = lead.split_off(aspects);
                                    (Ok(lead), Ok(other))
                                }
                                Err(e) => (Err(e.clone()), Err(e)),
                            };
                            if leading_order(&pairs[chunk[*j]]) {
                                [(other, None), (lead, None)]
                            } else {
                                [(lead, None), (other, None)]
                            }
                        })
                        .collect()
                }
            };
            let mut orders = per_order.into_iter();
            let mut ok_iter = ok.iter().map(|(j, _)| *j).peekable();
            for (j, &i) in chunk.iter().enumerate() {
                if ok_iter.peek() == Some(&j) {
                    ok_iter.next();
                    let (a, a_answer) = orders.next().expect("two orders per pair");
                    let (b, b_answer) = orders.next().expect("two orders per pair");
                    let (a, b) = match (a, b) {
                        (Ok(a), Ok(b)) => (a, b),
                        (Err(e), _) | (_, Err(e)) => {
                            results[j].push(Err(e));
                            continue;
                        }
                    };
                    let verdicts = a
                        .iter()
                        .zip(&b)
                        .map(|(a, b)| PairVerdict {
                            first_shown_first: order_probs(&self.verdicts, a, false),
                            second_shown_first: order_probs(&self.verdicts, b, true),
                        })
                        .collect();
                    results[j].push(Ok(PairJudgment {
                        verdicts,
                        answers: a_answer.into_iter().chain(b_answer).collect(),
                    }));
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
                let per_judge: Vec<PairJudgment> = per_judge.into_iter().flatten().collect();
                let (dropped_turns, truncated) = self.per_model[0][i]
                    .as_ref()
                    .map_or((0, false), |l| (l[0].dropped_turns, l[0].truncated));
                self.stats.truncated += usize::from(truncated);
                Outcome::Scored(Body::Compare(self.record(
                    &pairs[i],
                    per_judge,
                    dropped_turns,
                    truncated,
                )))
            })
            .collect())
    }
}

impl CompareTask<'_, '_> {
    fn record(
        &self,
        pair: &Pair,
        per_judge: Vec<PairJudgment>,
        dropped_turns: usize,
        truncated: bool,
    ) -> CompareRecord {
        let rubric = self.compare.judge.rubric;
        let keyed = |v: Vec<PairVerdict>| -> Vec<(String, PairVerdict)> {
            rubric
                .aspects
                .iter()
                .map(|a| a.key.clone())
                .zip(v)
                .collect()
        };
        let mean = mean_verdicts(&per_judge);
        let (answers, judges) = if per_judge.len() == 1 {
            let answers = per_judge.into_iter().next().map(|j| j.answers);
            (answers.unwrap_or_default(), Vec::new())
        } else {
            let judges = per_judge
                .into_iter()
                .zip(self.compare.judge.models)
                .map(|(j, m)| (m.files.name.clone(), keyed(j.verdicts)))
                .collect();
            (Vec::new(), judges)
        };
        CompareRecord {
            context_id: pair.context_id.clone(),
            first: pair.first_system().to_string(),
            second: pair.second_system().to_string(),
            verdicts: keyed(mean),
            answers,
            judges,
            dropped_turns,
            truncated,
        }
    }
}

/// What a json-mode order's sampling seed is drawn from: the context and the systems in the
/// order shown, whichever the pair names first.
fn order_key(pair: &Pair, swapped: bool) -> String {
    let (a, b) = pair.shown(swapped);
    format!(
        "{}|{}|{}",
        pair.context_id,
        a.system.as_deref().unwrap_or_default(),
        b.system.as_deref().unwrap_or_default()
    )
}

/// One order's distribution over the verdict scores, as probabilities of the pair's systems:
/// shown first is the first system unless `swapped`.
fn order_probs(verdicts: &PairwiseVerdicts, score: &AspectScore, swapped: bool) -> VerdictProbs {
    let mut shown = [0.0; 3];
    for (s, p) in score.score_probabilities() {
        match verdicts.meaning(s) {
            Some(Shown::First) => shown[0] += p,
            Some(Shown::Second) => shown[1] += p,
            Some(Shown::Tie) => shown[2] += p,
            None => {}
        }
    }
    let [shown_first, shown_second, tie] = shown;
    let (first, second) = if swapped {
        (shown_second, shown_first)
    } else {
        (shown_first, shown_second)
    };
    VerdictProbs {
        first,
        second,
        tie,
        off_scale: score.off_scale,
    }
}

/// Several judges' verdicts averaged, order by order.
fn mean_verdicts(per_judge: &[PairJudgment]) -> Vec<PairVerdict> {
    if per_judge.len() == 1 {
        return per_judge[0].verdicts.clone();
    }
    let n = per_judge.len() as f64;
    let mean = |pick: &dyn Fn(&PairVerdict) -> VerdictProbs, a: usize| {
        let mut m = VerdictProbs {
            first: 0.0,
            second: 0.0,
            tie: 0.0,
            off_scale: 0.0,
        };
        for j in per_judge {
            let p = pick(&j.verdicts[a]);
            m.first += p.first / n;
            m.second += p.second / n;
            m.tie += p.tie / n;
            m.off_scale += p.off_scale / n;
        }
        m
    };
    (0..per_judge[0].verdicts.len())
        .map(|a| PairVerdict {
            first_shown_first: mean(&|v| v.first_shown_first, a),
            second_shown_first: mean(&|v| v.second_shown_first, a),
        })
        .collect()
}
