#!/usr/bin/env bash
# gpu-pack.sh - the release build's GPU programs packed for a GPU machine
# that has none of our -dev packages (device calls carry 64 MiB at most):
#
#   bench/cuda/gpu-pack.sh [OUT_TXZ]     # default build-gpupack/gpurun.txz
#
# then on the GPU machine: tar xJf OUT_TXZ (a build-gpurun/ folder),
# LD_LIBRARY_PATH=$PWD/build-gpurun, and e.g.
#   HR_SERVE_BIN=build-gpurun/headroom HR_GEN_MODEL=build-gpurun/gen-model \
#     tests/cuda/run.sh build-gpurun build-gpurun/cuda-models
#   bench/cuda/device-call.sh build-gpurun [LLAMA_BIN_DIR]
# Holds headroom, gen-model, bench-cuda, bench-gemv, tests/cuda/test-* and
# vram-hog (stripped), the two shared libraries the server links that a
# bare Ubuntu lacks (libmicrohttpd, libjansson), and the kernel tracer
# (libhr-kernel-trace.so, kernel-trace.c) with its CUPTI where this build
# has them. About 14 MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-gpupack/gpurun.txz}
cmake --build build --target headroom gen-model bench-cuda bench-gemv test-cuda-kernels \
  test-cuda-engine test-cuda-backend vram-hog >/dev/null
cmake --build build --target hr-kernel-trace >/dev/null 2>&1 || true # a target only where CUPTI is
rm -rf build-gpurun && mkdir -p build-gpurun/tests/cuda "$(dirname "$out")"
cp build/headroom build/gen-model build/bench/bench-cuda build/bench/bench-gemv build-gpurun/
cp build/tests/cuda/test-cuda-kernels build/tests/cuda/test-cuda-engine \
  build/tests/cuda/test-cuda-backend build/tests/cuda/vram-hog build-gpurun/tests/cuda/
for l in libmicrohttpd.so.12 libjansson.so.4; do
  cp "$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')" build-gpurun/
done
# The kernel tracer (kernel-trace.c) and its CUPTI, where this toolkit has them.
if [ -f build/bench/libhr-kernel-trace.so ]; then
  cp build/bench/libhr-kernel-trace.so build-gpurun/
  cp -L "$(ldd build/bench/libhr-kernel-trace.so | awk '$1 ~ /^libcupti/ { print $3 }')" build-gpurun/
fi
strip build-gpurun/headroom build-gpurun/gen-model build-gpurun/bench-* build-gpurun/tests/cuda/*
tar cJf "$out" build-gpurun
ls -la "$out"
