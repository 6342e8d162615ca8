//! One meta-evaluation for every face (the command line, Python): items and results inputs in,
//! a summary out — of judge, BERTScore and likelihood results (`Summary`), or of pairwise
//! results given alone (`PairwiseSummary`). The faces read their inputs, write the outputs and
//! name the settings their own way (`Naming`); what is refused, and why, is decided here once.

use super::inputs::{Half, JoinRules, join, select_half};
use super::pairwise::{PairwiseOptions, PairwiseSummary, Preferences, is_pairwise, read_records};
use super::{Frame, MetaError, MetaOptions, Summary};
use crate::data::Item;
use crate::results::reader::ResultsInput;
use std::path::PathBuf;

/// The settings of a meta-evaluation beyond the statistics' own.
#[derive(Clone, Debug, Default)]
pub struct MetaRequest {
    pub options: MetaOptions,
    /// The pairwise results' statistics (`tie_margin`); their bootstrap settings are
    /// `options.bootstrap`'s.
    pub tie_margin: f64,
    /// Human preferences given per pair (pairwise results only).
    pub preferences: Option<PathBuf>,
    /// Meta-evaluate one half of the dialogues only (judge and BERTScore results only).
    pub half: Option<Half>,
    /// Use results lines without `input_sha256`.
    pub accept_unhashed: bool,
}

/// How the face that asks names a setting in its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// The command line's flags: `--fit-w`.
    Flags,
    /// Python's keywords: `fit_w`.
    Keywords,
}

impl Naming {
    /// `setting` as this face names it; settings are given as flags (`--fit-w`).
    pub fn name(self, setting: &str) -> String {
        match self {
            Naming::Flags => setting.to_string(),
            Naming::Keywords => setting.trim_start_matches("--").replace('-', "_"),
        }
    }

    fn list(self, settings: &[&str]) -> String {
        let names: Vec<String> = settings.iter().map(|s| self.name(s)).collect();
        match names.as_slice() {
            [] => String::new(),
            [one] => one.clone(),
            [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
        }
    }
}

/// What a meta-evaluation gives.
pub enum Evaluation {
    /// Judge, BERTScore and likelihood results: the summary and the frame it was computed over
    /// (the report draws its charts from it).
    Scores {
        summary: Box<Summary>,
        frame: Box<Frame>,
    },
    /// Pairwise results: the systems ranked and compared with human preferences.
    Pairwise(PairwiseSummary),
}

/// Meta-evaluate `inputs` against `items` (read from `origin`). Notes on the inputs (the half
/// taken, items without a line, lines left out) go to `notes`; `progress` hears (done, total)
/// of the bootstrap resamples, from any thread.
pub fn evaluate(
    mut items: Vec<Item>,
    origin: &str,
    inputs: &[ResultsInput],
    request: &MetaRequest,
    naming: Naming,
    notes: &mut dyn FnMut(String),
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Evaluation, MetaError> {
    if inputs.is_empty() {
        return Err(MetaError::Usage(
            "meta needs at least one results file".into(),
        ));
    }
    for (n, input) in inputs.iter().enumerate() {
        if is_pairwise(input)? {
            return pairwise(&items, inputs, n, request, naming, notes).map(Evaluation::Pairwise);
        }
    }
    if request.preferences.is_some() || request.tie_margin != 0.0 {
        return Err(MetaError::Usage(format!(
            "{}: human preferences are for pairwise results (hyoka compare's)",
            naming.list(&["--preferences", "--tie-margin"])
        )));
    }
    let options = &request.options;
    if let Some(half) = request.half {
        let seed = options.bootstrap.seed;
        select_half(&mut items, half, seed, origin)?;
        notes(format!(
            "{} items in the {} half (seed {seed})",
            items.len(),
            half.name()
        ));
    }
    let rules = JoinRules {
        strict: true,
        accept_unhashed: request.accept_unhashed,
    };
    let joined = join(items, origin, inputs, rules)?;
    for note in joined.notes {
        notes(note);
    }
    let mut frame = joined.frame;
    options
        .breakdown
        .check_aspects(frame.distributions.iter().map(|d| d.aspect.as_str()))?;
    let summary = Summary::compute_with_progress(&mut frame, options, progress)?;
    Ok(Evaluation::Scores {
        summary: Box::new(summary),
        frame: Box::new(frame),
    })
}

/// The pairwise results of `inputs[n]`, which must be given alone and without the settings
/// only judge and BERTScore results use.
fn pairwise(
    items: &[Item],
    inputs: &[ResultsInput],
    n: usize,
    request: &MetaRequest,
    naming: Naming,
    notes: &mut dyn FnMut(String),
) -> Result<PairwiseSummary, MetaError> {
    let input = &inputs[n];
    if inputs.len() > 1 {
        return Err(MetaError::Usage(format!(
            "{} holds pairwise results (hyoka compare): give it to meta alone, without {}",
            input.path.display(),
            inputs[if n == 0 { 1 } else { 0 }].path.display()
        )));
    }
    let mut unused = request.options.not_for_pairwise();
    if request.half.is_some() {
        unused.push("--half");
    }
    if !unused.is_empty() {
        return Err(MetaError::Usage(format!(
            "{}: for judge and BERTScore results; pairwise results take {}",
            naming.list(&unused),
            naming.list(&[
                "--bootstrap",
                "--confidence",
                "--seed",
                "--tie-margin",
                "--preferences"
            ])
        )));
    }
    let records = read_records(input)?;
    let mut frame = super::pairwise::join(items, records, &input.path)?;
    if let Some(p) = &request.preferences {
        frame.set_preferences(Preferences::read(p)?, p)?;
    }
    if frame.unmatched > 0 {
        notes(format!(
            "{}: {} pairs whose items are not in the items file were left out",
            input.path.display(),
            frame.unmatched
        ));
    }
    let bootstrap = request.options.bootstrap;
    let options = PairwiseOptions {
        bootstrap: bootstrap.resamples,
        seed: bootstrap.seed,
        level: bootstrap.confidence,
        tie_margin: request.tie_margin,
    };
    Ok(super::pairwise::summarize(&frame, &options))
}

#[cfg(test)]
mod tests {
    use super::Naming;

    #[test]
    fn each_face_names_settings_its_own_way() {
        assert_eq!(
            Naming::Flags.list(&["--fit-w", "--calibrate", "--half"]),
            "--fit-w, --calibrate and --half"
        );
        assert_eq!(
            Naming::Keywords.list(&["--fit-w", "--calibrate"]),
            "fit_w and calibrate"
        );
    }
}
