/*
 * cuda-kernels.cu - the CUDA engine's kernels; see cuda-kernels.h.
 *
 * Written for agreement with the CPU engine first, then for speed: GEMVs
 * (integer dp4a kernels for Q4_K and Q8_0, 16-byte loads for F16/BF16, the
 * dequantizing float kernels for the rest), f16 weight tiles and inputs for
 * the tensor-core GEMMs (cuBLASLt, called from cuda-engine.c), the f32
 * tiled GEMM, paged attention (tiled on tensor cores for prefill, one warp
 * per token and head for decode). Each is checked against the CPU
 * reference in tests/cuda/test-cuda-kernels.c.
 */
#include "base/sys.h"
#include "cuda/cuda-kernels.h"
#include "cuda/cuda-plan.h"
#include "engine/moe-weights.h"
#include "engine/rope-row.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace cg = cooperative_groups;

#include <utility>

/* ---- launches: programmatic dependent launch ------------------------------
 *
 * Every kernel is launched with programmatic stream serialization allowed
 * (hr_launch) and begins with pdl_begin: it waits there until the kernel
 * before it on the stream has finished and its writes are visible, then
 * lets the kernel after it be scheduled. So the next kernel's launch and
 * its blocks' start overlap this one's last wave instead of following its
 * end: a decode step is ~15 small launches a layer, and on a GPU the gap
 * between two kernels is microseconds, a large part of a small matrix's
 * time. Inside a CUDA graph the same launches become programmatic edges.
 * Nothing a step writes is read before the wait (only weights are: see
 * pdl_prewait), so results are those of plain launches.
 * HR_CUDA_PDL=0 launches plainly (the A/B switch benchmarks use). */
/* Grids of at most this many blocks let the next kernel be scheduled as
 * soon as they start (set at preload: see pdl_mode). */
__device__ unsigned pdl_early_blocks;

__device__ __forceinline__ void pdl_begin(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (gridDim.x * gridDim.y * gridDim.z <= pdl_early_blocks)
        asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* Weights before the wait (HR_CUDA_PREWAIT=0 turns it off; set at preload):
 * the decode GEMVs and RMSNorm issue their first weight loads, then
 * pdl_begin. No kernel of a step writes weights, so reading them early
 * reads what reading them late would, and the results are the same bit
 * for bit; but a kernel scheduled early (the kernel before it is a small
 * grid, see pdl_early_blocks) then streams its first wave's weights while
 * that kernel still runs. MoE expert rows (o.rx) wait first: which expert
 * a row reads is the routing kernel's output. */
__device__ int pdl_prewait;

/* HR_CUDA_PDL: 0 plain launches. Otherwise when the next kernel is
 * scheduled: "early", as soon as this one's blocks start (they then wait
 * in griddepcontrol.wait for it to end); "late", as its blocks exit (the
 * launch is hidden, the last wave's tail is not); by default early for
 * grids of at most one block per SM and late for larger ones. Measured on
 * an H100 (tg128, 2 rounds): Qwen2.5-0.5B Q8_0 722 tok/s plain, 773 late,
 * 841 early; Llama-8B F16 136.5 plain, 138.7 late, 135.1 early. */
static int pdl_mode(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("HR_CUDA_PDL");
        v = e && !strcmp(e, "0") ? 0 : e && !strcmp(e, "early") ? 2 : e && !strcmp(e, "late") ? 1 : 3;
    }
    return v;
}

static int pdl_enabled(void)
{
    return pdl_mode() != 0;
}

/* cluster: the thread-block cluster's shape (1 x 1 x 1: none) */
template <typename... KArgs, typename... Args>
static cudaError_t hr_launch_cl(void (*kernel)(KArgs...), dim3 grid, dim3 block, dim3 cluster,
                                size_t smem, cudaStream_t s, Args &&...args)
{
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled();
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = cluster.x;
    attr[1].val.clusterDim.y = cluster.y;
    attr[1].val.clusterDim.z = cluster.z;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = cluster.x * cluster.y * cluster.z > 1 ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <typename... KArgs, typename... Args>
static cudaError_t hr_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t s, Args &&...args)
{
    return hr_launch_cl(kernel, grid, block, dim3(1, 1, 1), smem, s, std::forward<Args>(args)...);
}

/* ---- dequantization: one chunk of 32 consecutive elements ----------------
 *
 * Every supported type splits a row into chunks of 32 values that can be
 * decoded alone: a Q8_0 / Q4_0 block, or one of the 8 sub-blocks of a
 * K-quant super-block of 256. The expressions and their order are those of
 * kernels/quant.c, so the floats are bit-identical to the CPU's. */

__device__ __forceinline__ float f16_at(const uint8_t *p)
{
    return __half2float(__ushort_as_half(*(const unsigned short *)p));
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (ggml's get_scale_min_k4). */
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, float *sc, float *m)
{
    if (j < 4) {
        *sc = (float)(q[j] & 63);
        *m = (float)(q[j + 4] & 63);
    } else {
        *sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* kernels/quant-block32.c's tables: IQ4_NL's (IQ4_XS's too) and MXFP4's
 * E2M1 values doubled */
__constant__ int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};
__constant__ int8_t mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* MXFP4's E8M0 scale halved, 2^(e - 128) (hr_e8m0_to_f32_half) */
__device__ __forceinline__ float e8m0_half(uint8_t e)
{
    return __uint_as_float(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

__device__ __forceinline__ uint32_t u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Every product below is exact in f32 (a scale of at most 17 significant
 * bits times a quant of at most 7), so contracting "d * q + m" into an FMA
 * rounds the same as the CPU's multiply-then-add. */
template <int TYPE>
__device__ __forceinline__ void dequant_chunk(const uint8_t *row, uint32_t c, float v[32])
{
    if constexpr (TYPE == HR_CUDA_T_F32) {
        const float4 *p = (const float4 *)(row + (size_t)c * 128);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 a = p[i];
            v[4 * i] = a.x, v[4 * i + 1] = a.y, v[4 * i + 2] = a.z, v[4 * i + 3] = a.w;
        }
    } else if constexpr (TYPE == HR_CUDA_T_F16) {
        /* 64-byte chunks of 64-byte aligned rows: four 16-byte loads */
        const uint4 *p = (const uint4 *)(row + (size_t)c * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 u = p[i];
            const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 a = __half22float2(*(const __half2 *)&wd[j]);
                v[8 * i + 2 * j] = a.x, v[8 * i + 2 * j + 1] = a.y;
            }
        }
    } else if constexpr (TYPE == HR_CUDA_T_BF16) {
        const uint4 *p = (const uint4 *)(row + (size_t)c * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 u = p[i];
            const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                v[8 * i + 2 * j] = __uint_as_float(wd[j] << 16);
                v[8 * i + 2 * j + 1] = __uint_as_float(wd[j] & 0xFFFF0000u);
            }
        }
    } else if constexpr (TYPE == HR_CUDA_T_Q8_0) {
        const uint8_t *b = row + (size_t)c * 34;
        const float d = f16_at(b);
        const int8_t *qs = (const int8_t *)(b + 2);
#pragma unroll
        for (int i = 0; i < 32; i++)
            v[i] = (float)qs[i] * d;
    } else if constexpr (TYPE == HR_CUDA_T_Q4_0) {
        const uint8_t *b = row + (size_t)c * 18;
        const float d = f16_at(b);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            v[i] = (float)((b[2 + i] & 0x0F) - 8) * d;
            v[i + 16] = (float)((b[2 + i] >> 4) - 8) * d;
        }
    } else if constexpr (TYPE == HR_CUDA_T_Q4_1) {
        const uint8_t *b = row + (size_t)c * 20;
        const float d = f16_at(b), m = f16_at(b + 2);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            v[i] = (float)(b[4 + i] & 0x0F) * d + m;
            v[i + 16] = (float)(b[4 + i] >> 4) * d + m;
        }
    } else if constexpr (TYPE == HR_CUDA_T_Q5_0 || TYPE == HR_CUDA_T_Q5_1) {
        /* Q5_0: d, qh, qs, x = d (q - 16); Q5_1: d, m, qh, qs, x = d q + m */
        constexpr int off = TYPE == HR_CUDA_T_Q5_0 ? 2 : 4;
        const uint8_t *b = row + (size_t)c * (TYPE == HR_CUDA_T_Q5_0 ? 22 : 24);
        const float d = f16_at(b);
        const uint32_t h = u32_at(b + off);
        const uint8_t *qs = b + off + 4;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int lo = (qs[i] & 0x0F) | (int)((h >> i) & 1) << 4;
            const int hi = (qs[i] >> 4) | (int)((h >> (i + 16)) & 1) << 4;
            if constexpr (TYPE == HR_CUDA_T_Q5_0) {
                v[i] = (float)(lo - 16) * d;
                v[i + 16] = (float)(hi - 16) * d;
            } else {
                const float m = f16_at(b + 2);
                v[i] = (float)lo * d + m;
                v[i + 16] = (float)hi * d + m;
            }
        }
    } else if constexpr (TYPE == HR_CUDA_T_IQ4_NL) {
        const uint8_t *b = row + (size_t)c * 18;
        const float d = f16_at(b);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            v[i] = d * (float)iq4nl_values[b[2 + i] & 0x0F];
            v[i + 16] = d * (float)iq4nl_values[b[2 + i] >> 4];
        }
    } else if constexpr (TYPE == HR_CUDA_T_MXFP4) {
        const uint8_t *b = row + (size_t)c * 17;
        const float d = e8m0_half(b[0]);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            v[i] = (float)mxfp4_values[b[1 + i] & 0x0F] * d;
            v[i + 16] = (float)mxfp4_values[b[1 + i] >> 4] * d;
        }
    } else if constexpr (TYPE == HR_CUDA_T_Q2_K) {
        /* chunk s of a super-block: quants at 2s' bits of qs[32 (s / 4) ..],
         * two sub-blocks of 16, each its scale and min (kernels/quant-k2k3.c) */
        const uint32_t sb = c / 8, s = c % 8;
        const uint8_t *b = row + (size_t)sb * 84;
        const float d = f16_at(b + 80), dmin = f16_at(b + 82);
        const uint8_t *q = b + 16 + 32 * (s / 4);
        const int shift = 2 * (int)(s % 4);
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const uint8_t sc = b[2 * s + half];
            const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
#pragma unroll
            for (int l = 0; l < 16; l++)
                v[16 * half + l] = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
        }
    } else if constexpr (TYPE == HR_CUDA_T_Q3_K) {
        const uint32_t sb = c / 8, s = c % 8;
        const uint8_t *b = row + (size_t)sb * 110;
        const float d = f16_at(b + 108);
        const uint8_t *hm = b, *q = b + 32 + 32 * (s / 4), *scales = b + 96;
        const int shift = 2 * (int)(s % 4);
        const uint8_t mbit = (uint8_t)(1u << s);
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int j = 2 * (int)s + half;
            const int sc6 = (j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4) |
                            (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
            const float dl = d * (float)(sc6 - 32);
#pragma unroll
            for (int l = 16 * half; l < 16 * half + 16; l++)
                v[l] = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & mbit) ? 0 : 4));
        }
    } else if constexpr (TYPE == HR_CUDA_T_IQ4_XS) {
        const uint32_t sb = c / 8, ib = c % 8;
        const uint8_t *b = row + (size_t)sb * 136;
        const float d = f16_at(b);
        const uint32_t sh = (uint32_t)b[2] | (uint32_t)b[3] << 8;
        const int sc6 = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (int)((sh >> (2 * ib)) & 3) << 4;
        const float dl = d * (float)(sc6 - 32);
        const uint8_t *qs = b + 8 + 16 * ib;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            v[i] = dl * (float)iq4nl_values[qs[i] & 0x0F];
            v[i + 16] = dl * (float)iq4nl_values[qs[i] >> 4];
        }
    } else if constexpr (TYPE == HR_CUDA_T_Q4_K || TYPE == HR_CUDA_T_Q5_K) {
        const uint32_t sb = c / 8, s = c % 8;
        const uint8_t *b = row + (size_t)sb * (TYPE == HR_CUDA_T_Q4_K ? 144 : 176);
        const float d = f16_at(b), dmin = f16_at(b + 2);
        float sc, m;
        scale_min_k4((int)s, b + 4, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        const uint8_t *qs = b + (TYPE == HR_CUDA_T_Q4_K ? 16 : 48) + 32 * (s / 2);
        const int shift = (s & 1) ? 4 : 0;
        if constexpr (TYPE == HR_CUDA_T_Q4_K) {
#pragma unroll
            for (int l = 0; l < 32; l++)
                v[l] = d1 * (float)((qs[l] >> shift) & 0xF) - m1;
        } else {
            const uint8_t *qh = b + 16;
            const uint8_t u = (uint8_t)(1u << s);
#pragma unroll
            for (int l = 0; l < 32; l++)
                v[l] = d1 * (float)(((qs[l] >> shift) & 0xF) + (qh[l] & u ? 16 : 0)) - m1;
        }
    } else if constexpr (TYPE == HR_CUDA_T_Q6_K) {
        const uint32_t sb = c / 8, s = c % 8, half = s / 4, g = s % 4;
        const uint8_t *b = row + (size_t)sb * 210;
        const uint8_t *ql = b + 64 * half + ((g & 1) ? 32 : 0);
        const uint8_t *qh = b + 128 + 32 * half;
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * half + 2 * g;
        const float d = f16_at(b + 208);
        const int shift = (g >= 2) ? 4 : 0;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int q = (int)(((ql[l] >> shift) & 0xF) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
            v[l] = d * (float)sc[l / 16] * (float)q;
        }
    }
}

/* Calls F<TYPE> for a run-time type; false for a type the kernels lack. */
#define HR_DISPATCH(type, CALL)                                                                   \
    switch (type) {                                                                               \
    case HR_CUDA_T_F32: CALL(HR_CUDA_T_F32); break;                                                  \
    case HR_CUDA_T_F16: CALL(HR_CUDA_T_F16); break;                                                  \
    case HR_CUDA_T_BF16: CALL(HR_CUDA_T_BF16); break;                                                \
    case HR_CUDA_T_Q8_0: CALL(HR_CUDA_T_Q8_0); break;                                                \
    case HR_CUDA_T_Q4_0: CALL(HR_CUDA_T_Q4_0); break;                                                \
    case HR_CUDA_T_Q4_K: CALL(HR_CUDA_T_Q4_K); break;                                                \
    case HR_CUDA_T_Q5_K: CALL(HR_CUDA_T_Q5_K); break;                                                \
    case HR_CUDA_T_Q6_K: CALL(HR_CUDA_T_Q6_K); break;                                                \
    case HR_CUDA_T_Q4_1: CALL(HR_CUDA_T_Q4_1); break;                                                \
    case HR_CUDA_T_Q5_0: CALL(HR_CUDA_T_Q5_0); break;                                                \
    case HR_CUDA_T_Q5_1: CALL(HR_CUDA_T_Q5_1); break;                                                \
    case HR_CUDA_T_IQ4_NL: CALL(HR_CUDA_T_IQ4_NL); break;                                            \
    case HR_CUDA_T_MXFP4: CALL(HR_CUDA_T_MXFP4); break;                                              \
    case HR_CUDA_T_Q2_K: CALL(HR_CUDA_T_Q2_K); break;                                                \
    case HR_CUDA_T_Q3_K: CALL(HR_CUDA_T_Q3_K); break;                                                \
    case HR_CUDA_T_IQ4_XS: CALL(HR_CUDA_T_IQ4_XS); break;                                            \
    default: return cudaErrorInvalidValue;                                                        \
    }

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The GEMVs' ends, y[t][j] (+)= the row's sum (+ bias[j]) for t < m. A
 * warp per row: acc[t] summed over the warp, lane 0 stores. */
template <int MR = HR_CUDA_GEMV_MAX_ROWS>
__device__ __forceinline__ void gemv_warp_store(const float acc[MR], uint32_t m,
                                                uint32_t j, float *y, uint32_t ldy,
                                                const float *bias, int accumulate)
{
    const uint32_t lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < MR; t++) {
        if ((uint32_t)t < m) {
            float a = warp_sum(acc[t]);
            if (lane == 0) {
                if (bias)
                    a += bias[j];
                float *yp = y + (uint64_t)t * ldy + j;
                *yp = accumulate ? *yp + a : a;
            }
        }
    }
}

/* A block of 4 warps per row: each warp's sums, then thread t < m adds the
 * 4 warps' in warp order and stores. */
template <int MR = HR_CUDA_GEMV_MAX_ROWS>
__device__ __forceinline__ void gemv_block_store(const float acc[MR],
                                                 uint32_t m, uint32_t j, float *y, uint32_t ldy,
                                                 const float *bias, int accumulate)
{
    __shared__ float part[4][MR];
    const uint32_t lane = threadIdx.x & 31, wi = threadIdx.x / 32;
#pragma unroll
    for (int t = 0; t < MR; t++) {
        if ((uint32_t)t < m) {
            const float a = warp_sum(acc[t]);
            if (lane == 0)
                part[wi][t] = a;
        }
    }
    __syncthreads();
    if (threadIdx.x < m) {
        const uint32_t t = threadIdx.x;
        float a = ((part[0][t] + part[1][t]) + part[2][t]) + part[3][t];
        if (bias)
            a += bias[j];
        float *yp = y + (uint64_t)t * ldy + j;
        *yp = accumulate ? *yp + a : a;
    }
}

/* Row jg of a GEMV's parts (hr_cuda_gemv_out): its weights, where its
 * result goes and its bias. Selects, not indexing, keep the parameter
 * arrays out of local memory. */
struct gemv_row {
    const uint8_t *w;
    float *y;
    const float *bias;
    uint32_t ldy, j;
};

__device__ __forceinline__ gemv_row gemv_part(const hr_cuda_gemv_out &o, uint32_t jg,
                                              uint64_t row_bytes)
{
    const int p = jg < o.end[0] ? 0 : jg < o.end[1] ? 1 : 2;
    const uint32_t j0 = p == 0 ? 0 : p == 1 ? o.end[0] : o.end[1];
    const uint8_t *w = p == 0 ? o.w[0] : p == 1 ? o.w[1] : o.w[2];
    float *y = p == 0 ? o.y[0] : p == 1 ? o.y[1] : o.y[2];
    const uint32_t ldy = p == 0 ? o.ldy[0] : p == 1 ? o.ldy[1] : o.ldy[2];
    if (o.rx) { /* expert rows: this launch row's expert and output row */
        w += (uint64_t)o.rx[blockIdx.y] * o.mat_bytes;
        y += (uint64_t)blockIdx.y * ldy;
    }
    return {w + (uint64_t)(jg - j0) * row_bytes, y,
            p == 0 ? o.bias[0] : p == 1 ? o.bias[1] : o.bias[2], ldy, jg - j0};
}

/* Expert rows: the kernel's input is launch row blockIdx.y alone (m = 1). */
__device__ __forceinline__ void gemv_rows_x(const hr_cuda_gemv_out &o, uint32_t k, const float **x,
                                            uint32_t *m)
{
    if (o.rx)
        *x += (uint64_t)blockIdx.y * k, *m = 1;
}

/* The same for quantized inputs: dg values a scale (32: Q8_0, 256: Q8_K). */
__device__ __forceinline__ void gemv_rows_q(const hr_cuda_gemv_out &o, uint32_t k, uint32_t dg,
                                            hr_cuda_q8_act *xa, uint32_t *m)
{
    if (o.rx) {
        const uint64_t r = blockIdx.y;
        xa->q += r * k, xa->d += r * (k / dg), *m = 1;
        if (xa->s)
            xa->s += r * (k / 16);
    }
}

/* A Q8_0 block's integer dot: 32 int8 weights (q, 4 a word) times 32 int8
 * inputs (va, vb), in order. */
__device__ __forceinline__ int dot_q8_32(const uint32_t q[8], int4 va, int4 vb)
{
    int sum = 0;
    sum = __dp4a((int)q[0], va.x, sum);
    sum = __dp4a((int)q[1], va.y, sum);
    sum = __dp4a((int)q[2], va.z, sum);
    sum = __dp4a((int)q[3], va.w, sum);
    sum = __dp4a((int)q[4], vb.x, sum);
    sum = __dp4a((int)q[5], vb.y, sum);
    sum = __dp4a((int)q[6], vb.z, sum);
    sum = __dp4a((int)q[7], vb.w, sum);
    return sum;
}

/* ---- embeddings, dequantized tiles ---------------------------------------- */

/* One thread per 32-element chunk of the rows asked for. */
template <int TYPE>
__global__ void dequant_rows_kernel(const uint8_t *w, uint64_t row_bytes, uint32_t k,
                                    const int32_t *ids, uint32_t row0, uint32_t n_rows, float *out)
{
    pdl_begin();
    const uint64_t chunks = k / 32, i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= chunks * n_rows)
        return;
    const uint32_t r = (uint32_t)(i / chunks), c = (uint32_t)(i % chunks);
    const uint64_t src = ids ? (uint64_t)ids[r] : (uint64_t)row0 + r;
    float v[32];
    dequant_chunk<TYPE>(w + src * row_bytes, c, v);
    float4 *o = (float4 *)(out + (uint64_t)r * k + (uint64_t)c * 32);
#pragma unroll
    for (int j = 0; j < 8; j++)
        o[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
}

static cudaError_t dequant_rows(int type, const void *w, uint64_t row_bytes, uint32_t k,
                                const int32_t *ids, uint32_t row0, uint32_t n_rows, float *out,
                                cudaStream_t s)
{
    if (!n_rows)
        return cudaSuccess;
    const uint64_t n = (uint64_t)(k / 32) * n_rows;
    const unsigned blocks = (unsigned)((n + 127) / 128);
#define L_DQ(T)                                                                                   \
    hr_launch(dequant_rows_kernel<T>, blocks, 128, 0, s, (const uint8_t *)w, row_bytes, k, ids, row0,   \
                                                  n_rows, out)
    HR_DISPATCH(type, L_DQ)
#undef L_DQ
    return cudaGetLastError();
}

extern "C" cudaError_t hr_cuda_embed(int type, const void *w, uint64_t row_bytes, uint32_t k,
                                     const int32_t *tokens, uint32_t n_tokens, float *x,
                                     cudaStream_t s)
{
    return dequant_rows(type, w, row_bytes, k, tokens, 0, n_tokens, x, s);
}

extern "C" cudaError_t hr_cuda_dequant_rows(int type, const void *w, uint64_t row_bytes,
                                            uint32_t k, uint32_t row0, uint32_t n_rows, float *out,
                                            cudaStream_t s)
{
    return dequant_rows(type, w, row_bytes, k, NULL, row0, n_rows, out, s);
}

/* One thread per 32-element chunk, stored as f16 (or bf16): the weight
 * tiles of the tensor-core GEMM. Each value is the f32 dequantization
 * above, rounded to nearest. Reads the quantized bytes once and writes 2
 * bytes per weight: for an 8B Q4_K model about 15 GB per prefill step,
 * some 4 ms at the H200's copy rate (the price of using cuBLASLt's GEMMs
 * unchanged). */
template <int TYPE, int BF>
__global__ void dequant_half_kernel(const uint8_t *w, uint64_t row_bytes, uint32_t k, uint32_t row0,
                                    uint32_t n_rows, uint16_t *out)
{
    pdl_begin();
    const uint64_t chunks = k / 32, i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= chunks * n_rows)
        return;
    const uint32_t r = (uint32_t)(i / chunks), c = (uint32_t)(i % chunks);
    float v[32];
    dequant_chunk<TYPE>(w + ((uint64_t)row0 + r) * row_bytes, c, v);
    uint32_t h[16];
#pragma unroll
    for (int j = 0; j < 16; j++) {
        uint16_t a, b;
        if (BF) {
            a = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * j]));
            b = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * j + 1]));
        } else {
            a = __half_as_ushort(__float2half_rn(v[2 * j]));
            b = __half_as_ushort(__float2half_rn(v[2 * j + 1]));
        }
        h[j] = (uint32_t)a | ((uint32_t)b << 16);
    }
    uint4 *o = (uint4 *)(out + (uint64_t)r * k + (uint64_t)c * 32);
#pragma unroll
    for (int j = 0; j < 4; j++)
        o[j] = make_uint4(h[4 * j], h[4 * j + 1], h[4 * j + 2], h[4 * j + 3]);
}

extern "C" cudaError_t hr_cuda_dequant_half(int type, const void *w, uint64_t row_bytes,
                                            uint32_t k, uint32_t row0, uint32_t n_rows, void *out,
                                            int bf16, cudaStream_t s)
{
    if (!n_rows)
        return cudaSuccess;
    if (k % 32)
        return cudaErrorInvalidValue;
    const uint64_t n = (uint64_t)(k / 32) * n_rows;
    const unsigned blocks = (unsigned)((n + 127) / 128);
#define L_DQH(T)                                                                                  \
    do {                                                                                          \
        if (bf16)                                                                                 \
            hr_launch(dequant_half_kernel<T, 1>, blocks, 128, 0, s, (const uint8_t *)w, row_bytes, k,    \
                                                             row0, n_rows, (uint16_t *)out);      \
        else                                                                                      \
            hr_launch(dequant_half_kernel<T, 0>, blocks, 128, 0, s, (const uint8_t *)w, row_bytes, k,    \
                                                             row0, n_rows, (uint16_t *)out);      \
    } while (0)
    HR_DISPATCH(type, L_DQH)
#undef L_DQH
    return cudaGetLastError();
}

/* ---- RoPE table ------------------------------------------------------------ */

/* One thread per token: the multiply chain is sequential by definition
 * (ggml_rope_cache_init), n_rot / 2 steps. */
__global__ void rope_table_kernel(const int32_t *pos, uint32_t n_tokens, uint32_t n_rot,
                                  hr_cuda_rope r, const float *freqs, float *rope)
{
    pdl_begin();
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_tokens)
        return;
    hr_rope_row(pos[t], n_rot, r.theta_scale, r.freq_scale, r.ext_factor, r.attn_factor,
                r.corr_dims[0], r.corr_dims[1], freqs, rope + (size_t)t * n_rot);
}

extern "C" cudaError_t hr_cuda_rope_table(const int32_t *pos, uint32_t n_tokens, uint32_t n_rot,
                                          const struct hr_cuda_rope *r, const float *freqs,
                                          float *rope, cudaStream_t s)
{
    hr_launch(rope_table_kernel, (n_tokens + 63) / 64, 64, 0, s, pos, n_tokens, n_rot, *r, freqs,
              rope);
    return cudaGetLastError();
}

/* ---- RMSNorm (with the residual add fused) --------------------------------- */

/* ggml's Q8_0 rounding (x86 from_float) of a block of 32 whose largest
 * |value| is amax: the f16 scale, the multiplier, and a value's int8
 * (through an integer: rint(-0.3) is -0.0, the quant is +0). */
__device__ __forceinline__ float q80_d(float amax)
{
    return __half2float(__float2half_rn(amax / 127.f));
}

__device__ __forceinline__ float q80_id(float amax)
{
    return amax != 0.0f ? 127.f / amax : 0.0f;
}

__device__ __forceinline__ int q80_q(float v, float id)
{
    return max(-128, min(127, __float2int_rn(v * id)));
}

/* The first value of largest magnitude among (ax, ix, v) candidates:
 * larger |v|, or equal and a lower index. */
__device__ __forceinline__ void q8k_best(float &ax, int &ix, float &v, float a2, int i2, float v2)
{
    if (a2 > ax || (a2 == ax && i2 < ix))
        ax = a2, ix = i2, v = v2;
}

__device__ __forceinline__ void q8k_warp_best(float &ax, int &ix, float &v)
{
#pragma unroll
    for (int o2 = 16; o2 > 0; o2 >>= 1) {
        const float a2 = __shfl_xor_sync(0xffffffffu, ax, o2);
        const int i2 = __shfl_xor_sync(0xffffffffu, ix, o2);
        const float v2 = __shfl_xor_sync(0xffffffffu, v, o2);
        q8k_best(ax, ix, v, a2, i2, v2);
    }
}

/* A thread's N consecutive values v (the first at index i0): its first
 * value of largest magnitude, as q8k_best's candidates. */
template <int N>
__device__ __forceinline__ void q8k_thread_best(const float (&v)[N], int i0, float &ax, int &ix,
                                                float &bv)
{
    ax = fabsf(v[0]), bv = v[0], ix = i0;
#pragma unroll
    for (int j = 1; j < N; j++)
        q8k_best(ax, ix, bv, fabsf(v[j]), i0 + j, v[j]);
}

/* q = min(127, rint(-127 / mx x v)); 0 when mx is 0. */
__device__ __forceinline__ int q8k_q(float mx, float v)
{
    return mx != 0.0f ? min(127, __float2int_rn(-127.f / mx * v)) : 0;
}

__device__ __forceinline__ float q8k_d(float mx)
{
    return mx != 0.0f ? 1 / (-127.f / mx) : 0.0f;
}

/* A thread's N values quantized against the super-block's mx; their sum. */
template <int N>
__device__ __forceinline__ int q8k_thread_q(float mx, const float (&v)[N], int (&qv)[N])
{
    int sum = 0;
#pragma unroll
    for (int j = 0; j < N; j++)
        qv[j] = q8k_q(mx, v[j]), sum += qv[j];
    return sum;
}

/* A Q8_K super-block held by a block of 256 threads, value v of thread
 * threadIdx.x (every thread calls): the first value of largest magnitude
 * (0 when all are 0), for every thread. */
__device__ float q8k_block_max(float v)
{
    __shared__ float s_ax[8], s_v[8];
    __shared__ int s_ix[8];
    __shared__ float s_max;
    float ax = fabsf(v), bv = v;
    int ix = (int)threadIdx.x;
    q8k_warp_best(ax, ix, bv);
    if ((threadIdx.x & 31) == 0)
        s_ax[threadIdx.x / 32] = ax, s_ix[threadIdx.x / 32] = ix, s_v[threadIdx.x / 32] = bv;
    __syncthreads();
    if (threadIdx.x == 0) {
        float ba = s_ax[0], bvv = s_v[0];
        int bi = s_ix[0];
        for (int w2 = 1; w2 < 8; w2++)
            q8k_best(ba, bi, bvv, s_ax[w2], s_ix[w2], s_v[w2]);
        s_max = ba == 0.0f ? 0.0f : bvv;
    }
    __syncthreads();
    return s_max;
}

/* One Q8_K super-block by a block of 256 threads, value v of thread
 * threadIdx.x (every thread calls): q[256], its scale d and its 16 sums. */
__device__ void q8k_block256(float v, int8_t *q, float *d, int16_t *s)
{
    const float mx = q8k_block_max(v);
    const int qv = q8k_q(mx, v);
    q[threadIdx.x] = (int8_t)qv;
    if (threadIdx.x == 0)
        *d = q8k_d(mx);
    int sum = qv;
#pragma unroll
    for (int o2 = 8; o2 > 0; o2 >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o2);
    if ((threadIdx.x & 15) == 0)
        s[threadIdx.x / 16] = (int16_t)sum;
}

/* The same for a super-block held by 64 consecutive threads of the block
 * (t64 = 0..63 its place), 4 consecutive values each (o: values 4 t64 ..
 * 4 t64 + 3); `in` false: the super-block is past the row (all its threads
 * alike), nothing is written. Every thread of the block calls. */
