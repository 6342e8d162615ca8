//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository the tests read from: cargo sets CARGO_MANIFEST_DIR when it runs a test, and
/// a test binary carried to another machine (scripts/gpu/gpu_bundle.sh) is given it there; the
/// path it was compiled in otherwise.
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

pub fn fixtures() -> PathBuf {
    repo_root().join("tests").join("fixtures")
}

/// A tiny random model's folder (scripts/fixtures/make_runtime_fixtures.py): its weights and config, and
/// transformers' logits for its prompts (`tiny_cases`).
pub fn tiny_model(arch: &str) -> PathBuf {
    fixtures().join("tiny").join(arch)
}

/// A tiny model's prompts, each as (token ids, transformers' f32 logits of its last positions:
/// all of them for short prompts), in the fixture's order.
pub fn tiny_cases(arch: &str) -> Vec<(Vec<u32>, Vec<Vec<f32>>)> {
    let path = tiny_model(arch).join("expected.safetensors");
    prompt_cases(&candle_core::safetensors::load(path, &candle_core::Device::Cpu).unwrap())
}

/// The prompts of a fixture's expected tensors (`ids.N`, `logits.N` for N = 0, 1, … until
/// one is missing), each as (token ids, logits of its last positions).
pub fn prompt_cases(
    expected: &std::collections::HashMap<String, candle_core::Tensor>,
) -> Vec<(Vec<u32>, Vec<Vec<f32>>)> {
    (0..)
        .map_while(|n| {
            let ids = expected.get(&format!("ids.{n}"))?.to_vec1::<i64>().unwrap();
            let logits = expected[&format!("logits.{n}")].to_vec2::<f32>().unwrap();
            Some((ids.into_iter().map(|i| i as u32).collect(), logits))
        })
        .collect()
}

/// The folder of the real test models (scripts/fetch_test_models.py puts them there).
pub fn test_models() -> PathBuf {
    match std::env::var_os("HYOKA_TEST_MODELS") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/hyoka/test-models"),
    }
}

/// A real test model file. Missing files fail the test (CI fetches them first) unless
/// HYOKA_SKIP_MODEL_TESTS=1, which makes the test return early instead.
pub fn test_model(name: &str) -> Option<PathBuf> {
    let path = test_models().join(name);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("HYOKA_SKIP_MODEL_TESTS").as_deref() == Ok("1") {
        eprintln!(
            "skipping: {} is missing (HYOKA_SKIP_MODEL_TESTS=1)",
            path.display()
        );
        return None;
    }
    panic!(
        "{} is missing: run `python3 scripts/fetch_test_models.py` (or set HYOKA_SKIP_MODEL_TESTS=1)",
        path.display()
    );
}

/// An optional real model (models/test-models.toml's `optional = true`, fetched only by name):
/// None, with a note, when it is not in the cache, so the test command needs no download for it.
pub fn optional_test_model(name: &str) -> Option<PathBuf> {
    let path = test_models().join(name);
    if path.exists() {
        return Some(path);
    }
    eprintln!(
        "skipping: optional model {} is missing (scripts/fetch_test_models.py --only …)",
        path.display()
    );
    None
}

/// The shipped DBDC3 archive, unpacked once by the system's tar — independently of hyoka's own
/// archive reader — below cargo's temporary folder for tests (the system's, where a test binary
/// runs on another machine). Unpacked into a folder of this process, then renamed into place,
/// so that test processes running side by side never see half of it.
pub fn dbdc3_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let archive = dbdc3_archive();
        let bytes = std::fs::metadata(&archive)
            .expect("data/dbdc3-ja.tar.gz")
            .len();
        let mut base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        if std::fs::create_dir_all(&base).is_err() {
            base = std::env::temp_dir();
        }
        let done = base.join(format!("dbdc3-{bytes}"));
        if !done.join("dbdc3-ja").is_dir() {
            let work = base.join(format!("dbdc3-{bytes}.{}", std::process::id()));
            std::fs::create_dir_all(&work).unwrap();
            let status = std::process::Command::new("tar")
                .arg("-xzf")
                .arg(&archive)
                .arg("-C")
                .arg(&work)
                .status()
                .expect("tar runs");
            assert!(status.success(), "tar -xzf {}", archive.display());
            if std::fs::rename(&work, &done).is_err() {
                // Another process put it there first.
                let _ = std::fs::remove_dir_all(&work);
            }
        }
        done.join("dbdc3-ja")
    })
    .clone()
}

