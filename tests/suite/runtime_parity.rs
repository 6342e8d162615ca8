//! The runtime against HF transformers on tiny random-weight models of every architecture
//! (fixtures: scripts/fixtures/make_runtime_fixtures.py): every position's logits, alone and in padded
//! batches, with and without a shared prefix.

use crate::common;

use candle_core::Tensor;
use hyoka::model::attention::plan::AttentionPlan;
use hyoka::model::decoder::transformer::ATTENTION_ELEMENTS;
use hyoka::model::load_safetensors_dir;
use hyoka::model::{Batch, KvCache, Products, Row, Transformer};

const ARCHS: [&str; 6] = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"];
/// Logit tolerance against transformers in f32 (the fixtures' logits span about ±1 on
/// these tiny random models).
fn tol() -> f32 {
    common::tol(1e-4, BF16_TOL, F16_TOL) as f32
}
const BF16_TOL: f64 = 0.05;
const F16_TOL: f64 = 0.01;

struct Case {
    ids: Vec<u32>,
    /// Expected logits of the last `logits.len()` positions (all of them for short prompts).
    logits: Vec<Vec<f32>>,
}

impl Case {
    fn first(&self) -> usize {
        self.ids.len() - self.logits.len()
    }
}

fn load(arch: &str) -> (Transformer, Vec<Case>) {
    load_with(arch, false)
}

fn load_with(arch: &str, fused: bool) -> (Transformer, Vec<Case>) {
    let dir = common::tiny_model(arch);
    let mut model =
        load_safetensors_dir(&dir, common::dtype(), &common::device(), Default::default()).unwrap();
    model.set_fused_attention(fused.then_some(1));
    let cases: Vec<Case> = common::tiny_cases(arch)
        .into_iter()
        .map(|(ids, logits)| Case { ids, logits })
        .collect();
    assert!(cases.len() >= 6);
    (model, cases)
}