__device__ void q8k_block64x4(float4 o, bool in, uint32_t t64, int8_t *q, float *d, int16_t *s)
{
    __shared__ float s_ax[32], s_v[32];
    __shared__ int s_ix[32];
    const float ov[4] = {o.x, o.y, o.z, o.w};
    float ax, bv;
    int ix;
    q8k_thread_best(ov, (int)(4 * t64), ax, ix, bv);
    q8k_warp_best(ax, ix, bv);
    const uint32_t w = threadIdx.x / 32;
    if ((threadIdx.x & 31) == 0)
        s_ax[w] = ax, s_ix[w] = ix, s_v[w] = bv;
    __syncthreads();
    const uint32_t w0 = w & ~1u; /* the pair of warps of this super-block */
    float ba = s_ax[w0], bvv = s_v[w0];
    int bi = s_ix[w0];
    q8k_best(ba, bi, bvv, s_ax[w0 + 1], s_ix[w0 + 1], s_v[w0 + 1]);
    const float mx = ba == 0.0f ? 0.0f : bvv;
    int qv[4];
    int sum = q8k_thread_q(mx, ov, qv);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (in) {
        ((char4 *)q)[t64] = make_char4((signed char)qv[0], (signed char)qv[1],
                                       (signed char)qv[2], (signed char)qv[3]);
        if (t64 == 0)
            *d = q8k_d(mx);
        if (t64 % 4 == 0)
            s[t64 / 4] = (int16_t)sum;
    }
    __syncthreads(); /* s_* are read before the next pass writes them */
}

__global__ void rms_norm_kernel(float *x, const float *add, const int32_t *rows, uint32_t n,
                                const float *w, float eps, float *y, hr_cuda_norm_prep pr)
{
    /* A thread's first float4 of the weights, before the wait (pdl_prewait):
     * the weights left L2 with the step's GEMVs, so their load is a DRAM
     * round trip after the reduction otherwise. */
    const bool v4 = n % 4 == 0, g0_in = v4 && threadIdx.x < n / 4;
    float4 g0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (pdl_prewait && g0_in)
        g0 = ((const float4 *)w)[threadIdx.x];
    pdl_begin();
    if (!pdl_prewait && g0_in)
        g0 = ((const float4 *)w)[threadIdx.x];
    __shared__ double part[32];
    const uint32_t r = blockIdx.x, src = rows ? (uint32_t)rows[r] : r;
    float *xr = x + (size_t)src * n;
    double sum = 0.0;
    /* Rows of a multiple of 4 as float4, one or two per thread (the block
     * is n / 4 threads up to 1024): a scalar loop of 16 dependent-latency
     * iterations made this kernel 14 us on the H200, 65 times a token. */
    if (v4) {
        for (uint32_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
            float4 v = ((const float4 *)xr)[i];
            if (add) {
                const float4 b = ((const float4 *)(add + (size_t)src * n))[i];
                v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
                ((float4 *)xr)[i] = v;
            }
            sum += (double)(v.x * v.x) + (double)(v.y * v.y) + (double)(v.z * v.z) +
                   (double)(v.w * v.w);
        }
    } else {
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
            float v = xr[i];
            if (add) {
                v += add[(size_t)src * n + i];
                xr[i] = v;
            }
            sum += (double)(v * v);
        }
    }
    sum = warp_sum_d(sum);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        double p = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
        p = warp_sum_d(p);
        if (threadIdx.x == 0)
            part[0] = p;
    }
    __syncthreads();
    const float mean = (float)(part[0] / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    float *yr = y + (size_t)r * n;
    if (v4 && pr.kind != HR_CUDA_NORM_PREP_NONE) {
        /* Every thread runs every pass (shuffles below): a Q8_0 block of 32
         * is 8 consecutive threads' float4s, all in or all out (n % 32 == 0). */
        for (uint32_t i0 = 0; i0 < n / 4; i0 += blockDim.x) {
            const uint32_t i = i0 + threadIdx.x;
            const bool in = i < n / 4;
            float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (in) {
                const float4 v = ((const float4 *)xr)[i];
                const float4 g = i == threadIdx.x ? g0 : ((const float4 *)w)[i];
                o = make_float4((v.x * scale) * g.x, (v.y * scale) * g.y, (v.z * scale) * g.z,
                                (v.w * scale) * g.w);
                ((float4 *)yr)[i] = o;
            }
            if (pr.kind == HR_CUDA_NORM_PREP_Q8_K) {
                const size_t sb = (size_t)r * (n / 256) + i / 64; /* super-block */
                q8k_block64x4(o, in, i % 64, pr.q.q + sb * 256, pr.q.d + sb, pr.q.s + sb * 16);
            } else if (pr.kind == HR_CUDA_NORM_PREP_F16) {
                if (in)
                    ((float4 *)(pr.act + (size_t)r * n))[i] = make_float4(
                        __half2float(__float2half_rn(o.x)), __half2float(__float2half_rn(o.y)),
                        __half2float(__float2half_rn(o.z)), __half2float(__float2half_rn(o.w)));
            } else { /* Q8_0 on int8, as quant_q80_kernel */
                float amax = fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w)));
#pragma unroll
                for (int s = 1; s < 8; s <<= 1)
                    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, s));
                const float d = q80_d(amax);
                const float id = q80_id(amax);
                if (in) {
                    const float ov[4] = {o.x, o.y, o.z, o.w};
                    char4 q;
                    q.x = (signed char)q80_q(ov[0], id);
                    q.y = (signed char)q80_q(ov[1], id);
                    q.z = (signed char)q80_q(ov[2], id);
                    q.w = (signed char)q80_q(ov[3], id);
                    ((char4 *)(pr.q.q + (size_t)r * n))[i] = q;
                    if (i % 8 == 0)
                        pr.q.d[(size_t)r * (n / 32) + i / 8] = d;
                }
            }
        }
    } else if (v4) {
        for (uint32_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
            const float4 v = ((const float4 *)xr)[i];
            const float4 g = i == threadIdx.x ? g0 : ((const float4 *)w)[i];
            ((float4 *)yr)[i] = make_float4((v.x * scale) * g.x, (v.y * scale) * g.y,
                                            (v.z * scale) * g.z, (v.w * scale) * g.w);
        }
    } else {
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
            yr[i] = (xr[i] * scale) * w[i];
    }
}

extern "C" cudaError_t hr_cuda_rms_norm(float *x, const float *add, const int32_t *rows,
                                        uint32_t n_rows, uint32_t n, const float *w, float eps,
                                        float *y, cudaStream_t s)
{
    if (!n_rows)
        return cudaSuccess;
    unsigned threads = n % 4 == 0 ? (n / 4 + 31) / 32 * 32 : 256;
    threads = threads < 64 ? 64 : threads > 1024 ? 1024 : threads;
    hr_cuda_norm_prep none;
    memset(&none, 0, sizeof(none));
    hr_launch(rms_norm_kernel, n_rows, threads, 0, s, x, add, rows, n, w, eps, y, none);
    return cudaGetLastError();
}

/* A prepared-input kind a fused kernel makes, on rows of n values (Q8_0
 * blocks of 32, Q8_K super-blocks of 256). */
static bool norm_prep_ok(const hr_cuda_norm_prep *pr, uint64_t n)
{
    switch (pr->kind) {
    case HR_CUDA_NORM_PREP_F16: case HR_CUDA_NORM_PREP_Q8_0: return n % 32 == 0;
    case HR_CUDA_NORM_PREP_Q8_K: return n % 256 == 0;
    default: return false;
    }
}

extern "C" cudaError_t hr_cuda_rms_norm_prep(float *x, uint32_t n_rows, uint32_t n,
                                             const float *w, float eps, float *y,
                                             const hr_cuda_norm_prep *pr, cudaStream_t s)
{
    if (!n_rows)
        return cudaSuccess;
    if (!norm_prep_ok(pr, n))
        return cudaErrorInvalidValue;
    unsigned threads = (n / 4 + 31) / 32 * 32;
    threads = threads < 64 ? 64 : threads > 1024 ? 1024 : threads;
    hr_launch(rms_norm_kernel, n_rows, threads, 0, s, x, (const float *)NULL,
              (const int32_t *)NULL, n, w, eps, y, *pr);
    return cudaGetLastError();
}

/* ---- matmul inputs rounded to the vec-dot format ----------------------------
 *
 * The values ggml-cpu multiplies by (kernels/quant.c): f16 and bf16 round to
 * nearest even; Q8_0 (x86 from_float): d = amax / 127 stored as f16, q =
 * rint(x x 127 / amax) saturated, value = f16(d) x q; Q8_K: the value of
 * largest magnitude (the first such) sets iscale = -127 / max, q =
 * min(127, rint(iscale x x)), value = (1 / iscale) x q. */

/* Stores v as the output kind asked for: f32 (0), f16 (1) or bf16 (2); the
 * tensor-core GEMM takes its inputs as 16-bit floats. */
__device__ __forceinline__ void store_out(void *out, size_t i, int kind, float v)
{
    if (kind == 0)
        ((float *)out)[i] = v;
    else if (kind == 1)
        ((__half *)out)[i] = __float2half_rn(v);
    else
        ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(v);
}

__global__ void act_round_kernel(int act, const float *x, uint32_t k, void *out_v, int kind)
{
    pdl_begin();
    const uint32_t row = blockIdx.y;
    const float *xr = x + (size_t)row * k;
    const size_t o = (size_t)row * k;
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; /* < k: k % 256 == 0 or masked */
    const bool in = i < k;
    const float v = in ? xr[i] : 0.0f;
    if (act == HR_CUDA_ACT_F16) {
        if (in)
            store_out(out_v, o + i, kind, __half2float(__float2half_rn(v)));
    } else if (act == HR_CUDA_ACT_BF16) {
        if (in)
            store_out(out_v, o + i, kind, __bfloat162float(__float2bfloat16_rn(v)));
    } else if (act == HR_CUDA_ACT_Q8_0) {
        /* A warp is one 32-value block. */
        const float amax = warp_max(fabsf(v));
        const float d = q80_d(amax);
        const int q = q80_q(v, q80_id(amax));
        if (in)
            store_out(out_v, o + i, kind, d * (float)q);
    } else { /* Q8_K: the block of 256 threads is one super-block */
        const float mx = q8k_block_max(v);
        if (in)
            store_out(out_v, o + i, kind, mx == 0.0f ? 0.0f : q8k_d(mx) * (float)q8k_q(mx, v));
    }
}

extern "C" cudaError_t hr_cuda_act_round(enum hr_cuda_act act, const float *x, uint32_t m,
                                         uint32_t k, float *out, cudaStream_t s)
{
    if (!m)
        return cudaSuccess;
    if (act == HR_CUDA_ACT_F32)
        return cudaMemcpyAsync(out, x, (size_t)m * k * sizeof(float), cudaMemcpyDeviceToDevice, s);
    const unsigned threads = act == HR_CUDA_ACT_Q8_K ? 256 : 128;
    dim3 grid((k + threads - 1) / threads, m);
    hr_launch(act_round_kernel, grid, threads, 0, s, (int)act, x, k, out, 0);
    return cudaGetLastError();
}

extern "C" cudaError_t hr_cuda_act_round_half(enum hr_cuda_act act, const float *x, uint32_t m,
                                              uint32_t k, void *out, int bf16, cudaStream_t s)
{
    if (!m)
        return cudaSuccess;
    if (act == HR_CUDA_ACT_F32)
        return cudaErrorInvalidValue;
    const unsigned threads = act == HR_CUDA_ACT_Q8_K ? 256 : 128;
    dim3 grid((k + threads - 1) / threads, m);
    hr_launch(act_round_kernel, grid, threads, 0, s, (int)act, x, k, out, bf16 ? 2 : 1);
    return cudaGetLastError();
}

/* ---- GEMV: decode and small batches ----------------------------------------
 *
 * One warp per weight row; lane l decodes chunks l, l + 32, ... of the row
 * (32 values each, in registers) and multiplies them with the same 32
 * inputs of each of the m <= 8 rows of x, then the warp sums. The weights
 * are read once for all m rows. Each output's summation order depends only
 * on k, never on m: a token's result does not depend on its batch. */
template <int TYPE>
__global__ void __launch_bounds__(128) gemv_kernel(hr_cuda_gemv_out o, uint64_t row_bytes,
                                                   uint32_t k, const float *x, uint32_t m,
                                                   int accumulate)
{
    pdl_begin();
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t jg = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (jg >= o.n)
        return;
    const gemv_row R = gemv_part(o, jg, row_bytes);
    gemv_rows_x(o, k, &x, &m);
    const uint8_t *row = R.w;
    float acc[HR_CUDA_GEMV_MAX_ROWS];
#pragma unroll
    for (int t = 0; t < HR_CUDA_GEMV_MAX_ROWS; t++)
        acc[t] = 0.0f;
    for (uint32_t c = lane; c < k / 32; c += 32) {
        float v[32];
        dequant_chunk<TYPE>(row, c, v);
#pragma unroll
        for (int t = 0; t < HR_CUDA_GEMV_MAX_ROWS; t++) {
            if ((uint32_t)t < m) {
                const float4 *xp = (const float4 *)(x + (uint64_t)t * k + (uint64_t)c * 32);
                float a = acc[t];
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const float4 xv = xp[i];
                    a = fmaf(v[4 * i], xv.x, a);
                    a = fmaf(v[4 * i + 1], xv.y, a);
                    a = fmaf(v[4 * i + 2], xv.z, a);
                    a = fmaf(v[4 * i + 3], xv.w, a);
                }
                acc[t] = a;
            }
        }
    }
    gemv_warp_store(acc, m, R.j, R.y, R.ldy, R.bias, accumulate);
}

/* Q4_K, rows 16-byte aligned: the same products, loaded as the bytes lie,
 * four weight rows per warp.
 *
 * A super-block (144 bytes) is a 16-byte header (d, dmin, 12 scale bytes)
 * and 128 quant bytes in 8 pieces of 16; piece (p, h) holds the low nibbles
 * of sub-block 2p, values 16h..16h+15, and the high nibbles of sub-block
 * 2p+1, the same values. Lane l takes pieces l, l + 32, ... of its warp's
 * four rows: per piece two 16-byte loads a row (header, quants), 8 in
 * flight, 8 consecutive lanes one super-block, so a warp's loads are
 * contiguous; each input float4 is loaded once for the four rows. (The
 * generic kernel's lane decodes a 32-value chunk with byte loads and reads
 * the whole input per row: 249 GB/s on an 8B shape; one row per warp with
 * these loads: 372.) The weight values are the CPU's (d1 x q - m1, as
 * dequant_chunk). Each lane's sum runs over its pieces in order and the
 * warp then sums lanes: an output's order depends on k only, never on m or
 * on which rows share its warp. */
#define Q4K_ROWS 4
/* Byte i (0..11) of the 12 scale bytes, header words y, z, w (registers;
 * taking the header's address would put it in local memory). */
__device__ __forceinline__ uint32_t q4k_sbyte(const uint4 hd, uint32_t i)
{
    const uint32_t word = i < 4 ? hd.y : i < 8 ? hd.z : hd.w;
    return (word >> (8 * (i % 4))) & 0xFF;
}

/* scale_min_k4 on the header in registers: sub-blocks 2p and 2p + 1. The
 * scales of sub-blocks 0-3 are the low 6 bits of header bytes 0-3 (hd.y),
 * of 4-7 the low nibbles of bytes 8-11 (hd.w) with bytes 0-3's top 2 bits
 * above them; the mins the same from bytes 4-7 (hd.z) and the high
 * nibbles. Each is made for 4 sub-blocks at once in one word (ggml's
 * kmask arithmetic), then the pair's two bytes are shifted out: selecting
 * bytes on a run-time index cost the decode GEMV about twice its other
 * instructions. The values are the same integers, so the same floats. */
__device__ __forceinline__ void q4k_scales(const uint4 hd, uint32_t p, float *d1a, float *m1a,
                                           float *d1b, float *m1b)
{
    const float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xFFFF)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
    const bool lo = p < 2;
    const uint32_t sw =
        lo ? hd.y & 0x3F3F3F3Fu : (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u);
    const uint32_t mw =
        lo ? hd.z & 0x3F3F3F3Fu : ((hd.w >> 4) & 0x0F0F0F0Fu) | ((hd.z >> 2) & 0x30303030u);
    const uint32_t sh = 16 * (p & 1);
    *d1a = d * (float)((sw >> sh) & 0xFF), *d1b = d * (float)((sw >> (sh + 8)) & 0xFF);
    *m1a = dmin * (float)((mw >> sh) & 0xFF), *m1b = dmin * (float)((mw >> (sh + 8)) & 0xFF);
}

__global__ void __launch_bounds__(128) gemv_q4k_kernel(const uint8_t *w, uint64_t row_bytes,
                                                       uint32_t k, uint32_t n, const float *x,
                                                       uint32_t m, float *y, uint32_t ldy,
                                                       const float *bias, int accumulate,
                                                       const int32_t *rx, uint64_t mat_bytes)
{
    pdl_begin();
    if (rx) { /* expert rows: grid row y is input row y, by expert rx[y] */
        w += (uint64_t)rx[blockIdx.y] * mat_bytes;
        x += (uint64_t)blockIdx.y * k;
        y += (uint64_t)blockIdx.y * ldy;
        m = 1;
    }
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t j0 = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * Q4K_ROWS;
    if (j0 >= n)
        return;
    const uint32_t nr = n - j0 < Q4K_ROWS ? n - j0 : Q4K_ROWS;
    float acc[HR_CUDA_GEMV_MAX_ROWS][Q4K_ROWS];
#pragma unroll
    for (int t = 0; t < HR_CUDA_GEMV_MAX_ROWS; t++)
#pragma unroll
        for (int r = 0; r < Q4K_ROWS; r++)
            acc[t][r] = 0.0f;
    const uint32_t pieces = k / 256 * 8;
    for (uint32_t pc = lane; pc < pieces; pc += 32) {
        const uint32_t sb = pc / 8, p = (pc / 2) % 4, h = pc % 2;
        uint4 hd[Q4K_ROWS], qv[Q4K_ROWS];
#pragma unroll
        for (int r = 0; r < Q4K_ROWS; r++) {
            /* a missing row (n % 4) reads row j0 again and is not stored */
            const uint8_t *b = w + (uint64_t)(j0 + ((uint32_t)r < nr ? r : 0)) * row_bytes +
                               (size_t)sb * 144;
            hd[r] = *(const uint4 *)b;
            qv[r] = *(const uint4 *)(b + 16 + 32 * p + 16 * h);
        }
        float d1a[Q4K_ROWS], m1a[Q4K_ROWS], d1b[Q4K_ROWS], m1b[Q4K_ROWS];
#pragma unroll
        for (int r = 0; r < Q4K_ROWS; r++)
            q4k_scales(hd[r], p, &d1a[r], &m1a[r], &d1b[r], &m1b[r]);
        const uint64_t xo = (uint64_t)sb * 256 + 64 * p + 16 * h;
#pragma unroll
        for (int t = 0; t < HR_CUDA_GEMV_MAX_ROWS; t++) {
            if ((uint32_t)t < m) {
                const float4 *xl = (const float4 *)(x + (uint64_t)t * k + xo);
                const float4 *xh = (const float4 *)(x + (uint64_t)t * k + xo + 32);
                float xv[32];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float4 a = xl[i], b2 = xh[i];
                    xv[4 * i] = a.x, xv[4 * i + 1] = a.y, xv[4 * i + 2] = a.z, xv[4 * i + 3] = a.w;
                    xv[16 + 4 * i] = b2.x, xv[16 + 4 * i + 1] = b2.y, xv[16 + 4 * i + 2] = b2.z,
                                xv[16 + 4 * i + 3] = b2.w;
                }
#pragma unroll
                for (int r = 0; r < Q4K_ROWS; r++) {
                    const uint32_t q[4] = {qv[r].x, qv[r].y, qv[r].z, qv[r].w};
                    float a = acc[t][r];
#pragma unroll
                    for (int i = 0; i < 16; i++)
                        a = fmaf(d1a[r] * (float)((q[i / 4] >> (8 * (i % 4))) & 0xF) - m1a[r],
                                 xv[i], a);
#pragma unroll
                    for (int i = 0; i < 16; i++)
                        a = fmaf(d1b[r] * (float)((q[i / 4] >> (8 * (i % 4) + 4)) & 0xF) - m1b[r],
                                 xv[16 + i], a);
                    acc[t][r] = a;
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < HR_CUDA_GEMV_MAX_ROWS; t++) {
        if ((uint32_t)t < m) {
#pragma unroll
            for (int r = 0; r < Q4K_ROWS; r++) {
                float a = warp_sum(acc[t][r]);
                if (lane == 0 && (uint32_t)r < nr) {
                    const uint32_t j = j0 + r;
                    if (bias)
                        a += bias[j];
                    float *yp = y + (uint64_t)t * ldy + j;
                    *yp = accumulate ? *yp + a : a;
                }
            }
        }
    }
}

/* ---- integer GEMV: Q4_K x Q8_K with dp4a --------------------------------------
 *
 * The CPU multiplies Q4_K weights with activations quantized to Q8_K: int8
 * values, one scale per 256, and ggml's Q4_K x Q8_K dot is integer sums
 * per sub-block times the scales. This kernel does the same on the GPU:
 * __dp4a multiplies four weight nibbles with four int8 activations and
 * adds, so 32 weights cost 8 mask/shift operations and 8 dp4a, where the
 * float kernel above spends an int-to-float conversion (a quarter-rate
 * instruction on Hopper) and two FMAs per weight - that kernel was bound
 * by arithmetic, not by the weights' bytes.
 *
 * One weight row per warp (more warps in flight than four rows per warp);
 * lane l takes pieces l, l + 32, ... (a piece: 16 quant bytes = 16 values
 * of sub-block 2p and 16 of sub-block 2p + 1, as in gemv_q4k_kernel), four
 * pieces' loads issued before any is used. Per piece and input row:
 *   acc += dx * ((d1a * suma - m1a * bsa) + (d1b * sumb - m1b * bsb))
 * where suma = sum q4 * q8 over the piece's 16 values of sub-block 2p, bsa
 * = sum q8 over them (precomputed per 16), dx the row's Q8_K scale.
 * A lane's pieces are summed in order, then the warp: an output's order
 * depends on k only, never on m. */
/* ROW 1: a block of 4 warps per row, thread i taking pieces i, i + 128,
 * ..., the warps' sums added in warp order (gemv_block_store), for the
 * reason of gemv_raw16_row_kernel: the 8B shape's 4096-row matrices are
 * 1024 blocks with a warp per row, half the H200's resident blocks. */
/* A lane's NP pieces p0, p0 + NT, ... of a Q4_K row (those below
 * `pieces`): each piece's super-block header and its 16 quant bytes. NT is
 * a multiple of 8, so the pieces are the same sub-block pair and half of
 * super-blocks NT / 8 apart. */
template <int NP, uint32_t NT>
__device__ __forceinline__ void q4k_load_pieces(const uint8_t *row, uint32_t p0, uint32_t pieces,
                                                uint4 hd[NP], uint4 qv[NP])
{
    const uint8_t *b = row + (size_t)(p0 / 8) * 144;
    const uint32_t qo = 16 + 32 * ((p0 / 2) % 4) + 16 * (p0 % 2);
#pragma unroll
    for (int i = 0; i < NP; i++) {
        if (p0 + NT * (uint32_t)i < pieces) {
            hd[i] = *(const uint4 *)(b + (size_t)i * (NT / 8 * 144));
            qv[i] = *(const uint4 *)(b + (size_t)i * (NT / 8 * 144) + qo);
        }
    }
}

template <int ROW, int MR>
__global__ void __launch_bounds__(128) gemv_q4k_q8_kernel(hr_cuda_gemv_out o, uint64_t row_bytes,
                                                          uint32_t k, hr_cuda_q8_act xa,
                                                          uint32_t m, int accumulate)
{
    const bool early = pdl_prewait && !o.rx;
    if (!early)
        pdl_begin();
    constexpr uint32_t NT = ROW ? 128 : 32; /* threads sharing a row */
    const uint32_t lane = ROW ? threadIdx.x : threadIdx.x & 31;
    const uint32_t jg = ROW ? blockIdx.x : blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (!ROW && jg >= o.n)
        return;
    const gemv_row R = gemv_part(o, jg, row_bytes);
    gemv_rows_q(o, k, 256, &xa, &m);
    const uint8_t *row = R.w;
    float acc[MR];
#pragma unroll
    for (int t = 0; t < MR; t++)
        acc[t] = 0.0f;
    const uint32_t pieces = k / 256 * 8;
    uint4 hd[4], qv[4];
    q4k_load_pieces<4, NT>(row, lane, pieces, hd, qv);
    if (early)
        pdl_begin();
    /* a lane's pieces lane + NT i are sub-block pair p, half h of
     * super-blocks lane / 8 + (NT / 8) i */
    const uint32_t p = (lane / 2) % 4, h = lane % 2;
    for (uint32_t p0 = lane; p0 < pieces; p0 += 4 * NT) {
        if (p0 != lane)
            q4k_load_pieces<4, NT>(row, p0, pieces, hd, qv);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (p0 + NT * (uint32_t)i >= pieces)
                break;
            const uint32_t sb = p0 / 8 + NT / 8 * (uint32_t)i;
            float d1a, m1a, d1b, m1b;
            q4k_scales(hd[i], p, &d1a, &m1a, &d1b, &m1b);
            const uint32_t q[4] = {qv[i].x, qv[i].y, qv[i].z, qv[i].w};
            int lo[4], hi[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                lo[e] = (int)(q[e] & 0x0F0F0F0Fu);
                hi[e] = (int)((q[e] >> 4) & 0x0F0F0F0Fu);
            }
            const uint32_t xo = sb * 256 + 64 * p + 16 * h, so = sb * 16 + 4 * p + h;
#pragma unroll
            for (int t = 0; t < MR; t++) {
                if ((uint32_t)t >= m)
                    break;
                const int8_t *xr = xa.q + (uint64_t)t * k;
                const int4 va = *(const int4 *)(xr + xo), vb = *(const int4 *)(xr + xo + 32);
                int sa = 0, sbb = 0;
                sa = __dp4a(lo[0], va.x, sa);
                sa = __dp4a(lo[1], va.y, sa);
                sa = __dp4a(lo[2], va.z, sa);
                sa = __dp4a(lo[3], va.w, sa);
                sbb = __dp4a(hi[0], vb.x, sbb);
                sbb = __dp4a(hi[1], vb.y, sbb);
                sbb = __dp4a(hi[2], vb.z, sbb);
                sbb = __dp4a(hi[3], vb.w, sbb);
                const int16_t *xs = xa.s + (uint64_t)t * (k / 16);
                const float dx = xa.d[(uint64_t)t * (k / 256) + sb];
                acc[t] += dx * ((d1a * (float)sa - m1a * (float)xs[so]) +
                                (d1b * (float)sbb - m1b * (float)xs[so + 2]));
            }
        }
    }
    if constexpr (ROW)
        gemv_block_store<MR>(acc, m, R.j, R.y, R.ldy, R.bias, accumulate);
    else
        gemv_warp_store<MR>(acc, m, R.j, R.y, R.ldy, R.bias, accumulate);
}

/* One sub-block pair of a Q4_K row, decoded for the integer dot: its two
 * scales and mins times the super-block's d and dmin, and its 32 quant
 * bytes as the low (first sub-block) and high (second) nibbles. */
struct q4k_pair {
    float d1a, m1a, d1b, m1b;
    int lo[8], hi[8];
};

__device__ __forceinline__ q4k_pair q4k_pair_decode(const uint4 hd, const uint4 q0,
                                                    const uint4 q1, uint32_t p)
{
    q4k_pair w;
    q4k_scales(hd, p, &w.d1a, &w.m1a, &w.d1b, &w.m1b);
    const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
    for (int e = 0; e < 8; e++) {
        w.lo[e] = (int)(q[e] & 0x0F0F0F0Fu);
        w.hi[e] = (int)((q[e] >> 4) & 0x0F0F0F0Fu);
    }
    return w;
}

/* The pair's contribution to the row's sum on Q8_K inputs: their 64 int8
 * values (v0..v3: the first sub-block's 32, then the second's), their
 * per-16 sums and the super-block's scale dx. gemv_q4k_q8_pair_kernel and
 * gemv_pipe_kernel share it, so the two give the same bits. */
__device__ __forceinline__ float q4k_pair_dot(const q4k_pair &w, const int4 v0, const int4 v1,
                                              const int4 v2, const int4 v3, const short4 s4,
                                              float dx)
{
    int sa = 0, sbb = 0;
    sa = __dp4a(w.lo[0], v0.x, sa);
    sa = __dp4a(w.lo[1], v0.y, sa);
    sa = __dp4a(w.lo[2], v0.z, sa);
    sa = __dp4a(w.lo[3], v0.w, sa);
    sa = __dp4a(w.lo[4], v1.x, sa);
    sa = __dp4a(w.lo[5], v1.y, sa);
    sa = __dp4a(w.lo[6], v1.z, sa);
    sa = __dp4a(w.lo[7], v1.w, sa);
    sbb = __dp4a(w.hi[0], v2.x, sbb);
    sbb = __dp4a(w.hi[1], v2.y, sbb);
    sbb = __dp4a(w.hi[2], v2.z, sbb);
    sbb = __dp4a(w.hi[3], v2.w, sbb);
    sbb = __dp4a(w.hi[4], v3.x, sbb);
    sbb = __dp4a(w.hi[5], v3.y, sbb);
    sbb = __dp4a(w.hi[6], v3.z, sbb);
    sbb = __dp4a(w.hi[7], v3.w, sbb);
    return dx * ((w.d1a * (float)sa - w.m1a * (float)(s4.x + s4.y)) +
                 (w.d1b * (float)sbb - w.m1b * (float)(s4.z + s4.w)));
}

/* A lane's NP sub-block pairs c0, c0 + 32, ... of a Q4_K row (those below
 * `pairs`): each pair's super-block header and its 32 quant bytes. */
template <int NP>
__device__ __forceinline__ void q4k_load_pairs(const uint8_t *row, uint32_t c0, uint32_t pairs,
                                               uint4 hd[NP], uint4 q0[NP], uint4 q1[NP])
{
#pragma unroll
    for (int i = 0; i < NP; i++) {
        const uint32_t c = c0 + 32 * (uint32_t)i;
        if (c < pairs) {
            const uint8_t *b = row + (size_t)(c / 4) * 144;
            const uint4 *qp = (const uint4 *)(b + 16 + 32 * (c % 4));
            hd[i] = *(const uint4 *)b, q0[i] = qp[0], q1[i] = qp[1];
        }
    }
}

/* A warp per row as gemv_q4k_q8_kernel<0>, but lane l takes sub-block
 * pairs c = l, l + 32, ... whole: both halves' 32 quant bytes under one
 * header load and one scale decode, each sub-block's 32 products in one
 * integer sum (as ggml's dot sums them), its two 16-sums of the inputs in
 * one 8-byte load. Per 64 weights that is about 30 instructions fewer than
 * two pieces (a header load, 3 sum loads, a scale load, a scale decode,
 * the float arithmetic of one piece); the quantized GEMVs were bound by
 * instructions (ncu, docs/architecture.md). A lane's pairs are summed in
 * order, then the warp: an output's order depends on k only, but it is
 * not the piece kernel's order (results within the float rounding of the
 * others). NP pairs' loads in flight (2: all of a lane's at k = 4096). The
 * default's warp per row since 2026-12-07 (q4k_variant) where the
 * pipelined kernel below does not take the rows. */
template <int NP, int MR>
__global__ void __launch_bounds__(128) gemv_q4k_q8_pair_kernel(hr_cuda_gemv_out o,
                                                               uint64_t row_bytes, uint32_t k,
                                                               hr_cuda_q8_act xa, uint32_t m,
                                                               int accumulate)
{
    const bool early = pdl_prewait && !o.rx;
    if (!early)
        pdl_begin();
    const uint32_t lane = threadIdx.x & 31, jg = blockIdx.x * 4 + threadIdx.x / 32;
    if (jg >= o.n)
        return;
    const gemv_row R = gemv_part(o, jg, row_bytes);
    gemv_rows_q(o, k, 256, &xa, &m);
    float acc[MR];
#pragma unroll
    for (int t = 0; t < MR; t++)
        acc[t] = 0.0f;
    const uint32_t pairs = k / 256 * 4;
    uint4 hd[NP], q0[NP], q1[NP];
    q4k_load_pairs<NP>(R.w, lane, pairs, hd, q0, q1);
    if (early)
        pdl_begin();
    const uint32_t p = lane % 4; /* every pair of this lane is sub-block pair p */
    for (uint32_t c0 = lane; c0 < pairs; c0 += 32 * NP) {
        if (c0 != lane)
            q4k_load_pairs<NP>(R.w, c0, pairs, hd, q0, q1);
#pragma unroll
        for (int i = 0; i < NP; i++) {
            const uint32_t c = c0 + 32 * (uint32_t)i;
            if (c >= pairs)
                break;
            const uint32_t sb = c / 4, xo = sb * 256 + 64 * p, so = sb * 16 + 4 * p;
            const q4k_pair w = q4k_pair_decode(hd[i], q0[i], q1[i], p);
#pragma unroll
            for (int t = 0; t < MR; t++) {
                if ((uint32_t)t >= m)
                    break;
                const int4 *xp = (const int4 *)(xa.q + (uint64_t)t * k + xo);
                acc[t] += q4k_pair_dot(w, xp[0], xp[1], xp[2], xp[3],
                                       *(const short4 *)(xa.s + (uint64_t)t * (k / 16) + so),
                                       xa.d[(uint64_t)t * (k / 256) + sb]);
            }
        }
    }
    gemv_warp_store<MR>(acc, m, R.j, R.y, R.ldy, R.bias, accumulate);
}

/* The pipelined GEMV (gemv_pipe_kernel), the default for one input row on
 * rows of 2048 to 4096 values (Q4_K; Q8_0 with HR_CUDA_Q80=pipe): a grid
 * of resident blocks whose warps walk the rows (w, w + warps, ...) with
 * the next row's bytes loaded while this row is multiplied, so every warp
 * has its loads in flight all the time instead of loading, computing and
 * exiting (a warp-per-row kernel's warps idle DRAM while they compute, and
 * a wave's tail and the next blocks' start cost the rest). The inputs are
 * the same for every row: a warp keeps its share in registers (Q4_K) or
 * reads it from the block's copy in shared memory (Q8_0). Each row's sum
 * is the same type's batch kernel's at m = 1, bit for bit: Q4_K's pair
 * kernel (the same pairs in the same order, q4k_pair_dot, then the warp),
 * Q8_0's block per 2 rows (block lane + 32 i's term alone, each i summed
 * over the warp, then the 4 sums in order, as that kernel's 4 warps).
 *
 * NORM (hr_cuda_gemv_normed): the kernel also does the RMSNorm before it.
 * Each block computes the whole row's quantized inputs into shared memory
 * from the residual x and the norm's weights, exactly as rms_norm_kernel
 * with its prep does (the same double sums per 32 float4s, added in the
 * same order; the same quantizing passes), while its first rows' weights
 * are in flight. A launch and a dependency wait less a norm; the
 * normalized floats (xn) are not written, so only a matmul that is xn's
 * one reader may take it.
 *
 * SWI (with NORM; hr_cuda_swiglu_q8): the launch is gate/up, two parts of
 * F rows, and the kernel also does the SwiGLU after it, as
 * swiglu_prep_kernel with down's inputs (Q8_K or Q8_0): a warp takes gate
 * row i then up row i, stores u and h = silu(g) u (in g's place), then
 * counts the pair in its group's counter (P::group rows: a super-block or
 * a block); the warp that makes it a multiple of the group (counters are
 * never reset) reads the group's h back from L2 and quantizes it. NORM is
 * required: the inputs come from shared memory, so writing down's inputs
 * races no reader. */
struct q4k_norm_in {
    const float *x, *w;
    float eps;
};

/* A Q8_K super-block by one warp, 8 values a lane (lane l: values 8 l ..
 * 8 l + 7, read from L2: other warps wrote them): the bytes q8k_block256
 * makes of the same values (the first value of largest magnitude, then
 * the same integer arithmetic). */
__device__ __forceinline__ void q8k_warp256(const float *v256, int8_t *q, float *d, int16_t *s)
{
    const uint32_t lane = threadIdx.x & 31;
    const float4 a = __ldcg((const float4 *)v256 + 2 * lane);
    const float4 b = __ldcg((const float4 *)v256 + 2 * lane + 1);
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    float ax, bv;
    int ix;
    q8k_thread_best(v, (int)(8 * lane), ax, ix, bv);
    q8k_warp_best(ax, ix, bv);
    const float mx = ax == 0.0f ? 0.0f : bv;
    int qv[8];
    int sum = q8k_thread_q(mx, v, qv);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    ((char4 *)q)[2 * lane] = make_char4((signed char)qv[0], (signed char)qv[1],
                                        (signed char)qv[2], (signed char)qv[3]);
    ((char4 *)q)[2 * lane + 1] = make_char4((signed char)qv[4], (signed char)qv[5],
                                            (signed char)qv[6], (signed char)qv[7]);
    if (lane == 0)
        *d = q8k_d(mx);
    if (lane % 2 == 0)
        s[lane / 2] = (int16_t)sum;
}

/* A Q8_0 block by one warp, a value a lane (read from L2), as
 * swiglu_prep_kernel quantizes it. */
__device__ __forceinline__ void q80_warp32(const float *v32, int8_t *q, float *d)
{
    const uint32_t lane = threadIdx.x & 31;
    const float v = __ldcg(v32 + lane);
    const float amax = warp_max(fabsf(v));
    q[lane] = (int8_t)q80_q(v, q80_id(amax));
    if (lane == 0)
        *d = q80_d(amax);
}

/* Q4_K on Q8_K inputs: a lane's 2 sub-block pairs of a row (96 bytes) in
 * registers, its 2 x 64 inputs, sums and scales in registers. */
struct pipe_q4k {
    static constexpr uint32_t group = 256; /* SWI: a Q8_K super-block */
    static constexpr bool staged = false;  /* inputs in registers */
    static constexpr int id = 0;           /* pipe_blocks[id] */
    struct W {
        uint4 hd[2], q0[2], q1[2];
    };
    struct X {
        int4 v[2][4];
        short4 s[2];
        float d[2];
    };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t k, uint32_t lane, W &w)
    {
        q4k_load_pairs<2>(row, lane, k / 256 * 4, w.hd, w.q0, w.q1);
    }
    static __device__ __forceinline__ void inputs(const hr_cuda_q8_act &xa, uint32_t k,
                                                  uint32_t lane, X &x)
    {
        const uint32_t pairs = k / 256 * 4, p = lane % 4;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const uint32_t c = lane + 32 * (uint32_t)i;
            if (c < pairs) {
                const int4 *xp = (const int4 *)(xa.q + (c / 4) * 256 + 64 * p);
                x.v[i][0] = xp[0], x.v[i][1] = xp[1], x.v[i][2] = xp[2], x.v[i][3] = xp[3];
                x.s[i] = *(const short4 *)(xa.s + (c / 4) * 16 + 4 * p);
                x.d[i] = xa.d[c / 4];
            }
        }
    }
    /* the lane's part of the row's sum */
    static __device__ __forceinline__ float dot(const W &w, const X &x, uint32_t k, uint32_t lane)
    {
        const uint32_t pairs = k / 256 * 4, p = lane % 4;
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            if (lane + 32 * (uint32_t)i >= pairs)
                break;
            acc += q4k_pair_dot(q4k_pair_decode(w.hd[i], w.q0[i], w.q1[i], p), x.v[i][0],
                                x.v[i][1], x.v[i][2], x.v[i][3], x.s[i], x.d[i]);
        }
        return acc;
    }
    /* the row's sum from the parts, in every lane; stored (+ bias) */
    static __device__ __forceinline__ float total(float acc) { return warp_sum(acc); }
    static __device__ __forceinline__ void store(float acc, const gemv_row &R, int accumulate)
    {
        gemv_warp_store<1>(&acc, 1, R.j, R.y, R.ldy, R.bias, accumulate);
    }
    /* NORM: rms_norm_kernel's Q8_K pass over the block's 128 threads */
    static __device__ __forceinline__ void quant4(float4 o, bool in, uint32_t i, hr_cuda_q8_act &q)
    {
        q8k_block64x4(o, in, i % 64, q.q + (i / 64) * 256, q.d + i / 64, q.s + (i / 64) * 16);
    }
    static __device__ __forceinline__ void quant_group(const float *h, uint32_t g,
                                                       const hr_cuda_q8_act &q)
    {
        q8k_warp256(h + (size_t)g * 256, q.q + (size_t)g * 256, q.d + g, q.s + (size_t)g * 16);
    }
};

