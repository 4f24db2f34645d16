#!/usr/bin/env bash
# ab.sh - same-call A/B of the CUDA engine's switches on bench-cuda's rows,
# for one device call: alternating rounds, then the median of each
# (variant, shape, row). No llama.cpp (vs-llama.sh does that).
#
#   bench/cuda/ab.sh BENCH_CUDA ROUNDS "SHAPE TYPE" ... -- "NAME ENV..." ...
#
#   bench/cuda/ab.sh build/bench/bench-cuda 2 "llama-3-8b q4_k" "qwen2.5-0.5b q8_0" -- \
#     "default" "gqa HR_CUDA_ATTN_GQA=1" "nosplit HR_CUDA_ATTN_SPLIT=0"
#
# Each run is capped at HR_AB_TIMEOUT seconds (default 90; the 16K-context
# row without the split attention takes over a minute on the 8B shape).
set -uo pipefail
bin=${1:?usage: ab.sh BENCH_CUDA ROUNDS SHAPES... -- VARIANTS...}
rounds=${2:?}
shift 2
shapes=()
while [[ $# -gt 0 && $1 != -- ]]; do shapes+=("$1"); shift; done
shift
variants=("$@")
out=$(mktemp)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in $(seq "$rounds"); do
  for sh in "${shapes[@]}"; do
    read -r shape type <<<"$sh"
    for v in "${variants[@]}"; do
      read -r name envs <<<"$v"
      line=$(env $envs timeout "${HR_AB_TIMEOUT:-90}" "$bin" --shape "$shape" --type "$type" 2>&1 |
        grep -E '^bench-cuda|bench-cuda:' | tr '\n' ' ')
      echo "ab variant=$name round=$r $line" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
    if "shape" not in kv:
        continue
    for t in ("pp512_tok_s", "pp4096_tok_s", "tg128_tok_s", "tg128_d16384_tok_s", "decode_ms",
              "batch8_tok_s", "batch32_tok_s"):
        if t in kv:
            rows.setdefault((kv["shape"] + ":" + kv["type"], t, kv["variant"]), []).append(float(kv[t]))
print("%-20s %-20s %-10s %10s %s" % ("model", "row", "variant", "median", "rounds"))
for (m, t, v), xs in sorted(rows.items()):
    print("%-20s %-20s %-10s %10.2f %s" % (m, t, v, st.median(xs), " ".join("%.2f" % x for x in xs)))
PY
rm -f "$out"
