//! An evaluation's routes: the items as they are (the first route, in the output folder) and,
//! with a translation, the items translated (a second route in a subfolder named after the
//! language): each a rubric, a BERTScore encoder and likelihood scorers over the same judge
//! model, and their meta-evaluations set side by side (routes.md, routes.json).

use super::error::EvalError;
use super::folder::{BERTSCORE, ITEMS, JUDGE};
use super::reporter::{Reporter, retried_notes, timed};
use super::spec::{EncoderChoice, EvalSpec, TranslateSpec};
use crate::bertscore::run::{Against, BERT_SCORE_BATCH, BertScoreRun, default_batch_tokens};
use crate::bertscore::{BertScoreError, Depth, LoadedScorer};
use crate::data::Item;
use crate::judge::LoadedJudge;
use crate::judge::run::Judge;
use crate::likelihood::{LikelihoodOptions, LikelihoodRun, LikelihoodScorer};
use crate::meta::{Column, Family, Naming, Statistic};
use crate::model::ModelError;
use crate::results::prf::Prf;
use crate::results::{Expected, ResultsFile, Task};
use crate::rubric::Rubric;
use candle_core::Device;
use std::path::{Path, PathBuf};

/// One route of an evaluation: what scores the items, and where its files go.
pub(super) struct Route {
    /// The language of its items.
    pub lang: String,
    /// Whether its items are a translation (its messages then name its language).
    pub translated: bool,
    pub dir: PathBuf,
    pub rubric: Rubric,
    pub rubric_source: String,
    /// Its BERTScore encoder; None: no BERTScore.
    pub bertscore: Option<EncoderChoice>,
    pub likelihood: Vec<(LikelihoodScorer, String)>,
    /// How the face that asked names settings in messages.
    pub naming: Naming,
}

/// A route's BERTScore encoder and baseline, loaded.
pub(super) type Encoder = Option<(LoadedScorer, Option<(String, Prf)>)>;

/// The file a likelihood scorer's lines go to.
pub(super) fn likelihood_file(scorer: &LikelihoodScorer) -> String {
    format!("likelihood-{}.jsonl", scorer.name)
}

/// The name of the built-in (rubric or scorer) for the other language (`dialogue6-ja` →
/// `dialogue6-en`), or of the file beside `origin` named so (`x/breakdown-ja.toml` →
/// `x/breakdown-en.toml`); None when there is neither.
pub(super) fn counterpart(
    name: &str,
    origin: &str,
    (from, to): (&str, &str),
    builtins: &[&str],
) -> Option<String> {
    let stem = name.strip_suffix(&format!("-{from}"))?;
    let other = format!("{stem}-{to}");
    if builtins.contains(&other.as_str()) {
        return Some(other);
    }
    let beside = Path::new(origin).with_file_name(format!("{other}.toml"));
    beside.is_file().then(|| beside.display().to_string())
}

impl Route {
    /// The items as they are, in `dir`.
    pub fn first(spec: &EvalSpec, dir: &Path, naming: Naming) -> Result<Route, EvalError> {
        let rubric = spec.judge.rubric.clone();
        Ok(Route {
            lang: (spec.lang.clone())
                .or(rubric.language.clone())
                .unwrap_or_else(|| "ja".into()),
            translated: false,
            dir: dir.to_path_buf(),
            rubric,
            rubric_source: spec.judge.rubric_source.clone(),
            bertscore: spec.bertscore.clone(),
            likelihood: Route::scorers(&spec.likelihood)?,
            naming,
        })
    }

    /// The likelihood scorers named.
    fn scorers(names: &[String]) -> Result<Vec<(LikelihoodScorer, String)>, EvalError> {
        Ok(names
            .iter()
            .map(|n| LikelihoodScorer::resolve(n))
            .collect::<Result<_, _>>()?)
    }

    /// Refuse what would make a run fail after writing: results files locked by another run,
    /// unreadable, or of another task, version, rubric or scorer.
    pub fn preflight(&self, overwrite: bool) -> Result<(), EvalError> {
        let check = |name: &str, task, hash| {
            ResultsFile::preflight(
                &self.dir.join(name),
                overwrite,
                &Expected {
                    task,
                    rubric_hash: hash,
                },
            )
        };
        check(JUDGE, Task::Judge, Some(self.rubric.hash()))?;
        if self.bertscore.is_some() {
            check(BERTSCORE, Task::BertScore, None)?;
        }
        for (scorer, _) in &self.likelihood {
            check(
                &likelihood_file(scorer),
                Task::Likelihood,
                Some(scorer.hash()),
            )?;
        }
        Ok(())
    }

