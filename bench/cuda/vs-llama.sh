#!/usr/bin/env bash
# vs-llama.sh - issue 17's speed floor side by side on one GPU machine:
# llama.cpp built for CUDA from the source node-llama-cpp ships, and ours
# (bench-cuda), on the same random-weight shapes, in alternating rounds.
# Two phases, so each fits a device call (run them back to back: the
# machine keeps the build only while it stays warm):
#
#   bench/cuda/vs-llama.sh build SRC_TGZ BIN_DIR   # ~6 min on 16 cores
#   bench/cuda/vs-llama.sh run [ROUNDS]             # ~2 min a round
#
# Or with llama.cpp built elsewhere (any machine with nvcc; carry its
# llama-bench, llama-quantize and libraries to the GPU machine):
#
#   bench/cuda/vs-llama.sh models BIN_DIR LLAMA_BIN_DIR  # the GGUF files only
#   LLAMA_BENCH=LLAMA_BIN_DIR/llama-bench HR_BENCH_CUDA=.../bench-cuda HR_VS_TESTS=0 \
#     bench/cuda/vs-llama.sh run [ROUNDS]
#
# Or batch-1 decode alone, what a short device call affords (about 2
# minutes for 2 rounds, the files included):
#
#   bench/cuda/vs-llama.sh tg BIN_DIR LLAMA_BIN_DIR [ROUNDS]
#
# the 8B shape's Q8_0 file and its Q4_K made from it (llama-quantize
# --allow-requantize: no 16 GB F16 file to write), then per round and type
# ours (HR_BENCH_QUICK=1 bench-cuda: the decode rows alone) and
# llama-bench's tg128, alternating; the same medians and ratios.
#
# SRC_TGZ: llama.cpp's source as a tarball (made on a machine with the npm
# tree: git clone tests/oracle/node_modules/node-llama-cpp/llama/
# gitRelease.bundle, then git archive without models/ and docs/). BIN_DIR
# holds our gen-model (it writes the GGUF files llama-bench reads). The build
# phase also builds our engine-only tree (tests/cuda/gpu-host.sh's build).
# The run phase prints one line per (engine, model, round), then the
# medians and ratios: the 8B shape in F16, Q8_0 and Q4_K (pp512, pp4096,
# tg128, and for Q4_K tg128 after 16384 tokens of context; HR_VS_TYPES
# picks a subset) and Qwen2.5-0.5B in Q8_0 and F16 (pp512, tg128); for
# ours also the share of HBM bandwidth the decode rows stream (the bytes of
# the matrices a token reads x tokens/s) and of the bf16 peak the prefill rows reach (2 x
# parameters x tokens/s), against the card's numbers (H200: 4.8 TB/s and
# 790 TFLOP/s measured with cuBLAS; H100 SXM: 3.35 TB/s, 700 TFLOP/s
# nominal-class; others: none printed); then batched decode through
# `headroom serve` (bench/cuda/serve-batch.py), and last each decode GEMV's
# GB/s beside a read-only kernel's (bench-gemv).
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:?usage: vs-llama.sh build SRC_TGZ BIN_DIR | models BIN_DIR LLAMA_BIN_DIR | run [ROUNDS] | tg BIN_DIR LLAMA_BIN_DIR [ROUNDS]}
W=build-vsllama
mkdir -p "$W"
# The files llama-bench reads: the shapes bench-cuda builds in memory
# (the 8B shape in F16 and Q8_0, written side by side, each row drawn from
# its own stream on every core: --row-streams, 4.5 minutes -> seconds; its
# Q4_K comes from the F16 file through llama-quantize --pure on all
# threads, a minute, where gen-model's one-threaded Q4_K search took over 15).
l8=(--arch llama --n-embd 4096 --n-layer 32 --n-head 32 --n-head-kv 8 --head-dim 128
  --n-ff 14336 --vocab builtin --vocab-size 128256 --untied --rope-base 500000) # the 8B shape