/* Q8_0 on Q8_0 inputs: blocks lane + 32 i (i < 4) of a row, each as the
 * 9 words that hold its 34 bytes (the 2-byte scale then 32 quants, at an
 * even offset: funnel shifts as gemv_q80s_rows_kernel), the inputs from
 * the block's shared copy. Rows of a multiple of 256 values (whole words
 * to the row's end). */
struct pipe_q80 {
    static constexpr uint32_t group = 32; /* SWI: a Q8_0 block */
    static constexpr bool staged = true;  /* inputs from the block's shared copy */
    static constexpr int id = 1;          /* pipe_blocks[id] */
    struct W {
        uint32_t w[4][9];
    };
    struct X {
        const int8_t *q;
        const float *d;
    };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t k, uint32_t lane, W &w)
    {
        const uint32_t *rw = (const uint32_t *)row;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t b = lane + 32 * (uint32_t)i;
            if (b < k / 32) {
#pragma unroll
                for (int e = 0; e < 9; e++)
                    w.w[i][e] = rw[34 * b / 4 + (uint32_t)e];
            }
        }
    }
    static __device__ __forceinline__ void inputs(const hr_cuda_q8_act &xa, uint32_t, uint32_t,
                                                  X &x)
    {
        x.q = xa.q, x.d = xa.d;
    }
    static __device__ __forceinline__ float dot(const W &w, const X &x, uint32_t k, uint32_t lane)
    {
        float W4[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t b = lane + 32 * (uint32_t)i;
            float t = 0.0f;
            if (b < k / 32) {
                const bool odd = (34 * b) & 2;
                const float dw = __half2float(
                    __ushort_as_half((unsigned short)(odd ? w.w[i][0] >> 16 : w.w[i][0])));
                uint32_t q[8];
#pragma unroll
                for (int e = 0; e < 8; e++)
                    q[e] = odd ? w.w[i][e + 1] : __funnelshift_r(w.w[i][e], w.w[i][e + 1], 16);
                const int4 *xp = (const int4 *)(x.q + (size_t)b * 32);
                t += dw * x.d[b] * (float)dot_q8_32(q, xp[0], xp[1]);
            }
            W4[i] = warp_sum(t);
        }
        return ((W4[0] + W4[1]) + W4[2]) + W4[3]; /* the row's sum, in every lane */
    }
    static __device__ __forceinline__ float total(float a) { return a; }
    static __device__ __forceinline__ void store(float a, const gemv_row &R, int accumulate)
    {
        if ((threadIdx.x & 31) == 0) { /* gemv_block_store's */
            if (R.bias)
                a += R.bias[R.j];
            float *yp = R.y + R.j;
            *yp = accumulate ? *yp + a : a;
        }
    }
    /* NORM: rms_norm_kernel's Q8_0 pass (a block of 32 is 8 threads' float4s) */
    static __device__ __forceinline__ void quant4(float4 o, bool in, uint32_t i, hr_cuda_q8_act &q)
    {
        float amax = fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w)));
#pragma unroll
        for (int s = 1; s < 8; s <<= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, s));
        const float id = q80_id(amax);
        if (in) {
            ((char4 *)q.q)[i] = make_char4((signed char)q80_q(o.x, id), (signed char)q80_q(o.y, id),
                                           (signed char)q80_q(o.z, id), (signed char)q80_q(o.w, id));
            if (i % 8 == 0)
                q.d[i / 8] = q80_d(amax);
        }
    }
    static __device__ __forceinline__ void quant_group(const float *h, uint32_t g,
                                                       const hr_cuda_q8_act &q)
    {
        q80_warp32(h + (size_t)g * 32, q.q + (size_t)g * 32, q.d + g);
    }
};

template <class P, bool NORM, bool SWI>
__global__ void __launch_bounds__(128, 4) gemv_pipe_kernel(hr_cuda_gemv_out o, uint64_t row_bytes,
                                                           uint32_t k, hr_cuda_q8_act xa,
                                                           q4k_norm_in nx, hr_cuda_swiglu_q8 sw,
                                                           int accumulate)
{
    static_assert(NORM || !SWI, "the fused SwiGLU writes the inputs' buffer");
    const uint32_t lane = threadIdx.x & 31, nw = gridDim.x * 4;
    const uint32_t F = o.end[0], end = SWI ? F : o.n;
    /* the warp's launch rows: j = its first warp index, then + nw each;
     * with SWI (j, up) walks gate row j, up row j (launch row F + j), then
     * the same at j + nw */
    uint32_t j = blockIdx.x * 4 + threadIdx.x / 32;
    bool up = false;
    typename P::W w;
    auto load = [&](uint32_t jr, bool u) {
        P::load(gemv_part(o, jr + (u ? F : 0), row_bytes).w, k, lane, w);
    };
    if (pdl_prewait && j < end)
        load(j, false);
    pdl_begin();
    if constexpr (NORM || P::staged) { /* every thread, before any returns (barriers) */
        __shared__ __align__(16) int8_t s_q[4096];
        __shared__ float s_d[128];
        __shared__ __align__(8) int16_t s_s[256];
        hr_cuda_q8_act sx = {s_q, s_d, s_s};
        const uint32_t n4 = k / 4;
        if constexpr (NORM) {
            __shared__ double s_part[32], s_tot;
            const uint32_t nvw = n4 / 32, wi = threadIdx.x / 32;
            /* rms_norm_kernel's thread t (n / 4 of them) sums float4 t: its
             * warps here, 4 at a time */
            for (uint32_t vw = wi; vw < nvw; vw += 4) {
                const float4 v = ((const float4 *)nx.x)[vw * 32 + lane];
                double sum = 0.0;
                sum += (double)(v.x * v.x) + (double)(v.y * v.y) + (double)(v.z * v.z) +
                       (double)(v.w * v.w);
                sum = warp_sum_d(sum);
                if (lane == 0)
                    s_part[vw] = sum;
            }
            __syncthreads();
            if (wi == 0) {
                double t = lane < nvw ? s_part[lane] : 0.0;
                t = warp_sum_d(t);
                if (lane == 0)
                    s_tot = t;
            }
            __syncthreads();
            const float mean = (float)(s_tot / k);
            const float scale = 1.0f / sqrtf(mean + nx.eps);
            for (uint32_t i0 = 0; i0 < n4; i0 += 128) { /* every thread every pass */
                const uint32_t i = i0 + threadIdx.x;
                const bool in = i < n4;
                float4 ov = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (in) {
                    const float4 v = ((const float4 *)nx.x)[i], g = ((const float4 *)nx.w)[i];
                    ov = make_float4((v.x * scale) * g.x, (v.y * scale) * g.y,
                                     (v.z * scale) * g.z, (v.w * scale) * g.w);
                }
                P::quant4(ov, in, i, sx);
            }
        } else { /* the quantized inputs copied in */
            for (uint32_t i = threadIdx.x; i < k / 16; i += 128)
                ((int4 *)s_q)[i] = ((const int4 *)xa.q)[i];
            for (uint32_t i = threadIdx.x; i < k / 32; i += 128)
                s_d[i] = xa.d[i];
        }
        __syncthreads();
        xa = sx;
    }
    if (j >= end)
        return;
    if (!pdl_prewait)
        load(j, false);
    typename P::X x;
    P::inputs(xa, k, lane, x);
    float g = 0.0f; /* SWI: the gate row's sum until its up row's */
    while (j < end) {
        const typename P::W cur = w;
        const bool up_next = SWI && !up;
        const uint32_t j_next = up_next ? j : j + nw;
        if (j_next < end)
            load(j_next, up_next);
        const float acc = P::dot(cur, x, k, lane);
        if constexpr (!SWI) {
            P::store(acc, gemv_part(o, j, row_bytes), accumulate);
        } else if (!up) {
            g = P::total(acc);
        } else {
            const float a = P::total(acc);
            const uint32_t gi = j / P::group;
            uint32_t done = 0;
            if (lane == 0) {
                o.y[1][j] = a;
                o.y[0][j] = g / (1.0f + expf(-g)) * a; /* swiglu_prep_kernel's */
                __threadfence();
                done = atomicAdd(sw.ctr + gi, 1u);
            }
            if (__shfl_sync(0xffffffffu, done, 0) % P::group == P::group - 1) {
                __threadfence();
                P::quant_group(o.y[0], gi, sw.q);
            }
        }
        j = j_next, up = up_next;
    }
}

/* The end of a GEMV of NR weight rows a block of 4 warps: each warp's sums,
 * then a thread per (row, input row) adds the 4 warps' in warp order and
 * stores, as gemv_block_store does for one row; rows j0 + r past n are
 * not stored. */
template <int NR, int MR>
__device__ __forceinline__ void gemv_rows_store(const float (&acc)[NR][MR], uint32_t m,
                                                const gemv_row (&R)[NR], uint32_t j0, uint32_t n,
                                                int accumulate)
{
    __shared__ float part[4][NR][MR];
    const uint32_t lane = threadIdx.x & 31, wi = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int t = 0; t < MR; t++) {
            if ((uint32_t)t < m) {
                const float a = warp_sum(acc[r][t]);
                if (lane == 0)
                    part[wi][r][t] = a;
            }
        }
    __syncthreads();
    if (threadIdx.x < NR * m) { /* as gemv_block_store, a thread per (row, input row) */
        const uint32_t r = threadIdx.x / m, t = threadIdx.x % m;
        if (j0 + r < n) {
            gemv_row Rr = R[0]; /* R[r], by selects (no local-memory indexing) */
#pragma unroll
            for (int i = 1; i < NR; i++)
                if ((uint32_t)i == r)
                    Rr = R[i];
            float a = ((part[0][r][t] + part[1][r][t]) + part[2][r][t]) + part[3][r][t];
            if (Rr.bias)
                a += Rr.bias[Rr.j];
            float *yp = Rr.y + (uint64_t)t * Rr.ldy + Rr.j;
            *yp = accumulate ? *yp + a : a;
        }
    }
}

/* NR weight rows a block of 128 threads (k >= 2048; HR_CUDA_Q4K=rows2 or
 * rows4): each row's pieces and sums exactly as gemv_q4k_q8_kernel<1>'s
 * (thread i takes pieces i, i + 128, ... in order; the 4 warps' sums added
 * in warp order), so the same results bit for bit; but a thread loads its
 * inputs' piece once for NR rows, and NR rows' weights are in flight at once
 * (the block-per-row kernel has one 32-byte load a thread at k = 4096). */
template <int NR, int MR>
__global__ void __launch_bounds__(128) gemv_q4k_q8_rows_kernel(hr_cuda_gemv_out o,
                                                               uint64_t row_bytes, uint32_t k,
                                                               hr_cuda_q8_act xa, uint32_t m,
                                                               int accumulate)
{
    const bool early = pdl_prewait && !o.rx;
    if (!early)
        pdl_begin();
    gemv_rows_q(o, k, 256, &xa, &m);
    const uint32_t j0 = blockIdx.x * NR;
    gemv_row R[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) /* a row past n reads row n - 1 and is not stored */
        R[r] = gemv_part(o, j0 + r < o.n ? j0 + r : o.n - 1, row_bytes);
    float acc[NR][MR];
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int t = 0; t < MR; t++)
            acc[r][t] = 0.0f;
    const uint32_t pieces = k / 256 * 8;
    uint4 hd[NR], qv[NR];
#pragma unroll
    for (int r = 0; r < NR; r++)
        q4k_load_pieces<1, 128>(R[r].w, threadIdx.x, pieces, &hd[r], &qv[r]);
    if (early)
        pdl_begin();
    for (uint32_t pc = threadIdx.x; pc < pieces; pc += 128) {
        const uint32_t sb = pc / 8, p = (pc / 2) % 4, h = pc % 2;
        if (pc != threadIdx.x) {
#pragma unroll
            for (int r = 0; r < NR; r++)
                q4k_load_pieces<1, 128>(R[r].w, pc, pieces, &hd[r], &qv[r]);
        }
        const uint32_t xo = sb * 256 + 64 * p + 16 * h, so = sb * 16 + 4 * p + h;
#pragma unroll
        for (int t = 0; t < MR; t++) {
            if ((uint32_t)t >= m)
                break;
            const int8_t *xr = xa.q + (uint64_t)t * k;
            const int4 va = *(const int4 *)(xr + xo), vb = *(const int4 *)(xr + xo + 32);
            const int16_t *xs = xa.s + (uint64_t)t * (k / 16);
            const float bsa = (float)xs[so], bsb = (float)xs[so + 2];
            const float dx = xa.d[(uint64_t)t * (k / 256) + sb];
#pragma unroll
            for (int r = 0; r < NR; r++) {
                float d1a, m1a, d1b, m1b;
                q4k_scales(hd[r], p, &d1a, &m1a, &d1b, &m1b);
                const uint32_t q[4] = {qv[r].x, qv[r].y, qv[r].z, qv[r].w};
                int sa = 0, sbb = 0;
                sa = __dp4a((int)(q[0] & 0x0F0F0F0Fu), va.x, sa);
                sa = __dp4a((int)(q[1] & 0x0F0F0F0Fu), va.y, sa);
                sa = __dp4a((int)(q[2] & 0x0F0F0F0Fu), va.z, sa);
                sa = __dp4a((int)(q[3] & 0x0F0F0F0Fu), va.w, sa);
                sbb = __dp4a((int)((q[0] >> 4) & 0x0F0F0F0Fu), vb.x, sbb);
                sbb = __dp4a((int)((q[1] >> 4) & 0x0F0F0F0Fu), vb.y, sbb);
                sbb = __dp4a((int)((q[2] >> 4) & 0x0F0F0F0Fu), vb.z, sbb);
                sbb = __dp4a((int)((q[3] >> 4) & 0x0F0F0F0Fu), vb.w, sbb);
                acc[r][t] += dx * ((d1a * (float)sa - m1a * bsa) + (d1b * (float)sbb - m1b * bsb));
            }
        }
    }
    gemv_rows_store<NR, MR>(acc, m, R, j0, o.n, accumulate);
}

/* Q8_K quantization of m rows of k (k % 256 == 0) for the integer GEMV:
 * the values act_round_kernel's Q8_K branch makes (q and 1 / iscale), as
 * int8 plus one scale per 256, and the sums of q per 16. One block of 256
 * threads per (super-block, row). */
__global__ void quant_q8k_kernel(const float *x, uint32_t k, hr_cuda_q8_act a)
{
    pdl_begin();
    const uint32_t row = blockIdx.y, i = blockIdx.x * 256;
    q8k_block256(x[(size_t)row * k + i + threadIdx.x], a.q + (size_t)row * k + i,
                 a.d + (size_t)row * (k / 256) + blockIdx.x, a.s + ((size_t)row * k + i) / 16);
}

/* Q8_0 x Q8_0 with dp4a: the CPU's Q8_0 dot (int sums per block of 32,
 * times both scales). Blocks are 34 bytes (2-byte aligned), read as 17
 * 2-byte loads; one weight row per warp, lane l takes blocks l, l + 32, ...,
 * four blocks' loads in flight; acc += (dw * dx) * sum per block, in block
 * order, then the warp sums: an output's order depends on k only. */
__global__ void __launch_bounds__(128) gemv_q80_q8_kernel(hr_cuda_gemv_out o, uint64_t row_bytes,
                                                          uint32_t k, hr_cuda_q8_act xa,
                                                          uint32_t m, int accumulate)
{
    pdl_begin();
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t jg = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (jg >= o.n)
        return;
    const gemv_row R = gemv_part(o, jg, row_bytes);
    gemv_rows_q(o, k, 32, &xa, &m);
    const uint8_t *row = R.w;
    float acc[HR_CUDA_GEMV_MAX_ROWS];
#pragma unroll
    for (int t = 0; t < HR_CUDA_GEMV_MAX_ROWS; t++)
        acc[t] = 0.0f;
    const uint32_t nb = k / 32;
    for (uint32_t b0 = lane; b0 < nb; b0 += 4 * 32) {
        uint32_t wq[4][8];
        float dw[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t b = b0 + 32 * (uint32_t)i;
            if (b < nb) {
                const unsigned short *p = (const unsigned short *)(row + (size_t)b * 34);
                dw[i] = __half2float(__ushort_as_half(p[0]));
#pragma unroll
                for (int e = 0; e < 8; e++)
                    wq[i][e] = (uint32_t)p[1 + 2 * e] | ((uint32_t)p[2 + 2 * e] << 16);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t b = b0 + 32 * (uint32_t)i;
            if (b >= nb)
                break;
#pragma unroll
            for (int t = 0; t < HR_CUDA_GEMV_MAX_ROWS; t++) {
                if ((uint32_t)t >= m)
                    break;
                const int4 *xp = (const int4 *)(xa.q + (uint64_t)t * k + (uint64_t)b * 32);
                const int4 va = xp[0], vb = xp[1];
                const int sum = dot_q8_32(wq[i], va, vb);
                acc[t] += dw[i] * xa.d[(uint64_t)t * nb + b] * (float)sum;
            }
        }
    }
    gemv_warp_store(acc, m, R.j, R.y, R.ldy, R.bias, accumulate);
}

/* The same dot, the rows read as 16-byte vectors. A Q8_0 block is 34
 * bytes, so lane l's blocks l, l + 32, ... lie 34 bytes apart and the
 * kernel above reads them 2 bytes at a time: 17 loads a block, each warp
 * load touching 32 blocks' worth of sectors. Here a warp loads 128 blocks
 * of its row at once (4352 bytes, from the row's start rounded down to 16)
 * with coalesced 16-byte loads into shared memory, then each lane takes its
 * blocks from there as 32-bit words (a block starts 0 or 2 bytes past a
 * word: funnel shifts). Rows need not be
 * 16-byte aligned (Qwen2.5-0.5B's 896 inputs: 952-byte rows): the 16-byte
 * pieces read around a row lie in the weights' own pages. */
#define Q80S_BLOCKS 128
#define Q80S_VECS ((Q80S_BLOCKS * 34 + 14 + 4 + 15) / 16) /* + misalignment + word overrun */
/* ROW 0: a warp per row (4 rows a block), lane l takes blocks l, l + 32, ...
 * in the order of the kernel above, so its results are the same bit for
 * bit. ROW 1 (the default): a block of 4 warps per row, thread i takes
 * blocks i, i + 128, ..., then thread t < m adds the 4 warps' sums in warp
 * order (the F16 GEMV's reason: whole waves of blocks; see
 * gemv_raw16_row_kernel). Either way a row's order depends on k only. */
template <int ROW, int MR>
__global__ void __launch_bounds__(128) gemv_q80s_q8_kernel(hr_cuda_gemv_out o, uint64_t row_bytes,
                                                           uint32_t k, hr_cuda_q8_act xa,
                                                           uint32_t m, int accumulate)
{
    const bool early = pdl_prewait && !o.rx;
    if (!early)
        pdl_begin();
    constexpr uint32_t NT = ROW ? 128 : 32; /* threads sharing a row */
    constexpr int NR = (Q80S_VECS + NT - 1) / NT;
    __shared__ uint4 sbuf[ROW ? 1 : 4][Q80S_VECS];
    const uint32_t lane = threadIdx.x & 31, wi = threadIdx.x / 32;
    const uint32_t tl = ROW ? threadIdx.x : lane;
    const uint32_t jg = ROW ? blockIdx.x : blockIdx.x * 4 + wi;
    if (!ROW && jg >= o.n)
        return;
    const gemv_row R = gemv_part(o, jg, row_bytes);
    gemv_rows_q(o, k, 32, &xa, &m);
    const uintptr_t ra = (uintptr_t)R.w;
    const uint4 *base = (const uint4 *)(ra & ~(uintptr_t)15);
    const uint32_t off = (uint32_t)(ra & 15);
    uint4 *sb = sbuf[ROW ? 0 : wi];
    const uint32_t *sw = (const uint32_t *)sb;
    float acc[MR];
#pragma unroll
    for (int t = 0; t < MR; t++)
        acc[t] = 0.0f;
    const uint32_t nb = k / 32;
    for (uint32_t b0 = 0; b0 < nb; b0 += Q80S_BLOCKS) {
        const uint32_t nbi = min((uint32_t)Q80S_BLOCKS, nb - b0);
        const uint32_t g0 = off + b0 * 34, g1 = off + (b0 + nbi) * 34; /* bytes past base */
        const uint32_t v0 = g0 / 16, nv = (g1 + 15) / 16 - v0;
        uint4 r[NR];
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const uint32_t v = tl + NT * (uint32_t)i;
            if (v < nv)
                r[i] = base[v0 + v];
        }
        if (early && b0 == 0)
            pdl_begin();
        if (ROW) /* the last pass's reads of sb are done */
            __syncthreads();
        else
            __syncwarp();
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const uint32_t v = tl + NT * (uint32_t)i;
            if (v < nv)
                sb[v] = r[i];
        }
        if (ROW)
            __syncthreads();
        else
            __syncwarp();
        const uint32_t sh = g0 % 16;
        for (uint32_t bl = tl; bl < nbi; bl += NT) {
            const uint32_t a = sh + 34 * bl, w0 = a / 4;
            uint32_t wv[9];
#pragma unroll
            for (int e = 0; e < 9; e++)
                wv[e] = sw[w0 + e];
            const bool odd = a & 2; /* the block starts mid-word: d is wv[0]'s high half */
            const float dw =
                __half2float(__ushort_as_half((unsigned short)(odd ? wv[0] >> 16 : wv[0])));
            uint32_t q[8];
#pragma unroll
            for (int e = 0; e < 8; e++)
                q[e] = odd ? wv[e + 1] : __funnelshift_r(wv[e], wv[e + 1], 16);
            const uint32_t b = b0 + bl;
#pragma unroll
            for (int t = 0; t < MR; t++) {
                if ((uint32_t)t >= m)
                    break;
                const int4 *xp = (const int4 *)(xa.q + (uint64_t)t * k + (uint64_t)b * 32);
                const int4 va = xp[0], vb = xp[1];
                const int sum = dot_q8_32(q, va, vb);
                acc[t] += dw * xa.d[(uint64_t)t * nb + b] * (float)sum;
            }
        }
    }
    if constexpr (ROW)
        gemv_block_store<MR>(acc, m, R.j, R.y, R.ldy, R.bias, accumulate);
    else
        gemv_warp_store<MR>(acc, m, R.j, R.y, R.ldy, R.bias, accumulate);
}

