# common.sh - what every command-line test (tests/cli/*.sh) starts with,
# sourced as its first command:
#
#   source "$(dirname "$0")/lib/common.sh" NAME
#
# It lives in lib/ because tests/run.sh runs every tests/cli/*.sh as a test.
# After it:
#   - the shell runs with `set -uo pipefail` in the repository root;
#   - $hr, $gen and $vg are the release build's headroom, gen-model and
#     vocab-gguf (HR_BUILD names another build directory);
#   - $dir is a new directory /tmp/hr-cli-NAME-XXXXXX, removed at exit, when
#     every process whose pid the script appended to the array pids is killed;
#   - ok DESC and bad DESC count a check, expect DESC CONDITION evals the
#     condition and counts it either way; mib BYTES prints MiB to 0.1;
#   - cli_done, the script's last command, prints "N passed, N failed" (the
#     line tests/run.sh reads) and fails when any check did.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
hr=${HR_BUILD:-build}/headroom gen=${HR_BUILD:-build}/gen-model vg=${HR_BUILD:-build}/vocab-gguf
dir=$(mktemp -d "/tmp/hr-cli-$1-XXXXXX")
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$dir"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
expect() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
cli_done() {
  echo "$passed passed, $failed failed"
  ((failed == 0))
}
