"""Bad input raises Python exceptions naming what is wrong, never a panic across the FFI."""

import json
from pathlib import Path

import pytest

import hyoka
from conftest import ROOT, real_model


def test_bad_items_name_the_item_and_field() -> None:
    judge = hyoka.Judge(str(real_model("smollm2-135m-instruct-q4_1.gguf")), "dialogue6-en")
    good = json.loads((ROOT / "examples" / "items.jsonl").read_text(encoding="utf-8").splitlines()[0])
    bad = dict(good, id="x", response={"speaker": "A"})
    with pytest.raises(hyoka.InvalidInputError) as e:
        judge.score([good, bad])
    assert isinstance(e.value, ValueError)
    assert "items[1]" in str(e.value) and "response" in str(e.value)
    with pytest.raises(hyoka.InvalidInputError, match=r"items\[0\]"):
        judge.score(["not a dict"])  # type: ignore[list-item]
    # One id twice, as an items file refuses it.
    with pytest.raises(hyoka.InvalidInputError, match=r"items\[1\]: id: duplicate id"):
        judge.score([good, good])


def test_bad_items_file_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"id": "a", "context": [], "response": {"speaker": "A", "text": "x"}}\n{"id": 3}\n')
    with pytest.raises(ValueError, match=rf"{path}:2"):
        hyoka.meta(path, tmp_path / "none.jsonl")
    judge = hyoka.Judge(str(real_model("smollm2-135m-instruct-q4_1.gguf")), "dialogue6-en")
    for read in (lambda p: judge.likelihood(p, "gptscore-en"), lambda p: judge.translate(p), judge.score):
        with pytest.raises(hyoka.InvalidInputError, match=rf"{path}:2"):
            read(path)


def test_missing_files_and_models_are_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        hyoka.Judge(str(tmp_path / "nothing.gguf"), "dialogue6-en")
    with pytest.raises(hyoka.NotFoundError):
        hyoka.bertscore.score(["a"], ["b"], model_type=str(tmp_path / "no-encoder"))
    with pytest.raises(FileNotFoundError):
        hyoka.meta(tmp_path / "none.jsonl", tmp_path / "none2.jsonl")


def test_bad_options_are_usage_errors() -> None:
    model = str(real_model("smollm2-135m-instruct-q4_1.gguf"))
    with pytest.raises(hyoka.UsageError, match="dtype"):
        hyoka.Judge(model, "dialogue6-en", dtype="f64")
    with pytest.raises(hyoka.UsageError, match="no-such-flag"):
        hyoka.Judge(model, "dialogue6-en", no_such_flag=1)
    with pytest.raises(hyoka.UsageError):
        hyoka.bertscore.score(["a", "b"], ["c"], lang="ja")
    with pytest.raises(hyoka.InvalidInputError, match="README.md: TOML parse error at line 3"):
        hyoka.Judge(model, str(ROOT / "README.md"))
    assert issubclass(hyoka.UsageError, hyoka.HyokaError)


def test_every_bad_value_is_a_hyoka_error() -> None:
    model = str(real_model("smollm2-135m-instruct-q4_1.gguf"))
    # An empty model list would load the default judge from the Hub.
    with pytest.raises(hyoka.UsageError, match="model: an empty list"):
        hyoka.Judge([], "dialogue6-en")
    # A lone surrogate (half of a UTF-16 pair) in an item or a sentence.
    good = json.loads((ROOT / "examples" / "items.jsonl").read_text(encoding="utf-8").splitlines()[0])
    judge = hyoka.Judge(model, "dialogue6-en")
    with pytest.raises(hyoka.InvalidInputError, match=r"items\[0\]: not valid Unicode"):
        judge.score([dict(good, response={"speaker": "A", "text": "x\ud800"})])
    with pytest.raises(hyoka.InvalidInputError, match=r"cands\[1\]: not valid Unicode"):
        hyoka.bertscore.score(["a", "b\udfff"], ["c", "d"], lang="ja")
    # Numbers out of range say the range, and are never an OverflowError.
    with pytest.raises(hyoka.UsageError, match="num_layers: -1 is not a layer from 0"):
        hyoka.bertscore.BERTScorer(num_layers=-1, lang="ja")
    with pytest.raises(hyoka.UsageError, match=r"batch_tokens.*-5 is not a valid value: .*negative"):
        hyoka.Judge(model, "dialogue6-en", batch_tokens=-5)
    # No reference to compare with is no score of 0.
    with pytest.raises(hyoka.UsageError, match=r"refs\[0\]: an empty list"):
        hyoka.bertscore.score(["a"], [[]], lang="ja")


def test_rubrics_lists_the_builtins() -> None:
    assert {"dialogue6-ja", "breakdown3-ja", "roleplay8-ja"} <= set(hyoka.rubrics())