/* The Q8_0 GEMV on NR weight rows a block of 4 warps (HR_CUDA_Q80=rows2,
 * rows4): each row staged and summed exactly as gemv_q80s_q8_kernel<1>
 * does it (thread i takes blocks i, i + 128, ..., the 4 warps' sums added
 * in warp order), so a row's result is that kernel's bit for bit; the
 * inputs' block is loaded once for the NR rows, and the kernel's fixed
 * costs (the parts' selects, the staging's barriers, the reduction) are
 * paid once for NR rows. At k = 4096 a row is one 34-byte block a thread:
 * ncu counted 262 instructions a warp for it on an H100. */
template <int NR, int MR>
__global__ void __launch_bounds__(128) gemv_q80s_rows_kernel(hr_cuda_gemv_out o,
                                                             uint64_t row_bytes, uint32_t k,
                                                             hr_cuda_q8_act xa, uint32_t m,
                                                             int accumulate)
{
    const bool early = pdl_prewait && !o.rx;
    if (!early)
        pdl_begin();
    constexpr int NV = (Q80S_VECS + 127) / 128;
    __shared__ uint4 sbuf[NR][Q80S_VECS];
    gemv_rows_q(o, k, 32, &xa, &m);
    const uint32_t j0 = blockIdx.x * NR;
    gemv_row R[NR];
    uint32_t off[NR];
    const uint4 *base[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) { /* a row past n reads row n - 1 and is not stored */
        R[r] = gemv_part(o, j0 + r < o.n ? j0 + r : o.n - 1, row_bytes);
        base[r] = (const uint4 *)((uintptr_t)R[r].w & ~(uintptr_t)15);
        off[r] = (uint32_t)((uintptr_t)R[r].w & 15);
    }
    float acc[NR][MR];
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int t = 0; t < MR; t++)
            acc[r][t] = 0.0f;
    const uint32_t nb = k / 32;
    for (uint32_t b0 = 0; b0 < nb; b0 += Q80S_BLOCKS) {
        const uint32_t nbi = min((uint32_t)Q80S_BLOCKS, nb - b0);
        uint4 rv[NR][NV];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint32_t g0 = off[r] + b0 * 34, g1 = off[r] + (b0 + nbi) * 34;
            const uint32_t v0 = g0 / 16, nv = (g1 + 15) / 16 - v0;
#pragma unroll
            for (int i = 0; i < NV; i++) {
                const uint32_t v = threadIdx.x + 128 * (uint32_t)i;
                if (v < nv)
                    rv[r][i] = base[r][v0 + v];
            }
        }
        if (early && b0 == 0)
            pdl_begin();
        __syncthreads(); /* the last pass's reads of sbuf are done */
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint32_t g0 = off[r] + b0 * 34, g1 = off[r] + (b0 + nbi) * 34;
            const uint32_t nv = (g1 + 15) / 16 - g0 / 16;
#pragma unroll
            for (int i = 0; i < NV; i++) {
                const uint32_t v = threadIdx.x + 128 * (uint32_t)i;
                if (v < nv)
                    sbuf[r][v] = rv[r][i];
            }
        }
        __syncthreads();
        for (uint32_t bl = threadIdx.x; bl < nbi; bl += 128) {
            const uint32_t b = b0 + bl;
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const uint32_t *sw = (const uint32_t *)sbuf[r];
                const uint32_t a = (off[r] + b0 * 34) % 16 + 34 * bl, w0 = a / 4;
                uint32_t wv[9];
#pragma unroll
                for (int e = 0; e < 9; e++)
                    wv[e] = sw[w0 + e];
                const bool odd = a & 2;
                const float dw =
                    __half2float(__ushort_as_half((unsigned short)(odd ? wv[0] >> 16 : wv[0])));
                uint32_t q[8];
#pragma unroll
                for (int e = 0; e < 8; e++)
                    q[e] = odd ? wv[e + 1] : __funnelshift_r(wv[e], wv[e + 1], 16);
#pragma unroll
                for (int t = 0; t < MR; t++) {
                    if ((uint32_t)t >= m)
                        break;
                    const int4 *xp = (const int4 *)(xa.q + (uint64_t)t * k + (uint64_t)b * 32);
                    const int4 va = xp[0], vb = xp[1];
                    const int sum = dot_q8_32(q, va, vb);
                    acc[r][t] += dw * xa.d[(uint64_t)t * nb + b] * (float)sum;
                }
            }
        }
    }
    gemv_rows_store<NR, MR>(acc, m, R, j0, o.n, accumulate);
}

/* A GEMV kernel instantiated for one input row (MR = 1) or up to
 * HR_CUDA_GEMV_MAX_ROWS: batch-1 decode and MoE expert rows (one input a
 * grid row) take the first, whose accumulators and unrolled input loop are
 * an eighth as large; the Q4_K warp-per-row kernel went from 114 registers
 * to fewer, so more warps an SM stream weights. Each output is the same
 * chain of operations in both, so a token's result does not depend on
 * which one ran (ragged == alone, tested). HR_CUDA_GEMV_MR1=0 launches
 * the wide one always (A/B). TARGS is the kernel's other template
 * arguments in parentheses. */
static bool gemv_mr1_on(void)
{
    static int v = -1;
    if (v < 0)
        v = hr_env_on("HR_CUDA_GEMV_MR1");
    return v;
}
#define GEMV_UNPAREN(...) __VA_ARGS__
#define GEMV_MR(KERNEL, TARGS, GRID, ...)                                                          \
    ((m == 1 || o.rx) && gemv_mr1_on()                                                             \
         ? hr_launch(KERNEL<GEMV_UNPAREN TARGS, 1>, GRID, 128, 0, s, __VA_ARGS__)                  \
         : hr_launch(KERNEL<GEMV_UNPAREN TARGS, HR_CUDA_GEMV_MAX_ROWS>, GRID, 128, 0, s, __VA_ARGS__))

/* The Q8_0 GEMV (HR_CUDA_Q80=strided|warp|row|rows2|rows4|auto; the A/B
 * switch): 2-byte loads (gemv_q80_q8_kernel), or 16-byte loads a warp
 * (ROW 0) or a block (ROW 1) per row, or a block per 2 or 4 rows
 * (gemv_q80s_rows_kernel). The default, auto (5): a block per 2 rows from
 * 2048 values, the 2-byte loads below (as row did). 8B Q8_0 decode step through
 * HR_BENCH_QUICK=1 bench-cuda on an H100, 2 alternating rounds
 * (2026-12-07): row 3.863 / 3.870 ms, rows2 3.818 / 3.812, rows4 3.979 /
 * 3.974. */
static int q80_variant(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("HR_CUDA_Q80");
        v = e && !strcmp(e, "strided") ? 0 : e && !strcmp(e, "warp") ? 1
            : e && !strcmp(e, "row") ? 2 : e && !strcmp(e, "rows2") ? 3
            : e && !strcmp(e, "rows4") ? 4 : e && !strcmp(e, "pipe") ? 6 : 5;
    }
    return v;
}

/* Rows the pipelined GEMV takes: 2048 to 4096 values (pipe_q80: whole
 * words to a row's end, k % 256); pipe_rows: and one input row, no expert
 * rows. */
static bool pipe_k_ok(uint32_t k)
{
    return k >= 2048 && k <= 4096 && k % 256 == 0;
}

static bool pipe_rows(uint32_t k, uint32_t m, const hr_cuda_gemv_out &o)
{
    return m == 1 && !o.rx && pipe_k_ok(k);
}

/* The Q4_K integer GEMV for rows of 2048 values and more
 * (HR_CUDA_Q4K=warp|row|rows2|rows4|pair|auto-warp|auto; the A/B switch):
 * a warp per row (0), a block per row (1), a block per 2 or 4 rows (2, 4).
 * pair (6): a warp per row on whole sub-block pairs
 * (gemv_q4k_q8_pair_kernel), and a block per 2 rows from 8192 values (the
 * 8B shape's ffn_down); auto-warp (5) the same with the piece kernel's warp
 * per row, the default until 2026-12-07. The default, auto (7): pair, but
 * one input row on rows of up to 4096 values takes the pipelined kernel
 * (gemv_pipe_kernel, the same bits). bench-gemv on an H100,
 * 2026-12-07, share of a read-only kernel's GB/s (warp / row / rows2):
 * attn_q 67/51/68%, ffn_up 66/38/56%, ffn_down 58/65/69%, output
 * 65/32/49%; 8B Q4_K tg128 through bench-cuda: row 192.7, rows2 252.7,
 * warp 271.3, auto-warp 275.9 tok/s. 8B Q4_K decode step on an H100 (two
 * alternating rounds, HR_BENCH_QUICK=1, 2026-12-07): pair 2.776 / 2.779
 * ms against auto-warp's 2.800 / 2.799 (with the merge's Q8_K 2.749 /
 * 2.747 against 2.770 / 2.770); in a later call pipe 2.659 / 2.655 against
 * pair's 2.742 / 2.810 (tg128 382.2 / 382.5 against 360.6 / 358.4). */
/* gemv_pipe_kernel's grids: their resident blocks (set at preload), Q4_K
 * and Q8_0. */
static unsigned pipe_blocks[2] = {1, 1};

/* One launch of gemv_pipe_kernel (the checks are the callers'): nx NULL,
 * inputs a; else the norm inside it, with sw (or NULL) the SwiGLU too. */
template <class P>
static void pipe_launch(const hr_cuda_gemv_out &o, uint64_t row_bytes, uint32_t k,
                        const hr_cuda_q8_act *a, const q4k_norm_in *nx, const hr_cuda_swiglu_q8 *sw,
                        int accumulate, cudaStream_t s)
{
    const unsigned cap = pipe_blocks[P::id];
    const uint32_t warps = sw ? o.end[0] : o.n;
    const unsigned nb = (warps + 3) / 4 < cap ? (warps + 3) / 4 : cap;
    hr_cuda_q8_act none;
    memset(&none, 0, sizeof(none));
    const q4k_norm_in no_norm = {NULL, NULL, 0.0f};
    if (!nx)
        hr_launch(gemv_pipe_kernel<P, false, false>, nb, 128, 0, s, o, row_bytes, k, *a, no_norm,
                  hr_cuda_swiglu_q8{}, accumulate);
    else if (!sw)
        hr_launch(gemv_pipe_kernel<P, true, false>, nb, 128, 0, s, o, row_bytes, k, none, *nx,
                  hr_cuda_swiglu_q8{}, accumulate);
    else
        hr_launch(gemv_pipe_kernel<P, true, true>, nb, 128, 0, s, o, row_bytes, k, none, *nx, *sw,
                  0);
}

static int q4k_variant(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("HR_CUDA_Q4K");
        v = !e ? 7 : !strcmp(e, "warp") ? 0 : !strcmp(e, "row") ? 1 : !strcmp(e, "rows2") ? 2
                   : !strcmp(e, "rows4") ? 4 : !strcmp(e, "auto-warp") ? 5
                   : !strcmp(e, "pair") ? 6 : 7;
    }
    return v;
}

/* Q8_0 quantization (k % 32 == 0) for the integer GEMV: the values
 * act_round_kernel's Q8_0 branch makes, as int8 q and the f16-rounded
 * scale d per 32 (a warp is one block). */
__global__ void quant_q80_kernel(const float *x, uint32_t k, hr_cuda_q8_act a)
{
    pdl_begin();
    const uint32_t row = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= k)
        return; /* whole warps: k % 32 == 0 */
    const float v = x[(size_t)row * k + i];
    const float amax = warp_max(fabsf(v));
    const float d = q80_d(amax);
    const float id = q80_id(amax);
    const int q = q80_q(v, id);
    a.q[(size_t)row * k + i] = (int8_t)q;
    if ((threadIdx.x & 31) == 0)
        a.d[(size_t)row * (k / 32) + i / 32] = d;
}

/* HR_CUDA_GEMV=float keeps the float kernels for the types that have an
 * integer one (benchmarks compare the two in one run). */
static int gemv_float_only(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("HR_CUDA_GEMV");
        v = e && (!strcmp(e, "float") || !strcmp(e, "generic"));
    }
    return v;
}

extern "C" int hr_cuda_gemv_int_type(int type, enum hr_cuda_act act)
{
    return ((type == HR_CUDA_T_Q4_K && act == HR_CUDA_ACT_Q8_K) ||
            (type == HR_CUDA_T_Q8_0 && act == HR_CUDA_ACT_Q8_0)) && !gemv_float_only();
}

extern "C" cudaError_t hr_cuda_quant_act(enum hr_cuda_act act, const float *x, uint32_t m,
                                         uint32_t k, const struct hr_cuda_q8_act *a,
                                         cudaStream_t s)
{
    if (!m)
        return cudaSuccess;
    if (act == HR_CUDA_ACT_Q8_0 && k % 32 == 0) {
        hr_launch(quant_q80_kernel, dim3((k + 127) / 128, m), 128, 0, s, x, k, *a);
        return cudaGetLastError();
    }
    if (act != HR_CUDA_ACT_Q8_K || k % 256)
        return cudaErrorInvalidValue;
    hr_launch(quant_q8k_kernel, dim3(k / 256, m), 256, 0, s, x, k, *a);
    return cudaGetLastError();
}

/* A GEMV of one part (the single-matrix entry points). */
static hr_cuda_gemv_out one_part(const void *w, uint32_t n, float *y, uint32_t ldy,
                                 const float *bias)
{
    hr_cuda_gemv_out o;
    memset(&o, 0, sizeof(o));
    o.w[0] = (const uint8_t *)w, o.y[0] = y, o.bias[0] = bias, o.ldy[0] = ldy;
    o.end[0] = o.end[1] = o.end[2] = o.n = n;
    o.n_parts = 1;
    return o;
}

/* Every part's weight address ORed with the row length: alignment tests. */
static uintptr_t parts_align(const hr_cuda_gemv_out &o, uint64_t row_bytes)
{
    uintptr_t a = (uintptr_t)row_bytes;
    for (uint32_t p = 0; p < o.n_parts; p++)
        a |= (uintptr_t)o.w[p];
    return a;
}

/* Part p alone (kernels that put several rows in a warp). */
static hr_cuda_gemv_out part_of(const hr_cuda_gemv_out &o, uint32_t p)
{
    const uint32_t j0 = p ? o.end[p - 1] : 0;
    return one_part(o.w[p], o.end[p] - j0, o.y[p], o.ldy[p], o.bias[p]);
}

extern "C" cudaError_t hr_cuda_gemv_int_parts(int type, uint64_t row_bytes, uint32_t k,
                                              const hr_cuda_gemv_out *op,
                                              const struct hr_cuda_q8_act *a, uint32_t m,
                                              int accumulate, cudaStream_t s)
{
    const hr_cuda_gemv_out &o = *op;
    const uint32_t n = o.n;
    if (!m || !n)
        return cudaSuccess;
    /* expert rows: m rows of one input each (a grid row a row) */
    if ((!o.rx && m > HR_CUDA_GEMV_MAX_ROWS) || (o.rx && m > 65535) || !o.n_parts ||
        o.n_parts > HR_CUDA_GEMV_PARTS)
        return cudaErrorInvalidValue;
    const uintptr_t al = parts_align(o, row_bytes);
    const unsigned gy = o.rx ? m : 1; /* expert rows: a grid row each */
    /* rows under 2048 values (Qwen2.5-0.5B's 896: 28 blocks of 32) keep the
     * 2-byte-load kernel, a warp per row: a block per row would leave most
     * of its 128 threads idle (0.5B Q8_0 tg128 on an H200 went 795 -> 727
     * tok/s with it and the split attention together; not measured apart) */
    int qv = q80_variant() == 5 ? (k < 2048 ? 0 : 3)
             : q80_variant() == 2 && k < 2048 ? 0 : q80_variant();
    if (qv == 6 && !(pipe_rows(k, m, o) && al % 4 == 0))
        qv = k < 2048 ? 0 : 3; /* auto's */
    if (type == HR_CUDA_T_Q8_0 && k % 32 == 0 && al % 2 == 0 && qv) {
        if (qv == 6)
            pipe_launch<pipe_q80>(o, row_bytes, k, a, NULL, NULL, accumulate, s);
        else if (qv == 3)
            GEMV_MR(gemv_q80s_rows_kernel, (2), dim3((n + 1) / 2, gy), o, row_bytes, k, *a, m,
                    accumulate);
        else if (qv == 4)
            GEMV_MR(gemv_q80s_rows_kernel, (4), dim3((n + 3) / 4, gy), o, row_bytes, k, *a, m,
                    accumulate);
        else if (qv == 2)
            GEMV_MR(gemv_q80s_q8_kernel, (1), dim3(n, gy), o, row_bytes, k, *a, m, accumulate);
        else
            GEMV_MR(gemv_q80s_q8_kernel, (0), dim3((n + 3) / 4, gy), o, row_bytes, k, *a, m, accumulate);
        return cudaGetLastError();
    }
    if (type == HR_CUDA_T_Q8_0 && k % 32 == 0 && al % 2 == 0) {
        hr_launch(gemv_q80_q8_kernel, dim3((n + 3) / 4, gy), 128, 0, s, o, row_bytes, k, *a, m, accumulate);
        return cudaGetLastError();
    }
    if (type != HR_CUDA_T_Q4_K || k % 256 || al % 16)
        return cudaErrorInvalidValue;
    /* a block per row from 2048 values (8 super-blocks: 64 pieces) up */
    int qv4 = k >= 2048 ? q4k_variant() : 0;
    if (qv4 == 7 && !pipe_rows(k, m, o))
        qv4 = 6; /* the pipelined kernel: one input row, up to 4096 values */
    if (qv4 == 5 || qv4 == 6)
        qv4 = k >= 8192 ? 2 : qv4 == 6 ? 6 : 0;
    if (qv4 == 7)
        pipe_launch<pipe_q4k>(o, row_bytes, k, a, NULL, NULL, accumulate, s);
    else if (qv4 == 6)
        GEMV_MR(gemv_q4k_q8_pair_kernel, (2), dim3((n + 3) / 4, gy), o, row_bytes, k, *a, m, accumulate);
    else if (qv4 == 2)
        GEMV_MR(gemv_q4k_q8_rows_kernel, (2), dim3((n + 1) / 2, gy), o, row_bytes, k, *a, m, accumulate);
    else if (qv4 == 4)
        GEMV_MR(gemv_q4k_q8_rows_kernel, (4), dim3((n + 3) / 4, gy), o, row_bytes, k, *a, m, accumulate);
    else if (qv4 == 1)
        GEMV_MR(gemv_q4k_q8_kernel, (1), dim3(n, gy), o, row_bytes, k, *a, m, accumulate);
    else
        GEMV_MR(gemv_q4k_q8_kernel, (0), dim3((n + 3) / 4, gy), o, row_bytes, k, *a, m, accumulate);
    return cudaGetLastError();
}

extern "C" int hr_cuda_gemv_normed_ok(int type, uint32_t k)
{
    const bool on = type == HR_CUDA_T_Q4_K ? q4k_variant() == 7
                    : type == HR_CUDA_T_Q8_0 ? q80_variant() == 6 : false;
    return on && pipe_k_ok(k) && !gemv_float_only();
}

extern "C" cudaError_t hr_cuda_gemv_normed(int type, uint64_t row_bytes, uint32_t k,
                                           const hr_cuda_gemv_out *op, const float *x,
                                           const float *w, float eps, const hr_cuda_swiglu_q8 *sw,
                                           int accumulate, cudaStream_t s)
{
    const hr_cuda_gemv_out &o = *op;
    if (!o.n)
        return cudaSuccess;
    const uint32_t align = type == HR_CUDA_T_Q4_K ? 16 : 4, group = type == HR_CUDA_T_Q4_K ? 256 : 32;
    if (!hr_cuda_gemv_normed_ok(type, k) || o.rx || !o.n_parts ||
        o.n_parts > HR_CUDA_GEMV_PARTS || parts_align(o, row_bytes) % align)
        return cudaErrorInvalidValue;
    const uint32_t F = o.end[0];
    if (sw && (o.n_parts != 2 || o.n != 2 * F || F % group || o.bias[0] || o.bias[1] ||
               accumulate || !sw->ctr || !sw->q.q || !sw->q.d || (group == 256 && !sw->q.s)))
        return cudaErrorInvalidValue;
    const q4k_norm_in nx = {x, w, eps};
    if (type == HR_CUDA_T_Q4_K)
        pipe_launch<pipe_q4k>(o, row_bytes, k, NULL, &nx, sw, accumulate, s);
    else
        pipe_launch<pipe_q80>(o, row_bytes, k, NULL, &nx, sw, accumulate, s);
    return cudaGetLastError();
}

extern "C" cudaError_t hr_cuda_gemv_int(int type, const void *w, uint64_t row_bytes, uint32_t k,
                                        uint32_t n, const struct hr_cuda_q8_act *a, uint32_t m,
                                        float *y, uint32_t ldy, const float *bias, int accumulate,
                                        cudaStream_t s)
{
    const hr_cuda_gemv_out o = one_part(w, n, y, ldy, bias);
    return hr_cuda_gemv_int_parts(type, row_bytes, k, &o, a, m, accumulate, s);
}

/* One input row (decode of one sequence), the other types: four weight rows
 * per warp, so each input chunk is loaded once for the four (the generic
 * kernel loads the whole input per weight row). Lane and chunk order as
 * gemv_kernel's, so an output equals its bit for bit: a token decoded alone
 * gets what it gets in a batch. */
template <int TYPE>
__global__ void __launch_bounds__(128) gemv1_kernel(const uint8_t *w, uint64_t row_bytes,
                                                    uint32_t k, uint32_t n, const float *x,
                                                    float *y, const float *bias, int accumulate)
{
    pdl_begin();
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t j0 = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * 4;
    if (j0 >= n)
        return;
    const uint32_t nr = n - j0 < 4 ? n - j0 : 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint32_t c = lane; c < k / 32; c += 32) {
        const float4 *xp = (const float4 *)(x + (uint64_t)c * 32);
        float xv[32];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 a = xp[i];
            xv[4 * i] = a.x, xv[4 * i + 1] = a.y, xv[4 * i + 2] = a.z, xv[4 * i + 3] = a.w;
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            float v[32];
            /* a missing row (n % 4) decodes row j0 again and is not stored */
            dequant_chunk<TYPE>(w + (uint64_t)(j0 + ((uint32_t)r < nr ? r : 0)) * row_bytes, c, v);
            float a = acc[r];
#pragma unroll
            for (int i = 0; i < 32; i++)
                a = fmaf(v[i], xv[i], a);
            acc[r] = a;
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        float a = warp_sum(acc[r]);
        if (lane == 0 && (uint32_t)r < nr) {
            const uint32_t j = j0 + r;
            if (bias)
                a += bias[j];
            y[j] = accumulate ? y[j] + a : a;
        }
    }
}

/* F16 and BF16, any m <= 8: one weight row per warp, lane l takes the
 * 16-byte pieces (8 values) l, l + 32, ..., U in flight (NC: loads that
 * bypass L1; see raw16_variant); each input
 * row's 8 values as two float4. The kernels above take four rows per warp
 * and so a quarter of the warps: for the 8B shape's 4096-row matrices
 * that is 8 warps per SM, too few loads in flight (F16 decode ran at
 * 1.46 TB/s). A lane's pieces are summed in order, then the warp. */
/* A weight load that bypasses L1 (the input rows, read by every warp,
 * stay there) and may use the read-only path: weights are only read. */
__device__ __forceinline__ uint4 ld_weights(const uint4 *p)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

/* acc[t] += the 8 weights of 16-byte piece pc (F16, or BF16 when BF) times
 * input row t's same 8 values, in order, for t < m. */
template <int BF>
__device__ __forceinline__ void raw16_piece(uint4 wv, const float *x, uint32_t k, uint32_t pc,
                                            uint32_t m, float acc[HR_CUDA_GEMV_MAX_ROWS])
{
    const uint32_t wd[4] = {wv.x, wv.y, wv.z, wv.w};
    float f[8];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        if (BF) {
            f[2 * e] = __uint_as_float(wd[e] << 16);
            f[2 * e + 1] = __uint_as_float(wd[e] & 0xFFFF0000u);
        } else {
            const float2 a2 = __half22float2(*(const __half2 *)&wd[e]);
            f[2 * e] = a2.x, f[2 * e + 1] = a2.y;
        }
    }
#pragma unroll
    for (int t = 0; t < HR_CUDA_GEMV_MAX_ROWS; t++) {
        if ((uint32_t)t >= m)
            break;
        const float4 *xp = (const float4 *)(x + (uint64_t)t * k + (uint64_t)pc * 8);
        const float4 xa = xp[0], xb = xp[1];
        float a = acc[t];
        a = fmaf(f[0], xa.x, a);
        a = fmaf(f[1], xa.y, a);
        a = fmaf(f[2], xa.z, a);
        a = fmaf(f[3], xa.w, a);
        a = fmaf(f[4], xb.x, a);
        a = fmaf(f[5], xb.y, a);
        a = fmaf(f[6], xb.z, a);
        a = fmaf(f[7], xb.w, a);
        acc[t] = a;
    }
}

template <int BF, int U, int NC>
__global__ void __launch_bounds__(128) gemv_raw16_kernel(hr_cuda_gemv_out o, uint64_t row_bytes,
                                                         uint32_t k, const float *x, uint32_t m,
                                                         int accumulate)
{
    pdl_begin();
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t jg = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (jg >= o.n)
        return;
    const gemv_row R = gemv_part(o, jg, row_bytes);
    gemv_rows_x(o, k, &x, &m);
    const uint4 *row = (const uint4 *)R.w;
    float acc[HR_CUDA_GEMV_MAX_ROWS];
#pragma unroll
    for (int t = 0; t < HR_CUDA_GEMV_MAX_ROWS; t++)
        acc[t] = 0.0f;
    const uint32_t np = k / 8;
    for (uint32_t p0 = lane; p0 < np; p0 += U * 32) {
        uint4 wv[U];
#pragma unroll
        for (int i = 0; i < U; i++) {
            const uint32_t pc = p0 + 32 * (uint32_t)i;
            if (pc < np)
                wv[i] = NC ? ld_weights(row + pc) : row[pc];
        }
#pragma unroll
        for (int i = 0; i < U; i++) {
            const uint32_t pc = p0 + 32 * (uint32_t)i;
            if (pc >= np)
                break;
            raw16_piece<BF>(wv[i], x, k, pc, m, acc);
        }
    }
    gemv_warp_store(acc, m, R.j, R.y, R.ldy, R.bias, accumulate);
}

/* A thread's 4 pieces p0, p0 + 128, ... (those below np) of a 16-bit row. */
__device__ __forceinline__ void raw16_load4(const uint4 *row, uint32_t p0, uint32_t np, uint4 wv[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t pc = p0 + 128 * (uint32_t)i;
        if (pc < np)
            wv[i] = ld_weights(row + pc);
    }
}

/* The same product, one block of 4 warps per weight row: thread i takes the
 * row's 16-byte pieces i, i + 128, ... (4 in flight), each warp sums its
 * lanes, then thread t < m adds the 4 warps' sums in warp order. With a
 * warp per row, the 8B shape's 4096-row matrices were 1024 blocks on an
 * H100's ~900 resident: one full wave and a tenth of another, whose few
 * blocks then ran with few loads in flight. A block per row is 4096
 * blocks, 4.4 waves. The order depends on k only, so a row's result does
 * not depend on m. */
template <int BF, int MR>
__global__ void __launch_bounds__(128) gemv_raw16_row_kernel(hr_cuda_gemv_out o,
                                                             uint64_t row_bytes, uint32_t k,
                                                             const float *x, uint32_t m,
                                                             int accumulate)
{
    const bool early = pdl_prewait && !o.rx;
    if (!early)
        pdl_begin();
    const gemv_row R = gemv_part(o, blockIdx.x, row_bytes);
    gemv_rows_x(o, k, &x, &m);
    const uint4 *row = (const uint4 *)R.w;
    float acc[MR];
#pragma unroll
    for (int t = 0; t < MR; t++)
        acc[t] = 0.0f;
    const uint32_t np = k / 8;
    uint4 wv[4];
    raw16_load4(row, threadIdx.x, np, wv);
    if (early)
        pdl_begin();
    for (uint32_t p0 = threadIdx.x; p0 < np; p0 += 4 * 128) {
        if (p0 != threadIdx.x)
            raw16_load4(row, p0, np, wv);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t pc = p0 + 128 * (uint32_t)i;
            if (pc >= np)
                break;
            raw16_piece<BF>(wv[i], x, k, pc, m, acc);
        }
    }
    gemv_block_store<MR>(acc, m, R.j, R.y, R.ldy, R.bias, accumulate);
}

/* The F16/BF16 GEMV (HR_CUDA_RAW16=u4|u8|u8nc|row; the A/B switch): a warp
 * per row with 4 or 8 16-byte pieces in flight per lane, u8nc with
 * L1-bypassing loads (a lane's pieces are the same in the same order in
 * these three, so their results are identical), or by default a block per
 * row (gemv_raw16_row_kernel: another order). */
static int raw16_variant(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("HR_CUDA_RAW16");
        v = e && !strcmp(e, "u4")     ? 0
            : e && !strcmp(e, "u8")   ? 1
            : e && !strcmp(e, "u8nc") ? 2
                                      : 3;
    }
    return v;
}

/* HR_CUDA_GEMV=generic runs every type on the generic kernel (benchmarks
 * compare the two in one run). */
static int gemv_generic_only(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("HR_CUDA_GEMV");
        v = e && !strcmp(e, "generic");
    }
    return v;
}

