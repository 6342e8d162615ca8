//! `hyoka rubrics list|show`.

use crate::data;
use crate::prompt::{PromptBuilder, sample_item, sample_pair};
use crate::rubric::{BUILTIN, OutputMode, Rubric};
use anyhow::{Context, bail};
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum Rubrics {
    /// List the built-in rubrics.
    List,
    /// Show a rubric (built-in name or TOML/JSON file) and its prompt (exact with --chat-template).
    ///
    /// A rubric file is validated first: errors name the file and the field (exit code 3), so
    /// this is also how to check a rubric you wrote. The prompt is rendered for the item at
    /// FILE:LINE, or for the example dialogue of Terauchi et al. (appendix C). With
    /// --chat-template (a .gguf, tokenizer_config.json, .jinja file or model folder) the text is
    /// the model's exact input; without it, the messages are shown before templating.
    Show {
        /// Built-in rubric name or path to a rubric file.
        rubric: String,
        /// Render the prompt for this item: FILE:LINE (1-based line of an items JSONL file).
        #[arg(long, value_name = "FILE:LINE")]
        item: Option<String>,
        /// The judge model's chat template: .gguf, tokenizer_config.json, .jinja or a model folder.
        #[arg(long, value_name = "PATH")]
        chat_template: Option<PathBuf>,
        /// Print only the full prompt for this aspect key (what the model reads before the score).
        #[arg(long, value_name = "KEY")]
        aspect: Option<String>,
        /// Print the rubric as TOML instead (a starting point for writing your own).
        #[arg(long, conflicts_with_all = ["item", "chat_template", "aspect"])]
        toml: bool,
    },
}

