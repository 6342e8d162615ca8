//! `hyoka translate`.

use crate::data;
use crate::translate::{TranslateOptions, TranslatePrompt, translate_items};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(
    long_about = "Translate items into another language with a model hyoka runs (any judge model: \
GGUF or safetensors, CPU or CUDA), so that a judge and BERTScore can read them in it — the English \
route of Terauchi et al. (2024), who translated the dialogue and the response with DeepL.\n\n\
Every text of the items (context turns, responses, references, settings) is translated on its \
own with a prompt template (built in: translate-ja-en, translate-en-ja; or a TOML file of your \
own, see docs/translation.md), by greedy decoding, many texts decoded together; a text shared by \
many items (a context turn) is translated once. The output is an items file: ids, speakers, \
systems, dialogues and human ratings as they were, each text translated, and each item's \
\"translation\" holding the texts it came from and the run's provenance (model, checksum, \
prompt hash, settings).\n\n\
Translations go first to a store (--store; by default OUTPUT with .translations.jsonl for \
.jsonl): one line per distinct text, each with the run's provenance, synced batch by batch. A \
killed run restarted with the same arguments continues after the texts already in it; a store \
of another model, prompt or setting is refused. The output is written once every text has a \
translation; a text that cannot be translated (too long for the model's context, or a \
translation that does not end within its token limit) is named, and nothing is written (exit \
4: a rerun tries it again)."
)]
pub struct TranslateArgs {
    /// Items JSONL (see `hyoka validate --help`).
    #[arg(long, short)]
    pub input: PathBuf,
    /// The translated items JSONL.
    #[arg(long, short)]
    pub output: PathBuf,
    /// The model that translates: local folder or .gguf file, or Hugging Face id
    /// ORG/NAME[@REV][:FILE.gguf].
    #[arg(long)]
    pub model: String,
    /// The language of the items (ISO 639-1).
    #[arg(long, default_value = "ja")]
    pub from: String,
    /// The language to translate into.
    #[arg(long, default_value = "en")]
    pub to: String,
    /// A built-in translation prompt's name or a TOML file (default: translate-FROM-TO). Its
    /// own from and to must be --from and --to.
    #[arg(long, value_name = "NAME|FILE")]
    pub prompt: Option<String>,
    /// The store of translations, one line per distinct text (default: OUTPUT with
    /// .translations.jsonl in place of .jsonl). Several item files may share one.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Most tokens one translation may take (default: 16 + 4 × the text's own tokens).
    #[arg(long, value_name = "N")]
    pub max_new_tokens: Option<usize>,
    /// Most texts decoded together.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub rows: usize,
    /// Memory for the keys and values of the texts decoded together, in GiB (fewer rows when
    /// their prompts and translations would take more).
    #[arg(long = "cache-gib", value_name = "GIB", default_value = "2")]
    pub cache_gib: f64,
    /// Expected sha256 of the model's weights file; a mismatch is an error.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Keep a translation that reaches its token limit, cut there, instead of failing its text
    /// (a small model that repeats itself never ends): its store line says "finished": false,
    /// and the items holding it name it in translation.unfinished. A rerun with this flag keeps
    /// the texts an earlier run failed.
    #[arg(long)]
    pub keep_unfinished: bool,
    /// Replace an existing output file (the store is continued either way).
    #[arg(long)]
    pub overwrite: bool,
    #[command(flatten)]
    pub runtime: super::runtime_args::RuntimeArgs,
}

/// A store is continued, never overwritten (`--overwrite` is the output's): one of another run
/// is refused with what to do about it.
fn store_of_another_run(e: crate::results::ResultsError) -> crate::results::ResultsError {
    match e {
        crate::results::ResultsError::Mismatch {
            path,
            line,
            what,
            theirs,
            ours,
        } => crate::results::ResultsError::Corrupt {
            path,
            line,
            message: format!(
                "a store of another translation run ({what} differs: {theirs} vs now {ours}); name a new store with --store (--overwrite replaces the output, never a store)"
            ),
        },
        e => e,
    }
}

/// The store beside `output`: `x.jsonl` → `x.translations.jsonl`.
pub fn default_store(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
    output.with_file_name(format!("{stem}.translations.jsonl"))
}

