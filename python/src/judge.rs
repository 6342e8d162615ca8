//! `hyoka.Judge`: the library's `JudgeSpec` built from keyword arguments, loaded once, scoring
//! items held in memory.

use crate::errors::{raise, to_py};
use crate::meta::Source;
use crate::options::Options;
use hyoka::data::{Item, Origin, Pairing, form_pairs};
use hyoka::judge::{JudgeSpec, LoadedJudge};
use hyoka::likelihood::{LikelihoodOptions, LikelihoodRun, LikelihoodScorer};
use hyoka::model::runtime_options::parse_choice;
use hyoka::results::RunError;
use hyoka::results::runner::run_in_memory;
use hyoka::translate::{TranslateOptions, TranslatePrompt, translate_in_memory};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Mutex;

/// `options` (keyword arguments) into `spec`: each named setting replaces its default.
pub fn apply(spec: &mut JudgeSpec, options: &mut Options<'_>) -> PyResult<()> {
    let runtime = &mut spec.runtime;
    if let Some(device) = options.take::<String>("device")? {
        runtime.device = device;
    }
    runtime.dtype = options.take::<String>("dtype")?;
    if let Some(w) = options.choice("weights", parse_choice)? {
        runtime.weights = w;
    }
    if let Some(g) = options.choice("prefill_gemm", parse_choice)? {
        runtime.prefill_gemm = g;
    }
    if let Some(k) = options.choice("gpu_kernels", parse_choice)? {
        runtime.gpu_kernels = k;
    }
    runtime.template_date = options.take::<String>("template_date")?;
    runtime.tokenizer = options.take::<PathBuf>("tokenizer")?;
    runtime.chat_template = options.take::<PathBuf>("chat_template")?;
    let run = &mut spec.run;
    if let Some(n) = options.take::<usize>("batch_tokens")? {
        run.batch_tokens = n;
    }
    run.max_prompt_tokens = options.take::<usize>("max_prompt_tokens")?;
    if let Some(gib) = options.take::<f64>("json_cache_gib")? {
        run.json_cache_bytes =
            hyoka::judge::json_cache_bytes(gib).map_err(|e| to_py(options.py(), &e))?;
    }
    run.greedy_baseline = options.take::<usize>("greedy_baseline")?;
    if let Some(t) = options.take::<f64>("temperature")? {
        run.decoding.temperature = t;
    }
    if let Some(seed) = options.take::<u64>("seed")? {
        run.decoding.seed = seed;
    }
    spec.sha256 = options.take::<String>("sha256")?;
    Ok(())
}

/// A judge's models, rubric and settings, loaded once and kept between calls.
#[pyclass(module = "hyoka._hyoka", name = "Judge")]
pub struct Judge {
    loaded: LoadedJudge,
}

#[pymethods]
impl Judge {
    /// `models`: local .gguf files or checkpoint folders, or Hub ids; `rubric`: a built-in
    /// rubric's name or a rubric file; `options`: settings by name (those `apply` takes).
    #[new]
    #[pyo3(signature = (models, rubric, options=None))]
    fn new(
        py: Python<'_>,
        models: Vec<String>,
        rubric: String,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut spec = JudgeSpec::new(&rubric, models).map_err(raise(py))?;
        let mut options = Options::new(py, options)?;
        apply(&mut spec, &mut options)?;
        options.finish()?;
        let loaded = py.detach(|| spec.load()).map_err(raise(py))?;
        Ok(Judge { loaded })
    }

    /// Score items given as JSON texts (one item each, in the items format): each item's
    /// results line, the bits `hyoka judge` writes, in the items' order; no file read or
    /// written. A bad item is an InvalidInputError naming `items[N]` and the field.
    /// `progress(done, total)` is called between batches; Ctrl-C (or an exception raised by
    /// `progress`) stops the run there and is raised.
    #[pyo3(signature = (items, progress=None))]
    fn score_items(
        &self,
        py: Python<'_>,
        items: Vec<String>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let parsed = hyoka::data::parse_items(&items).map_err(raise(py))?;
        self.score_in_memory(py, &parsed, progress)
    }

