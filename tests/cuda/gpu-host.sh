#!/usr/bin/env bash
# gpu-host.sh - the GPU tests on a bare GPU host: one that has the CUDA
# toolkit, cmake and ninja but none of our -dev packages (jansson,
# libmicrohttpd, cmocka), so neither gen-model nor the main build can be
# made there. Builds the engine-only tree (HR_ENGINE_ONLY=ON: base, gguf,
# model, kernels, engine, cuda and tests/cuda) and runs tests/cuda/run.sh on
# models made elsewhere (`tests/cuda/run.sh` makes them in build/cuda-models).
#
#   tests/cuda/gpu-host.sh MODELS_DIR
#
# The squeeze through `headroom serve` (tests/cuda/squeeze-serve.py) needs
# the server, which cannot be built there: build it here and carry it, e.g.
#   mkdir build-gpuserve && cp build/headroom build/gen-model \
#     /lib/x86_64-linux-gnu/libmicrohttpd.so.12 build-gpuserve/
# then on the GPU host: HR_SERVE_BIN=$PWD/build-gpuserve/headroom
#   HR_GEN_MODEL=$PWD/build-gpuserve/gen-model LD_LIBRARY_PATH=$PWD/build-gpuserve
#   tests/cuda/gpu-host.sh MODELS_DIR. Without it, run.sh says it skipped it.
set -uo pipefail
cd "$(dirname "$0")/../.."
models=${1:?usage: tests/cuda/gpu-host.sh MODELS_DIR}
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem \
  --format=csv 2>&1
nvcc --version 2>&1 | tail -2
t0=$(date +%s.%N)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS_RELEASE="-O2 -g -DNDEBUG" -DHR_ENGINE_ONLY=ON -DHR_CUDA=ON >build-gpu.log 2>&1 ||
  { tail -40 build-gpu.log; exit 1; }
cmake --build build-gpu -j "$(nproc)" >>build-gpu.log 2>&1 || { tail -60 build-gpu.log; exit 1; }
echo "configure + build: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
t0=$(date +%s.%N)
tests/cuda/run.sh build-gpu "$models"
rc=$?
echo "GPU tests: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, exit $rc"
exit $rc
