#!/usr/bin/env bash
# device-call.sh - one rented GPU call, most valuable first, every result
# written to OUT as it comes (a call cut by its time limit still returns
# what finished):
#
#   bench/cuda/device-call.sh BIN_DIR [LLAMA_BIN_DIR]
#
#   1. the GPU tests (tests/cuda/run.sh: `make test-cuda`)      suite.log
#   2. each decode GEMV's GB/s beside a read-only kernel          gemv.log
#      (bench-gemv; the Q4_K variants HR_CUDA_Q4K=warp/rows2/rows4 too)
#   3. the planner and governor's cost through `headroom serve`   gov.log
#      (0.5B Q8_0, 1 and 8 streams, governed and --no-governor)
#   4. with LLAMA_BIN_DIR (llama-bench, llama-quantize and their
#      libraries, e.g. bench/cuda/llama-prebuild.sh's): the side-by-side
#      files, then one round of vs-llama.sh                      vs-llama.log,
#      rows.txt (HR_VS_APPEND=1 to add a round to an earlier call's)
#
# BIN_DIR holds headroom, gen-model, bench-cuda, bench-gemv and
# tests/cuda/test-* (an engine-only build has no headroom: step 3 and the
# server tests are skipped); bench/cuda/gpu-pack.sh packs them from this
# machine's release build (build-gpurun/ once unpacked). OUT defaults to build-device-out.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: device-call.sh BIN_DIR [LLAMA_BIN_DIR]}
llama=${2:-}
out=${OUT:-build-device-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
t0=$(date +%s)
HR_SERVE_BIN=$bin/headroom HR_GEN_MODEL=$bin/gen-model timeout "${HR_SUITE_T:-150}" \
  tests/cuda/run.sh "$bin" "$bin/cuda-models" >"$out/suite.log" 2>&1
echo "suite: exit $? after $(($(date +%s) - t0)) s"
grep -E "passed|FAIL" "$out/suite.log" | head -40

timeout 60 "$bin/bench-gemv" --types q4_k,q8_0,f16 --shapes 8b >"$out/gemv.log" 2>&1
for v in warp rows2 rows4; do
  HR_CUDA_Q4K=$v timeout 20 "$bin/bench-gemv" --types q4_k --shapes 8b 2>&1 |
    sed "s/^bench-gemv/bench-gemv-$v/" >>"$out/gemv.log"
done
sed 's/ gpu="[^"]*"//' "$out/gemv.log" | cut -c1-200

if [[ -x $bin/headroom ]]; then
  q05=$out/q05-q8_0.gguf
  "$bin/gen-model" --shape qwen2.5-0.5b --vocab builtin --vocab-size 151936 --row-streams \
    --type q8_0 --out "$q05" >/dev/null 2>&1
  for r in 1 2; do
    for a in "" "--no-governor"; do
      echo "round=$r args='$a' $(HR_SERVE_ARGS="$a" timeout 60 python3 bench/cuda/serve-batch.py \
        "$bin/headroom" "$q05" 1 8 2>&1 | grep '^serve-batch' | tr '\n' ' ')"
    done
  done | tee "$out/gov.log"
  rm -f "$q05"
fi

if [[ -n $llama ]]; then
  export LD_LIBRARY_PATH=$llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [[ ${HR_VS_APPEND:-0} != 1 ]]; then
    t0=$(date +%s)
    timeout 240 bench/cuda/vs-llama.sh models "$bin" "$llama" >"$out/models.log" 2>&1
    echo "models: exit $? after $(($(date +%s) - t0)) s"
  fi
  (while sleep 10; do cp build-vsllama/rows.txt "$out/rows.txt" 2>/dev/null; done) &
  cpl=$!
  LLAMA_BENCH=$llama/llama-bench HR_BENCH_CUDA=$bin/bench-cuda HR_VS_TESTS=0 \
    HR_SERVE_BIN=/nonexistent timeout "${HR_VS_T:-400}" bench/cuda/vs-llama.sh run 1 \
    >"$out/vs-llama.log" 2>&1
  kill $cpl
  cp build-vsllama/rows.txt "$out/rows.txt" 2>/dev/null
  tail -30 "$out/vs-llama.log"
fi
