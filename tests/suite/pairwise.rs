//! Pairwise judging: verdict distributions in both orders against HF transformers on the test
//! judges (fixture: scripts/fixtures/make_pairwise_fixtures.py); the same bits whatever the
//! batch, the order of the pairs and which system is named first; Bradley–Terry strengths with
//! ties and their bootstrap intervals against scipy (scripts/fixtures/
//! make_pairwise_stats_fixtures.py); and `hyoka eval` end to end on examples/pairs-ja.jsonl.

use crate::common;

use hyoka::data::{Item, Origin, Pair, Pairing, Pairs, Turn, form_pairs};
use hyoka::judge::{JudgeSpec, LoadedJudge};
use hyoka::meta::pairwise::bootstrap_intervals;
use hyoka::meta::pairwise::davidson::{Outcome, fit};
use hyoka::model::{RuntimeOptions, RuntimeSettings};
use hyoka::results::verdicts::{PairVerdict, VerdictProbs};
use hyoka::results::{Body, Record};
use hyoka::rubric::Rubric;
use serde_json::Value;
use std::ops::ControlFlow;

fn fixture(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(common::fixtures().join(path)).unwrap()).unwrap()
}

pub(crate) fn item(context_id: &str, context: &str, system: &str, text: &str) -> Item {
    let turn = |speaker: &str, text: &str| Turn {
        speaker: speaker.into(),
        text: text.into(),
    };
    let mut it = hyoka::prompt::sample_item();
    it.id = format!("{context_id}-{system}");
    it.context = vec![turn("U", context)];
    it.response = turn("S", text);
    it.reference = Vec::new();
    it.context_id = Some(context_id.into());
    it.system = Some(system.into());
    it
}

/// The fixture's pairs as items: system "a" wrote `first`, "b" `second`.
fn fixture_items(cases: &[Value]) -> Vec<Item> {
    cases
        .iter()
        .flat_map(|c| {
            let s = |k: &str| c[k].as_str().unwrap();
            [
                item(s("context_id"), s("context"), "a", s("first")),
                item(s("context_id"), s("context"), "b", s("second")),
            ]
        })
        .collect()
}

fn judge(model: &std::path::Path, rubric: Rubric, batch_tokens: usize) -> LoadedJudge {
    let mut spec = JudgeSpec {
        models: vec![model.to_string_lossy().into_owned()],
        rubric,
        rubric_source: "test".into(),
        runtime: RuntimeOptions::default(),
        sha256: None,
        run: Default::default(),
    };
    spec.run.batch_tokens = batch_tokens;
    spec.load_on(&common::device(), &RuntimeSettings::new(common::dtype()))
        .unwrap()
}

fn verdicts(judge: &LoadedJudge, pairs: &Pairs) -> Vec<(String, Vec<(String, PairVerdict)>)> {
    let (summary, _, records) = judge
        .compare_records(pairs, &mut |_, _| ControlFlow::Continue(()))
        .unwrap();
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
    records
        .into_iter()
        .map(|r: Record| match r.body {
            Ok(Body::Compare(c)) => (r.id, c.verdicts),
            other => panic!("not a pairwise record: {other:?}"),
        })
        .collect()
}

/// Each order's probabilities as the fixture's verdict scores 0 (tie), 1, 2 say them.
fn shown(p: &VerdictProbs, swapped: bool) -> [f64; 3] {
    if swapped {
        [p.tie, p.second, p.first]
    } else {
        [p.tie, p.first, p.second]
    }
}

/// The fixture's rubric: without the tail after the responses, or with it.
fn fixture_rubric(fx: &Value, tail: bool) -> Rubric {
    let key = if tail { "rubric_with_tail" } else { "rubric" };
    Rubric::from_toml(fx[key].as_str().unwrap(), key).unwrap()
}

