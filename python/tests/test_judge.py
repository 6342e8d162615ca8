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
    # The items in another order give the same lines, in that order.
    got = judge.score(list(reversed(items)))
    assert [g["id"] for g in got] == [i["id"] for i in reversed(items)]
    assert got == list(reversed(want))  # scores, distributions and provenance, to the bit
    # A path to the items gives them too.
    assert judge.score(path) == want


def test_meta_returns_the_summary_json(tmp_path: Path) -> None:
    items = ROOT / "tests" / "fixtures" / "meta" / "items.jsonl"
    scores = ROOT / "tests" / "fixtures" / "meta" / "judge.jsonl"
    summary = tmp_path / "summary.json"
    assert cli(["meta", "-i", str(items), "-s", str(scores), "--json", str(summary),
                "--markdown", str(tmp_path / "s.md"), "--bootstrap", "200"]) == 0
    got = hyoka.meta(items, scores, bootstrap=200)
    assert got == json.loads(summary.read_text(encoding="utf-8"))
    # Results as lists of dicts, as Judge.score returns them.
    assert hyoka.meta(lines(items), lines(scores), bootstrap=200) == got