    /// The route's BERTScore encoder (bert_score's default for its language unless named) and
    /// its baseline; None with --no-bertscore.
    pub fn load_encoder(&self, device: &Device) -> Result<Encoder, EvalError> {
        let Some(choice) = &self.bertscore else {
            return Ok(None);
        };
        let dtype = crate::model::backend::device::parse_dtype(Some("f32"), device)?;
        let loaded = crate::bertscore::load_encoder(
            choice.model.as_deref(),
            &self.lang,
            Depth::Layer(choice.layer),
            dtype,
            device,
            &self.naming.name(if self.translated {
                "--translate-bertscore-model"
            } else {
                "--bertscore-model"
            }),
        )
        .map_err(|e| self.name_own_flags(e))?;
        let baseline =
            crate::bertscore::resolve_baseline(None, choice.rescale, Some(&self.lang), &loaded)?;
        Ok(Some((loaded, baseline)))
    }

    /// A setting refused is named as the face names it, a translated route's encoder layer by
    /// its own flag (`--translate-layer`).
    fn name_own_flags(&self, e: BertScoreError) -> BertScoreError {
        match e {
            BertScoreError::Model(ModelError::Setting { flag, message }) => {
                let flag = match self.translated {
                    true => flag.replacen("--layer", "--translate-layer", 1),
                    false => flag,
                };
                BertScoreError::Model(ModelError::Setting {
                    flag: self.naming.name(&flag),
                    message,
                })
            }
            e => e,
        }
    }

    pub fn judge<'a>(&'a self, judge: &'a LoadedJudge) -> Judge<'a> {
        Judge {
            models: &judge.models,
            rubric: &self.rubric,
            rubric_source: &self.rubric_source,
        }
    }

    fn likelihood_runs<'a>(&'a self, judge: &'a LoadedJudge) -> Vec<LikelihoodRun<'a>> {
        (self.likelihood.iter())
            .map(|(scorer, source)| {
                LikelihoodRun::new(
                    &judge.models[0],
                    scorer,
                    source.clone(),
                    LikelihoodOptions {
                        batch_tokens: judge.opts.batch_tokens,
                    },
                )
            })
            .collect()
    }

    /// With the models loaded: the existing results checked against the whole route before
    /// anything is written.
    pub fn check(
        &self,
        judge: &LoadedJudge,
        bertscore: Option<&BertScoreRun>,
        overwrite: bool,
    ) -> Result<(), EvalError> {
        let provenance = self.judge(judge).provenance(&judge.opts);
        ResultsFile::check(&self.dir.join(JUDGE), &provenance, overwrite)?;
        if let Some(job) = bertscore {
            ResultsFile::check(&self.dir.join(BERTSCORE), &job.provenance(), overwrite)?;
        }
        for run in self.likelihood_runs(judge) {
            let path = self.dir.join(likelihood_file(run.scorer));
            let provenance = crate::results::runner::ScoreTask::provenance(&run);
            ResultsFile::check(&path, &provenance, overwrite)?;
        }
        Ok(())
    }

    /// Score `items` with the route's judge, BERTScore and likelihood scorers into its folder:
    /// the failed items and the results files written.
    pub fn run(
        &self,
        judge: &LoadedJudge,
        bertscore: Option<&BertScoreRun>,
        items: &[Item],
        overwrite: bool,
        reporter: &dyn Reporter,
    ) -> Result<(Vec<String>, Vec<PathBuf>), EvalError> {
        let what = |task: &str| match self.translated {
            true => format!("{task} ({})", self.lang),
            false => task.to_string(),
        };
        let say_retried = |summary: &crate::results::RunSummary| {
            for note in retried_notes(summary) {
                reporter.note(&note);
            }
        };
        let (summary, secs) = timed(reporter, &what("judging"), |p| {
            self.judge(judge)
                .run(items, &self.dir.join(JUDGE), &judge.opts, p)
        });
        let (summary, _) = summary?;
        say_retried(&summary);
        reporter.note(&format!(
            "{}: scored {} items in {secs:.1}s; {} already done; {} failed",
            what("judge"),
            summary.scored,
            summary.skipped_finished,
            summary.failed.len()
        ));
        let mut failed = summary.failed;
        let mut results = vec![self.dir.join(JUDGE)];
        if let Some(job) = bertscore {
            let (summary, secs) = timed(reporter, &what("bertscore"), |p| {
                job.run(items, &self.dir.join(BERTSCORE), overwrite, p)
            });
            let summary = summary?;
            say_retried(&summary);
            reporter.note(&format!(
                "{}: scored {} items in {secs:.1}s (layer {}); {} already done; {} failed",
                what("bertscore"),
                summary.scored,
                job.layer,
                summary.skipped_finished,
                summary.failed.len()
            ));
            failed.extend(summary.failed);
            if let Some(first) = summary.not_applicable.first() {
                reporter.note(&format!(
                    "{}: {} items have nothing to compare with, by definition (e.g. {first}); not failures",
                    what("bertscore"),
                    summary.not_applicable.len(),
                ));
            }
            results.push(self.dir.join(BERTSCORE));
        }
        for mut run in self.likelihood_runs(judge) {
            let path = self.dir.join(likelihood_file(run.scorer));
            let name = run.scorer.name.clone();
            let (summary, secs) = timed(reporter, &what(&name), |p| {
                crate::likelihood::score_items(&mut run, items, &path, overwrite, p)
            });
            let summary = summary?;
            say_retried(&summary);
            reporter.note(&format!(
                "{}: scored {} items in {secs:.1}s; {} already done; {} failed",
                what(&name),
                summary.scored,
                summary.skipped_finished,
                summary.failed.len()
            ));
            failed.extend(summary.failed);
            results.push(path);
        }
        Ok((failed, results))
    }

