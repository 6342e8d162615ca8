//! `hyoka merge`: the folders of `hyoka eval --shard K/N` runs → one folder and its report.
//! Everything is read and checked, and the report computed, before anything is written.

use super::args::StatsArgs;
use crate::data::select::Shard;
use crate::data::{self, DataError, Item, Origin, Pair, Pairing, form_pairs};
use crate::eval::{BERTSCORE, ITEMS, JUDGE, PAIRS, pairwise_report, scores_report, write_all};
use crate::meta::Naming;
use crate::results::Provenance;
use crate::results::reader::read_records;
use anyhow::Context;
use clap::Args;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(
    long_about = "Join the folders of `hyoka eval --shard K/N` runs into one folder and write \
its report (of a pairwise rubric's shards, whose pairs.jsonl lines are checked against the \
pairs their items form, the pairwise report).\n\n\
Nothing is written unless the merge is whole and consistent. The shards must have been cut from \
one set of items (each shard's shard.json records it) and, together, be that set; items must not \
repeat across shards, and every results line must come from the same run (model, rubric, dtype, settings, \
hyoka version) as the first shard's and be for its shard's item as it is now (exit 3 \
otherwise). Every shard of the set (shard-1-of-N … shard-N-of-N) must be given and every item \
must have its lines: a missing shard, or a shard stopped before its end, is named with its items \
and nothing is written (exit 4); run that shard's `eval` again (it continues where it stopped) \
and merge again. A shard whose share holds no dialogue is an empty folder and merges as such."
)]
pub struct MergeArgs {
    /// Shard folders (OUT/shard-K-of-N).
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// Output folder.
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub stats: StatsArgs,
}

/// One shard folder's items.
struct ShardItems {
    dir: PathBuf,
    items: Vec<Item>,
}

