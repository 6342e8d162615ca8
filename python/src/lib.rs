//! `hyoka._hyoka`: the Python package's extension module, a thin face of the hyoka library —
//! as the command line is another. Keyword arguments become the library's settings
//! (`JudgeSpec`, `MetaOptions`), items and results pass as JSON texts in memory, and the
//! library's errors become the exceptions of their kind (hyoka.errors). The `hyoka` command the
//! package installs is the library's command line (`hyoka::cli`).

mod errors;
mod eval;
mod judge;
mod meta;
mod options;

use errors::{exception, raise, usage};
use hyoka::bertscore::{
    BertScoreError, Depth, Idf, LoadedScorer, Pairs, Sentences, load_encoder, pad_floors,
    resolve_baseline,
};
use hyoka::results::prf::{Prf, best_of};
use pyo3::prelude::*;

/// `hyoka ARGS…` as the command line runs it (argv[0] is the program name): its exit status.
/// The process's heap is set up as the binary's (`keep_freed_memory`): this is the `hyoka`
/// entry point's process, not a Python session's.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    hyoka::heap::keep_freed_memory();
    py.detach(|| hyoka::cli::main_with(&argv))
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
    hyoka::VERSION
}

/// An encoder loaded for BERTScore (`bertscore::load_encoder`): `model` (folder, Hub id or
/// bert_score's name), else bert_score's encoder for `lang`.
#[pyclass(module = "hyoka._hyoka", name = "Encoder")]
struct LoadedEncoder {
    loaded: LoadedScorer,
    batch_tokens: usize,
}

#[pymethods]
impl LoadedEncoder {
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
            .detach(|| -> Result<LoadedScorer, BertScoreError> {
                let dev = hyoka::model::backend::device::parse_device(&device)?;
                let dt = hyoka::model::backend::device::parse_dtype(Some(&dtype), &dev)?;
                load_encoder(
                    model.as_deref(),
                    &lang,
                    Depth::Layer(layer),
                    dt,
                    &dev,
                    "model_type=",
                )
            })
            .map_err(raise(py))?;
        let batch_tokens = batch_tokens.unwrap_or_else(|| {
            hyoka::bertscore::run::default_batch_tokens(loaded.scorer.encoder.device())
        });
        Ok(LoadedEncoder {
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
        let found = resolve_baseline(
            path.as_deref().map(std::path::Path::new),
            true,
            lang.as_deref(),
            &self.loaded,
        )
        .map_err(raise(py))?;
        let (_, b) = found.ok_or_else(|| usage(py, "no baseline".into()))?;
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
            return Err(exception(
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
        .map_err(raise::<BertScoreError>(py))
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
            .map_err(raise::<BertScoreError>(py))?;
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
            return Err(exception(
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

#[pymodule]
fn _hyoka(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(rubrics, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(default_device, m)?)?;
    m.add_function(wrap_pyfunction!(meta::meta, m)?)?;
    m.add_function(wrap_pyfunction!(eval::eval, m)?)?;
    m.add_class::<LoadedEncoder>()?;
    m.add_class::<Job>()?;
    m.add_class::<judge::Judge>()?;
    Ok(())
}