    /// Rows of this route's summary that stand for the same method as `first`'s under another
    /// name: its likelihood scorers' columns, by position.
    pub fn same_rows(&self, first: &Route) -> Vec<(String, String)> {
        let label = |scorer: &LikelihoodScorer| {
            Column::label_of(Family::Likelihood, Some(&scorer.name), Statistic::Score)
        };
        (first.likelihood.iter().zip(&self.likelihood))
            .map(|((a, _), (b, _))| (label(a), label(b)))
            .collect()
    }
}

/// The BERTScore job of a route's encoder over `items`.
pub(super) fn bertscore_job<'a>(
    encoder: &'a Encoder,
    against: Option<Against>,
    items: &[Item],
) -> Option<BertScoreRun<'a>> {
    encoder.as_ref().map(|(loaded, baseline)| BertScoreRun {
        scorer: &loaded.scorer,
        model: loaded.model.clone(),
        layer: loaded.layer,
        idf: false,
        baseline: baseline.clone(),
        against: against.unwrap_or(if items.iter().all(|i| !i.reference.is_empty()) {
            Against::Reference
        } else {
            Against::LastTurn
        }),
        batch_tokens: default_batch_tokens(loaded.scorer.encoder.device()),
        emulate_batch: Some(BERT_SCORE_BATCH),
    })
}

/// The translated route: its route, and how its items are made.
pub(super) struct TranslatedRoute {
    pub route: Route,
    pub prompt: crate::translate::TranslatePrompt,
    /// The store of translations, in the route's folder.
    pub store: PathBuf,
    pub opts: crate::translate::TranslateOptions,
    /// The model that translates, when not the judge's first.
    pub model: Option<String>,
}

impl TranslatedRoute {
    /// The route into `spec.to`: its folder (the output's subfolder named so), the rubric's and
    /// scorers' counterparts for the language, and the translation prompt.
    pub fn plan(
        spec: &TranslateSpec,
        first: &Route,
        naming: Naming,
        reporter: &dyn Reporter,
    ) -> Result<Self, EvalError> {
        let to = spec.to.as_str();
        let langs = (first.lang.as_str(), to);
        let (prompt, _) =
            crate::translate::TranslatePrompt::for_languages(spec.prompt.as_deref(), langs.0, to)?;
        let rubric_name = match &spec.rubric {
            Some(r) => r.clone(),
            None => counterpart(
                &first.rubric.name,
                &first.rubric_source,
                langs,
                &crate::rubric::builtin_names(),
            )
            .ok_or_else(|| {
                EvalError::usage(format!(
                    "{} {to}: the rubric {} has no {to} counterpart (built in, or a file beside it named {}): give one with {}",
                    naming.name("--translate"),
                    first.rubric.name,
                    first.rubric.name.replace(&format!("-{}", langs.0), &format!("-{to}")),
                    naming.name("--translate-rubric")
                ))
            })?,
        };
        let (rubric, rubric_source) = crate::prompt::resolve_rubric(&rubric_name)?;
        let builtin_scorers = crate::likelihood::scorer::builtin_names();
        let mut likelihood = Vec::new();
        for (scorer, source) in &first.likelihood {
            let other = counterpart(&scorer.name, source, langs, &builtin_scorers);
            match other {
                Some(name) => likelihood.push(LikelihoodScorer::resolve(&name)?),
                None if builtin_scorers.contains(&scorer.name.as_str()) => {
                    return Err(EvalError::usage(format!(
                        "{} {to}: the likelihood scorer {} has no {to} counterpart",
                        naming.name("--translate"),
                        scorer.name
                    )));
                }
                None => likelihood.push((scorer.clone(), source.clone())),
            }
        }
        let dir = first.dir.join(to);
        let bertscore = first.bertscore.as_ref().map(|b| EncoderChoice {
            model: spec.bertscore_model.clone(),
            layer: spec.layer,
            rescale: b.rescale,
            against: b.against,
        });
        let route = Route {
            lang: to.to_string(),
            translated: true,
            dir: dir.clone(),
            rubric,
            rubric_source,
            bertscore,
            likelihood,
            naming,
        };
        reporter.note(&format!(
            "route {to}: items translated by {} into {}, rubric {}",
            prompt.name,
            dir.display(),
            route.rubric.name
        ));
        Ok(TranslatedRoute {
            route,
            prompt,
            store: dir.join(TRANSLATIONS),
            opts: crate::translate::TranslateOptions {
                keep_unfinished: spec.keep_unfinished,
                ..Default::default()
            },
            model: spec.model.clone(),
        })
    }

