#!/usr/bin/env bash
# bench-cuda.sh - `make bench-cuda`: issue 21's table on this machine's GPU.
# Ours against llama.cpp built for CUDA from the source node-llama-cpp
# ships, in alternating rounds, medians and ratios, with the share of HBM
# bandwidth (decode) and of the bf16 peak (prefill) for ours
# (bench/cuda/vs-llama.sh does the work: read it for the rows).
#
#   bench/cuda/bench-cuda.sh [ROUNDS]   # default 3: ~6 min of builds, ~3 min a round
#
# llama.cpp's source: $LLAMA_SRC_TGZ, else build-llsrc/llama-src.tar.gz,
# else made here from the npm tree's git bundle (make deps-oracle installs
# it; the GPU machine has no node: bring the tarball). Or LLAMA_BIN_TGZ:
# llama-bench and llama-quantize built on another machine
# (bench/cuda/llama-prebuild.sh), which skips the build.
set -uo pipefail
cd "$(dirname "$0")/../.."
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "bench-cuda: no NVIDIA GPU answers here (nvidia-smi); nothing was run"
  exit 0
fi
# llama.cpp built elsewhere (bench/cuda/llama-prebuild.sh): no build here.
if [[ -n ${LLAMA_BIN_TGZ:-} ]]; then
  tar xzf "$LLAMA_BIN_TGZ" || exit 1
  export LD_LIBRARY_PATH=$PWD/build-llbin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  bench/cuda/vs-llama.sh models "${HR_BIN_DIR:-build}" build-llbin || exit 1
  LLAMA_BENCH=build-llbin/llama-bench HR_BENCH_CUDA=${HR_BENCH_CUDA:-build/bench/bench-cuda} \
    MODELS=${MODELS:-build/cuda-models} bench/cuda/vs-llama.sh run "${1:-3}"
  exit
fi
src=${LLAMA_SRC_TGZ:-build-llsrc/llama-src.tar.gz}
if [[ ! -f $src ]]; then
  bundle=tests/oracle/node_modules/node-llama-cpp/llama/gitRelease.bundle
  if [[ ! -f $bundle ]]; then
    echo "bench-cuda: no llama.cpp source: set LLAMA_SRC_TGZ, or run make deps-oracle" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$src")" && rm -rf build-llsrc/git &&
    git clone -q "$bundle" build-llsrc/git &&
    git -C build-llsrc/git archive --format=tar.gz -o "$PWD/$src" HEAD -- . ':!models' ':!docs' ||
    exit 1
fi
bench/cuda/vs-llama.sh build "$src" build || exit 1
bench/cuda/vs-llama.sh run "${1:-3}"
