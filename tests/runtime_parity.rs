//! The runtime against HF transformers on tiny random-weight models of every architecture
//! (fixtures: scripts/make_runtime_fixtures.py): every position's logits, alone and in padded
//! batches, with and without a shared prefix.

mod common;

use candle_core::{DType, Device, Tensor};
use hyoka::model::{Batch, Row, Transformer, load_safetensors_dir};

const ARCHS: [&str; 6] = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"];
const TOL: f32 = 1e-4;

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
    let dir = common::fixtures().join("tiny").join(arch);
    let model = load_safetensors_dir(&dir, DType::F32, &Device::Cpu, Default::default()).unwrap();
    let expected =
        candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    let mut cases = Vec::new();
    for n in 0.. {
        let Some(ids) = expected.get(&format!("ids.{n}")) else {
            break;
        };
        let ids: Vec<u32> = ids
            .to_vec1::<i64>()
            .unwrap()
            .into_iter()
            .map(|i| i as u32)
            .collect();
        let logits = expected[&format!("logits.{n}")].to_vec2::<f32>().unwrap();
        cases.push(Case { ids, logits });
    }
    assert!(cases.len() >= 6);
    (model, cases)
}

/// `got[first + i]` against `expected[i]` for every i, within TOL.
fn assert_close(got: &[Vec<f32>], expected: &[Vec<f32>], first: usize, what: &str) {
    for (i, e) in expected.iter().enumerate() {
        let d = max_diff(&got[first + i], e);
        assert!(d <= TOL, "{what} position {}: max |diff| {d}", first + i);
    }
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
    let batch = Batch::new(
        rows,
        p.as_ref().map_or(0, |p| p.len),
        &model.windows(),
        model.dtype(),
        model.device(),
    )
    .unwrap();
    let (hidden, _) = model.forward(&batch, p.as_ref()).unwrap();
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
    for arch in ARCHS {
        let (model, cases) = load(arch);
        // One prompt at a time.
        for (n, case) in cases.iter().enumerate().take(4) {
            let got = run(&model, &[case.ids.clone()], None);
            assert_close(&got[0], &case.logits, 0, &format!("{arch}: prompt {n}"));
        }
        // All prompts in one right-padded batch (lengths 7, 1, 23, 12).
        let rows: Vec<Vec<u32>> = cases[..4].iter().map(|c| c.ids.clone()).collect();
        let got = run(&model, &rows, None);
        for (n, case) in cases.iter().enumerate().take(4) {
            assert_close(
                &got[n],
                &case.logits,
                0,
                &format!("{arch}: batched prompt {n}"),
            );
        }
    }
}

#[test]
fn shared_prefix_equals_recomputation() {
    for arch in ARCHS {
        let (model, cases) = load(arch);
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
    let batch = Batch::new(
        &[cases[0].ids.clone()],
        0,
        &model.windows(),
        model.dtype(),
        model.device(),
    )
    .unwrap();
    let (hidden, _) = model.forward(&batch, None).unwrap();
    let last = cases[0].ids.len() - 1;
    let rows = Tensor::new(&[5u32, 17, 3], model.device()).unwrap();
    let some = model
        .logits_at(&hidden, &[(0, last)], Some(&rows))
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let expect = &cases[0].logits[last];
    assert!(max_diff(&some[0], &[expect[5], expect[17], expect[3]]) <= TOL);
}

#[test]
fn a_batch_mixing_5_and_2000_tokens_is_correct() {
    for arch in ARCHS {
        let (model, cases) = load(arch);
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
    for arch in ARCHS {
        let (model, cases) = load(arch);
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
                &model.windows(),
                model.dtype(),
                model.device(),
            )
            .unwrap();
            let (hidden, _) = model.forward(&batch, prefix.as_ref()).unwrap();
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
                max_diff(&trunk_last[0], &full.logits[8]) <= TOL,
                "{arch}: trunk end"
            );
        }
    }
}
