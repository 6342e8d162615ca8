"""Shared paths: the repository's fixtures and the real test models (scripts/fetch_test_models.py)."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def models_dir() -> Path:
    env = os.environ.get("HYOKA_TEST_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "hyoka" / "test-models"


def real_model(name: str) -> Path:
    """A real test model; missing ones fail (the test command fetches them) unless
    HYOKA_SKIP_MODEL_TESTS=1, which skips."""
    path = models_dir() / name
    if not path.exists():
        if os.environ.get("HYOKA_SKIP_MODEL_TESTS") == "1":
            pytest.skip(f"{path} is missing (HYOKA_SKIP_MODEL_TESTS=1)")
        raise FileNotFoundError(f"{path} is missing: run `python3 scripts/fetch_test_models.py`")
    return path


def hub_cache(hf_home, repo: str, commit: str, files: list) -> None:
    """A Hugging Face cache as huggingface_hub writes it: blobs, snapshot links, refs/main."""
    import hashlib

    folder = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / commit
    (folder / "refs").mkdir(parents=True)
    (folder / "blobs").mkdir()
    snapshot.mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    for path in files:
        data = path.read_bytes()
        blob = hashlib.sha256(data).hexdigest()
        (folder / "blobs" / blob).write_bytes(data)
        (snapshot / path.name).symlink_to(f"../../blobs/{blob}")
