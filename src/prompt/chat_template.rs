//! A model's own chat template, rendered as HF transformers' `apply_chat_template` does.
//!
//! transformers compiles templates with jinja2's `ImmutableSandboxedEnvironment(trim_blocks=True,
//! lstrip_blocks=True, extensions=[loopcontrols])`, overrides `tojson` with Python's
//! `json.dumps(x, ensure_ascii=False, ...)`, adds `raise_exception` and `strftime_now`, and passes
//! the tokenizer's special tokens (`bos_token`, `eos_token`, …) next to `messages`. We mirror each
//! of these with minijinja; Python string methods come from minijinja-contrib's pycompat.

use super::bounded_methods::MAX_JSON_INDENT;
use super::pyjson;
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A chat message as chat templates see it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Message {
            role: role.to_string(),
            content: content.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("{}: {source}", file.display())]
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Missing { origin: String, message: String },
    #[error("{origin}: chat template: {source}")]
    Jinja {
        origin: String,
        source: minijinja::Error,
    },
    /// The rendered prompt lacks a message's text: every item would be judged on the same
    /// prompt, or on one without what it is asked about.
    #[error(
        "{origin}: chat template: the prompt it renders does not contain the {role} message's text (the template drops or rewrites messages; give one that shows them with --chat-template)"
    )]
    DropsMessage { origin: String, role: String },
}

impl TemplateError {
    /// The template ran out of its bounded work or output (`prompt::TEMPLATE_FUEL`,
    /// `TEMPLATE_OUTPUT_BYTES`): the template's fault, whatever the item.
    pub fn exhausted(&self) -> bool {
        matches!(self, TemplateError::Jinja { source, .. } if crate::prompt::exhausted(source))
    }
}

