#!/usr/bin/env bash
# llama-native.sh - llama.cpp's own llama-bench, built natively (-march=native,
# as DESIGN.md's reference table was) from the llama.cpp source that
# node-llama-cpp 3.21.1 ships (its gitRelease.bundle, in tests/oracle), so
# decode can be compared side by side on this machine without node's
# per-token overhead. Nothing is downloaded. The build (about 4 minutes on
# 2 cores) is kept in build/llama-native.
#
#   llama-native.sh MODEL [llama-bench options]   (default -p 512,2048 -n 128)
#
# runs 2 threads, flash attention on, f16 KV (DESIGN.md's settings), 3
# repetitions (a later -r overrides), and prints one line per test in
# bench-engine's form (a test at depth, -d D, is named e.g. pp512@dD):
#   bench llama-native model=F test=tg128 threads=2 runs=3 tokens_per_s=MEDIAN min=.. max=..
# It prints nothing when the oracle packages are not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=tests/oracle/node_modules/node-llama-cpp/llama/gitRelease.bundle
out=build/llama-native
bin=$out/build/bin/llama-bench
[[ -f $bundle ]] || exit 0
if [[ ! -x $bin ]]; then
  rm -rf "$out/src"
  mkdir -p "$out"
  git clone -q "$bundle" "$out/src" 2>/dev/null
  cmake -S "$out/src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_SERVER=OFF >"$out/cmake.log" 2>&1
  cmake --build "$out/build" -j"$(nproc)" --target llama-bench >"$out/build.log" 2>&1
fi
model=$1
shift
# A virtual machine may advertise AMX (so -march=native compiles ggml's AMX
# kernels) without letting a process use it: prefill then dies of SIGILL
# (seen on a 2-core Xeon guest, 2026-12-06). Then llama.cpp is built again
# with AMX off, the best build that runs here, and that one is used.
# (The probe runs in a group whose stderr is dropped: bash reports a child
# killed by a signal on the stderr in force where it waited for it.)
if { "$bin" -m "$model" -t 2 -r 1 -p 32 -n 0 >/dev/null 2>&1; } 2>/dev/null; [[ $? -eq 132 ]]; then
  noamx=build/llama-native-noamx
  flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  if [[ ! -x $noamx/build/bin/llama-bench ]]; then
    cmake -S "$out/src" -B "$noamx/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
      -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
      >"$out/cmake-noamx.log" 2>&1
    cmake --build "$noamx/build" -j"$(nproc)" --target llama-bench >"$out/build-noamx.log" 2>&1
  fi
  echo "llama-native: AMX is advertised but not usable here; llama.cpp built without it" >&2
  bin=$noamx/build/bin/llama-bench
fi
(($#)) || set -- -p 512,2048 -n 128
"$bin" -m "$model" -t 2 -fa 1 -r 3 -o jsonl "$@" 2>/dev/null | python3 -c '
import json, statistics, sys
model = sys.argv[1]
for line in sys.stdin:
    d = json.loads(line)
    test = "pp%d" % d["n_prompt"] if d["n_prompt"] else "tg%d" % d["n_gen"]
    if d.get("n_depth"):
        test += "@d%d" % d["n_depth"]
    s = d["samples_ts"]
    print("bench llama-native model=%s test=%s threads=%d runs=%d tokens_per_s=%.2f min=%.2f max=%.2f"
          % (model, test, d["n_threads"], len(s), statistics.median(s), min(s), max(s)))
' "$model"
