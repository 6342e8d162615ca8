//! `hyoka import` and `hyoka validate`.

use super::exit::EXIT_INVALID_INPUT;
use crate::data::{self, dbdc3};
use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum Import {
    /// Import the DBDC3 dialogue breakdown format (a folder of *.log.json dialogues, or a
    /// .tar.gz or .zip of one: the repository's data/dbdc3-ja.tar.gz and data/dbdc3-en.tar.gz,
    /// or the challenge's DBDC3.zip with --tree).
    ///
    /// Every annotated system utterance becomes one item: its context is everything said before
    /// it, `system` is the folder name (DCM, DIT, IRS; CIC_50, IRIS_50, TKTK_50, YI_50),
    /// `dialogue` the dialogue id. A system utterance no rater annotated (the English data's
    /// opening turns) stays in the context and makes no item. `human.breakdown` holds each
    /// rater's label as O=1, T=0.5, X=0; `human.ungrammatical` the ungrammatical-sentence label
    /// as X=1, O=0 (left out when no rater flagged any utterance, or the raters left it empty);
    /// `raters` the annotator ids in the same order; `meta.dbdc3` the set's tree, language and
    /// whether it is the revised labeling, as far as the folders' names say.
    Dbdc3 {
        /// Folder holding the dialogues (searched recursively), or a .tar.gz of it, e.g.
        /// data/dbdc3-ja.tar.gz.
        #[arg(value_name = "DIR|ARCHIVE")]
        dir: PathBuf,
        /// Output items JSONL.
        #[arg(short, long)]
        output: PathBuf,
        /// Keep only the N most recent context turns of each item (default: all).
        #[arg(long, value_name = "N")]
        max_context: Option<usize>,
        /// The set of dialogues to import where the folder or archive holds several, as the
        /// challenge's DBDC3.zip does: the folder holding the systems' folders (dbdc3/ja/eval,
        /// dbdc3/en/dev, dbdc3/en/eval, dbdc3_revised/en/eval, …) or a unique ending of it.
        #[arg(long, value_name = "TREE")]
        tree: Option<String>,
        /// Keep N whole dialogues drawn with --seed (for a quick run on part of a dataset).
        #[arg(long, value_name = "N")]
        sample_dialogues: Option<usize>,
        /// Seed of --sample-dialogues.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Import the Dialogue System Live Competition 3's data (livecompetition3.zip, MIT; the
    /// repository ships it as data/dslc3.zip): one item per dialogue, of scope `dialogue`.
    ///
    /// Each dialogue's turns but the last are its context, the last its response; `system` is
    /// the system's folder (CHC, HBY, …; AKT, FCL, …), `dialogue` and the id the dialogue id.
    /// Open track: `human.naturalness`, `human.topic_following`, `human.topic_offering`, the
    /// user's 1–5 ratings of the whole dialogue (some half points), and the two topics the user
    /// chose in `meta.dslc3.topics`; situation track: `human.situation_humanlike`. One user
    /// rated each dialogue: there are no rater ids. Judge them with dslc3-open-ja or
    /// dslc3-situation-ja.
    Dslc3 {
        /// The competition's folder (livecompetition3/) or a .zip or .tar.gz of it, e.g.
        /// data/dslc3.zip.
        #[arg(value_name = "DIR|ARCHIVE")]
        dir: PathBuf,
        /// Output items JSONL.
        #[arg(short, long)]
        output: PathBuf,
        /// The track: `open` or `situation` (needed where both are there, as in the archive).
        #[arg(long, value_name = "TRACK")]
        track: Option<String>,
        /// Keep N whole dialogues drawn with --seed (for a quick run on part of a dataset).
        #[arg(long, value_name = "N")]
        sample_dialogues: Option<usize>,
        /// Seed of --sample-dialogues.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Import DUO (ikuminumaya/duo-dataset): chats between a crowd worker and an LLM system,
    /// one item of scope `dialogue` per dialogue.
    ///
    /// The three third-party annotators' 1–5 ratings of the whole dialogue are under each
    /// aspect's key, one value per annotator (`preference`, `stylistic_similarity`,
    /// `consistency`, and `empathy` in the ed setting or `engagingness` in wow), the user's own
    /// under `user_<key>`; `system` is the model, `meta.duo` the setting, language, style prompt,
    /// emotion and episode or topic, and the user's id. The ed setting is CC BY-NC 4.0 and wow
    /// Apache-2.0 (their LICENSE.txt). Judge them with duo-ed-ja, duo-wow-ja, duo-ed-en or duo-wow-en.
    Duo {
        /// The repository's folder (duo-dataset/), or a .zip or .tar.gz of it.
        #[arg(value_name = "DIR|ARCHIVE")]
        dir: PathBuf,
        /// Output items JSONL.
        #[arg(short, long)]
        output: PathBuf,
        /// The setting and language, `ed/ja`, `wow/ja`, `ed/en` or `wow/en` (needed where the
        /// source holds several).
        #[arg(long, value_name = "SETTING/LANGUAGE")]
        set: Option<String>,
        /// Keep N whole dialogues drawn with --seed (for a quick run on part of a dataset).
        #[arg(long, value_name = "N")]
        sample_dialogues: Option<usize>,
        /// Seed of --sample-dialogues.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

#[derive(Args, Debug)]
#[command(long_about = "Check an items JSONL file and print what it holds.\n\n\
Each line is one JSON object:\n  \
id        string or number, unique in the file (required)\n  \
context   list of {\"speaker\", \"text\"} turns before the response, oldest first\n  \
response  {\"speaker\", \"text\"}: the utterance under evaluation (required)\n  \
reference string or list of strings: reference responses (BERTScore)\n  \
setting   string: roleplay settings / character sheet\n  \
system    string: which system produced the response\n  \
dialogue  string: which dialogue the item belongs to\n  \
scope     \"turn\" (default: the response is rated) or \"dialogue\" (the ratings judge the whole \
dialogue, context and response; judged by rubrics of scope dialogue)\n  \
context_id string: which context the response answers; items with the same context_id are \
responses of different systems to one context (same context and setting), compared in pairs by \
`hyoka compare`\n  \
human     {aspect: number or list of numbers (one per rater)}\n  \
raters    list of rater ids, aligned with every per-rater list in human\n  \
meta      anything; carried through to the outputs\n\n\
A bad line fails with FILE:LINE: FIELD: what is wrong (exit code 3). Blank lines are ignored. \
Items with a context_id are also checked as pairs: each needs a system, a system answers a \
context once, and a context's items show the same turns.")]
pub struct Validate {
    /// Items JSONL file.
    pub file: PathBuf,
    /// Report invalid lines and go on, instead of stopping at the first one.
    #[arg(long)]
    pub skip_invalid: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn import(cmd: Import) -> anyhow::Result<ExitCode> {
    match cmd {
        Import::Dbdc3 {
            dir,
            output,
            max_context,
            tree,
            sample_dialogues,
            seed,
        } => {
            let imported = dbdc3::import(&dir, &dbdc3::Dbdc3Options { max_context, tree })?;
            let unannotated = imported.unannotated;
            let mut items = imported.items;
            if let Some(n) = sample_dialogues {
                items = data::select::sample_dialogues(items, n, seed);
            }
            data::write_items(&output, &items)?;
            let s = data::summarize(&items);
            let set = if imported.tree.is_empty() {
                String::new()
            } else {
                format!(" of {}", imported.tree)
            };
            eprintln!(
                "wrote {} items from {} dialogues{set} ({}) to {}",
                s.items,
                s.dialogues,
                systems_counted(&s),
                output.display()
            );
            if unannotated > 0 {
                eprintln!(
                    "{unannotated} system utterances without annotations are context only (no item)"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Import::Dslc3 {
            dir,
            output,
            track,
            sample_dialogues,
            seed,
        } => {
            let imported = data::dslc3::import(&dir, track.as_deref())?;
            let what = format!("of the {} track", imported.track);
            write_dialogues(imported.items, &what, &output, sample_dialogues, seed)
        }
        Import::Duo {
            dir,
            output,
            set,
            sample_dialogues,
            seed,
        } => {
            let imported = data::duo::import(&dir, set.as_deref())?;
            let what = format!("of {}", imported.set);
            write_dialogues(imported.items, &what, &output, sample_dialogues, seed)
        }
    }
}

/// "SYSTEM: N, …" of an import's items.
fn systems_counted(s: &data::Summary) -> String {
    (s.systems.iter())
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Write imported whole dialogues (`what`: which part of the dataset), sampled if asked.
fn write_dialogues(
    mut items: Vec<data::Item>,
    what: &str,
    output: &std::path::Path,
    sample_dialogues: Option<usize>,
    seed: u64,
) -> anyhow::Result<ExitCode> {
    if let Some(n) = sample_dialogues {
        items = data::select::sample_dialogues(items, n, seed);
    }
    data::write_items(output, &items)?;
    let s = data::summarize(&items);
    eprintln!(
        "wrote {} dialogues {what} ({}) to {}",
        s.items,
        systems_counted(&s),
        output.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn validate(cmd: Validate) -> anyhow::Result<ExitCode> {
    let read = data::read_items(&cmd.file, cmd.skip_invalid)?;
    let summary = data::summarize(&read.items);
    // Items that name a context are checked as `hyoka compare` reads them.
    let pairs = if read.items.iter().any(|i| i.context_id.is_some()) {
        let origin = data::Origin::File {
            path: &cmd.file,
            lines: &read.lines,
        };
        Some(data::form_pairs(&read.items, origin, &data::Pairing::All)?)
    } else {
        None
    };
    let pairs_json = pairs.as_ref().map(|p| {
        serde_json::json!({"contexts": p.contexts, "pairs": p.pairs.len(), "single": p.single.len()})
    });
    if cmd.json {
        let out = serde_json::json!({
            "file": cmd.file.display().to_string(),
            "summary": summary,
            "pairwise": pairs_json,
            "skipped": read.skipped.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("summary as JSON")?
        );
    } else {
        print_summary(&cmd.file, &summary);
        if let Some(p) = &pairs {
            println!(
                "  pairwise: {} contexts, {} pairs of systems ({} contexts with one system)",
                p.contexts,
                p.pairs.len(),
                p.single.len()
            );
        }
        if !read.skipped.is_empty() {
            println!("skipped {} invalid line(s):", read.skipped.len());
            for e in &read.skipped {
                println!("  {e}");
            }
        }
    }
    Ok(if read.skipped.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INVALID_INPUT)
    })
}

fn print_summary(file: &std::path::Path, s: &data::Summary) {
    println!("{}: {} items", file.display(), s.items);
    if s.items == 0 {
        return;
    }
    println!(
        "  context turns: {} in all, {}..{} per item (mean {:.1})",
        s.context_turns,
        s.min_context,
        s.max_context,
        s.context_turns as f64 / s.items as f64
    );
    let counts = |m: &std::collections::BTreeMap<String, usize>| {
        m.iter()
            .map(|(k, v)| format!("{k} ({v})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("  response speakers: {}", counts(&s.response_speakers));
    if !s.systems.is_empty() {
        println!("  systems: {}", counts(&s.systems));
    }
    if s.dialogues > 0 {
        println!("  dialogues: {}", s.dialogues);
    }
    println!(
        "  with reference: {}, with setting: {}",
        s.with_reference, s.with_setting
    );
    if s.rated.is_empty() {
        println!("  human ratings: none");
    }
    for (aspect, r) in &s.rated {
        let raters = if r.min_raters == r.max_raters {
            format!("{} rater(s) each", r.min_raters)
        } else {
            format!("{}..{} raters", r.min_raters, r.max_raters)
        };
        println!(
            "  human.{aspect}: {} items, {raters}, mean {:.3}",
            r.items, r.mean
        );
    }
}