/// How many rows `layout_pair` lays the pair out in.
fn rows(judge: &LoadedJudge, pair: &Pair) -> usize {
    let m = &judge.models[0];
    let builder = hyoka::prompt::PromptBuilder::new(&judge.rubric).unwrap();
    let fit = hyoka::model::tokenizer::TextFit::new(&m.tokenizer, 8192);
    hyoka::judge::layout::layout_pair(&builder, &m.chat_template, &m.tokenizer, pair, &fit)
        .unwrap()
        .len()
}

/// Both layouts of a pair — one row for the two orders (the rubric without a tail after the
/// responses), one row per order (with it) — against transformers.
#[test]
fn verdict_distributions_match_transformers_in_both_orders() {
    let fx = fixture("judge/pairwise.json");
    let tol = common::tol(1e-4, 0.05, 0.01);
    for m in fx["models"].as_array().unwrap() {
        let Some(path) = common::test_model(m["model"].as_str().unwrap()) else {
            return;
        };
        let tail = m["tail"].as_bool().unwrap();
        let cases = m["cases"].as_array().unwrap();
        let items = fixture_items(cases);
        let pairs = form_pairs(&items, Origin::Memory, &Pairing::All).unwrap();
        let judge = judge(&path, fixture_rubric(&fx, tail), 4096);
        // With the tail every pair takes two rows; without, short pairs take one (a pair of
        // long responses may still take two: the rest after the first response repeats per
        // aspect).
        let counts: Vec<usize> = pairs.pairs.iter().map(|p| rows(&judge, p)).collect();
        if tail {
            assert!(counts.iter().all(|&n| n == 2), "{counts:?}");
        } else {
            assert!(counts.contains(&1), "{counts:?}");
        }
        let got = verdicts(&judge, &pairs);
        let mut worst = 0f64;
        for case in cases {
            let id = format!("{}|a|b", case["context_id"].as_str().unwrap());
            let (_, aspects) = got.iter().find(|(i, _)| *i == id).expect("pair judged");
            for ((_, v), name) in aspects.iter().zip(["Overall", "Fluency"]) {
                for (key, probs, swapped) in [
                    ("first_shown_first", &v.first_shown_first, false),
                    ("second_shown_first", &v.second_shown_first, true),
                ] {
                    let want = &case[key][name];
                    let dist: Vec<f64> = want["distribution"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().unwrap())
                        .collect();
                    for (g, w) in shown(probs, swapped).iter().zip(&dist) {
                        worst = worst.max((g - w).abs());
                        assert!(
                            (g - w).abs() <= tol,
                            "{}: {id} {name} {key}: {:?} vs {dist:?}",
                            m["model"],
                            shown(probs, swapped)
                        );
                    }
                    let off = want["off_scale"].as_f64().unwrap();
                    assert!((probs.off_scale - off).abs() <= tol, "{id} {key} off_scale");
                }
            }
        }
        eprintln!("{} (tail {tail}): worst |Δp| {worst:.2e}", m["model"]);
    }
}

/// On the CPU a pair's verdicts are the same bits alone or batched, in any order of the pairs,
/// and judging (b, a) gives exactly (a, b)'s verdicts with the systems exchanged — both orders
/// are always read, so naming one system first changes nothing.
#[test]
fn verdicts_are_the_same_bits_in_any_batch_order_and_naming() {
    if !common::device().is_cpu() {
        return;
    }
    let fx = fixture("judge/pairwise.json");
    for tail in [false, true] {
        same_bits(&fx, tail);
    }
}

