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
echo "bench load_after=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
