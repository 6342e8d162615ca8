#!/usr/bin/env bash
# Opens hyoka's HTML report in a real headless browser (Debian's chromium, installed when
# missing) with the network cut off, and checks that it parses and renders on its own.
#   scripts/ci/check_report.sh [REPORT.html]
# Without an argument, it builds a report from the meta-evaluation fixtures first.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
scripts/ci/install_chromium.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
report="${1:-}"
if [ -z "$report" ]; then
    f=tests/fixtures/meta
    # The reference script's lines carry no input_sha256.
    cargo run --quiet --locked -- meta --accept-unhashed -i $f/items.jsonl -s $f/judge.jsonl -s $f/bertscore.jsonl \
        --bootstrap 200 --fit-w --markdown "$work/summary.md" --html "$work/report.html"
    report="$work/report.html"
fi
# An unreachable proxy: anything the page tried to load from the network would fail (and is
# also forbidden below by looking at what the page references).
browser=(chromium --headless --no-sandbox --disable-gpu --proxy-server=127.0.0.1:9 --user-data-dir="$work/profile")
"${browser[@]}" --dump-dom "file://$(realpath "$report")" > "$work/dom.html" 2> "$work/chromium.log"
"${browser[@]}" --window-size=1300,3000 --screenshot="$work/shot.png" "file://$(realpath "$report")" >> "$work/chromium.log" 2>&1
svgs=$(grep -o '<svg' "$work/dom.html" | wc -l)
tables=$(grep -o '<table' "$work/dom.html" | wc -l)
shot=$(stat -c %s "$work/shot.png")
echo "report.html in chromium: $svgs svg charts, $tables tables in the rendered DOM, screenshot $shot bytes"
grep -q '<title>hyoka report</title>' "$work/dom.html" || { echo "FAIL: the DOM has no report title"; exit 1; }
[ "$svgs" -ge 10 ] || { echo "FAIL: expected at least 10 inline charts"; exit 1; }
[ "$tables" -ge 3 ] || { echo "FAIL: expected the correlation tables"; exit 1; }
[ "$shot" -gt 20000 ] || { echo "FAIL: the screenshot looks blank"; exit 1; }
# Nothing external: no scripts, and no http(s) reference other than SVG's namespace URI.
if grep -o -E '(src|href)="[^"]*"|<script|url\([^)]*\)|@import' "$work/dom.html" | grep -v -q '^$'; then
    echo "FAIL: the report references external resources:"; grep -o -E '(src|href)="[^"]*"|<script|url\([^)]*\)|@import' "$work/dom.html" | head; exit 1
fi
echo "ok: renders offline"
