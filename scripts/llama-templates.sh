#!/usr/bin/env bash
# llama-templates.sh - the real chat templates of llama.cpp's models/templates/
# (Qwen3-Coder, Qwen3.5, gpt-oss, GLM, Gemma, ...), extracted once from the
# llama.cpp source that node-llama-cpp ships as a git bundle.
#
#   scripts/llama-templates.sh [DIR]    prints DIR (default build/llama-templates)
#
# Tests call this at run time instead of committing copies of the templates:
# what they test against is exactly the llama.cpp version the oracle package
# pins (tests/oracle/package-lock.json). The bundle is
# tests/oracle/node_modules/node-llama-cpp/llama/gitRelease.bundle (35 MB,
# installed by `scripts/deps.sh --oracle`); extraction needs only git (which
# CI has: it cloned the repository) and takes about two seconds. DIR/.commit
# records the bundle's commit; a second call with the same bundle does nothing.
# Exit status 1 with a message on stderr when the bundle or git is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/build/llama-templates}"
bundle="$root/tests/oracle/node_modules/node-llama-cpp/llama/gitRelease.bundle"

[[ -f "$bundle" ]] || { echo "llama-templates: no $bundle (run scripts/deps.sh --oracle)" >&2; exit 1; }
command -v git >/dev/null || { echo "llama-templates: git is not installed" >&2; exit 1; }

head=$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" { print $1; exit }')
[[ -n "$head" ]] || { echo "llama-templates: $bundle has no HEAD" >&2; exit 1; }
if [[ -f "$out/.commit" && "$(cat "$out/.commit")" == "$head" ]]; then
  echo "$out"
  exit 0
fi

# Several test programs may ask at once: each extracts into its own temporary
# directory and the first to finish renames it into place.
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
git clone -q --bare "$bundle" "$tmp/git"
mkdir "$tmp/out"
git --git-dir="$tmp/git" archive "$head" models/templates | tar -x -C "$tmp/out"
mv "$tmp/out/models/templates" "$tmp/templates"
echo "$head" >"$tmp/templates/.commit"
if [[ ! -f "$out/.commit" || "$(cat "$out/.commit")" != "$head" ]]; then
  rm -rf "$out"
  mv "$tmp/templates" "$out" 2>/dev/null || [[ -f "$out/.commit" ]]
fi
echo "$out"
