//! `hyoka._hyoka`: the Python package's extension module. Thin: BERTScore, the judge and every
//! command run the library and the command line's own code paths (src/cli, compiled in here),
//! so a result from Python is the result the `hyoka` command gives; the Python side (python/hyoka)
//! shapes arguments and results.

#[path = "../../src/cli/mod.rs"]
mod cli;

use hyoka::bertscore::{Depth, Idf, LoadedScorer, Pairs, Prf, Sentences, best_of, pad_floors};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::process::ExitCode;

/// A failure as the Python exception of the same meaning (hyoka.errors): the exit code the
/// command line would give decides the class; the message is the command line's text.
fn to_py(py: Python<'_>, err: anyhow::Error) -> PyErr {
    let message = cli::message(&err);
    let class = match cli::exit_code(&err) {
        cli::exit::EXIT_INVALID_INPUT => "InvalidInputError",
        cli::exit::EXIT_USAGE => "UsageError",
        _ if is_not_found(&err) => "NotFoundError",
        _ => "HyokaError",
    };
    to_py_class(py, class, message)
}

/// A file or folder that is not there (std's NotFound anywhere in the chain).
fn is_not_found(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    }) || err.chain().any(|c| {
        // The encoder's errors hold the model's transparently: not a link of the chain.
        let model =
            c.downcast_ref::<hyoka::model::ModelError>().or(match c
                .downcast_ref::<hyoka::bertscore::BertScoreError>()
            {
                Some(hyoka::bertscore::BertScoreError::Model(e)) => Some(e),
                _ => None,
            });
        matches!(model, Some(hyoka::model::ModelError::Missing { .. }))
    })
}

/// The exit status of a finished command.
fn exit_status(code: ExitCode) -> u8 {
    (0..=255u8)
        .find(|n| ExitCode::from(*n) == code)
        .unwrap_or(cli::exit::EXIT_FAILURE)
}

/// `hyoka ARGS…` as the command line runs it (argv[0] is the program name); its exit status.
/// Errors are printed as the binary prints them.
/// The process's heap is set up as the binary's (`keep_freed_memory`): this is the `hyoka`
/// entry point's process, not a Python session's.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    hyoka::heap::keep_freed_memory();
    py.detach(|| {
        let args = match cli::parse_from(&argv) {
            Ok(args) => args,
            Err(e) => {
                let _ = e.print();
                return e.exit_code() as u8;
            }
        };
        match cli::run(args) {
            Ok(code) => exit_status(code),
            Err(err) => {
                eprintln!("error: {}", cli::message(&err));
                cli::exit_code(&err)
            }
        }
    })
}

/// `hyoka ARGS…` for the Python API: its exit status, or the error raised as an exception
/// (a bad option: UsageError with clap's message).
#[pyfunction]
fn run(py: Python<'_>, argv: Vec<String>) -> PyResult<u8> {
    let args = cli::parse_from(&argv).map_err(|e| to_py_class(py, "UsageError", e.to_string()))?;
    match py.detach(|| cli::run(args)) {
        Ok(code) => Ok(exit_status(code)),
        Err(err) => Err(to_py(py, err)),
    }
}

/// An exception of hyoka.errors' `class` with `message`.
fn to_py_class(py: Python<'_>, class: &str, message: String) -> PyErr {
    match py
        .import("hyoka.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((message.clone(),)))
    {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => PyRuntimeError::new_err(message),
    }
}

/// The built-in rubrics' names.
#[pyfunction]
fn rubrics() -> Vec<&'static str> {
    hyoka::rubric::builtin_names()
}

/// "cuda" when this build has CUDA and a GPU answers, else "cpu" (bert_score's default device).
#[pyfunction]
fn default_device() -> &'static str {
    if cfg!(feature = "cuda") && hyoka::model::backend::device::parse_device("cuda").is_ok() {
        "cuda"
    } else {
        "cpu"
    }
}

/// The hyoka library's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// An encoder loaded for BERTScore, as `hyoka bertscore` loads it: `model` (folder or Hub id),
/// else bert_score's encoder for `lang`, else the offline multilingual-e5-small.
#[pyclass(module = "hyoka._hyoka", name = "Encoder")]
struct Encoder {
    loaded: LoadedScorer,
    batch_tokens: usize,
}

#[pymethods]
impl Encoder {
    #[new]
    #[pyo3(signature = (model, lang, layer=None, device="cpu".to_string(), dtype="f32".to_string(), batch_tokens=None))]
    fn new(
        py: Python<'_>,
        model: Option<String>,
        lang: String,
        layer: Option<usize>,
        device: String,
        dtype: String,
        batch_tokens: Option<usize>,
    ) -> PyResult<Self> {
        let loaded = py
            .detach(|| -> anyhow::Result<LoadedScorer> {
                let dev = hyoka::model::backend::device::parse_device(&device)?;
                let dt = hyoka::model::backend::device::parse_dtype(Some(&dtype), &dev)?;
                cli::bertscore_cmd::load_encoder(
                    model.as_deref(),
                    &lang,
                    Depth::Layer(layer),
                    dt,
                    &dev,
                )
            })
            .map_err(|e| to_py(py, e))?;
        let batch_tokens = batch_tokens.unwrap_or_else(|| {
            hyoka::bertscore::run::default_batch_tokens(loaded.scorer.encoder.device())
        });
        Ok(Encoder {
            loaded,
            batch_tokens,
        })
    }

