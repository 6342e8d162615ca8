//! An evaluation with a pairwise rubric: the items' pairs judged in both orders (pairs.jsonl),
//! then the systems ranked and compared with human preferences (summary.md, summary.json,
//! report.html). BERTScore scores single responses and is left out; a sample and a shard take
//! whole contexts; `baseline` pairs each system with one.

use super::error::EvalError;
use super::folder::{CreatedFolders, ITEMS, PAIRS, nothing_to_do, write_all};
use super::reporter::{Reporter, retried_notes, timed};
use super::spec::{EvalItems, EvalSpec, Evaluated};
use crate::data;
use crate::data::select::Grouping;
use crate::meta::{MetaRequest, Naming};
use crate::results::{Expected, Task};
use std::path::Path;

pub(super) fn run(
    spec: &EvalSpec,
    items: EvalItems,
    dir: &Path,
    naming: Naming,
    reporter: &dyn Reporter,
) -> Result<Evaluated, EvalError> {
    let choice = spec.bertscore.clone().unwrap_or_default();
    let bertscore_settings: Vec<String> = [
        ("--bertscore-model", choice.model.is_some()),
        ("--lang", spec.lang.is_some()),
        ("--layer", choice.layer.is_some()),
        ("--rescale", choice.rescale),
        ("--against", choice.against.is_some()),
    ]
    .into_iter()
    .filter(|&(_, set)| set)
    .map(|(flag, _)| naming.name(flag))
    .collect();
    if !bertscore_settings.is_empty() {
        return Err(EvalError::usage(format!(
            "{}: BERTScore scores single responses and is left out of a pairwise rubric's run",
            bertscore_settings.join(", ")
        )));
    }
    let unused: Vec<String> = (spec.stats.options.not_for_pairwise().iter())
        .map(|s| naming.name(s))
        .collect();
    if !unused.is_empty() {
        let takes: Vec<String> = ["--bootstrap", "--confidence", "--seed", "--tie-margin"]
            .iter()
            .map(|s| naming.name(s))
            .collect();
        return Err(EvalError::usage(format!(
            "{}: for judge and BERTScore results; a pairwise rubric's run takes {} and {}",
            unused.join(", "),
            takes.join(", "),
            naming.name("--preferences")
        )));
    }
    // Items as they stand in their file keep their lines, for errors naming them.
    let file = items
        .file
        .filter(|_| spec.sample.is_none() && spec.shard.is_none());
    let mut items = spec.sampled(items.items, Grouping::Contexts);
    let whole = spec.shard.map(|_| crate::data::select::set_digest(&items));
    if let Some(s) = spec.shard {
        items = s.select_groups(items, Grouping::Contexts);
    }
    if items.is_empty() {
        nothing_to_do(dir, spec.shard, whole.as_ref(), "context", reporter)?;
        return Ok(Evaluated {
            dir: dir.to_path_buf(),
            failed: Vec::new(),
        });
    }
    let origin = match &file {
        Some((path, lines)) => data::Origin::File { path, lines },
        None => data::Origin::Memory,
    };
    let pairing = match &spec.baseline {
        Some(b) => data::Pairing::Baseline(b.clone()),
        None => data::Pairing::All,
    };
    let pairs = data::form_pairs(&items, origin, &pairing)?;
    reporter.note(&format!(
        "{} items, {} contexts, {} pairs{} → {}{}",
        items.len(),
        pairs.contexts,
        pairs.pairs.len(),
        spec.shard
            .map(|s| format!(" (shard {s})"))
            .unwrap_or_default(),
        dir.display(),
        if spec.bertscore.is_none() {
            ""
        } else {
            " (BERTScore scores single responses: left out of a pairwise run)"
        }
    ));
    if pairs.pairs.is_empty() && spec.shard.is_none() {
        return Err(EvalError::usage(
            "no context has responses of two systems to compare (items with the same context_id and different systems)",
        ));
    }
    let (device, settings) = spec.judge.runtime.settings()?;
    let overwrite = spec.judge.run.overwrite;
    let _created = CreatedFolders::create(dir)?;
    let _claim = crate::files::OutputClaim::folder(dir)?;
    let output = dir.join(PAIRS);
    crate::results::ResultsFile::preflight(
        &output,
        overwrite,
        &Expected {
            task: Task::Compare,
            rubric_hash: Some(spec.judge.rubric.hash()),
        },
    )?;
    let judge = spec.judge.clone().load_on(&device, &settings)?;
    crate::results::ResultsFile::check(
        &output,
        &judge.comparer(&pairs).provenance(&judge.opts),
        overwrite,
    )?;
    data::write_items(&dir.join(ITEMS), &items)?;
    if let (Some(s), Some(whole)) = (spec.shard, &whole) {
        super::shard_set::record(dir, &s.to_string(), whole)?;
    }
    let (summary, secs) = timed(reporter, "comparing", |p| judge.compare(&pairs, &output, p));
    let (summary, _) = summary?;
    for note in retried_notes(&summary) {
        reporter.note(&note);
    }
    reporter.note(&format!(
        "compare: judged {} pairs in {secs:.1}s; {} already done; {} failed",
        summary.scored,
        summary.skipped_finished,
        summary.failed.len()
    ));
    drop(judge);
    match spec.shard {
        Some(s) => reporter.note(&format!(
            "shard {s} done; join the shards with `hyoka merge {}/shard-*-of-{} -o {}`",
            spec.output.display(),
            s.count,
            spec.output.display()
        )),
        None => write_all(dir, pairwise_report(dir, &spec.stats, naming, reporter)?)?,
    }
    Ok(Evaluated {
        dir: dir.to_path_buf(),
        failed: summary.failed,
    })
}

/// summary.md, summary.json and report.html of the pairwise results in `dir` (its items.jsonl
/// and pairs.jsonl): (file name, contents), for the caller to write. The ranking is reported as
/// a table.
pub fn pairwise_report(
    dir: &Path,
    stats: &MetaRequest,
    naming: Naming,
    reporter: &dyn Reporter,
) -> Result<Vec<(&'static str, String)>, EvalError> {
    let items_path = dir.join(ITEMS);
    let items = data::read_items(&items_path, false)?.items;
    let output = dir.join(PAIRS);
    let input = crate::results::reader::ResultsInput::open(&output)?;
    let request = MetaRequest {
        half: None,
        accept_unhashed: false,
        ..stats.clone()
    };
    let evaluation = crate::meta::evaluate(
        items,
        &items_path.display().to_string(),
        &[input],
        &request,
        naming,
        &mut |note| reporter.note(&note),
        &|_, _| {},
    )?;
    let crate::meta::Evaluation::Pairwise(ranked) = evaluation else {
        return Err(crate::meta::MetaError::Input(format!(
            "{} holds no pairwise results",
            output.display()
        ))
        .into());
    };
    let md = crate::meta::pairwise::markdown(&ranked);
    reporter.table(&md);
    let json = serde_json::to_string_pretty(&ranked).expect("a summary serialises") + "\n";
    reporter.note(&format!(
        "writing summary.md, summary.json and report.html to {}",
        dir.display()
    ));
    Ok(vec![
        ("summary.md", md),
        ("summary.json", json),
        ("report.html", crate::report::pairwise_html(&ranked)),
    ])
}
