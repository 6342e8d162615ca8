//! Runs that die mid-way (kill -9, Ctrl-C) and inputs too long to fit, with the real SmolLM2
//! GGUF judge: a resumed run ends with every item exactly once and the scores of an
//! uninterrupted run; an over-long response is refused without being tokenized.

use crate::common;

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::SHORT_RUBRIC as RUBRIC;

/// Items enough that a run lasts a few seconds on two cores, one item per batch.
const ITEMS: usize = 16;

struct Setup {
    dir: tempfile::TempDir,
    model: PathBuf,
}

impl Setup {
    fn new(items: &[Value]) -> Option<Self> {
        let model = common::test_model("smollm2-135m-instruct-q4_1.gguf")?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rubric.toml"), RUBRIC).unwrap();
        let text: String = items.iter().map(|i| format!("{i}\n")).collect();
        std::fs::write(dir.path().join("items.jsonl"), text).unwrap();
        Some(Setup { dir, model })
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    fn command(&self, out: &str, extra: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hyoka"));
        c.args([
            "judge",
            "--rubric",
            &self.path("rubric.toml"),
            "--model",
            self.model.to_str().unwrap(),
            "-i",
            &self.path("items.jsonl"),
            "-o",
            &self.path(out),
            // One item per forward pass: many appends, so a kill lands between and within them.
            "--batch-tokens",
            "1",
        ])
        .args(extra);
        // Ctrl-C must reach the run even when the tests started with SIGINT ignored, as a
        // background job of a non-interactive shell does: the run gets the default action back.
        // SAFETY: between fork and exec only `signal`, which is async-signal-safe, is called.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, || {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        c
    }

    fn judge(&self, out: &str, extra: &[&str]) -> Output {
        self.command(out, extra).output().unwrap()
    }
}

fn item(i: usize, context: &[&str], response: &str) -> Value {
    let turns: Vec<Value> = context
        .iter()
        .enumerate()
        .map(|(k, t)| serde_json::json!({"speaker": if k % 2 == 0 { "B" } else { "A" }, "text": t}))
        .collect();
    serde_json::json!({"id": format!("item-{i:02}"), "context": turns, "response": {"speaker": "A", "text": response}})
}

fn dialogue_items() -> Vec<Value> {
    let pairs = [
        (
            "I'm getting hungry. Anything you'd like to eat?",
            "I'd like sushi.",
        ),
        ("What did you do at the weekend?", "Yes, I like cats."),
        ("Do you exercise?", "I run twice a week."),
        ("How was the trip to Hokkaido?", "The crab was wonderful."),
        ("最近どう？", "元気です、ありがとう。"),
    ];
    (0..ITEMS)
        .map(|i| {
            let (ctx, resp) = pairs[i % pairs.len()];
            item(i, &["Hello!", "Hi.", ctx], &format!("{resp} ({i})"))
        })
        .collect()
}

fn read_lines(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Wait until `path` has at least `n` complete lines, then stop `child` with `signal`; the
/// number of lines there were just before.
fn interrupt_after(child: &mut Child, path: &str, n: usize, signal: &str) -> usize {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let complete = text.matches('\n').count();
        if complete >= n {
            let status = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success(), "kill {signal}");
            child.wait().unwrap();
            return complete;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before it could be interrupted");
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no progress in 5 minutes"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Lines by id: every id exactly once.
fn by_id(lines: &[String]) -> std::collections::BTreeMap<String, Value> {
    let mut out = std::collections::BTreeMap::new();
    for l in lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        let id = v["id"].as_str().unwrap().to_string();
        assert!(out.insert(id.clone(), v).is_none(), "{id} twice");
    }
    out
}

fn check_resumed_equals_uninterrupted(s: &Setup, signal: &str) {
    assert!(s.judge("whole.jsonl", &[]).status.success());
    let whole = by_id(&read_lines(&s.path("whole.jsonl")));
    assert_eq!(whole.len(), ITEMS);

    let out = s.path("cut.jsonl");
    let mut child = s
        .command("cut.jsonl", &[])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let at_kill = interrupt_after(&mut child, &out, 3, signal);
    let kept = read_lines(&out).len();
    assert!(
        kept < ITEMS,
        "{signal} landed mid-run ({at_kill} lines when sent, {kept} after)"
    );

    let resumed = s.judge("cut.jsonl", &[]);
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{err}");
    let resumed = by_id(&read_lines(&out));
    assert_eq!(
        resumed.keys().collect::<Vec<_>>(),
        whole.keys().collect::<Vec<_>>(),
        "every item exactly once"
    );
    for (id, line) in &resumed {
        // Same batches (one item each), same shared header: the same numbers, exactly.
        assert_eq!(line["scores"], whole[id]["scores"], "{id}");
        assert_eq!(line["provenance"], whole[id]["provenance"], "{id}");
    }
}

#[test]
fn kill_9_mid_run_then_resume() {
    let Some(s) = Setup::new(&dialogue_items()) else {
        return;
    };
    check_resumed_equals_uninterrupted(&s, "-KILL");
}

#[test]
fn ctrl_c_mid_run_then_resume() {
    let Some(s) = Setup::new(&dialogue_items()) else {
        return;
    };
    check_resumed_equals_uninterrupted(&s, "-INT");
}

/// A response longer than any prompt of the limit can hold is refused at once, without being
/// tokenized (tokenizing a 50 MB response whole takes minutes and gigabytes); a context turn that
/// long is left out, the item scored with the turns after it.
#[test]
fn texts_too_long_to_fit_are_not_tokenized() {
    let huge = &"あ".repeat(8 << 20); // 24 MiB
    let items = [
        item(0, &["Hello!", "How are you?"], huge),
        item(1, &["Hello!", huge, "How are you?"], "Fine, thanks."),
        item(2, &["How are you?"], "Fine, thanks."),
    ];
    let Some(s) = Setup::new(&items) else {
        return;
    };
    let started = Instant::now();
    let out = s.judge("scores.jsonl", &["--max-prompt-tokens", "512"]);
    let secs = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let lines = by_id(&read_lines(&s.path("scores.jsonl")));
    let refused = lines["item-00"]["error"].as_str().unwrap_or_default();
    assert!(
        refused.contains("the response is 25165824 bytes") && refused.contains("not tokenized"),
        "{refused}"
    );
    let dropped = &lines["item-01"];
    assert!(dropped.get("error").is_none(), "{dropped}");
    assert_eq!(
        dropped["dropped_turns"], 2,
        "the long turn and the one before it"
    );
    assert_eq!(dropped["truncated"], true);
    // The item without the long turn scores as an item that never had those turns.
    assert_eq!(dropped["scores"], lines["item-02"]["scores"]);
    eprintln!("judged 24 MiB texts in {secs:.1}s");
}