/// A compiled chat template with the special tokens it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    /// Where the template came from (a file, `file.gguf:tokenizer.chat_template`, …).
    pub origin: String,
    special_tokens: BTreeMap<String, String>,
    /// What `strftime_now` prints when set (`--template-date`); a fixed date otherwise.
    date: Option<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compile `source`. `special_tokens` maps names such as `bos_token` to their text.
    pub fn new(
        source: &str,
        special_tokens: BTreeMap<String, String>,
        origin: &str,
    ) -> Result<Self, TemplateError> {
        let mut env = crate::prompt::template_environment();
        env.set_unknown_method_callback(crate::prompt::bounded_methods::python_methods);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", fixed_date);
        env.add_template_owned(NAME, source.to_string())
            .map_err(|source| TemplateError::Jinja {
                origin: origin.to_string(),
                source,
            })?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            origin: origin.to_string(),
            special_tokens,
            date: None,
        })
    }

    /// Have `strftime_now` print `date` (whatever format the template asks for), for judges
    /// whose prompts should carry a given day. It changes the prompt: recorded in provenance.
    pub fn set_date(&mut self, date: &str) {
        let text = date.to_string();
        self.env
            .add_function("strftime_now", move |_format: String| text.clone());
        self.date = Some(date.to_string());
    }

    /// The date set by `set_date`, if any.
    pub fn date(&self) -> Option<&str> {
        self.date.as_deref()
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn special_tokens(&self) -> &BTreeMap<String, String> {
        &self.special_tokens
    }

    /// Render `messages`; with `add_generation_prompt` the text ends where the assistant's
    /// answer begins.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let mut ctx: BTreeMap<String, Value> = self
            .special_tokens
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect();
        ctx.insert(
            "messages".into(),
            Value::from(minijinja::value::Serde(messages)),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        // transformers passes these explicitly as None.
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        let jinja = |source| TemplateError::Jinja {
            origin: self.origin.clone(),
            source,
        };
        let template = self.env.get_template(NAME).map_err(jinja)?;
        let text = crate::prompt::render_bounded(&template, ctx)
            .map_err(|e| self.undefined_special_tokens(e))?;
        if let Some(m) = messages.iter().find(|m| !text.contains(m.content.trim())) {
            return Err(TemplateError::DropsMessage {
                origin: self.origin.clone(),
                role: m.role.clone(),
            });
        }
        Ok(text)
    }

    /// A render error, naming the special tokens the template uses that nothing defined (a
    /// bare .jinja file defines none), which is the likely cause.
    fn undefined_special_tokens(&self, source: minijinja::Error) -> TemplateError {
        let missing: Vec<&str> = SPECIAL_TOKENS
            .iter()
            .copied()
            .filter(|name| self.source.contains(name) && !self.special_tokens.contains_key(*name))
            .collect();
        if missing.is_empty() {
            return TemplateError::Jinja {
                origin: self.origin.clone(),
                source,
            };
        }
        TemplateError::Missing {
            origin: self.origin.clone(),
            message: format!(
                "the template uses {} but nothing defines {} (a .jinja file alone names no special tokens: give the model's tokenizer_config.json or GGUF, or put the .jinja in the model's folder) — {source}",
                missing.join(", "),
                if missing.len() == 1 { "it" } else { "them" }
            ),
        }
    }

    /// Load a chat template from a model: a `tokenizer_config.json`, a `.jinja` file, or a model
    /// folder holding one of these (a GGUF's: `from_gguf_content`).
    pub fn load(path: &Path) -> Result<Self, TemplateError> {
        if path.is_dir() {
            for name in ["chat_template.jinja", "tokenizer_config.json"] {
                let candidate = path.join(name);
                if candidate.is_file() {
                    return Self::load_file(&candidate, Some(&path.join("tokenizer_config.json")));
                }
            }
            return Err(TemplateError::Missing {
                origin: path.display().to_string(),
                message: "no chat_template.jinja or tokenizer_config.json in this folder".into(),
            });
        }
        Self::load_file(path, None)
    }

    fn load_file(path: &Path, config: Option<&Path>) -> Result<Self, TemplateError> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        match ext {
            "gguf" => Err(TemplateError::Missing {
                origin: path.display().to_string(),
                message: "a GGUF's template is read with its metadata (`from_gguf_content`)".into(),
            }),
            "json" => Self::from_tokenizer_config(path),
            _ => {
                let source = read(path)?;
                let special = match config.filter(|c| c.is_file()) {
                    Some(c) => special_tokens_from_config(&json_file(c)?),
                    None => BTreeMap::new(),
                };
                Self::new(&source, special, &path.display().to_string())
            }
        }
    }

    /// `tokenizer_config.json` of a Hugging Face model.
    pub fn from_tokenizer_config(path: &Path) -> Result<Self, TemplateError> {
        let config = json_file(path)?;
        let origin = format!("{}: chat_template", path.display());
        let source = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            // The list form names several templates; the one called "default" is the chat one.
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(str::to_string))
                .ok_or_else(|| TemplateError::Missing {
                    origin: origin.clone(),
                    message: "no template named \"default\"".into(),
                })?,
            _ => {
                return Err(TemplateError::Missing {
                    origin,
                    message: "no chat_template in this file (give the model's template with --chat-template: a .jinja file or a tokenizer_config.json)".into(),
                });
            }
        };
        Self::new(&source, special_tokens_from_config(&config), &origin)
    }

    /// The `tokenizer.chat_template` metadata of a GGUF, already read (`file` names it in
    /// messages); special tokens from its vocabulary. The model loader reads GGUF files.
    pub fn from_gguf_content(
        content: &candle_core::quantized::gguf_file::Content,
        file: &str,
    ) -> Result<Self, TemplateError> {
        let origin = format!("{file}: tokenizer.chat_template");
        let source = content
            .metadata
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .ok_or_else(|| TemplateError::Missing {
                origin: origin.clone(),
                message: "missing from the GGUF metadata (give the model's template with --chat-template: a .jinja file or a tokenizer_config.json)".into(),
            })?;
        Self::new(&source, special_tokens_from_gguf(content), &origin)
    }

    /// Give a template loaded apart from its model (`--chat-template`) the model's special
    /// tokens where it has none of its own: transformers renders any template with the
    /// tokenizer's `bos_token`, `eos_token`…, and a bare .jinja file names none.
    pub fn with_model_special_tokens(mut self, model: BTreeMap<String, String>) -> Self {
        for (name, text) in model {
            self.special_tokens.entry(name).or_insert(text);
        }
        self
    }
}

/// `bos_token` etc. from GGUF metadata: the text of each `tokenizer.ggml.<name>_token_id`.
pub fn special_tokens_from_gguf(
    content: &candle_core::quantized::gguf_file::Content,
) -> BTreeMap<String, String> {
    let tokens: Vec<String> = content
        .metadata
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.to_vec().ok())
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v.to_string().ok().cloned())
                .collect()
        })
        .unwrap_or_default();
    let mut special = BTreeMap::new();
    for name in ["bos", "eos", "unk", "pad", "sep", "cls", "mask"] {
        let key = format!("tokenizer.ggml.{name}_token_id");
        if let Some(id) = content.metadata.get(&key).and_then(|v| v.to_u32().ok())
            && let Some(text) = tokens.get(id as usize)
        {
            special.insert(format!("{name}_token"), text.clone());
        }
    }
    special
}

