//! `hyoka.eval`: the library's evaluation (`eval::run`) with its settings from keyword
//! arguments — the folder `hyoka eval` writes, from Python.

use crate::errors::{to_py, usage};
use crate::meta::Source;
use crate::options::Options;
use hyoka::data::select::Shard;
use hyoka::eval::{EncoderChoice, EvalItems, EvalSpec, Reporter, Sample, TranslateSpec};
use hyoka::judge::JudgeSpec;
use hyoka::meta::Naming;
use hyoka::model::runtime_options::parse_choice;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Mutex;

/// The judge's models: one name or a list; none: the default judge.
#[derive(FromPyObject)]
enum Models {
    One(String),
    Many(Vec<String>),
}

fn spec_of(options: &mut Options<'_>, output: PathBuf) -> PyResult<EvalSpec> {
    let py = options.py();
    let stats = crate::meta::stats_of(options)?;
    let models = match options.take::<Models>("model")? {
        None => Vec::new(),
        Some(Models::One(m)) => vec![m],
        Some(Models::Many(ms)) if ms.is_empty() => {
            return Err(usage(
                py,
                "model: an empty list: name a judge model, or leave model out for the default judge"
                    .into(),
            ));
        }
        Some(Models::Many(ms)) => ms,
    };
    let rubric = options
        .take::<String>("rubric")?
        .unwrap_or_else(|| "dialogue6-ja".into());
    let mut judge = JudgeSpec::new(&rubric, models).map_err(|e| to_py(py, &e))?;
    judge.run.overwrite = options.take::<bool>("overwrite")?.unwrap_or(false);
    crate::judge::apply(&mut judge, options)?;
    if judge.run.decoding.temperature != 0.0 || judge.run.greedy_baseline.is_some() {
        return Err(usage(
            py,
            "temperature, greedy_baseline: eval judges by the score distributions (hyoka.Judge takes them)"
                .into(),
        ));
    }
    let sample = options
        .take::<usize>("sample_dialogues")?
        .map(|groups| -> PyResult<Sample> {
            Ok(Sample {
                groups,
                seed: options.take::<u64>("sample_seed")?.unwrap_or(0),
            })
        })
        .transpose()?;
    let shard = match options.take::<String>("shard")? {
        Some(s) => Some(Shard::parse(&s).map_err(|m| usage(py, format!("shard: {m}")))?),
        None => None,
    };
    let lang = options.take::<String>("lang")?;
    let no_bertscore = options.take::<bool>("no_bertscore")?.unwrap_or(false);
    let encoder = EncoderChoice {
        model: options.take::<String>("bertscore_model")?,
        layer: options.take::<usize>("layer")?,
        rescale: options.take::<bool>("rescale")?.unwrap_or(false),
        against: options.choice("against", parse_choice)?,
    };
    let likelihood = options
        .take::<Vec<String>>("likelihood")?
        .unwrap_or_default();
    let translate = match options.take::<String>("translate")? {
        Some(to) => Some(TranslateSpec {
            to,
            rubric: options.take::<String>("translate_rubric")?,
            prompt: options.take::<String>("translate_prompt")?,
            model: options.take::<String>("translate_model")?,
            bertscore_model: options.take::<String>("translate_bertscore_model")?,
            layer: options.take::<usize>("translate_layer")?,
            keep_unfinished: options
                .take::<bool>("translate_keep_unfinished")?
                .unwrap_or(false),
        }),
        None => None,
    };
    let baseline = options.take::<String>("baseline")?;
    Ok(EvalSpec {
        judge,
        output,
        sample,
        shard,
        lang,
        bertscore: (!no_bertscore).then_some(encoder),
        likelihood,
        translate,
        baseline,
        stats,
    })
}

/// What the run says: notes on stderr as the command prints them, progress to Python's
/// `progress(step, done, total)`; Ctrl-C (or an exception `progress` raises) stops the step.
struct Said<'a> {
    progress: Option<&'a Py<PyAny>>,
    pending: &'a Mutex<Option<PyErr>>,
}

impl Reporter for Said<'_> {
    fn note(&self, line: &str) {
        eprintln!("{line}");
    }

    /// The tables are in summary.md; nothing is printed on Python's stdout.
    fn table(&self, _text: &str) {}

    fn progress(&self, step: &str, done: usize, total: usize) -> ControlFlow<()> {
        Python::attach(|py| {
            let stop = py.check_signals().err().or_else(|| {
                let call = self.progress?.call1(py, (step, done, total));
                call.err()
            });
            match stop {
                Some(e) => {
                    *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    ControlFlow::Break(())
                }
                None => ControlFlow::Continue(()),
            }
        })
    }

    fn step_done(&self, _step: &str) {}
}

/// Evaluate `items` (an items JSONL path, or JSON texts) into `output` as `hyoka eval` does:
/// the folder's path and what failed (a rerun tries it again).
#[pyfunction]
#[pyo3(signature = (items, output, options=None, progress=None))]
pub fn eval(
    py: Python<'_>,
    items: Source,
    output: PathBuf,
    options: Option<&Bound<'_, PyDict>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<(String, Vec<String>)> {
    let mut options = Options::new(py, options)?;
    let spec = spec_of(&mut options, output)?;
    options.finish()?;
    let pending: Mutex<Option<PyErr>> = Mutex::new(None);
    let said = Said {
        progress: progress.as_ref(),
        pending: &pending,
    };
    let done = py.detach(|| -> Result<_, hyoka::eval::EvalError> {
        let items = match items {
            Source::Path(path) => {
                let dir = match spec.shard {
                    Some(s) => spec.output.join(s.folder_name()),
                    None => spec.output.clone(),
                };
                hyoka::eval::refuse_input_as_output(&dir, &path)?;
                let read = hyoka::data::read_items(&path, false)?;
                EvalItems {
                    items: read.items,
                    file: Some((path, read.lines)),
                }
            }
            Source::Texts(texts) => EvalItems {
                items: hyoka::data::parse_items(&texts)?,
                file: None,
            },
        };
        hyoka::eval::run(&spec, items, Naming::Keywords, &said)
    });
    let done =
        done.map_err(
            |e| match pending.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(raised) => raised,
                None => to_py(py, &e),
            },
        )?;
    Ok((done.dir.display().to_string(), done.failed))
}