    /// The model's name as resolved (folder path or Hub id).
    #[getter]
    fn model(&self) -> String {
        self.loaded.model.name.clone()
    }

    /// The layer whose embeddings are matched.
    #[getter]
    fn layer(&self) -> usize {
        self.loaded.layer
    }

    /// The rescaling baseline (P, R, F) at this layer: from `path` (bert_score's format), else
    /// the one hyoka ships for (lang, model).
    #[pyo3(signature = (lang, path=None))]
    fn baseline(
        &self,
        py: Python<'_>,
        lang: Option<String>,
        path: Option<String>,
    ) -> PyResult<(f64, f64, f64)> {
        let found = cli::bertscore_cmd::resolve_baseline(
            path.as_deref().map(std::path::Path::new),
            true,
            lang.as_deref(),
            &self.loaded,
        )
        .map_err(|e| to_py(py, e))?;
        let (_, b) = found.ok_or_else(|| to_py_class(py, "UsageError", "no baseline".into()))?;
        Ok((b.p, b.r, b.f))
    }

    /// Tokenize candidates and references, and fix what depends on the whole input (idf over all
    /// references, bert_score's padding floors in groups of `group` pairs), so that the pairs can
    /// then be scored in any number of parts with the same numbers.
    /// `idf_sentences`: the documents of idf (bert_score's `idf_sents`) instead of the
    /// references.
    #[pyo3(signature = (candidates, references, idf, group=None, idf_sentences=None))]
    fn prepare(
        &self,
        py: Python<'_>,
        candidates: Vec<String>,
        references: Vec<Vec<String>>,
        idf: bool,
        group: Option<usize>,
        idf_sentences: Option<Vec<String>>,
    ) -> PyResult<Job> {
        if candidates.len() != references.len() {
            return Err(to_py_class(
                py,
                "InvalidInputError",
                format!(
                    "{} candidates but {} references: one reference (or list of references) per candidate",
                    candidates.len(),
                    references.len()
                ),
            ));
        }
        let scorer = &self.loaded.scorer;
        py.detach(|| {
            let cands: Vec<&str> = candidates.iter().map(String::as_str).collect();
            let refs: Vec<Vec<&str>> = references
                .iter()
                .map(|r| r.iter().map(String::as_str).collect())
                .collect();
            let (sentences, pairs) = scorer.pairs(&cands, &refs)?;
            let idf = match &idf_sentences {
                // Each document as the one reference of a pair: idf counts references.
                Some(docs) if idf => {
                    let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
                    let as_refs: Vec<Vec<&str>> = docs.iter().map(|d| vec![*d]).collect();
                    let (doc_sentences, doc_pairs) = scorer.pairs(&docs, &as_refs)?;
                    scorer.idf(true, &doc_sentences, &doc_pairs.pairs)
                }
                _ => scorer.idf(idf, &sentences, &pairs.pairs),
            };
            let floors = pad_floors(&sentences, &pairs.pairs, group);
            let scores = vec![None; pairs.pairs.len()];
            Ok(Job {
                sentences,
                pairs,
                idf,
                floors,
                scores,
            })
        })
        .map_err(|e: hyoka::bertscore::BertScoreError| to_py(py, e.into()))
    }

    /// Score pairs start..end of `job` (the GIL released meanwhile).
    fn score(&self, py: Python<'_>, job: &mut Job, start: usize, end: usize) -> PyResult<()> {
        let end = end.min(job.pairs.pairs.len());
        if start >= end {
            return Ok(());
        }
        let scorer = &self.loaded.scorer;
        let batch_tokens = self.batch_tokens;
        let got = py
            .detach(|| {
                scorer.score_pairs(
                    &job.sentences,
                    &job.pairs.pairs[start..end],
                    &job.idf,
                    &job.floors[start..end],
                    batch_tokens,
                )
            })
            .map_err(|e| to_py(py, e.into()))?;
        for (slot, prf) in job.scores[start..end].iter_mut().zip(got) {
            *slot = Some(prf);
        }
        Ok(())
    }
}

/// One input's tokens, idf and floors, and the scores of its pairs so far.
#[pyclass(module = "hyoka._hyoka", name = "Job")]
struct Job {
    sentences: Sentences,
    pairs: Pairs,
    idf: Idf,
    floors: Vec<(bool, bool)>,
    scores: Vec<Option<Prf>>,
}

