//! A judge as a value: what to load (models, rubric, runtime options, run options) and the
//! loaded judge kept between calls — what `hyoka judge` runs once and the Python package's
//! `Judge` keeps.

use super::JudgeError;
use super::compare::Compare;
use super::json::Decoding;
use super::run::{Judge, JudgeStats, RunOptions};
use crate::data::{Item, Pairs};
use crate::model::load::default_model::{HoldsModelError, ModelKind, load_default};
use crate::model::{LoadedModel, ModelError, RuntimeOptions, RuntimeSettings};
use crate::results::{Progress, Record, ResultsError, RunError, RunSummary};
use crate::rubric::Rubric;
use candle_core::Device;
use std::path::Path;

/// The judge used when none is named (`hyoka eval` without --model): a small model a CPU
/// runs, from the Hugging Face Hub (or its cache).
pub const DEFAULT_JUDGE: &str =
    "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// json mode's memory for keys and values, from GiB: above 0 and at most 2^20 (a PiB; NaN and
/// infinities refused), in bytes.
pub fn json_cache_bytes(gib: f64) -> Result<usize, ModelError> {
    if gib > 0.0 && gib <= (1u64 << 20) as f64 {
        Ok((gib * (1u64 << 30) as f64) as usize)
    } else {
        Err(ModelError::Setting {
            flag: "--json-cache-gib".into(),
            message: format!("must be a number of GiB above 0, got {gib}"),
        })
    }
}

/// A sampling temperature for json rubrics: finite and ≥ 0 (0: greedy).
pub fn check_temperature(t: f64) -> Result<f64, ModelError> {
    if t >= 0.0 && t.is_finite() {
        Ok(t)
    } else {
        Err(ModelError::Setting {
            flag: "temperature".into(),
            message: format!("must be a finite number ≥ 0, got {t}"),
        })
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            batch_tokens: 4096,
            max_prompt_tokens: None,
            overwrite: false,
            greedy_baseline: None,
            decoding: Decoding {
                temperature: 0.0,
                seed: 0,
            },
            json_cache_bytes: super::JSON_CACHE_BYTES,
        }
    }
}

/// What a judge is: built by the command line from its flags and by the Python package from
/// its keyword arguments; every setting in it is in the outputs' provenance.
#[derive(Clone, Debug)]
pub struct JudgeSpec {
    /// Judge models (local .gguf files or checkpoint folders, or Hub ids); several: each one's
    /// scores and their mean. None: `DEFAULT_JUDGE`, from the Hub or its cache only.
    pub models: Vec<String>,
    /// The rubric, resolved and checked (`prompt::resolve_rubric`), and where it came from.
    pub rubric: Rubric,
    pub rubric_source: String,
    pub runtime: RuntimeOptions,
    /// Expected sha256 of the first model's weights.
    pub sha256: Option<String>,
    pub run: RunOptions,
}

impl JudgeSpec {
    /// The built-in rubric of this name, or the rubric file, with every other setting at its
    /// default.
    pub fn new(rubric: &str, models: Vec<String>) -> Result<Self, crate::rubric::RubricError> {
        let (rubric, rubric_source) = crate::prompt::resolve_rubric(rubric)?;
        Ok(JudgeSpec {
            models,
            rubric,
            rubric_source,
            runtime: RuntimeOptions::default(),
            sha256: None,
            run: RunOptions::default(),
        })
    }

    /// Each run setting in its range (the command line's parsers check the same as it reads
    /// its flags): a usage error naming the setting.
    pub fn check(&self) -> Result<(), ModelError> {
        let bad = |setting: &str, message: String| {
            Err(ModelError::Setting {
                flag: setting.into(),
                message,
            })
        };
        let run = &self.run;
        if run.batch_tokens == 0 || run.max_prompt_tokens == Some(0) {
            return bad(
                "batch_tokens, max_prompt_tokens",
                "must be whole numbers of at least 1".into(),
            );
        }
        if run.json_cache_bytes == 0 {
            return bad("json_cache_gib", "must be above 0".into());
        }
        check_temperature(run.decoding.temperature)?;
        Ok(())
    }

    /// Load the models on the device the runtime options name.
    pub fn load(self) -> Result<LoadedJudge, JudgeError> {
        let (device, settings) = self.runtime.settings()?;
        self.load_on(&device, &settings)
    }

