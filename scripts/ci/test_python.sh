#!/usr/bin/env bash
# The Python package's tests: the extension built in the test profile (sharing the Rust tests'
# compiled dependencies), put beside python/hyoka in a scratch folder, then pytest (parity with
# bert_score's fixtures, the judge and meta equal to the command line, errors) and mypy's
# stubtest (python/hyoka/_hyoka.pyi against the compiled module) in a venv of the test tools.
# Usage: scripts/ci/test_python.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${HYOKA_PY_VENV:-$HOME/.cache/hyoka/py-venv}
if [ ! -x "$venv/bin/pytest" ] || [ ! -x "$venv/bin/stubtest" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "numpy>=1.21" "pytest>=8" "mypy>=1.10"
fi
cargo build --locked -p hyoka-python --profile test
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
cp -r python/hyoka "$site/"
cp "$target_dir/debug/libhyoka_python.so" "$site/hyoka/_hyoka.abi3.so"
export PYTHONPATH="$site"
# The command line as a separate process, when the test run has built it.
[ -x "$target_dir/debug/hyoka" ] && export HYOKA_BIN="$target_dir/debug/hyoka"
"$venv/bin/python" -m pytest -q python/tests -p no:cacheprovider "$@"
"$venv/bin/python" -m mypy.stubtest hyoka._hyoka --mypy-config-file /dev/null
"$venv/bin/python" -m mypy --strict "$site/hyoka" --no-incremental
