//! `hyoka.meta`: the library's meta-evaluation over items and results given as files or as
//! JSON texts in memory, its summary returned as the JSON that summary.json holds.

use crate::errors::{raise, to_py, usage};
use crate::options::Options;
use hyoka::meta::pairwise::{PairwiseOptions, is_pairwise, read_records};
use hyoka::meta::{Half, MetaError, MetaOptions, Summary, parse_aspect_levels};
use hyoka::model::runtime_options::parse_choice;
use hyoka::results::reader::ResultsInput;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Items or results: a path, or JSON texts (one item or results line each).
#[derive(FromPyObject)]
pub enum Source {
    Texts(Vec<String>),
    Path(std::path::PathBuf),
}

/// Pairwise results' settings: the statistics and the human preferences given per pair.
type PairwiseSettings = (PairwiseOptions, Option<std::path::PathBuf>);

fn options_of(
    options: &mut Options<'_>,
) -> PyResult<(MetaOptions, Option<Half>, PairwiseSettings)> {
    let py = options.py();
    let mut o = MetaOptions::default();
    if let Some(w) = options.take::<f64>("w")? {
        o.w = Some(w);
    }
    if options.take::<bool>("no_combine")? == Some(true) {
        o.w = None;
    }
    if let Some(c) = options.take::<String>("combine_with")? {
        o.combine_with = c;
    }
    o.fit_w = options.take::<bool>("fit_w")?.unwrap_or(false);
    if let Some(n) = options.take::<usize>("bootstrap")? {
        o.bootstrap.resamples = n;
    }
    if let Some(c) = options.take::<f64>("confidence")? {
        o.bootstrap.confidence = c;
    }
    if let Some(seed) = options.take::<u64>("seed")? {
        o.bootstrap.seed = seed;
        o.breakdown.seed = seed;
    }
    o.breakdown.calibrate = options.take::<bool>("calibrate")?.unwrap_or(false);
    if let Some(t) = options.take::<f64>("dbdc_threshold")? {
        o.breakdown.threshold = t;
    }
    for map in options
        .take::<Vec<String>>("breakdown_levels")?
        .unwrap_or_default()
    {
        let levels =
            parse_aspect_levels(&map).map_err(|m| usage(py, format!("breakdown_levels: {m}")))?;
        o.breakdown.levels.push(levels);
    }
    let half = options.choice::<Half>("half", parse_choice)?;
    o.check().map_err(|e| to_py(py, &e))?;
    let mut pairwise = PairwiseOptions {
        bootstrap: o.bootstrap.resamples,
        seed: o.bootstrap.seed,
        level: o.bootstrap.confidence,
        ..PairwiseOptions::default()
    };
    let preferences = options.take::<std::path::PathBuf>("preferences")?;
    if let Some(m) = options.take::<f64>("tie_margin")? {
        if !(m.is_finite() && m >= 0.0) {
            return Err(usage(
                py,
                format!("tie_margin: must be a margin of 0 or more, got {m}"),
            ));
        }
        pairwise.tie_margin = m;
    }
    Ok((o, half, (pairwise, preferences)))
}

/// Correlations of `scores` (results: paths or lists of lines) with the human ratings of
/// `items`: the summary as JSON text. Notes on the inputs (items without a line, error lines)
/// are printed on stderr as `hyoka meta` prints them.
#[pyfunction]
#[pyo3(signature = (items, scores, options=None))]
pub fn meta(
    py: Python<'_>,
    items: Source,
    scores: &Bound<'_, PyList>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let mut options = Options::new(py, options)?;
    let (opts, half, (pairwise, preferences)) = options_of(&mut options)?;
    let accept_unhashed = options.take::<bool>("accept_unhashed")?.unwrap_or(false);
    options.finish()?;
    let scores: Vec<Source> = scores.extract()?;
    if scores.is_empty() {
        return Err(usage(
            py,
            "meta needs at least one results list or file".into(),
        ));
    }
    py.detach(|| -> Result<String, MetaError> {
        let (mut items, origin) = match items {
            Source::Path(p) => (
                hyoka::data::read_items(&p, false)?.items,
                p.display().to_string(),
            ),
            Source::Texts(t) => (hyoka::data::parse_items(&t)?, "items".to_string()),
        };
        if let Some(half) = half {
            hyoka::meta::select_half(&mut items, half, opts.bootstrap.seed, &origin)?;
        }
        let inputs = scores
            .iter()
            .enumerate()
            .map(|(k, s)| match s {
                Source::Path(p) => ResultsInput::open(p),
                Source::Texts(t) => Ok(ResultsInput::from_lines(&format!("scores[{k}]"), t)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (k, input) in inputs.iter().enumerate() {
            if is_pairwise(input)? {
                let records = read_records(input)?;
                // By the names Python takes them (`--fit-w` is `fit_w`).
                let mut unused: Vec<String> = opts
                    .not_for_pairwise()
                    .iter()
                    .map(|flag| flag.trim_start_matches("--").replace('-', "_"))
                    .collect();
                if half.is_some() {
                    unused.push("half".into());
                }
                if !unused.is_empty() {
                    return Err(MetaError::Usage(format!(
                        "{}: for judge and BERTScore results; pairwise results take bootstrap, confidence, seed, tie_margin and preferences",
                        unused.join(", ")
                    )));
                }
                if inputs.len() > 1 {
                    return Err(MetaError::Usage(format!(
                        "scores[{k}] holds pairwise results: give them to meta alone"
                    )));
                }
                let mut frame = hyoka::meta::pairwise::join(&items, records, &input.path)?;
                if let Some(p) = &preferences {
                    frame.set_preferences(hyoka::meta::pairwise::Preferences::read(p)?, p)?;
                }
                let summary = hyoka::meta::pairwise::summarize(&frame, &pairwise);
                return serde_json::to_string(&summary)
                    .map_err(|e| MetaError::Input(format!("summary: {e}")));
            }
        }
        if preferences.is_some() || pairwise.tie_margin != 0.0 {
            return Err(MetaError::Usage(
                "preferences, tie_margin: human preferences are for pairwise results".into(),
            ));
        }
        let rules = hyoka::meta::JoinRules {
            strict: true,
            accept_unhashed,
        };
        let mut joined = hyoka::meta::join(items, &origin, &inputs, rules)?;
        for note in &joined.notes {
            eprintln!("{note}");
        }
        let frame = &mut joined.frame;
        opts.breakdown
            .check_aspects(frame.distributions.iter().map(|d| d.aspect.as_str()))?;
        let summary = Summary::compute(frame, &opts)?;
        serde_json::to_string(&summary).map_err(|e| MetaError::Input(format!("summary: {e}")))
    })
    .map_err(raise(py))
}
