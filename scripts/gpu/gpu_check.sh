#!/usr/bin/env bash
# The GPU check, in one command: the parity suites on a GPU in bf16, f16 and f32 (the same tests
# the CPU runs, device and dtype from HYOKA_TEST_DEVICE / HYOKA_TEST_DTYPE, tolerances per dtype
# in each test), then the GPU benchmarks: BERTScore next to bert_score, judge prefill and decoding
# next to transformers on the same tokens (Qwen2.5-0.5B when present, and a random-weight GGUF of
# Llama-3.1-8B's shapes from scripts/fixtures/synthetic_gguf.py).
# Usage: scripts/gpu/gpu_check.sh [DEVICE]   (default cuda; metal on Apple GPUs)
#   HYOKA_GPU_STEPS    which steps (default: "suites attention bench-bertscore bench-judge";
#                      also "judge-e2e": `hyoka judge` on 10 items with the synthetic judges;
#                      "device-vs-cpu": eval (judge, BERTScore, FED), translate, compare and a json
#                      judge with a random-weight judge of Qwen2.5-1.5B's shapes and encoder of
#                      multilingual-e5-small's, on the device and on the CPU, outputs compared;
#                      "bench-bertscore-ja": BERTScore in f32, tf32, bf16 and f16 with encoders of
#                      multilingual-e5-small's and bert-base-multilingual-cased's shapes next to
#                      bert_score f32 and fp16; "judge-items": `hyoka judge` on HYOKA_JUDGE_ITEMS
#                      (1000) items in score mode and HYOKA_JSON_ITEMS (100) in json mode, each
#                      synthetic shape); HYOKA_BENCH_PAIRS (20000; bench-bertscore-ja: 100000),
#                      HYOKA_REF_PAIRS (20000), HYOKA_BENCH_ITEMS (20) size the benchmarks
#   HYOKA_GPU_DTYPES   the suites' dtypes (default "bf16 f16 f32")
#   HYOKA_GPU_SUITES   which suites (default: every one that takes a device and dtype)
#   HYOKA_SYNTH_SHAPES the synthetic judges of bench-judge (default "llama-8b"; also "qwen-14b"),
#                      in each of HYOKA_SYNTH_QUANTS (default "q4_k_m"; also q5_k_m, q3_k_m, q2_k),
#                      each also with --weights expanded where HYOKA_BENCH_EXPANDED=1, and
#                      where HYOKA_BENCH_STAGES=1 a short run with --stage-times (where the
#                      time goes, stored and expanded: 6 prompts, 16 tokens decoded); their
#                      files are written once into HYOKA_SYNTH_DIR (~/.cache/hyoka/synthetic)
#   HYOKA_STEP_TIMEOUT seconds after which a step is stopped and counts as failed (default none)
#   HYOKA_GPU_DEADLINE a time (seconds since the epoch) past which no step starts or runs
#   HYOKA_E5_TOKENIZER a folder with multilingual-e5-small's config.json, tokenizer.json and
#                      tokenizer_config.json (default: the bundle's, else the test model's)
#   HYOKA_GPU_LOGS     the folder for the steps' logs (default: a new temporary one); a bundle
#                      already unpacked there is used again (a second call on the same machine)
#   HYOKA_GPU_BUNDLE   .gpu/bundle.tar.xz from scripts/gpu/gpu_bundle.sh: use its binaries instead of
#                      building (a GPU machine without cargo); its items, tokenizers and wheels
#                      stand in for the dataset and test models; tests needing a model that is
#                      not there are skipped (HYOKA_SKIP_MODEL_TESTS=1) and say so.
# Otherwise needs cargo, nvcc (scripts/gpu/cuda_toolchain.sh installs one from PyPI) and the test
# models (python3 scripts/fetch_test_models.py). The benchmarks need torch, transformers, gguf
# and bert-score in $HYOKA_REF_PYTHON (default python3). Prints one PASS/FAIL line per step and
# the worst differences seen; exits non-zero when a step fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
device="${1:-cuda}"
feature="${device%%:*}"
steps=" ${HYOKA_GPU_STEPS:-suites attention bench-bertscore bench-judge} "
log="${HYOKA_GPU_LOGS:-$(mktemp -d)}"
mkdir -p "$log"
status=0
py="${HYOKA_REF_PYTHON:-python3}"
step() { # NAME COMMAND...: run, keep the log, print PASS/FAIL and the worst differences seen
  local name="$1"; shift
  local t0=$SECONDS limit="${HYOKA_STEP_TIMEOUT:-}"
  if [ -n "${HYOKA_GPU_DEADLINE:-}" ]; then
    # No step starts past the deadline, and none runs beyond it.
    local left=$((HYOKA_GPU_DEADLINE - $(date +%s)))
    if [ "$left" -lt 5 ]; then echo "SKIP  $name (deadline)"; status=1; return; fi
    [ -z "$limit" ] || [ "$left" -lt "$limit" ] && limit=$left
  fi
  if ${limit:+timeout "$limit"} "$@" > "$log/$name.log" 2>&1; then echo "PASS  $name ($((SECONDS - t0)) s)"; else echo "FAIL  $name ($((SECONDS - t0)) s; log: $log/$name.log)"; status=1; fi
  # The tests' verdicts, what they skipped, and the three worst differences they printed.
  grep -h "test result\|panicked" "$log/$name.log" | sed 's/^/      /' | head -8
  grep -h "skipping" "$log/$name.log" | sort -u | sed 's/^/      /'
  grep -h "worst\|max |Δ" "$log/$name.log" | awk '{print $NF "\t" $0}' | sort -g | tail -3 | cut -f2- | sed 's/^/      /'
}
wants() { [[ "$steps" == *" $1 "* ]]; }
command -v nvidia-smi > /dev/null &&
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
# The subjects of the test suite (tests/suite, a module each) that take their device and dtype
# from the environment.
read -ra suites <<< "${HYOKA_GPU_SUITES:-runtime_parity judge_parity gguf_parity bertscore_parity gguf_converter backend_ops fused_attention decode_attention expand_kernels stored_weights}"
if [ -n "${HYOKA_GPU_BUNDLE:-}" ]; then
  b="$log/bundle"
  if [ ! -e "$b/commit" ]; then
    mkdir -p "$b"
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$HYOKA_GPU_BUNDLE" "$b" || exit 1
  fi
  echo "bundle of $(tr '\n' ' ' < "$b/commit")"
  bin="$b/bin/hyoka"
  items="$b/items.jsonl"
  export HYOKA_TEST_MODELS="${HYOKA_TEST_MODELS:-$b/models}" HYOKA_SKIP_MODEL_TESTS=1 CARGO_MANIFEST_DIR="$PWD"
  # The CUDA libraries hyoka links (cuBLAS, cuRAND, the runtime): PyTorch's wheels carry them.
  libs=$("$py" -c 'import glob, os, site
dirs = {os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/**/lib*.so.*", recursive=True)}
print(":".join(sorted(dirs)))')
  # The driver's libcuda.so.1, where NVIDIA's container images mount it.
  [ -d /usr/local/nvidia/lib64 ] && libs="$libs:/usr/local/nvidia/lib64"
  export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
  [ -d "$b/site" ] || "$py" -m pip install -q --no-index --no-deps --target "$b/site" "$b"/wheels/*.whl > "$log/wheels.log" 2>&1
  export PYTHONPATH="$b/site:${PYTHONPATH:-}"
  suite_cmd() { cmd=("$b/tests/suite" "$1::" "${@:2}"); }
else
  if [ "$feature" = cuda ] && ! command -v nvcc > /dev/null; then eval "$(scripts/gpu/cuda_toolchain.sh)"; fi
  step build cargo build --release --features "$feature"
  bin=target/release/hyoka
  items="$log/items.jsonl"
  step import "$bin" import dbdc3 data/dbdc3-ja.tar.gz -o "$items"
  suite_cmd() { cmd=(cargo test --release --features "$feature" --test suite -- "$1::" "${@:2}"); }
fi
models="${HYOKA_TEST_MODELS:-$HOME/.cache/hyoka/test-models}"
for dtype in ${HYOKA_GPU_DTYPES:-bf16 f16 f32}; do
  if wants suites; then
    for s in "${suites[@]}"; do
      suite_cmd "$s" --nocapture
      step "$s-$dtype" env HYOKA_TEST_DEVICE="$device" HYOKA_TEST_DTYPE="$dtype" "${cmd[@]}"
      # Each block type's share of its bounds: which kernel is less exact than the CPU's.
      [ "$s" = backend_ops ] && grep -h "of its bound" "$log/$s-$dtype.log" | sed 's/^/      /'
    done
  fi
  if wants attention; then
    suite_cmd attention_scale --ignored --nocapture
    step "attention-2^31-$dtype" env HYOKA_TEST_DEVICE="$device" HYOKA_TEST_DTYPE="$dtype" "${cmd[@]}"
  fi
done
if wants bench-bertscore; then
  bench_models="$models"
  if [ -n "${b:-}" ] && [ ! -e "$models/all-MiniLM-L6-v2/model.safetensors" ]; then
    # The bundle carries all-MiniLM-L6-v2's tokenizer and config only: random weights (seeded)
    # of its shapes. Both sides load the same folder, so the speed ratio and max |ΔF| mean what
    # they mean with the real weights.
    bench_models="$log/random-models"
    mkdir -p "$bench_models/all-MiniLM-L6-v2"
    cp "$b"/bench/minilm-tokenizer/* "$bench_models/all-MiniLM-L6-v2/"
    "$py" -c 'import sys, torch, transformers
torch.manual_seed(0)
transformers.BertModel(transformers.BertConfig.from_pretrained(sys.argv[1])).save_pretrained(sys.argv[1])' \
      "$bench_models/all-MiniLM-L6-v2" > "$log/minilm.log" 2>&1
  fi
  step bench-bertscore env HYOKA_BIN="$bin" HYOKA_ITEMS="$items" HYOKA_TEST_MODELS="$bench_models" \
    scripts/bench/bench_bertscore.sh "${HYOKA_BENCH_PAIRS:-20000}" "$(nproc)" "$device"
  grep -h "pairs/s\|MiB" "$log/bench-bertscore.log" | grep -v "max |Δ" | sed 's/^/      /'
fi
watched() { # NAME COMMAND...: `step`, with the GPU's memory sampled every 100 ms into NAME.mem
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$log/$1.mem" 2> /dev/null &
  local smi=$!
  step "$@"
  kill "$smi" 2> /dev/null
}
bench_judge() { # NAME GGUF [hyoka flags...]: hyoka bench and transformers on the same token ids,
  # and hyoka with every weight expanded at load where HYOKA_BENCH_EXPANDED=1 (the issue's
  # comparison of weights kept quantized with expanded ones)
  local name="$1" gguf="$2"; shift 2
  local run=("$bin" bench --device "$device" --model "$gguf" --input "$items" "$@")
  local bench=("${run[@]}" --n "${HYOKA_BENCH_ITEMS:-20}" --decode-tokens 64)
  watched "$name" "${bench[@]}" --dump-tokens "$log/$name.tokens.json"
  local dtype  # hyoka's, for transformers too
  dtype=$(grep -o '"dtype": "[a-z0-9]*"' "$log/$name.log" | head -1 | cut -d'"' -f4)
  step "$name-transformers" "$py" scripts/bench/bench_torch_prefill.py "$gguf" "$log/$name.tokens.json" \
    --device "$device" --decode-tokens 64 ${dtype:+--dtype "$dtype"}
  rm -f "$log/$name-expanded.log" "$log/$name-stages.log" "$log/$name-stages-expanded.log"
  [ "${HYOKA_BENCH_EXPANDED:-0}" = 1 ] && watched "$name-expanded" "${bench[@]}" --weights expanded
  if [ "${HYOKA_BENCH_STAGES:-0}" = 1 ]; then
    local short=("${run[@]}" --n 6 --decode-tokens 16 --stage-times)
    step "$name-stages" "${short[@]}"
    step "$name-stages-expanded" "${short[@]}" --weights expanded
  fi
  python3 - "$log/$name" <<'PY'
import json, os, sys
base = sys.argv[1]
def last_json(path):  # the report that follows the progress lines
    text = open(path).read()
    return json.loads(text[text.rindex("\n{") + 1:] if "\n{" in text else text[text.index("{"):])
def peak(path):
    return max([int(x) for x in open(path).read().split() if x.isdigit()] or [0])
try:
    h = last_json(base + ".log")
    t = last_json(base + "-transformers.log")
    e = last_json(base + "-expanded.log") if os.path.exists(base + "-expanded.log") else None
except (OSError, ValueError) as err:
    sys.exit(f"      no figures: {err}")
r = lambda a, b: f"{a:8.1f} ({a / b:.2f}x transformers)" if a and b else f"{a}"  # noqa: E731
print(f"      {h['items']} prompts, mean {h['mean_prompt_tokens']:.0f} tokens; {t['engine']}")
print(f"      prefill tok/s batch 1  {r(h['prefill_batch1_tok_s'], t['prefill_tok_s'])}; transformers {t['prefill_tok_s']:.1f}")
print(f"      prefill tok/s batched  {h['prefill_batched_tok_s']:8.1f}; judge layout {h['judge_items_s']:.2f} items/s")
print(f"      decode tok/s batch 1   {r(h['decode_batch1_tok_s'], t['decode_batch1_tok_s'])}; "
      f"{h['decode_rows']} rows together {h['decode_batched_tok_s']:.1f}")
print(f"      peak GPU memory: hyoka {peak(base + '.mem')} MiB (nvidia-smi, whole GPU), "
      f"transformers {t['peak_gpu_gb'] or 0:.1f} GB (allocated)")
if e:
    for k in ("prefill_batch1_tok_s", "prefill_batched_tok_s", "judge_items_s", "decode_batch1_tok_s", "decode_batched_tok_s"):
        print(f"      {k:22} stored {h[k]:9.2f}  expanded {e[k]:9.2f}  ({h[k] / e[k]:.2f}x)")
    print(f"      peak GPU memory expanded: {peak(base + '-expanded.mem')} MiB")
# `--stage-times`: each measurement's own seconds per stage, stored | expanded.
def stage_seconds(path):
    try:
        return last_json(path).get("stage_seconds", {})
    except (OSError, ValueError):
        return {}
stages = {w: stage_seconds(f"{base}-stages{s}.log") for w, s in (("stored", ""), ("expanded", "-expanded"))}
stages = {w: r for w, r in stages.items() if r}
for m in ("prefill_batch1", "prefill_batched", "judge", "decode_batch1", "decode_batched") if stages else ():
    print(f"      {m}: own seconds (calls), " + " | ".join(stages))
    for s in list(dict.fromkeys(s for r in stages.values() for s in r.get(m, {}))) + ["total"]:
        cells = []
        for r in stages.values():
            st = r.get(m, {})
            v = sum(x["seconds"] for x in st.values()) if s == "total" else st.get(s, {}).get("seconds", 0)
            cells.append(f"{v:8.3f}" + ("" if s == "total" else f" ({st.get(s, {}).get('calls', 0)})"))
        print(f"        {s:38} " + " | ".join(cells))
PY
}
synth_dir="${HYOKA_SYNTH_DIR:-$HOME/.cache/hyoka/synthetic}"
synthetic() { # SHAPE [QUANT]: sets gguf (written once, in $synth_dir) and flags (hyoka's for it)
  local quant="${2:-q4_k_m}"
  gguf="$synth_dir/$1-$quant.gguf" flags=()
  local source=(--models "$models")
  case "$1" in
    llama-8b) flags=(--tokenizer "$models/llama-3-tokenizer") ;;
    # A bundle carries Qwen2.5's tokenizer alone (scripts/gpu/gpu_bundle.sh), not the Qwen model.
    qwen-*) [ -e "$models/qwen2.5-tokenizer.gguf" ] && source=(--tokenizer-from "$models/qwen2.5-tokenizer.gguf") ;;
  esac
  if [ ! -e "$gguf" ]; then
    mkdir -p "$synth_dir"
    step "synthetic-$1-$quant" "$py" scripts/fixtures/synthetic_gguf.py --shape "$1" --quant "$quant" -o "$gguf" "${source[@]}"
  fi
}
shapes="${HYOKA_SYNTH_SHAPES:-llama-8b}"
if wants bench-judge; then
  qwen="$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
  [ -e "$qwen" ] && bench_judge bench-judge-qwen0.5b "$qwen"
  for shape in $shapes; do
    for quant in ${HYOKA_SYNTH_QUANTS:-q4_k_m}; do
      synthetic "$shape" "$quant"
      bench_judge "bench-judge-$shape-$quant" "$gguf" "${flags[@]}"
    done
  done
fi
random_encoders() { # random-weight BERT encoders (seeded) with the tokenizer of multilingual-e5-small:
  # its own shapes, and bert-base-multilingual-cased's layers (12 x 768; that model's WordPiece
  # vocabulary is not in a registry package, so the sentences' token counts are XLM-R's)
  enc="$log/random-encoders"
  [ -e "$enc/mbert-shape/model.safetensors" ] && return
  local src="${HYOKA_E5_TOKENIZER:-$models/multilingual-e5-small}"
  [ -z "${HYOKA_E5_TOKENIZER:-}" ] && [ -n "${b:-}" ] && src="$b/bench/e5-tokenizer"
  "$py" - "$src" "$enc" > "$log/random-encoders.log" 2>&1 <<'PY'
import json, shutil, sys
import torch, transformers
src, enc = sys.argv[1], sys.argv[2]
for name, shape in (("e5-small", {}), ("mbert-shape", dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12))):
    cfg = json.load(open(f"{src}/config.json"))
    cfg.update(shape)
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(**cfg)).save_pretrained(f"{enc}/{name}")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{src}/{f}", f"{enc}/{name}/{f}")
PY
}
if wants device-vs-cpu; then
  # HEAD's whole surface on the device against the CPU on the same files: eval (judge, BERTScore,
  # FED, meta), translate, compare (pairwise) and a json-mode judge. f32 on the device must agree
  # with the CPU to 1e-3 in every number; the device's default dtype is reported.
  random_encoders
  synthetic qwen-1.5b
  e2e="$log/device-vs-cpu"
  mkdir -p "$e2e"
  head -4 "$items" > "$e2e/items4.jsonl"
  sed 's/^reason_max_tokens = .*/reason_max_tokens = 32/' prompts/roleplay8-ja.toml > "$e2e/roleplay8-ja-32.toml"
  for run in "cpu cpu" "cuda-f32 $device --dtype f32" "cuda $device"; do
    read -r tag dev dtype <<< "$run"
    on=(--device "$dev" ${dtype:+$dtype})
    step "eval-$tag" "$bin" eval --import dbdc3 data/dbdc3-ja.tar.gz --sample-dialogues 1 \
      --rubric examples/breakdown-ja.toml --model "$gguf" "${flags[@]}" --bertscore-model "$enc/e5-small" \
      --layer 12 --likelihood fed-ja "${on[@]}" -o "$e2e/$tag/eval" --overwrite
    step "translate-$tag" "$bin" translate -i "$e2e/items4.jsonl" -o "$e2e/$tag/translated.jsonl" \
      --model "$gguf" "${flags[@]}" --max-new-tokens 24 --keep-unfinished "${on[@]}" --overwrite
    step "compare-$tag" "$bin" compare --rubric breakdown-pair-ja --model "$gguf" "${flags[@]}" \
      -i examples/pairs-ja.jsonl -o "$e2e/$tag/pairs.jsonl" "${on[@]}" --overwrite
    step "json-$tag" "$bin" judge --rubric "$e2e/roleplay8-ja-32.toml" --model "$gguf" "${flags[@]}" \
      -i "$e2e/items4.jsonl" -o "$e2e/$tag/json.jsonl" "${on[@]}" --overwrite
  done
  python3 scripts/gpu/compare_outputs.py "$e2e/cpu" "$e2e/cuda-f32" --label "      f32 device vs CPU: " --tolerance 1e-3 || status=1
  python3 scripts/gpu/compare_outputs.py "$e2e/cpu" "$e2e/cuda" --label "      default dtype vs CPU f32: "
fi
if wants bench-bertscore-ja; then
  random_encoders
  step bench-bertscore-ja "$py" scripts/bench/bench_bertscore_dtypes.py "$items" --hyoka "$bin" --device "$device" \
    --encoder "$enc/e5-small:12:e5-small" --encoder "$enc/mbert-shape:9:mbert-shape" \
    --pairs "${HYOKA_BENCH_PAIRS:-100000}" --ref-pairs "${HYOKA_REF_PAIRS:-20000}" --json "$log/bench-bertscore-ja.json"
  grep -h "pairs/s" "$log/bench-bertscore-ja.log" | sed 's/^/      /'
fi
if wants judge-items; then
  # `hyoka judge` as a workstation user runs it: score mode (dialogue6-ja) on 1,000 DBDC3 items and
  # json mode (roleplay8-ja, reasons of at most 128 tokens) on 100, items/s and peak GPU memory.
  sed 's/^reason_max_tokens = .*/reason_max_tokens = 128/' prompts/roleplay8-ja.toml > "$log/roleplay8-ja-128.toml"
  head -"${HYOKA_JUDGE_ITEMS:-1000}" "$items" > "$log/items-score.jsonl"
  head -"${HYOKA_JSON_ITEMS:-100}" "$items" > "$log/items-json.jsonl"
  for shape in $shapes; do
    synthetic "$shape"
    for mode in score json; do
      rubric=dialogue6-ja
      [ "$mode" = json ] && rubric="$log/roleplay8-ja-128.toml"
      t0=$SECONDS
      watched "items-$shape-$mode" "$bin" judge --rubric "$rubric" --model "$gguf" "${flags[@]}" \
        --device "$device" -i "$log/items-$mode.jsonl" -o "$log/items-$shape-$mode.jsonl" --overwrite
      n=$(wc -l < "$log/items-$mode.jsonl")
      peak=$(tr -s ' \n' '\n' < "$log/items-$shape-$mode.mem" | grep -E '^[0-9]+$' | sort -n | tail -1)
      echo "      $shape $mode: $n items in $((SECONDS - t0)) s (load included) = $(python3 -c "print(f'{$n / max(1, $SECONDS - $t0):.2f}')") items/s; peak GPU memory ${peak:-?} MiB"
      grep -h "^scored" "$log/items-$shape-$mode.log" | sed 's/^/        /'
    done
  done
fi
if wants judge-e2e; then
  # The whole pipeline on the device, as a user runs it: prompt scores (dialogue6-ja) and json
  # mode (roleplay8-ja, reason_max_tokens 128) on 10 items, results and provenance on file.
  head -10 "$items" > "$log/items10.jsonl"
  sed 's/^reason_max_tokens = .*/reason_max_tokens = 128/' prompts/roleplay8-ja.toml > "$log/roleplay8-ja-128.toml"
  judge_items() { # NAME RUBRIC [hyoka flags...]: `hyoka judge` on the 10 items into NAME.jsonl
    local name="$1" rubric="$2"; shift 2
    watched "$name" "$bin" judge --rubric "$rubric" --model "$gguf" "${flags[@]}" \
      --input "$log/items10.jsonl" -o "$log/$name.jsonl" --overwrite "$@"
  }
  for shape in $shapes; do
    synthetic "$shape"
    base="judge-$shape-dialogue6-ja"
    judge_items "$base" dialogue6-ja --device "$device"
    judge_items "judge-$shape-roleplay8-ja-128" "$log/roleplay8-ja-128.toml" --device "$device"
    if [ "$device" != cpu ]; then
      # The device against the CPU on a whole judge of real size (as llama.cpp's test-backend-ops
      # checks each backend against the CPU): the same prompt scores in f32 on both, and in the
      # device's default dtype. f32 must agree to 1e-3 in every expected score.
      judge_items "$base-f32" dialogue6-ja --device "$device" --dtype f32
      judge_items "$base-cpu" dialogue6-ja --device cpu
    fi
    python3 - "$log" "judge-$shape" <<'PY' || status=1
import json, os, sys
log, prefix = sys.argv[1], sys.argv[2]
def scores(name):
    with open(f"{log}/{name}.jsonl", encoding="utf-8") as f:
        return {r["id"]: r["scores"] for r in map(json.loads, f)}
for name in (f"{prefix}-dialogue6-ja", f"{prefix}-roleplay8-ja-128"):
    try:
        rows = len(scores(name))
    except OSError:
        rows = 0
    mem = [int(x) for x in open(f"{log}/{name}.mem").read().split() if x.isdigit()] or [0]
    print(f"      {name}: {rows} rows; peak GPU memory {max(mem)} MiB (idle {min(mem)})")
    for line in open(f"{log}/{name}.log", encoding="utf-8", errors="replace"):
        if line.startswith(("scored", "forward")):
            print(f"        {line.strip()[:160]}")
base = f"{prefix}-dialogue6-ja"
if os.path.exists(f"{log}/{base}-cpu.log"):
    try:
        cpu, f32, default = (scores(base + s) for s in ("-cpu", "-f32", ""))
    except OSError as err:
        sys.exit(f"      no scores: {err}")
    for name, dev in (("f32", f32), ("default dtype", default)):
        de = max(abs(dev[i][a]["expected"] - cpu[i][a]["expected"]) for i in cpu for a in cpu[i])
        dp = max(abs(dev[i][a]["distribution"].get(k, 0) - p) for i in cpu for a in cpu[i]
                 for k, p in cpu[i][a]["distribution"].items())
        print(f"      device {name} vs CPU f32, {len(cpu)} items: max |Δexpected| {de:.2e}, max |Δp| {dp:.2e}")
        if name == "f32" and de > 1e-3:
            sys.exit("      FAIL: f32 on the device differs from the CPU by more than 1e-3")
PY
  done
fi
echo "logs: $log"
exit $status