pub fn merge(args: MergeArgs) -> anyhow::Result<ExitCode> {
    for (i, dir) in args.shards.iter().enumerate() {
        if let Some(earlier) = args.shards[..i]
            .iter()
            .find(|d| crate::files::same_file(d, dir))
        {
            return Err(super::exit::usage(format!(
                "{} and {} are one folder: give each shard once",
                earlier.display(),
                dir.display()
            )));
        }
        if crate::files::same_file(dir, &args.output) {
            return Err(super::exit::usage(format!(
                "the output {} is the shard folder {}: merge into another folder",
                args.output.display(),
                dir.display()
            )));
        }
    }
    let missing_shards = missing_shards(&args.shards);

    // Items: each shard read strictly; an id in two shards names both.
    let mut shards: Vec<ShardItems> = Vec::new();
    let mut home: HashMap<String, usize> = HashMap::new();
    for (k, dir) in args.shards.iter().enumerate() {
        let path = dir.join(ITEMS);
        let items = data::read_items(&path, false)?.items;
        for item in &items {
            if let Some(j) = home.insert(item.id.clone(), k) {
                return Err(DataError::Format {
                    file: path,
                    message: format!(
                        "item {:?} is also in {}: the same item in two shards",
                        item.id,
                        args.shards[j].join(ITEMS).display()
                    ),
                }
                .into());
            }
        }
        shards.push(ShardItems {
            dir: dir.clone(),
            items,
        });
    }

    // The shards were cut from one set of items (and, checked after their lines, together are
    // it).
    let dirs: Vec<&Path> = shards.iter().map(|s| s.dir.as_path()).collect();
    let whole_set = crate::eval::shard_set::recorded(&dirs)?;

    // Results: every shard with items has each kind of results file or none has; the lines
    // are of one run, each for its shard's item as it is now.
    let mut merged: Vec<(&'static str, String)> = Vec::new();
    let mut judge_aspects: Vec<String> = Vec::new();
    let mut unfinished: Vec<String> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for name in [JUDGE, BERTSCORE, PAIRS] {
        let with_items: Vec<&ShardItems> = shards.iter().filter(|s| !s.items.is_empty()).collect();
        let present = with_items
            .iter()
            .filter(|s| s.dir.join(name).exists())
            .count();
        if present == 0 {
            continue;
        }
        // How the pairs were formed, read once for every shard.
        let pairing = if name == PAIRS {
            Some(recorded_pairing(&shards)?)
        } else {
            None
        };
        let mut first: Option<Provenance> = None;
        let mut text = String::new();
        for shard in with_items {
            let path = shard.dir.join(name);
            if !path.exists() {
                unfinished.push(format!("{}: no {name}", shard.dir.display()));
                continue;
            }
            // The units this file's lines are for: the shard's items, or the pairs they form.
            let pairs = match &pairing {
                Some(pairing) if name == PAIRS => shard_pairs(shard, pairing)?,
                _ => Vec::new(),
            };
            let units: HashMap<&str, &dyn CurrentCheck> = if name == PAIRS {
                pairs
                    .iter()
                    .map(|p| (p.id.as_str(), p as &dyn CurrentCheck))
                    .collect()
            } else {
                (shard.items.iter())
                    .map(|i| (i.id.as_str(), i as &dyn CurrentCheck))
                    .collect()
            };
            let mut seen: BTreeSet<String> = BTreeSet::new();
            read_records(&path, |number, line, record| {
                match &first {
                    None => first = Some((*record.provenance).clone()),
                    Some(p) => p.ensure_same(&record.provenance, &path, number)?,
                }
                let Some(unit) = units.get(record.id.as_str()) else {
                    return Err(crate::results::ResultsError::Corrupt {
                        path: path.clone(),
                        line: number,
                        message: format!(
                            "id: {:?} is not {} of {}",
                            record.id,
                            if name == PAIRS {
                                "a pair of the items"
                            } else {
                                "an item"
                            },
                            shard.dir.join(ITEMS).display()
                        ),
                    });
                };
                unit.ensure_current(&record, &path, number)?;
                if name != BERTSCORE
                    && let Err(why) = &record.body
                {
                    failed.push(format!("{}: {why}", record.id));
                }
                seen.insert(record.id.clone());
                text.push_str(line);
                text.push('\n');
                Ok(())
            })?;
            let missing: Vec<&str> = units
                .keys()
                .copied()
                .filter(|id| !seen.contains(*id))
                .collect();
            if let Some(example) = missing.iter().min() {
                unfinished.push(format!(
                    "{}: {} of {} {} have no line (e.g. {example:?})",
                    path.display(),
                    missing.len(),
                    units.len(),
                    if name == PAIRS { "pairs" } else { "items" }
                ));
            }
        }
        if name == JUDGE
            && let Some(rubric) = first.as_ref().and_then(|p| p.rubric.as_ref())
        {
            judge_aspects = rubric.aspects.iter().map(|a| a.key.clone()).collect();
        }
        merged.push((name, text));
    }
    if let Some(set) = &whole_set
        && missing_shards.is_empty()
    {
        set.check_whole(shards.iter().map(|s| s.items.as_slice()))?;
    }
    args.stats
        .options()
        .breakdown
        .check_aspects(judge_aspects.iter().map(String::as_str))?;
    if !missing_shards.is_empty() || !unfinished.is_empty() {
        for s in &missing_shards {
            eprintln!("missing: {s}");
        }
        for u in &unfinished {
            eprintln!("unfinished: {u}");
        }
        eprintln!(
            "nothing written: run the missing or unfinished shards' `hyoka eval --shard K/N` (a rerun continues where it stopped), then merge again"
        );
        return Ok(ExitCode::from(super::exit::EXIT_PARTIAL));
    }

    // The merge and its report are made in a folder of their own inside the output, then each
    // file is written into the output whole; the staging folder goes.
    let items: Vec<Item> = shards.into_iter().flat_map(|s| s.items).collect();
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let staging = args
        .output
        .join(format!(".hyoka-merge-{}", std::process::id()));
    let staged = stage(&staging, &items, merged, &args.stats);
    let _ = std::fs::remove_dir_all(&staging);
    write_all(&args.output, staged?)?;
    eprintln!(
        "merged {} shards: {} items → {}",
        args.shards.len(),
        items.len(),
        args.output.display()
    );
    Ok(super::exit::finish(&failed, 0))
}

/// Write the merged items and results into `staging` and compute the report there: every file
/// of the merge, as (name, contents).
fn stage(
    staging: &Path,
    items: &[Item],
    merged: Vec<(&'static str, String)>,
    stats: &StatsArgs,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    std::fs::create_dir_all(staging).with_context(|| format!("creating {}", staging.display()))?;
    let mut files = vec![(ITEMS, data::items_text(items))];
    files.extend(merged);
    let mut results = Vec::new();
    for (name, text) in &files {
        let path = staging.join(name);
        std::fs::write(&path, text).with_context(|| format!("{}", path.display()))?;
        if *name != ITEMS {
            results.push(path);
        }
    }
    let request = stats.request(None, false);
    let reporter = super::running::Terminal::default();
    if files.iter().any(|(name, _)| *name == PAIRS) {
        files.extend(pairwise_report(
            staging,
            &request,
            Naming::Flags,
            &reporter,
        )?);
    } else {
        files.extend(scores_report(staging, &results, &request, &reporter)?.0);
    }
    Ok(files)
}

/// A unit whose results line must have been computed from it as it is now.
trait CurrentCheck {
    fn ensure_current(
        &self,
        record: &crate::results::Record,
        path: &Path,
        line: usize,
    ) -> Result<(), crate::results::ResultsError>;
}

impl<U: crate::results::runner::Unit> CurrentCheck for U {
    fn ensure_current(
        &self,
        record: &crate::results::Record,
        path: &Path,
        line: usize,
    ) -> Result<(), crate::results::ResultsError> {
        crate::results::inputs::ensure_current(record, self, path, line)
    }
}

/// How the shards' pairs were formed, as the first pairwise results line of any shard
/// records it (every line of a merge is of one run; without any line, every two systems).
fn recorded_pairing(shards: &[ShardItems]) -> anyhow::Result<Pairing> {
    for shard in shards {
        let path = shard.dir.join(PAIRS);
        if !path.exists() {
            continue;
        }
        let mut pairing = None;
        read_records(&path, |number, _, record| {
            if pairing.is_none() {
                let recorded = record.provenance.settings.get("pairing");
                pairing = Some(
                    recorded
                        .and_then(|v| v.as_str())
                        .and_then(Pairing::from_record)
                        .ok_or_else(|| crate::results::ResultsError::Corrupt {
                            path: path.clone(),
                            line: number,
                            message: "provenance.settings.pairing: missing or not a pairing".into(),
                        })?,
                );
            }
            Ok(())
        })?;
        if let Some(p) = pairing {
            return Ok(p);
        }
    }
    Ok(Pairing::All)
}

/// The pairs a shard's items form.
fn shard_pairs(shard: &ShardItems, pairing: &Pairing) -> anyhow::Result<Vec<Pair>> {
    let items_path = shard.dir.join(ITEMS);
    let lines = data::read_items(&items_path, false)?.lines;
    let origin = Origin::File {
        path: &items_path,
        lines: &lines,
    };
    Ok(form_pairs(&shard.items, origin, pairing)?.pairs)
}

/// The shards of each set `shard-K-of-N` that are not among `dirs` (by folder name); a folder
/// of another name is said to be left unchecked.
fn missing_shards(dirs: &[PathBuf]) -> Vec<String> {
    let mut sets: HashMap<usize, BTreeSet<usize>> = HashMap::new();
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match Shard::of_folder(&name) {
            Some(s) => {
                sets.entry(s.count).or_default().insert(s.index);
            }
            None => eprintln!(
                "{}: not named shard-K-of-N, so whether shards are missing beside it cannot be told",
                dir.display()
            ),
        }
    }
    let mut counts: Vec<usize> = sets.keys().copied().collect();
    counts.sort_unstable();
    let mut missing = Vec::new();
    for count in counts {
        for index in 1..=count {
            if !sets[&count].contains(&index) {
                missing.push(format!(
                    "{} (shard {index}/{count})",
                    Shard { index, count }.folder_name()
                ));
            }
        }
    }
    if sets.len() > 1 {
        missing.push(format!(
            "one set of shards: folders of {} different counts N were given",
            sets.len()
        ));
    }
    missing
}
