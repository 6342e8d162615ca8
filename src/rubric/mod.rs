//! Stage 2 — rubrics: what is scored (aspects and their integer scales) and the prompt templates
//! that ask a judge for it. Rubrics are TOML files users write; four are built in.

mod builtin;

pub use builtin::{BUILTIN, builtin, builtin_names};

use crate::checksum::sha256_hex;
use crate::data::Scope;
use crate::definition::{Named, builtin_origin, look_up};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum RubricError {
    #[error("{}: {source}", file.display())]
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: {field}: {message}")]
    Invalid {
        origin: String,
        field: String,
        message: String,
    },
    #[error("no built-in rubric named {name:?} and no such file (built-in: {})", builtin_names().join(", "))]
    Unknown { name: String },
    #[error("{}: a folder, not a rubric file: name a .toml or .json file in it", path.display())]
    Folder { path: PathBuf },
}

/// How the judge answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputMode {
    /// One integer per aspect, each read after its own answer prefix.
    Score,
    /// One JSON object: a reason string, then one integer per aspect in rubric order.
    Json,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    pub score: i64,
    // Serialised as null when absent, so templates can test `{% if l.example %}`.
    #[serde(default)]
    pub label: Option<String>,
    pub description: String,
    #[serde(default)]
    pub example: Option<String>,
    /// The human rating this level stands for, in the items' numbers (e.g. DBDC3's breakdown
    /// labels O = 1, T = 0.5, X = 0): lets meta-evaluation compare the judge's distribution
    /// with the raters' one. A rubric gives it for every level of an aspect or for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aspect {
    /// Stable identifier used in outputs and on the command line.
    pub key: String,
    /// What the judge sees (and, in json mode, the JSON key).
    pub name: String,
    pub min: i64,
    pub max: i64,
    pub definition: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub levels: Vec<Level>,
    /// Keys of `human` ratings in the items that this aspect is compared against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub human: Vec<String>,
}

impl Aspect {
    /// Every valid score, lowest first.
    pub fn scores(&self) -> Vec<i64> {
        (self.min..=self.max).collect()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptTemplates {
    /// System message template (optional; some chat templates have no system role).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// User message template.
    pub user: String,
    /// Start of the judge's answer, right before the score: rendered once per aspect in score
    /// mode (with `aspect`), once in json mode. Everything before it is shared by all aspects.
    #[serde(default)]
    pub answer: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonOutput {
    /// Key of the free-text reason written before the scores.
    pub reason_key: String,
    /// Upper bound on the reason's length, in tokens.
    #[serde(default = "default_reason_tokens")]
    pub reason_max_tokens: usize,
}

fn default_reason_tokens() -> usize {
    384
}

/// The longest reason a json rubric may ask for, in tokens.
pub const MAX_REASON_TOKENS: usize = 1 << 20;

/// A pairwise rubric's verdicts as scores of its scale: which score says the response shown
/// first is better, which the one shown second, and (where the rubric allows one) a tie.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairwiseVerdicts {
    pub first: i64,
    pub second: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tie: Option<i64>,
}

/// What one verdict score says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// The response shown first is better.
    First,
    /// The response shown second is better.
    Second,
    Tie,
}

impl PairwiseVerdicts {
    /// What `score` says (None: not a verdict score).
    pub fn meaning(&self, score: i64) -> Option<Shown> {
        if score == self.first {
            Some(Shown::First)
        } else if score == self.second {
            Some(Shown::Second)
        } else if Some(score) == self.tie {
            Some(Shown::Tie)
        } else {
            None
        }
    }