    /// Load the models on `device` with `settings` (`RuntimeOptions::settings`, resolved by a
    /// caller that checks them before other work).
    pub fn load_on(
        self,
        device: &Device,
        settings: &RuntimeSettings,
    ) -> Result<LoadedJudge, JudgeError> {
        self.check()?;
        let load = |name: &str, expect: Option<&str>| {
            self.runtime.load_model(name, device, settings, expect)
        };
        let models = if self.models.is_empty() {
            vec![load_default(
                &format!("the default judge {DEFAULT_JUDGE}"),
                DEFAULT_JUDGE,
                ModelKind::Judge,
                "--model",
                |name| load(name, self.sha256.as_deref()),
            )?]
        } else {
            let mut models = Vec::with_capacity(self.models.len());
            for (i, name) in self.models.iter().enumerate() {
                eprintln!("loading {name} ...");
                let expect = if i == 0 { self.sha256.as_deref() } else { None };
                models.push(load(name, expect)?);
            }
            models
        };
        Ok(LoadedJudge {
            models,
            rubric: self.rubric,
            rubric_source: self.rubric_source,
            opts: self.run,
        })
    }
}

impl HoldsModelError for JudgeError {
    fn model_error(&self) -> Option<&ModelError> {
        match self {
            JudgeError::Model(e) => Some(e),
            _ => None,
        }
    }
}

/// A judge's models, rubric and run options, loaded.
pub struct LoadedJudge {
    pub models: Vec<LoadedModel>,
    pub rubric: Rubric,
    pub rubric_source: String,
    pub opts: RunOptions,
}

impl LoadedJudge {
    /// The judge of these models, rubric and options (`Judge::run`, `Judge::score_lines`).
    pub fn judge(&self) -> Judge<'_> {
        Judge {
            models: &self.models,
            rubric: &self.rubric,
            rubric_source: &self.rubric_source,
        }
    }

    /// Score `items` into the results file `output` (continued when it holds lines of the same
    /// run): the run's summary and the judge's figures.
    pub fn run(
        &self,
        items: &[Item],
        output: &Path,
        progress: &mut Progress<'_>,
    ) -> Result<(RunSummary, JudgeStats), RunError<JudgeError>> {
        self.judge().run(items, output, &self.opts, progress)
    }

    /// The pairwise judge of these models and options for `pairs` (its rubric must be
    /// pairwise).
    pub fn comparer(&self, pairs: &Pairs) -> Compare<'_> {
        Compare {
            judge: self.judge(),
            pairing: pairs.pairing.clone(),
        }
    }

    /// Judge `pairs` (`data::form_pairs`) into the results file `output` (continued when it
    /// holds lines of the same run).
    pub fn compare(
        &self,
        pairs: &Pairs,
        output: &Path,
        progress: &mut Progress<'_>,
    ) -> Result<(RunSummary, JudgeStats), RunError<JudgeError>> {
        self.comparer(pairs)
            .run(&pairs.pairs, output, &self.opts, progress)
    }

    /// Judge `pairs` in memory as typed results (`Body::Compare`), in the pairs' order.
    pub fn compare_records(
        &self,
        pairs: &Pairs,
        progress: &mut Progress<'_>,
    ) -> Result<(RunSummary, JudgeStats, Vec<Record>), RunError<JudgeError>> {
        let (summary, stats, lines) =
            self.comparer(pairs)
                .score_lines(&pairs.pairs, &self.opts, progress)?;
        Ok((summary, stats, records_of(&lines)?))
    }

    /// Score `items` in memory as typed results: each item's record (`score_lines`' lines, read
    /// as `results::Record`, what `meta` and the readers take), in the items' order.
    pub fn score_records(
        &self,
        items: &[Item],
        progress: &mut Progress<'_>,
    ) -> Result<(RunSummary, JudgeStats, Vec<Record>), RunError<JudgeError>> {
        let (summary, stats, lines) = self.score_lines(items, progress)?;
        Ok((summary, stats, records_of(&lines)?))
    }

    /// Score `items` in memory: each item's results line (the bits `run` writes), in the items'
    /// order; nothing read or written.
    pub fn score_lines(
        &self,
        items: &[Item],
        progress: &mut Progress<'_>,
    ) -> Result<(RunSummary, JudgeStats, Vec<String>), RunError<JudgeError>> {
        self.judge().score_lines(items, &self.opts, progress)
    }
}

/// Results lines in memory read back as typed records.
fn records_of(lines: &[String]) -> Result<Vec<Record>, RunError<JudgeError>> {
    (lines.iter().enumerate())
        .map(|(n, line)| {
            Record::parse(line).map_err(|e| {
                RunError::Results(ResultsError::Corrupt {
                    path: "items in memory".into(),
                    line: n + 1,
                    message: e.to_string(),
                })
            })
        })
        .collect()
}
