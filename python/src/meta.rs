//! `hyoka.meta`: the library's meta-evaluation over items and results given as files or as
//! JSON texts in memory, its summary returned as the JSON that summary.json holds.

use crate::errors::{raise, to_py, usage};
use crate::options::Options;
use hyoka::meta::{
    Alignment, Evaluation, MetaError, MetaOptions, MetaRequest, Naming, parse_aspect_levels,
};
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

/// The meta-evaluation the keywords ask for (its `half` and `accept_unhashed` are `meta`'s
/// own: `stats_of` takes the rest, which `eval` takes too).
fn request_of(options: &mut Options<'_>) -> PyResult<MetaRequest> {
    let mut request = stats_of(options)?;
    request.half = options.choice("half", parse_choice)?;
    request.accept_unhashed = options.take::<bool>("accept_unhashed")?.unwrap_or(false);
    Ok(request)
}

/// The statistics' keywords (`w`, `fit_w`, `bootstrap`, `seed`, `calibrate`, `preferences`, …).
pub fn stats_of(options: &mut Options<'_>) -> PyResult<MetaRequest> {
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
    if let Some(e) = options.take::<f64>("alt_test_epsilon")? {
        o.alt_test.epsilon = e;
    }
    if let Some(a) = options.take::<String>("alt_test_alignment")? {
        o.alt_test.alignment = Alignment::parse(&a).ok_or_else(|| {
            usage(
                py,
                format!("alt_test_alignment: `{a}` is not `neg-rmse` or `accuracy`"),
            )
        })?;
    }
    o.check().map_err(|e| to_py(py, &e))?;
    let preferences = options.take::<std::path::PathBuf>("preferences")?;
    let tie_margin = options.take::<f64>("tie_margin")?.unwrap_or(0.0);
    if !(tie_margin.is_finite() && tie_margin >= 0.0) {
        return Err(usage(
            py,
            format!("tie_margin: must be a margin of 0 or more, got {tie_margin}"),
        ));
    }
    Ok(MetaRequest {
        options: o,
        tie_margin,
        preferences,
        half: None,
        accept_unhashed: false,
    })
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
    let request = request_of(&mut options)?;
    options.finish()?;
    let scores: Vec<Source> = scores.extract()?;
    if scores.is_empty() {
        return Err(usage(
            py,
            "meta needs at least one results list or file".into(),
        ));
    }
    py.detach(|| -> Result<String, MetaError> {
        let (items, origin) = match items {
            Source::Path(p) => (
                hyoka::data::read_items(&p, false)?.items,
                p.display().to_string(),
            ),
            Source::Texts(t) => (hyoka::data::parse_items(&t)?, "items".to_string()),
        };
        let inputs = scores
            .iter()
            .enumerate()
            .map(|(k, s)| match s {
                Source::Path(p) => ResultsInput::open(p),
                Source::Texts(t) => Ok(ResultsInput::from_lines(&format!("scores[{k}]"), t)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let evaluation = hyoka::meta::evaluate(
            items,
            &origin,
            &inputs,
            &request,
            Naming::Keywords,
            &mut |note| eprintln!("{note}"),
            &|_, _| {},
        )?;
        let json = match evaluation {
            Evaluation::Scores { summary, .. } => serde_json::to_string(&summary),
            Evaluation::Pairwise(summary) => serde_json::to_string(&summary),
        };
        json.map_err(|e| MetaError::Input(format!("summary: {e}")))
    })
    .map_err(raise(py))
}
