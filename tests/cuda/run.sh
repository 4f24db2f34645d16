#!/usr/bin/env bash
# run.sh - the GPU tests (`make test-cuda`): makes the test models, then runs
# every tests/cuda program; prints their check lines and exits non-zero on a
# failure (77 when there is no CUDA device).
#
#   tests/cuda/run.sh [BUILD_DIR] [MODELS_DIR]
#
# BUILD_DIR holds tests/cuda/test-* (default build/). Models are read from
# MODELS_DIR (default BUILD_DIR/cuda-models); missing ones are made with
# BUILD_DIR/gen-model (built-in byte-level vocabulary, random weights), so a
# GPU host without gen-model can be handed pre-made models instead.
#
# The models: one small shape (n_embd 256, 2 layers, 4 heads of 64, 2 KV
# heads, n_ff 512: K-quant sized) for every weight type on qwen3, and the
# other architectures' traits (llama: adjacent-pair RoPE with llama3
# factors, an untied output and a K-quant mix; qwen2: Q/K/V biases), and
# mixtures of experts (qwen3moe; qwen2moe's shared expert with its sigmoid
# gate; Mixtral, llama with experts n_ff wide): 8 experts, 2 per token, so
# a prompt's groups fall on both sides of the GEMV / GEMM threshold; and
# gpt-oss (a 16-token sliding window on every other layer, so the 24-token
# prompt and the decode both cross it; sinks; biases; YaRN RoPE; the
# clamped SwiGLU; experts in MXFP4 as the real files have them); and the
# hybrids (qwen35, qwen35moe, qwen3next: 4 layers = 3 Gated DeltaNet + 1
# gated attention, 2 k heads shared by 4 v heads of 128 as the real models
# have them, 16 of 64 attention dims rotary).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
models=${2:-$build/cuda-models}
mkdir -p "$models"