extern "C" cudaError_t hr_cuda_gemv_parts(int type, uint64_t row_bytes, uint32_t k,
                                          const hr_cuda_gemv_out *op, const float *x, uint32_t m,
                                          int accumulate, cudaStream_t s)
{
    const hr_cuda_gemv_out &o = *op;
    const uint32_t n = o.n;
    if (!m || !n)
        return cudaSuccess;
    if ((!o.rx && m > HR_CUDA_GEMV_MAX_ROWS) || (o.rx && m > 65535) || k % 32 || !o.n_parts ||
        o.n_parts > HR_CUDA_GEMV_PARTS)
        return cudaErrorInvalidValue;
    const uintptr_t al = parts_align(o, row_bytes);
    const dim3 blocks((n + 3) / 4, o.rx ? m : 1); /* expert rows: a grid row each */
    if ((type == HR_CUDA_T_F16 || type == HR_CUDA_T_BF16) && k % 8 == 0 && al % 16 == 0 &&
        !gemv_generic_only()) {
#define L_RAW16(BF, U, NC)                                                                        \
    hr_launch(gemv_raw16_kernel<BF, U, NC>, blocks, 128, 0, s, o, row_bytes, k, x, m, accumulate)
        const int v = raw16_variant(), bf = type == HR_CUDA_T_BF16;
        if (v == 3) {
            if (bf)
                GEMV_MR(gemv_raw16_row_kernel, (1), dim3(n, blocks.y), o, row_bytes, k, x, m, accumulate);
            else
                GEMV_MR(gemv_raw16_row_kernel, (0), dim3(n, blocks.y), o, row_bytes, k, x, m, accumulate);
        } else if (v == 0)
            bf ? L_RAW16(1, 4, 0) : L_RAW16(0, 4, 0);
        else if (v == 1)
            bf ? L_RAW16(1, 8, 0) : L_RAW16(0, 8, 0);
        else
            bf ? L_RAW16(1, 8, 1) : L_RAW16(0, 8, 1);
#undef L_RAW16
        return cudaGetLastError();
    }
    /* Four weight rows a warp (Q4_K on f32 inputs; one input row; expert
     * rows a grid row each): a warp's rows stay within a part, so one launch
     * per part. */
    const bool q4k = type == HR_CUDA_T_Q4_K && k % 256 == 0 && al % 16 == 0 &&
                     !gemv_generic_only();
    if (q4k || (m == 1 && !gemv_generic_only() && !o.rx)) {
        for (uint32_t p = 0; p < o.n_parts; p++) {
            const hr_cuda_gemv_out q = part_of(o, p);
            const uint32_t np = q.n;
            if (!np)
                continue;
            if (q4k) {
                const unsigned qblocks = (np + 4 * Q4K_ROWS - 1) / (4 * Q4K_ROWS);
                hr_launch(gemv_q4k_kernel, dim3(qblocks, o.rx ? m : 1), 128, 0, s, q.w[0],
                          row_bytes, k, np, x, m, q.y[0], q.ldy[0], q.bias[0], accumulate, o.rx,
                          o.mat_bytes);
            } else {
#define L_GEMV1(T)                                                                                \
    hr_launch(gemv1_kernel<T>, (np + 15) / 16, 128, 0, s, q.w[0], row_bytes, k, np, x, q.y[0],     \
              q.bias[0], accumulate)
                HR_DISPATCH(type, L_GEMV1)
#undef L_GEMV1
            }
        }
        return cudaGetLastError();
    }
#define L_GEMV(T) hr_launch(gemv_kernel<T>, blocks, 128, 0, s, o, row_bytes, k, x, m, accumulate)
    HR_DISPATCH(type, L_GEMV)
#undef L_GEMV
    return cudaGetLastError();
}

extern "C" cudaError_t hr_cuda_gemv(int type, const void *w, uint64_t row_bytes, uint32_t k,
                                    uint32_t n, const float *x, uint32_t m, float *y, uint32_t ldy,
                                    const float *bias, int accumulate, cudaStream_t s)
{
    const hr_cuda_gemv_out o = one_part(w, n, y, ldy, bias);
    return hr_cuda_gemv_parts(type, row_bytes, k, &o, x, m, accumulate, s);
}

/* ---- GEMM: prefill --------------------------------------------------------
 *
 * A 64 x 64 tile of y (64 input rows x 64 weight rows) per block of 256
 * threads, each thread 4 x 4 outputs. Per 32-value chunk of k: 64 threads
 * decode one weight row's chunk each into shared memory (the weights stay
 * quantized in VRAM; no dequantized copy exists), all threads load the
 * inputs' chunk, then every output takes 32 fmaf in k order. So each output
 * is one fmaf chain over k = 0 .. k-1, whatever m and the tile: a token's
 * result does not depend on its batch (within the GEMM's range, m > 8). Full
 * f32 on the CUDA cores: the first version, for agreement; tensor cores
 * (bf16 tiles, int8 MMA) come next and must beat it measured. */
#define GT 64
template <int TYPE>
__global__ void __launch_bounds__(256) gemm_kernel(const uint8_t *w, uint64_t row_bytes, uint32_t k,
                                                   uint32_t n, const float *x, uint32_t m, float *y,
                                                   uint32_t ldy, const float *bias, int accumulate)
{
    pdl_begin();
    __shared__ float as[32][GT + 4]; /* [k in chunk][input row] */
    __shared__ float ws[32][GT + 4]; /* [k in chunk][weight row] */
    const uint32_t t0 = blockIdx.y * GT, j0 = blockIdx.x * GT;
    const uint32_t tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (uint32_t c = 0; c < k / 32; c++) {
        if (tid < GT) {
            float v[32];
            const uint32_t j = j0 + tid;
            if (j < n) {
                dequant_chunk<TYPE>(w + (uint64_t)j * row_bytes, c, v);
            } else {
#pragma unroll
                for (int i = 0; i < 32; i++)
                    v[i] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < 32; i++)
                ws[i][tid] = v[i];
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint32_t idx = tid + 256 * r, row = idx / 8, q = idx % 8;
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (t0 + row < m)
                a = *(const float4 *)(x + (uint64_t)(t0 + row) * k + (uint64_t)c * 32 + q * 4);
            as[q * 4][row] = a.x, as[q * 4 + 1][row] = a.y;
            as[q * 4 + 2][row] = a.z, as[q * 4 + 3][row] = a.w;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 32; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                a[i] = as[kk][ty * 4 + i], b[i] = ws[kk][tx * 4 + i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t t = t0 + ty * 4 + i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t jj = j0 + tx * 4 + j;
            if (t < m && jj < n) {
                float v = acc[i][j];
                if (bias)
                    v += bias[jj];
                float *yp = y + (uint64_t)t * ldy + jj;
                *yp = accumulate ? *yp + v : v;
            }
        }
    }
}

extern "C" cudaError_t hr_cuda_gemm(int type, const void *w, uint64_t row_bytes, uint32_t k,
                                    uint32_t n, const float *x, uint32_t m, float *y, uint32_t ldy,
                                    const float *bias, int accumulate, cudaStream_t s)
{
    if (!m || !n)
        return cudaSuccess;
    if (k % 32)
        return cudaErrorInvalidValue;
    dim3 grid((n + GT - 1) / GT, (m + GT - 1) / GT);
#define L_GEMM(T)                                                                                 \
    hr_launch(gemm_kernel<T>, grid, 256, 0, s, (const uint8_t *)w, row_bytes, k, n, x, m, y, ldy, bias,  \
                                        accumulate)
    HR_DISPATCH(type, L_GEMM)
#undef L_GEMM
    return cudaGetLastError();
}

/* ---- integer GEMM: prefill on the int8 tensor cores -----------------------
 *
 * For the weight types whose CPU dot is an integer sum per block of 32
 * times the two blocks' scales (Q8_0, Q4_0, Q5_0, IQ4_NL and MXFP4, all on
 * Q8_0 inputs): the same integer sums, made by mma.sync m16n8k32 (s8 x s8
 * -> s32, exact), then y += (dw * dx) * sum per block as the CPU and the
 * integer GEMV do. Q4_K on Q8_K inputs too: a sub-block of 32 is a block,
 * its nibbles the int8 values, y += dx (d sc sum - dmin m sum x) with the
 * inputs' per-16 sums (the GEMV's terms, by 32 instead of by 16); which
 * steps take it: cuda-engine.c's int_gemm. The f16 path rounds inputs and
 * weights to f16 instead (cuBLASLt on a dequantized copy), which moved a
 * qwen35moe Q8_0 model's MoE routing on 3 of 55 rows; this path has no
 * rounding but the scales'.
 *
 * A block of 4 warps takes 64 weight rows x 64 tokens; per stage it decodes
 * 4 blocks of 32 of each weight row into int8 in shared memory (the weights
 * stay quantized in VRAM: nothing is dequantized into the arena) and copies
 * the inputs' int8 beside them. Each warp multiplies 32 rows x 32 tokens:
 * 2 x 4 MMAs per block of 32, whose int32 results are scaled and added in
 * block order. So an output is one chain over k's blocks in order, whatever
 * m and the tile: a token's result does not depend on its batch. */
/* 16 bytes global -> shared without passing through registers; zeros when
 * !valid (src is then not read). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0));
}

/* The same for 4 bytes (through L1: cp.async.cg takes 16 only). */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid)
{
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src),
                 "r"(valid ? 4 : 0));
}

#define MQ_N 64
#define MQ_M 64
#define MQ_KB 4
/* a row's stride in 32-bit words: 8 per block, +4 so that the 32 lanes'
 * fragment reads (row g + 4 t words apart) fall in 32 different banks */
#define MQ_LDW (MQ_KB * 8 + 4)

__device__ __forceinline__ void mma_s8(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 4-bit indices (one per byte) through a 16-entry int8 table. */
__device__ __forceinline__ uint32_t lut4(uint32_t x, const int8_t *lut)
{
    return (uint32_t)(uint8_t)lut[x & 15] | (uint32_t)(uint8_t)lut[(x >> 8) & 15] << 8 |
           (uint32_t)(uint8_t)lut[(x >> 16) & 15] << 16 | (uint32_t)(uint8_t)lut[x >> 24] << 24;
}

/* Bits 0..3 of x to bit 4 of bytes 0..3 (Q5_0's fifth bit). */
__device__ __forceinline__ uint32_t bit4_spread(uint32_t x)
{
    return (x & 1) << 4 | (x & 2) << 11 | (x & 4) << 18 | (x & 8) << 25;
}

/* Block c of a row: its 32 quants as int8 in k order (q[e] holds values
 * 4e .. 4e + 3) and its scale. The values are dequant_chunk's divided by
 * the scale: MXFP4's table is doubled and its scale halved, as on the CPU. */
template <int TYPE>
__device__ __forceinline__ float mq_chunk(const uint8_t *row, uint32_t c, uint32_t q[8],
                                          const int8_t *lut, float *mn)
{
    if constexpr (TYPE == HR_CUDA_T_Q4_K) {
        /* sub-block j = c % 8 of super-block c / 8: the low nibbles of quant
         * bytes 32 (j / 2) .. + 31 for even j, the high ones for odd j;
         * value = d sc_j q - dmin m_j, the offset returned in *mn */
        const uint8_t *b = row + (size_t)(c / 8) * 144;
        const uint32_t j = c % 8, sh = 4 * (j & 1);
        const uint4 hd = *(const uint4 *)b;
        const uint4 *qp = (const uint4 *)(b + 16 + 32 * (j / 2));
        const uint4 u0 = qp[0], u1 = qp[1];
        const uint32_t w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
        for (int e = 0; e < 8; e++)
            q[e] = (w[e] >> sh) & 0x0F0F0F0Fu;
        float d1a, m1a, d1b, m1b;
        q4k_scales(hd, j / 2, &d1a, &m1a, &d1b, &m1b);
        *mn = j & 1 ? m1b : m1a;
        return j & 1 ? d1b : d1a;
    } else if constexpr (TYPE == HR_CUDA_T_Q8_0) {
        const unsigned short *p = (const unsigned short *)(row + (size_t)c * 34);
#pragma unroll
        for (int e = 0; e < 8; e++)
            q[e] = (uint32_t)p[1 + 2 * e] | (uint32_t)p[2 + 2 * e] << 16;
        return __half2float(__ushort_as_half(p[0]));
    } else if constexpr (TYPE == HR_CUDA_T_Q4_0 || TYPE == HR_CUDA_T_IQ4_NL) {
        const unsigned short *p = (const unsigned short *)(row + (size_t)c * 18);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t qs = (uint32_t)p[1 + 2 * i] | (uint32_t)p[2 + 2 * i] << 16;
            const uint32_t lo = qs & 0x0F0F0F0Fu, hi = (qs >> 4) & 0x0F0F0F0Fu;
            if constexpr (TYPE == HR_CUDA_T_Q4_0) {
                q[i] = __vsub4(lo, 0x08080808u);
                q[4 + i] = __vsub4(hi, 0x08080808u);
            } else {
                q[i] = lut4(lo, lut);
                q[4 + i] = lut4(hi, lut);
            }
        }
        return __half2float(__ushort_as_half(p[0]));
    } else if constexpr (TYPE == HR_CUDA_T_Q5_0) {
        const unsigned short *p = (const unsigned short *)(row + (size_t)c * 22);
        const uint32_t qh = (uint32_t)p[1] | (uint32_t)p[2] << 16;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t qs = (uint32_t)p[3 + 2 * i] | (uint32_t)p[4 + 2 * i] << 16;
            const uint32_t lo = (qs & 0x0F0F0F0Fu) | bit4_spread(qh >> (4 * i));
            const uint32_t hi = ((qs >> 4) & 0x0F0F0F0Fu) | bit4_spread(qh >> (16 + 4 * i));
            q[i] = __vsub4(lo, 0x10101010u);
            q[4 + i] = __vsub4(hi, 0x10101010u);
        }
        return __half2float(__ushort_as_half(p[0]));
    } else { /* MXFP4: 17-byte blocks, byte loads */
        const uint8_t *b = row + (size_t)c * 17;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t qs = u32_at(b + 1 + 4 * i);
            q[i] = lut4(qs & 0x0F0F0F0Fu, lut);
            q[4 + i] = lut4((qs >> 4) & 0x0F0F0F0Fu, lut);
        }
        return e8m0_half(b[0]);
    }
}

template <int TYPE>
__global__ void __launch_bounds__(128) gemm_mq_kernel(const uint8_t *w, uint64_t row_bytes,
                                                      uint32_t k, uint32_t n, hr_cuda_q8_act xa,
                                                      uint32_t m, float *y, uint32_t ldy,
                                                      const float *bias, int accumulate)
{
    pdl_begin();
    __shared__ __align__(16) uint32_t ws[MQ_N * MQ_LDW], xs[MQ_M * MQ_LDW];
    __shared__ float wd[MQ_N][MQ_KB], xd[MQ_M][MQ_KB];
    /* Q4_K: each block's offset dmin m_j, and the inputs' sums over it */
    constexpr bool QK = TYPE == HR_CUDA_T_Q4_K;
    __shared__ float wmn[QK ? MQ_N : 1][MQ_KB], xb[QK ? MQ_M : 1][MQ_KB];
    __shared__ int8_t lut[16];
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t g = lane >> 2, t4 = lane & 3;
    const uint32_t n0 = blockIdx.x * MQ_N, m0 = blockIdx.y * MQ_M;
    const uint32_t wn = (warp & 1) * 32, wm = (warp >> 1) * 32; /* the warp's rows, tokens */
    if (tid < 16)
        lut[tid] = TYPE == HR_CUDA_T_MXFP4 ? mxfp4_values[tid] : iq4nl_values[tid];
    const uint32_t nb = k / 32;
    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[a][b][i] = 0.0f;
    for (uint32_t b0 = 0; b0 < nb; b0 += MQ_KB) {
        __syncthreads(); /* the last stage is used up (and lut written) */
        for (uint32_t c = tid; c < MQ_N * MQ_KB; c += blockDim.x) {
            const uint32_t r = c / MQ_KB, kb = c % MQ_KB;
            uint32_t q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float d = 0.0f, mn = 0.0f;
            if (n0 + r < n && b0 + kb < nb)
                d = mq_chunk<TYPE>(w + (uint64_t)(n0 + r) * row_bytes, b0 + kb, q, lut, &mn);
            uint4 *dst = (uint4 *)(ws + r * MQ_LDW + kb * 8);
            dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
            wd[r][kb] = d;
            if constexpr (QK)
                wmn[r][kb] = mn;
        }
        for (uint32_t c = tid; c < MQ_M * MQ_KB; c += blockDim.x) {
            const uint32_t r = c / MQ_KB, kb = c % MQ_KB;
            uint4 a = make_uint4(0, 0, 0, 0), b = a;
            float d = 0.0f, bs = 0.0f;
            if (m0 + r < m && b0 + kb < nb) {
                const uint64_t c = b0 + kb;
                const uint4 *p = (const uint4 *)(xa.q + (uint64_t)(m0 + r) * k + c * 32);
                a = p[0], b = p[1];
                if constexpr (QK) { /* Q8_K: a scale per 256, sums per 16 */
                    d = xa.d[(uint64_t)(m0 + r) * (k / 256) + c / 8];
                    const int16_t *sp = xa.s + (uint64_t)(m0 + r) * (k / 16) + 2 * c;
                    bs = (float)(sp[0] + sp[1]);
                } else {
                    d = xa.d[(uint64_t)(m0 + r) * nb + c];
                }
            }
            uint4 *dst = (uint4 *)(xs + r * MQ_LDW + kb * 8);
            dst[0] = a, dst[1] = b;
            xd[r][kb] = d;
            if constexpr (QK)
                xb[r][kb] = bs;
        }
        __syncthreads();
        const uint32_t kbs = nb - b0 < MQ_KB ? nb - b0 : MQ_KB;
        for (uint32_t kb = 0; kb < kbs; kb++) {
            uint32_t af[2][4], bf[4][2];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const uint32_t *r = ws + (wn + mt * 16 + g) * MQ_LDW + kb * 8 + t4;
                af[mt][0] = r[0], af[mt][1] = r[8 * MQ_LDW];
                af[mt][2] = r[4], af[mt][3] = r[8 * MQ_LDW + 4];
            }
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const uint32_t *r = xs + (wm + nt * 8 + g) * MQ_LDW + kb * 8 + t4;
                bf[nt][0] = r[0], bf[nt][1] = r[4];
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const float dw0 = wd[wn + mt * 16 + g][kb], dw1 = wd[wn + mt * 16 + g + 8][kb];
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    int s[4] = {0, 0, 0, 0};
                    mma_s8(s, af[mt], bf[nt][0], bf[nt][1]);
                    const float dx0 = xd[wm + nt * 8 + 2 * t4][kb];
                    const float dx1 = xd[wm + nt * 8 + 2 * t4 + 1][kb];
                    if constexpr (QK) { /* dx (d sc q.x - dmin m sum x), the GEMV's terms */
                        const float mw0 = wmn[wn + mt * 16 + g][kb];
                        const float mw1 = wmn[wn + mt * 16 + g + 8][kb];
                        const float bx0 = xb[wm + nt * 8 + 2 * t4][kb];
                        const float bx1 = xb[wm + nt * 8 + 2 * t4 + 1][kb];
                        acc[mt][nt][0] += dx0 * (dw0 * (float)s[0] - mw0 * bx0);
                        acc[mt][nt][1] += dx1 * (dw0 * (float)s[1] - mw0 * bx1);
                        acc[mt][nt][2] += dx0 * (dw1 * (float)s[2] - mw1 * bx0);
                        acc[mt][nt][3] += dx1 * (dw1 * (float)s[3] - mw1 * bx1);
                    } else {
                        acc[mt][nt][0] += dw0 * dx0 * (float)s[0];
                        acc[mt][nt][1] += dw0 * dx1 * (float)s[1];
                        acc[mt][nt][2] += dw1 * dx0 * (float)s[2];
                        acc[mt][nt][3] += dw1 * dx1 * (float)s[3];
                    }
                }
            }
        }
    }
    /* s[0], s[1]: row g, tokens 2 t4 and 2 t4 + 1; s[2], s[3]: row g + 8 */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t j = n0 + wn + mt * 16 + g + (i >= 2 ? 8 : 0);
                const uint32_t t = m0 + wm + nt * 8 + 2 * t4 + (i & 1);
                if (j < n && t < m) {
                    float v = acc[mt][nt][i];
                    if (bias)
                        v += bias[j];
                    float *yp = y + (uint64_t)t * ldy + j;
                    *yp = accumulate ? *yp + v : v;
                }
            }
}

/* ---- integer GEMM for decode batches: Q4_K x Q8_K, up to 64 input rows -----
 *
 * gemm_mq_kernel decodes its weight tiles into shared memory and waits for
 * each stage's loads; at decode sizes (9-64 rows) it was slower than
 * dequantizing every matrix to f16 for cuBLASLt (8B shape, 32 rows, H100:
 * 31.3 ms a step against 25.5), which moves 4.6 bytes per Q4_K weight where
 * the weight is 0.56. Here a warp takes 16 weight rows and every input row:
 * lane (g, c) loads 8 quant bytes of rows g and g + 8 per pair of
 * sub-blocks straight into the A fragments of mma.sync m16n8k32 (the low
 * nibbles are one sub-block of 32, the high ones the next; k is permuted
 * within a sub-block alike in A and B, which an integer dot does not see),
 * the next super-block's bytes in flight while this one is multiplied. The
 * inputs (Q8_K int8 and scales) reach shared memory by cp.async a
 * super-block ahead, shared by the block's 4 warps (64 weight rows).
 *
 * The arithmetic is ggml's Q4_K x Q8_K dot: per super-block the sub-blocks'
 * integer dots times their 6-bit scales summed in int32, the mins likewise
 * (sum_j m_j sum x_j, taken by a second MMA whose A is m_j in every byte),
 * then acc + dx (d isum - dmin imin) in f32. Matrices of few rows (less than
 * 192 blocks) are cut along k into 2 or 4 parts run as a thread-block
 * cluster, their partial sums added in part order through distributed
 * shared memory. The parts depend on n only, so a row's result is one fixed
 * sequence of operations whatever m and its place in the batch. */
#define MS_ROWS 64
#define MS_MAX_M HR_CUDA_GEMM_SMALL_ROWS
/* a token's 256 int8 inputs in shared memory, padded: the 8-byte reads of
 * 4 tokens x 4 lanes (a half-warp) fall in distinct banks */
#define MS_XLD 288

template <int NT>
struct ms_stage {
    int8_t q[8 * NT][MS_XLD];
    float d[8 * NT];
};

/* Q4_K sub-block j's 6-bit scale and min (scale_min_k4, header in registers) */
__device__ __forceinline__ void q4k_sm_int(const uint4 hd, uint32_t j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = (int)(q4k_sbyte(hd, j) & 63);
        *mn = (int)(q4k_sbyte(hd, j + 4) & 63);
    } else {
        *sc = (int)((q4k_sbyte(hd, j + 4) & 0xF) | ((q4k_sbyte(hd, j - 4) >> 6) << 4));
        *mn = (int)((q4k_sbyte(hd, j + 4) >> 4) | ((q4k_sbyte(hd, j) >> 6) << 4));
    }
}

template <int NT>
__global__ void __launch_bounds__(128) gemm_q4k_small_kernel(const uint8_t *w, uint64_t row_bytes,
                                                             uint32_t k, uint32_t n,
                                                             hr_cuda_q8_act xa, uint32_t m,
                                                             float *y, uint32_t ldy,
                                                             const float *bias, int accumulate)
{
    pdl_begin();
    typedef ms_stage<NT> St;
    __shared__ __align__(16) unsigned char ms_sm[2 * sizeof(St)];
    static_assert(8 * NT * MS_ROWS * sizeof(float) <= 2 * sizeof(St), "the partial sums fit");
    St *st = (St *)ms_sm;
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const uint32_t nsb = k / 256, ks = gridDim.y, z = blockIdx.y;
    const uint32_t sb0 = z * nsb / ks, sb1 = (z + 1) * nsb / ks;
    const uint32_t rw = blockIdx.x * MS_ROWS + warp * 16; /* the warp's first row */
    const uint8_t *wa = w + (uint64_t)min(rw + g, n - 1) * row_bytes;
    const uint8_t *wb = w + (uint64_t)min(rw + g + 8, n - 1) * row_bytes;
    const uint32_t nt_used = (m + 7) / 8; /* n-tiles past m are not multiplied */
    /* super-block sb's inputs into stage S; one commit group each, empty past the end */
    auto load_x = [&](uint32_t sb, St *S) {
        if (sb < sb1) {
            for (uint32_t i = tid; i < 8 * NT * 16; i += 128) {
                const uint32_t t = i / 16, ch = i % 16;
                const bool ok = t < m;
                cp_async16(&S->q[t][ch * 16], xa.q + (ok ? (uint64_t)t * k + sb * 256 + ch * 16 : 0),
                           ok);
            }
            for (uint32_t t = tid; t < 8 * NT; t += 128)
                cp_async4(&S->d[t], xa.d + (t < m ? (uint64_t)t * nsb + sb : 0), t < m);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    struct wsb {
        uint4 ha, hb;
        uint2 qa[4], qb[4];
    };
    auto load_w = [&](uint32_t sb, wsb &x) {
        const uint8_t *pa = wa + (uint64_t)sb * 144, *pb = wb + (uint64_t)sb * 144;
        x.ha = *(const uint4 *)pa;
        x.hb = *(const uint4 *)pb;
#pragma unroll
        for (int p = 0; p < 4; p++) {
            x.qa[p] = *(const uint2 *)(pa + 16 + 32 * p + 8 * c);
            x.qb[p] = *(const uint2 *)(pb + 16 + 32 * p + 8 * c);
        }
    };
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    wsb cur, nxt;
    load_x(sb0, st);
    load_x(sb0 + 1, st + 1);
    load_w(sb0, cur);
    for (uint32_t sb = sb0, s = 0; sb < sb1; sb++, s ^= 1) {
        if (sb + 1 < sb1)
            load_w(sb + 1, nxt);
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncthreads(); /* this super-block's inputs, every thread's copies */
        const St *S = st + s;
        int isum[NT][4], imin[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                isum[nt][i] = imin[nt][i] = 0;
#pragma unroll
        for (int p = 0; p < 4; p++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int sca, mna, scb, mnb;
                q4k_sm_int(cur.ha, 2 * p + h, &sca, &mna);
                q4k_sm_int(cur.hb, 2 * p + h, &scb, &mnb);
                const uint32_t a[4] = {(cur.qa[p].x >> (4 * h)) & 0x0F0F0F0Fu,
                                       (cur.qb[p].x >> (4 * h)) & 0x0F0F0F0Fu,
                                       (cur.qa[p].y >> (4 * h)) & 0x0F0F0F0Fu,
                                       (cur.qb[p].y >> (4 * h)) & 0x0F0F0F0Fu};
                const uint32_t ma = (uint32_t)mna * 0x01010101u, mb = (uint32_t)mnb * 0x01010101u;
                const uint32_t am[4] = {ma, mb, ma, mb};
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    if ((uint32_t)nt >= nt_used)
                        break;
                    const uint2 xv = *(const uint2 *)&S->q[nt * 8 + g][64 * p + 32 * h + 8 * c];
                    int d4[4] = {0, 0, 0, 0};
                    mma_s8(d4, a, xv.x, xv.y);
                    mma_s8(imin[nt], am, xv.x, xv.y);
                    isum[nt][0] += sca * d4[0];
                    isum[nt][1] += sca * d4[1];
                    isum[nt][2] += scb * d4[2];
                    isum[nt][3] += scb * d4[3];
                }
            }
        }
        const float da = __half2float(__ushort_as_half((unsigned short)(cur.ha.x & 0xFFFF)));
        const float dma = __half2float(__ushort_as_half((unsigned short)(cur.ha.x >> 16)));
        const float db = __half2float(__ushort_as_half((unsigned short)(cur.hb.x & 0xFFFF)));
        const float dmb = __half2float(__ushort_as_half((unsigned short)(cur.hb.x >> 16)));
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            if ((uint32_t)nt >= nt_used)
                break;
            const float2 dx = *(const float2 *)&S->d[nt * 8 + 2 * c];
            acc[nt][0] = fmaf(dx.x, da * (float)isum[nt][0] - dma * (float)imin[nt][0], acc[nt][0]);
            acc[nt][1] = fmaf(dx.y, da * (float)isum[nt][1] - dma * (float)imin[nt][1], acc[nt][1]);
            acc[nt][2] = fmaf(dx.x, db * (float)isum[nt][2] - dmb * (float)imin[nt][2], acc[nt][2]);
            acc[nt][3] = fmaf(dx.y, db * (float)isum[nt][3] - dmb * (float)imin[nt][3], acc[nt][3]);
        }
        __syncthreads(); /* every warp is done with stage s: it takes super-block sb + 2 */
        load_x(sb + 2, st + s);
        cur = nxt;
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory"); /* the empty groups past the end */
    auto store = [&](uint32_t t, uint32_t j, float v) {
        if (bias)
            v += bias[j];
        float *yp = y + (uint64_t)t * ldy + j;
        *yp = accumulate ? *yp + v : v;
    };
    if (ks == 1) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t j = rw + g + (i >= 2 ? 8 : 0), t = nt * 8 + 2 * c + (i & 1);
                if (j < n && t < m)
                    store(t, j, acc[nt][i]);
            }
        return;
    }
    /* the parts' sums [token][row] over the stages (every warp is past its
     * last read of them: the loop ends synced), then each block of the
     * cluster adds a 64 / ks row slice of all parts, in part order */
    float *red = (float *)ms_sm;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            red[(nt * 8 + 2 * c + (i & 1)) * MS_ROWS + warp * 16 + g + (i >= 2 ? 8 : 0)] = acc[nt][i];
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    const uint32_t per = MS_ROWS / ks, r_lo = z * per;
    for (uint32_t e = tid; e < per * m; e += 128) {
        const uint32_t t = e / per, r = r_lo + e % per, j = blockIdx.x * MS_ROWS + r;
        if (j >= n)
            continue;
        float v = 0.0f;
        for (uint32_t q = 0; q < ks; q++)
            v += cl.map_shared_rank(red, q)[t * MS_ROWS + r];
        store(t, j, v);
    }
    cl.sync(); /* the other blocks' reads of this one's sums are done */
}

extern "C" cudaError_t hr_cuda_gemm_q4k_small(const void *w, uint64_t row_bytes, uint32_t k,
                                              uint32_t n, const struct hr_cuda_q8_act *a,
                                              uint32_t m, float *y, uint32_t ldy,
                                              const float *bias, int accumulate, cudaStream_t s)
{
    if (!m || !n)
        return cudaSuccess;
    if (m > MS_MAX_M || k % 256 || ((uintptr_t)w | row_bytes) % 16)
        return cudaErrorInvalidValue;
    /* k cut into parts while the blocks are fewer than 192 (H100 / H200:
     * 132 SMs), as many as there are super-blocks */
    const uint32_t nbx = (n + MS_ROWS - 1) / MS_ROWS, nsb = k / 256;
    uint32_t ks = nbx >= 192 ? 1 : nbx >= 96 ? 2 : 4;
    while (ks > nsb)
        ks /= 2;
    const dim3 grid(nbx, ks), cl(1, ks, 1);
#define L_MS(NT)                                                                                  \
    hr_launch_cl(gemm_q4k_small_kernel<NT>, grid, 128, cl, 0, s, (const uint8_t *)w, row_bytes,  \
                 k, n, *a, m, y, ldy, bias, accumulate)
    if (m <= 16)
        L_MS(2);
    else if (m <= 32)
        L_MS(4);
    else
        L_MS(8);
#undef L_MS
    return cudaGetLastError();
}

extern "C" int hr_cuda_gemm_int_type(int type, enum hr_cuda_act act)
{
    return (act == HR_CUDA_ACT_Q8_0 &&
            (type == HR_CUDA_T_Q8_0 || type == HR_CUDA_T_Q4_0 || type == HR_CUDA_T_Q5_0 ||
             type == HR_CUDA_T_IQ4_NL || type == HR_CUDA_T_MXFP4)) ||
           (act == HR_CUDA_ACT_Q8_K && type == HR_CUDA_T_Q4_K);
}

extern "C" cudaError_t hr_cuda_gemm_int(int type, const void *w, uint64_t row_bytes, uint32_t k,
                                        uint32_t n, const struct hr_cuda_q8_act *a, uint32_t m,
                                        float *y, uint32_t ldy, const float *bias, int accumulate,
                                        cudaStream_t s)
{
    if (!m || !n)
        return cudaSuccess;
    if (k % 32 || (type != HR_CUDA_T_MXFP4 && ((uintptr_t)w | row_bytes) % 2) ||
        (type == HR_CUDA_T_Q4_K && (k % 256 || ((uintptr_t)w | row_bytes) % 16)))
        return cudaErrorInvalidValue;
    const dim3 grid((n + MQ_N - 1) / MQ_N, (m + MQ_M - 1) / MQ_M);
#define L_MQ(T)                                                                                   \
    hr_launch(gemm_mq_kernel<T>, grid, 128, 0, s, (const uint8_t *)w, row_bytes, k, n, *a, m, y, \
              ldy, bias, accumulate)
    switch (type) {
    case HR_CUDA_T_Q8_0: L_MQ(HR_CUDA_T_Q8_0); break;
    case HR_CUDA_T_Q4_0: L_MQ(HR_CUDA_T_Q4_0); break;
    case HR_CUDA_T_Q5_0: L_MQ(HR_CUDA_T_Q5_0); break;
    case HR_CUDA_T_IQ4_NL: L_MQ(HR_CUDA_T_IQ4_NL); break;
    case HR_CUDA_T_MXFP4: L_MQ(HR_CUDA_T_MXFP4); break;
    case HR_CUDA_T_Q4_K: L_MQ(HR_CUDA_T_Q4_K); break;
    default: return cudaErrorInvalidValue;
    }
#undef L_MQ
    return cudaGetLastError();
}

