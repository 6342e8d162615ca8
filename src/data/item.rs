//! The dialogue item: one response under evaluation, with its context and optional ratings.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One utterance of a dialogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub speaker: String,
    pub text: String,
}

/// Human ratings of one aspect: one number (already aggregated) or one value per rater.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HumanRating {
    Single(f64),
    PerRater(Vec<f64>),
}

impl HumanRating {
    /// Mean over raters; a single number is its own mean.
    pub fn mean(&self) -> f64 {
        match self {
            HumanRating::Single(v) => *v,
            HumanRating::PerRater(vs) => vs.iter().sum::<f64>() / vs.len() as f64,
        }
    }

    pub fn rater_count(&self) -> usize {
        match self {
            HumanRating::Single(_) => 1,
            HumanRating::PerRater(vs) => vs.len(),
        }
    }
}

/// What an item's ratings judge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The response, in its context.
    #[default]
    Turn,
    /// The whole dialogue: its context turns and the response, its last turn.
    Dialogue,
}

impl Scope {
    pub fn is_turn(&self) -> bool {
        *self == Scope::Turn
    }

    /// The name items and rubrics write.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Turn => "turn",
            Scope::Dialogue => "dialogue",
        }
    }
}

/// One dialogue item, one line of an items JSONL file.
///
/// Field order here is the order written to JSONL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Unique within a file; outputs are keyed by it.
    pub id: String,
    /// Turns before the response, oldest first. May be empty (an opening utterance).
    pub context: Vec<Turn>,
    /// The utterance under evaluation.
    pub response: Turn,
    /// Reference responses for reference-based BERTScore (one or several).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference: Vec<String>,
    /// Roleplay settings / character sheet, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setting: Option<String>,
    /// Which system produced the response (for system-level meta-evaluation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Which dialogue the item belongs to (for within-dialogue meta-evaluation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialogue: Option<String>,
    /// `dialogue`: the ratings judge the whole dialogue (context and response), not the
    /// response alone.
    #[serde(default, skip_serializing_if = "Scope::is_turn")]
    pub scope: Scope,
    /// Which shared context the response answers: items with the same `context_id` are
    /// candidate responses of different systems to one context (`hyoka compare` judges them in
    /// pairs). Their context and setting must be the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// Human ratings per aspect key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub human: BTreeMap<String, HumanRating>,
    /// Rater ids, aligned with every per-rater list in `human` (rater agreement needs them when
    /// different people rate different items).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raters: Vec<String>,
    /// Anything else the user wants carried through to the outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
    /// Set on translated items: the texts they were translated from, and by what.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translation: Option<Translation>,
    /// Whether the id was written as a JSON integer: outputs write it back as one.
    #[serde(skip)]
    pub numeric_id: bool,
}

/// Where a translated item's texts came from (`hyoka translate`, or a translation made
/// elsewhere and written in this form).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Translation {
    /// Language codes ("ja", "en").
    pub from: String,
    pub to: String,
    /// The item's texts before translation, aligned with its own.
    pub source: SourceTexts,
    /// What translated them: `hyoka translate` writes its run's provenance (model and its
    /// checksum, the prompt's hash, settings, version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<serde_json::Value>,
    /// The texts whose translation was cut at its token limit (kept on request): "context[2]",
    /// "response", "reference[0]", "setting".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfinished: Vec<String>,
}

/// An item's texts in the language they were translated from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceTexts {
    /// One text per context turn.
    pub context: Vec<String>,
    pub response: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setting: Option<String>,
}

impl Item {
    /// The id as its JSON value: an integer where the input had one, a string otherwise.
    pub fn id_json(&self) -> serde_json::Value {
        if self.numeric_id
            && let Ok(n) = serde_json::from_str::<serde_json::Number>(&self.id)
        {
            return serde_json::Value::Number(n);
        }
        serde_json::Value::String(self.id.clone())
    }

    /// The JSONL line for this item (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // Serialising plain strings, numbers and maps cannot fail.
        let mut value = serde_json::to_value(self).expect("item serialises");
        if self.numeric_id {
            value["id"] = self.id_json();
        }
        value.to_string()
    }
}