    pub fn preflight(&self, overwrite: bool) -> Result<(), EvalError> {
        self.route.preflight(overwrite)?;
        ResultsFile::preflight(
            &self.store,
            false,
            &Expected {
                task: Task::Translate,
                rubric_hash: None,
            },
        )?;
        Ok(())
    }

    /// The model that translates, when it is not the judge's (first) model.
    pub fn load_model(
        &self,
        spec: &EvalSpec,
        device: &Device,
        settings: &crate::model::RuntimeSettings,
        reporter: &dyn Reporter,
    ) -> Result<Option<crate::model::LoadedModel>, EvalError> {
        let Some(name) = &self.model else {
            return Ok(None);
        };
        reporter.note(&format!("loading {name} ..."));
        Ok(Some(
            spec.judge
                .runtime
                .load_model(name, device, settings, None)?,
        ))
    }

    /// The route's results and the store checked against the run before anything is written.
    pub fn check(
        &self,
        model: &crate::model::LoadedModel,
        judge: &LoadedJudge,
        bertscore: Option<&BertScoreRun>,
        overwrite: bool,
    ) -> Result<(), EvalError> {
        self.route.check(judge, bertscore, overwrite)?;
        let translator = crate::translate::Translator::new(model, &self.prompt, self.opts);
        let provenance = crate::results::runner::ScoreTask::provenance(&translator);
        ResultsFile::check(&self.store, &provenance, false)?;
        Ok(())
    }

    /// Translate `items` (continuing the store) and write them into the route's folder: the
    /// translated items, or what kept a text from being translated (the route is not run).
    pub fn translate(
        &self,
        model: &crate::model::LoadedModel,
        items: &[Item],
        reporter: &dyn Reporter,
    ) -> Result<Result<Vec<Item>, Vec<String>>, EvalError> {
        let (done, secs) = timed(reporter, "translating", |p| {
            crate::translate::translate_items(model, &self.prompt, self.opts, items, &self.store, p)
        });
        let done = done?;
        for note in retried_notes(&done.summary) {
            reporter.note(&note);
        }
        reporter.note(&format!(
            "translate ({}): {} distinct texts, {} translated now ({} tokens, {secs:.1} s), {} already in {}",
            self.route.lang,
            done.texts,
            done.summary.scored,
            done.tokens_written,
            done.summary.skipped_finished,
            self.store.display()
        ));
        match done.items {
            Ok(translated) => {
                crate::data::write_items(&self.route.dir.join(ITEMS), &translated)?;
                Ok(Ok(translated))
            }
            Err(missing) => {
                let mut failed: Vec<String> =
                    crate::translate::describe_failures(items, &done.summary.failed)
                        .into_iter()
                        .map(|f| format!("translation of {f}"))
                        .collect();
                failed.push(format!(
                    "{} texts have no translation: the {} route was not run (a rerun tries them again)",
                    missing.len(),
                    self.route.lang
                ));
                Ok(Err(failed))
            }
        }
    }
}

/// The store of a translated route's translations, in its folder.
pub(super) const TRANSLATIONS: &str = "translations.jsonl";