__global__ void add_bias_kernel(float *y, uint32_t m, uint32_t n, uint32_t ldy, const float *b)
{
    pdl_begin();
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)m * n)
        return;
    const uint32_t t = (uint32_t)(i / n), j = (uint32_t)(i % n);
    y[(uint64_t)t * ldy + j] += b[j];
}

extern "C" cudaError_t hr_cuda_add_bias(float *y, uint32_t m, uint32_t n, uint32_t ldy,
                                        const float *bias, cudaStream_t s)
{
    const uint64_t total = (uint64_t)m * n;
    if (!total)
        return cudaSuccess;
    hr_launch(add_bias_kernel, (unsigned)((total + 255) / 256), 256, 0, s, y, m, n, ldy, bias);
    return cudaGetLastError();
}

/* ---- the paged KV ------------------------------------------------------------ */

/* Byte offset of the row of (position, kv head) in K (kind 0) or V (kind 1). */
__device__ __forceinline__ uint64_t kv_row(const hr_cuda_kv_view &kv, int32_t tab0, int32_t p,
                                           int kind, uint32_t h)
{
    const int32_t blk = kv.tables[tab0 + p / (int32_t)kv.block_tokens];
    const uint32_t slot = (uint32_t)p % kv.block_tokens;
    const uint64_t es = kv.f16 ? 2 : 4;
    return (uint64_t)blk * kv.block_bytes +
           ((((uint64_t)kv.layer * 2 + kind) * kv.n_head_kv + h) * kv.block_tokens + slot) *
               kv.head_dim * es;
}

/* One warp per (token, head): bias, norm, RoPE; K and V heads also go into
 * the cache. Heads 0..n_head-1 are queries, then n_head_kv keys. */
/* qkv_post_kernel's work on head hh of token t (hh < n_head: query head hh;
 * else KV head hh - n_head) by one warp: the bias, the Q/K norm and RoPE
 * into hv[head_dim] (shared memory); returns the head's input row.
 * fa_decode_kernel calls it too. */
__device__ __forceinline__ float *qkv_head(const hr_cuda_qkv_args &a, uint32_t t, uint32_t hh,
                                           float *hv)
{
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t hd = a.kv.head_dim, nkv = a.kv.n_head_kv;
    const bool is_q = hh < a.n_head;
    const uint32_t h = is_q ? hh : hh - a.n_head;
    const uint32_t width = is_q ? a.n_head * hd : nkv * hd;
    float *src = (is_q ? a.q : a.k) + (uint64_t)t * width + (uint64_t)h * hd;
    const float *bias = is_q ? a.bq : a.bk;
    const float *nw = is_q ? a.q_norm : a.k_norm;
    for (uint32_t i = lane; i < hd; i += 32)
        hv[i] = bias ? src[i] + bias[h * hd + i] : src[i];
    __syncwarp();
    if (nw) {
        double sum = 0.0;
        for (uint32_t i = lane; i < hd; i += 32)
            sum += (double)(hv[i] * hv[i]);
        sum = warp_sum_d(sum);
        const float mean = (float)(sum / hd);
        const float scale = 1.0f / sqrtf(mean + a.eps);
        __syncwarp();
        for (uint32_t i = lane; i < hd; i += 32)
            hv[i] = (hv[i] * scale) * nw[i];
        __syncwarp();
    }
    const float *rc = a.rope + (uint64_t)t * a.n_rot;
    for (uint32_t i0 = 2 * lane; i0 < a.n_rot; i0 += 64) {
        const float c = rc[i0], s = rc[i0 + 1];
        const uint32_t ia = a.neox ? i0 / 2 : i0, ib = a.neox ? i0 / 2 + a.n_rot / 2 : i0 + 1;
        const float x0 = hv[ia], x1 = hv[ib];
        hv[ia] = x0 * c - x1 * s;
        hv[ib] = x0 * s + x1 * c;
    }
    __syncwarp();
    return src;
}

/* KV head h's K (hv, made by qkv_head) and V (+ bias) of token t into the
 * cache at its position, by one warp. */
__device__ __forceinline__ void qkv_store_kv(const hr_cuda_qkv_args &a, uint32_t t, uint32_t h,
                                             const float *hv)
{
    const uint32_t lane = threadIdx.x & 31, hd = a.kv.head_dim;
    const uint32_t width = a.kv.n_head_kv * hd;
    const int32_t p = a.kv.pos[t], tab0 = a.kv.tab_off[a.kv.seq_of[t]];
    const float *vs = a.v + (uint64_t)t * width + (uint64_t)h * hd;
    const float *bv = a.bv ? a.bv + h * hd : NULL;
    uint8_t *kd = a.kv.pool + kv_row(a.kv, tab0, p, 0, h);
    uint8_t *vd = a.kv.pool + kv_row(a.kv, tab0, p, 1, h);
    for (uint32_t i = lane; i < hd; i += 32) {
        const float vv = bv ? vs[i] + bv[i] : vs[i];
        if (a.kv.f16) {
            ((__half *)kd)[i] = __float2half_rn(hv[i]);
            ((__half *)vd)[i] = __float2half_rn(vv);
        } else {
            ((float *)kd)[i] = hv[i];
            ((float *)vd)[i] = vv;
        }
    }
}

__global__ void qkv_post_kernel(hr_cuda_qkv_args a)
{
    pdl_begin();
    __shared__ float hv[HR_CUDA_MAX_HEAD_DIM];
    const uint32_t t = blockIdx.x, hh = blockIdx.y, lane = threadIdx.x;
    float *src = qkv_head(a, t, hh, hv);
    if (hh < a.n_head) {
        for (uint32_t i = lane; i < a.kv.head_dim; i += 32)
            src[i] = hv[i];
        return;
    }
    qkv_store_kv(a, t, hh - a.n_head, hv);
}

extern "C" cudaError_t hr_cuda_qkv_post(const struct hr_cuda_qkv_args *a, cudaStream_t s)
{
    if (!a->n_tokens)
        return cudaSuccess;
    if (a->kv.head_dim > HR_CUDA_MAX_HEAD_DIM || a->kv.head_dim % 32 || a->n_rot > a->kv.head_dim)
        return cudaErrorInvalidValue;
    dim3 grid(a->n_tokens, a->n_head + a->kv.n_head_kv);
    hr_launch(qkv_post_kernel, grid, 32, 0, s, *a);
    return cudaGetLastError();
}


/* ---- attention ---------------------------------------------------------------
 *
 * One warp per (token, query head). Keys 0..pos in tiles of 32: the tile's
 * 32 K rows and 32 V rows are copied into shared memory as they are in the
 * cache (cp.async, 16 bytes a thread, the next two tiles' copies in
 * flight while this one is computed; the 32 row addresses come from the
 * block table at once, one lookup per lane), then lane l computes key l's score against
 * the query (in shared memory; K rows padded by 16 bytes so the 32 lanes'
 * 16-byte reads hit distinct banks), the warp takes the tile maximum,
 * and the online softmax keeps a running maximum m, sum l and output acc
 * (lane owns dims lane, lane + 32, ...): when a tile raises m, l and acc are
 * rescaled by exp(m_old - m_new). Then every lane adds p_j x V_j for the
 * tile's keys. Memory: O(32 x head_dim) per warp, never the score matrix.
 *
 * Earlier versions read the rows one value at a time (each lane its own
 * key's row, then row by row with a shared store after each load): ncu
 * showed attention taking 4.8 of the 7.8 ms of a 1B model's decode step at
 * 512 positions, waiting on those loads one after another. The version
 * before this one converted each tile to f32 in shared memory with scalar
 * stores (8-way bank conflicts) and waited for each tile's loads: shared
 * memory, not HBM, bounded it, 8B Q4_K decode at 16K positions reading the
 * cache at about 0.5 TB/s (H100, 2026-12-07). The arithmetic is the same
 * fmaf chains in the same order, so the results did not change.
 *
 * Split over keys (a.part set: decode steps). One warp streaming a whole
 * context is one warp per head on the GPU: 32 warps for an 8B model's
 * decode token, 98 us a layer at 512 positions (ncu, H100). So a token's
 * keys are cut into up to n_split runs of whole 32-key tiles (attn_split:
 * from its own position only, so a token's result does not depend on the
 * step), a warp each; each writes its run's max m, sum l and unnormalized
 * output to a.part, and attn_combine_kernel merges the runs in order, the
 * sink joining there. A token of one run (32 keys or fewer) is computed as
 * without the split, bit for bit. */
/* 16-byte vectors in a cache row of head_dim hd */
__host__ __device__ constexpr uint32_t attn_row_vecs(uint32_t hd, int f16)
{
    return hd * (f16 ? 2 : 4) / 16;
}

/* Tiles in flight: a block copies the next two while it computes one. With
 * one ahead, ncu saw the kernel at 25% of DRAM bandwidth and 11.5% achieved
 * occupancy at 16K positions (8B shape, H100): too few bytes in flight. */
#define ATTN_STAGES 3

/* attention_kernel's shared memory in floats: the warps' queries (f32),
 * then ATTN_STAGES stages of a 32-key tile: K rows of vecs + 1 vectors, V
 * rows of vecs, the cache's elements as they are (f32 caches by default:
 * the most) */
__host__ __device__ constexpr size_t attn_smem_floats(uint32_t hd, uint32_t warps = 1,
                                                      int f16 = 0)
{
    return (size_t)warps * hd +
           ATTN_STAGES * 32 * (2 * (size_t)attn_row_vecs(hd, f16) + 1) * 4;
}

/* GQA 1 (hr_cuda_attn_args.gqa; the engine's default since 2026-12-07): a
 * block per (token, KV head, run) whose warps are the group's query heads;
 * they load each K/V tile once for the group (the 8B shape's groups of 4
 * read the cache a quarter as often) and each computes its head exactly as
 * the one-warp kernel does, so the results are the same bit for bit. Up to
 * ATTN_GQA_MAX_WARPS heads a group and group x head_dim <= 1024. */
#define ATTN_GQA_MAX_WARPS 8

/* A token's keys: tiles from *a0 (lo rounded down to 32) to pos; with
 * n_split > 1, runs of *c keys (a multiple of 32), *ns of them. */
__device__ __forceinline__ void attn_split(int32_t lo, int32_t pos, uint32_t n_split, int32_t *a0,
                                           int32_t *c, int32_t *ns)
{
    *a0 = lo / 32 * 32;
    const int32_t n = pos + 1 - *a0, S = n_split > 1 ? (int32_t)n_split : 1;
    *c = max(32, ((n + S - 1) / S + 31) / 32 * 32);
    *ns = (n + *c - 1) / *c;
}

/* keys lo..pos (a sliding window: the last `window`) */
__device__ __forceinline__ int32_t attn_lo(const hr_cuda_attn_args &a, int32_t pos)
{
    return a.window && pos >= (int32_t)a.window ? pos - (int32_t)a.window + 1 : 0;
}

template <int F16, int GQA>
__global__ void attention_kernel(hr_cuda_attn_args a)
{
    pdl_begin();
    constexpr int MAXD = HR_CUDA_MAX_HEAD_DIM / 32;
    extern __shared__ float sm[];
    const uint32_t t = blockIdx.x, lane = threadIdx.x & 31, wi = threadIdx.x / 32;
    const uint32_t group = a.n_head / a.kv.n_head_kv;
    /* GQA: blockIdx.y is the KV head, warp wi its query head wi */
    const uint32_t h = GQA ? blockIdx.y * group + wi : blockIdx.y;
    const uint32_t g = GQA ? blockIdx.y : h / group;
    const uint32_t tid = GQA ? threadIdx.x : lane, nthr = GQA ? blockDim.x : 32;
    if (a.seq_fa && a.seq_fa[a.kv.seq_of[t]])
        return; /* the tiled kernel's */
    const uint32_t hd = a.kv.head_dim, nd = hd / 32;
    /* a cache row's 16-byte vectors; K rows one longer (banks, above) */
    const uint32_t vpr = attn_row_vecs(hd, F16), kvs = vpr + 1;
    float *qs = sm + (GQA ? wi * hd : 0);
    uint4 *tile = (uint4 *)(sm + (GQA ? blockDim.x / 32 : 1) * hd);
    const uint64_t q_dim = (uint64_t)a.n_head * hd;
    const float *q = a.q + (uint64_t)t * q_dim + (uint64_t)h * hd;
    for (uint32_t i = lane; i < hd; i += 32)
        qs[i] = q[i];
    const int32_t pos = a.kv.pos[t], tab0 = a.kv.tab_off[a.kv.seq_of[t]];
    const int32_t lo = attn_lo(a, pos);
    int32_t j_begin, c, ns, j_end = pos + 1;
    attn_split(lo, pos, a.part ? a.n_split : 1, &j_begin, &c, &ns);
    if ((int32_t)blockIdx.z >= ns)
        return;
    /* split into more than one run: this warp's run, merged by the combine */
    const bool split = a.part && ns > 1;
    if (split) {
        j_begin += (int32_t)blockIdx.z * c;
        j_end = min(j_end, j_begin + c);
    }
    /* The copy of the tile at j0 into stage st: each warp has all 32 keys'
     * row offsets (lane = key), a vector's comes by shuffle within the warp
     * that copies it; every thread runs the same trips (the shuffles). */
    auto copy_tile = [&](int32_t j0, int st) {
        const int32_t n_keys = max(0, min(32, j_end - j0)); /* 0: an empty group */
        unsigned long long koff = 0, voff = 0;
        if ((int32_t)lane < n_keys) {
            koff = kv_row(a.kv, tab0, j0 + (int32_t)lane, 0, g);
            voff = kv_row(a.kv, tab0, j0 + (int32_t)lane, 1, g);
        }
        uint4 *kt = tile + (size_t)st * 32 * (kvs + vpr), *vt = kt + 32 * kvs;
        const uint32_t n_vec = (uint32_t)n_keys * vpr;
        for (uint32_t v0 = 0; v0 < n_vec; v0 += nthr) {
            const uint32_t v = v0 + tid, r = (v < n_vec ? v : 0) / vpr, e = v % vpr;
            const unsigned long long ko = __shfl_sync(0xffffffffu, koff, (int)r);
            const unsigned long long vo = __shfl_sync(0xffffffffu, voff, (int)r);
            if (v < n_vec) {
                cp_async16(kt + r * kvs + e, a.kv.pool + ko + e * 16, true);
                cp_async16(vt + r * vpr + e, a.kv.pool + vo + e * 16, true);
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    /* a sink starts the softmax at m = sink, l = 1 (split: in the combine) */
    const bool sink = a.sinks && !split;
    float m = sink ? a.sinks[h] : -INFINITY, l = sink ? 1.0f : 0.0f, acc[MAXD];
#pragma unroll
    for (int i = 0; i < MAXD; i++)
        acc[i] = 0.0f;
    /* One commit group per tile, empty past the end, so that waiting for
     * all but the newest ATTN_STAGES - 1 groups always means this tile. */
    static_assert(ATTN_STAGES == 3, "the wait below counts two groups ahead");
    copy_tile(j_begin, 0);
    copy_tile(j_begin + 32, 1);
    for (int32_t j0 = j_begin, st = 0; j0 < j_end; j0 += 32, st = st + 1 == ATTN_STAGES ? 0 : st + 1) {
        const int32_t n_keys = min(32, j_end - j0);
        /* the tile two ahead, into the stage read in the last trip (synced) */
        copy_tile(j0 + 64, st == 0 ? ATTN_STAGES - 1 : st - 1);
        asm volatile("cp.async.wait_group 2;" ::: "memory");
        __syncthreads(); /* this tile (and the queries) visible to every warp */
        const uint4 *kt = tile + (size_t)st * 32 * (kvs + vpr), *vt = kt + 32 * kvs;
        float sc = -INFINITY;
        if ((int32_t)lane < n_keys && j0 + (int32_t)lane >= lo) {
            const uint4 *kr = kt + lane * kvs;
            float dot = 0.0f;
            for (uint32_t e = 0; e < vpr; e++) {
                const uint4 x = kr[e];
                if (F16) {
                    const float4 qa = *(const float4 *)(qs + 8 * e);
                    const float4 qb = *(const float4 *)(qs + 8 * e + 4);
                    const __half2 *k2 = (const __half2 *)&x;
                    float2 f = __half22float2(k2[0]);
                    dot = fmaf(qa.x, f.x, dot);
                    dot = fmaf(qa.y, f.y, dot);
                    f = __half22float2(k2[1]);
                    dot = fmaf(qa.z, f.x, dot);
                    dot = fmaf(qa.w, f.y, dot);
                    f = __half22float2(k2[2]);
                    dot = fmaf(qb.x, f.x, dot);
                    dot = fmaf(qb.y, f.y, dot);
                    f = __half22float2(k2[3]);
                    dot = fmaf(qb.z, f.x, dot);
                    dot = fmaf(qb.w, f.y, dot);
                } else {
                    const float4 q4 = *(const float4 *)(qs + 4 * e);
                    dot = fmaf(q4.x, __uint_as_float(x.x), dot);
                    dot = fmaf(q4.y, __uint_as_float(x.y), dot);
                    dot = fmaf(q4.z, __uint_as_float(x.z), dot);
                    dot = fmaf(q4.w, __uint_as_float(x.w), dot);
                }
            }
            sc = dot * a.scale;
        }
        const float m_new = fmaxf(m, warp_max(sc));
        const float corr = expf(m - m_new); /* 0 on the first tile: m = -inf */
        const float p = sc != -INFINITY ? expf(sc - m_new) : 0.0f;
        l = l * corr + warp_sum(p);
#pragma unroll
        for (int i = 0; i < MAXD; i++)
            acc[i] *= corr;
        m = m_new;
        for (int32_t jj = 0; jj < n_keys; jj++) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
            if (F16) {
                const __half *vv = (const __half *)(vt + jj * vpr) + lane;
#pragma unroll
                for (int i = 0; i < MAXD; i++)
                    if ((uint32_t)i < nd)
                        acc[i] = fmaf(pj, __half2float(vv[32 * i]), acc[i]);
            } else {
                const float *vv = (const float *)(vt + jj * vpr) + lane;
#pragma unroll
                for (int i = 0; i < MAXD; i++)
                    if ((uint32_t)i < nd)
                        acc[i] = fmaf(pj, vv[32 * i], acc[i]);
            }
        }
        __syncthreads(); /* every warp is done with this stage: the next copy may fill it */
    }
    if (split) {
        float *pp = a.part + (((uint64_t)t * a.n_head + h) * a.n_split + blockIdx.z) * (hd + 2);
        if (lane == 0)
            pp[0] = m, pp[1] = l;
#pragma unroll
        for (int i = 0; i < MAXD; i++)
            if ((uint32_t)i < nd)
                pp[2 + lane + 32 * i] = acc[i];
        return;
    }
    float *o = a.out + (uint64_t)t * q_dim + (uint64_t)h * hd;
    const float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < MAXD; i++)
        if ((uint32_t)i < nd)
            o[lane + 32 * i] = acc[i] * inv;
}

/* The runs of a split token, merged in run order: M = max(sink, m_s),
 * L = e^(sink - M) + sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L. */
/* Values lane + 32 i (i < nd) of a head's output at o made into the next
 * matmul's inputs: a block of 32 is one i. */
__device__ __forceinline__ void attn_prep_out(const hr_cuda_norm_prep &pr, uint64_t o,
                                              const float *v, uint32_t nd, uint32_t lane)
{
#pragma unroll
    for (int i = 0; i < HR_CUDA_MAX_HEAD_DIM / 32; i++) {
        if ((uint32_t)i >= nd)
            break;
        const uint64_t idx = o + lane + 32 * (uint32_t)i;
        if (pr.kind == HR_CUDA_NORM_PREP_F16) {
            pr.act[idx] = __half2float(__float2half_rn(v[i]));
            continue;
        }
        const float amax = warp_max(fabsf(v[i]));
        const float d = q80_d(amax);
        const float id = q80_id(amax);
        pr.q.q[idx] = (int8_t)q80_q(v[i], id);
        if (lane == 0)
            pr.q.d[idx / 32] = d;
    }
}

/* The merge of token t's head h's ns runs (attn_part) for its values
 * 32 w + lane, by one warp. Lane s holds run s's m and l (runs 32 + s, ...
 * in later rounds): the maximum and the weights come from loads all in
 * flight at once, not one run's after another's (the serial version took
 * half as long as the attention kernel itself at 16K positions: 42 of
 * 125 us, ncu, H100). The sums go in run order. CG: the loads from L2
 * (__ldcg), for fa_decode_kernel's last block, which merges runs other
 * blocks of its own launch wrote (the same values). */
template <bool CG>
__device__ __forceinline__ float attn_merge32(const hr_cuda_attn_args &a, uint32_t t, uint32_t h,
                                              uint32_t w, int32_t ns)
{
    auto ld = [](const float *p) { return CG ? __ldcg(p) : *p; };
    const uint32_t hd = a.kv.head_dim, lane = threadIdx.x & 31;
    const float *pp = a.part + ((uint64_t)t * a.n_head + h) * a.n_split * (hd + 2);
    float M = a.sinks ? a.sinks[h] : -INFINITY;
    float ms[HR_CUDA_ATTN_SPLITS / 32], ls[HR_CUDA_ATTN_SPLITS / 32];
#pragma unroll
    for (int r = 0; r < HR_CUDA_ATTN_SPLITS / 32; r++) {
        const int32_t sr = 32 * r + (int32_t)lane;
        ms[r] = sr < ns ? ld(pp + (uint64_t)sr * (hd + 2)) : -INFINITY;
        ls[r] = sr < ns ? ld(pp + (uint64_t)sr * (hd + 2) + 1) : 0.0f;
        M = fmaxf(M, warp_max(ms[r]));
    }
    float L = a.sinks ? expf(a.sinks[h] - M) : 0.0f, acc = 0.0f;
    pp += 2 + 32 * w + lane;
#pragma unroll
    for (int r = 0; r < HR_CUDA_ATTN_SPLITS / 32; r++) {
        const float wr = expf(ms[r] - M), lw = ls[r] * wr;
        const int32_t n_r = min(32, ns - 32 * r);
        /* the round's values first, all loads in flight (a loop that
         * loaded each just before its FMA waited on them one by one: 22 us
         * for 64 runs at 16K positions, ncu, H100) */
        float x[32];
#pragma unroll
        for (int32_t j = 0; j < 32; j++)
            x[j] = j < n_r ? ld(pp + (uint64_t)(32 * r + j) * (hd + 2)) : 0.0f;
#pragma unroll
        for (int32_t j = 0; j < 32; j++) {
            if (j >= n_r)
                break;
            L += __shfl_sync(0xffffffffu, lw, j);
            acc = fmaf(__shfl_sync(0xffffffffu, wr, j), x[j], acc);
        }
    }
    return acc * (1.0f / L);
}

/* A block per (token, head), a warp per 32 of its values (lane + 32 w):
 * with one warp per head, 32 warps for an 8B model's decode token, each
 * looping over 64 runs, the merge waited on its loads (H100). Every warp
 * computes M and the weights alike; each value's sum is the one chain in
 * run order it always was. Making Q8_K inputs for Wo, a block is instead
 * the 256 / head_dim heads of one super-block (256 threads, thread i its
 * value i, as q8k_block256 takes them): the separate quant_q8k launch it
 * replaces was 33 a decode step (57 us of 3,439 on the H200, 8B Q4_K). */
__global__ void attn_combine_kernel(hr_cuda_attn_args a)
{
    pdl_begin();
    const uint32_t hd = a.kv.head_dim, lane = threadIdx.x & 31;
    const uint32_t t = blockIdx.x, h = blockIdx.y * (blockDim.x / hd) + threadIdx.x / hd;
    const uint32_t w = threadIdx.x % hd / 32; /* the warp's 32 values of its head */
    const uint64_t ob = (uint64_t)t * a.n_head * hd + (uint64_t)h * hd + 32 * w;
    const bool prep = a.prep.kind != HR_CUDA_NORM_PREP_NONE;
    const uint64_t sb = ob / 256; /* Q8_K: the block's super-block */
    auto prep_of = [&](float v) {
        if (a.prep.kind == HR_CUDA_NORM_PREP_Q8_K)
            q8k_block256(v, a.prep.q.q + sb * 256, a.prep.q.d + sb, a.prep.q.s + sb * 16);
        else
            attn_prep_out(a.prep, ob, &v, 1, lane);
    };
    /* the output another kernel wrote whole: only its prepared inputs here */
    auto prep_written = [&]() {
        if (prep)
            prep_of(a.out[ob + lane]);
    };
    if (a.seq_fa && a.seq_fa[a.kv.seq_of[t]]) {
        prep_written(); /* the tiled kernel's */
        return;
    }
    const int32_t pos = a.kv.pos[t];
    int32_t a0, c, ns;
    attn_split(attn_lo(a, pos), pos, a.n_split, &a0, &c, &ns);
    if (ns == 1) {
        prep_written(); /* one run: the attention kernel wrote the output itself */
        return;
    }
    const float acc = attn_merge32<false>(a, t, h, w, ns);
    a.out[ob + lane] = acc;
    if (prep)
        prep_of(acc);
}

/* ---- tiled (flash) attention for prefill -------------------------------------
 *
 * The kernel above gives each (token, head) a warp that streams every key
 * of its sequence: a 512-token step at 3584 tokens of context read K and V
 * 512 times per head and took 20.7 ms a layer on the H200 (8B shape), most
 * of a prefill step. Here a block of 4 warps takes a tile of up to 64
 * consecutive query tokens of one sequence and one query head, and streams
 * K and V once per tile, 64 keys at a time, through shared memory (cp.async,
 * the next tile loading while the current one is used). Each warp keeps its
 * 16 query rows' S = Q K^T (16 x 64) and output O (16 x head_dim) in the
 * registers of mma.sync m16n8k16 fragments (f16 inputs, f32 accumulation):
 * the row max and sum of the online softmax are two shuffles within a quad
 * of lanes, P goes from S's accumulator layout straight into the A operand
 * of O += P V, and O is rescaled in registers. Q and P are rounded to f16;
 * K and V are the f16 cache's own values.
 *
 * (A first version on WMMA kept S and O in shared memory: it stored S, read
 * it back a row at a time for the softmax and loaded, rescaled and stored
 * all of O every 64 keys. On an H100, 8B shape, F16: pp512 25.2K -> 28.4K
 * tok/s, pp4096 15.9K -> 23.8K with this one.)
 *
 * A row's result depends only on its own query and keys: each S element is
 * one MMA chain over head_dim, the softmax is per row (a row's running sum
 * is kept per lane and added across its quad at the end), and O's row r
 * only takes P's row r; keys past a row's position are masked to p = 0 and
 * change nothing (corr = 1, + 0). Tiles are cut per sequence (first 64 of
 * its step's tokens, the next 64, ...), so a sequence's results do not
 * depend on the other sequences of its step. */
#define FA_BQ HR_CUDA_FA_TILE
#define FA_BK 64

__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8x8 f16 matrices from shared memory, lane l giving the address of
 * row l % 8 of matrix l / 8 (.trans: each matrix transposed). */
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
}

__device__ __forceinline__ uint32_t half2_bits(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}

template <int HD>
struct fa_layout {
    /* rows of HD + 8 halves: 8 consecutive rows start 16 bytes apart modulo
     * 128, so ldmatrix and the 32-bit reads of Q hit 32 different banks */
    static constexpr int LDH = HD + 8;
    static constexpr size_t tile = (size_t)FA_BK * LDH * 2;
    /* stage s holds K at 2s tiles and V after it; Q is staged in stage 1's
     * K before the first tile needs it */
    static constexpr size_t bytes = 4 * tile;
    static_assert(FA_BQ == FA_BK && FA_BQ == 4 * 16,
                  "a tile's Q fits one K stage, and its 4 warps take 16 rows each");
};