fn same_bits(fx: &Value, tail: bool) {
    let m = &fx["models"][0];
    let Some(path) = common::test_model(m["model"].as_str().unwrap()) else {
        return;
    };
    let rubric = fixture_rubric(fx, tail);
    let items = fixture_items(m["cases"].as_array().unwrap());
    let pairs = form_pairs(&items, Origin::Memory, &Pairing::All).unwrap();
    let together = verdicts(&judge(&path, rubric.clone(), 1 << 20), &pairs);
    // One pair per batch, the pairs reversed.
    let mut reversed = pairs.clone();
    reversed.pairs.reverse();
    let mut alone = verdicts(&judge(&path, rubric.clone(), 1), &reversed);
    alone.reverse();
    assert_eq!(together, alone);
    // Every pair with its systems exchanged.
    let mut named_b_first = pairs.clone();
    named_b_first.pairs = pairs
        .pairs
        .iter()
        .map(|p| Pair {
            id: format!("{}|b|a", p.context_id),
            context_id: p.context_id.clone(),
            first: p.second.clone(),
            second: p.first.clone(),
        })
        .collect();
    let swapped = verdicts(&judge(&path, rubric, 4096), &named_b_first);
    for ((_, ab), (_, ba)) in together.iter().zip(&swapped) {
        for ((_, x), (_, y)) in ab.iter().zip(ba) {
            assert_eq!(*y, x.swapped());
            assert_eq!(
                y.preference().first.to_bits(),
                x.preference().second.to_bits()
            );
        }
    }
}

fn outcomes(v: &Value) -> Vec<Vec<Outcome>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c.as_array()
                .unwrap()
                .iter()
                .map(|o| Outcome {
                    i: o[0].as_u64().unwrap() as usize,
                    j: o[1].as_u64().unwrap() as usize,
                    wins_i: o[2].as_f64().unwrap(),
                    wins_j: o[3].as_f64().unwrap(),
                    ties: o[4].as_f64().unwrap(),
                })
                .collect()
        })
        .collect()
}

#[test]
fn strengths_and_intervals_match_scipy() {
    let fx = fixture("meta/pairwise_stats.json");
    for case in fx["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let systems = case["systems"].as_u64().unwrap() as usize;
        let by_context = outcomes(&case["by_context"]);
        let all: Vec<Outcome> = by_context.iter().flatten().copied().collect();
        let f = fit(systems, &all).unwrap();
        let want: Vec<f64> = case["strengths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        for (g, w) in f.strengths.iter().zip(&want) {
            assert!(
                (g - w).abs() < 1e-6,
                "{name}: {:?} vs {want:?}",
                f.strengths
            );
        }
        assert!(
            (f.tie - case["tie"].as_f64().unwrap()).abs() < 1e-6,
            "{name}: ν {}",
            f.tie
        );
        let resamples: Vec<Vec<usize>> = case["resamples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_u64().unwrap() as usize)
                    .collect()
            })
            .collect();
        let (intervals, failed) = bootstrap_intervals(
            systems,
            &by_context,
            &resamples,
            case["level"].as_f64().unwrap(),
        );
        assert_eq!(failed, 0, "{name}");
        for (got, want) in intervals.iter().zip(case["intervals"].as_array().unwrap()) {
            let got = got.expect("an interval");
            for (g, w) in got.iter().zip(want.as_array().unwrap()) {
                assert!(
                    (g - w.as_f64().unwrap()).abs() < 1e-6,
                    "{name}: {got:?} vs {want}"
                );
            }
        }
    }
}

fn hyoka(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hyoka"))
        .args(args)
        .output()
        .unwrap()
}