#[pymethods]
impl Job {
    /// (candidate, reference) pairs to score.
    #[getter]
    fn pairs(&self) -> usize {
        self.pairs.pairs.len()
    }

    /// Per candidate, P, R and F: the maximum per column over its references, rescaled by
    /// `baseline` (P, R, F) when given. Every pair must have been scored.
    #[pyo3(signature = (baseline=None))]
    fn results(
        &self,
        py: Python<'_>,
        baseline: Option<(f64, f64, f64)>,
    ) -> PyResult<(Vec<f64>, Vec<f64>, Vec<f64>)> {
        let Some(prfs) = self.scores.iter().copied().collect::<Option<Vec<Prf>>>() else {
            return Err(to_py_class(
                py,
                "HyokaError",
                "not every pair has been scored".into(),
            ));
        };
        let base = baseline.map(|(p, r, f)| Prf { p, r, f });
        let (mut ps, mut rs, mut fs) = (Vec::new(), Vec::new(), Vec::new());
        for range in &self.pairs.items {
            let mut best = best_of(&prfs[range.clone()]);
            if let Some(b) = &base {
                best = best.rescale(b);
            }
            ps.push(best.p);
            rs.push(best.r);
            fs.push(best.f);
        }
        Ok((ps, rs, fs))
    }
}

/// A judge loaded as `hyoka judge ARGS…` loads it (the same options), kept between calls.
#[pyclass(module = "hyoka._hyoka", name = "Judge")]
struct Judge {
    loaded: cli::judge_cmd::LoadedJudge,
}

#[pymethods]
impl Judge {
    /// `argv`: a `hyoka judge` command line; its --input and --output are ignored.
    #[new]
    fn new(py: Python<'_>, argv: Vec<String>) -> PyResult<Self> {
        let args = match cli::parse_from(&argv) {
            Ok(cli::Cli {
                command: cli::Command::Judge(args),
            }) => args,
            Ok(_) => return Err(to_py_class(py, "UsageError", "not a judge command".into())),
            Err(e) => return Err(to_py_class(py, "UsageError", e.to_string())),
        };
        let loaded = py
            .detach(|| {
                let rubric = hyoka::prompt::resolve_rubric(&args.rubric)?;
                cli::judge_cmd::LoadedJudge::load(&args, rubric)
            })
            .map_err(|e| to_py(py, e))?;
        Ok(Judge { loaded })
    }

    /// Score items given as JSON texts (one item each, in the items format): the results line
    /// `hyoka judge` would write for each, in the items' order, with no file read or written. A bad item is an InvalidInputError naming `items[N]` and the field.
    /// `progress(done, total)` is called between batches; Ctrl-C (or an exception raised by
    /// `progress`) stops the run there and is raised.
    #[pyo3(signature = (items, progress=None))]
    fn score_items(
        &self,
        py: Python<'_>,
        items: Vec<String>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let parsed = hyoka::data::parse_items(&items).map_err(|e| to_py(py, e.into()))?;
        self.score_in_memory(py, &parsed, progress)
    }

    /// Score the items of an items JSONL file (read as `hyoka judge -i` reads it) into memory,
    /// as `score_items`.
    #[pyo3(signature = (path, progress=None))]
    fn score_file(
        &self,
        py: Python<'_>,
        path: String,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let read = py
            .detach(|| hyoka::data::read_items(std::path::Path::new(&path), false))
            .map_err(|e| to_py(py, e.into()))?;
        self.score_in_memory(py, &read.items, progress)
    }
}

impl Judge {
    fn score_in_memory(
        &self,
        py: Python<'_>,
        items: &[hyoka::data::Item],
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<String>> {
        let pending: std::sync::Mutex<Option<PyErr>> = std::sync::Mutex::new(None);
        let result = py.detach(|| -> anyhow::Result<Vec<String>> {
            let started = std::time::Instant::now();
            let mut report = |done: usize, total: usize| {
                Python::attach(|py| {
                    let stop = py.check_signals().err().or_else(|| {
                        let call = progress.as_ref()?.call1(py, (done, total));
                        call.err()
                    });
                    match stop {
                        Some(e) => {
                            *pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                            std::ops::ControlFlow::Break(())
                        }
                        None => std::ops::ControlFlow::Continue(()),
                    }
                })
            };
            let (summary, stats, lines) =
                self.loaded
                    .judge()
                    .score_lines(items, &self.loaded.opts, &mut report)?;
            cli::judge_cmd::report(&summary, &stats, started.elapsed().as_secs_f64(), "memory");
            Ok(lines)
        });
        result.map_err(
            |e| match pending.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(raised) => raised,
                None => to_py(py, e),
            },
        )
    }
}

#[pymodule]
fn _hyoka(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(rubrics, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(default_device, m)?)?;
    m.add_class::<Encoder>()?;
    m.add_class::<Job>()?;
    m.add_class::<Judge>()?;
    Ok(())
}
