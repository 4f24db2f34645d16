#!/usr/bin/env bash
# fuzz.sh SECONDS - runs every libFuzzer target in build-fuzz/fuzz/ for
# SECONDS each, starting from tests/fuzz/corpus/<target>. New interesting
# inputs stay in a scratch corpus (tests/fuzz/corpus-work/, ignored by git);
# any crash is copied to tests/fuzz/crashes/<target>/, where `make test`
# replays it from then on. Prints executions and crashes per target.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
status=0
for f in build-fuzz/fuzz/fuzz-*; do
  [[ -x "$f" ]] || continue
  name=$(basename "$f"); target=${name#fuzz-}
  work=tests/fuzz/corpus-work/$target
  crashes=tests/fuzz/crashes/$target
  mkdir -p "$work" "$crashes" build-fuzz/artifacts/$target
  log=build-fuzz/$name.log
  "$f" "$work" "tests/fuzz/corpus/$target" -max_total_time="$secs" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$target/" \
    >"$log" 2>&1
  rc=$?
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  n_new=0
  for a in build-fuzz/artifacts/$target/*; do
    [[ -f "$a" ]] || continue
    cp "$a" "$crashes/" && n_new=$((n_new + 1)) && rm "$a"
  done
  echo "fuzz $target: ${execs:-?} executions in ${secs}s, $n_new crash input(s) saved to $crashes (exit $rc)"
  ((rc != 0 || n_new > 0)) && status=1
done
exit $status
