"""docs/python.md's Python examples, run as written and in order (one namespace, from the
repository's root, `~` a home whose ~/.cache/hyoka/test-models is the test models' folder), each
printed output compared with the one the page shows after it. bert_score's `lang="ja"` default
reads a Hugging Face cache offline that holds a tiny stand-in for it."""

import contextlib
import io
import json
import re

import pytest

from conftest import FIXTURES, ROOT, hub_cache, models_dir, real_model

PAGE = ROOT / "docs" / "python.md"


def examples() -> list[tuple[int, str, str | None]]:
    """(line, code, the output shown after it or None) for each ```python block of the page."""
    text = PAGE.read_text(encoding="utf-8")
    fences = [(m.start(), m.group(1), m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S)]
    out = []
    for n, (start, lang, body) in enumerate(fences):
        if lang != "python":
            continue
        shown = None
        if n + 1 < len(fences) and fences[n + 1][1] == "text":
            between = text[start + len(body) + len("```python\n```"): fences[n + 1][0]]
            if not between.strip():
                shown = fences[n + 1][2]
        out.append((text.count("\n", 0, start) + 1, body, shown))
    return out


def test_the_python_page_runs_as_written(tmp_path, monkeypatch) -> None:
    real_model("multilingual-e5-small")
    real_model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    home = tmp_path / "home"
    (home / ".cache" / "hyoka").mkdir(parents=True)
    (home / ".cache" / "hyoka" / "test-models").symlink_to(models_dir().resolve())
    fx = json.loads((FIXTURES / "bert" / "hub-default.json").read_text(encoding="utf-8"))
    files = [FIXTURES / "bert" / "hub-default" / f for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")]
    hub_cache(tmp_path / "hf", "google-bert/bert-base-multilingual-cased", fx["commit"], files)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HYOKA_TEST_MODELS", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(ROOT)
    found = examples()
    assert len(found) >= 6, found
    namespace: dict = {}
    mismatches = []
    for line, code, shown in found:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"{PAGE}:{line}", "exec"), namespace)
        if shown is not None and printed.getvalue().strip() != shown.strip():
            mismatches.append(f"docs/python.md:{line}: printed\n{printed.getvalue()}shown\n{shown}")
    assert not mismatches, "\n".join(mismatches)