gen_models() { # BIN_DIR LLAMA_QUANTIZE
  local bin=$1 quant=$2 t0
  t0=$(date +%s)
  for t in f16 q8_0; do
    "$bin/gen-model" "${l8[@]}" --row-streams --type $t --out "$W/llama-3-8b-$t.gguf" >/dev/null &
  done
  for t in q8_0 f16; do
    "$bin/gen-model" --shape qwen2.5-0.5b --vocab builtin --vocab-size 151936 --row-streams --type $t \
      --out "$W/qwen2.5-0.5b-$t.gguf" >/dev/null
  done
  wait
  "$quant" --pure "$W/llama-3-8b-f16.gguf" "$W/llama-3-8b-q4_k.gguf" Q4_K "$(nproc)" \
    >"$W/quantize.log" 2>&1
  echo "models: exit $? after $(($(date +%s) - t0)) s"
}
if [[ $phase == tg ]]; then # the files only where missing
  tg_bin=${2:?usage: vs-llama.sh tg BIN_DIR LLAMA_BIN_DIR [ROUNDS]}
  tg_llama=${3:?usage: vs-llama.sh tg BIN_DIR LLAMA_BIN_DIR [ROUNDS]}
  export LD_LIBRARY_PATH=$tg_llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [[ ! -f $W/llama-3-8b-q4_k.gguf ]]; then
    t0=$(date +%s)
    "$tg_bin/gen-model" "${l8[@]}" --row-streams --type q8_0 --out "$W/llama-3-8b-q8_0.gguf" \
      >/dev/null &&
      "$tg_llama/llama-quantize" --allow-requantize --pure "$W/llama-3-8b-q8_0.gguf" \
        "$W/llama-3-8b-q4_k.gguf" Q4_K "$(nproc)" >"$W/quantize.log" 2>&1
    echo "models: exit $? after $(($(date +%s) - t0)) s"
  fi
  LLAMA_BENCH=$tg_llama/llama-bench
  HR_BENCH_CUDA=$tg_bin/bench-cuda
  set -- tg "${4:-2}"
