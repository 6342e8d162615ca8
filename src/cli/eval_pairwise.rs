//! `hyoka eval` with a pairwise rubric: the items' pairs judged in both orders, the systems
//! ranked and compared with human preferences.

use super::eval_files::{
    CreatedFolders, EvalArgs, ITEMS, PAIRS, judge_spec, nothing_to_do, read_or_import, write_all,
};
use super::meta_cmd::StatsArgs;
use crate::data;
use crate::data::select::{Grouping, Shard};
use crate::results::{Expected, Task};
use anyhow::Context;
use std::path::Path;
use std::process::ExitCode;

/// `eval` with a pairwise rubric: the items' pairs judged in both orders (pairs.jsonl), then
/// the systems ranked and compared with human preferences (summary.md, summary.json,
/// report.html). BERTScore scores single responses and is left out. `--sample-dialogues` and
/// `--shard` take whole contexts; `--baseline` pairs each system with one.
pub(super) fn run_pairwise(
    args: &EvalArgs,
    rubric: crate::rubric::Rubric,
    source: String,
    dir: &Path,
    shard: Option<Shard>,
) -> anyhow::Result<ExitCode> {
    let bertscore_flags: Vec<&str> = [
        ("--bertscore-model", args.bertscore_model.is_some()),
        ("--lang", args.lang.is_some()),
        ("--layer", args.layer.is_some()),
        ("--rescale", args.rescale),
        ("--against", args.against.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if !bertscore_flags.is_empty() {
        return Err(super::exit::usage(format!(
            "{}: BERTScore scores single responses and is left out of a pairwise rubric's run",
            bertscore_flags.join(", ")
        )));
    }
    let unused = args.stats.options().not_for_pairwise();
    if !unused.is_empty() {
        return Err(super::exit::usage(format!(
            "{}: for judge and BERTScore results; a pairwise rubric's run takes --bootstrap, --confidence, --seed, --tie-margin and --preferences",
            unused.join(", ")
        )));
    }
    // Items read as they stand in the file keep their lines, for errors naming them.
    let as_read = match &args.input {
        Some(path) if args.sample_dialogues.is_none() && shard.is_none() => {
            Some(data::read_items(path, false)?)
        }
        _ => None,
    };
    let mut items = match &as_read {
        Some(read) => read.items.clone(),
        None => read_or_import(args, Grouping::Contexts)?,
    };
    let whole = shard.map(|_| crate::data::select::set_digest(&items));
    if let Some(s) = shard {
        items = s.select_groups(items, Grouping::Contexts);
    }
    if items.is_empty() {
        nothing_to_do(dir, shard, whole.as_ref(), "context")?;
        return Ok(ExitCode::SUCCESS);
    }
    let origin = match (&as_read, &args.input) {
        (Some(read), Some(path)) => data::Origin::File {
            path,
            lines: &read.lines,
        },
        _ => data::Origin::Memory,
    };
    let pairing = match &args.baseline {
        Some(b) => data::Pairing::Baseline(b.clone()),
        None => data::Pairing::All,
    };
    let pairs = data::form_pairs(&items, origin, &pairing)?;
    eprintln!(
        "{} items, {} contexts, {} pairs{} → {}{}",
        items.len(),
        pairs.contexts,
        pairs.pairs.len(),
        shard.map(|s| format!(" (shard {s})")).unwrap_or_default(),
        dir.display(),
        if args.no_bertscore {
            ""
        } else {
            " (BERTScore scores single responses: left out of a pairwise run)"
        }
    );
    if pairs.pairs.is_empty() && shard.is_none() {
        return Err(super::exit::usage(
            "no context has responses of two systems to compare (items with the same context_id and different systems)",
        ));
    }
    let (device, settings) = args.runtime.options().settings()?;
    let _created = CreatedFolders::create(dir)?;
    let _claim = crate::files::OutputClaim::folder(dir)?;
    let output = dir.join(PAIRS);
    crate::results::ResultsFile::preflight(
        &output,
        args.overwrite,
        &Expected {
            task: Task::Compare,
            rubric_hash: Some(rubric.hash()),
        },
    )?;
    let judge = judge_spec(args, rubric, source).load_on(&device, &settings)?;
    crate::results::ResultsFile::check(
        &output,
        &judge.comparer(&pairs).provenance(&judge.opts),
        args.overwrite,
    )?;
    data::write_items(&dir.join(ITEMS), &items)?;
    if let (Some(s), Some(whole)) = (shard, &whole) {
        super::shard_set::record(dir, &s.to_string(), whole)?;
    }
    let (summary, secs) =
        super::running::with_progress("comparing", |p| judge.compare(&pairs, &output, p));
    let (summary, _) = summary?;
    super::running::report_retried(&summary);
    eprintln!(
        "compare: judged {} pairs in {secs:.1}s; {} already done; {} failed",
        summary.scored,
        summary.skipped_finished,
        summary.failed.len()
    );
    drop(judge);
    match shard {
        Some(s) => eprintln!(
            "shard {s} done; join the shards with `hyoka merge {}/shard-*-of-{} -o {}`",
            args.output.display(),
            s.count,
            args.output.display()
        ),
        None => write_all(dir, pairwise_report(dir, &args.stats)?)?,
    }
    Ok(super::exit::finish(&summary.failed, 0))
}

/// summary.md, summary.json and report.html of the pairwise results in `dir` (its items.jsonl
/// and pairs.jsonl): (file name, contents), for the caller to write. The ranking is printed.
pub(super) fn pairwise_report(
    dir: &Path,
    stats: &StatsArgs,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let items = data::read_items(&dir.join(ITEMS), false)?.items;
    let output = dir.join(PAIRS);
    let input = crate::results::reader::ResultsInput::open(&output)?;
    let evaluation = crate::meta::evaluate(
        items,
        &dir.join(ITEMS).display().to_string(),
        &[input],
        &stats.request(None, false),
        crate::meta::Naming::Flags,
        &mut |note| eprintln!("{note}"),
        &|_, _| {},
    )?;
    let crate::meta::Evaluation::Pairwise(ranked) = evaluation else {
        anyhow::bail!("{} holds no pairwise results", output.display());
    };
    let md = crate::meta::pairwise::markdown(&ranked);
    print!("{md}");
    let json = serde_json::to_string_pretty(&ranked).context("summary as JSON")? + "\n";
    eprintln!(
        "writing summary.md, summary.json and report.html to {}",
        dir.display()
    );
    Ok(vec![
        ("summary.md", md),
        ("summary.json", json),
        ("report.html", crate::report::pairwise_html(&ranked)),
    ])
}