/// `hyoka eval` with a built-in pairwise rubric on the shipped example: every pair judged in
/// both orders, the ranking with intervals in summary.json and report.html, human preferences
/// from the items' breakdown ratings counted as the items say; a rerun finds everything done;
/// two shards merged give the same summary as the whole.
#[test]
fn eval_with_a_pairwise_rubric_ranks_the_systems() {
    let Some(model) = common::test_model("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eval");
    let input = common::repo_root().join("examples/pairs-ja.jsonl");
    let eval = |out: &std::path::Path, shard: Option<&str>| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["eval".as_ref(), "-i".as_ref(), input.as_ref()];
        args.extend(["--rubric", "breakdown-pair-ja", "--model"].map(std::ffi::OsStr::new));
        args.push(model.as_ref());
        args.extend(["--bootstrap", "200", "-o"].map(std::ffi::OsStr::new));
        args.push(out.as_ref());
        if let Some(s) = shard {
            args.extend(["--shard", s].map(std::ffi::OsStr::new));
        }
        hyoka(&args)
    };
    let first = eval(&out, None);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let lines = std::fs::read_to_string(out.join("pairs.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 24);
    let summary_text = std::fs::read_to_string(out.join("summary.json")).unwrap();
    let summary: Value = serde_json::from_str(&summary_text).unwrap();
    let aspect = &summary["aspects"][0];
    assert_eq!(aspect["aspect"], "breakdown");
    let systems = aspect["systems"].as_array().unwrap();
    assert_eq!(systems.len(), 3);
    for s in systems {
        let (lo, hi) = (
            s["interval"][0].as_f64().unwrap(),
            s["interval"][1].as_f64().unwrap(),
        );
        let strength = s["strength"].as_f64().unwrap();
        assert!(lo <= strength && strength <= hi, "{s}");
        assert_eq!(s["comparisons"], 16);
    }
    // Raw beside length-controlled strengths (the systems' responses differ in length).
    let controlled = &aspect["style_controlled"];
    assert_eq!(controlled["covariates"][0], "length", "{controlled}");
    assert_eq!(controlled["systems"].as_array().unwrap().len(), 3);
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("Style-controlled"), "{md}");
    // Mean breakdown ratings: careful 1.0, terse 0.667, offtopic 0.167. Pairs name the lesser
    // system first: careful|offtopic and careful|terse (first preferred), offtopic|terse
    // (second preferred), in each of the 8 contexts.
    let human = &aspect["human"][0];
    assert_eq!(human["key"], "breakdown");
    assert_eq!(human["pairs"], 24);
    assert_eq!(human["human_verdicts"], serde_json::json!([16, 8, 0]));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("ranking: breakdown"));
    let again = eval(&out, None);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("judged 0 pairs"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(out.join("pairs.jsonl")).unwrap(),
        lines
    );

    // Two shards of whole contexts, merged: the same lines and the same summary.
    let sharded = tmp.path().join("sharded");
    for k in ["1/2", "2/2"] {
        let run = eval(&sharded, Some(k));
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let merged = tmp.path().join("merged");
    let shard = |k: usize| sharded.join(format!("shard-{k}-of-2"));
    let (one, two) = (shard(1), shard(2));
    let merge = hyoka(&[
        "merge".as_ref(),
        one.as_ref(),
        two.as_ref(),
        "--bootstrap".as_ref(),
        "200".as_ref(),
        "-o".as_ref(),
        merged.as_ref(),
    ]);
    assert!(
        merge.status.success(),
        "{}",
        String::from_utf8_lossy(&merge.stderr)
    );
    let sorted = |text: String| {
        let mut v: Vec<String> = text.lines().map(String::from).collect();
        v.sort();
        v
    };
    assert_eq!(
        sorted(std::fs::read_to_string(merged.join("pairs.jsonl")).unwrap()),
        sorted(lines)
    );
    assert_eq!(
        std::fs::read_to_string(merged.join("summary.json")).unwrap(),
        summary_text
    );
    // Each system against a baseline: 2 pairs in each of the 8 contexts, the baseline second.
    let against = tmp.path().join("baseline");
    let mut args: Vec<&std::ffi::OsStr> = vec!["eval".as_ref(), "-i".as_ref(), input.as_ref()];
    args.extend(
        [
            "--rubric",
            "breakdown-pair-ja",
            "--baseline",
            "terse",
            "--model",
        ]
        .map(std::ffi::OsStr::new),
    );
    args.extend([
        model.as_os_str(),
        "--bootstrap".as_ref(),
        "50".as_ref(),
        "-o".as_ref(),
    ]);
    args.push(against.as_ref());
    let run = hyoka(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let ids: Vec<String> = std::fs::read_to_string(against.join("pairs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids.len(), 16);
    assert!(ids.iter().all(|id| id.ends_with("|terse")), "{ids:?}");
    // A baseline for a rubric that scores single responses is refused before anything loads.
    let absolute = hyoka(&[
        "eval".as_ref(),
        "-i".as_ref(),
        input.as_ref(),
        "--rubric".as_ref(),
        "breakdown3-ja".as_ref(),
        "--baseline".as_ref(),
        "terse".as_ref(),
        "-o".as_ref(),
        tmp.path().join("refused").as_ref(),
    ]);
    assert_eq!(absolute.status.code(), Some(2));
    assert!(!tmp.path().join("refused").exists());

    // Settings a pairwise run would not use are refused, not ignored.
    for extra in [["--fit-w", ""], ["--bertscore-model", "e5"]] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["eval".as_ref(), "-i".as_ref(), input.as_ref()];
        args.extend(["--rubric", "breakdown-pair-ja", "-o"].map(std::ffi::OsStr::new));
        args.push(tmp.path().join("unused").into_os_string().leak());
        args.extend(
            extra
                .iter()
                .filter(|a| !a.is_empty())
                .map(std::ffi::OsStr::new),
        );
        let run = hyoka(&args);
        assert_eq!(run.status.code(), Some(2), "{extra:?}");
        assert!(String::from_utf8_lossy(&run.stderr).contains(extra[0]));
    }
    let meta = hyoka(&[
        "meta".as_ref(),
        "-i".as_ref(),
        input.as_ref(),
        "-s".as_ref(),
        out.join("pairs.jsonl").as_ref(),
        "--calibrate".as_ref(),
    ]);
    assert_eq!(meta.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&meta.stderr)
            .contains("--calibrate: for judge and BERTScore results")
    );

    // A shard whose lines are missing is named, and nothing is written.
    std::fs::write(two.join("pairs.jsonl"), "").unwrap();
    let partial = tmp.path().join("partial");
    let merge = hyoka(&[
        "merge".as_ref(),
        one.as_ref(),
        two.as_ref(),
        "-o".as_ref(),
        partial.as_ref(),
    ]);
    assert_eq!(merge.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&merge.stderr).contains("pairs have no line"));
    assert!(!partial.join("summary.json").exists());
}