/// The prompt `--prompt` names, or the built-in one for the languages; its languages checked
/// (`--from`, `--to`).
pub fn resolve_prompt(
    prompt: Option<&str>,
    from: &str,
    to: &str,
) -> anyhow::Result<(TranslatePrompt, String)> {
    TranslatePrompt::for_languages(prompt, from, to)
        .map_err(|e| anyhow::Error::new(e).context("--prompt, --from, --to"))
}

pub fn run(args: TranslateArgs) -> anyhow::Result<ExitCode> {
    let store = args
        .store
        .clone()
        .unwrap_or_else(|| default_store(&args.output));
    let paths = [&args.input, &args.output, &store];
    for (i, a) in paths.iter().enumerate() {
        for b in &paths[i + 1..] {
            if a == b || crate::files::same_file(a, b) {
                return Err(super::exit::usage(format!(
                    "{} is named twice among the input, the output and the store: name three files",
                    a.display()
                )));
            }
        }
    }
    if args.rows == 0 || args.max_new_tokens == Some(0) {
        return Err(super::exit::usage(
            "--rows and --max-new-tokens must be at least 1",
        ));
    }
    let cache_bytes = crate::judge::json_cache_bytes(args.cache_gib)?;
    let (prompt, _) = resolve_prompt(args.prompt.as_deref(), &args.from, &args.to)?;
    // Held to the end: a second translation into this output is refused now, not after both
    // have written it.
    let _claim = crate::files::OutputClaim::file(&args.output)?;
    let read = data::read_items(&args.input, false)?;
    crate::translate::distinct_texts(&read.items)?;
    if args.output.exists() && !args.overwrite {
        return Err(super::exit::usage(format!(
            "{} exists: give --overwrite to replace it (the store {} is continued either way)",
            args.output.display(),
            store.display()
        )));
    }
    crate::results::ResultsFile::preflight(
        &store,
        false,
        &crate::results::Expected {
            task: crate::results::Task::Translate,
            rubric_hash: None,
        },
    )
    .map_err(store_of_another_run)?;
    let runtime = args.runtime.options();
    let (device, settings) = runtime.settings()?;
    eprintln!("loading {} ...", args.model);
    let model = runtime.load_model(&args.model, &device, &settings, args.sha256.as_deref())?;
    let opts = TranslateOptions {
        max_new_tokens: args.max_new_tokens,
        cache_bytes,
        max_rows: args.rows,
        keep_unfinished: args.keep_unfinished,
    };
    let (done, secs) = super::running::with_progress("translating", |progress| {
        translate_items(&model, &prompt, opts, &read.items, &store, progress)
    });
    let done = done?;
    super::running::report_retried(&done.summary);
    let s = &done.summary;
    eprintln!(
        "{} distinct texts: {} translated now ({} tokens, {:.1} s), {} already in {}",
        done.texts,
        s.scored,
        done.tokens_written,
        secs,
        s.skipped_finished,
        store.display()
    );
    if done.cut > 0 {
        eprintln!(
            "{} of {} translations were cut at their token limit and kept (marked unfinished)",
            done.cut, done.texts
        );
    }
    match done.items {
        Ok(items) => {
            crate::files::write_atomic(&args.output, data::items_text(&items).as_bytes())
                .map_err(|e| anyhow::anyhow!("{}: {e}", args.output.display()))?;
            eprintln!("wrote {} items to {}", items.len(), args.output.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(missing) => {
            for f in crate::translate::describe_failures(&read.items, &s.failed) {
                eprintln!("failed: {f}");
            }
            if done.cut_in_store > 0 {
                eprintln!(
                    "{} translations in {} were cut at their token limit by a run with --keep-unfinished: give --keep-unfinished to use them, or name a new --store to translate their texts again",
                    done.cut_in_store,
                    store.display()
                );
            }
            eprintln!(
                "{} texts have no translation: {} not written (a rerun tries them again)",
                missing.len(),
                args.output.display()
            );
            Ok(ExitCode::from(super::exit::EXIT_PARTIAL))
        }
    }
}