fi
if [[ $phase == models ]]; then
  gen_models "${2:?}" "${3:?}/llama-quantize"
  ls -la "$W"/*.gguf
  exit 0
fi
if [[ $phase == build ]]; then
  src=${2:?}
  bin=${3:?}
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  t0=$(date +%s)
  (
    rm -rf "$W/src" && mkdir -p "$W/src" && tar xzf "$src" -C "$W/src" &&
      cmake -S "$W/src" -B "$W/llama" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        >"$W/llama-cmake.log" 2>&1 &&
      cmake --build "$W/llama" -j 12 --target llama-bench >"$W/llama-build.log" 2>&1
    echo "llama.cpp build: exit $? after $(($(date +%s) - t0)) s"
  ) &
  (
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_FLAGS_RELEASE="-O2 -g -DNDEBUG" -DHR_ENGINE_ONLY=ON -DHR_CUDA=ON \
      >"$W/ours-cmake.log" 2>&1 && cmake --build build-gpu -j 4 >"$W/ours-build.log" 2>&1
    echo "our build: exit $? after $(($(date +%s) - t0)) s"
  ) &
  wait # both builds: llama-quantize links the libraries llama-bench built
  cmake --build "$W/llama" -j 16 --target llama-quantize >>"$W/llama-build.log" 2>&1 &&
    gen_models "$bin" "$W/llama/bin/llama-quantize"
  ls -la "$W"/*.gguf "$W/llama/bin/llama-bench" build-gpu/bench/bench-cuda 2>&1
  tail -n 5 "$W/llama-build.log" "$W/ours-build.log"
  exit 0
fi
rounds=${2:-3}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
LB=${LLAMA_BENCH:-$W/llama/bin/llama-bench}
B=${HR_BENCH_CUDA:-build-gpu/bench/bench-cuda}
out="$W/rows.txt"
# HR_VS_APPEND=1 adds to the rows of an earlier run on this machine (rounds
# split over two device calls); the medians take them all.
[[ ${HR_VS_APPEND:-0} == 1 ]] || : >"$out"
if [[ $phase == tg ]]; then
  for r in $(seq "$rounds"); do
    for t in q4_k q8_0; do
      # the quick run's other rows are zeros: dropped, not medians
      HR_BENCH_QUICK=1 timeout 60 "$B" --shape llama-3-8b --type $t 2>/dev/null |
        grep '^bench-cuda' | sed -E 's/ (pp512|pp4096|tg128_d16384)_tok_s=[0-9.]+//g; s/^/ours /' \
        >>"$out"
      timeout 120 "$LB" -m "$W/llama-3-8b-$t.gguf" -ngl 99 -fa 1 -r 3 -p 0 -n 128 2>&1 |
        grep -E '^\|' | sed "s/^/llama 8b-$t /" >>"$out"
    done
  done
fi
ours() { # shape type [env]
  env "${@:3}" timeout 200 "$B" --shape "$1" --type "$2" 2>/dev/null | grep '^bench-cuda' |
    sed "s/^/ours /" >>"$out"
}
if [[ $phase != tg && ${HR_VS_TESTS:-1} != 0 ]]; then
  tests/cuda/run.sh build-gpu "${MODELS:-build/cuda-models}" >"$W/tests.log" 2>&1
  echo "GPU tests: exit $?; $(grep -cE '^  ok' "$W/tests.log") ok, $(grep -cE 'FAIL' "$W/tests.log") FAIL"
  grep -E 'FAIL' "$W/tests.log" | head
fi
for r in $([[ $phase == tg ]] || seq "$rounds"); do # tg: its rounds above
  for t in ${HR_VS_TYPES:-f16 q8_0 q4_k}; do
    ours llama-3-8b $t
    "$LB" -m "$W/llama-3-8b-$t.gguf" -ngl 99 -fa 1 -r 3 -p 512,4096 -n 128 2>&1 | grep -E '^\|' |
      sed "s/^/llama 8b-$t /" >>"$out"
    if [[ $t == q4_k ]]; then
      "$LB" -m "$W/llama-3-8b-$t.gguf" -ngl 99 -fa 1 -r 3 -p 0 -n 128 -d 16384 2>&1 |
        grep -E '^\|' | sed "s/^/llama 8b-$t /" >>"$out"
    fi
  done
  for t in q8_0 f16; do
    ours qwen2.5-0.5b $t
    "$LB" -m "$W/qwen2.5-0.5b-$t.gguf" -ngl 99 -fa 1 -r 3 -p 512,4096 -n 128 2>&1 | grep -E '^\|' |
      sed "s/^/llama 0.5b-$t /" >>"$out"
  done
done
cat "$out"
# Medians per (model, test) and the ratio ours / llama.cpp.
# Batched decode through the server (8B Q4_K: 1, 8 and 32 streams of 128
# tokens); needs a full build of headroom (HR_SERVE_BIN; the engine-only
# tree has no server).
srv=${HR_SERVE_BIN:-build/headroom}
if [[ $phase == tg ]]; then
  : # decode alone
elif [[ -x $srv && -f $W/llama-3-8b-q4_k.gguf ]]; then
  timeout 900 python3 bench/cuda/serve-batch.py "$srv" "$W/llama-3-8b-q4_k.gguf" 1 8 32
else
  echo "serve-batch: skipped ($srv or the 8B Q4_K file is missing)"
fi
# Each decode GEMV's GB/s beside a read-only kernel and a device copy of
# the same bytes (issue 21's first item; bench/cuda/bench-gemv.c).
G=${HR_BENCH_GEMV:-$(dirname "$B")/bench-gemv}
if [[ $phase == tg ]]; then
  : # decode alone
elif [[ -x $G ]]; then
  timeout 120 "$G" --types q4_k,q8_0,f16 --shapes 8b | sed 's/ gpu="[^"]*"//'
else
  echo "bench-gemv: skipped ($G is not built)"
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
python3 - "$out" "$gpu" <<'PY'
import re, sys, statistics as st
rows, wbytes, params = {}, {}, {}
for line in open(sys.argv[1]):
    if line.startswith("ours bench-cuda-llama"):
        kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        name = ("8b-" if kv["shape"] == "llama-3-8b" else "0.5b-") + kv["type"]
        for t in ("pp512", "pp4096", "tg128", "tg128_d16384"):
            if t + "_tok_s" in kv:
                rows.setdefault((name, t), ([], []))[0].append(float(kv[t + "_tok_s"]))
    elif line.startswith("ours bench-cuda "):
        kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        name = ("8b-" if kv["shape"] == "llama-3-8b" else "0.5b-") + kv["type"]
        # bytes a decode token reads: the layers' matrices and the output
        # matrix, not the embeddings (bench-cuda's decode_gbps x seconds)
        wbytes[name] = float(kv["decode_gbps"]) * 1e9 / float(kv["decode_tok_s"])
    elif line.startswith("llama "):
        name = line.split()[1]
        cells = [c.strip() for c in line.split("|")]
        m = re.match(r"(pp\d+|tg\d+)( @ d(\d+))?", cells[-3]) if len(cells) > 3 else None
        if m:
            t = m.group(1) + ("_d" + m.group(3) if m.group(3) else "")
            rows.setdefault((name, t), ([], []))[1].append(float(cells[-2].split()[0]))
        if len(cells) > 4 and re.match(r"[\d.]+ B$", cells[3]):
            params[name] = float(cells[3].split()[0]) * {"B": 1e9}["B"]
gpu = sys.argv[2]
bw, peak = (4.8e12, 790e12) if "H200" in gpu else (3.35e12, 700e12) if "H100" in gpu else (0, 0)
print("GPU: %s (shares against %.2f TB/s and %.0f TFLOP/s)" % (gpu, bw / 1e12, peak / 1e12))
print("%-10s %-13s %10s %10s %6s %8s" % ("model", "test", "ours", "llama.cpp", "ratio", "share"))
for (name, t), (o, l) in sorted(rows.items()):
    if not o:
        continue
    share = ""
    if bw and t.startswith("tg") and name in wbytes:
        share = "%.0f%% BW" % (100 * wbytes[name] * st.median(o) / bw)
    elif peak and t.startswith("pp") and name in params:
        share = "%.0f%% pk" % (100 * 2 * params[name] * st.median(o) / peak)
    lm = st.median(l) if l else float("nan")
    print("%-10s %-13s %10.1f %10.1f %6.2f %8s" % (name, t, st.median(o), lm, st.median(o) / lm, share))
PY
