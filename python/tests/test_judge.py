"""hyoka.Judge gives what `hyoka judge` writes for the same items and options (the command line
run as a separate process when HYOKA_BIN names the binary, else the same program through the
extension's entry point), and hyoka.meta what `hyoka meta --json` writes."""

import json
import os
import subprocess
from pathlib import Path

import pytest

import hyoka
from conftest import ROOT, real_model

ITEMS = ROOT / "examples" / "items.jsonl"


def cli(args: list[str]) -> int:
    binary = os.environ.get("HYOKA_BIN")
    if binary:
        return subprocess.run([binary, *args]).returncode
    return hyoka._hyoka.main(["hyoka", *args])


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("rubric", ["dialogue6-en", "examples/coherence-ja.toml"])
def test_judge_equals_the_command_line(tmp_path: Path, rubric: str) -> None:
    model = str(real_model("smollm2-135m-instruct-q4_1.gguf"))
    rubric_arg = str(ROOT / rubric) if rubric.endswith(".toml") else rubric
    # Two of the examples' items (every aspect of each is a prompt), in a file of their own.
    items = lines(ITEMS)[:2]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")
    out = tmp_path / "judge.jsonl"
    assert cli(["judge", "--rubric", rubric_arg, "--model", model, "-i", str(path), "-o", str(out),
                "--batch-tokens", "512"]) == 0
    # The command writes items as their batches finish; Judge.score returns them in input order.
    order = {item["id"]: n for n, item in enumerate(items)}
    want = sorted(lines(out), key=lambda line: order[line["id"]])
    judge = hyoka.Judge(model, rubric_arg, batch_tokens=512)
    # The items in another order give the same lines, in that order — in memory: no file is
    # written or read on the way.
    import tempfile

    def no_files(*args: object, **kwargs: object) -> None:
        raise AssertionError("Judge.score made a temporary file")

    with pytest.MonkeyPatch.context() as patch:
        for name in ("TemporaryDirectory", "mkdtemp", "mkstemp", "NamedTemporaryFile"):
            patch.setattr(tempfile, name, no_files)
        got = judge.score(list(reversed(items)))
    assert [g["id"] for g in got] == [i["id"] for i in reversed(items)]
    assert got == list(reversed(want))  # scores, distributions and provenance, to the bit
    # A path to the items gives them too.
    assert judge.score(path) == want


def test_meta_returns_the_summary_json(tmp_path: Path) -> None:
    items = ROOT / "tests" / "fixtures" / "meta" / "items.jsonl"
    scores = ROOT / "tests" / "fixtures" / "meta" / "judge.jsonl"
    summary = tmp_path / "summary.json"
    # The reference script's lines carry no input_sha256, as another tool's: accepted by name.
    assert cli(["meta", "-i", str(items), "-s", str(scores), "--json", str(summary),
                "--markdown", str(tmp_path / "s.md"), "--bootstrap", "200", "--accept-unhashed"]) == 0
    with pytest.raises(hyoka.InvalidInputError, match="no input_sha256"):
        hyoka.meta(items, scores, bootstrap=200)
    got = hyoka.meta(items, scores, bootstrap=200, accept_unhashed=True)
    assert got == json.loads(summary.read_text(encoding="utf-8"))
    # Results as lists of dicts, as Judge.score returns them.
    assert hyoka.meta(lines(items), lines(scores), bootstrap=200, accept_unhashed=True) == got


def test_compare_equals_the_command_line(tmp_path: Path) -> None:
    """Judge.compare gives what `hyoka compare` writes (in the pairs' order), and hyoka.meta
    ranks the systems as `hyoka meta --json` does from that file."""
    model = str(real_model("smollm2-135m-instruct-q4_1.gguf"))
    pairs_items = ROOT / "examples" / "pairs-ja.jsonl"
    # Two contexts of the example: six pairs.
    items = [i for i in lines(pairs_items) if i["context_id"] in ("food", "pet")]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    out = tmp_path / "pairs.jsonl"
    assert cli(["compare", "--rubric", "breakdown-pair-ja", "--model", model, "-i", str(path), "-o", str(out)]) == 0
    judge = hyoka.Judge(model, "breakdown-pair-ja")
    got = judge.compare(items)
    assert [g["id"] for g in got] == [
        "food|careful|offtopic", "food|careful|terse", "food|offtopic|terse",
        "pet|careful|offtopic", "pet|careful|terse", "pet|offtopic|terse",
    ]
    written = {line["id"]: line for line in lines(out)}
    assert got == [written[g["id"]] for g in got]  # to the bit, provenance included
    assert judge.compare(path) == got
    baseline = judge.compare(items, baseline="terse")
    assert [g["id"] for g in baseline] == ["food|careful|terse", "food|offtopic|terse",
                                            "pet|careful|terse", "pet|offtopic|terse"]
    summary = tmp_path / "summary.json"
    assert cli(["meta", "-i", str(path), "-s", str(out), "--json", str(summary), "--markdown",
                str(tmp_path / "s.md"), "--bootstrap", "100"]) == 0
    ranked = hyoka.meta(items, got, bootstrap=100)
    assert ranked == json.loads(summary.read_text(encoding="utf-8"))
    assert [s["system"] for s in ranked["aspects"][0]["systems"]] != []
    with pytest.raises(hyoka.UsageError, match="pairwise"):
        hyoka.Judge(model, "breakdown3-ja").compare(items)


