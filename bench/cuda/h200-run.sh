#!/usr/bin/env bash
# h200-run.sh - one device call's worth of CUDA work: build the engine-only
# tree, run the GPU tests (also with decode graphs off), then the llama-bench
# rows of bench-cuda on the shapes issue 17 compares with llama.cpp, and the
# same-call A/B runs of each speed switch. Prints a short table last; full
# logs go to $OUT (or /tmp) when set.
#
#   bench/cuda/h200-run.sh MODELS_DIR [quick]
#
# MODELS_DIR holds the test models (tests/cuda/run.sh makes them with
# build/gen-model on a machine that has it; copy them along). `quick` skips
# the A/B runs. About 4.5 minutes on an H200 from a cold machine, build
# included (2026-12-02).
#
# The switches (env): HR_CUDA_GEMM=simt (f32 GEMM instead of cuBLASLt on
# tensor cores), HR_CUDA_GEMV=float|generic (float GEMVs instead of the
# integer dp4a ones; generic: every type on the generic kernel),
# HR_CUDA_ATTN=warp (one warp per token and head instead of the tiled
# prefill attention), HR_CUDA_GRAPH=0 (no decode graphs).
set -uo pipefail
cd "$(dirname "$0")/../.."
models=${1:?usage: bench/cuda/h200-run.sh MODELS_DIR [quick]}
quick=${2:-}
out=${OUT:-/tmp}
tests/cuda/gpu-host.sh "$models" >"$out/tests.log" 2>&1
echo "tests exit $?"
grep -E "FAIL|passed|GPU tests" "$out/tests.log"
T=build-gpu/tests/cuda
HR_CUDA_GRAPH=0 "$T/test-cuda-engine" "$models/qwen3-q4_k.gguf" "$models/qwen3-f16.gguf" \
  >"$out/tests-nograph.log" 2>&1
grep -E "FAIL|passed" "$out/tests-nograph.log" | sed 's/^/HR_CUDA_GRAPH=0 /'
B=build-gpu/bench/bench-cuda
run() { timeout 120 "$B" "$@" 2>&1 | tee -a "$out/bench.txt" | grep '^bench-cuda-llama'; }
for a in "llama-3-8b q4_k" "llama-3-8b q8_0" "llama-3-8b f16" "qwen2.5-0.5b q8_0"; do
  set -- $a
  run --shape "$1" --type "$2"
done
[[ $quick == quick ]] && exit 0
HR_CUDA_GRAPH=0 run --shape qwen2.5-0.5b --type q8_0
HR_CUDA_GRAPH=0 run --shape llama-3-8b --type q4_k
HR_CUDA_ATTN=warp run --shape llama-3-8b --type q4_k
HR_CUDA_GEMV=float run --shape llama-3-8b --type q8_0
