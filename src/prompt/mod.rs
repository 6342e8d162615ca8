//! Stage 3 — prompts: a rubric and an item become the judge's messages and per-aspect answer
//! prefixes; a model's chat template turns those into the exact text the model reads.

pub mod bounded_methods;
pub mod chat_template;
pub mod pyjson;

pub use chat_template::{ChatTemplate, Message, TemplateError};

use crate::data::{Item, Pair, Turn};
use crate::rubric::{Aspect, Level, OutputMode, Rubric, RubricError};
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("rubric {rubric}: item {item}: {field}: {source}")]
    Render {
        rubric: String,
        item: String,
        field: &'static str,
        source: minijinja::Error,
    },
    #[error(transparent)]
    ChatTemplate(#[from] TemplateError),
    /// A rubric template that does not compile, or does not render for a sample item.
    #[error("{field}: {message}")]
    Template { field: String, message: String },
}

/// The judge's input for one item, before the model's chat template.
#[derive(Clone, Debug, PartialEq)]
pub struct JudgePrompt {
    /// System (optional) and user messages.
    pub messages: Vec<Message>,
    /// The start of the judge's answer: one per aspect in score mode (rubric order), one in
    /// json mode. The score (or the JSON object) comes right after it.
    pub answers: Vec<String>,
    /// Context turns left out (the rubric's `max_context_turns`, or a length limit).
    pub dropped_turns: usize,
}

/// Jinja whitespace as transformers compiles chat templates (and as rubrics are written):
/// `trim_blocks` and `lstrip_blocks` on, the template's final newline dropped.
fn jinja_syntax() -> minijinja::syntax::SyntaxConfig {
    minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
        .expect("default delimiters are valid")
}

/// The instructions one render may run. A chat template or rubric spends tens of instructions a
/// message, so this is a dialogue of about a million turns; a template that loops without
/// bound (a shared rubric, a GGUF's chat template) stops with an error instead of hanging.
pub const TEMPLATE_FUEL: u64 = 100_000_000;
/// The longest text one render may write: no prompt of any model's context comes near it.
pub const TEMPLATE_OUTPUT_BYTES: usize = 64 << 20;

/// The environment every template (rubric prompts, chat templates, translation prompts,
/// likelihood prefixes) is compiled in: transformers' whitespace rules and bounded work.
pub fn template_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_syntax(jinja_syntax());
    env.set_fuel(Some(TEMPLATE_FUEL));
    env
}

/// Whether a render failed for running out of its bounded work, output or the size of a value
/// it builds (the engine reports all three as running out of fuel).
pub fn exhausted(e: &minijinja::Error) -> bool {
    e.kind() == minijinja::ErrorKind::OutOfFuel
}

/// Render `template` into a string of at most [`TEMPLATE_OUTPUT_BYTES`].
pub fn render_bounded<V: Into<minijinja::Value>>(
    template: &minijinja::Template<'_, '_>,
    ctx: V,
) -> Result<String, minijinja::Error> {
    struct Bounded {
        text: Vec<u8>,
        full: bool,
    }
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.text.len() + buf.len() > TEMPLATE_OUTPUT_BYTES {
                self.full = true;
                return Err(std::io::Error::other("output limit"));
            }
            self.text.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded {
        text: Vec::new(),
        full: false,
    };
    let rendered = template.render_captured_to(ctx, &mut out).map(drop);
    if out.full {
        // Out of its output budget as a loop runs out of instructions: one kind for both.
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::OutOfFuel,
            format!("the template writes more than {TEMPLATE_OUTPUT_BYTES} bytes"),
        ));
    }
    rendered?;
    String::from_utf8(out.text)
        .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string()))
}

/// Renders one rubric's templates for any number of items.
pub struct PromptBuilder {
    env: Environment<'static>,
    rubric: Rubric,
}

#[derive(Serialize)]
struct TurnView<'a> {
    speaker: &'a str,
    text: &'a str,
    /// A, B, C… by order of first appearance in the dialogue (context, then response).
    label: String,
    /// "assistant" for the responder's turns, "user" for everyone else's.
    role: &'static str,
}

#[derive(Serialize)]
struct AspectView<'a> {
    key: &'a str,
    name: &'a str,
    min: i64,
    max: i64,
    definition: &'a str,
    levels: &'a [Level],
    /// 1-based position in the rubric.
    index: usize,
    /// ①, ②, … (as in the paper's prompt).
    circled: String,
}

#[derive(Serialize)]
struct ItemView<'a> {
    id: &'a str,
    system: Option<&'a str>,
    dialogue: Option<&'a str>,
    meta: Option<&'a serde_json::Value>,
}

