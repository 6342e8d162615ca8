//! A likelihood scorer's file: its method, the text the model reads before the scored text,
//! and its aspects (follow-ups or instructions), like a rubric; built in for FED and GPTScore
//! in Japanese and English (`prompts/fed-*.toml`, `prompts/gptscore-*.toml`).

use super::LikelihoodError;
use crate::checksum::sha256_hex;
use crate::data::{Item, Turn};
use crate::definition::{Builtins, read_toml};
use crate::prompt::SpeakerLabels;
use minijinja::UndefinedBehavior;
use serde::{Deserialize, Serialize};

/// (name, TOML text) of every built-in likelihood scorer.
pub const BUILTIN: Builtins = &[
    ("fed-ja", include_str!("../../prompts/fed-ja.toml")),
    ("fed-en", include_str!("../../prompts/fed-en.toml")),
    (
        "gptscore-ja",
        include_str!("../../prompts/gptscore-ja.toml"),
    ),
    (
        "gptscore-en",
        include_str!("../../prompts/gptscore-en.toml"),
    ),
];

pub fn builtin_names() -> Vec<&'static str> {
    crate::definition::names(BUILTIN)
}

/// What is scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// FED: follow-up utterances after the response, positive minus negative.
    FollowUps,
    /// GPTScore: the response itself, after an instruction.
    Response,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LikelihoodAspect {
    pub key: String,
    #[serde(default)]
    pub name: String,
    /// Human rating keys this aspect is compared with (as a rubric aspect's `human`).
    #[serde(default)]
    pub human: Vec<String>,
    /// Follow-ups (method follow-ups).
    #[serde(default)]
    pub positive: Vec<String>,
    #[serde(default)]
    pub negative: Vec<String>,
    /// The instruction shown before the response (method response).
    #[serde(default)]
    pub instruction: String,
}

/// One likelihood scorer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LikelihoodScorer {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub language: String,
    pub method: Method,
    /// Most context turns shown (the most recent); None: all that fit.
    #[serde(default)]
    pub max_context_turns: Option<usize>,
    /// Jinja: the text before the scored text. `context` (turns: label, speaker, text),
    /// `response` (the same), `next` (label of who speaks after the response), `instruction`.
    pub prefix: String,
    /// Joins the prefix and the scored text (a follow-up, or the response); scored with it.
    #[serde(default)]
    pub separator: String,
    pub aspects: Vec<LikelihoodAspect>,
}

#[derive(Serialize)]
struct TurnView<'a> {
    label: String,
    speaker: &'a str,
    text: &'a str,
}

#[derive(Serialize)]
struct NextView {
    label: String,
}

#[derive(Serialize)]
struct Ctx<'a> {
    context: Vec<TurnView<'a>>,
    response: TurnView<'a>,
    next: NextView,
    instruction: &'a str,
}

impl LikelihoodScorer {
    /// A built-in scorer's name, or a TOML file; with where it came from.
    pub fn resolve(name_or_path: &str) -> Result<(Self, String), LikelihoodError> {
        let (text, origin) = read_toml(
            BUILTIN,
            name_or_path,
            "likelihood scorer",
            |path, source| LikelihoodError::Io { path, source },
            |message| LikelihoodError::Scorer {
                origin: name_or_path.into(),
                message,
            },
        )?;
        Ok((Self::from_toml(&text, &origin)?, origin))
    }

    pub fn from_toml(text: &str, origin: &str) -> Result<Self, LikelihoodError> {
        let bad = |message: String| LikelihoodError::Scorer {
            origin: origin.into(),
            message,
        };
        let s: LikelihoodScorer = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        if s.aspects.is_empty() {
            return Err(bad("aspects: none given".into()));
        }
        for (i, a) in s.aspects.iter().enumerate() {
            let at = format!("aspects[{i}] ({})", a.key);
            if a.key.is_empty() || s.aspects[..i].iter().any(|b| b.key == a.key) {
                return Err(bad(format!("{at}: key empty or repeated")));
            }
            match s.method {
                Method::FollowUps if a.positive.is_empty() && a.negative.is_empty() => {
                    return Err(bad(format!("{at}: no positive or negative follow-ups")));
                }
                Method::FollowUps if !a.instruction.is_empty() => {
                    return Err(bad(format!("{at}: instruction is for method \"response\"")));
                }
                Method::Response if !a.positive.is_empty() || !a.negative.is_empty() => {
                    return Err(bad(format!(
                        "{at}: follow-ups are for method \"follow-ups\""
                    )));
                }
                _ => {}
            }
            if let Some(empty) = a.positive.iter().chain(&a.negative).find(|f| f.is_empty()) {
                return Err(bad(format!("{at}: an empty follow-up {empty:?}")));
            }
        }
        // The prefix must compile and show the dialogue.
        let item = crate::prompt::sample_item();
        let a = s.prefix_text(&item, item.context.len(), 0).map_err(bad)?;
        let mut other = item.clone();
        other.response.text.push_str(" x");
        if let Some(last) = other.context.last_mut() {
            last.text.push_str(" x");
        }
        let b = s.prefix_text(&other, other.context.len(), 0).map_err(bad)?;
        if a == b {
            return Err(bad(
                "prefix: shows neither the context nor the response".into()
            ));
        }
        Ok(s)
    }