/// `bos_token` etc. of a Hugging Face model folder (its tokenizer_config.json; none without one).
pub fn special_tokens_of_folder(dir: &Path) -> Result<BTreeMap<String, String>, TemplateError> {
    let config = dir.join("tokenizer_config.json");
    if !config.is_file() {
        return Ok(BTreeMap::new());
    }
    Ok(special_tokens_from_config(&json_file(&config)?))
}

fn read(path: &Path) -> Result<String, TemplateError> {
    std::fs::read_to_string(path).map_err(|source| TemplateError::Io {
        file: path.into(),
        source,
    })
}

fn json_file(path: &Path) -> Result<serde_json::Value, TemplateError> {
    serde_json::from_str(&read(path)?).map_err(|e| TemplateError::Missing {
        origin: path.display().to_string(),
        message: format!("not valid JSON: {e}"),
    })
}

/// The special tokens transformers passes to every chat template.
const SPECIAL_TOKENS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "pad_token",
    "sep_token",
    "cls_token",
    "mask_token",
];

/// `bos_token` etc. from a tokenizer_config.json, where each is a string or `{"content": …}`.
fn special_tokens_from_config(config: &serde_json::Value) -> BTreeMap<String, String> {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o
            .get("content")
            .and_then(|c| c.as_str())
            .map(str::to_string),
        _ => None,
    };
    let mut out = BTreeMap::new();
    for name in SPECIAL_TOKENS {
        if let Some(t) = config.get(name).and_then(text) {
            out.insert(name.to_string(), t);
        }
    }
    // transformers passes these too (e.g. Gemma 3's image tokens).
    if let Some(serde_json::Value::Object(extra)) = config.get("extra_special_tokens") {
        for (name, v) in extra {
            if let Some(t) = text(v) {
                out.entry(name.clone()).or_insert(t);
            }
        }
    }
    out
}