def test_judge_shows_progress_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """Progress reaches the callback per batch (verbose=True without tqdm: lines on stderr), and
    SIGINT during a long score() raises KeyboardInterrupt after the batch in progress."""
    import signal
    import sys
    import threading
    import time
    import typing

    model = str(real_model("smollm2-135m-instruct-q4_1.gguf"))
    item = lines(ITEMS)[0]
    many = [dict(item, id=f"i{n}") for n in range(200)]
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in many), encoding="utf-8")
    script = tmp_path / "long.py"
    script.write_text(
        # Ctrl-C raises KeyboardInterrupt even where the tests started with SIGINT ignored (a
        # background job of a non-interactive shell), which Python would keep ignored.
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import sys, hyoka\n"
        "sys.modules['tqdm'] = None  # the stderr line, whatever is installed\n"
        f"judge = hyoka.Judge({model!r}, 'dialogue6-en', batch_tokens=256)\n"
        "print(len(judge.score([dict(id='one', response=dict(speaker='A', text='Hi.'))], verbose=True)), flush=True)\n"
        "print('start', flush=True)\n"
        f"judge.score({str(items)!r}, verbose=True)\n"
        "print('finished', flush=True)\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    # stderr is read as it comes, so that the signal goes when scoring has started (planning 200
    # items takes seconds on a loaded machine), not after a guessed delay.
    err_lines: list[str] = []
    scoring = threading.Event()

    def read_stderr(stream: typing.IO[str]) -> None:
        for line in stream:
            err_lines.append(line)
            if "judging 0/200 items" in line:
                scoring.set()

    reader = threading.Thread(target=read_stderr, args=(proc.stderr,), daemon=True)
    reader.start()
    assert proc.stdout.readline().strip() == "1"
    assert proc.stdout.readline().strip() == "start"
    assert scoring.wait(timeout=180), "".join(err_lines)[-2000:]
    # Inside the first batches (each one item, a few seconds).
    time.sleep(2)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    out = proc.stdout.read()
    reader.join(timeout=10)
    err = "".join(err_lines)
    assert "finished" not in out
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert time.monotonic() - sent < 30
    assert "judging 1/1 items" in err, err[-2000:]
    assert "judging 200/200 items" not in err, err[-2000:]


def test_likelihood_and_translate_equal_the_command_line(tmp_path: Path) -> None:
    """Judge.likelihood gives what `hyoka likelihood` writes, and Judge.translate the items
    `hyoka translate` writes (the translation's provenance included), with the judge's model."""
    model = str(real_model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    items = lines(ITEMS)[:2]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    judge = hyoka.Judge(model, "breakdown3-ja")
    out = tmp_path / "fed.jsonl"
    assert cli(["likelihood", "--scorer", "fed-ja", "--model", model, "-i", str(path), "-o", str(out)]) == 0
    written = {line["id"]: line for line in lines(out)}
    got = judge.likelihood(items, "fed-ja")
    assert got == [written[i["id"]] for i in items]  # to the bit, provenance included
    assert sorted(got[0]["likelihood"]) == sorted(
        ["naturalness", "coherence", "interestingness", "relevance", "consistency", "overall", "breakdown"])
    translated = tmp_path / "en.jsonl"
    assert cli(["translate", "-i", str(path), "-o", str(translated), "--model", model]) == 0
    en = judge.translate(items, to="en")
    assert en == lines(translated)
    assert [e["translation"]["source"]["response"] for e in en] == [i["response"]["text"] for i in items]
    assert judge.translate(path) == en
    with pytest.raises(hyoka.UsageError, match="no built-in prompt"):
        judge.translate(items, to="fr")


def test_eval_writes_the_folder_the_command_writes(tmp_path: Path) -> None:
    """hyoka.eval into one folder and `hyoka eval` into another, with the same items and
    options: the same files, byte for byte (the judge, BERTScore, the scores, the summaries and
    the report)."""
    judge = str(real_model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    encoder = str(real_model("multilingual-e5-small"))
    rubric = str(ROOT / "examples" / "breakdown-ja.toml")
    command = tmp_path / "command"
    assert cli(["eval", "-i", str(ITEMS), "--rubric", rubric, "--model", judge, "--bertscore-model", encoder,
                "--fit-w", "--bootstrap", "50", "-o", str(command)]) == 0
    done = hyoka.eval(ITEMS, tmp_path / "python", model=judge, rubric=rubric, bertscore_model=encoder,
                      fit_w=True, bootstrap=50, verbose=False)
    assert done["failed"] == [] and Path(done["dir"]) == tmp_path / "python"
    written = sorted(p.name for p in command.iterdir())
    assert written == sorted(p.name for p in (tmp_path / "python").iterdir())
    assert {"judge.jsonl", "bertscore.jsonl", "scores.jsonl", "summary.json", "report.html"} <= set(written)
    for name in written:
        assert (command / name).read_bytes() == (tmp_path / "python" / name).read_bytes(), name
    assert done["summary"] == json.loads((command / "summary.json").read_text(encoding="utf-8"))
    # Items in memory give the same scores; a setting the command does not take is refused.
    again = hyoka.eval(lines(ITEMS), tmp_path / "memory", model=judge, rubric=rubric, bertscore_model=encoder,
                       fit_w=True, bootstrap=50, verbose=False)
    assert (tmp_path / "memory" / "judge.jsonl").read_bytes() == (command / "judge.jsonl").read_bytes()
    with pytest.raises(hyoka.UsageError, match="temperature"):
        hyoka.eval(ITEMS, tmp_path / "refused", model=judge, temperature=0.7)
    with pytest.raises(hyoka.UsageError, match="fit_w, calibrate: for judge and BERTScore results"):
        hyoka.eval(ITEMS, tmp_path / "refused", model=judge, rubric="breakdown-pair-ja", fit_w=True,
                   calibrate=True)
    assert not (tmp_path / "refused").exists()