#[derive(Serialize)]
struct Ctx<'a> {
    context: Vec<TurnView<'a>>,
    response: TurnView<'a>,
    /// The responses under evaluation in the order shown: the response alone, or a pairwise
    /// rubric's two candidates.
    responses: Vec<TurnView<'a>>,
    setting: Option<&'a str>,
    reference: &'a [String],
    aspects: Vec<AspectView<'a>>,
    item: ItemView<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aspect: Option<AspectView<'a>>,
}

fn aspect_view(a: &Aspect, i: usize) -> AspectView<'_> {
    const CIRCLED: [&str; 10] = ["①", "②", "③", "④", "⑤", "⑥", "⑦", "⑧", "⑨", "⑩"];
    AspectView {
        key: &a.key,
        name: &a.name,
        min: a.min,
        max: a.max,
        definition: &a.definition,
        levels: &a.levels,
        index: i + 1,
        circled: CIRCLED
            .get(i)
            .map_or_else(|| format!("({})", i + 1), |c| c.to_string()),
    }
}

const SYSTEM: &str = "prompt.system";
const USER: &str = "prompt.user";
const ANSWER: &str = "prompt.answer";

impl PromptBuilder {
    /// Compile the rubric's templates; an error names the field.
    pub fn new(rubric: &Rubric) -> Result<Self, PromptError> {
        let mut env = template_environment();
        // A typo in a rubric ({{ respnse.text }}) must fail, not render as empty text.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_unknown_method_callback(bounded_methods::python_methods);
        let mut add = |name: &'static str, source: &str| {
            env.add_template_owned(name, source.to_string())
                .map_err(|e| PromptError::Template {
                    field: name.to_string(),
                    message: e.to_string(),
                })
        };
        if let Some(system) = &rubric.prompt.system {
            add(SYSTEM, system)?;
        }
        add(USER, &rubric.prompt.user)?;
        add(ANSWER, &rubric.prompt.answer)?;
        Ok(PromptBuilder {
            env,
            rubric: rubric.clone(),
        })
    }

    pub fn rubric(&self) -> &Rubric {
        &self.rubric
    }

    /// Render the prompt for `item`, keeping the rubric's context limit.
    pub fn render(&self, item: &Item) -> Result<JudgePrompt, PromptError> {
        self.render_keeping(item, self.rubric.max_context_turns.unwrap_or(usize::MAX))
    }

    /// Render keeping at most `keep_turns` of the most recent context turns (the judge lowers it
    /// when a prompt is longer than the model's context).
    pub fn render_keeping(
        &self,
        item: &Item,
        keep_turns: usize,
    ) -> Result<JudgePrompt, PromptError> {
        let view = ItemView {
            id: &item.id,
            system: item.system.as_deref(),
            dialogue: item.dialogue.as_deref(),
            meta: item.meta.as_ref(),
        };
        self.render_shown(item, &[&item.response], view, keep_turns)
    }

    /// A pairwise rubric's prompt for `pair`, keeping at most `keep_turns` context turns: the
    /// first candidate shown first, or (`swapped`) the second. The item a template sees is the
    /// pair (its id; no system, so that the judge is blind to who wrote which).
    pub fn render_pair_keeping(
        &self,
        pair: &Pair,
        swapped: bool,
        keep_turns: usize,
    ) -> Result<JudgePrompt, PromptError> {
        let (a, b) = pair.shown(swapped);
        let view = ItemView {
            id: &pair.id,
            system: None,
            dialogue: pair.first.dialogue.as_deref(),
            meta: None,
        };
        self.render_shown(a, &[&a.response, &b.response], view, keep_turns)
    }

    /// The prompt for `item`'s context and setting with `responses` shown in that order (the
    /// first is `response`).
    fn render_shown(
        &self,
        item: &Item,
        responses: &[&Turn],
        item_view: ItemView,
        keep_turns: usize,
    ) -> Result<JudgePrompt, PromptError> {
        let keep = keep_turns.min(item.context.len());
        let context = &item.context[item.context.len() - keep..];
        let labels = SpeakerLabels::of(context.iter().chain(responses.iter().copied()));
        let responder = &responses[0].speaker;
        let turn_view = |t| turn_view(t, &labels, responder);
        let aspects: Vec<AspectView> = self
            .rubric
            .aspects
            .iter()
            .enumerate()
            .map(|(i, a)| aspect_view(a, i))
            .collect();
        let mut ctx = Ctx {
            context: context.iter().map(turn_view).collect(),
            response: turn_view(responses[0]),
            responses: responses.iter().map(|t| turn_view(t)).collect(),
            setting: item.setting.as_deref(),
            reference: &item.reference,
            aspects,
            item: item_view,
            aspect: None,
        };
        let id = ctx.item.id.to_string();
        let render = |name: &'static str, ctx: &Ctx| -> Result<String, PromptError> {
            let err = |source| PromptError::Render {
                rubric: self.rubric.name.clone(),
                item: id.clone(),
                field: name,
                source,
            };
            let template = self.env.get_template(name).map_err(err)?;
            render_bounded(&template, minijinja::value::Serde(ctx)).map_err(err)
        };
        // Loops leave a final newline that rubric authors cannot easily avoid with trim_blocks;
        // messages never need trailing whitespace, answers keep theirs.
        let mut messages = Vec::with_capacity(2);
        if self.rubric.prompt.system.is_some() {
            messages.push(Message::new("system", render(SYSTEM, &ctx)?.trim_end()));
        }
        messages.push(Message::new("user", render(USER, &ctx)?.trim_end()));
        let answers = match self.rubric.output {
            OutputMode::Json => vec![render(ANSWER, &ctx)?],
            OutputMode::Score => {
                let mut out = Vec::with_capacity(self.rubric.aspects.len());
                for (i, a) in self.rubric.aspects.iter().enumerate() {
                    ctx.aspect = Some(aspect_view(a, i));
                    out.push(render(ANSWER, &ctx)?);
                }
                out
            }
        };
        Ok(JudgePrompt {
            messages,
            answers,
            dropped_turns: item.context.len() - keep,
        })
    }
}