/// The DBDC3 Japanese evaluation data as the repository ships it.
pub fn dbdc3_archive() -> PathBuf {
    repo_root().join("data").join("dbdc3-ja.tar.gz")
}

/// A two-aspect score rubric (0–1 fit, 1–5 quality) for judge runs on the small test models.
pub const SHORT_RUBRIC: &str = r#"
name = "short"
description = "a short rubric for tests"
output = "score"
[prompt]
user = """
Rate the last reply.
{% for t in context %}
{{ t.label }}: {{ t.text }}
{% endfor %}
{{ response.label }}: {{ response.text }}
"""
answer = "{{ aspect.name }}: "
[[aspects]]
key = "fit"
name = "Fit"
min = 0
max = 1
definition = "fits the context"
[[aspects]]
key = "quality"
name = "Quality"
min = 1
max = 5
definition = "overall"
"#;

/// The device the parity tests run on: HYOKA_TEST_DEVICE = cpu (default), cuda, cuda:N or metal
/// (scripts/gpu/gpu_check.sh sets it).
pub fn device() -> candle_core::Device {
    let spec = std::env::var("HYOKA_TEST_DEVICE").unwrap_or_else(|_| "cpu".into());
    hyoka::model::backend::device::parse_device(&spec)
        .expect("HYOKA_TEST_DEVICE names a usable device")
}

/// The dtype the parity tests run in: HYOKA_TEST_DTYPE = f32 (default), bf16 or f16.
pub fn dtype() -> candle_core::DType {
    let spec = std::env::var("HYOKA_TEST_DTYPE").unwrap_or_else(|_| "f32".into());
    // An explicit dtype does not depend on the device: none is opened here (on a GPU, every
    // `tol` call would otherwise open one).
    hyoka::model::backend::device::parse_dtype(Some(&spec), &candle_core::Device::Cpu)
        .expect("HYOKA_TEST_DTYPE is f32, bf16 or f16")
}

/// A test's tolerance in the dtype it runs in. The references are f32 (transformers, bert_score),
/// so bf16 (8 significant bits) and f16 (11) are held to what those formats can give; each test
/// states its three numbers and prints the worst difference it saw.
pub fn tol(f32: f64, bf16: f64, f16: f64) -> f64 {
    match dtype() {
        candle_core::DType::BF16 => bf16,
        candle_core::DType::F16 => f16,
        _ => f32,
    }
}

/// HYOKA_TEST_ENCODER=padded: BERTScore encoders run the GPUs' path (right-padded rows,
/// candle's ops) on the CPU in f32 too.
pub fn encoder_padded() -> bool {
    std::env::var("HYOKA_TEST_ENCODER").as_deref() == Ok("padded")
}

/// A prompt's logits at every position, computed as one sequence (f32).
pub fn every_position_logits(model: &hyoka::model::Transformer, ids: &[u32]) -> Vec<Vec<f32>> {
    let rows = [ids.to_vec()];
    let batch = hyoka::model::Batch::new(&rows, 0, model.device()).unwrap();
    let hidden = model.forward(&batch, None).unwrap();
    let at: Vec<(usize, usize)> = (0..ids.len()).map(|i| (0, i)).collect();
    model
        .logits_at(&hidden, &at, None)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap()
}

/// A directory for a test's files: cargo's tmp directory for this target where it exists (not on
/// a machine a bundled test binary was carried to), the system's otherwise.
pub fn scratch_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if dir.is_dir() {
        dir
    } else {
        std::env::temp_dir()
    }
}

