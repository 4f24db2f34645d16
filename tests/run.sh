#!/usr/bin/env bash
# run.sh - runs every test and prints one closing line: "N passed, N failed".
#
# Suites, in order:
#   unit    build-asan/tests/test-*   cmocka programs under ASan+UBSan (TAP output)
#   tsan    build-tsan/tests/...      the threaded modules' tests under ThreadSanitizer
#   fuzz    build-asan/fuzz/fuzz-*    replay tests/fuzz/corpus/<name> and crashes/<name>
#   cli     tests/cli/*.sh            the headroom binary as a user runs it
#   e2e     tests/e2e/*.test.mjs      `headroom serve` driven by the official
#                                     openai and @anthropic-ai/sdk clients
#   oracle  tests/oracle/*.test.mjs   against llama.cpp (node-llama-cpp) and real vocabularies
#   cuda    build/tests/cuda/test-*   the CUDA engine (tests/cuda/run.sh), when built and a
#                                     GPU is present; else one line says they were skipped
#
# Run one suite: tests/run.sh unit; one program: build-asan/tests/test-gguf.
# Each test's output goes to build-asan/test-logs/<name>.log; failures print it.
set -uo pipefail
cd "$(dirname "$0")/.."

only="${1:-}"
logs=build-asan/test-logs
mkdir -p "$logs"
passed=0 failed=0 skipped=0
failures=()

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export HR_TEST_MODELS="$PWD/build-asan/test-models"
mkdir -p "$HR_TEST_MODELS"

report() { # name description status(0 ok) seconds
  if [[ $3 -eq 0 ]]; then
    printf '  ok    %-50s %6ss\n' "$2" "$4"
  else
    printf '  FAIL  %-50s %6ss (log: %s)\n' "$2" "$4" "$logs/$1.log"
    # The failing checks first (a long log's tail may not reach them), then the tail.
    grep -E '^(FAIL|not ok|# FAIL|ERROR)' "$logs/$1.log" | head -n 10 | cut -c1-240 | sed 's/^/        ! /'
    tail -n 30 "$logs/$1.log" | cut -c1-240 | sed 's/^/        | /'
  fi
}

now() { date +%s%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }

want() { [[ -z "$only" || "$only" == "$1" ]]; }

# One cmocka program: its log, then "ok skipped bad seconds" on stdout.
unit_run() { # program log
  local start rc ok sk bad
  start=$(now)
  CMOCKA_MESSAGE_OUTPUT=TAP "$1" >"$2" 2>&1
  rc=$?
  # cmocka's TAP marks a skipped test "not ok N # SKIP": a skip, not a failure.
  ok=$(grep -E '^ok [0-9]+' "$2" | grep -cv '# SKIP')
  sk=$(grep -cE '^(not )?ok [0-9]+.*# SKIP' "$2")
  bad=$(grep -E '^not ok [0-9]+' "$2" | grep -cv '# SKIP')
  # A crash or sanitizer report after some "ok" lines still fails the program.
  if [[ $rc -ne 0 && $bad -eq 0 ]]; then bad=1; fi
  echo "$ok $sk $bad $(elapsed "$start")"
}

unit_report() { # name "ok skipped bad seconds"
  local ok sk bad secs
  read -r ok sk bad secs <<<"$2"
  passed=$((passed + ok)) failed=$((failed + bad)) skipped=$((skipped + sk))
  ((bad)) && failures+=("$1")
  report "$1" "$1 ($ok ok, $sk skipped)" $((bad > 0)) "$secs"
}

# The long, single-threaded, CPU-bound programs (real vocabularies, every
# kernel against its reference) run beside the others, one core each: about
# a minute off a 2-core machine's make test. Nothing in them depends on time.
# "program/TEST" runs cmocka test TEST of a program as a process of its own
# (HR_TEST_FILTER, read by the program's main), and the program's own entry
# then skips it (HR_TEST_SKIP; one such test per program): test-tokenizer's
# llama.cpp differential over ten pre-tokenizers is 44% of its time, and
# the unit suite waited for test-tokenizer alone for its last ~30 s.
UNIT_BESIDE="test-tokenizer test-tokenizer/test_llama_pre test-hf-vocab test-kernels"