fn turn_view<'a>(t: &'a Turn, labels: &SpeakerLabels, responder: &str) -> TurnView<'a> {
    TurnView {
        speaker: &t.speaker,
        text: &t.text,
        label: labels.label(&t.speaker),
        role: if t.speaker == responder {
            "assistant"
        } else {
            "user"
        },
    }
}

/// Labels A, B, C… (S27, S28… past Z) for speakers in order of first appearance: what a
/// dialogue shows instead of its speakers' ids.
pub(crate) struct SpeakerLabels<'a> {
    order: Vec<&'a str>,
}

impl<'a> SpeakerLabels<'a> {
    pub(crate) fn of(turns: impl IntoIterator<Item = &'a Turn>) -> Self {
        let mut order: Vec<&'a str> = Vec::new();
        for t in turns {
            if !order.contains(&t.speaker.as_str()) {
                order.push(&t.speaker);
            }
        }
        SpeakerLabels { order }
    }

    /// The label of a speaker of the turns it was made of.
    pub(crate) fn label(&self, speaker: &str) -> String {
        let pos = self.order.iter().position(|s| *s == speaker);
        Self::nth(pos.expect("every speaker was labelled"))
    }

    /// The label a speaker not yet seen would get.
    pub(crate) fn unseen(&self) -> String {
        Self::nth(self.order.len())
    }

    fn nth(i: usize) -> String {
        if i < 26 {
            char::from(b'A' + i as u8).to_string()
        } else {
            format!("S{}", i + 1)
        }
    }
}

/// The example of appendix C of Terauchi et al.: used to check templates and by `rubrics show`.
pub fn sample_item() -> Item {
    let turn = |speaker: &str, text: &str| Turn {
        speaker: speaker.into(),
        text: text.into(),
    };
    Item {
        id: "example-1".into(),
        context: vec![
            turn("A", "こんにちは！お元気でしたか？"),
            turn(
                "B",
                "ああ、久しぶりです。こないだ成人しましたよ。2000年ミレニアム生まれなもんで。",
            ),
            turn(
                "A",
                "おめでとうございます！2000年と言うことは平成生まれですよ。私と一緒だ！",
            ),
            turn(
                "B",
                "そうですね。令和になっちゃったものなあ。急に老け込んだ感じがしますよ。運動とかされていますか？",
            ),
        ],
        response: turn(
            "A",
            "はい、週に数回ジムに行って、ランニングや水泳をしています。",
        ),
        reference: vec!["いや、特にしてないな。あなたは何かしてるんですか？".into()],
        setting: None,
        system: None,
        dialogue: None,
        scope: Default::default(),
        context_id: None,
        human: Default::default(),
        raters: Vec::new(),
        meta: None,
        translation: None,
        numeric_id: false,
    }
}

