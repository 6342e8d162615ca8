"""hyoka.bertscore against bert_score 0.3.13's own numbers on the same model files
(tests/fixtures/bert/expected.json, written by scripts/fixtures/make_bertscore_fixtures.py with bert_score:
all-MiniLM-L6-v2 and multilingual-e5-small, idf on and off, several references, rescaling)."""

import json

import numpy as np
import pytest

import hyoka
from conftest import FIXTURES, hub_cache, real_model

TOL = 1e-5
CASES = json.loads((FIXTURES / "bert" / "expected.json").read_text(encoding="utf-8"))["cases"]


def model_path(name: str) -> str:
    if name in ("all-MiniLM-L6-v2", "multilingual-e5-small"):
        return str(real_model(name))
    return str(FIXTURES / "bert" / name)


def refs_of(case: dict) -> list:
    """bert_score's input: one reference per candidate, or a list of them."""
    refs = case["refs"]
    return [r[0] for r in refs] if all(len(r) == 1 for r in refs) else refs


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_score_matches_bert_score(case: dict) -> None:
    baseline = case["baseline"]
    (P, R, F), hash_ = hyoka.bertscore.score(
        case["cands"],
        refs_of(case),
        model_type=model_path(case["model"]),
        num_layers=case["layer"],
        idf=case["idf"],
        batch_size=4,  # the fixtures' bert_score batch_size
        rescale_with_baseline=baseline is not None,
        baseline_path=None if baseline is None else FIXTURES / "bert" / baseline,
        lang="ja" if baseline else None,
        return_hash=True,
    )
    for name, got, want in (("P", P, case["P"]), ("R", R, case["R"]), ("F", F, case["F"])):
        assert got.shape == (len(case["cands"]),)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL, err_msg=f"{case['name']} {name}")
    assert f"_L{case['layer']}" in hash_
    assert ("_idf" if case["idf"] else "_no-idf") in hash_
    assert ("rescaled" in hash_) == (baseline is not None)


def test_scorer_reused_across_calls_and_chunks_gives_the_same_numbers() -> None:
    """One BERTScorer for several calls (bert_score's class), inputs longer than one chunk of
    work and in another order: the same numbers as bert_score's on the DBDC3 case."""
    case = next(c for c in CASES if c["name"] == "e5-dbdc3")
    scorer = hyoka.BERTScorer(model_type=model_path(case["model"]), num_layers=case["layer"], batch_size=4)
    assert scorer.num_layers == case["layer"]
    import hyoka.bertscore as bs

    old = bs._CHUNK
    bs._CHUNK = 7  # many calls into the extension
    try:
        P, R, F = scorer.score(case["cands"], refs_of(case))
    finally:
        bs._CHUNK = old
    np.testing.assert_allclose(F, case["F"], rtol=0, atol=TOL)
    np.testing.assert_allclose(P, case["P"], rtol=0, atol=TOL)
    # A second call on the loaded encoder: the first 12 pairs are three whole padding groups of
    # bert_score's batch_size 4, so they get the numbers they got within the whole input.
    P1, _, F1 = scorer.score(case["cands"][:12], refs_of(case)[:12])
    np.testing.assert_allclose(F1, case["F"][:12], rtol=0, atol=TOL)


def test_idf_sents_weigh_tokens_like_the_references_do() -> None:
    """idf over idf_sents equal to the references is bert_score's score() with idf=True."""
    case = next(c for c in CASES if c["name"] == "minilm-idf")
    refs = refs_of(case)
    scorer = hyoka.BERTScorer(model_type=model_path(case["model"]), num_layers=case["layer"], idf=True,
                              idf_sents=refs, batch_size=4)
    P, R, F = scorer.score(case["cands"], refs)
    np.testing.assert_allclose(F, case["F"], rtol=0, atol=TOL)
    other = hyoka.BERTScorer(model_type=model_path(case["model"]), num_layers=case["layer"], idf=True,
                             idf_sents=["全然違う文です。", "まったく別の文。"], batch_size=4)
    _, _, F2 = other.score(case["cands"], refs)
    assert np.abs(F2 - np.asarray(case["F"])).max() > 1e-3, "idf_sents change the weights"


def test_lang_ja_is_bert_base_multilingual_cased_from_the_hub_cache(tmp_path, monkeypatch) -> None:
    """lang="ja" loads bert_score's encoder through the Hub code path (a cache read offline holds
    a tiny stand-in under its name) at layer 9, and gives bert_score's numbers for it
    (tests/fixtures/bert/hub-default.json, scripts/fixtures/make_hub_cache_fixtures.py)."""
    fx = json.loads((FIXTURES / "bert" / "hub-default.json").read_text(encoding="utf-8"))
    files = [FIXTURES / "bert" / "hub-default" / f for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")]
    hub_cache(tmp_path, "google-bert/bert-base-multilingual-cased", fx["commit"], files)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    P, R, F = hyoka.bertscore.score(fx["cands"], fx["refs"], lang="ja")
    for got, k in ((P, "P"), (R, "R"), (F, "F")):
        assert np.abs(got - np.asarray(fx[k])).max() < TOL, k
    scorer = hyoka.BERTScorer(lang="ja")
    assert scorer.model_type == "google-bert/bert-base-multilingual-cased"
    assert scorer.num_layers == fx["layer"] == 9
    (_, _, F1) = scorer.score(["  いいですね  "], ["それは良かった"])
    (_, _, F2) = scorer.score(["いいですね"], ["それは良かった"])
    assert F1[0] == F2[0]
    assert scorer.hash.startswith("google-bert/bert-base-multilingual-cased_L9_no-idf_version=hyoka-"), scorer.hash


def test_a_default_encoder_that_cannot_be_had_raises_and_says_how_to_get_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hyoka.errors.NotFoundError) as e:
        hyoka.bertscore.score(["いいですね"], ["それは良かった"], lang="ja")
    message = str(e.value)
    assert "huggingface-cli download google-bert/bert-base-multilingual-cased" in message, message
    assert "no other model" in message, message
    # The advice names Python's own way to name an encoder, not a command-line flag.
    assert "name a model with model_type=" in message and "--model" not in message, message
    with pytest.raises(hyoka.errors.NotFoundError, match="FacebookAI/roberta-large"):
        hyoka.BERTScorer(model_type="roberta-large")


def test_ctrl_c_stops_a_long_call(tmp_path) -> None:
    """SIGINT during a long score() call raises KeyboardInterrupt within one part of the work."""
    import signal
    import subprocess
    import sys
    import time

    model = model_path("multilingual-e5-small")
    script = tmp_path / "long.py"
    script.write_text(
        # Ctrl-C raises KeyboardInterrupt even where the tests started with SIGINT ignored (a
        # background job of a non-interactive shell), which Python would keep ignored.
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import sys, hyoka.bertscore as bs\n"
        "bs._CHUNK = 64\n"
        f"cands = [f'{{i}} 番目の応答です。' for i in range(200000)]\n"
        "print('start', flush=True)\n"
        f"bs.score(cands, cands[::-1], model_type={model!r}, num_layers=12)\n"
        "print('finished', flush=True)\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "start"
    time.sleep(4)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "finished" not in out
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert time.monotonic() - sent < 30
