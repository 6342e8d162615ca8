#!/usr/bin/env bash
# Build, on a machine without a GPU, what scripts/gpu/gpu_check.sh needs on a GPU machine that has no
# Rust toolchain, no network and takes a small upload (a CUDA driver, PyTorch and transformers
# there; the bundle fits in 64 MiB): the CUDA build of hyoka and of the test
# suite, stripped, with the inputs of the benchmarks. Writes .gpu/bundle.tar.xz (the binaries
# share most of their bytes, and xz with a window larger than one binary keeps them once).
#
# Usage: scripts/gpu/gpu_bundle.sh            then, on the GPU machine, in the repository:
#        HYOKA_GPU_BUNDLE=.gpu/bundle.tar.xz scripts/gpu/gpu_check.sh cuda
# The CUDA build goes to target/cuda (the CPU build in target/release stays). Linking needs
# cuBLAS/cuRAND and a libcuda stub, which scripts/gpu/cuda_toolchain.sh installs from PyPI.
# HYOKA_BUNDLE_FEATURES= (empty) bundles a CPU build instead, to try the bundle's path of
# gpu_check.sh on this machine (`HYOKA_GPU_BUNDLE=.gpu/bundle.tar.xz scripts/gpu/gpu_check.sh cpu`).
set -euo pipefail
cd "$(dirname "$0")/../.."
features="${HYOKA_BUNDLE_FEATURES-cuda}"
if [ "$features" = cuda ]; then
  eval "$(scripts/gpu/cuda_toolchain.sh)"
  export CARGO_TARGET_DIR="${HYOKA_CUDA_TARGET:-target/cuda}"
fi
models="${HYOKA_TEST_MODELS:-$HOME/.cache/hyoka/test-models}"
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/tests" "$stage/models" "$stage/bench/minilm-tokenizer" "$stage/wheels" .gpu

cargo build --release --locked --features "$features"
cp "${CARGO_TARGET_DIR:-target}/release/hyoka" "$stage/bin/"
# The integration tests' one binary (tests/suite); gpu_check.sh runs a subject with its module
# as the filter.
cargo test --release --locked --features "$features" --no-run --message-format=json --test suite |
  python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], sys.argv[1] + "/" + m["target"]["name"])
' "$stage/tests"
# The expansion kernels timed alone (scripts/bench/bench_expand.cu), for compute capability 8.0 and on.
[ "$features" = cuda ] && nvcc -O3 -arch=sm_80 -o "$stage/bin/bench_expand" scripts/bench/bench_expand.cu
strip --strip-all "$stage"/bin/* "$stage"/tests/*

# Benchmark inputs that cannot be made there: DBDC3 items (imported here, where hyoka runs on
# the CPU), the Llama-3 and Qwen2.5 tokenizers for the synthetic judges (8B, 14B, 1.5B),
# all-MiniLM-L6-v2's tokenizer and config (gpu_check.sh gives it random weights there:
# speed does not depend on them; not under models/, where the tests would take it for the real
# model), and the Python packages the image lacks.
# (The import runs here, so with the CPU build in target/.)
env -u CARGO_TARGET_DIR cargo run --release --locked -q -- import dbdc3 data/dbdc3-ja.tar.gz \
  -o "$stage/items.jsonl" 2> /dev/null
cp -r "$models/llama-3-tokenizer" "$stage/models/"
# Qwen2.5's tokenizer for the synthetic 14B: the tokenizer.* fields of the Qwen test GGUF, no
# tensors (6 MB instead of 469). Not named as the model, which the tests would take for it.
python3 -c '
import sys
sys.path.insert(0, "scripts/fixtures")
from gguf import GGUFWriter
from synthetic_gguf import copy_tokenizer
w = GGUFWriter(sys.argv[2], "qwen2")
copy_tokenizer(w, sys.argv[1])
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
' "$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" "$stage/models/qwen2.5-tokenizer.gguf"
for f in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
  cp "$models/all-MiniLM-L6-v2/$f" "$stage/bench/minilm-tokenizer/"
done
# multilingual-e5-small's tokenizer and config, for the encoders of the Japanese defaults' shapes
# that gpu_check.sh makes with random weights (bench-bertscore-ja, device-vs-cpu).
mkdir -p "$stage/bench/e5-tokenizer"
for f in config.json tokenizer.json tokenizer_config.json; do
  cp "$models/multilingual-e5-small/$f" "$stage/bench/e5-tokenizer/"
done
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$stage/wheels" gguf==0.19.0 bert-score==0.3.13
git rev-parse HEAD > "$stage/commit"
git status --porcelain --untracked-files=no | grep -q . && echo "(uncommitted changes)" >> "$stage/commit"

# One xz stream whose window holds every binary, so that their shared code is kept once.
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=6,dict=512MiB > .gpu/bundle.tar.xz
rm -rf "$stage"
size=$(stat -c %s .gpu/bundle.tar.xz)
echo "wrote .gpu/bundle.tar.xz ($((size / 1048576)) MiB; carry limit 64 MiB with the working tree)"
