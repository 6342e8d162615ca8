//! The evaluation of single responses: the first route, a translated one, their reports.

use super::error::EvalError;
use super::folder::{CreatedFolders, ITEMS, nothing_to_do, scores_report, write_all};
use super::reporter::Reporter;
use super::routes::{Route, TranslatedRoute, bertscore_job};
use super::spec::{EvalItems, EvalSpec, Evaluated};
use crate::data::select::Grouping;
use crate::meta::Naming;

/// Evaluate `items` as `spec` says, into `spec.output` (or its shard's folder).
pub fn run(
    spec: &EvalSpec,
    items: EvalItems,
    naming: Naming,
    reporter: &dyn Reporter,
) -> Result<Evaluated, EvalError> {
    let rubric = &spec.judge.rubric;
    spec.stats
        .options
        .breakdown
        .check_aspects(rubric.aspects.iter().map(|a| a.key.as_str()))?;
    let dir = match spec.shard {
        Some(s) => spec.output.join(s.folder_name()),
        None => spec.output.clone(),
    };
    let routes: Vec<&str> = [
        ("--likelihood", !spec.likelihood.is_empty()),
        ("--translate", spec.translate.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if !routes.is_empty() && (rubric.pairwise.is_some() || spec.shard.is_some()) {
        let names: Vec<String> = routes.iter().map(|r| naming.name(r)).collect();
        return Err(EvalError::usage(format!(
            "{}: not with a pairwise rubric or {} (run `hyoka likelihood` or `hyoka translate` on the items, or on a merged folder's)",
            names.join(", "),
            naming.name("--shard")
        )));
    }
    if rubric.pairwise.is_some() {
        return super::pairwise::run(spec, items, &dir, naming, reporter);
    }
    if spec.baseline.is_some() || spec.stats.preferences.is_some() || spec.stats.tie_margin != 0.0 {
        let names: Vec<String> = ["--baseline", "--preferences", "--tie-margin"]
            .iter()
            .map(|s| naming.name(s))
            .collect();
        return Err(EvalError::usage(format!(
            "{}: pairs are for a pairwise rubric, and {} scores single responses",
            names.join(", "),
            rubric.name
        )));
    }
    let mut items = spec.sampled(items.items, Grouping::Dialogues);
    let whole = spec.shard.map(|_| crate::data::select::set_digest(&items));
    if let Some(s) = spec.shard {
        items = s.select(items);
    }
    if items.is_empty() {
        nothing_to_do(&dir, spec.shard, whole.as_ref(), "dialogue", reporter)?;
        return Ok(Evaluated {
            dir,
            failed: Vec::new(),
        });
    }
    reporter.note(&format!(
        "{} items{} → {}",
        items.len(),
        spec.shard
            .map(|s| format!(" (shard {s})"))
            .unwrap_or_default(),
        dir.display()
    ));

    // Everything that can be checked is checked before any model loads: the settings, the
    // folders (they take new files), and existing results (locked by no other run, readable, of
    // this task, version, rubric and scorer).
    let (device, settings) = spec.judge.runtime.settings()?;
    let overwrite = spec.judge.run.overwrite;
    let first = Route::first(spec, &dir, naming)?;
    let translated = match &spec.translate {
        Some(t) => Some(TranslatedRoute::plan(t, &first, naming, reporter)?),
        None => None,
    };
    let _created = CreatedFolders::create(&dir)?;
    // Held from the checks to the last write: a second eval on this folder is refused at its
    // start, so no run reports on items another replaced.
    let _claim = crate::files::OutputClaim::folder(&dir)?;
    let _created_route = match &translated {
        Some(t) => Some(CreatedFolders::create(&t.route.dir)?),
        None => None,
    };
    first.preflight(overwrite)?;
    if let Some(t) = &translated {
        t.preflight(overwrite)?;
    }
    // The encoders and their baselines are resolved first: a setting that cannot work (an
    // encoder without a default layer, no baseline for --rescale) fails before the judge loads.
    let encoder = first.load_encoder(&device)?;
    let translated_encoder = match &translated {
        Some(t) => t.route.load_encoder(&device)?,
        None => None,
    };
    let judge = spec.judge.clone().load_on(&device, &settings)?;
    let translator = match &translated {
        Some(t) => t.load_model(spec, &device, &settings, reporter)?,
        None => None,
    };
    let against = spec.bertscore.as_ref().and_then(|b| b.against);
    let bertscore = bertscore_job(&encoder, against, &items);
    let translated_bertscore = bertscore_job(&translated_encoder, against, &items);
    // With the models loaded, the existing results are checked against the whole run before
    // anything is written: a refused run leaves the folders as they were.
    first.check(&judge, bertscore.as_ref(), overwrite)?;
    if let Some(t) = &translated {
        let model = translator.as_ref().unwrap_or(&judge.models[0]);
        t.check(model, &judge, translated_bertscore.as_ref(), overwrite)?;
    }
    crate::data::write_items(&dir.join(ITEMS), &items)?;
    if let (Some(s), Some(whole)) = (spec.shard, &whole) {
        super::shard_set::record(&dir, &s.to_string(), whole)?;
    }
    let (mut failed, results) =
        first.run(&judge, bertscore.as_ref(), &items, overwrite, reporter)?;
    let mut done = vec![(&first, results)];
    if let Some(t) = &translated {
        let model = translator.as_ref().unwrap_or(&judge.models[0]);
        match t.translate(model, &items, reporter)? {
            Ok(translated_items) => {
                let (f, results) = t.route.run(
                    &judge,
                    translated_bertscore.as_ref(),
                    &translated_items,
                    overwrite,
                    reporter,
                )?;
                failed.extend(f);
                done.push((&t.route, results));
            }
            Err(missing) => failed.extend(missing),
        }
    }
    drop(judge);
    match spec.shard {
        Some(s) => reporter.note(&format!(
            "shard {s} done; join the shards with `hyoka merge {}/shard-*-of-{} -o {}`",
            spec.output.display(),
            s.count,
            spec.output.display()
        )),
        None => {
            let mut summaries = Vec::new();
            for (route, results) in &done {
                let (written, summary) = scores_report(&route.dir, results, &spec.stats, reporter)?;
                write_all(&route.dir, written)?;
                summaries.push((*route, summary));
            }
            if let [(a, Some(sa)), (b, Some(sb))] = summaries.as_slice() {
                let same = b.same_rows(a);
                let table = crate::meta::routes::side_by_side(
                    &[(a.lang.as_str(), sa), (b.lang.as_str(), sb)],
                    &same,
                );
                let md = crate::meta::routes::markdown(&table);
                reporter.table(&format!("{md}\n"));
                let json = serde_json::to_string_pretty(&table).expect("routes serialise") + "\n";
                write_all(&dir, vec![("routes.md", md), ("routes.json", json)])?;
            }
        }
    }
    Ok(Evaluated { dir, failed })
}