    /// Judge the pairs of items given as JSON texts (items with the same `context_id` are
    /// responses of different systems to one context): every two systems of a context, or each
    /// against `baseline`. Each pair's results line, the bits `hyoka compare` writes, in the
    /// pairs' order; no file read or written.
    #[pyo3(signature = (items, baseline=None, progress=None))]
    fn compare_items(
        &self,
        py: Python<'_>,
        items: Vec<String>,
        baseline: Option<String>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let parsed = hyoka::data::parse_items(&items).map_err(raise(py))?;
        self.compare_in_memory(py, &parsed, Origin::Memory, baseline, progress)
    }

    /// `compare_items` of an items JSONL file (read as `hyoka compare -i` reads it).
    #[pyo3(signature = (path, baseline=None, progress=None))]
    fn compare_file(
        &self,
        py: Python<'_>,
        path: PathBuf,
        baseline: Option<String>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let read = py
            .detach(|| hyoka::data::read_items(&path, false))
            .map_err(raise(py))?;
        let origin = Origin::File {
            path: &path,
            lines: &read.lines,
        };
        self.compare_in_memory(py, &read.items, origin, baseline, progress)
    }

    /// Likelihood scores (`hyoka likelihood`: FED, GPTScore) of items given as JSON texts, by
    /// the judge's (first) model with the scorer `scorer` (a built-in's name or a scorer file):
    /// each item's results line, the bits `hyoka likelihood` writes, in the items' order.
    /// `items` may be an items JSONL path instead, read as `hyoka likelihood -i` reads it.
    #[pyo3(signature = (items, scorer, batch_tokens=None, progress=None))]
    fn likelihood_items(
        &self,
        py: Python<'_>,
        items: Source,
        scorer: String,
        batch_tokens: Option<usize>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let parsed = items_of(py, items)?;
        let (scorer, source) = LikelihoodScorer::resolve(&scorer).map_err(raise(py))?;
        let opts = LikelihoodOptions {
            batch_tokens: batch_tokens.unwrap_or(self.loaded.opts.batch_tokens).max(1),
        };
        let mut task = LikelihoodRun::new(&self.loaded.models[0], &scorer, source, opts);
        let (summary, lines) = with_progress(py, progress, |report| {
            run_in_memory(&mut task, &parsed, report)
        })?;
        report_failed(&summary);
        Ok(lines)
    }

    /// Items given as JSON texts translated (`hyoka translate`) by the judge's (first) model from
    /// `source` into `to`, each distinct text once, in memory: the translated items as JSON
    /// texts, each with `translation` (its source texts and the run's provenance). A text that
    /// cannot be translated raises, naming it. `items` may be an items JSONL path instead, read
    /// as `hyoka translate -i` reads it.
    #[pyo3(signature = (items, source, to, prompt=None, max_new_tokens=None, keep_unfinished=false, progress=None))]
    #[allow(clippy::too_many_arguments)]
    fn translate_items(
        &self,
        py: Python<'_>,
        items: Source,
        source: String,
        to: String,
        prompt: Option<String>,
        max_new_tokens: Option<usize>,
        keep_unfinished: bool,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let parsed = items_of(py, items)?;
        let (prompt, _) =
            TranslatePrompt::for_languages(prompt.as_deref(), &source, &to).map_err(raise(py))?;
        let opts = TranslateOptions {
            max_new_tokens: max_new_tokens.map(|n| n.max(1)),
            keep_unfinished,
            ..Default::default()
        };
        let model = &self.loaded.models[0];
        let done = with_progress(py, progress, |report| {
            translate_in_memory(model, &prompt, opts, &parsed, report)
        })?;
        match done.items {
            Ok(translated) => Ok(translated.iter().map(Item::to_json_line).collect()),
            Err(missing) => Err(crate::errors::exception(
                py,
                "HyokaError",
                format!(
                    "{} texts have no translation: {}",
                    missing.len(),
                    hyoka::translate::describe_failures(&parsed, &done.summary.failed).join("; ")
                ),
            )),
        }
    }