    /// The verdict scores, lowest first.
    fn scale(&self) -> Vec<i64> {
        let mut s: Vec<i64> = [Some(self.first), Some(self.second), self.tie]
            .into_iter()
            .flatten()
            .collect();
        s.sort_unstable();
        s
    }
}

/// A rubric as written in its TOML file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rubric {
    pub name: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    pub output: OutputMode,
    /// `dialogue`: the rubric judges whole dialogues (items of scope `dialogue`); by default
    /// it judges a response in its context.
    #[serde(default, skip_serializing_if = "Scope::is_turn")]
    pub scope: Scope,
    /// Keep at most this many context turns (the most recent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context_turns: Option<usize>,
    pub prompt: PromptTemplates,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<JsonOutput>,
    /// A pairwise rubric (`hyoka compare`): its templates show two responses
    /// (`responses[0]`, `responses[1]`) and every aspect's scale is these verdicts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairwise: Option<PairwiseVerdicts>,
    pub aspects: Vec<Aspect>,
}

impl Rubric {
    /// Why this rubric cannot judge `items`, if it cannot: a rubric judges items of its own
    /// scope only (a whole-dialogue rating is not a rating of its last turn, nor the reverse).
    pub fn scope_mismatch(&self, items: &[crate::data::Item]) -> Option<String> {
        let other = items.iter().find(|i| i.scope != self.scope)?;
        Some(match self.scope {
            Scope::Turn => format!(
                "rubric {} judges a response in its context, and item {:?} is a whole dialogue (scope \"dialogue\"): use a dialogue rubric (dslc3-open-ja, dslc3-situation-ja, duo-ed-ja, duo-wow-ja, duo-ed-en, duo-wow-en) or one with scope = \"dialogue\"",
                self.name, other.id
            ),
            Scope::Dialogue => format!(
                "rubric {} judges whole dialogues, and item {:?} is a response in its context: give items of scope \"dialogue\" (hyoka import dslc3 and hyoka import duo write them)",
                self.name, other.id
            ),
        })
    }

    /// A built-in name or a path to a rubric file.
    pub fn resolve(name_or_path: &str) -> Result<(Rubric, String), RubricError> {
        match look_up(BUILTIN, name_or_path) {
            Named::Builtin { name, text } => Ok((
                Rubric::from_toml(text, &builtin_origin(name))?,
                format!("builtin:{name}"),
            )),
            Named::File(path) => Ok((Rubric::from_file(path)?, path.display().to_string())),
            Named::Folder(path) => Err(RubricError::Folder {
                path: path.to_path_buf(),
            }),
            Named::Unknown => Err(RubricError::Unknown {
                name: name_or_path.to_string(),
            }),
        }
    }