/// json rubrics compare too: each order writes its own object (a reason, then the verdicts),
/// both orders decoded in one batch; the verdicts are read from the distributions there, the
/// same bits whichever system the pair names first.
#[test]
fn json_rubrics_write_both_orders() {
    if !common::device().is_cpu() {
        return;
    }
    let fx = fixture("judge/pairwise.json");
    let m = &fx["models"][0];
    let Some(path) = common::test_model(m["model"].as_str().unwrap()) else {
        return;
    };
    let text = fx["rubric"]
        .as_str()
        .unwrap()
        .replace("output = \"score\"", "output = \"json\"")
        .replace("answer = \"{{ aspect.name }}: \"", "answer = \"\"")
        .replace(
            "[pairwise]",
            "[json]\nreason_key = \"reason\"\nreason_max_tokens = 6\n\n[pairwise]",
        );
    let rubric = Rubric::from_toml(&text, "json").unwrap();
    let items = fixture_items(&m["cases"].as_array().unwrap()[..2]);
    let pairs = form_pairs(&items, Origin::Memory, &Pairing::All).unwrap();
    let judge = judge(&path, rubric, 4096);
    let (_, _, records) = judge
        .compare_records(&pairs, &mut |_, _| ControlFlow::Continue(()))
        .unwrap();
    let mut named_b_first = pairs.clone();
    for p in &mut named_b_first.pairs {
        std::mem::swap(&mut p.first, &mut p.second);
        p.id = format!("{}|b|a", p.context_id);
    }
    let (_, _, swapped) = judge
        .compare_records(&named_b_first, &mut |_, _| ControlFlow::Continue(()))
        .unwrap();
    for (r, s) in records.iter().zip(&swapped) {
        let (Ok(Body::Compare(c)), Ok(Body::Compare(d))) = (&r.body, &s.body) else {
            panic!("not pairwise records: {r:?}");
        };
        assert_eq!(c.answers.len(), 2, "an object per order");
        for a in &c.answers {
            let object: Value = serde_json::from_str(&a.text).expect("the object parses");
            for key in ["Overall", "Fluency"] {
                assert!(object[key].is_i64(), "{}", a.text);
            }
        }
        for ((_, v), (_, w)) in c.verdicts.iter().zip(&d.verdicts) {
            for p in [v.first_shown_first, v.second_shown_first] {
                assert!((p.first + p.second + p.tie - 1.0).abs() < 1e-9);
            }
            assert_eq!(*w, v.swapped());
        }
        assert_eq!(d.answers[0], c.answers[1]);
    }
}