if want unit; then
  echo "unit tests (ASan+UBSan):"
  beside=()
  for entry in $UNIT_BESIDE; do
    name=${entry%%/*}
    t=build-asan/tests/$name
    [[ -x "$t" ]] || continue
    label=$name filter="" skip=""
    if [[ $entry == */* ]]; then
      filter=${entry#*/} label=$name-${entry#*/}
    else
      for e in $UNIT_BESIDE; do [[ $e == "$name"/* ]] && skip=${e#*/}; done
    fi
    (
      [[ -n $filter ]] && export HR_TEST_FILTER=$filter
      [[ -n $skip ]] && export HR_TEST_SKIP=$skip
      unit_run "$t" "$logs/$label.log" >"$logs/$label.result"
    ) &
    beside+=("$label")
  done
  for t in build-asan/tests/test-*; do
    [[ -x "$t" ]] || continue
    name=$(basename "$t")
    [[ " $UNIT_BESIDE " == *" $name "* ]] && continue
    unit_report "$name" "$(unit_run "$t" "$logs/$name.log")"
  done
  wait
  for name in "${beside[@]}"; do
    unit_report "$name" "$(cat "$logs/$name.result")"
    rm -f "$logs/$name.result"
  done
fi

# Threaded code under ThreadSanitizer: the programs that start threads
# (the tsan build makes only those: HR_TSAN_TESTS in CMakeLists.txt).
if want tsan; then
  echo "threaded tests (ThreadSanitizer):"
  for t in build-tsan/tests/test-*; do
    [[ -x "$t" ]] || continue
    name=$(basename "$t")
    start=$(now)
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" CMOCKA_MESSAGE_OUTPUT=TAP "$t" \
      >"$logs/tsan-$name.log" 2>&1
    rc=$?
    ok=$(grep -E '^ok [0-9]+' "$logs/tsan-$name.log" | grep -cv '# SKIP')
    sk=$(grep -cE '^(not )?ok [0-9]+.*# SKIP' "$logs/tsan-$name.log")
    bad=$(grep -E '^not ok [0-9]+' "$logs/tsan-$name.log" | grep -cv '# SKIP')
    skipped=$((skipped + sk))
    if [[ $rc -ne 0 && $bad -eq 0 ]]; then bad=1; fi
    passed=$((passed + ok)) failed=$((failed + bad))
    ((bad)) && failures+=("tsan-$name")
    report "tsan-$name" "tsan $name ($ok ok)" $((bad > 0)) "$(elapsed "$start")"
  done
fi

if want fuzz; then
  echo "fuzz corpus and crash replays (ASan+UBSan):"
  for f in build-asan/fuzz/fuzz-*; do
    [[ -x "$f" ]] || continue
    name=$(basename "$f")
    target=${name#fuzz-}
    start=$(now)
    "$f" "tests/fuzz/corpus/$target" "tests/fuzz/crashes/$target" >"$logs/$name.log" 2>&1
    rc=$?
    if ((rc == 0)); then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$name"); fi
    report "$name" "$name ($(tail -n1 "$logs/$name.log"))" $rc "$(elapsed "$start")"
  done
fi

run_counted() { # suite-name command...: a script that ends with "N passed, N failed"
  local name=$1; shift
  local start rc line p f
  start=$(now)
  "$@" >"$logs/$name.log" 2>&1
  rc=$?
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/$name.log" | tail -n1)
  if [[ -n "$line" ]]; then
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
  else
    p=0 f=1
  fi
  if [[ $rc -ne 0 && $f -eq 0 ]]; then f=1; fi
  passed=$((passed + p)) failed=$((failed + f))
  ((f)) && failures+=("$name")
  report "$name" "$name ($p passed, $f failed)" $((f > 0)) "$(elapsed "$start")"
}

if want cli; then
  echo "command-line tests:"
  for s in tests/cli/*.sh; do
    [[ -f "$s" ]] || continue
    run_counted "cli-$(basename "$s" .sh)" bash "$s"
  done
fi

if want e2e; then
  echo "end-to-end tests (headroom serve, official openai and @anthropic-ai/sdk clients):"
  for s in tests/e2e/*.test.mjs; do
    [[ -f "$s" ]] || continue
    run_counted "e2e-$(basename "$s" .test.mjs)" node "$s"
  done
fi

if want oracle; then
  echo "oracle tests (llama.cpp via node-llama-cpp, real vocabularies):"
  for s in tests/oracle/*.test.mjs; do
    [[ -f "$s" ]] || continue
    run_counted "oracle-$(basename "$s" .test.mjs)" node "$s"
  done
fi

# GPU tests: only where the CUDA engine was built and a device answers;
# otherwise one line says why they did not run (make test-cuda runs them).
if want cuda; then
  if [[ ! -x build/tests/cuda/test-cuda-kernels ]]; then
    echo "cuda: GPU tests skipped: the CUDA engine is not built (no nvcc, or HR_CUDA=OFF)"
  elif build/tests/cuda/test-cuda-kernels --probe >/dev/null 2>&1; then
    echo "GPU tests (CUDA engine against the CPU engine):"
    start=$(now)
    tests/cuda/run.sh build >"$logs/cuda.log" 2>&1
    rc=$?
    p=$(grep -c '^  ok ' "$logs/cuda.log") f=$(grep -c '^  FAIL ' "$logs/cuda.log")
    ((rc != 0 && f == 0)) && f=1
    passed=$((passed + p)) failed=$((failed + f))
    ((f)) && failures+=("cuda")
    report cuda "tests/cuda ($p ok)" $((f > 0)) "$(elapsed "$start")"
  else
    echo "cuda: GPU tests skipped: no CUDA device here (make test-cuda runs them on a GPU machine)"
  fi
fi

echo
if ((${#failures[@]})); then echo "failed: ${failures[*]}"; fi
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