    /// sha256 of everything that shapes a score (recorded in the provenance).
    pub fn hash(&self) -> String {
        sha256_hex(
            serde_json::to_string(self)
                .expect("scorer serialises")
                .as_bytes(),
        )
    }

    /// The prefix for `item` with its last `keep` context turns, under aspect `aspect`'s
    /// instruction.
    pub fn prefix_text(&self, item: &Item, keep: usize, aspect: usize) -> Result<String, String> {
        let mut env = crate::prompt::template_environment();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let template = env
            .template_from_str(&self.prefix)
            .map_err(|e| format!("prefix: {e}"))?;
        let keep = keep.min(item.context.len());
        let context = &item.context[item.context.len() - keep..];
        let labels = SpeakerLabels::of(context.iter().chain([&item.response]));
        fn view<'t>(t: &'t Turn, labels: &SpeakerLabels) -> TurnView<'t> {
            TurnView {
                label: labels.label(&t.speaker),
                speaker: &t.speaker,
                text: &t.text,
            }
        }
        // Who speaks next: the latest other speaker before the response, else a new one.
        let next = match context
            .iter()
            .rev()
            .find(|t| t.speaker != item.response.speaker)
        {
            Some(t) => labels.label(&t.speaker),
            None => labels.unseen(),
        };
        let ctx = Ctx {
            context: context.iter().map(|t| view(t, &labels)).collect(),
            response: view(&item.response, &labels),
            next: NextView { label: next },
            instruction: &self.aspects[aspect].instruction,
        };
        crate::prompt::render_bounded(&template, minijinja::value::Serde(&ctx))
            .map_err(|e| format!("prefix: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtins_read_and_write_the_dialogue_as_lines() {
        for name in builtin_names() {
            let (s, _) = LikelihoodScorer::resolve(name).unwrap();
            assert_eq!(s.name, name);
        }
        let folder = LikelihoodScorer::resolve("prompts")
            .unwrap_err()
            .to_string();
        assert!(folder.contains("prompts: a folder, not a"), "{folder}");
        let (fed, _) = LikelihoodScorer::resolve("fed-en").unwrap();
        let turn = |s: &str, t: &str| Turn {
            speaker: s.into(),
            text: t.into(),
        };
        let mut item = crate::prompt::sample_item();
        item.context = vec![turn("u", "Hi."), turn("s", "Hello."), turn("u", "Hungry?")];
        item.response = turn("s", "Yes.");
        assert_eq!(
            fed.prefix_text(&item, 4, 0).unwrap(),
            "A: Hi.\nB: Hello.\nA: Hungry?\nB: Yes.\nA:"
        );
        // Two turns kept: the labels follow what is shown.
        assert_eq!(
            fed.prefix_text(&item, 2, 0).unwrap(),
            "A: Hello.\nB: Hungry?\nA: Yes.\nB:"
        );
        let (gpt, _) = LikelihoodScorer::resolve("gptscore-en").unwrap();
        assert_eq!(
            gpt.prefix_text(&item, 1, 2).unwrap(),
            "A: Hungry?\n\nContinue the conversation above with an interesting reply.\nB:"
        );
        // An opening utterance: the next speaker is a new one.
        item.context.clear();
        assert_eq!(fed.prefix_text(&item, 4, 0).unwrap(), "A: Yes.\nB:");
    }

    #[test]
    fn scorers_that_cannot_score_are_refused() {
        let base = "name = \"x\"\nmethod = \"follow-ups\"\nprefix = \"{{ response.text }}\"\n";
        let cases = [
            ("[[aspects]]\nkey = \"a\"\n", "no positive or negative"),
            (
                "[[aspects]]\nkey = \"a\"\npositive = [\"ok\"]\ninstruction = \"i\"\n",
                "instruction is for",
            ),
            (
                "[[aspects]]\nkey = \"a\"\npositive = [\"\"]\n",
                "an empty follow-up",
            ),
            (
                "[[aspects]]\nkey = \"a\"\npositive = [\"ok\"]\n[[aspects]]\nkey = \"a\"\nnegative = [\"no\"]\n",
                "repeated",
            ),
        ];
        for (aspects, says) in cases {
            let err = LikelihoodScorer::from_toml(&format!("{base}{aspects}"), "x.toml")
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{err}");
        }
        let blind =
            "name = \"x\"\nmethod = \"response\"\nprefix = \"Reply:\"\n[[aspects]]\nkey = \"a\"\n";
        let err = LikelihoodScorer::from_toml(blind, "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("shows neither"), "{err}");
    }
}