/// Two contexts of systems a and b with `overall` ratings (c1: a 1.0, b 0.0; c2: 0.5 each) and
/// hand-made verdicts: c1 a wins in both orders (consistent); c2 each order prefers the response
/// shown first (inconsistent), averaging to a tie.
pub(crate) fn hand_made_verdicts() -> (Vec<Item>, Vec<(usize, Record)>) {
    let probs = |first: f64, second: f64, tie: f64| VerdictProbs {
        first,
        second,
        tie,
        off_scale: 0.0,
    };
    let mut items = Vec::new();
    for (c, ratings) in [("c1", [1.0, 0.0]), ("c2", [0.5, 0.5])] {
        for (system, r) in ["a", "b"].iter().zip(ratings) {
            let mut it = item(c, "context", system, &format!("{c} {system}"));
            it.human
                .insert("overall".into(), hyoka::data::HumanRating::Single(r));
            items.push(it);
        }
    }
    let provenance = compare_provenance(Default::default());
    let verdicts = [
        (probs(0.8, 0.1, 0.1), probs(0.6, 0.3, 0.1)),
        (probs(0.7, 0.2, 0.1), probs(0.2, 0.7, 0.1)),
    ];
    let records: Vec<(usize, Record)> = ["c1", "c2"]
        .iter()
        .zip(verdicts)
        .enumerate()
        .map(|(n, (c, (x, y)))| {
            let verdict = PairVerdict {
                first_shown_first: x,
                second_shown_first: y,
            };
            (n + 1, compare_record(c, "a", "b", verdict, &provenance))
        })
        .collect();
    (items, records)
}

/// The provenance of a hand-made `hyoka compare` run with these settings.
pub(crate) fn compare_provenance(
    settings: serde_json::Map<String, Value>,
) -> std::sync::Arc<hyoka::results::Provenance> {
    use hyoka::results::{Provenance, RubricId, Task};
    std::sync::Arc::new(Provenance {
        hyoka: "test".into(),
        task: Task::Compare,
        rubric: Some(RubricId {
            name: "test".into(),
            source: "test".into(),
            hash: "h".into(),
            aspects: Vec::new(),
        }),
        models: Vec::new(),
        dtype: "f32".into(),
        device: "cpu".into(),
        settings,
    })
}

/// A hand-made pairwise results line: the verdict on aspect `overall` of `first` against
/// `second` in `context`.
pub(crate) fn compare_record(
    context: &str,
    first: &str,
    second: &str,
    verdict: PairVerdict,
    provenance: &std::sync::Arc<hyoka::results::Provenance>,
) -> Record {
    Record {
        id: format!("{context}|{first}|{second}"),
        input: None,
        body: Ok(Body::Compare(hyoka::results::CompareRecord {
            context_id: context.to_string(),
            first: first.into(),
            second: second.into(),
            verdicts: vec![("overall".into(), verdict)],
            answers: Vec::new(),
            judges: Vec::new(),
            dropped_turns: 0,
            truncated: false,
        })),
        not_applicable: false,
        provenance: provenance.clone(),
    }
}

/// `hand_made_verdicts`' responses given different lengths: in c1 the longer is a's (which
/// wins in both orders), in c2 b's (the verdict a tie).
pub(crate) fn with_different_lengths(items: &mut [Item]) {
    for (item, text) in items
        .iter_mut()
        .zip(["長い方の応答です", "短い", "x", "yy"])
    {
        item.response.text = text.into();
    }
}