template <int HD>
__global__ void __launch_bounds__(128) fa_prefill_kernel(hr_cuda_attn_args a)
{
    pdl_begin();
    typedef fa_layout<HD> Ly;
    constexpr int LDH = Ly::LDH;
    extern __shared__ __align__(128) unsigned char fa_sm[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, c = lane & 3;
    /* within a sequence the last tiles have the most keys: start them first */
    const uint32_t tile = gridDim.x - 1 - blockIdx.x;
    const int32_t t0 = a.tiles[2 * tile], nq = a.tiles[2 * tile + 1];
    const uint32_t h = blockIdx.y, hk = h / (a.n_head / a.kv.n_head_kv);
    const uint64_t q_dim = (uint64_t)a.n_head * HD;
    const int32_t pos0 = a.kv.pos[t0], pos_last = pos0 + nq - 1;
    const int32_t tab0 = a.kv.tab_off[a.kv.seq_of[t0]];
    const int32_t n_kt = pos_last / FA_BK + 1;
    /* a sliding window: row r sees keys pos_r - window + 1 .. pos_r; the
     * tile's first row reaches back furthest */
    const int32_t win = (int32_t)a.window;
    const int32_t kt0 = win && pos0 >= win ? (pos0 - win + 1) / FA_BK : 0;
    /* Keys before the 32-aligned start of the first row's window are
     * masked for every row, and a windowed pool may have released their
     * blocks (table entry -1; kv-cache.h keeps from HR_KV_WINDOW_ALIGN
     * alignment, finer than FA_BK): not loaded (zero-filled). */
    const int32_t p_lo = win && pos0 >= win ? (pos0 - win + 1) / 32 * 32 : 0;

    auto load_kv = [&](int32_t kt) {
        /* stages alternate from the first tile: kt0 goes to stage 0, whose
         * K is not where Q is staged */
        __half *Ks = (__half *)(fa_sm + 2 * ((kt - kt0) & 1) * Ly::tile), *Vs = Ks + FA_BK * LDH;
        for (int i = tid; i < FA_BK * (HD / 8); i += 128) {
            const int r = i / (HD / 8), ch = i % (HD / 8);
            const int32_t p = kt * FA_BK + r;
            const bool ok = p <= pos_last && p >= p_lo;
            const uint8_t *ks = a.kv.pool, *vs = a.kv.pool;
            if (ok) {
                ks += kv_row(a.kv, tab0, p, 0, hk) + ch * 16;
                vs += kv_row(a.kv, tab0, p, 1, hk) + ch * 16;
            }
            cp_async16(Ks + r * LDH + ch * 8, ks, ok);
            cp_async16(Vs + r * LDH + ch * 8, vs, ok);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    load_kv(kt0);

    /* Q rounded to f16, then the warp's 16 rows as A fragments */
    __half *Qs = (__half *)(fa_sm + 2 * Ly::tile);
    for (int i = tid; i < FA_BQ * HD / 4; i += 128) {
        const int r = i / (HD / 4), col = (i % (HD / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < nq)
            v = *(const float4 *)(a.q + (uint64_t)(t0 + r) * q_dim + (uint64_t)h * HD + col);
        __half2 *d = (__half2 *)(Qs + r * LDH + col);
        d[0] = __floats2half2_rn(v.x, v.y);
        d[1] = __floats2half2_rn(v.z, v.w);
    }
    __syncthreads();
    const int r0 = warp * 16;
    uint32_t qa[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        const __half *qp = Qs + (r0 + g) * LDH + kk * 16 + c * 2;
        qa[kk][0] = *(const uint32_t *)qp;
        qa[kk][1] = *(const uint32_t *)(qp + 8 * LDH);
        qa[kk][2] = *(const uint32_t *)(qp + 8);
        qa[kk][3] = *(const uint32_t *)(qp + 8 * LDH + 8);
    }
    __syncthreads(); /* Q's staging is stage 1's K */

    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    /* this lane's two rows: r0 + g and r0 + g + 8. A sink starts each row's
     * softmax at m = sink (in base 2 here) and l = 1 (counted once: l is
     * summed over the row's quad at the end). */
    const float sl2 = a.scale * 1.4426950408889634f; /* exp(x s) = 2^(x s log2 e) */
    const float sink2 = a.sinks ? a.sinks[h] * 1.4426950408889634f : -INFINITY;
    float m0 = sink2, m1 = sink2;
    float l0 = a.sinks && c == 0 ? 1.0f : 0.0f, l1 = l0;
    const int32_t pr0 = r0 + g < nq ? pos0 + r0 + g : -1, pr1 = r0 + g + 8 < nq ? pos0 + r0 + g + 8 : -1;
    const int32_t lo0 = win ? pr0 - win + 1 : INT32_MIN, lo1 = win ? pr1 - win + 1 : INT32_MIN;
    const int32_t warp_last = r0 < nq ? pos0 + min(r0 + 15, nq - 1) : -1;

    for (int32_t kt = kt0; kt < n_kt; kt++) {
        if (kt + 1 < n_kt) {
            load_kv(kt + 1);
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        const __half *Ks = (const __half *)(fa_sm + 2 * ((kt - kt0) & 1) * Ly::tile);
        const __half *Vs = Ks + FA_BK * LDH;
        const int32_t j0 = kt * FA_BK;
        if (j0 <= warp_last) {
            float s[FA_BK / 8][4];
#pragma unroll
            for (int n = 0; n < FA_BK / 8; n++)
                s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
                for (int n = 0; n < FA_BK / 8; n += 2) {
                    uint32_t b[4];
                    ldmatrix_x4<false>(b, Ks + (n * 8 + (lane & 7) + ((lane >> 4) << 3)) * LDH +
                                              kk * 16 + ((lane >> 3) & 1) * 8);
                    mma_16816(s[n], qa[kk], b[0], b[1]);
                    mma_16816(s[n + 1], qa[kk], b[2], b[3]);
                }
            }
            float mx0 = m0, mx1 = m1;
#pragma unroll
            for (int n = 0; n < FA_BK / 8; n++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int32_t key = j0 + n * 8 + c * 2 + e;
                    s[n][e] = key <= pr0 && key >= lo0 ? s[n][e] * sl2 : -INFINITY;
                    s[n][2 + e] = key <= pr1 && key >= lo1 ? s[n][2 + e] * sl2 : -INFINITY;
                    mx0 = fmaxf(mx0, s[n][e]);
                    mx1 = fmaxf(mx1, s[n][2 + e]);
                }
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            /* a row with no key yet (or past nq) keeps m = -inf: p = 0, corr = 1 */
            const float base0 = mx0 == -INFINITY ? 0.0f : mx0, base1 = mx1 == -INFINITY ? 0.0f : mx1;
            const float corr0 = exp2f(m0 - base0), corr1 = exp2f(m1 - base1);
            float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
            for (int n = 0; n < FA_BK / 8; n++) {
                s[n][0] = exp2f(s[n][0] - base0);
                s[n][1] = exp2f(s[n][1] - base0);
                s[n][2] = exp2f(s[n][2] - base1);
                s[n][3] = exp2f(s[n][3] - base1);
                ps0 += s[n][0] + s[n][1];
                ps1 += s[n][2] + s[n][3];
            }
            m0 = mx0, m1 = mx1;
            l0 = l0 * corr0 + ps0;
            l1 = l1 * corr1 + ps1;
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                o[n][0] *= corr0, o[n][1] *= corr0;
                o[n][2] *= corr1, o[n][3] *= corr1;
            }
#pragma unroll
            for (int kk = 0; kk < FA_BK / 16; kk++) {
                const uint32_t pa[4] = {half2_bits(s[2 * kk][0], s[2 * kk][1]),
                                        half2_bits(s[2 * kk][2], s[2 * kk][3]),
                                        half2_bits(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                        half2_bits(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int n = 0; n < HD / 8; n += 2) {
                    uint32_t b[4];
                    ldmatrix_x4<true>(b, Vs + (kk * 16 + (lane & 15)) * LDH + n * 8 + (lane >> 4) * 8);
                    mma_16816(o[n], pa, b[0], b[1]);
                    mma_16816(o[n + 1], pa, b[2], b[3]);
                }
            }
        }
        __syncthreads(); /* this stage is loaded again two tiles on */
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float *out = a.out + (uint64_t)t0 * q_dim + (uint64_t)h * HD + c * 2;
    if (pr0 >= 0) {
        const float inv = 1.0f / l0;
#pragma unroll
        for (int n = 0; n < HD / 8; n++)
            *(float2 *)(out + (uint64_t)(r0 + g) * q_dim + n * 8) =
                make_float2(o[n][0] * inv, o[n][1] * inv);
    }
    if (pr1 >= 0) {
        const float inv = 1.0f / l1;
#pragma unroll
        for (int n = 0; n < HD / 8; n++)
            *(float2 *)(out + (uint64_t)(r0 + g + 8) * q_dim + n * 8) =
                make_float2(o[n][2] * inv, o[n][3] * inv);
    }
}

/* ---- decode attention on tensor cores -----------------------------------------
 *
 * attention_kernel computes a decode token's scores and P x V with scalar
 * f32 FMAs, a lane per key: ncu at 16K positions (8B shape, H100) showed it
 * instruction-bound (3.5 cycles between issues, 30% of DRAM bandwidth,
 * 69 us a layer; llama.cpp's decode at 16K took about 33). Here the GQA
 * group's query heads are the rows of fa_prefill_kernel's mma.sync tiles:
 * S = Q K^T (16 rows, the group's heads first and zero rows after) and
 * O += P V per 64-key tile, K and V the f16 cache's own values. Q and P go
 * in as two f16 terms each, hi (the value rounded) and lo (the rest,
 * rounded), each product accumulated in f32: about 22 bits of Q and P where
 * one f16 term keeps 11, so the results stay within ~1e-6 of the f32
 * kernel's (one term put the engine tests' F32 models 1.2-1.9e-3 from the
 * CPU, past their 1e-3) for twice the MMAs, which are not what bounds this
 * kernel (the tile's bytes are). A block per (token, KV head, run of keys) as
 * attention_kernel's split; its 4 warps take 16 keys each of every 64-key
 * tile (loaded once for the block by cp.async, FAD_STAGES - 1 tiles ahead),
 * each keeping its own online softmax, then the 4 are merged in warp order
 * through shared memory. So a token's result depends on its own position
 * only (the runs come from attn_split), not on the step. Rows past the
 * group are computed and dropped: an MMA is cheap next to its tile's bytes. */
#define FAD_STAGES 3

template <int HD>
struct fad_layout {
    static constexpr int LDH = HD + 8; /* as fa_layout: ldmatrix conflict-free */
    static constexpr size_t tile = (size_t)FA_BK * LDH * 2;
    /* FAD_STAGES stages of a K tile and a V tile, then the 16 Q rows; the
     * warps' states for the merge go over the stages at the end */
    static constexpr size_t q_off = FAD_STAGES * 2 * tile;
    static constexpr size_t bytes = q_off + 2 * 16 * LDH * 2; /* Q hi, Q lo */
    static constexpr size_t merge_floats = 4 * 16 * (HD + 2);
    static_assert(merge_floats * 4 <= q_off, "the merge fits over the stages");
};

/* Whether fa_decode_kernel runs this shape: an f16 cache, head_dim 64 or
 * 128, up to 16 query heads a KV head. */
__host__ __device__ constexpr bool fad_ok(uint32_t hd, int f16, uint32_t group)
{
    return f16 && (hd == 64 || hd == 128) && group >= 1 && group <= 16;
}

/* The merge kernel's work done by fa_decode_kernel (hr_cuda_attn_args.ctr):
 * the last of a (token, KV head)'s ns blocks to finish (a counter per
 * pair, put back to 0 by that block) merges the group's heads' runs as
 * attn_combine_kernel does (attn_merge32, a warp per 32 values); with one
 * run the block's own output stands. Then Wo's inputs: Q8_0 or f16 per 32
 * values as attn_prep_out, Q8_K a super-block a warp (q8k_warp256; the
 * group's values are whole super-blocks), the merge kernel's bits. */
template <int HD>
__device__ __forceinline__ void fad_merge(const hr_cuda_attn_args &a, uint32_t t, uint32_t hk,
                                       uint32_t group, bool split, int32_t ns)
{
    __shared__ int s_last;
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const uint64_t q_dim = (uint64_t)a.n_head * HD, o0 = t * q_dim + (uint64_t)hk * group * HD;
    const bool q8k = a.prep.kind == HR_CUDA_NORM_PREP_Q8_K;
    const bool prep32 = a.prep.kind != HR_CUDA_NORM_PREP_NONE && !q8k;
    __threadfence(); /* this block's runs or output, before the count or the reads */
    __syncthreads();
    if (split) {
        if (threadIdx.x == 0) {
            uint32_t *c = a.ctr + (uint64_t)t * a.kv.n_head_kv + hk;
            s_last = atomicAdd(c, 1u) == (uint32_t)ns - 1;
            if (s_last)
                *c = 0; /* every block of the pair has counted */
        }
        __syncthreads();
        if (!s_last)
            return;
        __threadfence();
    }
    for (uint32_t u = warp; u < group * HD / 32; u += 4) {
        const uint64_t ob = o0 + 32 * (uint64_t)u;
        float v;
        if (split) {
            v = attn_merge32<true>(a, t, hk * group + u / (HD / 32), u % (HD / 32), ns);
            a.out[ob + lane] = v;
        } else if (prep32) {
            v = a.out[ob + lane];
        } else {
            break;
        }
        if (prep32)
            attn_prep_out(a.prep, ob, &v, 1, lane);
    }
    if (q8k) {
        __threadfence();
        __syncthreads();
        for (uint32_t b = warp; b < group * HD / 256; b += 4) {
            const uint64_t ob = o0 + 256 * (uint64_t)b;
            q8k_warp256(a.out + ob, a.prep.q.q + ob, a.prep.q.d + ob / 256, a.prep.q.s + ob / 16);
        }
    }
}

/* FUSE 0: the runs to attn_part for the merge kernel; 1: merged here
 * (fad_merge; a.ctr); 2: also hr_cuda_qkv_post's work (a.qkv). */
template <int HD, int FUSE>
__global__ void __launch_bounds__(128) fa_decode_kernel(hr_cuda_attn_args a)
{
    pdl_begin();
    typedef fad_layout<HD> Ly;
    constexpr int LDH = Ly::LDH;
    extern __shared__ __align__(128) unsigned char fa_sm[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, c = lane & 3;
    const uint32_t t = blockIdx.x, hk = blockIdx.y, group = a.n_head / a.kv.n_head_kv;
    if (a.seq_fa && a.seq_fa[a.kv.seq_of[t]])
        return; /* the tiled kernel's */
    const int32_t pos = a.kv.pos[t], tab0 = a.kv.tab_off[a.kv.seq_of[t]];
    const int32_t lo = attn_lo(a, pos);
    int32_t j_begin, cnt, ns, j_end = pos + 1;
    attn_split(lo, pos, a.part ? a.n_split : 1, &j_begin, &cnt, &ns);
    if ((int32_t)blockIdx.z >= ns)
        return;
    const bool split = a.part && ns > 1;
    if (split) {
        j_begin += (int32_t)blockIdx.z * cnt;
        j_end = min(j_end, j_begin + cnt);
    }
    const int32_t n_kt = (j_end - j_begin + FA_BK - 1) / FA_BK;
    /* K and V of key p at these byte offsets from its block's start (the
     * same for every key of the head) */
    const uint64_t es = 2, k_in = ((uint64_t)a.kv.layer * 2 * a.kv.n_head_kv + hk) *
                                      a.kv.block_tokens * HD * es;
    const uint64_t v_in = k_in + (uint64_t)a.kv.n_head_kv * a.kv.block_tokens * HD * es;
    /* Tile i of the run into stage i % FAD_STAGES: thread tid copies chunk
     * tid % (HD / 8) of rows tid / (HD / 8), + 128 / (HD / 8), ...; keys
     * outside lo..j_end - 1 are zero-filled, not read (a window's released
     * blocks). One commit group per tile, empty past the end, so that
     * waiting for all but the newest FAD_STAGES - 1 means this tile. */
    auto load_kv = [&](int32_t i) {
        if (i < n_kt) {
            __half *Ks = (__half *)(fa_sm + 2 * (i % FAD_STAGES) * Ly::tile), *Vs = Ks + FA_BK * LDH;
            const int32_t j0 = j_begin + i * FA_BK, ch = tid % (HD / 8);
            for (int r = tid / (HD / 8); r < FA_BK; r += 128 / (HD / 8)) {
                const int32_t p = j0 + r;
                const bool ok = p < j_end && p >= lo;
                const uint8_t *ks = a.kv.pool, *vs = a.kv.pool;
                if (ok) {
                    const uint64_t b = (uint64_t)a.kv.tables[tab0 + p / (int32_t)a.kv.block_tokens] *
                                           a.kv.block_bytes +
                                       (uint64_t)(p % (int32_t)a.kv.block_tokens) * HD * es + ch * 16;
                    ks += b + k_in;
                    vs += b + v_in;
                }
                cp_async16(Ks + r * LDH + ch * 8, ks, ok);
                cp_async16(Vs + r * LDH + ch * 8, vs, ok);
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    static_assert(FAD_STAGES == 3, "the wait below counts two groups ahead");
    /* a.qkv.q set: hr_cuda_qkv_post's work here (qkv_head: the same bits),
     * in stage 2's bytes, free until the loop's first load: the run that
     * holds pos stores the token's K and V before its tiles load; every
     * run makes the group's queries */
    constexpr bool fq = FUSE == 2;
    float *qf = (float *)(fa_sm + 2 * 2 * Ly::tile);
    static_assert(16 * HD * 4 <= 2 * Ly::tile, "a group's queries fit in a stage");
    if (fq && (int32_t)blockIdx.z == ns - 1) {
        if (warp == 0) {
            qkv_head(a.qkv, t, a.n_head + hk, qf);
            qkv_store_kv(a.qkv, t, hk, qf);
            __threadfence();
        }
        __syncthreads();
    }
    load_kv(0);
    load_kv(1);
    if (fq) {
        for (uint32_t r = (uint32_t)warp; r < group; r += 4)
            qkv_head(a.qkv, t, hk * group + r, qf + r * HD);
        __syncthreads();
    }

    /* the group's queries as rows 0..group-1 (zeros after) of Q hi (the
     * values rounded to f16) and Q lo (the rest, rounded) */
    __half *Qs = (__half *)(fa_sm + Ly::q_off), *Ql = Qs + 16 * LDH;
    const uint64_t q_dim = (uint64_t)a.n_head * HD;
    for (int i = tid; i < 16 * HD / 4; i += 128) {
        const int r = i / (HD / 4), col = (i % (HD / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if ((uint32_t)r < group)
            v = fq ? *(const float4 *)(qf + r * HD + col)
                   : *(const float4 *)(a.q + (uint64_t)t * q_dim + ((uint64_t)hk * group + r) * HD + col);
        __half2 *d = (__half2 *)(Qs + r * LDH + col), *dl = (__half2 *)(Ql + r * LDH + col);
        d[0] = __floats2half2_rn(v.x, v.y);
        d[1] = __floats2half2_rn(v.z, v.w);
        const float2 h0 = __half22float2(d[0]), h1 = __half22float2(d[1]);
        dl[0] = __floats2half2_rn(v.x - h0.x, v.y - h0.y);
        dl[1] = __floats2half2_rn(v.z - h1.x, v.w - h1.y);
    }
    __syncthreads();
    uint32_t qa[HD / 16][4], ql[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        const __half *qp = Qs + g * LDH + kk * 16 + c * 2, *lp = qp + 16 * LDH;
        qa[kk][0] = *(const uint32_t *)qp;
        qa[kk][1] = *(const uint32_t *)(qp + 8 * LDH);
        qa[kk][2] = *(const uint32_t *)(qp + 8);
        qa[kk][3] = *(const uint32_t *)(qp + 8 * LDH + 8);
        ql[kk][0] = *(const uint32_t *)lp;
        ql[kk][1] = *(const uint32_t *)(lp + 8 * LDH);
        ql[kk][2] = *(const uint32_t *)(lp + 8);
        ql[kk][3] = *(const uint32_t *)(lp + 8 * LDH + 8);
    }

    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    /* rows g and g + 8; base 2 as fa_prefill_kernel (the sink joins in the merge) */
    const float sl2 = a.scale * 1.4426950408889634f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    for (int32_t i = 0; i < n_kt; i++) {
        load_kv(i + 2); /* into the stage read in the last trip (synced) */
        asm volatile("cp.async.wait_group 2;" ::: "memory");
        __syncthreads();
        const __half *Ks = (const __half *)(fa_sm + 2 * (i % FAD_STAGES) * Ly::tile);
        const __half *Vs = Ks + FA_BK * LDH;
        const int32_t k0 = j_begin + i * FA_BK + warp * 16; /* this warp's 16 keys */
        if (k0 < j_end) {
            float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                uint32_t b[4];
                ldmatrix_x4<false>(b, Ks + (warp * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDH +
                                          kk * 16 + ((lane >> 3) & 1) * 8);
                mma_16816(s[0], qa[kk], b[0], b[1]);
                mma_16816(s[0], ql[kk], b[0], b[1]);
                mma_16816(s[1], qa[kk], b[2], b[3]);
                mma_16816(s[1], ql[kk], b[2], b[3]);
            }
            float mx0 = m0, mx1 = m1;
#pragma unroll
            for (int n = 0; n < 2; n++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int32_t key = k0 + n * 8 + c * 2 + e;
                    const bool ok = key < j_end && key >= lo;
                    s[n][e] = ok ? s[n][e] * sl2 : -INFINITY;
                    s[n][2 + e] = ok ? s[n][2 + e] * sl2 : -INFINITY;
                    mx0 = fmaxf(mx0, s[n][e]);
                    mx1 = fmaxf(mx1, s[n][2 + e]);
                }
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float base0 = mx0 == -INFINITY ? 0.0f : mx0, base1 = mx1 == -INFINITY ? 0.0f : mx1;
            const float corr0 = exp2f(m0 - base0), corr1 = exp2f(m1 - base1);
            float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
            for (int n = 0; n < 2; n++) {
                s[n][0] = exp2f(s[n][0] - base0);
                s[n][1] = exp2f(s[n][1] - base0);
                s[n][2] = exp2f(s[n][2] - base1);
                s[n][3] = exp2f(s[n][3] - base1);
                ps0 += s[n][0] + s[n][1];
                ps1 += s[n][2] + s[n][3];
            }
            m0 = mx0, m1 = mx1;
            l0 = l0 * corr0 + ps0;
            l1 = l1 * corr1 + ps1;
            /* P hi and lo as A fragments (the accumulator's layout, as in
             * fa_prefill_kernel) */
            uint32_t pa[4], pl[4];
#pragma unroll
            for (int f = 0; f < 4; f++) {
                const float x = s[f >> 1][2 * (f & 1)], y = s[f >> 1][2 * (f & 1) + 1];
                const __half2 hi = __floats2half2_rn(x, y);
                const float2 hf = __half22float2(hi);
                const __half2 lo = __floats2half2_rn(x - hf.x, y - hf.y);
                pa[f] = *(const uint32_t *)&hi;
                pl[f] = *(const uint32_t *)&lo;
            }
#pragma unroll
            for (int n = 0; n < HD / 8; n += 2) {
                o[n][0] *= corr0, o[n][1] *= corr0, o[n][2] *= corr1, o[n][3] *= corr1;
                o[n + 1][0] *= corr0, o[n + 1][1] *= corr0, o[n + 1][2] *= corr1, o[n + 1][3] *= corr1;
                uint32_t b[4];
                ldmatrix_x4<true>(b, Vs + (warp * 16 + (lane & 15)) * LDH + n * 8 + (lane >> 4) * 8);
                mma_16816(o[n], pa, b[0], b[1]);
                mma_16816(o[n], pl, b[0], b[1]);
                mma_16816(o[n + 1], pa, b[2], b[3]);
                mma_16816(o[n + 1], pl, b[2], b[3]);
            }
        }
        __syncthreads(); /* every warp is done with this stage: the next copy may fill it */
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory"); /* the empty groups past the end */
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);

    /* The warps' states (m, l, O) of the group's rows, then merged in warp
     * order: M = max m_w (and the sink, unsplit), O = sum O_w 2^(m_w - M). */
    float *ws = (float *)fa_sm;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const uint32_t r = (uint32_t)g + 8 * half;
        if (r >= group)
            continue;
        float *st = ws + ((size_t)warp * 16 + r) * (HD + 2);
        if (c == 0)
            st[0] = half ? m1 : m0, st[1] = half ? l1 : l0;
#pragma unroll
        for (int n = 0; n < HD / 8; n++)
            *(float2 *)(st + 2 + n * 8 + c * 2) = make_float2(o[n][2 * half], o[n][2 * half + 1]);
    }
    __syncthreads();
    const float LN2 = 0.6931471805599453f;
    for (uint32_t e = tid; e < group * HD; e += 128) {
        const uint32_t r = e / HD, d = e % HD, h = hk * group + r;
        const float *st = ws + (size_t)r * (HD + 2);
        const size_t wstride = (size_t)16 * (HD + 2);
        const bool sink = a.sinks && !split;
        const float sink2 = sink ? a.sinks[h] * 1.4426950408889634f : -INFINITY;
        float M = sink2;
#pragma unroll
        for (int w = 0; w < 4; w++)
            M = fmaxf(M, st[w * wstride]);
        const float base = M == -INFINITY ? 0.0f : M;
        float L = sink ? exp2f(sink2 - base) : 0.0f, O = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const float x = exp2f(st[w * wstride] - base);
            L = fmaf(st[w * wstride + 1], x, L);
            O = fmaf(st[w * wstride + 2 + d], x, O);
        }
        if (split) {
            float *pp = a.part + (((uint64_t)t * a.n_head + h) * a.n_split + blockIdx.z) * (HD + 2);
            if (d == 0)
                pp[0] = base * LN2, pp[1] = L; /* the merge's units: natural log */
            pp[2 + d] = O;
        } else {
            a.out[(uint64_t)t * q_dim + (uint64_t)h * HD + d] = O / L;
        }
    }
    if constexpr (FUSE >= 1)
        fad_merge<HD>(a, t, hk, group, split, ns);
}

extern "C" int hr_cuda_attention_tiled_ok(uint32_t head_dim, int kv_f16)
{
    /* HR_CUDA_ATTN=warp: one warp per (token, head) for every token (the A/B switch) */
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("HR_CUDA_ATTN");
        off = e && !strcmp(e, "warp");
    }
    return !off && kv_f16 && (head_dim == 64 || head_dim == 128);
}

extern "C" int hr_cuda_attention_merged_ok(const struct hr_cuda_attn_args *a)
{
    const uint32_t hd = a->kv.head_dim, group = a->n_head / a->kv.n_head_kv;
    return a->part && !a->n_tiles && a->gqa == 2 && a->n_head % a->kv.n_head_kv == 0 &&
           fad_ok(hd, a->kv.f16, group) &&
           (a->prep.kind != HR_CUDA_NORM_PREP_Q8_K || group * hd % 256 == 0);
}

extern "C" int hr_cuda_attention_qkv_ok(const struct hr_cuda_attn_args *a)
{
    const uint32_t hd = a->kv.head_dim, group = a->n_head / a->kv.n_head_kv;
    return !a->n_tiles && a->gqa == 2 && a->n_head % a->kv.n_head_kv == 0 &&
           fad_ok(hd, a->kv.f16, group) && a->qkv.n_tokens == a->n_tokens &&
           a->qkv.n_head == a->n_head && a->qkv.kv.head_dim == hd &&
           a->qkv.kv.n_head_kv == a->kv.n_head_kv && a->qkv.n_rot <= hd && a->qkv.n_rot % 2 == 0;
}

extern "C" cudaError_t hr_cuda_attention(const struct hr_cuda_attn_args *a, cudaStream_t s)
{
    if (!a->n_tokens)
        return cudaSuccess;
    if (a->kv.head_dim > HR_CUDA_MAX_HEAD_DIM || a->kv.head_dim % 32 ||
        a->n_head % a->kv.n_head_kv)
        return cudaErrorInvalidValue;
    if (a->n_tiles) {
        if (!a->tiles || !hr_cuda_attention_tiled_ok(a->kv.head_dim, a->kv.f16))
            return cudaErrorInvalidValue;
        dim3 fg(a->n_tiles, a->n_head);
        if (a->kv.head_dim == 64)
            hr_launch(fa_prefill_kernel<64>, fg, 128, fa_layout<64>::bytes, s, *a);
        else
            hr_launch(fa_prefill_kernel<128>, fg, 128, fa_layout<128>::bytes, s, *a);
        cudaError_t ce = cudaGetLastError();
        if (ce != cudaSuccess)
            return ce;
    }
    if (a->part && (a->n_split < 1 || a->n_split > HR_CUDA_ATTN_SPLITS))
        return cudaErrorInvalidValue;
    if ((a->ctr && !hr_cuda_attention_merged_ok(a)) ||
        (a->qkv.q && (!a->ctr || !hr_cuda_attention_qkv_ok(a))))
        return cudaErrorInvalidValue;
    const int fuse = a->ctr ? (a->qkv.q ? 2 : 1) : 0;
    /* the merge makes them, a head (Q8_K: a super-block of heads) a block */
    const bool q8k = a->prep.kind == HR_CUDA_NORM_PREP_Q8_K;
    if (a->prep.kind != HR_CUDA_NORM_PREP_NONE &&
        (!a->part || (q8k && (a->kv.head_dim > 256 || 256 % a->kv.head_dim ||
                              a->n_head * a->kv.head_dim % 256))))
        return cudaErrorInvalidValue;
    const uint32_t group = a->n_head / a->kv.n_head_kv;
    if (a->gqa == 2 && fad_ok(a->kv.head_dim, a->kv.f16, group)) {
        dim3 grid(a->n_tokens, a->kv.n_head_kv, a->part ? a->n_split : 1);
        const size_t sm = a->kv.head_dim == 64 ? fad_layout<64>::bytes : fad_layout<128>::bytes;
        if (a->kv.head_dim == 64)
            hr_launch(fuse == 2 ? fa_decode_kernel<64, 2> : fuse ? fa_decode_kernel<64, 1>
                                                               : fa_decode_kernel<64, 0>,
                      grid, 128, sm, s, *a);
        else
            hr_launch(fuse == 2 ? fa_decode_kernel<128, 2> : fuse ? fa_decode_kernel<128, 1>
                                                                : fa_decode_kernel<128, 0>,
                      grid, 128, sm, s, *a);
    } else if (a->gqa && group > 1 && group <= ATTN_GQA_MAX_WARPS &&
        group * a->kv.head_dim <= 1024) {
        dim3 grid(a->n_tokens, a->kv.n_head_kv, a->part ? a->n_split : 1);
        const size_t smem = attn_smem_floats(a->kv.head_dim, group, a->kv.f16) * sizeof(float);
        if (a->kv.f16)
            hr_launch(attention_kernel<1, 1>, grid, 32 * group, smem, s, *a);
        else
            hr_launch(attention_kernel<0, 1>, grid, 32 * group, smem, s, *a);
    } else {
        dim3 grid(a->n_tokens, a->n_head, a->part ? a->n_split : 1);
        const size_t smem = attn_smem_floats(a->kv.head_dim, 1, a->kv.f16) * sizeof(float);
        if (a->kv.f16)
            hr_launch(attention_kernel<1, 0>, grid, 32, smem, s, *a);
        else
            hr_launch(attention_kernel<0, 0>, grid, 32, smem, s, *a);
    }
    if (a->part && !a->ctr) {
        const cudaError_t ce = cudaGetLastError();
        if (ce != cudaSuccess)
            return ce;
        const uint32_t g = q8k ? 256 / a->kv.head_dim : 1; /* heads a block */
        hr_launch(attn_combine_kernel, dim3(a->n_tokens, a->n_head / g), g * a->kv.head_dim, 0, s,
                  *a);
    }
    return cudaGetLastError();
}

/* ---- SwiGLU ------------------------------------------------------------------ */

__global__ void swiglu_kernel(float *gate, const float *up, uint64_t n)
{
    pdl_begin();
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

extern "C" cudaError_t hr_cuda_swiglu(float *gate, const float *up, uint64_t n, cudaStream_t s)
{
    if (!n)
        return cudaSuccess;
    hr_launch(swiglu_kernel, (unsigned)((n + 255) / 256), 256, 0, s, gate, up, n);
    return cudaGetLastError();
}

/* The same values, and the down matmul's inputs made from them (a warp is
 * one Q8_0 block: n % 32 == 0, rows of a multiple of 32), as
 * hr_cuda_act_round (F16) or hr_cuda_quant_act (Q8_0) would make them. */
__global__ void swiglu_prep_kernel(float *gate, const float *up, uint64_t n, hr_cuda_norm_prep pr)
{
    pdl_begin();
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (pr.kind == HR_CUDA_NORM_PREP_Q8_K) { /* a block of 256 is a super-block: n % 256 == 0 */
        const float g = gate[i];
        const float v = g / (1.0f + expf(-g)) * up[i];
        gate[i] = v;
        q8k_block256(v, pr.q.q + (i - threadIdx.x), pr.q.d + i / 256, pr.q.s + (i - threadIdx.x) / 16);
        return;
    }
    if (i >= n)
        return; /* whole warps */
    const float g = gate[i];
    const float v = g / (1.0f + expf(-g)) * up[i];
    gate[i] = v;
    if (pr.kind == HR_CUDA_NORM_PREP_F16) {
        pr.act[i] = __half2float(__float2half_rn(v));
        return;
    }
    const float amax = warp_max(fabsf(v));
    const float d = q80_d(amax);
    const float id = q80_id(amax);
    pr.q.q[i] = (int8_t)q80_q(v, id);
    if ((threadIdx.x & 31) == 0)
        pr.q.d[i / 32] = d;
}

extern "C" cudaError_t hr_cuda_swiglu_prep(float *gate, const float *up, uint64_t n,
                                           const hr_cuda_norm_prep *pr, cudaStream_t s)
{
    if (!n)
        return cudaSuccess;
    if (!norm_prep_ok(pr, n))
        return cudaErrorInvalidValue;
    hr_launch(swiglu_prep_kernel, (unsigned)((n + 255) / 256), 256, 0, s, gate, up, n, *pr);
    return cudaGetLastError();
}

/* ---- mixture of experts ------------------------------------------------------ */

/* One warp per token: the router's logits to k experts and their weights
 * (engine.c's moe_route, the same expressions; the sums in double), and
 * the shared expert's gate. Shared memory: probs and scores of n_expert. */
__global__ void __launch_bounds__(32) moe_route_kernel(hr_cuda_moe_route_args a)
{
    pdl_begin();
    extern __shared__ float sm_route[];
    float *probs = sm_route, *score = sm_route + a.n_expert;
    const uint32_t t = blockIdx.x, lane = threadIdx.x, NX = a.n_expert, K = a.k;
    const float *lg = a.logits + (uint64_t)t * NX;
    float mx = -INFINITY;
    for (uint32_t i = lane; i < NX; i += 32) {
        const float v = lg[i] + (a.logit_b ? a.logit_b[i] : 0.0f);
        probs[i] = v;
        mx = fmaxf(mx, v);
    }
    mx = warp_max(mx);
    if (a.gating == 1) { /* softmax over all experts */
        double sum = 0.0;
        for (uint32_t i = lane; i < NX; i += 32) {
            probs[i] = expf(probs[i] - mx);
            sum += (double)probs[i];
        }
        for (int o = 16; o; o >>= 1)
            sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
        const float inv = (float)(1.0 / sum);
        for (uint32_t i = lane; i < NX; i += 32)
            probs[i] *= inv;
    } else if (a.gating == 2) { /* sigmoid */
        for (uint32_t i = lane; i < NX; i += 32)
            probs[i] = 1.0f / (1.0f + expf(-probs[i]));
    }
    for (uint32_t i = lane; i < NX; i += 32)
        score[i] = probs[i] + (a.sel_b ? a.sel_b[i] : 0.0f);
    __syncwarp();
    int32_t *sel = a.sel + (uint64_t)t * K;
    float *w = a.w + (uint64_t)t * K;
    for (uint32_t j = 0; j < K; j++) {
        /* the best score not yet taken; ties to the lower index */
        float bv = -INFINITY;
        int bi = -1;
        for (uint32_t i = lane; i < NX; i += 32)
            if (score[i] != -INFINITY && (bi < 0 || score[i] > bv))
                bv = score[i], bi = (int)i;
        for (int o = 16; o; o >>= 1) {
            const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
            const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
            if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi)))
                bv = ov, bi = oi;
        }
        if (lane == 0) {
            sel[j] = bi;
            w[j] = probs[bi];
            score[bi] = -INFINITY;
        }
        __syncwarp();
    }
    if (lane == 0) /* a softmax over the k (gpt-oss), renormalising, the scale */
        hr_moe_finish_weights(w, K, a.gating == 3, a.norm_w, a.w_scale);
    if (a.shexp_gate) { /* llama.cpp's sigmoid as silu(g) / g */
        const float *xn = a.xn + (uint64_t)t * a.n_embd;
        float g = 0.0f;
        for (uint32_t i = lane; i < a.n_embd; i += 32)
            g += a.shexp_gate[i] * xn[i];
        for (int o = 16; o; o >>= 1)
            g += __shfl_xor_sync(0xFFFFFFFFu, g, o);
        if (lane == 0)
            a.shg[t] = g / (1.0f + expf(-g)) / g;
    }
}

/* One block, a thread per expert: the (token, slot) pairs grouped by
 * expert in pair order (a counting sort; each thread scans the pairs). */
__global__ void moe_group_kernel(const int32_t *sel, uint32_t tk, uint32_t k, uint32_t nx,
                                 int32_t *row, int32_t *tok, int32_t *rx, int32_t *off)
{
    pdl_begin();
    __shared__ uint32_t cnt[HR_CUDA_MOE_MAX_EXPERTS];
    const uint32_t x = threadIdx.x;
    uint32_t c = 0;
    if (x < nx)
        for (uint32_t i = 0; i < tk; i++)
            c += sel[i] == (int32_t)x;
    cnt[x] = c;
    __syncthreads();
    if (x >= nx)
        return;
    uint32_t r = 0;
    for (uint32_t y = 0; y < x; y++)
        r += cnt[y];
    for (uint32_t i = 0; i < tk; i++)
        if (sel[i] == (int32_t)x) {
            row[i] = (int32_t)r;
            tok[r] = (int32_t)(i / k);
            rx[r] = (int32_t)x;
            r++;
        }
    off[x] = (int32_t)r;
}

__global__ void moe_gather_kernel(const float *xn, const int32_t *tok, uint32_t n, float *out)
{
    pdl_begin();
    const float *src = xn + (uint64_t)tok[blockIdx.x] * n;
    float *dst = out + (uint64_t)blockIdx.x * n;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        dst[i] = src[i];
}

__global__ void moe_act_kernel(const float *gu, const int32_t *rx, uint32_t rows, uint32_t fx,
                               const float *gb, const float *ub, int oai, float *h)
{
    pdl_begin();
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)rows * fx)
        return;
    const uint64_t r = i / fx, c = i % fx, ex = (uint64_t)rx[r];
    float g = gu[r * 2 * fx + c], u = gu[r * 2 * fx + fx + c];
    if (!oai) {
        h[i] = g / (1.0f + expf(-g)) * u;
        return;
    }
    if (gb)
        g += gb[ex * fx + c];
    if (ub)
        u += ub[ex * fx + c];
    const float alpha = 1.702f, limit = 7.0f;
    const float xg = g < limit ? g : limit;
    const float yu = u < -limit ? -limit : u > limit ? limit : u;
    h[i] = xg / (1.f + expf(alpha * (-xg))) * (yu + 1.f);
}

__global__ void moe_combine_kernel(hr_cuda_moe_combine_args a)
{
    pdl_begin();
    const uint32_t t = blockIdx.x, K = a.k, E = a.n_embd;
    const int32_t *row = a.row + (uint64_t)t * K, *sel = a.sel + (uint64_t)t * K;
    const float *w = a.w + (uint64_t)t * K;
    const float sg = a.shg ? a.shg[t] : 1.0f;
    for (uint32_t i = threadIdx.x; i < E; i += blockDim.x) {
        float o = 0.0f;
        for (uint32_t j = 0; j < K; j++) {
            float v = a.y[(uint64_t)row[j] * E + i];
            if (a.down_b)
                v += a.down_b[(uint64_t)sel[j] * E + i];
            o = j ? o + v * w[j] : v * w[j];
        }
        if (a.shx)
            o += a.shx[(uint64_t)t * E + i] * sg;
        a.x[(uint64_t)t * E + i] += o;
    }
}

extern "C" cudaError_t hr_cuda_moe_route(const struct hr_cuda_moe_route_args *a, cudaStream_t s)
{
    if (!a->n_tokens)
        return cudaSuccess;
    hr_launch(moe_route_kernel, a->n_tokens, 32, 2 * a->n_expert * sizeof(float), s, *a);
    return cudaGetLastError();
}

extern "C" cudaError_t hr_cuda_moe_group(const int32_t *sel, uint32_t n_tokens, uint32_t k,
                                         uint32_t n_expert, int32_t *row, int32_t *tok,
                                         int32_t *rx, int32_t *off, cudaStream_t s)
{
    if (n_expert > HR_CUDA_MOE_MAX_EXPERTS)
        return cudaErrorInvalidValue;
    hr_launch(moe_group_kernel, 1, (n_expert + 31) / 32 * 32, 0, s, sel, n_tokens * k, k,
              n_expert, row, tok, rx, off);
    return cudaGetLastError();
}

extern "C" cudaError_t hr_cuda_moe_gather(const float *xn, const int32_t *tok, uint32_t rows,
                                          uint32_t n, float *out, cudaStream_t s)
{
    if (!rows)
        return cudaSuccess;
    hr_launch(moe_gather_kernel, rows, 256, 0, s, xn, tok, n, out);
    return cudaGetLastError();
}

extern "C" cudaError_t hr_cuda_moe_act(const float *gu, const int32_t *rx, uint32_t rows,
                                       uint32_t n_ff_exp, const float *gate_b, const float *up_b,
                                       int oai, float *h, cudaStream_t s)
{
    const uint64_t n = (uint64_t)rows * n_ff_exp;
    if (!n)
        return cudaSuccess;
    hr_launch(moe_act_kernel, (unsigned)((n + 255) / 256), 256, 0, s, gu, rx, rows, n_ff_exp,
              gate_b, up_b, oai, h);
    return cudaGetLastError();
}

extern "C" cudaError_t hr_cuda_moe_combine(const struct hr_cuda_moe_combine_args *a,
                                           cudaStream_t s)
{
    if (!a->n_tokens)
        return cudaSuccess;
    hr_launch(moe_combine_kernel, a->n_tokens, 256, 0, s, *a);
    return cudaGetLastError();
}

/* ---- Gated DeltaNet (engine/deltanet.h, step by step) -------------------------
 *
 * The CPU engine's deltanet_mixer after its projections: the gates, the
 * causal conv per sequence over its state slot, the L2 norms of q and k, the
 * one-token recurrence token after token, and the gated RMSNorm. The same
 * expressions in the same order; only float sums are ordered differently
 * (a warp's tree instead of the CPU's eight partial sums). */

/* A state slot's layer part: the conv's floats, then the matrices. */
__device__ __forceinline__ float *dn_state(const hr_cuda_dn_args &a, uint32_t seq)
{
    return (float *)(a.state + (uint64_t)a.seq_slot[seq] * a.slot_bytes) + a.layer_floats;
}

/* One thread per (token, v head): beta <- sigmoid, g <- softplus(alpha +
 * dt_bias) a; with `ba` (qwen3next) both read from its per-k-head order. */
__global__ void dn_gates_kernel(hr_cuda_dn_args a, float *beta, float *g, const float *ba,
                                const float *dt_bias, const float *an)
{
    pdl_begin();
    const uint32_t HV = a.n_v_heads, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.n_tokens * HV)
        return;
    const uint32_t t = i / HV, h = i % HV;
    float b, al;
    if (ba) {
        const uint32_t r = HV / a.n_k_heads;
        const float *row = ba + (uint64_t)t * 2 * HV;
        b = row[(h / r) * 2 * r + h % r];
        al = row[(h / r) * 2 * r + r + h % r];
    } else {
        b = beta[i];
        al = g[i];
    }
    beta[i] = 1.0f / (1.0f + expf(-b));
    const float x = al + dt_bias[h];
    const float sp = x > 20.0f ? x : logf(1.0f + expf(x));
    g[i] = sp * an[h];
}

/* One thread per (sequence, channel): the causal conv and SiLU over the
 * sequence's tokens in order, the channel's K - 1 carried inputs from the
 * state slot and back (hr_deltanet_conv). */
__global__ void dn_conv_kernel(hr_cuda_dn_args a, const float *in, const float *w, float *out)
{
    pdl_begin();
    const uint32_t c = blockIdx.x * blockDim.x + threadIdx.x, seq = blockIdx.y;
    const uint32_t CD = a.conv_dim, K = a.conv_kernel, keep = K - 1;
    if (c >= CD)
        return;
    float *st = dn_state(a, seq) + (uint64_t)c * keep;
    const float *wc = w + (uint64_t)c * K;
    float win[HR_CUDA_DN_MAX_CONV];
    for (uint32_t i = 0; i < keep; i++)
        win[i] = st[i];
    const uint32_t t0 = (uint32_t)a.seq_tok[2 * seq], n = (uint32_t)a.seq_tok[2 * seq + 1];
    for (uint32_t t = t0; t < t0 + n; t++) {
        win[keep] = in[(uint64_t)t * CD + c];
        float s = 0.0f;
        for (uint32_t i = 0; i < K; i++)
            s += win[i] * wc[i];
        out[(uint64_t)t * CD + c] = s / (1.0f + expf(-s));
        for (uint32_t i = 0; i < keep; i++)
            win[i] = win[i + 1];
    }
    for (uint32_t i = 0; i < keep; i++)
        st[i] = win[i];
}

/* One warp per (token, q or k head): x / max(||x||, eps), the sum of
 * squares in double (hr_deltanet_l2_norm). */
__global__ void dn_l2_kernel(hr_cuda_dn_args a, float *conv, float eps)
{
    pdl_begin();
    const uint32_t warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    const uint32_t nh = 2 * a.n_k_heads, d = a.head_dim;
    if (warp >= a.n_tokens * nh)
        return;
    float *x = conv + (uint64_t)(warp / nh) * a.conv_dim + (uint64_t)(warp % nh) * d;
    double sum = 0.0;
    for (uint32_t i = lane; i < d; i += 32)
        sum += (double)(x[i] * x[i]);
    sum = warp_sum_d(sum);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (uint32_t i = lane; i < d; i += 32)
        x[i] *= scale;
}

/* The recurrence (hr_deltanet_recur). A state row j of a v head, S[j][.],
 * changes only through its own values, k, q, v[j], g and beta, so rows are
 * independent: each warp owns DN_ROWS rows of one (sequence, v head), the
 * row's d values spread over the lanes (C = d / 32 each, in registers), and
 * walks the sequence's tokens in order. Per token and row: the decay, the
 * dot with k (a warp sum), the update, the dot with q (a warp sum). */
#define DN_ROWS 4
#define DN_WARPS 4

/* Each row's warp sum, the rows' butterflies interleaved (independent
 * shuffles in flight together). */
__device__ __forceinline__ void warp_sum_rows(float (&v)[DN_ROWS])
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int r = 0; r < DN_ROWS; r++)
            v[r] += __shfl_xor_sync(0xffffffffu, v[r], off);
}
template <int C>
__global__ void __launch_bounds__(DN_WARPS * 32)
dn_recur_kernel(hr_cuda_dn_args a, const float *conv, const float *g, const float *beta, float *o)
{
    pdl_begin();
    const uint32_t d = C * 32, HV = a.n_v_heads, HK = a.n_k_heads, lane = threadIdx.x & 31;
    const uint32_t groups = d / (DN_ROWS * DN_WARPS); /* row groups of a head */
    const uint32_t h = blockIdx.x / groups, seq = blockIdx.y;
    const uint32_t j0 = (blockIdx.x % groups) * DN_ROWS * DN_WARPS + (threadIdx.x / 32) * DN_ROWS;
    const uint32_t hk = a.k_blocked ? h / (HV / HK) : h % HK;
    const uint32_t CD = a.conv_dim, VD = a.value_dim;
    float *S = dn_state(a, seq) + a.conv_floats + (uint64_t)h * d * d + (uint64_t)j0 * d;
    float sr[DN_ROWS][C];
#pragma unroll
    for (int r = 0; r < DN_ROWS; r++)
#pragma unroll
        for (int c = 0; c < C; c++)
            sr[r][c] = S[(uint64_t)r * d + lane + 32 * c];
    const float scale = 1.0f / sqrtf((float)d);
    const uint32_t t0 = (uint32_t)a.seq_tok[2 * seq], n = (uint32_t)a.seq_tok[2 * seq + 1];
    for (uint32_t t = t0; t < t0 + n; t++) {
        const float *row = conv + (uint64_t)t * CD;
        float q[C], k[C];
#pragma unroll
        for (int c = 0; c < C; c++) {
            q[c] = row[hk * d + lane + 32 * c];
            k[c] = row[a.key_dim + hk * d + lane + 32 * c];
        }
        const float decay = expf(g[(uint64_t)t * HV + h]), b = beta[(uint64_t)t * HV + h];
        float dk[DN_ROWS];
#pragma unroll
        for (int r = 0; r < DN_ROWS; r++) {
            float p = 0.0f;
#pragma unroll
            for (int c = 0; c < C; c++) {
                sr[r][c] *= decay;
                p += sr[r][c] * k[c];
            }
            dk[r] = p;
        }
        warp_sum_rows(dk);
        float oq[DN_ROWS];
#pragma unroll
        for (int r = 0; r < DN_ROWS; r++) {
            const float delta = (row[2 * a.key_dim + h * d + j0 + r] - dk[r]) * b;
            float p = 0.0f;
#pragma unroll
            for (int c = 0; c < C; c++) {
                sr[r][c] += k[c] * delta;
                p += sr[r][c] * q[c];
            }
            oq[r] = p;
        }
        warp_sum_rows(oq);
        if (lane < DN_ROWS) {
            float v = oq[0];
#pragma unroll
            for (int r = 1; r < DN_ROWS; r++)
                if (lane == (uint32_t)r)
                    v = oq[r];
            o[(uint64_t)t * VD + h * d + j0 + lane] = v * scale;
        }
    }
#pragma unroll
    for (int r = 0; r < DN_ROWS; r++)
#pragma unroll
        for (int c = 0; c < C; c++)
            S[(uint64_t)r * d + lane + 32 * c] = sr[r][c];
}

/* One warp per (token, v head): o <- RMSNorm(o) norm_w, times SiLU(z). */
__global__ void dn_out_norm_kernel(hr_cuda_dn_args a, float *o, const float *z, const float *w,
                                   float eps)
{
    pdl_begin();
    const uint32_t warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    const uint32_t d = a.head_dim;
    if (warp >= a.n_tokens * a.n_v_heads)
        return;
    const uint64_t at = (uint64_t)(warp / a.n_v_heads) * a.value_dim + (uint64_t)(warp % a.n_v_heads) * d;
    float *x = o + at;
    const float *zz = z + at;
    double sum = 0.0;
    for (uint32_t i = lane; i < d; i += 32)
        sum += (double)(x[i] * x[i]);
    sum = warp_sum_d(sum);
    const float scale = 1.0f / sqrtf((float)(sum / d) + eps);
    for (uint32_t i = lane; i < d; i += 32) {
        const float zi = zz[i];
        x[i] = ((x[i] * scale) * w[i]) * (zi / (1.0f + expf(-zi)));
    }
}

extern "C" cudaError_t hr_cuda_dn_mix(const struct hr_cuda_dn_args *a, const struct hr_cuda_dn_layer *L,
                                      cudaStream_t s)
{
    const uint32_t T = a->n_tokens, HV = a->n_v_heads, d = a->head_dim;
    cudaError_t ce;
    if (!T)
        return cudaSuccess;
    if ((ce = hr_launch(dn_gates_kernel, (T * HV + 127) / 128, 128, 0, s, *a, L->beta, L->g, L->ba,
                        L->dt_bias, L->a)) != cudaSuccess ||
        (ce = hr_launch(dn_conv_kernel, dim3((a->conv_dim + 127) / 128, a->n_seqs), 128, 0, s, *a,
                        (const float *)L->qkv, L->conv_w, L->conv)) != cudaSuccess ||
        (ce = hr_launch(dn_l2_kernel, (T * 2 * a->n_k_heads + 7) / 8, 256, 0, s, *a, L->conv,
                        L->eps)) != cudaSuccess)
        return ce;
    const dim3 grid(HV * (d / (DN_ROWS * DN_WARPS)), a->n_seqs);
    /* the instances, by head_dim / 32 (the sizes hr_cuda_dn_head_ok takes) */
    void (*const recur[9])(hr_cuda_dn_args, const float *, const float *, const float *,
                           float *) = {NULL,
                                       dn_recur_kernel<1>,
                                       dn_recur_kernel<2>,
                                       dn_recur_kernel<3>,
                                       dn_recur_kernel<4>,
                                       NULL,
                                       dn_recur_kernel<6>,
                                       NULL,
                                       dn_recur_kernel<8>};
    if (d % 32 || d / 32 > 8 || !recur[d / 32])
        return cudaErrorInvalidValue;
    ce = hr_launch(recur[d / 32], grid, DN_WARPS * 32, 0, s, *a, (const float *)L->conv,
                   (const float *)L->g, (const float *)L->beta, L->o);
    if (ce != cudaSuccess)
        return ce;
    if ((ce = hr_launch(dn_out_norm_kernel, (T * HV + 7) / 8, 256, 0, s, *a, L->o,
                        (const float *)L->z, L->norm_w, L->eps)) != cudaSuccess)
        return ce;
    return cudaGetLastError();
}

extern "C" int hr_cuda_dn_head_ok(uint32_t head_dim)
{
    const uint32_t c = head_dim / 32;
    return head_dim % 32 == 0 && (c == 1 || c == 2 || c == 3 || c == 4 || c == 6 || c == 8);
}

/* ---- gated attention (qwen35) ---------------------------------------------- */

/* qg = per head its query then its gate: split into q and gate. */
__global__ void gate_split_kernel(const float *qg, float *q, float *gate, uint32_t n_tokens,
                                  uint32_t q_dim, uint32_t hd)
{
    pdl_begin();
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)n_tokens * q_dim)
        return;
    const uint64_t t = i / q_dim, c = i % q_dim, h = c / hd, j = c % hd;
    const float *src = qg + t * 2 * q_dim + h * 2 * hd;
    q[i] = src[j];
    gate[i] = src[hd + j];
}