/// `got[first + i]` against `expected[i]` for every i, within tol(); the worst difference.
fn assert_close(got: &[Vec<f32>], expected: &[Vec<f32>], first: usize, what: &str) -> f32 {
    let mut worst = 0f32;
    for (i, e) in expected.iter().enumerate() {
        let d = max_diff(&got[first + i], e);
        worst = worst.max(d);
        assert!(d <= tol(), "{what} position {}: max |diff| {d}", first + i);
    }
    worst
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Logits of every position of every row.
fn run(model: &Transformer, rows: &[Vec<u32>], prefix: Option<&[u32]>) -> Vec<Vec<Vec<f32>>> {
    let p = prefix.map(|ids| model.prefix(ids).unwrap());
    let batch = Batch::new(rows, p.as_ref().map_or(0, |p| p.len), model.device()).unwrap();
    let hidden = model.forward(&batch, p.as_ref()).unwrap();
    rows.iter()
        .enumerate()
        .map(|(r, row)| {
            let at: Vec<(usize, usize)> = (0..row.len()).map(|i| (r, i)).collect();
            model
                .logits_at(&hidden, &at, None)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
        })
        .collect()
}

#[test]
fn every_architecture_matches_transformers_alone_and_batched() {
    alone_and_batched(false);
}

fn alone_and_batched(fused: bool) {
    for arch in ARCHS {
        let (model, cases) = load_with(arch, fused);
        // One prompt at a time.
        for (n, case) in cases.iter().enumerate().take(4) {
            let got = run(&model, std::slice::from_ref(&case.ids), None);
            assert_close(&got[0], &case.logits, 0, &format!("{arch}: prompt {n}"));
        }
        // All prompts in one right-padded batch (lengths 7, 1, 23, 12).
        let rows: Vec<Vec<u32>> = cases[..4].iter().map(|c| c.ids.clone()).collect();
        let got = run(&model, &rows, None);
        let mut worst = 0f32;
        for (n, case) in cases.iter().enumerate().take(4) {
            let what = format!("{arch}: batched prompt {n}");
            worst = worst.max(assert_close(&got[n], &case.logits, 0, &what));
        }
        eprintln!("{arch}: worst |Δlogit| batched vs transformers {worst:.2e}");
    }
}

#[test]
fn shared_prefix_equals_recomputation() {
    shared_prefix(false);
}

fn shared_prefix(fused: bool) {
    for arch in ARCHS {
        let (model, cases) = load_with(arch, fused);
        // The longest prompt split after 9 tokens: the prefix is computed once, and two rows
        // continue it (the rest of the prompt, and a shorter continuation).
        let full = &cases[2];
        let (head, tail) = full.ids.split_at(9);
        let short_tail = tail[..3].to_vec();
        let got = run(&model, &[tail.to_vec(), short_tail.clone()], Some(head));
        // Row r's position i is the full prompt's position 9 + i.
        for (r, row) in got.iter().enumerate() {
            assert_close(
                row,
                &full.logits[9..9 + row.len()],
                0,
                &format!("{arch}: prefix row {r} (+9)"),
            );
        }
    }
}

#[test]
fn restricted_lm_head_equals_full_rows() {
    let (model, cases) = load("qwen2");
    let batch = Batch::new(&[cases[0].ids.clone()], 0, model.device()).unwrap();
    let hidden = model.forward(&batch, None).unwrap();
    let last = cases[0].ids.len() - 1;
    let rows = Tensor::new(&[5u32, 17, 3], model.device()).unwrap();
    let some = model
        .logits_at(&hidden, &[(0, last)], Some(&rows))
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let expect = &cases[0].logits[last];
    assert!(max_diff(&some[0], &[expect[5], expect[17], expect[3]]) <= tol());
}

#[test]
fn a_batch_mixing_5_and_2000_tokens_is_correct() {
    five_and_2000_tokens(false);
}

fn five_and_2000_tokens(fused: bool) {
    for arch in ARCHS {
        let (model, cases) = load_with(arch, fused);
        let (short, long) = (&cases[4], &cases[5]);
        assert_eq!((short.ids.len(), long.ids.len()), (5, 2000));
        let got = run(&model, &[short.ids.clone(), long.ids.clone()], None);
        assert_close(&got[0], &short.logits, 0, &format!("{arch}: 5-token row"));
        assert_close(
            &got[1],
            &long.logits,
            long.first(),
            &format!("{arch}: 2000-token row"),
        );
    }
}

/// Branches of one row see the trunk and themselves only, and continue its positions: the
/// judge's layout (an item's prompt, then one branch per aspect), with and without a prefix.
#[test]
fn branches_equal_separate_rows() {
    branches(false);
}

fn branches(fused: bool) {
    for arch in ARCHS {
        let (model, cases) = load_with(arch, fused);
        let full = &cases[2];
        for prefix_len in [0usize, 4] {
            let prefix = (prefix_len > 0).then(|| model.prefix(&full.ids[..prefix_len]).unwrap());
            let row = Row {
                trunk: full.ids[prefix_len..9].to_vec(),
                branches: vec![
                    full.ids[9..16].to_vec(),
                    full.ids[9..12].to_vec(),
                    full.ids[9..23].to_vec(),
                ],
            };
            let batch = Batch::from_rows(
                &[row.clone(), Row::plain(full.ids[prefix_len..5].to_vec())],
                prefix_len,
                model.device(),
            )
            .unwrap();
            let hidden = model.forward(&batch, prefix.as_ref()).unwrap();
            for (k, branch) in row.branches.iter().enumerate() {
                let start = row.branch_start(k);
                let at: Vec<(usize, usize)> = (0..branch.len()).map(|i| (0, start + i)).collect();
                let got = model
                    .logits_at(&hidden, &at, None)
                    .unwrap()
                    .to_vec2::<f32>()
                    .unwrap();
                assert_close(
                    &got,
                    &full.logits[9..9 + branch.len()],
                    0,
                    &format!("{arch}: prefix {prefix_len} branch {k} (+9)"),
                );
            }
            let trunk_last = model
                .logits_at(&hidden, &[(0, row.trunk_end().unwrap())], None)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            assert!(
                max_diff(&trunk_last[0], &full.logits[8]) <= tol(),
                "{arch}: trunk end"
            );
        }
    }
}

/// Attention split into blocks of a few rows × queries (as a batch past 2^28 scores is, so that
/// no kernel nears 2^31 elements) gives transformers' logits, and the unsplit pass's within
/// 1e-5: one query of one row at a time, 5 queries, and 2 whole rows, with and without a shared
/// prefix, sliding windows and soft-capping included (gemma2, gemma3).
#[test]
fn attention_split_into_small_blocks_matches() {
    for arch in ARCHS {
        let (mut model, cases) = load(arch);
        let rows: Vec<Vec<u32>> = cases[..4].iter().map(|c| c.ids.clone()).collect();
        let full = &cases[2];
        let (head, tail) = full.ids.split_at(9);
        let whole = run(&model, &rows, None);
        let whole_prefixed = run(&model, &[tail.to_vec()], Some(head));
        let heads = model.cfg.num_heads;
        let keys = rows.iter().map(Vec::len).max().unwrap();
        // Exact up to summation order in f32; bf16/f16 GEMMs of other shapes round otherwise.
        let same = common::tol(1e-5, BF16_TOL, F16_TOL) as f32;
        for (limit, want_rows, want_queries) in [
            (heads * keys, 1, 1),
            (heads * keys * 5, 1, 5),
            (heads * keys * keys * 2, 2, keys),
        ] {
            let plan = AttentionPlan::new(rows.len(), heads, keys, keys, limit).unwrap();
            assert_eq!((plan.rows, plan.queries), (want_rows, want_queries));
            model.set_attention_elements(limit);
            let split = run(&model, &rows, None);
            let split_prefixed = run(&model, &[tail.to_vec()], Some(head));
            model.set_attention_elements(ATTENTION_ELEMENTS);
            for (n, case) in cases.iter().enumerate().take(4) {
                let what = format!("{arch}: limit {limit}, prompt {n}");
                assert_close(&split[n], &case.logits, 0, &what);
                for (a, b) in split[n].iter().zip(&whole[n]) {
                    assert!(max_diff(a, b) <= same, "{what}: split vs whole");
                }
            }
            assert_close(
                &split_prefixed[0],
                &full.logits[9..],
                0,
                &format!("{arch}: prefixed"),
            );
            for (a, b) in split_prefixed[0].iter().zip(&whole_prefixed[0]) {
                assert!(max_diff(a, b) <= same, "{arch}: prefixed split vs whole");
            }
        }
    }
}

/// Rows decoded on a `KvCache`, the way batched json decoding runs: uneven steps (rows feeding
/// 0–3 tokens, the rest dead padding), probe branches read and dropped, the cache growing from
/// 2 slots, finished rows dropped — with and without a header kept once and read by every row.
/// Every position read equals transformers' logits for the whole prompt.
#[test]
fn decoding_steps_on_a_cache_match_transformers() {
    decoding_steps(false);
}

fn decoding_steps(fused: bool) {
    for arch in ARCHS {
        let (model, cases) = load_with(arch, fused);
        let mut worst = 0f32;
        // (header length, rows as (case, tokens up to)): four prompts of 7, 1, 23 and 12
        // tokens; then the longest split after 9 tokens, continued by two rows.
        let scenarios: [(usize, Vec<(usize, usize)>); 2] = [
            (0, (0..4).map(|c| (c, cases[c].ids.len())).collect()),
            (9, vec![(2, cases[2].ids.len()), (2, 12)]),
        ];
        for (header, rows) in scenarios {
            let head = (header > 0).then(|| model.prefix(&cases[2].ids[..header]).unwrap());
            let mut cache = KvCache::new(&model, rows.len(), head.as_ref(), 2).unwrap();
            let mut live: Vec<usize> = (0..rows.len()).collect();
            let mut fed = vec![header; rows.len()];
            for step in 0.. {
                if live.is_empty() {
                    break;
                }
                let feeds: Vec<Row> = live
                    .iter()
                    .map(|&i| {
                        let (c, end) = rows[i];
                        let ids = &cases[c].ids[..end];
                        let stop = (fed[i] + (step + i) % 4).min(end);
                        // A probe of the next two tokens: read now, fed for real later.
                        let probe = &ids[stop..(stop + 2).min(end)];
                        Row {
                            trunk: ids[fed[i]..stop].to_vec(),
                            branches: if step % 2 == 1 && !probe.is_empty() {
                                vec![probe.to_vec()]
                            } else {
                                Vec::new()
                            },
                        }
                    })
                    .collect();
                // Every position is read here, not only each trunk's and branch's end.
                let every: Vec<(usize, usize)> = feeds
                    .iter()
                    .enumerate()
                    .flat_map(|(r, row)| (0..row.len()).map(move |t| (r, t)))
                    .collect();
                let hidden = model
                    .step_reading(&mut cache, &feeds, Products::RowWise, &every)
                    .unwrap();
                for (r, (&i, row)) in live.iter().zip(&feeds).enumerate() {
                    let case = &cases[rows[i].0];
                    let mut at = Vec::new();
                    let mut positions = Vec::new();
                    for t in 0..row.trunk.len() {
                        at.push((r, t));
                        positions.push(fed[i] + t);
                    }
                    for (k, probe) in row.branches.iter().enumerate() {
                        for t in 0..probe.len() {
                            at.push((r, row.branch_start(k) + t));
                            positions.push(fed[i] + row.trunk.len() + t);
                        }
                    }
                    fed[i] += row.trunk.len();
                    if at.is_empty() {
                        continue;
                    }
                    let got = model.decode_logits(&hidden, &at).unwrap();
                    for (g, &p) in got.to_vec2::<f32>().unwrap().iter().zip(&positions) {
                        let Some(e) = p.checked_sub(case.first()).map(|q| &case.logits[q]) else {
                            continue;
                        };
                        let d = max_diff(g, e);
                        worst = worst.max(d);
                        assert!(
                            d <= tol(),
                            "{arch}: header {header} row {i} position {p} (step {step}): {d}"
                        );
                    }
                }
                let keep: Vec<usize> = (0..live.len())
                    .filter(|&r| fed[live[r]] < rows[live[r]].1)
                    .collect();
                if keep.len() < live.len() {
                    cache.retain(&keep).unwrap();
                    live = keep.iter().map(|&r| live[r]).collect();
                }
            }
        }
        eprintln!("{arch}: worst |Δlogit| decoding on a cache vs transformers {worst:.2e}");
    }
}

/// The fused attention op (`model/fused_attention.rs`: on a GPU in bf16 its CUDA kernel, on the
/// CPU the same arithmetic) against transformers, as the unfused path is above: alone and
/// batched, a shared prefix, 5 and 2,000 tokens together, branches, decoding on a cache.
#[test]
fn fused_attention_matches_transformers() {
    alone_and_batched(true);
    shared_prefix(true);
    five_and_2000_tokens(true);
    branches(true);
    decoding_steps(true);
}