/// tests/emulation/`source` (a CUDA kernel file run on the CPU) built with this machine's C++
/// compiler; None where there is none (the caller says it skips). A compile error panics.
pub fn build_emulator(source: &str) -> Option<PathBuf> {
    let exe = scratch_dir().join(source.trim_end_matches(".cpp"));
    let building = exe.with_extension(format!("{}.tmp", std::process::id()));
    let out = std::process::Command::new("c++")
        .args([
            "-std=c++20",
            "-O2",
            "-ffp-contract=off",
            "-pthread",
            "-x",
            "c++",
        ])
        .arg(repo_root().join("tests/emulation").join(source))
        .arg("-o")
        .arg(&building)
        .output();
    match out {
        Err(e) => {
            eprintln!("skipping: no C++ compiler to emulate the CUDA kernels (c++: {e})");
            None
        }
        Ok(o) if !o.status.success() => panic!("{source}: {}", String::from_utf8_lossy(&o.stderr)),
        Ok(_) => {
            // A rename replaces the file whole: test binaries running at once each build theirs.
            std::fs::rename(&building, &exe).expect("the emulator's binary is moved in place");
            Some(exe)
        }
    }
}

/// Runs an emulator built by `build_emulator`: `args`, then an input file holding `input` and
/// the output file it writes, read back as bf16 bits. `tag` names the files (unique per call).
pub fn run_emulator(exe: &std::path::Path, args: &[&str], input: &[u8], tag: &str) -> Vec<u16> {
    let dir = scratch_dir();
    let tag = format!("{tag}-{}", std::process::id());
    let (in_file, out_file) = (
        dir.join(format!("{tag}.in")),
        dir.join(format!("{tag}.out")),
    );
    std::fs::write(&in_file, input).unwrap();
    let status = std::process::Command::new(exe)
        .args(args)
        .arg(&in_file)
        .arg(&out_file)
        .status()
        .unwrap();
    assert!(status.success(), "{} {tag}: {status}", exe.display());
    let out = std::fs::read(&out_file).unwrap();
    let _ = (
        std::fs::remove_file(&in_file),
        std::fs::remove_file(&out_file),
    );
    out.chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// The largest |a − b| over two equally long lists.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max)
}

/// The largest difference at any position, as a share of that position's expected logit range.
pub fn max_share_of_range(got: &[Vec<f32>], expected: &[Vec<f32>]) -> f32 {
    got.iter()
        .zip(expected)
        .map(|(g, e)| {
            let (lo, hi) = e
                .iter()
                .fold((f32::MAX, f32::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
            max_diff(g, e) / (hi - lo)
        })
        .fold(0.0f32, f32::max)
}

/// Every file under `dir` with its bytes: what a refused command must leave unchanged.
pub fn snapshot(dir: &std::path::Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.insert(p.clone(), std::fs::read(&p).expect("read"));
            }
        }
    }
    files
}

/// The files that differ between two snapshots (added, removed or changed), each once.
pub fn changed(
    before: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
    after: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A Hugging Face cache (the `hub` folder under HF_HOME) holding `files` as revision main of
/// `repo` at `commit`, laid out as huggingface_hub writes it: the bytes in `blobs/<sha256>`,
/// the snapshot's files links to them, `refs/main` naming the commit.
pub fn hub_cache(hf_home: &std::path::Path, repo: &str, commit: &str, files: &[PathBuf]) {
    use sha2::Digest;
    let folder = hf_home
        .join("hub")
        .join(format!("models--{}", repo.replace('/', "--")));
    let snapshot = folder.join("snapshots").join(commit);
    std::fs::create_dir_all(folder.join("refs")).unwrap();
    std::fs::create_dir_all(folder.join("blobs")).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::write(folder.join("refs").join("main"), commit).unwrap();
    for file in files {
        let bytes = std::fs::read(file).unwrap();
        let blob = hyoka::checksum::hex(&sha2::Sha256::digest(&bytes));
        std::fs::write(folder.join("blobs").join(&blob), bytes).unwrap();
        let link = snapshot.join(file.file_name().unwrap());
        #[cfg(unix)]
        std::os::unix::fs::symlink(PathBuf::from("../../blobs").join(&blob), link).unwrap();
        #[cfg(not(unix))]
        std::fs::copy(folder.join("blobs").join(&blob), link).unwrap();
    }
}
