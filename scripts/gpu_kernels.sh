#!/bin/bash
# hyoka's own CUDA kernels (fused attention, bf16 expansion of GGUF blocks) against candle's ops
# (--gpu-kernels candle) on a lent GPU, in one device call under one deadline (this
# project's machines: 15 minutes of device time a session, 64 MiB carried, no cargo there).
# Build the bundle here first (`scripts/gpu_bundle.sh`, ~7 min), then, carrying .gpu:
#   run: scripts/gpu_kernels.sh 500 2>&1 | tail -c 11000        (timeout_s ≥ deadline + 30)
# Logs go to $OUT/logs.tgz as they are written (a call cut short still returns them).
#
# 1. Correctness on the GPU, before any speed: the fused attention kernels (tensor cores and one
#    warp per query, every head dim, real judges' shapes) against attention in f64; the bf16
#    expansion kernels bit for bit against the CPU, then timed alone (scripts/bench_expand.cu:
#    every block type against a copy's bandwidth); the six architectures through the fused
#    kernels against transformers (bf16).
# 2. `hyoka bench` on a synthetic Llama-3.1-8B Q4_K_M (12 prompts of ~1,650 tokens, 128 tokens
#    decoded): stored and expanded weights, hyoka's kernels and candle's; transformers on the
#    same tokens.
# 3. json mode end to end (roleplay8-ja, 10 items): hyoka's kernels vs candle's, how far apart;
#    then where the time goes (--stage-times).
# A rehearsal of the script's paths on this machine, with a CPU bundle
# (`HYOKA_BUNDLE_FEATURES= scripts/gpu_bundle.sh`) and a small model:
#   OUT=/tmp/out HYOKA_EXP_DEVICE=cpu HYOKA_EXP_MODEL=…/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
#   HYOKA_EXP_TOKENIZER= HYOKA_EXP_N=2 scripts/gpu_kernels.sh 900
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${1:-500}; T0=$SECONDS
B=/tmp/b; X=/tmp/x; mkdir -p $B $X /tmp/synth
( while sleep 4; do tar czf "$OUT/logs.tmp.tgz" -C /tmp x 2>/dev/null && mv "$OUT/logs.tmp.tgz" "$OUT/logs.tgz"; done ) &
LOOP=$!
left() { echo $((DEADLINE - (SECONDS - T0))); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpu/bundle.tar.xz $B
python3 -m pip install -q --no-index --no-deps --target $B/site $B/wheels/*.whl > $X/wheels.log 2>&1
echo "unpacked at $((SECONDS - T0)) s: $(head -1 $B/commit)"
LIBS="$(python3 -c 'import glob, os, site
dirs = {os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/**/lib*.so.*", recursive=True)}
print(":".join(sorted(dirs)))'):/usr/local/nvidia/lib64"
DEV=${HYOKA_EXP_DEVICE:-cuda}; N=${HYOKA_EXP_N:-12}
# HYOKA_EXP_SHAPE=qwen-14b: the synthetic Qwen2.5-14B instead (its tokenizer in the file).
SHAPE=${HYOKA_EXP_SHAPE:-llama-8b}; H=$B/bin/hyoka; G=${HYOKA_EXP_MODEL:-/tmp/synth/$SHAPE-q4_k_m.gguf}
SOURCE=(--models $B/models); TOKDEF=$B/models/llama-3-tokenizer
[ "$SHAPE" = qwen-14b ] && SOURCE=(--tokenizer-from $B/models/qwen2.5-tokenizer.gguf) TOKDEF=
TOK=(--tokenizer "${HYOKA_EXP_TOKENIZER-$TOKDEF}"); [ -n "${TOK[1]}" ] || TOK=()
run() { # NAME MIN_LEFT COMMAND...: its output in $X/NAME.log
  local name=$1 min=$2; shift 2; local l; l=$(left)
  if [ "$l" -lt "$min" ]; then echo "== skipped ($l s left): $name"; return; fi
  local t=$SECONDS
  env LD_LIBRARY_PATH="$LIBS" PYTHONPATH=$B/site timeout "$l" "$@" > $X/$name.log 2>&1
  echo "== $name: rc $? ($((SECONDS - t)) s, $(left) s left)"
}
last_json='
import json, os
def last_json(p):
    if not os.path.exists(p): return None
    t = open(p).read()
    try: return json.loads(t[t.rindex("\n{") + 1:] if "\n{" in t else t[t.index("{"):])
    except ValueError: return None
'

# 1. correctness
T=(env CARGO_MANIFEST_DIR="$PWD" HYOKA_TEST_DEVICE=$DEV HYOKA_TEST_DTYPE=bf16 HYOKA_SKIP_MODEL_TESTS=1)
# HYOKA_EXP_BENCH_ONLY=1 skips this (a second call, another shape).
[ -n "${HYOKA_EXP_BENCH_ONLY:-}" ] || {
run fused-kernels 60 "${T[@]}" $B/tests/fused_attention --test-threads 1 --nocapture fused_attention_
run expand-kernels 30 "${T[@]}" $B/tests/expand_kernels --nocapture on_the_gpu
[ -x $B/bin/bench_expand ] && run expand-speed 30 $B/bin/bench_expand && cat $X/expand-speed.log
run fused-models 60 "${T[@]}" $B/tests/runtime_parity --nocapture fused_attention_matches_transformers
grep -hE "worst|bit for bit|panicked|test result" $X/fused-kernels.log $X/expand-kernels.log $X/fused-models.log |
  sed -e 's/Case { rows: \([0-9]*\), heads: \([0-9]*\), kv_heads: \([0-9]*\), d: \([0-9]*\),/r\1 h\2\/\3 d\4/' \
      -e 's/window: None, softcap: None, //' | cut -c1-170
}

# 2. speed
[ -e $G ] || run synthetic 60 python3 scripts/synthetic_gguf.py --shape $SHAPE --quant q4_k_m -o $G "${SOURCE[@]}"
# 128 decoded tokens (~1.3 s a run for one sequence of the 8B): with 32, one sequence's figure
# moved by ±20% between runs of one binary; HYOKA_EXP_DECODE changes it.
BENCH=($H bench --device $DEV --model $G --input $B/items.jsonl --decode-tokens ${HYOKA_EXP_DECODE:-128} "${TOK[@]}")
bench() { # NAME KERNELS [flags]
  local name=$1 kernels=$2; shift 2
  run bench-$name 45 "${BENCH[@]}" --gpu-kernels "$kernels" --n ${PROMPTS:-$N} "$@"
}
bench stored hyoka --dump-tokens $X/tokens.json
bench stored-candle candle
bench expanded hyoka --weights expanded
bench expanded-candle candle --weights expanded
run transformers 40 python3 scripts/bench_torch_prefill.py $G $X/tokens.json --device $DEV --decode-tokens 0
bench stored-again hyoka
python3 -c "$last_json"'
import glob
keys = ("prefill_batch1_tok_s", "prefill_batched_tok_s", "judge_items_s", "decode_batch1_tok_s", "decode_batched_tok_s")
print("%-22s" % "tok/s, judge items/s" + "".join("%16s" % k.replace("_tok_s", "").replace("_items_s", "") for k in keys))
for p in sorted(glob.glob("/tmp/x/bench-*.log"), key=os.path.getmtime):
    if (h := last_json(p)) and all(k in h for k in keys):
        print("%-22s" % os.path.basename(p)[6:-4] + "".join("%16.1f" % h[k] for k in keys))
t = last_json("/tmp/x/transformers.log")
if t: print("transformers prefill %.0f tok/s" % t["prefill_tok_s"])
'

# 3. json mode end to end, then where the time goes
head -${HYOKA_EXP_ITEMS:-10} $B/items.jsonl > $X/items10.jsonl
sed 's/^reason_max_tokens = .*/reason_max_tokens = 128/' prompts/roleplay8-ja.toml > $X/rp128.toml
J=($H judge --rubric $X/rp128.toml --model $G "${TOK[@]}" --device $DEV --input $X/items10.jsonl --overwrite)
run e2e-candle 40 "${J[@]}" --gpu-kernels candle -o $X/e2e-candle.jsonl
run e2e-hyoka 40 "${J[@]}" -o $X/e2e-hyoka.jsonl
python3 -c '
import json, os
def load(p): return {d["id"]: d for d in map(json.loads, open(p))} if os.path.exists(p) else None
a, b = load("/tmp/x/e2e-candle.jsonl"), load("/tmp/x/e2e-hyoka.jsonl")
if a and b:
    de = 0.0; text = 0
    for k in a:
        text += (a[k].get("answer"), a[k].get("reason")) == (b[k].get("answer"), b[k].get("reason"))
        for asp, s in a[k]["scores"].items():
            de = max(de, abs(s["expected"] - b[k]["scores"][asp]["expected"]))
    print(f"json mode, hyoka kernels vs candle: {len(a)} items, same text {text}, max |dexpected| {de:.3g}")
'
grep -H "scor\|items/s" $X/e2e-*.log | tail -4
PROMPTS=$(( N < 6 ? N : 6 )) bench stored-stages hyoka --stage-times
python3 -c "$last_json"'
r = last_json("/tmp/x/bench-stored-stages.log") or {}
for m, st in (r.get("stage_seconds") or {}).items():
    top = sorted(st.items(), key=lambda x: -x[1]["seconds"])[:8]
    print("-- %s: " % m + ", ".join("%s %.3f" % (s, v["seconds"]) for s, v in top))
'
echo "== done at $((SECONDS - T0)) s"
kill $LOOP; sleep 1; rm -f "$OUT/logs.tmp.tgz"; tar czf "$OUT/logs.tgz" -C /tmp x