/// The summary of hand-made verdicts, counted by hand: wins, ties and losses by the averaged
/// verdict, expected win rates, consistency, and agreement with preferences given per pair
/// (each rater's vote counted) beside those derived from ratings.
#[test]
fn a_summary_of_hand_made_verdicts_counts_as_by_hand() {
    use hyoka::meta::pairwise::{PairwiseOptions, Preferences, join, summarize};
    let (items, records) = hand_made_verdicts();
    let opts = PairwiseOptions {
        bootstrap: 0,
        ..PairwiseOptions::default()
    };
    let mut frame = join(&items, records.clone(), std::path::Path::new("pairs.jsonl")).unwrap();
    let s = summarize(&frame, &opts);
    let a = &s.aspects[0];
    assert_eq!((a.pairs, a.consistency), (2, 0.5));
    // Position bias: c1 (0.7 + (−0.3)) / 2 = 0.2; c2 (0.5 + 0.5) / 2 = 0.5; mean 0.35.
    assert!((a.position_bias - 0.35).abs() < 1e-12);
    let row = |name: &str| a.systems.iter().find(|r| r.system == name).unwrap();
    assert_eq!((row("a").wins, row("a").ties, row("a").losses), (1, 1, 0));
    assert_eq!((row("b").wins, row("b").ties, row("b").losses), (0, 1, 1));
    assert_eq!(row("a").win_rate, 0.75);
    // Expected win rate of a: c1 0.7 + 0.1/2 = 0.75, c2 0.45 + 0.1/2 = 0.5; mean 0.625.
    assert!((row("a").expected_win_rate - 0.625).abs() < 1e-12);
    assert_eq!(a.systems[0].system, "a", "the stronger first");
    // From the ratings: c1 a (1.0 > 0.0), c2 a tie (0.5 = 0.5) — the judge says a, then tie.
    let h = &a.human[0];
    assert_eq!((h.source, h.pairs), ("ratings", 2));
    assert_eq!(h.agreement_with_ties, Some(1.0));
    assert_eq!(h.human_verdicts, [1, 0, 1]);
    // Preferences given per pair: c1 two raters (a, tie), c2 given the other way round (b
    // preferred, i.e. "first" as written with b first).
    let lines = [
        (
            1,
            r#"{"context_id": "c1", "first": "a", "second": "b", "human": {"overall": ["first", "tie"]}}"#,
        ),
        (
            2,
            r#"{"context_id": "c2", "first": "b", "second": "a", "human": {"overall": "first"}}"#,
        ),
    ];
    frame.preferences = Preferences::parse(&lines, std::path::Path::new("prefs.jsonl")).unwrap();
    let s = summarize(&frame, &opts);
    let h = &s.aspects[0].human[0];
    assert_eq!((h.source, h.pairs), ("preferences", 3));
    // Judge a/a/tie against votes a/tie/b: one of three agree; without ties only (a, a).
    assert!((h.agreement_with_ties.unwrap() - 1.0 / 3.0).abs() < 1e-15);
    assert_eq!(
        (h.agreement_without_ties, h.pairs_without_ties),
        (Some(1.0), 1)
    );
    assert_eq!(h.human_verdicts, [1, 1, 1]);
    // b's human win rate over the votes: (0 + 0.5 + 1) / 3.
    let b = s.aspects[0]
        .systems
        .iter()
        .find(|r| r.system == "b")
        .unwrap();
    assert!((b.human["overall"] - 0.5).abs() < 1e-15);

    // Intervals resample contexts: over one context every resample is that context, a
    // zero-width interval that would say nothing; there is none (and the summary says why).
    let boot = PairwiseOptions {
        bootstrap: 200,
        ..PairwiseOptions::default()
    };
    let both = summarize(&frame, &boot);
    assert!(both.aspects[0].systems.iter().all(|r| r.interval.is_some()));
    let one = join(
        &items,
        records[..1].to_vec(),
        std::path::Path::new("pairs.jsonl"),
    )
    .unwrap();
    let s = summarize(&one, &boot);
    assert!(s.aspects[0].systems.iter().all(|r| r.strength.is_some()));
    assert!(s.aspects[0].systems.iter().all(|r| r.interval.is_none()));
    assert!(hyoka::meta::pairwise::markdown(&s).contains("One context"));
}