    pub fn from_file(path: &Path) -> Result<Rubric, RubricError> {
        let text = std::fs::read_to_string(path).map_err(|source| RubricError::Io {
            file: path.to_path_buf(),
            source,
        })?;
        let origin = path.display().to_string();
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => {
                let r: Rubric = serde_json::from_str(&text).map_err(|e| RubricError::Parse {
                    origin: origin.clone(),
                    message: e.to_string(),
                })?;
                r.validate(&origin)?;
                Ok(r)
            }
            _ => Rubric::from_toml(&text, &origin),
        }
    }

    pub fn from_toml(text: &str, origin: &str) -> Result<Rubric, RubricError> {
        let r: Rubric = toml::from_str(text).map_err(|e| RubricError::Parse {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        r.validate(origin)?;
        Ok(r)
    }

    /// Semantic checks serde cannot express; every error names the field. The templates are
    /// checked where they are compiled (`prompt::resolve_rubric` checks both up front).
    pub fn validate(&self, origin: &str) -> Result<(), RubricError> {
        let bad = |field: String, message: String| {
            Err(RubricError::Invalid {
                origin: origin.to_string(),
                field,
                message,
            })
        };
        if self.name.trim().is_empty() {
            return bad("name".into(), "must not be empty".into());
        }
        if self.aspects.is_empty() {
            return bad(
                "aspects".into(),
                "a rubric needs at least one aspect".into(),
            );
        }
        if self.scope == Scope::Dialogue && self.pairwise.is_some() {
            return bad(
                "scope".into(),
                "a pairwise rubric compares two responses to one context, not whole dialogues"
                    .into(),
            );
        }
        for (i, a) in self.aspects.iter().enumerate() {
            let f = |name: &str| format!("aspects[{i}].{name}");
            if a.key.is_empty()
                || !a
                    .key
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
            {
                return bad(
                    f("key"),
                    format!("{:?}: use letters, digits, '_' or '-'", a.key),
                );
            }
            if a.name.trim().is_empty() {
                return bad(f("name"), "must not be empty".into());
            }
            if let Some(j) = self.aspects[..i]
                .iter()
                .position(|b| b.key == a.key || b.name == a.name)
            {
                return bad(
                    f("key"),
                    format!("aspect {:?} / {:?} repeats aspects[{j}]", a.key, a.name),
                );
            }
            if a.min >= a.max {
                return bad(
                    f("max"),
                    format!(
                        "the scale must have at least two values (min {} >= max {})",
                        a.min, a.max
                    ),
                );
            }
            if a.min < 0 || a.max > 100 {
                return bad(
                    f("min"),
                    format!("scores must lie in 0..=100 (got {}..={})", a.min, a.max),
                );
            }
            for (j, l) in a.levels.iter().enumerate() {
                if l.score < a.min || l.score > a.max {
                    return bad(
                        format!("aspects[{i}].levels[{j}].score"),
                        format!("{} is outside {}..={}", l.score, a.min, a.max),
                    );
                }
                if a.levels[..j].iter().any(|m| m.score == l.score) {
                    return bad(
                        format!("aspects[{i}].levels[{j}].score"),
                        format!("level {} appears twice", l.score),
                    );
                }
                if l.human.is_some_and(|h| !h.is_finite()) {
                    return bad(
                        format!("aspects[{i}].levels[{j}].human"),
                        "must be a finite number".into(),
                    );
                }
            }
            let mapped = a.levels.iter().filter(|l| l.human.is_some()).count();
            if mapped > 0 && (mapped < a.levels.len() || a.levels.len() as i64 != a.max - a.min + 1)
            {
                return bad(
                    f("levels"),
                    "`human` must be given for every level of the scale or for none".into(),
                );
            }
        }
        if let Some(v) = &self.pairwise {
            let scale = v.scale();
            if scale.windows(2).any(|w| w[0] == w[1]) {
                return bad(
                    "pairwise".into(),
                    "first, second and tie must be three different scores".into(),
                );
            }
            for (i, a) in self.aspects.iter().enumerate() {
                if a.scores() != scale {
                    return bad(
                        format!("aspects[{i}].min"),
                        format!(
                            "a pairwise rubric's scale is its verdicts ({}): min = {} and max = {}, with no other score",
                            scale
                                .iter()
                                .map(i64::to_string)
                                .collect::<Vec<_>>()
                                .join(", "),
                            scale[0],
                            scale[scale.len() - 1]
                        ),
                    );
                }
            }
        }
        match (self.output, &self.json) {
            (OutputMode::Json, None) => {
                return bad(
                    "json".into(),
                    "output = \"json\" needs a [json] table with reason_key".into(),
                );
            }
            (OutputMode::Json, Some(j)) => {
                if self.aspects.iter().any(|a| a.name == j.reason_key) {
                    return bad(
                        "json.reason_key".into(),
                        "collides with an aspect name".into(),
                    );
                }
                if j.reason_max_tokens == 0 {
                    return bad("json.reason_max_tokens".into(), "must be at least 1".into());
                }
                // A reason longer than any judge's context could never be written; a bound also
                // keeps the context arithmetic far from overflow.
                if j.reason_max_tokens > MAX_REASON_TOKENS {
                    return bad(
                        "json.reason_max_tokens".into(),
                        format!("at most {MAX_REASON_TOKENS}"),
                    );
                }
            }
            (OutputMode::Score, Some(_)) => {
                return bad("json".into(), "only used with output = \"json\"".into());
            }
            (OutputMode::Score, None) => {}
        }
        Ok(())
    }

    /// sha256 of the rubric's canonical JSON form: scales, wording and templates.
    pub fn hash(&self) -> String {
        sha256_hex(
            serde_json::to_string(self)
                .expect("rubric serialises")
                .as_bytes(),
        )
    }
}