shape=(--n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 512 --vocab builtin)
hybrid="--n-layer 4 --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 128"
# rows of 2048 and 8192 values: the decode GEMVs the 256-wide models never
# take (Q4_K's pipelined and 2-row kernels, Q8_0's 2-row one, F16's block a
# row) against the CPU engine too, not only in the kernel tests
wide="--n-embd 2048 --n-head 16 --n-head-kv 8 --head-dim 128 --n-ff 8192 --row-streams"
specs=(
  "qwen3-q4_k   --arch qwen3 --type q4_k"
  "qwen3-f32    --arch qwen3 --type f32"
  "qwen3-f16    --arch qwen3 --type f16"
  "qwen3-bf16   --arch qwen3 --type bf16"
  "qwen3-q8_0   --arch qwen3 --type q8_0"
  "qwen3-q4_0   --arch qwen3 --type q4_0"
  "qwen3-q5_k   --arch qwen3 --type q5_k"
  "qwen3-q6_k   --arch qwen3 --type q6_k"
  "qwen3-q4_1   --arch qwen3 --type q4_1"
  "qwen3-q5_0   --arch qwen3 --type q5_0"
  "qwen3-q5_1   --arch qwen3 --type q5_1"
  "qwen3-iq4_nl --arch qwen3 --type iq4_nl"
  "qwen3-mxfp4  --arch qwen3 --type mxfp4"
  "qwen3-q2_k   --arch qwen3 --type q2_k"
  "qwen3-q3_k   --arch qwen3 --type q3_k"
  "qwen3-iq4_xs --arch qwen3 --type iq4_xs"
  "llama-f32    --arch llama --type f32 --untied --rope-scaling llama3 --rope-factor 8 --rope-orig-ctx 64"
  "llama-q4_k_m --arch llama --type q4_k_m --untied"
  "llama-q4_k_m_real --arch llama --type q4_k_m_real --untied"
  "qwen2-f32    --arch qwen2 --type f32"
  "qwen2-q8_0   --arch qwen2 --type q8_0"
  "qwen3moe-q4_k --arch qwen3moe --type q4_k --n-expert 8 --n-expert-used 2 --n-ff-exp 256"
  "qwen3moe-f32 --arch qwen3moe --type f32 --n-expert 8 --n-expert-used 2 --n-ff-exp 256"
  "qwen2moe-q8_0 --arch qwen2moe --type q8_0 --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-ff-shexp 512"
  "mixtral-f16  --arch llama --type f16 --untied --n-expert 4 --n-expert-used 2"
  "gptoss-f32   --arch gpt-oss --type f32 --n-expert 4 --n-expert-used 2 --n-ff-exp 256 --swa 16 --rope-scaling yarn --rope-factor 32 --rope-orig-ctx 16"
  "gptoss-mxfp4 --arch gpt-oss --type mxfp4_real --n-expert 4 --n-expert-used 2 --n-ff-exp 256 --swa 16 --rope-scaling yarn --rope-factor 32 --rope-orig-ctx 16"
  "qwen35-f32   --arch qwen35 --type f32 $hybrid"
  "qwen35-f16   --arch qwen35 --type f16 $hybrid"
  "qwen35-q4_k  --arch qwen35 --type q4_k $hybrid"
  "qwen35moe-q8_0 --arch qwen35moe --type q8_0 $hybrid --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-ff-shexp 512"
  "qwen3next-f32 --arch qwen3next --type f32 $hybrid --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-ff-shexp 512"
)
n_small=${#specs[@]} # the wide ones below go to the engine test alone
specs+=(
  "llama-wide-q4_k --arch llama --type q4_k --untied $wide"
  "llama-wide-q8_0 --arch llama --type q8_0 --untied $wide"
  "llama-wide-f16 --arch llama --type f16 --untied $wide"
)
files=()
for spec in "${specs[@]}"; do
  read -r name args <<<"$spec"
  f="$models/$name.gguf"
  if [[ ! -f "$f" ]]; then
    if [[ ! -x "$build/gen-model" ]]; then
      echo "tests/cuda/run.sh: $f is missing and $build/gen-model is not built" >&2
      exit 1
    fi
    # shellcheck disable=SC2086
    "$build/gen-model" "${shape[@]}" $args --out "$f" >/dev/null || exit 1
  fi
  files+=("$f")
done
wide_files=("${files[@]:n_small}")
files=("${files[@]:0:n_small}")

rc=0
"$build/tests/cuda/test-cuda-kernels" || rc=$?
if ((rc == 77)); then exit 77; fi
# The Q4_K integer GEMV's variants the default (auto: one input row on the
# pipelined kernel, its rows checked against the pair kernel's m = 2..3 bit
# for bit; more rows a warp per row on whole sub-block pairs, rows2 from
# 8192 inputs) leaves out of the kernel tests' 2304-input rows: the pair
# kernel at m = 1 too, a warp per row on pieces, a block per row, per 2 and
# per 4 rows.
for v in pair warp row rows2 rows4; do
  echo "test-cuda-kernels, HR_CUDA_Q4K=$v:"
  HR_CUDA_Q4K=$v "$build/tests/cuda/test-cuda-kernels" | grep -E "Q4_K +integer|passed" || rc=1
done
# The Q8_0 integer GEMV's others than the default (a block per 2 rows): a
# warp and a block per row, a block per 4 rows, the pipelined kernel (one
# input row; its norm- and SwiGLU-fused launches too).
for v in warp row rows4 pipe; do
  echo "test-cuda-kernels, HR_CUDA_Q80=$v:"
  HR_CUDA_Q80=$v "$build/tests/cuda/test-cuda-kernels" | grep -E "Q8_0 +integer|passed" || rc=1
done
"$build/tests/cuda/test-cuda-engine" "${files[@]}" || rc=1
"$build/tests/cuda/test-cuda-engine" "${wide_files[@]}" || rc=1
# The decode step's fused kernels (off by default): the RMSNorm inside the
# Q4_K GEMV after it, the SwiGLU inside gate/up, the attention's merge in
# its own last blocks. The ragged == alone checks hold a one-token step
# (fused) to the same token's bits in a larger step (not fused).
echo "test-cuda-engine, HR_CUDA_NORM_FUSE=1 (the norm inside the Q4_K GEMV):"
HR_CUDA_NORM_FUSE=1 "$build/tests/cuda/test-cuda-engine" "${wide_files[0]}" || rc=1
fuse_all="HR_CUDA_NORM_FUSE=1 HR_CUDA_SWIGLU_FUSE=1 HR_CUDA_ATTN_FUSE=1 HR_CUDA_QKV_FUSE=1 HR_CUDA_Q80=pipe"
echo "test-cuda-engine, $fuse_all:"
env $fuse_all "$build/tests/cuda/test-cuda-engine" "${wide_files[@]}" || rc=1
echo "test-cuda-engine, HR_CUDA_ATTN_FUSE=1 HR_CUDA_QKV_FUSE=1 (the attention's merge and qkv_post in it):"
HR_CUDA_ATTN_FUSE=1 HR_CUDA_QKV_FUSE=1 "$build/tests/cuda/test-cuda-engine" "${files[@]}" || rc=1
# Dense models multiply Q8_0 / Q4_0 / Q5_0 / IQ4_NL / MXFP4 in prefill on
# cuBLASLt by default and MoE models on the integer GEMM; the integer GEMM
# on the dense ones too, so both paths stay covered for every such type.
echo "test-cuda-engine, HR_CUDA_GEMM=int (the integer prefill GEMM in dense models):"
HR_CUDA_GEMM=int "$build/tests/cuda/test-cuda-engine" "$models/qwen3-q8_0.gguf" \
  "$models/qwen3-q4_0.gguf" "$models/qwen3-q5_0.gguf" "$models/qwen3-iq4_nl.gguf" \
  "$models/qwen3-mxfp4.gguf" "$models/qwen2-q8_0.gguf" "$models/qwen3-q4_k.gguf" \
  "$models/qwen3moe-q4_k.gguf" || rc=1
# The general integer GEMM on dense models' decode batches (HR_CUDA_INT_ROWS,
# off by default: slower than the f16 path there; Q4_K's batches take the
# small integer GEMM either way), and the split decode attention at 32
# runs (HR_CUDA_ATTN_NSPLIT; by default 256 / n_head_kv, 64 on these models).
echo "test-cuda-engine, HR_CUDA_INT_ROWS=64 HR_CUDA_ATTN_NSPLIT=32:"
HR_CUDA_INT_ROWS=64 HR_CUDA_ATTN_NSPLIT=32 "$build/tests/cuda/test-cuda-engine" \
  "$models/qwen3-q4_k.gguf" "$models/qwen3-q8_0.gguf" "$models/llama-q4_k_m.gguf" || rc=1
# MoE decode grouped by expert (a launch per expert with rows, after a wait
# for the groups mid-step, so no CUDA graph; HR_CUDA_MOE_ROWS=0). The
# default since 2026-12-07 is expert rows: one launch for a layer's experts.
echo "test-cuda-engine, HR_CUDA_MOE_ROWS=0 (MoE decode grouped by expert):"
HR_CUDA_MOE_ROWS=0 "$build/tests/cuda/test-cuda-engine" "$models/qwen3moe-q4_k.gguf" \
  "$models/qwen3moe-f32.gguf" "$models/qwen2moe-q8_0.gguf" "$models/mixtral-f16.gguf" \
  "$models/gptoss-mxfp4.gguf" "$models/qwen35moe-q8_0.gguf" || rc=1
"$build/tests/cuda/test-cuda-backend" "${files[@]}" || rc=1

# The external squeeze through `headroom serve`: a model whose token holds
# 32 KiB of KV (8 layers, 8 KV heads of 128), so 4 streams' growth is tens
# of MiB. It needs the server binary: an engine-only build (a bare GPU host)
# names one made elsewhere with HR_SERVE_BIN, and gen-model with
# HR_GEN_MODEL (LD_LIBRARY_PATH finding libmicrohttpd there; see
# tests/cuda/gpu-host.sh).
hr=${HR_SERVE_BIN:-$build/headroom}
if [[ -x "$hr" ]] && command -v python3 >/dev/null; then
  sq="$models/squeeze-kv32.gguf"
  if [[ ! -f "$sq" ]]; then
    "${HR_GEN_MODEL:-$build/gen-model}" --arch qwen3 --type f16 --n-embd 256 --n-layer 8 --n-head 8 \
      --n-head-kv 8 --head-dim 128 --n-ff 512 --vocab builtin --out "$sq" >/dev/null || exit 1
  fi
  echo "squeeze-serve (4 streams through headroom serve, another process taking the GPU):"
  python3 tests/cuda/squeeze-serve.py "$hr" "$build/tests/cuda/vram-hog" "$sq" || rc=1
  # A hybrid model's state slots on the device, its snapshots through the
  # prefix cache and back.
  echo "hybrid-serve (qwen35 through headroom serve, prefix-cache snapshots of the device state):"
  python3 tests/cuda/hybrid-serve.py "$hr" "$models/qwen35-f32.gguf" || rc=1
else
  echo "squeeze-serve, hybrid-serve: skipped, no headroom binary ($hr) or no python3"
fi
exit $rc
