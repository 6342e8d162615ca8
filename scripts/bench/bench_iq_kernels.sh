#!/usr/bin/env bash
# The i-quant decoding kernels, hyoka's against llama.cpp's own, in one run: one thread, a
# 4096 × 14336 matrix of random blocks of each kind, one activation row (llama.cpp's kernels take
# one; hyoka's also four at once, its batched decoding), ns a weight, best of 20 passes.
# llama.cpp's: ggml_vec_dot_iq*_q8_K of llama-cpp-python's libggml-cpu in $HYOKA_REF_PYTHON
# (default python3; built with CMAKE_ARGS=-DGGML_NATIVE=ON for this machine), called from
# scripts/bench/bench_iq_kernels.c; hyoka's: examples/bench_iq_kernels.rs. Needs cc and cargo.
# Both run alternately HYOKA_BENCH_REPEATS times (default 3), the least time of each kept: on a
# shared machine a neighbour's burst lasts seconds, longer than the 20 passes of one run.
# Usage: scripts/bench/bench_iq_kernels.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${HYOKA_REF_PYTHON:-python3}"
lib=$("$py" -c "import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), 'lib'))")
work=$(mktemp -d)
cc -O2 scripts/bench/bench_iq_kernels.c -o "$work/llama_kernels" -L"$lib" -lggml-cpu -lggml-base \
  -Wl,-rpath,"$lib"
cargo build --release --example bench_iq_kernels 2>/dev/null
for _ in $(seq "${HYOKA_BENCH_REPEATS:-3}"); do
  "$work/llama_kernels" >> "$work/llama.txt"
  RAYON_NUM_THREADS=1 target/release/examples/bench_iq_kernels >> "$work/hyoka.txt"
done
python3 - "$work" <<'PY'
import sys
w = sys.argv[1]
llama, hyoka = {}, {}
for l in open(f"{w}/llama.txt"):
    kind, ns = l.split()
    llama[kind] = min(float(ns), llama.get(kind, float("inf")))
for l in open(f"{w}/hyoka.txt"):
    kind, rows, ns = l.split()
    h = hyoka.setdefault(kind, {})
    h[rows] = min(float(ns), h.get(rows, float("inf")))
print("ns a weight, one thread    llama.cpp  hyoka 1 row (speed)  hyoka 4 rows (a row)")
for kind, ns in llama.items():
    h = hyoka[kind]
    print(f"  {kind:8} {ns:17.3f} {h['1']:12.3f} = {ns / h['1']:.2f}x {h['4']:11.3f} ({h['4'] / 4:.3f})")
PY
rm -rf "$work"