/// Items that differ in every field a template can show — the number of context turns, the
/// speakers, and the first character of every text (a letter, a digit, a space, CJK, a bracket)
/// — so that the tokens all their prompts share are the rubric's own, never an item's: the
/// judge's shared header (`judge::layout::rubric_header`).
pub fn probe_items() -> Vec<Item> {
    let turn = |speaker: &str, text: &str| Turn {
        speaker: speaker.into(),
        text: text.into(),
    };
    let mut first = sample_item();
    first.id = "probe-1".into();
    first.setting = Some("sample setting".into());
    let texts = [
        ("probe-2", "U", "0 zero", "S", "1 one", "2 two", "3 three"),
        (
            "probe-3",
            "話者",
            " space",
            "相手",
            "「括弧」",
            "　全角",
            "(paren)",
        ),
        (
            "probe-4",
            "x",
            "\"quoted\"",
            "y",
            "- dash",
            "* star",
            "# hash",
        ),
    ];
    let mut probes = vec![first];
    for (k, (id, a, context, b, response, setting, reference)) in texts.into_iter().enumerate() {
        let mut item = sample_item();
        item.id = id.into();
        item.context = (0..=k)
            .map(|i| turn(if i % 2 == 0 { a } else { b }, context))
            .collect();
        item.response = turn(b, response);
        item.setting = Some(setting.into());
        item.reference = vec![reference.into()];
        item.system = Some(a.into());
        item.dialogue = Some(id.into());
        probes.push(item);
    }
    probes
}

/// The sample item and a second response to its context: a pair to check pairwise templates
/// with (`rubrics show` shows it).
pub fn sample_pair() -> Pair {
    let mut first = sample_item();
    first.context_id = Some("example-1".into());
    first.system = Some("system-1".into());
    let mut second = first.clone();
    second.id = "example-2".into();
    second.system = Some("system-2".into());
    second.response.text = "いや、特にしてないな。あなたは何かしてるんですか？".into();
    pair_of(first, second)
}

fn pair_of(first: Item, second: Item) -> Pair {
    Pair {
        id: format!(
            "{}|{}|{}",
            first.context_id.as_deref().unwrap_or_default(),
            first.system.as_deref().unwrap_or_default(),
            second.system.as_deref().unwrap_or_default()
        ),
        context_id: first.context_id.clone().unwrap_or_default(),
        first,
        second,
    }
}

/// `probe_items` as pairs, for a pairwise rubric's shared header: each probe against a second
/// response that differs from it in its first character too.
pub fn probe_pairs() -> Vec<Pair> {
    probe_items()
        .into_iter()
        .enumerate()
        .map(|(k, first)| {
            let mut first = first;
            first.context_id = Some(first.id.clone());
            first.system = Some(format!("p{k}"));
            let mut second = first.clone();
            second.system = Some(format!("q{k}"));
            second.response.text = ["~ tilde", "9 nine", "『二重』", "' quote"][k % 4].into();
            pair_of(first, second)
        })
        .collect()
}

/// Compile the rubric's templates and render them for a sample item, or for a pairwise rubric
/// a sample pair in both orders, which must differ (`PromptError::Template`, naming the field,
/// on error).
pub fn check_templates(rubric: &Rubric) -> Result<(), PromptError> {
    let builder = PromptBuilder::new(rubric)?;
    let mut item = sample_item();
    item.setting = Some("sample setting".into());
    let rendered = match rubric.pairwise {
        None => builder.render(&item).map(|_| ()),
        Some(_) => {
            let mut pair = sample_pair();
            pair.first.setting = item.setting.clone();
            pair.second.setting = item.setting.clone();
            let keep = rubric.max_context_turns.unwrap_or(usize::MAX);
            builder
                .render_pair_keeping(&pair, false, keep)
                .and_then(|ab| Ok((ab, builder.render_pair_keeping(&pair, true, keep)?)))
                .and_then(|(ab, ba)| {
                    if ab == ba {
                        Err(PromptError::Template {
                            field: USER.into(),
                            message: "a pairwise rubric shows both responses (responses[0], responses[1]): the two orders of a pair render the same prompt".into(),
                        })
                    } else {
                        Ok(())
                    }
                })
        }
    };
    rendered.map_err(|e| match e {
        PromptError::Render { field, source, .. } => PromptError::Template {
            field: field.to_string(),
            message: format!("{source}"),
        },
        template @ PromptError::Template { .. } => template,
        other => PromptError::Template {
            field: "prompt".to_string(),
            message: other.to_string(),
        },
    })
}

/// `Rubric::resolve`, then its templates compiled and rendered for a sample item, so that a
/// template error is reported with the rubric's origin and field before any model is loaded.
pub fn resolve_rubric(name_or_path: &str) -> Result<(Rubric, String), RubricError> {
    let (rubric, source) = Rubric::resolve(name_or_path)?;
    check_templates(&rubric).map_err(|e| {
        let (field, message) = match e {
            PromptError::Template { field, message } => (field, message),
            other => ("prompt".to_string(), other.to_string()),
        };
        RubricError::Invalid {
            origin: source.clone(),
            field,
            message,
        }
    })?;
    Ok((rubric, source))
}
