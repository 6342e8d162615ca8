//! An item's CPU score does not depend on its neighbours: alone in its file, among twelve, in
//! a part of the file, after a resume, in small batches or one large one — the same bits, with
//! the f32 and the 8-bit prompt products, on the AVX-512 bodies and on the AVX2 ones
//! (`HYOKA_TEST_CPU=avx2`, what CPUs without AVX-512 run). Real SmolLM2 GGUF, DBDC3 turns.

use crate::common;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Items {
    dir: tempfile::TempDir,
    lines: Vec<String>,
    model: PathBuf,
}

impl Items {
    /// Twelve turns of the shipped DBDC3 sample, of several dialogues and lengths.
    fn new() -> Option<Self> {
        let model = common::test_model("smollm2-135m-instruct-q4_1.gguf")?;
        let dir = tempfile::tempdir().expect("tmp");
        let all = dir.path().join("all.jsonl");
        let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args(["import", "dbdc3"])
            .arg(common::dbdc3_archive())
            .arg("-o")
            .arg(&all)
            .output()
            .expect("import");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(&all).expect("items");
        // Every 37th turn: contexts of every length, not one dialogue's.
        let lines: Vec<String> = text
            .lines()
            .step_by(37)
            .take(12)
            .map(String::from)
            .collect();
        assert_eq!(lines.len(), 12);
        Some(Items { dir, lines, model })
    }

    fn write(&self, name: &str, picked: &[usize]) -> PathBuf {
        let path = self.dir.path().join(name);
        let text: String = picked
            .iter()
            .map(|&i| format!("{}\n", self.lines[i]))
            .collect();
        std::fs::write(&path, text).expect("write");
        path
    }

    /// `hyoka judge` of `items` into `out` (continued when it exists); its lines' scores by id.
    fn judge(
        &self,
        rubric: &str,
        items: &Path,
        out: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> BTreeMap<String, String> {
        let out = self.dir.path().join(out);
        let o = Command::new(env!("CARGO_BIN_EXE_hyoka"))
            .args(["judge", "--rubric", rubric, "--model"])
            .arg(&self.model)
            .arg("-i")
            .arg(items)
            .arg("-o")
            .arg(&out)
            .args(extra)
            .envs(env.iter().copied())
            .output()
            .expect("judge");
        assert!(
            o.status.success(),
            "{extra:?} {env:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::read_to_string(&out)
            .expect("out")
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("JSON");
                (
                    v["id"].as_str().expect("id").to_string(),
                    v["scores"].to_string(),
                )
            })
            .collect()
    }
}

/// Every item of `got` has the bits of the same item in `whole`.
fn assert_same_bits(whole: &BTreeMap<String, String>, got: &BTreeMap<String, String>, what: &str) {
    assert!(!got.is_empty(), "{what}: no lines");
    for (id, scores) in got {
        assert_eq!(Some(scores), whole.get(id), "{what}: item {id}");
    }
}

/// One body (AVX-512 or AVX2) and one kind of prompt products: the twelve in one file are the
/// reference for every other cut.
fn check(items: &Items, rubric: &str, tag: &str, extra: &[&str], env: &[(&str, &str)]) {
    let all: Vec<usize> = (0..12).collect();
    let file = items.write(&format!("{tag}-all.jsonl"), &all);
    let whole = items.judge(rubric, &file, &format!("{tag}-whole.jsonl"), extra, env);
    assert_eq!(whole.len(), 12);
    for k in [0, 5, 11] {
        let alone = items.write(&format!("{tag}-alone-{k}.jsonl"), &[k]);
        let got = items.judge(rubric, &alone, &format!("{tag}-alone-{k}.out"), extra, env);
        assert_same_bits(&whole, &got, &format!("{tag}: item {k} alone"));
    }
    let part = items.write(&format!("{tag}-part.jsonl"), &[4, 5, 6, 7, 8]);
    let got = items.judge(rubric, &part, &format!("{tag}-part.out"), extra, env);
    assert_same_bits(&whole, &got, &format!("{tag}: in a part of the file"));
    // Resumed: half the items first, then the rest after them in the same output.
    let half = items.write(&format!("{tag}-half.jsonl"), &all[..6]);
    items.judge(rubric, &half, &format!("{tag}-resumed.out"), extra, env);
    let got = items.judge(rubric, &file, &format!("{tag}-resumed.out"), extra, env);
    assert_same_bits(&whole, &got, &format!("{tag}: resumed"));
    for tokens in ["256", "32768"] {
        let mut args = extra.to_vec();
        args.extend(["--batch-tokens", tokens]);
        let got = items.judge(rubric, &file, &format!("{tag}-bt{tokens}.out"), &args, env);
        assert_same_bits(&whole, &got, &format!("{tag}: --batch-tokens {tokens}"));
    }
}

#[test]
fn a_score_does_not_depend_on_its_neighbours_batch_or_shard() {
    let Some(items) = Items::new() else { return };
    let breakdown = common::repo_root().join("examples/breakdown-ja.toml");
    let breakdown = breakdown.to_str().expect("path");
    let avx2 = [("HYOKA_TEST_CPU", "avx2"), ("HYOKA_TEST_INT8_BODY", "avx2")];
    check(&items, breakdown, "f32", &[], &[]);
    check(&items, breakdown, "f32-avx2", &[], &avx2);
    if hyoka::model::quant::cpu::prefill_gemm::int8_body().is_some() {
        check(&items, breakdown, "int8", &["--prefill-gemm", "int8"], &[]);
        check(
            &items,
            breakdown,
            "int8-avx2",
            &["--prefill-gemm", "int8"],
            &avx2,
        );
    }
    // Six aspects with five-point scales: many rows read per item, several queries per aspect.
    let all: Vec<usize> = (0..12).collect();
    let file = items.write("six-all.jsonl", &all);
    let whole = items.judge("dialogue6-ja", &file, "six-whole.jsonl", &[], &[]);
    let alone = items.write("six-alone.jsonl", &[7]);
    let got = items.judge("dialogue6-ja", &alone, "six-alone.out", &[], &[]);
    assert_same_bits(&whole, &got, "dialogue6-ja: item 7 alone");
}
