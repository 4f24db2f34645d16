#!/usr/bin/env bash
# load-peak.sh - loading a model stays under the memory ceiling (docs/memory.md,
# "Loading"), with the release binary on a generated model whose packed
# weights are most of it: a tied Q8_0 embedding of 65,536 x 512 (34 MiB of a
# 37 MiB file), which the kernels repack at load.
#
#   at the minimum   `run --memory-limit 1M` names the smallest ceiling that
#                    runs a 1-token prompt; `run` under exactly that ceiling
#                    completes and its peak RSS (VmHWM: loading included)
#                    is below it; so is an idle `serve`'s VmHWM under the
#                    minimum that `serve` names.
#   the transient    what loading holds and then gives back (the serve's
#                    VmHWM less its resting VmRSS) is a few slices of the
#                    file (each packing thread's, 256 KiB), not the 34 MiB
#                    tensor: packing it whole before releasing its file
#                    pages peaked at 79.5 MiB under a named minimum of 58.
#
# About 4 s. Uses build/headroom and build/gen-model (HR_BUILD: another dir).
source "$(dirname "$0")/lib/common.sh" loadpeak

$gen --shape tiny --arch qwen3 --type q8_0 --n-embd 512 --n-layer 1 --n-ff 512 --vocab builtin \
  --vocab-size 65536 --out "$dir/m.gguf" >/dev/null 2>&1 || bad "gen-model"

$hr run --model "$dir/m.gguf" -p x --memory-limit 1M >/dev/null 2>"$dir/min.err"
min=$(sed -n 's/.*smallest --memory-limit that runs it is \([0-9.]*\) MiB.*/\1/p' "$dir/min.err")
[[ -n "$min" ]] && min=$(awk -v a="$min" 'BEGIN { printf "%d", a + 0.999 }') # whole MiB, up
expect "a 1M ceiling names the minimum (${min:-?} MiB; $(tail -1 "$dir/min.err" | cut -c1-80))" "[[ -n '$min' ]]"
min=${min:-64}

timeout 60 $hr run --model "$dir/m.gguf" -p x -n 2 --temp 0 --threads 1 --memory-limit "${min}M" \
  >/dev/null 2>"$dir/run.err"
rc=$?
gov=$(grep 'memory (governor):' "$dir/run.err" | cut -c1-100)
expect "run under the minimum it named (${min}M) completes, loading included below the ceiling ($gov)" \
  "[[ $rc -eq 0 ]] && grep -q 'memory (governor): .*: below the ceiling' '$dir/run.err'"

# serve_status LIMIT: "VmHWM VmRSS" in bytes of a serve that has loaded the
# model and is idle (listening); empty if it never listened.
serve_status() {
  local log="$dir/serve.log" pid out=""
  $hr serve --model "$dir/m.gguf" --port 0 --threads 1 --memory-limit "$1" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 300); do grep -q "listening on" "$log" && break; sleep 0.05; done
  if grep -q "listening on" "$log"; then
    out=$(awk '/^VmHWM:/ { h = $2 * 1024 } /^VmRSS:/ { r = $2 * 1024 } END { print h, r }' \
      "/proc/$pid/status" 2>/dev/null)
  fi
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "$out"
}
# The server names its own minimum (its residual has the HTTP threads too).
$hr serve --model "$dir/m.gguf" --port 0 --threads 1 --memory-limit 1M >/dev/null 2>"$dir/smin.err"
smin=$(sed -n 's/.*smallest --memory-limit that runs it is \([0-9.]*\) MiB.*/\1/p' "$dir/smin.err")
[[ -n "$smin" ]] && smin=$(awk -v a="$smin" 'BEGIN { printf "%d", a + 0.999 }')
expect "serve under 1M refuses to start, naming its minimum (${smin:-?} MiB)" "[[ -n '$smin' ]]"
smin=${smin:-64}
read -r hwm rss <<<"$(serve_status "${smin}M")"
hwm=${hwm:-0} rss=${rss:-0}
expect "serve under the minimum it named (${smin}M): listening, VmHWM $(mib $hwm) MiB (loading included) below the ceiling" \
  "(( hwm > 0 && hwm <= smin * 1048576 ))"
# Each packing thread holds one 256 KiB slice (at most 8 threads) plus the
# kernel's 64 KiB fault-around; 1 MiB more for the rest of start-up's
# give-backs (the 1-token warm-up step's arena, the trimmed heap).
threads=$(nproc); ((threads > 8)) && threads=8
bound=$((threads * 320 * 1024 + 1048576))
expect "loading's transient (VmHWM - VmRSS at rest) $(mib $((hwm - rss))) MiB <= $(mib $bound) MiB ($threads packing threads), not the 34 MiB tensor" \
  "(( rss > 0 && hwm - rss <= bound ))"

cli_done