    /// Score the items of an items JSONL file (read as `hyoka judge -i` reads it) into memory,
    /// as `score_items`.
    #[pyo3(signature = (path, progress=None))]
    fn score_file(
        &self,
        py: Python<'_>,
        path: PathBuf,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let read = py
            .detach(|| hyoka::data::read_items(&path, false))
            .map_err(raise(py))?;
        self.score_in_memory(py, &read.items, progress)
    }
}

impl Judge {
    fn compare_in_memory(
        &self,
        py: Python<'_>,
        items: &[Item],
        origin: Origin<'_>,
        baseline: Option<String>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let pairing = match baseline {
            Some(b) => Pairing::Baseline(b),
            None => Pairing::All,
        };
        let pairs = form_pairs(items, origin, &pairing).map_err(raise(py))?;
        if pairs.pairs.is_empty() {
            return Err(crate::errors::usage(
                py,
                "no context has responses of two systems to compare (items with the same context_id and different systems)".into(),
            ));
        }
        self.in_memory(py, progress, "pairs", |report| {
            let (summary, stats, lines) = self.loaded.comparer(&pairs).score_lines(
                &pairs.pairs,
                &self.loaded.opts,
                report,
            )?;
            Ok((summary, stats, lines))
        })
    }

    fn score_in_memory(
        &self,
        py: Python<'_>,
        items: &[Item],
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        self.in_memory(py, progress, "items", |report| {
            self.loaded.score_lines(items, report)
        })
    }

    /// Run a judge's `work` with the GIL released, `progress` called between batches; its
    /// figures on stderr.
    fn in_memory(
        &self,
        py: Python<'_>,
        progress: Option<Py<PyAny>>,
        units: &str,
        work: impl FnOnce(
            &mut hyoka::results::Progress<'_>,
        ) -> Result<
            (
                hyoka::results::RunSummary,
                hyoka::judge::run::JudgeStats,
                Vec<String>,
            ),
            hyoka::results::RunError<hyoka::judge::JudgeError>,
        > + Send,
    ) -> PyResult<Vec<String>> {
        let started = std::time::Instant::now();
        let (summary, stats, lines) = with_progress(py, progress, work)?;
        let secs = started.elapsed().as_secs_f64();
        for line in stats.describe_units(&summary, secs, "memory", units) {
            eprintln!("{line}");
        }
        Ok(lines)
    }
}

/// Failed items on stderr, as the command line lists them.
/// Items given as JSON texts (a bad one named `items[N]`) or as an items JSONL path (read as
/// the commands read `-i`: a bad line named `FILE:LINE`).
fn items_of(py: Python<'_>, items: Source) -> PyResult<Vec<Item>> {
    match items {
        Source::Texts(texts) => hyoka::data::parse_items(&texts).map_err(raise(py)),
        Source::Path(path) => py
            .detach(|| hyoka::data::read_items(&path, false))
            .map(|read| read.items)
            .map_err(raise(py)),
    }
}

fn report_failed(summary: &hyoka::results::RunSummary) {
    for f in &summary.failed {
        eprintln!("failed: {f}");
    }
}

/// Run `work` with the GIL released, `progress(done, total)` called between batches. An
/// exception of the callback (or Ctrl-C) stops the run, and is what is raised.
fn with_progress<T: Send, E: std::error::Error + Send + Sync + 'static>(
    py: Python<'_>,
    progress: Option<Py<PyAny>>,
    work: impl FnOnce(&mut hyoka::results::Progress<'_>) -> Result<T, RunError<E>> + Send,
) -> PyResult<T> {
    let pending: Mutex<Option<PyErr>> = Mutex::new(None);
    let result = py.detach(|| {
        let mut report = |done: usize, total: usize| {
            Python::attach(|py| {
                let stop = py.check_signals().err().or_else(|| {
                    let call = progress.as_ref()?.call1(py, (done, total));
                    call.err()
                });
                match stop {
                    Some(e) => {
                        *pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        ControlFlow::Break(())
                    }
                    None => ControlFlow::Continue(()),
                }
            })
        };
        work(&mut report)
    });
    result.map_err(|e: RunError<E>| {
        match pending.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(raised) => raised,
            None => to_py(py, &e),
        }
    })
}
