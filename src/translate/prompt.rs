//! The translation instruction: a TOML file like a rubric's, one utterance per prompt
//! (`{{ text }}`), built in for ja→en and en→ja (`prompts/translate-*.toml`) and replaceable
//! by the user's own file.

use super::TranslateError;
use crate::checksum::sha256_hex;
use crate::definition::{Builtins, read_toml};
use crate::prompt::{ChatTemplate, Message};
use minijinja::UndefinedBehavior;
use serde::{Deserialize, Serialize};

/// (name, TOML text) of every built-in translation prompt.
pub const BUILTIN: Builtins = &[
    (
        "translate-ja-en",
        include_str!("../../prompts/translate-ja-en.toml"),
    ),
    (
        "translate-en-ja",
        include_str!("../../prompts/translate-en-ja.toml"),
    ),
];

/// One translation instruction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranslatePrompt {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The language of the texts it is given, and the one it writes (ISO 639-1: "ja", "en").
    pub from: String,
    pub to: String,
    /// An optional system message.
    #[serde(default)]
    pub system: Option<String>,
    /// The user message; `{{ text }}` is the utterance.
    pub user: String,
    /// The start of the model's answer, after the chat template's generation prompt (not part
    /// of the translation).
    #[serde(default)]
    pub answer: String,
}

impl TranslatePrompt {
    /// A built-in prompt's name, or a TOML file; with where it came from.
    pub fn resolve(name_or_path: &str) -> Result<(Self, String), TranslateError> {
        let (text, origin) = read_toml(
            BUILTIN,
            name_or_path,
            "translation prompt",
            |path, source| TranslateError::Io { path, source },
            |message| TranslateError::Prompt {
                origin: name_or_path.into(),
                message,
            },
        )?;
        Ok((Self::from_toml(&text, &origin)?, origin))
    }

    /// The prompt `prompt` names (a built-in's name or a file), or the built-in one from `from`
    /// into `to`; refused when its own languages are others.
    pub fn for_languages(
        prompt: Option<&str>,
        from: &str,
        to: &str,
    ) -> Result<(Self, String), TranslateError> {
        let name = match prompt {
            Some(p) => p.to_string(),
            None => Self::builtin_for(from, to)
                .ok_or_else(|| {
                    TranslateError::Languages(format!(
                        "no built-in prompt translates {from} into {to} (built in: {}): give one of your own",
                        builtin_names().join(", ")
                    ))
                })?
                .to_string(),
        };
        let (p, source) = Self::resolve(&name)?;
        if p.from != from || p.to != to {
            return Err(TranslateError::Languages(format!(
                "the prompt {name} translates {} into {}, not {from} into {to}",
                p.from, p.to
            )));
        }
        Ok((p, source))
    }

    /// The built-in prompt from `from` into `to`, if there is one.
    pub fn builtin_for(from: &str, to: &str) -> Option<&'static str> {
        BUILTIN
            .iter()
            .map(|(n, _)| *n)
            .find(|n| *n == format!("translate-{from}-{to}"))
    }

    pub fn from_toml(text: &str, origin: &str) -> Result<Self, TranslateError> {
        let bad = |message: String| TranslateError::Prompt {
            origin: origin.into(),
            message,
        };
        let prompt: TranslatePrompt = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        for (field, value) in [("from", &prompt.from), ("to", &prompt.to)] {
            if value.is_empty() || !value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(bad(format!(
                    "{field}: {value:?} is not a language code (\"ja\", \"en\")"
                )));
            }
        }
        if prompt.from == prompt.to {
            return Err(bad(format!("from and to are both {:?}", prompt.from)));
        }
        // The text must reach the model: two texts render two different prompts.
        let a = prompt.user_message("\u{3042}").map_err(bad)?;
        let b = prompt.user_message("b").map_err(bad)?;
        if a == b {
            return Err(bad("user: the template does not show {{ text }}".into()));
        }
        Ok(prompt)
    }

    /// sha256 of everything that shapes the prompt (recorded in the provenance).
    pub fn hash(&self) -> String {
        sha256_hex(
            serde_json::to_string(self)
                .expect("prompt serialises")
                .as_bytes(),
        )
    }

    fn user_message(&self, text: &str) -> Result<String, String> {
        let mut env = crate::prompt::template_environment();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let template = env
            .template_from_str(&self.user)
            .map_err(|e| format!("user: {e}"))?;
        crate::prompt::render_bounded(&template, minijinja::context! { text => text })
            .map_err(|e| format!("user: {e}"))
    }

    /// The exact text the model reads before its translation of `text`.
    pub fn render(&self, template: &ChatTemplate, text: &str) -> Result<String, TranslateError> {
        let user = self
            .user_message(text)
            .map_err(|message| TranslateError::Prompt {
                origin: self.name.clone(),
                message,
            })?;
        let mut messages = Vec::new();
        if let Some(system) = &self.system {
            messages.push(Message::new("system", system.clone()));
        }
        messages.push(Message::new("user", user));
        Ok(template.render(&messages, true)? + &self.answer)
    }
}

pub fn builtin_names() -> Vec<&'static str> {
    crate::definition::names(BUILTIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtins_read_and_show_their_text() {
        for name in builtin_names() {
            let (p, origin) = TranslatePrompt::resolve(name).unwrap();
            assert_eq!(p.name, name, "{origin}");
            assert_eq!(TranslatePrompt::builtin_for(&p.from, &p.to), Some(name));
            assert!(p.user_message("猫がいる").unwrap().contains("猫がいる"));
        }
        let folder = TranslatePrompt::resolve("prompts").unwrap_err().to_string();
        assert!(folder.contains("prompts: a folder, not a"), "{folder}");
        let unknown = TranslatePrompt::resolve("translate-ja-fr")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("built in: translate-ja-en"), "{unknown}");
    }

    #[test]
    fn a_prompt_without_the_text_or_with_one_language_is_refused() {
        let no_text = "name = \"x\"\nfrom = \"ja\"\nto = \"en\"\nuser = \"Translate.\"";
        let err = TranslatePrompt::from_toml(no_text, "x.toml").unwrap_err();
        assert!(err.to_string().contains("{{ text }}"), "{err}");
        let same = "name = \"x\"\nfrom = \"ja\"\nto = \"ja\"\nuser = \"{{ text }}\"";
        let err = TranslatePrompt::from_toml(same, "x.toml").unwrap_err();
        assert!(err.to_string().contains("both"), "{err}");
        let unknown = "name = \"x\"\nfrom = \"ja\"\nto = \"en\"\nuser = \"{{ text }}\"\nextra = 1";
        let err = TranslatePrompt::from_toml(unknown, "x.toml").unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }
}
