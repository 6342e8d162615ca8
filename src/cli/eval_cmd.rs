//! `hyoka eval` (items → judge + BERTScore → meta-evaluation → report, in one output folder) and
//! `hyoka merge` (shards' folders → one folder and its report).

use super::eval_files::{
    CreatedFolders, EvalArgs, ITEMS, judge_spec, nothing_to_do, read_or_import,
    refuse_input_as_output, report, write_all,
};
use super::eval_routes::{Route, Translated, bertscore_job};
use crate::data;
use crate::data::select::{Grouping, Shard};
use anyhow::Context;
use std::process::ExitCode;

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let shard = match args.shard {
        Some(s) => Some(s),
        None => Shard::from_slurm(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?,
    };
    let (rubric, source) = crate::prompt::resolve_rubric(&args.rubric)?;
    args.stats
        .options()
        .breakdown
        .check_aspects(rubric.aspects.iter().map(|a| a.key.as_str()))?;
    let dir = match shard {
        Some(s) => args.output.join(s.folder_name()),
        None => args.output.clone(),
    };
    if let Some(input) = &args.input {
        refuse_input_as_output(&dir, input)?;
    }
    let routes_flags: Vec<&str> = [
        ("--likelihood", !args.likelihood.is_empty()),
        ("--translate", args.translate.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if !routes_flags.is_empty() && (rubric.pairwise.is_some() || shard.is_some()) {
        return Err(super::exit::usage(format!(
            "{}: not with a pairwise rubric or --shard (run `hyoka likelihood` or `hyoka translate` on the items, or on a merged folder's)",
            routes_flags.join(", ")
        )));
    }
    let translate_flags = [
        args.translate_rubric.is_some(),
        args.translate_prompt.is_some(),
        args.translate_model.is_some(),
        args.translate_bertscore_model.is_some(),
        args.translate_layer.is_some(),
        args.translate_keep_unfinished,
    ];
    if args.translate.is_none() && translate_flags.iter().any(|&f| f) {
        return Err(super::exit::usage(
            "--translate-rubric, --translate-prompt, --translate-model, --translate-bertscore-model, --translate-layer and --translate-keep-unfinished are for --translate LANG",
        ));
    }
    if rubric.pairwise.is_some() {
        return super::eval_pairwise::run_pairwise(&args, rubric, source, &dir, shard);
    }
    if args.baseline.is_some() || args.stats.preferences.is_some() || args.stats.tie_margin != 0.0 {
        return Err(super::exit::usage(format!(
            "--baseline, --preferences, --tie-margin: pairs are for a pairwise rubric, and {} scores single responses",
            rubric.name
        )));
    }
    let mut items = read_or_import(&args, Grouping::Dialogues)?;
    let whole = shard.map(|_| crate::data::select::set_digest(&items));
    if let Some(s) = shard {
        items = s.select(items);
    }
    if items.is_empty() {
        nothing_to_do(&dir, shard, whole.as_ref(), "dialogue")?;
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "{} items{} → {}",
        items.len(),
        shard.map(|s| format!(" (shard {s})")).unwrap_or_default(),
        dir.display()
    );

    // Everything that can be checked is checked before any model loads: the settings, the
    // folders (they take new files), and existing results (locked by no other run, readable, of
    // this task, version, rubric and scorer).
    let (device, settings) = args.runtime.options().settings()?;
    let first = Route {
        lang: args
            .lang
            .clone()
            .or(rubric.language.clone())
            .unwrap_or_else(|| "ja".into()),
        translated: false,
        dir: dir.clone(),
        rubric,
        rubric_source: source,
        bertscore_model: args.bertscore_model.clone(),
        layer: args.layer,
        likelihood: Route::scorers(&args.likelihood)?,
    };
    let translated = match &args.translate {
        Some(to) => Some(Translated::plan(&args, &first, to)?),
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
    first.preflight(&args)?;
    if let Some(t) = &translated {
        t.preflight(&args)?;
    }
    // The encoders and their baselines are resolved first: a setting that cannot work (an
    // encoder without a default layer, no baseline for --rescale) fails before the judge loads.
    let encoder = first.load_encoder(&args, &device)?;
    let translated_encoder = match &translated {
        Some(t) => t.route.load_encoder(&args, &device)?,
        None => None,
    };
    let judge = judge_spec(&args, first.rubric.clone(), first.rubric_source.clone())
        .load_on(&device, &settings)?;
    let translator = match &translated {
        Some(t) => t.load_model(&args, &device, &settings)?,
        None => None,
    };
    let bertscore = bertscore_job(&encoder, args.against, &items);
    let translated_bertscore = bertscore_job(&translated_encoder, args.against, &items);
    // With the models loaded, the existing results are checked against the whole run before
    // anything is written: a refused run leaves the folders as they were.
    first.check(&judge, bertscore.as_ref(), args.overwrite)?;
    if let Some(t) = &translated {
        let model = translator.as_ref().unwrap_or(&judge.models[0]);
        t.check(model, &judge, translated_bertscore.as_ref(), args.overwrite)?;
    }
    data::write_items(&dir.join(ITEMS), &items)?;
    if let (Some(s), Some(whole)) = (shard, &whole) {
        super::shard_set::record(&dir, &s.to_string(), whole)?;
    }
    let (mut failed, results) = first.run(&judge, bertscore.as_ref(), &items, args.overwrite)?;
    let mut routes = vec![(&first, results)];
    if let Some(t) = &translated {
        let model = translator.as_ref().unwrap_or(&judge.models[0]);
        match t.translate(model, &items)? {
            Ok(translated_items) => {
                let (f, results) = t.route.run(
                    &judge,
                    translated_bertscore.as_ref(),
                    &translated_items,
                    args.overwrite,
                )?;
                failed.extend(f);
                routes.push((&t.route, results));
            }
            Err(missing) => failed.extend(missing),
        }
    }
    drop(judge);
    match shard {
        Some(s) => eprintln!(
            "shard {s} done; join the shards with `hyoka merge {}/shard-*-of-{} -o {}`",
            args.output.display(),
            s.count,
            args.output.display()
        ),
        None => {
            let mut summaries = Vec::new();
            for (route, results) in &routes {
                let (written, summary) = report(&route.dir, results, &args.stats)?;
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
                println!("{md}");
                let json = serde_json::to_string_pretty(&table).context("routes as JSON")? + "\n";
                write_all(&dir, vec![("routes.md", md), ("routes.json", json)])?;
            }
        }
    }
    Ok(super::exit::finish(&failed, 0))
}
