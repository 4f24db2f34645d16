#!/usr/bin/env bash
# llama-prebuild.sh - llama.cpp's llama-bench and llama-quantize built for
# CUDA (sm_90) on a machine WITHOUT a GPU (nvcc only), packed for a GPU
# machine, so a device call spends no minutes building:
#
#   bench/cuda/llama-prebuild.sh SRC_TGZ OUT_TGZ   # 25-45 min on 2 cores
#
# then on the GPU machine: tar xzf OUT_TGZ (a build-llbin/ folder),
# LD_LIBRARY_PATH=$PWD/build-llbin, and vs-llama.sh's `models` and `run`
# phases with LLAMA_BENCH=build-llbin/llama-bench (see vs-llama.sh).
# Generic x86 CPU code (AVX2; the GPU host's CPU is not this one's), no
# NCCL (the GPU host may lack it; one GPU needs none), the executables
# linked against the driver's stub (libcuda.so.1 is the GPU host's).
# About 44 MB packed (libggml-cuda is 65 MB of sm_90 code).
set -euo pipefail
src=${1:?usage: llama-prebuild.sh SRC_TGZ OUT_TGZ}
out=${2:?}
W=${HR_LLAMA_PREBUILD_DIR:-build-llprebuild}
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$W/stub"
ln -sf "$cuda/lib64/stubs/libcuda.so" "$W/stub/libcuda.so.1"
rm -rf "$W/src" && mkdir -p "$W/src" && tar xzf "$src" -C "$W/src"
cmake -S "$W/src" -B "$W/b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" -DGGML_CUDA_NCCL=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$PWD/$W/stub" >"$W/cmake.log"
cmake --build "$W/b" -j "$(nproc)" --target llama-bench llama-quantize >"$W/build.log"
rm -rf "$W/pack" && mkdir -p "$W/pack/build-llbin"
cp -L "$W"/b/bin/*.so.0 "$W"/b/bin/lib*impl.so "$W/b/bin/llama-bench" "$W/b/bin/llama-quantize" \
  "$W/pack/build-llbin/"
strip "$W"/pack/build-llbin/*
tar czf "$out" -C "$W/pack" build-llbin
ls -la "$out"