/* x *= sigmoid(gate) */
__global__ void gate_mul_kernel(float *x, const float *gate, uint64_t n)
{
    pdl_begin();
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= 1.0f / (1.0f + expf(-gate[i]));
}

extern "C" cudaError_t hr_cuda_gate_split(const float *qg, float *q, float *gate, uint32_t n_tokens,
                                          uint32_t n_head, uint32_t head_dim, cudaStream_t s)
{
    const uint64_t n = (uint64_t)n_tokens * n_head * head_dim;
    if (!n)
        return cudaSuccess;
    return hr_launch(gate_split_kernel, (unsigned)((n + 255) / 256), 256, 0, s, qg, q, gate,
                     n_tokens, n_head * head_dim, head_dim);
}

extern "C" cudaError_t hr_cuda_gate_mul(float *x, const float *gate, uint64_t n, cudaStream_t s)
{
    if (!n)
        return cudaSuccess;
    return hr_launch(gate_mul_kernel, (unsigned)((n + 255) / 256), 256, 0, s, x, gate, n);
}

/* ---- loading --------------------------------------------------------------- */

/* With lazy loading (CUDA's default since 12.2) a kernel's code is put in
 * device memory at its first launch: inside a step. Asking for each
 * kernel's attributes loads it now, so the engine's init takes that memory
 * and no step does. */
template <int T>
static cudaError_t preload_type(void)
{
    cudaFuncAttributes a;
    cudaError_t ce;
    if ((ce = cudaFuncGetAttributes(&a, dequant_rows_kernel<T>)) != cudaSuccess ||
        (ce = cudaFuncGetAttributes(&a, gemv_kernel<T>)) != cudaSuccess ||
        (ce = cudaFuncGetAttributes(&a, gemv1_kernel<T>)) != cudaSuccess ||
        (ce = cudaFuncGetAttributes(&a, gemm_kernel<T>)) != cudaSuccess ||
        (ce = cudaFuncGetAttributes(&a, dequant_half_kernel<T, 0>)) != cudaSuccess ||
        (ce = cudaFuncGetAttributes(&a, dequant_half_kernel<T, 1>)) != cudaSuccess)
        return ce;
    return cudaSuccess;
}

extern "C" cudaError_t hr_cuda_kernels_preload(void)
{
    cudaFuncAttributes a;
    cudaError_t ce;
    int dev = 0, sms = 0;
    if ((ce = cudaGetDevice(&dev)) != cudaSuccess ||
        (ce = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
        return ce;
    int pipe_per_sm[2] = {0, 0};
    if ((ce = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
             &pipe_per_sm[pipe_q4k::id], gemv_pipe_kernel<pipe_q4k, false, false>, 128, 0)) != cudaSuccess ||
        (ce = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
             &pipe_per_sm[pipe_q80::id], gemv_pipe_kernel<pipe_q80, false, false>, 128, 0)) != cudaSuccess)
        return ce;
    for (int i = 0; i < 2; i++)
        pipe_blocks[i] = (unsigned)(sms * (pipe_per_sm[i] > 0 ? pipe_per_sm[i] : 1));
    const unsigned early = pdl_mode() == 2 ? 0xFFFFFFFFu : pdl_mode() == 3 ? (unsigned)sms : 0;
    if ((ce = cudaMemcpyToSymbol(pdl_early_blocks, &early, sizeof(early))) != cudaSuccess)
        return ce;
    const int prewait = hr_env_on("HR_CUDA_PREWAIT");
    if ((ce = cudaMemcpyToSymbol(pdl_prewait, &prewait, sizeof(prewait))) != cudaSuccess)
        return ce;
    if ((ce = preload_type<HR_CUDA_T_F32>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_F16>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_BF16>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q8_0>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q4_0>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q4_K>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q5_K>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q6_K>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q4_1>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q5_0>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q5_1>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_IQ4_NL>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_MXFP4>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q2_K>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_Q3_K>()) != cudaSuccess ||
        (ce = preload_type<HR_CUDA_T_IQ4_XS>()) != cudaSuccess)
        return ce;
    const void *k[] = {(const void *)gemv_q4k_kernel, (const void *)gemv_q4k_q8_kernel<0, 1>, (const void *)gemv_q4k_q8_kernel<0, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemv_q4k_q8_kernel<1, 1>, (const void *)gemv_q4k_q8_kernel<1, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemv_q4k_q8_rows_kernel<2, 1>, (const void *)gemv_q4k_q8_rows_kernel<2, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemv_q4k_q8_rows_kernel<4, 1>, (const void *)gemv_q4k_q8_rows_kernel<4, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemv_q4k_q8_pair_kernel<2, 1>, (const void *)gemv_q4k_q8_pair_kernel<2, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemv_pipe_kernel<pipe_q4k, false, false>,
                       (const void *)gemv_pipe_kernel<pipe_q4k, true, false>,
                       (const void *)gemv_pipe_kernel<pipe_q4k, true, true>,
                       (const void *)gemv_pipe_kernel<pipe_q80, false, false>,
                       (const void *)gemv_pipe_kernel<pipe_q80, true, false>,
                       (const void *)gemv_pipe_kernel<pipe_q80, true, true>,
                       (const void *)gemv_q80_q8_kernel, (const void *)gemv_q80s_q8_kernel<0, 1>, (const void *)gemv_q80s_q8_kernel<0, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemv_q80s_q8_kernel<1, 1>, (const void *)gemv_q80s_q8_kernel<1, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemv_q80s_rows_kernel<2, 1>,
                       (const void *)gemv_q80s_rows_kernel<2, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemv_q80s_rows_kernel<4, 1>,
                       (const void *)gemv_q80s_rows_kernel<4, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)quant_q80_kernel,
                       (const void *)gemv_raw16_kernel<0, 4, 0>,
                       (const void *)gemv_raw16_kernel<1, 4, 0>,
                       (const void *)gemv_raw16_kernel<0, 8, 0>,
                       (const void *)gemv_raw16_kernel<1, 8, 0>,
                       (const void *)gemv_raw16_kernel<0, 8, 1>,
                       (const void *)gemv_raw16_kernel<1, 8, 1>,
                       (const void *)gemv_raw16_row_kernel<0, 1>, (const void *)gemv_raw16_row_kernel<0, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemv_raw16_row_kernel<1, 1>, (const void *)gemv_raw16_row_kernel<1, HR_CUDA_GEMV_MAX_ROWS>,
                       (const void *)gemm_mq_kernel<HR_CUDA_T_Q8_0>,
                       (const void *)gemm_mq_kernel<HR_CUDA_T_Q4_0>,
                       (const void *)gemm_mq_kernel<HR_CUDA_T_Q5_0>,
                       (const void *)gemm_mq_kernel<HR_CUDA_T_IQ4_NL>,
                       (const void *)gemm_mq_kernel<HR_CUDA_T_MXFP4>,
                       (const void *)gemm_mq_kernel<HR_CUDA_T_Q4_K>,
                       (const void *)gemm_q4k_small_kernel<2>,
                       (const void *)gemm_q4k_small_kernel<4>,
                       (const void *)gemm_q4k_small_kernel<8>,
                       (const void *)quant_q8k_kernel,
                       (const void *)rope_table_kernel, (const void *)rms_norm_kernel,
                       (const void *)act_round_kernel, (const void *)add_bias_kernel,
                       (const void *)qkv_post_kernel, (const void *)attention_kernel<0, 0>,
                       (const void *)attention_kernel<1, 0>, (const void *)attention_kernel<0, 1>,
                       (const void *)attention_kernel<1, 1>, (const void *)attn_combine_kernel,
                       (const void *)swiglu_kernel,
                       (const void *)moe_route_kernel, (const void *)moe_group_kernel,
                       (const void *)moe_gather_kernel, (const void *)moe_act_kernel,
                       (const void *)moe_combine_kernel, (const void *)dn_gates_kernel,
                       (const void *)dn_conv_kernel, (const void *)dn_l2_kernel,
                       (const void *)dn_recur_kernel<1>, (const void *)dn_recur_kernel<2>,
                       (const void *)dn_recur_kernel<3>, (const void *)dn_recur_kernel<4>,
                       (const void *)dn_recur_kernel<6>, (const void *)dn_recur_kernel<8>,
                       (const void *)dn_out_norm_kernel, (const void *)gate_split_kernel,
                       (const void *)gate_mul_kernel};
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
        if ((ce = cudaFuncGetAttributes(&a, k[i])) != cudaSuccess)
            return ce;
    if ((ce = cudaFuncSetAttribute(fa_prefill_kernel<64>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)fa_layout<64>::bytes)) != cudaSuccess ||
        (ce = cudaFuncSetAttribute(fa_prefill_kernel<128>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)fa_layout<128>::bytes)) != cudaSuccess ||
        (ce = cudaFuncGetAttributes(&a, fa_prefill_kernel<64>)) != cudaSuccess ||
        (ce = cudaFuncGetAttributes(&a, fa_prefill_kernel<128>)) != cudaSuccess)
        return ce;
    /* the decode attention, plain and with its fusions (FUSE 1, 2) */
    void (*const fad[2][3])(hr_cuda_attn_args) = {
        {fa_decode_kernel<64, 0>, fa_decode_kernel<64, 1>, fa_decode_kernel<64, 2>},
        {fa_decode_kernel<128, 0>, fa_decode_kernel<128, 1>, fa_decode_kernel<128, 2>}};
    for (int d = 0; d < 2; d++)
        for (int f = 0; f < 3; f++)
            if ((ce = cudaFuncSetAttribute(fad[d][f], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)(d ? fad_layout<128>::bytes
                                                   : fad_layout<64>::bytes))) != cudaSuccess ||
                (ce = cudaFuncGetAttributes(&a, fad[d][f])) != cudaSuccess)
                return ce;
    /* Attention's two stages of tiles take up to 130 KiB of shared memory
     * (head_dim 256, an f32 cache), past the 48 KiB a launch gets unasked. */
    const int smem = (int)(attn_smem_floats(HR_CUDA_MAX_HEAD_DIM) * sizeof(float));
    /* the GQA blocks' queries: group x head_dim <= 1024 floats */
    const int smem_g = (int)((attn_smem_floats(HR_CUDA_MAX_HEAD_DIM, 0) + 1024) * sizeof(float));
    if ((ce = cudaFuncSetAttribute(attention_kernel<0, 0>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) !=
            cudaSuccess ||
        (ce = cudaFuncSetAttribute(attention_kernel<1, 0>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) !=
            cudaSuccess ||
        (ce = cudaFuncSetAttribute(attention_kernel<0, 1>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem_g)) !=
            cudaSuccess ||
        (ce = cudaFuncSetAttribute(attention_kernel<1, 1>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem_g)) !=
            cudaSuccess)
        return ce;
    return cudaSuccess;
}