fn raise_exception(message: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now`: templates use it to print today's date. A judge's prompt must not change
/// from day to day, so the date is fixed (2024-01-01) unless `set_date` gives the text to print.
fn fixed_date(format: String) -> String {
    format
        .replace("%Y", "2024")
        .replace("%m", "01")
        .replace("%d", "01")
        .replace("%B", "January")
        .replace("%b", "Jan")
}

/// Python's `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, minijinja::Error> {
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_string(),
            None => {
                let width = usize::try_from(i64::try_from(v)?.max(0)).unwrap_or(usize::MAX);
                " ".repeat(width.min(MAX_JSON_INDENT + 1))
            }
        }),
    };
    // The indent is written once per level per line: a long one multiplies the output.
    if indent.as_ref().is_some_and(|s| s.len() > MAX_JSON_INDENT) {
        return Err(minijinja::Error::new(
            ErrorKind::OutOfFuel,
            format!("tojson's indent is longer than the template limit of {MAX_JSON_INDENT}"),
        ));
    }
    let json: serde_json::Value = serde_json::to_value(&value)
        .map_err(|e| minijinja::Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let options = pyjson::DumpOptions {
        ensure_ascii: ensure_ascii.unwrap_or(false),
        indent,
        separators: separators.map(|s| {
            (
                s.first().cloned().unwrap_or_default(),
                s.get(1).cloned().unwrap_or_default(),
            )
        }),
        sort_keys: sort_keys.unwrap_or(false),
    };
    Ok(Value::from_safe_string(pyjson::dumps(&json, &options)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A template using `bos_token` that nothing defines fails naming it (minijinja alone says
    /// "unsupported types undefined and string"); given the model's tokens, it renders.
    #[test]
    fn an_undefined_special_token_is_named() {
        let source = "{{ bos_token + messages[0]['content'] }}";
        let t = ChatTemplate::new(source, BTreeMap::new(), "t.jinja").unwrap();
        let messages = [Message::new("user", "こんにちは")];
        let err = t.render(&messages, true).unwrap_err().to_string();
        assert!(
            err.contains("bos_token") && err.contains("tokenizer_config.json"),
            "{err}"
        );
        let model = BTreeMap::from([("bos_token".to_string(), "<s>".to_string())]);
        let t = t.with_model_special_tokens(model);
        assert_eq!(t.render(&messages, true).unwrap(), "<s>こんにちは");
    }

    /// A template from elsewhere (a GGUF's, a shared rubric's) cannot hang or exhaust memory:
    /// endless loops run out of instructions, a flood of output out of room, and either is
    /// told apart as the template's fault; a template that leaves the messages out is refused.
    #[test]
    fn templates_are_bounded_and_must_show_the_messages() {
        let messages = [Message::new("user", "こんにちは")];
        let start = std::time::Instant::now();
        for source in [
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}{{ messages[0]['content'] }}",
        ] {
            let t = ChatTemplate::new(source, BTreeMap::new(), "hostile.gguf").unwrap();
            let err = t.render(&messages, true).unwrap_err();
            assert!(err.exhausted(), "{source}: {err}");
            assert!(
                err.to_string().starts_with("hostile.gguf: chat template:"),
                "{err}"
            );
        }
        assert!(start.elapsed().as_secs() < 60, "bounded in time too");
        for source in ["", "<|user|>{{ 'same for every item' }}"] {
            let t = ChatTemplate::new(source, BTreeMap::new(), "empty.jinja").unwrap();
            let err = t.render(&messages, true).unwrap_err();
            assert!(
                matches!(err, TemplateError::DropsMessage { .. }) && !err.exhausted(),
                "{source:?}: {err}"
            );
            assert!(err.to_string().contains("user message"), "{err}");
        }
        let ok = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}";
        let t = ChatTemplate::new(ok, BTreeMap::new(), "ok.jinja").unwrap();
        let spaced = [Message::new("user", "  こんにちは \n")];
        assert_eq!(t.render(&spaced, true).unwrap(), "<user>こんにちは");
    }

    /// Values grown without bound (doubled in a loop, in a capture, by recursion, or made huge
    /// in one step by replace, join, indent, a format width, slicing, a JSON indent or
    /// repetition) stop with the template's bound, as an exhausted template, instead of taking
    /// the process's memory (which aborts it).
    #[test]
    fn templates_cannot_grow_values_without_bound() {
        let messages = [Message::new("user", "こんにちは")];
        let start = std::time::Instant::now();
        let show = "{{ messages[0]['content'] }}";
        for growth in [
            "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
            "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s * 2 %}{% endfor %}",
            "{% macro f(s, n) %}{% if n > 0 %}{% set t %}{{ s }}{{ s }}{% endset %}{{ f(t, n - 1) }}{% endif %}{% endmacro %}{{ f('x', 64) }}",
            "{% set big = 'x' * 1000000 %}{% set s %}{% for i in range(100000) %}{{ big }}{% endfor %}{% endset %}",
            "{% macro f(s, n) %}{% if n > 0 %}{{ f(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ f('x', 64) }}",
            "{% set ns = namespace(s='x' * 1000) %}{% for i in range(8) %}{% set ns.s = ns.s | replace('x', ns.s) %}{% endfor %}",
            "{% set ns = namespace(s='x' * 1000) %}{% for i in range(8) %}{% set ns.s = ns.s.replace('x', ns.s) %}{% endfor %}",
            "{% set s = 'x' * 1000000 %}{{ ([s] * 100000) | join('') | length }}",
            "{% set s = 'x' * 1000000 %}{{ ''.join([s] * 100000) | length }}",
            "{{ 'a\nb\nc' | indent(10000000000) }}",
            "{{ '%99999999999s' | format('x') }}",
            "{{ [1, 2] | slice(1000000000) | length }}",
            "{{ messages | tojson(indent=1000000000) }}",
            "{% set ns = namespace(l=[0]) %}{% for i in range(30) %}{% set ns.l = ns.l * 2 %}{% endfor %}{{ ns.l | length }}",
            "{% set s = 'x' * 100000000 %}",
        ] {
            let source = format!("{growth}{show}");
            let t = ChatTemplate::new(&source, BTreeMap::new(), "hostile.gguf").unwrap();
            match t.render(&messages, true) {
                Err(err) => assert!(err.exhausted(), "{growth}: {err}"),
                Ok(text) => panic!("{growth}: rendered {} bytes", text.len()),
            }
        }
        assert!(start.elapsed().as_secs() < 60, "bounded in time too");
        // What chat templates do with real conversations stays well inside the bounds.
        let long: Vec<Message> = (0..2000)
            .map(|i| {
                Message::new(
                    if i % 2 == 0 { "user" } else { "assistant" },
                    "会話".repeat(200),
                )
            })
            .collect();
        let qwen = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endfor %}";
        let appending = "{% set ns = namespace(all=[], text='') %}{% for m in messages %}{% set ns.all = ns.all + [m['content']] %}{% set ns.text = ns.text ~ m['role'] %}{% endfor %}{{ ns.all | join('\n') }}";
        for source in [qwen, appending] {
            let t = ChatTemplate::new(source, BTreeMap::new(), "ok.jinja").unwrap();
            let text = t.render(&long, false).unwrap();
            assert!(text.len() > 2000 * 1200, "{}", text.len());
        }
    }
}