pub fn run(cmd: Rubrics) -> anyhow::Result<ExitCode> {
    match cmd {
        Rubrics::List => {
            for (name, _) in BUILTIN {
                let (r, _) = crate::prompt::resolve_rubric(name)?;
                let aspects: Vec<String> = r
                    .aspects
                    .iter()
                    .map(|a| format!("{} {}..{}", a.name, a.min, a.max))
                    .collect();
                println!("{name}");
                println!("  {}", r.description);
                let kind = match r.pairwise {
                    Some(v) => format!(
                        "pairwise (hyoka compare; {} = first, {} = second{}), ",
                        v.first,
                        v.second,
                        v.tie.map(|t| format!(", {t} = tie")).unwrap_or_default()
                    ),
                    None => String::new(),
                };
                println!(
                    "  {kind}output: {}, aspects: {}",
                    mode(r.output),
                    aspects.join(", ")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Rubrics::Show {
            rubric,
            item,
            chat_template,
            aspect,
            toml,
        } => {
            let (r, source) = crate::prompt::resolve_rubric(&rubric)?;
            if toml {
                print!("{}", ::toml::to_string(&r).context("rubric as TOML")?);
                return Ok(ExitCode::SUCCESS);
            }
            let builder = PromptBuilder::new(&r).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
            let (shown_id, prompt) = match (&item, r.pairwise) {
                (Some(spec), None) => {
                    let (file, line) = parse_file_line(spec)?;
                    let item = data::read_item_at(&file, line)?;
                    (item.id.clone(), builder.render(&item)?)
                }
                (None, None) => (sample_item().id, builder.render(&sample_item())?),
                (spec, Some(_)) => {
                    let pair = match spec {
                        Some(spec) => pair_at(spec)?,
                        None => sample_pair(),
                    };
                    let keep = r.max_context_turns.unwrap_or(usize::MAX);
                    (
                        pair.id.clone(),
                        builder.render_pair_keeping(&pair, false, keep)?,
                    )
                }
            };
            let template = chat_template
                .as_deref()
                .map(crate::model::loaded_model::read_chat_template)
                .transpose()?;
            if let Some(key) = aspect {
                let Some(pos) = r.aspects.iter().position(|a| a.key == key) else {
                    bail!(
                        "rubric {} has no aspect {key:?} (aspects: {})",
                        r.name,
                        r.aspects
                            .iter()
                            .map(|a| a.key.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                };
                let answer = &prompt.answers[pos.min(prompt.answers.len() - 1)];
                match &template {
                    Some(t) => print!("{}{answer}", t.render(&prompt.messages, true)?),
                    None => {
                        for m in &prompt.messages {
                            println!("[{}]\n{}\n", m.role, m.content);
                        }
                        print!("[assistant]\n{answer}");
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            print_rubric(&r, &source);
            println!(
                "\n=== prompt for item {} ({} context turn(s) left out) ===",
                shown_id, prompt.dropped_turns
            );
            match &template {
                Some(t) => {
                    println!(
                        "--- shared by all aspects (chat template: {}) ---",
                        t.origin
                    );
                    print!("{}", t.render(&prompt.messages, true)?);
                    println!("\n--- end of shared text ---");
                }
                None => {
                    for m in &prompt.messages {
                        println!("--- {} message ---\n{}", m.role, m.content);
                    }
                    println!("--- (add --chat-template to see the model's exact input) ---");
                }
            }
            match r.output {
                OutputMode::Score => {
                    for (a, answer) in r.aspects.iter().zip(&prompt.answers) {
                        println!(
                            "answer prefix for {} ({}..{}): {answer:?}",
                            a.key, a.min, a.max
                        );
                    }
                }
                OutputMode::Json => println!(
                    "answer prefix, then the JSON object: {:?}",
                    prompt.answers[0]
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn mode(m: OutputMode) -> &'static str {
    match m {
        OutputMode::Score => "score",
        OutputMode::Json => "json",
    }
}

/// A pairwise rubric's `--item FILE:LINE`: that item and the first other system's response to
/// its context in the file, the item shown first.
fn pair_at(spec: &str) -> anyhow::Result<crate::data::Pair> {
    let (file, line) = parse_file_line(spec)?;
    let item = data::read_item_at(&file, line)?;
    let items = data::read_items(&file, false)?.items;
    let context = item.context_id.clone();
    let Some(other) = items
        .into_iter()
        .find(|o| context.is_some() && o.context_id == context && o.system != item.system)
    else {
        bail!(
            "{spec}: a pairwise rubric shows two responses to one context, and no other system's item has context_id {:?}",
            item.context_id.as_deref().unwrap_or_default()
        );
    };
    Ok(crate::data::Pair {
        id: format!(
            "{}|{}|{}",
            context.as_deref().unwrap_or_default(),
            item.system.as_deref().unwrap_or_default(),
            other.system.as_deref().unwrap_or_default()
        ),
        context_id: context.unwrap_or_default(),
        first: item,
        second: other,
    })
}

/// `--item FILE:LINE`; a malformed one is a usage error (exit 2).
fn parse_file_line(spec: &str) -> anyhow::Result<(PathBuf, usize)> {
    let (file, line) = spec.rsplit_once(':').ok_or_else(|| {
        super::exit::usage(format!(
            "--item {spec}: takes FILE:LINE (e.g. items.jsonl:3)"
        ))
    })?;
    let line: usize = line.parse().map_err(|_| {
        super::exit::usage(format!("--item {spec}: LINE must be a positive number"))
    })?;
    if line == 0 {
        return Err(super::exit::usage(format!(
            "--item {spec}: lines are numbered from 1"
        )));
    }
    Ok((PathBuf::from(file), line))
}

fn print_rubric(r: &Rubric, source: &str) {
    println!("rubric {} ({source})", r.name);
    println!("  {}", r.description);
    println!("  output: {}, hash: {}", mode(r.output), &r.hash()[..16]);
    if let Some(n) = r.max_context_turns {
        println!("  context: the {n} most recent turns");
    }
    if let Some(j) = &r.json {
        println!(
            "  json: reason key {:?} (at most {} tokens), then one integer per aspect",
            j.reason_key, j.reason_max_tokens
        );
    }
    for a in &r.aspects {
        println!("\n  [{}] {} ({}..{})", a.key, a.name, a.min, a.max);
        println!("    {}", a.definition.replace('\n', "\n    "));
        for l in &a.levels {
            let label = l
                .label
                .as_deref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            println!("    {}{label}: {}", l.score, l.description);
        }
        if !a.human.is_empty() {
            println!("    compared with human ratings: {}", a.human.join(", "));
        }
    }
}
