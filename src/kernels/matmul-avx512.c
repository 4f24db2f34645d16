/*
 * matmul-avx512.c - AVX-512 (F, BW, VL, DQ, VNNI; BF16 when present) matmul
 * kernels, tuned on Zen 4 (2 cores here; numbers from bench-matmul).
 *
 * Two shapes of work, chosen by the number of tokens m (gemm_min_m below):
 *
 * Q2_K, Q3_K and IQ4_XS follow the other K-quants' plan with their own
 * panel and tile (gemm_k2k3) and decode kernel (matmul-k2k3-x86.h).
 *
 * GEMV (decode, m below 2-16): memory-bound. Each thread streams its slice
 * of the weight rows once per pass of up to 4 tokens, the k loop innermost,
 * every token's accumulators in registers (matmul-gemv-x86.h, and
 * gemv_float / gemv_bf16 here). With batch invariance on (the default, see
 * matmul.h) the quantized types use the GEMM-order kernels, which fold each
 * block's integer sum before scaling exactly as the GEMM below does, so a
 * token gets the same bits at any m; Q8_0 then runs at ~25-30 GB/s from L2
 * (the free-running kernel: ~40), K-quants at ~20-30, F16 at 36. One thread
 * pulls 17-26 GB/s from DRAM, so decode is memory-bound except for Q8_0's
 * invariant kernel on one thread. Software prefetch helped only the
 * GEMM-order kernels (whose two passes leave the memory idle in between).
 * The model packs Q8_0 matrices at load (hr_matmul_pack), so Q8_0 normally
 * takes none of these paths: gemm_q8_0_packed runs the GEMM's tiles on the
 * packed panels at every m, decode included (~100 GB/s per thread from L2,
 * so decode is bound by DRAM alone). The row-major Q8_0 kernels remain for
 * matrices that are not packed (HR_KERNELS_PACK=0, rows over 32768).
 *
 * GEMM (prefill): compute-bound. The weights are packed, 32 rows x a k-chunk
 * at a time, into a small panel (L1) where every 64-byte vector holds the
 * same 4 consecutive k of 16 different rows (transpose16x8 / transpose16);
 * the micro-kernel broadcasts 4 activation bytes of one token against it, so
 * one vpdpbusd advances 16 output rows x 4 k, and the per-block scales are
 * applied once per 8 vpdpbusd instead of once per vpdpbusd. A tile of I
 * tokens x 32 rows lives in registers (I x 2 block sums + I x 2 float
 * accumulators, 24-28 of the 32 zmm), so each panel vector feeds I
 * instructions and each activation broadcast feeds 2. A thread takes one
 * panel at a time and walks its k-chunks, each over all m tokens, so the 32
 * outputs x m tokens it accumulates in Y stay in L2 between chunks, and
 * every weight byte is packed once. Per Q8_0 block and 6-token tile: 96
 * vpdpbusd + 12 x (convert, multiply, fma). On Zen 4 vpdpbusd, vmulps and
 * vfmadd share the two 512-bit pipes and the convert does not, so the
 * ceiling is ~80% of the 469 GOPS/core vpdpbusd peak; measured ~300-335
 * GOPS per core (Q8_0), ~280 (Q4_K, whose sub-block scales cost a vpmulld
 * and a vpaddd per 8 vpdpbusd). The float types use the same panels with
 * vfmadd231ps (F32; F16 widened at packing: ~90 GFLOP/s per core, 75-80% of
 * the 116 GFLOP/s fma peak) or vdpbf16ps (BF16, two products per lane).
 *
 * With batch invariance on (the default) the float types skip both shapes:
 * float_mm below sums every output in one order at any m, at GEMV speed for
 * decode and ~95 GFLOP/s per core (F32/F16; BF16 ~190) for prefill, above
 * the packed float GEMM, which is kept for HR_KERNELS_INVARIANT=0. Its F16
 * inputs come widened once in the act scratch (hr_mm_a32): converting them
 * in the tile cost 10 conversions per 24 FMAs; on a 2-core Xeon (178
 * GFLOP/s FMA peak a thread), m = 512 on the Qwen2.5-0.5B shapes, one
 * thread, two alternating rounds: ffn_up 84.7/90.1 -> 112.8/122.4 GFLOP/s,
 * attn_q 86.5/85.0 -> 110.9/125.8, ffn_down 91.2/100.8 -> 105.5/107.7.
 *
 * Numerics are those of matmul-ref.c: integer block sums exact (the
 * unsigned-weight offset is removed by starting each accumulator at `comp`,
 * see matmul-impl.h), then f32(d_w) * d_a rounded to f32, then accumulation
 * in f32. Every kernel is tested against the reference in
 * tests/unit/test-kernels.c and against ggml-cpu in test-quant-oracle.c.
 *
 * Every function carries a target attribute, so a portable build (no
 * -march=native) still contains these kernels; matmul.c runs them only when
 * CPUID reports the features.
 */
#include "kernels/matmul-impl.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")))
#define T512BF                                                                                     \
    __attribute__((target(                                                                         \
        "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c,bmi2")))
#define INLINE static inline __attribute__((always_inline))
/* Register tiles are arrays indexed by small constant loops; they stay in
 * registers only when those loops are fully unrolled. */
#define UNROLL _Pragma("GCC unroll 16")

/* Below this many tokens the GEMV kernels run (in passes of up to 4 tokens,
 * each pass re-reading the weights); from it on, the packed GEMM. Measured
 * with bench-matmul on Zen 4 (GEMV throughput per token is flat in m, the
 * GEMM's grows as packing is amortized): the K-quants (costlier to unpack)
 * switch at 16 tokens, the float types at 12, Q8_0/Q4_0 at 6. With batch
 * invariance on, Q8_0/Q4_0 use the GEMM from 2 tokens: their invariant
 * decode kernel does one token per pass, and at 2-5 tokens the GEMM is as
 * fast. */
static size_t gemm_min_m(enum hr_ggml_type t)
{
#ifdef HR_GEMM_MIN_M
    (void)t;
    return HR_GEMM_MIN_M; /* for experiments */
#else
    switch (t) {
    case HR_GGML_Q8_0:
    case HR_GGML_Q4_0:
    case HR_GGML_Q4_1:
    case HR_GGML_Q5_0:
    case HR_GGML_Q5_1:
    case HR_GGML_IQ4_NL:
    case HR_GGML_MXFP4: return hr_kernels_batch_invariant() ? 2 : 6;
    case HR_GGML_Q4_K:
    case HR_GGML_Q5_K:
    case HR_GGML_Q6_K:
    case HR_GGML_Q2_K:
    case HR_GGML_Q3_K:
    case HR_GGML_IQ4_XS: return 16;
    default: return 12;
    }
#endif
}

static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ======================================================================== */
/* activation conversion                                                     */
/* ======================================================================== */

T512 static float hmax512(__m512 v) { return _mm512_reduce_max_ps(v); }

/* hr_quantize_row_q8_0_act for one row, into the act arrays. For NaN-free
 * input the result is the reference's: the maximum does not depend on the
 * reduction order, vcvtps2dq rounds half to even like vroundps + cvt, and
 * vpmovsdb saturates like the two packs. */
T512 static void prep_q8_0_row(const float *x, size_t nb, int8_t *qs, float *d, int32_t *comp,
                               int32_t *comp4, int32_t *comp5)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (size_t b = 0; b < nb; b++) {
        __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
        __m512 am = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
        const float amax = hmax512(am);
        const float db = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        d[b] = hr_f16_to_f32(hr_f32_to_f16(db));
        __m512 mul = _mm512_set1_ps(id);
        __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, mul));
        __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, mul));
        __m128i q0 = _mm512_cvtsepi32_epi8(i0), q1 = _mm512_cvtsepi32_epi8(i1);
        _mm_storeu_si128((__m128i *)(qs + 32 * b), q0);
        _mm_storeu_si128((__m128i *)(qs + 32 * b + 16), q1);
        /* sum of the stored (saturated) quants */
        __m512i s = _mm512_add_epi32(_mm512_cvtepi8_epi32(q0), _mm512_cvtepi8_epi32(q1));
        const int32_t sum = _mm512_reduce_add_epi32(s);
        comp[b] = -128 * sum;
        comp4[b] = -8 * sum;
        comp5[b] = -16 * sum;
    }
}

/* hr_quantize_row_q8_K for one row, with ggml's nearest_int done the same way
 * (add 1.5 * 2^23, keep the mantissa), so even NaN maps identically. */
T512 static void prep_q8_K_row(const float *x, size_t nb, int8_t *qs, float *d, int16_t *bsum,
                               int16_t *sum32, int32_t *comp16)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (size_t b = 0; b < nb; b++) {
        const float *xb = x + 256 * b;
        __m512 am = _mm512_setzero_ps();
        for (int j = 0; j < 16; j++)
            am = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 16 * j)), am);
        const float amax = hmax512(am);
        int16_t bs[16];
        if (amax == 0.0f) {
            d[b] = 0;
            memset(qs + 256 * b, 0, 256);
            memset(bs, 0, sizeof(bs));
        } else {
            /* the first element with |x| == amax gives the sign, as in the scalar loop */
            const __m512 vmax = _mm512_set1_ps(amax);
            float max = amax;
            for (int j = 0; j < 16; j++) {
                __mmask16 hit = _mm512_cmp_ps_mask(
                    _mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 16 * j)), vmax, _CMP_EQ_OQ);
                if (hit) {
                    max = xb[16 * j + __builtin_ctz(hit)];
                    break;
                }
            }
            const float iscale = -127.f / max;
            const __m512 vis = _mm512_set1_ps(iscale), magic = _mm512_set1_ps(12582912.f);
            const __m512i mant = _mm512_set1_epi32(0x007fffff), bias = _mm512_set1_epi32(0x00400000),
                          lim = _mm512_set1_epi32(127);
            for (int j = 0; j < 16; j++) {
                __m512 v = _mm512_add_ps(_mm512_mul_ps(vis, _mm512_loadu_ps(xb + 16 * j)), magic);
                __m512i q = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(v), mant), bias);
                q = _mm512_min_epi32(q, lim);
                __m128i q8 = _mm512_cvtepi32_epi8(q); /* the low byte, as the int8 store */
                _mm_storeu_si128((__m128i *)(qs + 256 * b + 16 * j), q8);
                bs[j] = (int16_t)_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q8));
            }
            d[b] = 1 / iscale;
        }
        memcpy(bsum + 16 * b, bs, sizeof(bs));
        for (int j = 0; j < 16; j++)
            comp16[16 * b + (size_t)j] = -32 * bs[j];
        for (int j = 0; j < 8; j++)
            sum32[8 * b + (size_t)j] = (int16_t)(bs[2 * j] + bs[2 * j + 1]);
    }
}

T512 static void prepare_avx512(const struct hr_mm_layout *l, const float *x, size_t i0, size_t i1,
                                void *act)
{
    const size_t k = l->k;
    uint8_t *base = act;
    const enum hr_ggml_type vt = hr_matmul_vec_dot_type(l->wtype);
    for (size_t i = i0; i < i1; i++) {
        const float *xi = x + i * k;
        if (vt == HR_GGML_Q8_0) {
            int8_t *qs = (int8_t *)(base + l->qs_off + i * l->qs_stride);
            prep_q8_0_row(xi, l->nb, qs, (float *)(base + l->d_off) + i * l->nb,
                          (int32_t *)(base + l->comp_off) + i * l->nb,
                          (int32_t *)(base + l->comp4_off) + i * l->nb,
                          (int32_t *)(base + l->comp5_off) + i * l->nb);
            memset(qs + k, 0, l->qs_stride - k);
        } else if (vt == HR_GGML_Q8_1) {
            /* Q4_1 / Q5_1 only: the plain C conversion (O(k) per row) */
            hr_mm_prepare_generic(l, x, i, i + 1, act);
        } else if (vt == HR_GGML_Q8_K) {
            int8_t *qs = (int8_t *)(base + l->qs_off + i * l->qs_stride);
            prep_q8_K_row(xi, l->nb, qs, (float *)(base + l->d_off) + i * l->nb,
                          (int16_t *)(base + l->bsum_off) + i * l->nb * 16,
                          (int16_t *)(base + l->sum32_off) + i * l->nb * 8,
                          (int32_t *)(base + l->comp16_off) + i * l->nb * 16);
            memset(qs + k, 0, l->qs_stride - k);
        } else if (vt == HR_GGML_BF16) {
            /* hr_f32_to_bf16: round to nearest even, NaN -> quiet NaN */
            uint16_t *row = (uint16_t *)(base + l->qs_off + i * l->qs_stride);
            const size_t n_pad = l->qs_stride / 2;
            for (size_t j = 0; j < n_pad; j += 16) {
                __mmask16 mk = j + 16 <= k ? 0xffff : j < k ? (__mmask16)((1u << (k - j)) - 1) : 0;
                __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(mk, xi + j));
                __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
                __m512i r = _mm512_srli_epi32(
                    _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
                __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
                __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
                __m512i qn = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
                r = _mm512_mask_mov_epi32(r, nan, qn);
                _mm256_storeu_si256((__m256i *)(row + j), _mm512_cvtepi32_epi16(r));
            }
        } else if (vt == HR_GGML_F16) {
            /* vcvtps2ph rounds to nearest even, as hr_f32_to_f16 */
            uint16_t *row = (uint16_t *)(base + l->qs_off + i * l->qs_stride);
            float *a32 = (float *)(base + l->a32_off + i * l->a32_stride);
            const size_t n_pad = l->qs_stride / 2;
            for (size_t j = 0; j < n_pad; j += 16) {
                __mmask16 mk = j + 16 <= k ? 0xffff : j < k ? (__mmask16)((1u << (k - j)) - 1) : 0;
                const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mk, xi + j),
                                                  _MM_FROUND_TO_NEAREST_INT);
                _mm256_storeu_si256((__m256i *)(row + j), h);
                _mm512_storeu_ps(a32 + j, _mm512_cvtph_ps(h)); /* exact */
            }
        } else {
            float *row = (float *)(base + l->qs_off + i * l->qs_stride);
            const size_t n_pad = l->qs_stride / 4;
            for (size_t j = 0; j < n_pad; j += 16) {
                __mmask16 mk = j + 16 <= k ? 0xffff : j < k ? (__mmask16)((1u << (k - j)) - 1) : 0;
                _mm512_storeu_ps(row + j, _mm512_maskz_loadu_ps(mk, xi + j));
            }
        }
    }
}

/* ======================================================================== */
/* GEMV (small m)                                                           */
/* ======================================================================== */

#define HR_GEMV_TARGET T512
#define HR_GEMV_VNNI 1
#include "kernels/matmul-gemv-x86.h"
#include "kernels/matmul-k2k3-x86.h"

/* F16/F32/BF16 rows stream well with the hardware prefetcher alone; software
 * prefetch measured slower (see HR_PREFETCH). */
#ifndef PF_FLOAT
#define PF_FLOAT 0
#endif

/* 16 weights of a float type as f32 (masked). */
INLINE T512 __m512 load_w16(enum hr_ggml_type wt, const uint8_t *wr, size_t j, __mmask16 mk)
{
    if (wt == HR_GGML_F32)
        return _mm512_maskz_loadu_ps(mk, wr + 4 * j);
    const __m256i h = _mm256_maskz_loadu_epi16(mk, wr + 2 * j);
    if (wt == HR_GGML_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 activations as f32 (f16 converted, bf16 widened by a shift). */
INLINE T512 __m512 load_a16(enum hr_ggml_type wt, const void *a, size_t j)
{
    if (wt == HR_GGML_F32)
        return _mm512_loadu_ps((const float *)a + j);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)a + j));
    if (wt == HR_GGML_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/*
 * F32 / F16 rows (and BF16 without AVX512_BF16): 64 values per step, four
 * accumulators per token (the fma latency is 4 cycles), a masked 16-wide
 * tail. F16 activations stay f16 (half the bytes re-read per weight row; a
 * decode pass at k = 8192 would otherwise push an f32 row out of L1) and are
 * widened with vcvtph2ps like the weights.
 */
INLINE T512 void gemv_float(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                            const void *act, size_t i0, const int M, float *y, size_t ldy)
{
    const size_t k = l->k;
    const enum hr_ggml_type wt = l->wtype;
    const size_t esz = wt == HR_GGML_F32 ? 4 : 2;
    const void *a[GEMV_MAX_M];
    UNROLL
    for (int i = 0; i < M; i++)
        a[i] = wt == HR_GGML_F32 ? (const void *)hr_mm_f32(l, act, i0 + i)
                                 : (const void *)hr_mm_u16(l, act, i0 + i);
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *wr = (const uint8_t *)w + r * k * esz;
        __m512 acc[GEMV_MAX_M][4];
        UNROLL
        for (int i = 0; i < M; i++)
            acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm512_setzero_ps();
        size_t j = 0;
        for (; j + 64 <= k; j += 64) {
            HR_PREFETCH(wr + j * esz, PF_FLOAT, 0);
            HR_PREFETCH(wr + j * esz, PF_FLOAT, 64);
            if (esz == 4) {
                HR_PREFETCH(wr + j * esz, PF_FLOAT, 128);
                HR_PREFETCH(wr + j * esz, PF_FLOAT, 192);
            }
            __m512 wv[4];
            UNROLL
            for (int u = 0; u < 4; u++)
                wv[u] = load_w16(wt, wr, j + 16 * (size_t)u, 0xffff);
            UNROLL
            for (int i = 0; i < M; i++) {
                UNROLL
                for (int u = 0; u < 4; u++)
                    acc[i][u] = _mm512_fmadd_ps(wv[u], load_a16(wt, a[i], j + 16 * (size_t)u), acc[i][u]);
            }
        }
        for (; j < k; j += 16) {
            const __mmask16 mk = j + 16 <= k ? 0xffff : (__mmask16)((1u << (k - j)) - 1);
            const __m512 wv = load_w16(wt, wr, j, mk);
            UNROLL
            for (int i = 0; i < M; i++) /* activation padding is zero */
                acc[i][0] = _mm512_fmadd_ps(wv, load_a16(wt, a[i], j), acc[i][0]);
        }
        UNROLL
        for (int i = 0; i < M; i++)
            y[(i0 + i) * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(
                _mm512_add_ps(acc[i][0], acc[i][1]), _mm512_add_ps(acc[i][2], acc[i][3])));
    }
}

/*
 * BF16 rows with AVX512_BF16: vdpbf16ps multiplies 32 bf16 pairs of weights
 * and activations (products exact in f32) into 16 f32 lanes, so a step of 64
 * values is 2 loads and 2 instructions per token; two accumulators.
 */
INLINE T512BF void gemv_bf16(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                             const void *act, size_t i0, const int M, float *y, size_t ldy)
{
    const size_t k = l->k;
    const uint16_t *a[GEMV_MAX_M];
    UNROLL
    for (int i = 0; i < M; i++)
        a[i] = hr_mm_u16(l, act, i0 + i);
    for (size_t r = r0; r < r1; r++) {
        const uint16_t *wr = (const uint16_t *)w + r * k;
        __m512 acc[GEMV_MAX_M][2];
        UNROLL
        for (int i = 0; i < M; i++)
            acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        size_t j = 0;
        for (; j + 64 <= k; j += 64) {
            HR_PREFETCH(wr + j, PF_FLOAT, 0);
            HR_PREFETCH(wr + j, PF_FLOAT, 64);
            const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wr + j);
            const __m512bh w1 = (__m512bh)_mm512_loadu_si512(wr + j + 32);
            UNROLL
            for (int i = 0; i < M; i++) {
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w0, (__m512bh)_mm512_loadu_si512(a[i] + j));
                acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w1, (__m512bh)_mm512_loadu_si512(a[i] + j + 32));
            }
        }
        for (; j < k; j += 32) {
            const __mmask32 mk = j + 32 <= k ? 0xffffffffu : (__mmask32)((1u << (k - j)) - 1);
            const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mk, wr + j);
            UNROLL
            for (int i = 0; i < M; i++) /* activation padding is zero */
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], wv, (__m512bh)_mm512_loadu_si512(a[i] + j));
        }
        UNROLL
        for (int i = 0; i < M; i++)
            y[(i0 + i) * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
    }
}

T512 static void gemv_avx512(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                             const void *act, float *y, size_t ldy)
{
    const size_t m = l->m;
    switch (l->wtype) {
#define B32(T)                                                                                     \
    case T: {                                                                                      \
        const enum hr_ggml_type tt = T;                                                            \
        if (hr_kernels_batch_invariant()) {                                                        \
            for (size_t i = 0; i < m; i++)                                                         \
                gemv1_q80_rows8(l, w, r0, r1, act, i, y, ldy, tt);                                 \
        } else {                                                                                   \
            GEMV_DISPATCH(C_B32)                                                                   \
        }                                                                                          \
        break;                                                                                     \
    }
#define C_B32(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, tt)
        B32(HR_GGML_Q8_0)
        B32(HR_GGML_Q4_0)
        B32(HR_GGML_Q4_1)
        B32(HR_GGML_Q5_0)
        B32(HR_GGML_Q5_1)
        B32(HR_GGML_IQ4_NL)
        B32(HR_GGML_MXFP4)
#undef C_B32
#undef B32
    case HR_GGML_Q4_K:
    case HR_GGML_Q5_K:
    case HR_GGML_Q6_K:
#define C(M) gemv_k_rows8(l, w, r0, r1, act, i0, M, y, ldy)
        GEMV_DISPATCH(C)
#undef C
        break;
    default:
#define C(M) gemv_float(l, w, r0, r1, act, i0, M, y, ldy)
        GEMV_DISPATCH(C)
#undef C
        break;
    }
}

T512BF static void gemv_bf16_avx512(const struct hr_mm_layout *l, const void *w, size_t r0,
                                    size_t r1, const void *act, float *y, size_t ldy)
{
    const size_t m = l->m;
#define C(M) gemv_bf16(l, w, r0, r1, act, i0, M, y, ldy)
    GEMV_DISPATCH(C)
#undef C
}

/* ======================================================================== */
/* GEMM (prefill): packed weight panels                                     */
/* ======================================================================== */

#define NR 32         /* weight rows per panel: two 16-lane vectors */
#define KB_Q8 16      /* Q8_0/Q4_0 blocks per k-chunk (512 values) */
#define KB_K 2        /* K-quant super-blocks per k-chunk (512 values) */
#ifndef KC_F32
#define KC_F32 256    /* F32/F16 values per k-chunk (32 KiB panel) */
#endif
#define KC_BF16 256   /* BF16 values per k-chunk */
/* Tokens per register tile (the arrays below are sized for the largest; a
 * call with fewer uses a prefix and the compiler drops the rest). */
#define TILE_Q8_MAX 6
/* Decode from packed Q8_0 panels prefetches this many bytes ahead into L2.
 * Measured inside bench-engine's decode (whole models, DRAM-bound), with
 * two variants alternating call by call so that this host's swinging
 * bandwidth hits both alike: 2 KiB beat 4 KiB in 6 of 6 runs (median +3.6%)
 * and beat 1 KiB and no prefetch in 8 of 8 (+0-4%); 8 and 16 KiB lost 6-8%,
 * and prefetching into L1 lost 24%. (bench-matmul had favoured 4 KiB, but
 * its single matrices partly fit in L3.) Prefetching the scales and the
 * next panel's start as well changed nothing (within 1%). */
#define Q8P_PF 2048
/* Decode from packed Q4_K prefetches this many bytes ahead into L2. In
 * `headroom run`'s decode of the 24-layer Qwen3-30B-A3B shape (Q4_K, 8.8 GB,
 * 2 threads), 5 alternating rounds, tokens/s median (range): none 24.3
 * (23.9-30.7), 2 KiB 31.0 (25.1-38.3), 4 KiB 33.3 (29.7-39.4). */
#ifndef Q4KP_PF
#define Q4KP_PF 4096
#endif
#define TILE_K_MAX 4
#define TILE_F_MAX 12

/* [block][group of 4 k][vector]: 16 rows x 4 unsigned bytes; plus f32 scales. */
struct panel_q8 {
    __m512i w[KB_Q8][8][2];
    float d[KB_Q8][2][16];
    float m[KB_Q8][2][16]; /* Q4_1 / Q5_1 block offsets */
};

/* [super-block][group of 4 k][vector] bytes, per sub-block scales as i32,
 * min pairs (m_2p | m_2p+1 << 16) for vpdpwssd, f32 d and dmin. */
struct panel_k {
    __m512i w[KB_K][64][2];
    int32_t sc[KB_K][16][2][16];
    int32_t mp[KB_K][4][2][16];
    float d[KB_K][2][16];
    float dmin[KB_K][2][16];
};

struct panel_f32 {
    float w[KC_F32][2][16];
};

struct panel_bf16 {
    uint32_t w[KC_BF16 / 2][2][16]; /* pairs of consecutive k of one row */
};

/* Stores a tile row of 32 outputs (nr valid) for one token. */
INLINE T512 void store_row(float *dst, __m512 c0, __m512 c1, size_t nr)
{
    if (nr >= NR) {
        _mm512_storeu_ps(dst, c0);
        _mm512_storeu_ps(dst + 16, c1);
    } else {
        __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
        __mmask16 m1 = nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
        _mm512_mask_storeu_ps(dst, m0, c0);
        _mm512_mask_storeu_ps(dst + 16, m1, c1);
    }
}

INLINE T512 void load_row(const float *src, __m512 *c0, __m512 *c1, size_t nr)
{
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= NR ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    *c0 = _mm512_maskz_loadu_ps(m0, src);
    *c1 = _mm512_maskz_loadu_ps(m1, src + 16);
}

/* ---- Q8_0, Q4_0 and the other 32-value block types ---- */

/*
 * 16 rows x 8 dwords -> 8 vectors of 16 dwords (vector t = dword t of every
 * row, row i in lane i): rows i and i + 8 share a register, then 8 vpunpck*dq,
 * 8 vpunpck*qdq and 8 vpermt2q. The core of every quantized panel packer.
 */
INLINE T512 void transpose16x8(const __m256i rows[16], __m512i out[8])
{
    const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    __m512i A[8], T[8], U[8];
    UNROLL
    for (int r = 0; r < 8; r++)
        A[r] = _mm512_inserti64x4(_mm512_castsi256_si512(rows[r]), rows[r + 8], 1);
    UNROLL
    for (int r = 0; r < 4; r++) {
        T[2 * r] = _mm512_unpacklo_epi32(A[2 * r], A[2 * r + 1]);
        T[2 * r + 1] = _mm512_unpackhi_epi32(A[2 * r], A[2 * r + 1]);
    }
    UNROLL
    for (int h = 0; h < 2; h++) {
        U[4 * h + 0] = _mm512_unpacklo_epi64(T[4 * h + 0], T[4 * h + 2]);
        U[4 * h + 1] = _mm512_unpackhi_epi64(T[4 * h + 0], T[4 * h + 2]);
        U[4 * h + 2] = _mm512_unpacklo_epi64(T[4 * h + 1], T[4 * h + 3]);
        U[4 * h + 3] = _mm512_unpackhi_epi64(T[4 * h + 1], T[4 * h + 3]);
    }
    /* U[t] (t < 4) holds dword t (128-bit lanes 0, 2) and t + 4 (lanes 1, 3)
     * of rows 0-3 / 8-11; U[t + 4] the same for rows 4-7 / 12-15 */
    UNROLL
    for (int t = 0; t < 4; t++) {
        out[t] = _mm512_permutex2var_epi64(U[t], lo_idx, U[t + 4]);
        out[t + 4] = _mm512_permutex2var_epi64(U[t], hi_idx, U[t + 4]);
    }
}

/* Lane i: row i's offset, for gathers of one field from 16 rows. */
INLINE T512 __m512i row_offsets(size_t row_bytes)
{
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32((int)row_bytes));
}

/* 16 f32 block scales (off 0) or offsets (off 2) gathered from 16 rows. */
INLINE T512 __m512 b32_scales16(enum hr_ggml_type t, const uint8_t *base, __m512i roff,
                                __mmask16 rows, int off)
{
    const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), rows, roff, base + off, 1);
    if (t == HR_GGML_MXFP4) {
        const __m512i e = _mm512_and_si512(g, _mm512_set1_epi32(0xff));
        const __m512i norm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
        const __mmask16 small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
        return _mm512_maskz_mov_ps(rows, _mm512_castsi512_ps(_mm512_mask_mov_epi32(norm, small, sub)));
    }
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/*
 * Packs rows [0, nr) of a 32-row panel, blocks [kb0, kb0 + kbn): per 16 rows
 * and block, 16 loads (b32_weights: unsigned bytes in value order), one
 * transpose16x8 and a masked gather of the 16 scales (and offsets); about 50
 * vector ops per 512 bytes, a quarter of a scalar transpose. Rows past nr
 * are zero.
 */
T512 static void pack_q8_0(struct panel_q8 *p, const uint8_t *w, size_t row_bytes, size_t nr,
                           size_t kb0, size_t kbn, const enum hr_ggml_type t)
{
    const size_t bb = hr_mm_b32_bytes(t);
    const __m512i roff = row_offsets(row_bytes);
    for (size_t v = 0; v < 2; v++) {
        const size_t rv = 16 * v;
        const __mmask16 rows = rv >= nr ? 0 : nr - rv >= 16 ? 0xffff : (__mmask16)((1u << (nr - rv)) - 1);
        for (size_t b = 0; b < kbn; b++) {
            if (rv >= nr) { /* an empty half panel */
                for (int u = 0; u < 8; u++)
                    _mm512_store_si512(&p->w[b][u][v], _mm512_setzero_si512());
                _mm512_store_ps(p->d[b][v], _mm512_setzero_ps());
                _mm512_store_ps(p->m[b][v], _mm512_setzero_ps());
                continue;
            }
            const uint8_t *base = w + rv * row_bytes + (kb0 + b) * bb;
            __m256i q[16];
            __m512i out[8];
            UNROLL
            for (int r = 0; r < 16; r++)
                q[r] = rv + (size_t)r < nr ? b32_weights(t, base + (size_t)r * row_bytes)
                                           : _mm256_setzero_si256();
            transpose16x8(q, out);
            UNROLL
            for (int u = 0; u < 8; u++)
                _mm512_store_si512(&p->w[b][u][v], out[u]);
            _mm512_store_ps(p->d[b][v], b32_scales16(t, base, roff, rows, 0));
            if (hr_mm_b32_has_min(t))
                _mm512_store_ps(p->m[b][v], b32_scales16(t, base, roff, rows, 2));
        }
    }
}

/*
 * One tile: I tokens x 32 rows over blocks [kb0, kb0 + kbn) of a panel whose
 * quants are q[b][t][v] (16 rows x 4 unsigned bytes per vector) and whose
 * scales are d[b][v][16], f32 (panels packed here) or f16 (d16: weights
 * packed at load, hr_matmul_pack; widened here to the same f32 values).
 */
INLINE T512 void tile_q8_0(const __m512i (*q)[8][2], const void *d, const bool d16,
                           const float *mn, size_t kbn, size_t kb0,
                           const struct hr_mm_layout *l, const void *act, size_t i0, const int I,
                           float *y, size_t ldy, size_t r, size_t nr, bool first)
{
    const int8_t *qs[TILE_Q8_MAX];
    const float *da[TILE_Q8_MAX], *sa[TILE_Q8_MAX];
    const int32_t *comp[TILE_Q8_MAX];
    __m512 c[TILE_Q8_MAX][2];
    UNROLL
    for (int i = 0; i < I; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + i) + 32 * kb0;
        da[i] = hr_mm_d(l, act, i0 + i) + kb0;
        comp[i] = hr_mm_comp(l, act, i0 + i) + kb0;
        sa[i] = mn ? hr_mm_s(l, act, i0 + i) + kb0 : NULL;
        if (first)
            c[i][0] = c[i][1] = _mm512_setzero_ps();
        else
            load_row(y + (i0 + i) * ldy + r, &c[i][0], &c[i][1], nr);
    }
    for (size_t b = 0; b < kbn; b++) {
        if (d16 && I <= 2) { /* decode from packed weights: memory-bound, see Q8P_PF */
            const char *pf = (const char *)&q[b][0][0] + Q8P_PF;
            UNROLL
            for (int o = 0; o < 1024; o += 64)
                _mm_prefetch(pf + o, _MM_HINT_T1);
        }
        __m512i acc[TILE_Q8_MAX][2];
        UNROLL
        for (int i = 0; i < I; i++)
            acc[i][0] = acc[i][1] = _mm512_set1_epi32(comp[i][b]);
        UNROLL
        for (int t = 0; t < 8; t++) {
            const __m512i w0 = _mm512_load_si512(&q[b][t][0]);
            const __m512i w1 = _mm512_load_si512(&q[b][t][1]);
            UNROLL
            for (int i = 0; i < I; i++) {
                int32_t a4;
                memcpy(&a4, qs[i] + 32 * b + 4 * t, 4);
                const __m512i a = _mm512_set1_epi32(a4);
                acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], w0, a);
                acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], w1, a);
            }
        }
        __m512 d0, d1;
        if (d16) {
            const uint16_t *h = (const uint16_t *)d + 32 * b;
            d0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)h));
            d1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(h + 16)));
        } else {
            d0 = _mm512_load_ps((const float *)d + 32 * b);
            d1 = _mm512_load_ps((const float *)d + 32 * b + 16);
        }
        UNROLL
        for (int i = 0; i < I; i++) {
            const __m512 ad = _mm512_set1_ps(da[i][b]);
            c[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][0]), _mm512_mul_ps(d0, ad), c[i][0]);
            c[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][1]), _mm512_mul_ps(d1, ad), c[i][1]);
        }
        if (mn) { /* Q4_1 / Q5_1: + m_w * s_a, after the block's d term */
            const __m512 m0 = _mm512_load_ps(mn + 32 * b), m1 = _mm512_load_ps(mn + 32 * b + 16);
            UNROLL
            for (int i = 0; i < I; i++) {
                const __m512 s_ = _mm512_set1_ps(sa[i][b]);
                c[i][0] = _mm512_fmadd_ps(m0, s_, c[i][0]);
                c[i][1] = _mm512_fmadd_ps(m1, s_, c[i][1]);
            }
        }
    }
    UNROLL
    for (int i = 0; i < I; i++)
        store_row(y + (i0 + i) * ldy + r, c[i][0], c[i][1], nr);
}

/* All m tokens of one panel chunk, 6 at a time. */
INLINE T512 void tiles_q8_0(const __m512i (*q)[8][2], const void *d, const bool d16,
                            const float *mn, size_t kbn, size_t kb0,
                            const struct hr_mm_layout *l, const void *act, float *y, size_t ldy,
                            size_t r, size_t nr)
{
    const size_t m = l->m;
    const bool first = kb0 == 0;
    size_t i0 = 0;
    for (; i0 + 6 <= m; i0 += 6)
        tile_q8_0(q, d, d16, mn, kbn, kb0, l, act, i0, 6, y, ldy, r, nr, first);
    switch (m - i0) {
    case 5: tile_q8_0(q, d, d16, mn, kbn, kb0, l, act, i0, 5, y, ldy, r, nr, first); break;
    case 4: tile_q8_0(q, d, d16, mn, kbn, kb0, l, act, i0, 4, y, ldy, r, nr, first); break;
    case 3: tile_q8_0(q, d, d16, mn, kbn, kb0, l, act, i0, 3, y, ldy, r, nr, first); break;
    case 2: tile_q8_0(q, d, d16, mn, kbn, kb0, l, act, i0, 2, y, ldy, r, nr, first); break;
    case 1: tile_q8_0(q, d, d16, mn, kbn, kb0, l, act, i0, 1, y, ldy, r, nr, first); break;
    default: break;
    }
}

/* The GEMM for every 32-value block type t (a constant where it is called:
 * one specialized copy per type). */
INLINE T512 void gemm_q8_0_t(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                             const void *act, float *y, size_t ldy, const enum hr_ggml_type t)
{
    const size_t nb = l->nb, row_bytes = nb * hr_mm_b32_bytes(t);
    struct panel_q8 p __attribute__((aligned(64)));
    for (size_t r = r0; r < r1; r += NR) {
        const size_t nr = min_sz(NR, r1 - r);
        for (size_t kb0 = 0; kb0 < nb; kb0 += KB_Q8) {
            const size_t kbn = min_sz(KB_Q8, nb - kb0);
            pack_q8_0(&p, (const uint8_t *)w + r * row_bytes, row_bytes, nr, kb0, kbn, t);
            tiles_q8_0((const __m512i (*)[8][2])p.w, p.d, false,
                       hr_mm_b32_has_min(t) ? &p.m[0][0][0] : NULL, kbn, kb0, l, act, y, ldy, r,
                       nr);
        }
    }
}

/*
 * Q8_0 weights packed at load (hr_matmul_pack, layout in matmul-impl.h):
 * the panels above, made once, so every m, decode included, runs the GEMM's
 * tiles straight from memory. A decode step then costs ~1.5 vector ops per
 * weight row and block instead of ~6 (pack or fold and transpose), and
 * reads one sequential stream per thread; the results are those of
 * gemm_q8_0 bit for bit (same tiles, same order).
 */
T512 static void gemm_q8_0_packed(const struct hr_mm_layout *l, const void *w, size_t r0,
                                  size_t r1, const void *act, float *y, size_t ldy)
{
    const size_t nb = l->nb;
    for (size_t r = r0; r < r1; r += NR) {
        const size_t nr = min_sz(NR, r1 - r);
        const uint8_t *pw = (const uint8_t *)w + r / NR * hr_mm_q8p_panel_bytes(nb);
        const __m512i (*q)[8][2] = (const __m512i (*)[8][2])pw;
        const uint16_t *d = (const uint16_t *)(pw + hr_mm_q8p_scales_off(nb));
        for (size_t kb0 = 0; kb0 < nb; kb0 += KB_Q8)
            tiles_q8_0(q + kb0, d + 32 * kb0, true, NULL, min_sz(KB_Q8, nb - kb0), kb0, l, act, y,
                       ldy, r, nr);
    }
}

/* ---- K-quants ---- */

/* Values 32c .. 32c + 31 of a Q4_K/Q5_K/Q6_K block as unsigned bytes (q, not
 * q - 32 for Q6_K), in value order. */
INLINE T512 __m256i k_chunk(enum hr_ggml_type t, const uint8_t *blk, int c)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (t == HR_GGML_Q6_K) {
        const struct hr_block_q6_K *x = (const struct hr_block_q6_K *)blk;
        const int h = c / 4, quarter = c % 4;
        const __m256i ql = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32 * (quarter & 1)));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (quarter >> 1)), m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * quarter), _mm256_set1_epi8(3));
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    const bool q5 = t == HR_GGML_Q5_K;
    const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + (q5 ? 48 : 16) + 32 * (c / 2)));
    __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 4 * (c & 1)), m4);
    if (q5) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
        const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, c), _mm256_set1_epi8(1));
        v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 4));
    }
    return v;
}

/*
 * Packs rows [0, nr) of a 32-row panel, super-blocks [kb0, kb0 + kbn): the
 * quants 32 values (8 dwords) at a time through transpose16x8, the sub-block
 * scales (and mins, d, dmin) per row in scalar code (1/32 of the data).
 */
T512 static void pack_k(struct panel_k *p, enum hr_ggml_type t, const uint8_t *w, size_t row_bytes,
                        size_t nr, size_t kb0, size_t kbn)
{
    const size_t blk_bytes = t == HR_GGML_Q4_K ? 144 : t == HR_GGML_Q5_K ? 176 : 210;
    for (size_t v = 0; v < 2; v++) {
        const size_t rv = 16 * v;
        for (size_t b = 0; b < kbn; b++) {
            if (rv >= nr) { /* an empty half panel */
                for (int g = 0; g < 64; g++)
                    _mm512_store_si512(&p->w[b][g][v], _mm512_setzero_si512());
                for (size_t lane = 0; lane < 16; lane++) {
                    for (int j = 0; j < 16; j++)
                        p->sc[b][j][v][lane] = 0;
                    for (int j = 0; j < 4; j++)
                        p->mp[b][j][v][lane] = 0;
                    p->d[b][v][lane] = p->dmin[b][v][lane] = 0;
                }
                continue;
            }
            const uint8_t *base = w + rv * row_bytes + (kb0 + b) * blk_bytes;
            for (int c = 0; c < 8; c++) {
                __m256i q[16];
                __m512i out[8];
                UNROLL
                for (int r = 0; r < 16; r++)
                    q[r] = rv + (size_t)r < nr ? k_chunk(t, base + (size_t)r * row_bytes, c)
                                               : _mm256_setzero_si256();
                transpose16x8(q, out);
                UNROLL
                for (int g = 0; g < 8; g++)
                    _mm512_store_si512(&p->w[b][8 * c + g][v], out[g]);
            }
            for (size_t lane = 0; lane < 16; lane++) {
                if (rv + lane >= nr) {
                    for (int j = 0; j < 16; j++)
                        p->sc[b][j][v][lane] = 0;
                    for (int j = 0; j < 4; j++)
                        p->mp[b][j][v][lane] = 0;
                    p->d[b][v][lane] = p->dmin[b][v][lane] = 0;
                    continue;
                }
                const uint8_t *blk = base + lane * row_bytes;
                if (t == HR_GGML_Q6_K) {
                    const struct hr_block_q6_K *x = (const struct hr_block_q6_K *)blk;
                    for (int j = 0; j < 16; j++)
                        p->sc[b][j][v][lane] = x->scales[j];
                    p->d[b][v][lane] = hr_f16_to_f32(x->d);
                    p->dmin[b][v][lane] = 0;
                } else {
                    uint8_t sc[8], mn[8];
                    for (int j = 0; j < 8; j++)
                        hr_q4_K_scale_min(j, blk + 4, &sc[j], &mn[j]);
                    for (int j = 0; j < 8; j++)
                        p->sc[b][j][v][lane] = sc[j];
                    for (int j = 0; j < 4; j++)
                        p->mp[b][j][v][lane] = (int32_t)((uint32_t)mn[2 * j] | ((uint32_t)mn[2 * j + 1] << 16));
                    p->d[b][v][lane] = hr_f16_to_f32(*(const uint16_t *)blk);
                    p->dmin[b][v][lane] = hr_f16_to_f32(*(const uint16_t *)(blk + 2));
                }
            }
        }
    }
}

/* The same panel from packed Q4_K (hr_matmul_pack; layout in matmul-impl.h):
 * the nibbles widened to bytes, the scales and mins to the panel's lanes.
 * Rows past n_out are zero already. */
T512 static void panel_from_q4kp(struct panel_k *p, const uint8_t *w, size_t nb, size_t r,
                                 size_t kb0, size_t kbn)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (size_t b = 0; b < kbn; b++) {
        for (size_t v = 0; v < 2; v++) {
            const uint8_t *blk =
                w + ((r / HR_MM_Q4KP_ROWS + v) * nb + kb0 + b) * HR_MM_Q4KP_BLOCK;
            for (int j = 0; j < 32; j++) {
                const __m512i q = _mm512_load_si512(blk + 64 * j);
                const int s = 2 * (j / 8), g = j % 8; /* sub-blocks s (low), s + 1 (high) */
                _mm512_store_si512(&p->w[b][8 * s + g][v], _mm512_and_si512(q, m4));
                _mm512_store_si512(&p->w[b][8 * s + 8 + g][v],
                                   _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
            }
            for (int s = 0; s < 8; s++)
                _mm512_store_si512(p->sc[b][s][v], _mm512_cvtepu8_epi32(_mm_load_si128(
                                                       (const __m128i *)(blk + HR_MM_Q4KP_SC + 16 * s))));
            for (int j = 0; j < 4; j++)
                _mm512_store_si512(p->mp[b][j][v], _mm512_cvtepu8_epi16(_mm256_load_si256(
                                                       (const __m256i *)(blk + HR_MM_Q4KP_MN + 32 * j))));
            _mm512_store_ps(p->d[b][v],
                            _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(blk + HR_MM_Q4KP_D))));
            _mm512_store_ps(p->dmin[b][v], _mm512_cvtph_ps(_mm256_load_si256(
                                               (const __m256i *)(blk + HR_MM_Q4KP_DMIN))));
        }
    }
}

/* NS sub-blocks of 256 / NS values; Q6_K (NS = 16) starts each sub-block's
 * sum at -32 * bsum, Q4_K/Q5_K (NS = 8) subtract dmin * mins at the end. */
INLINE T512 void tile_k(const struct panel_k *p, size_t kbn, size_t kb0, const struct hr_mm_layout *l,
                        const void *act, size_t i0, const int I, float *y, size_t ldy, size_t r,
                        size_t nr, bool first, const int NS)
{
    const int G = 64 / NS; /* groups of 4 k per sub-block */
    const int8_t *qs[TILE_K_MAX];
    const float *da[TILE_K_MAX];
    const int32_t *c16[TILE_K_MAX];
    const int16_t *s32[TILE_K_MAX];
    __m512 c[TILE_K_MAX][2];
    UNROLL
    for (int i = 0; i < I; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + i) + 256 * kb0;
        da[i] = hr_mm_d(l, act, i0 + i) + kb0;
        c16[i] = NS == 16 ? hr_mm_comp16(l, act, i0 + i) + 16 * kb0 : NULL;
        s32[i] = NS == 8 ? hr_mm_sum32(l, act, i0 + i) + 8 * kb0 : NULL;
        if (first)
            c[i][0] = c[i][1] = _mm512_setzero_ps();
        else
            load_row(y + (i0 + i) * ldy + r, &c[i][0], &c[i][1], nr);
    }
    for (size_t b = 0; b < kbn; b++) {
        __m512i isum[TILE_K_MAX][2];
        UNROLL
        for (int i = 0; i < I; i++)
            isum[i][0] = isum[i][1] = _mm512_setzero_si512();
        UNROLL
        for (int s = 0; s < NS; s++) {
            __m512i acc[TILE_K_MAX][2];
            UNROLL
            for (int i = 0; i < I; i++)
                acc[i][0] = acc[i][1] =
                    NS == 16 ? _mm512_set1_epi32(c16[i][16 * b + (size_t)s]) : _mm512_setzero_si512();
            UNROLL
            for (int g = 0; g < G; g++) {
                const __m512i w0 = _mm512_load_si512(&p->w[b][s * G + g][0]);
                const __m512i w1 = _mm512_load_si512(&p->w[b][s * G + g][1]);
                UNROLL
                for (int i = 0; i < I; i++) {
                    int32_t a4;
                    memcpy(&a4, qs[i] + 256 * b + (size_t)(4 * (s * G + g)), 4);
                    const __m512i a = _mm512_set1_epi32(a4);
                    acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], w0, a);
                    acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], w1, a);
                }
            }
            const __m512i sc0 = _mm512_load_si512(p->sc[b][s][0]);
            const __m512i sc1 = _mm512_load_si512(p->sc[b][s][1]);
            UNROLL
            for (int i = 0; i < I; i++) {
                isum[i][0] = _mm512_add_epi32(isum[i][0], _mm512_mullo_epi32(acc[i][0], sc0));
                isum[i][1] = _mm512_add_epi32(isum[i][1], _mm512_mullo_epi32(acc[i][1], sc1));
            }
        }
        const __m512 d0 = _mm512_load_ps(p->d[b][0]), d1 = _mm512_load_ps(p->d[b][1]);
        UNROLL
        for (int i = 0; i < I; i++) {
            const __m512 ad = _mm512_set1_ps(da[i][b]);
            c[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][0]), _mm512_mul_ps(d0, ad), c[i][0]);
            c[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][1]), _mm512_mul_ps(d1, ad), c[i][1]);
        }
        if (NS == 8) {
            const __m512 m0 = _mm512_load_ps(p->dmin[b][0]), m1 = _mm512_load_ps(p->dmin[b][1]);
            UNROLL
            for (int i = 0; i < I; i++) {
                __m512i ms0 = _mm512_setzero_si512(), ms1 = _mm512_setzero_si512();
                UNROLL
                for (int j = 0; j < 4; j++) {
                    int32_t pair;
                    memcpy(&pair, s32[i] + 8 * b + 2 * (size_t)j, 4);
                    const __m512i sp = _mm512_set1_epi32(pair);
                    ms0 = _mm512_dpwssd_epi32(ms0, _mm512_load_si512(p->mp[b][j][0]), sp);
                    ms1 = _mm512_dpwssd_epi32(ms1, _mm512_load_si512(p->mp[b][j][1]), sp);
                }
                const __m512 ad = _mm512_set1_ps(da[i][b]);
                c[i][0] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms0), _mm512_mul_ps(m0, ad), c[i][0]);
                c[i][1] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms1), _mm512_mul_ps(m1, ad), c[i][1]);
            }
        }
    }
    UNROLL
    for (int i = 0; i < I; i++)
        store_row(y + (i0 + i) * ldy + r, c[i][0], c[i][1], nr);
}

#define TILE_K_SWITCH(NSV)                                                                          \
    do {                                                                                           \
        size_t i0 = 0;                                                                             \
        for (; i0 + 4 <= m; i0 += 4)                                                               \
            tile_k(&p, kbn, kb0, l, act, i0, 4, y, ldy, r, nr, kb0 == 0, NSV);                     \
        switch (m - i0) {                                                                          \
        case 3: tile_k(&p, kbn, kb0, l, act, i0, 3, y, ldy, r, nr, kb0 == 0, NSV); break;          \
        case 2: tile_k(&p, kbn, kb0, l, act, i0, 2, y, ldy, r, nr, kb0 == 0, NSV); break;          \
        case 1: tile_k(&p, kbn, kb0, l, act, i0, 1, y, ldy, r, nr, kb0 == 0, NSV); break;          \
        default: break;                                                                            \
        }                                                                                          \
    } while (0)

/*
 * The K-quant GEMM: per 32 rows and KB_K super-blocks, one panel, then tile_k
 * over every token. Only the panel's source differs between row-major weights
 * and packed Q4_K (q4kp, a constant where it is called: one specialized copy
 * each, as gemm_q8_0_t); the tiles, and so every float operation and its
 * order, are the same.
 */
INLINE T512 void gemm_k_t(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                          const void *act, float *y, size_t ldy, const bool q4kp)
{
    const enum hr_ggml_type t = l->wtype;
    const size_t nb = l->nb, m = l->m;
    const size_t row_bytes = nb * (t == HR_GGML_Q4_K ? 144 : t == HR_GGML_Q5_K ? 176 : 210);
    struct panel_k p __attribute__((aligned(64)));
    for (size_t r = r0; r < r1; r += NR) {
        const size_t nr = min_sz(NR, r1 - r);
        for (size_t kb0 = 0; kb0 < nb; kb0 += KB_K) {
            const size_t kbn = min_sz(KB_K, nb - kb0);
            if (q4kp)
                panel_from_q4kp(&p, (const uint8_t *)w, nb, r, kb0, kbn);
            else
                pack_k(&p, t, (const uint8_t *)w + r * row_bytes, row_bytes, nr, kb0, kbn);
            if (!q4kp && t == HR_GGML_Q6_K)
                TILE_K_SWITCH(16);
            else
                TILE_K_SWITCH(8);
        }
    }
}

/* Prefill on row-major Q4_K, Q5_K and Q6_K. */
T512 static void gemm_k(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                        const void *act, float *y, size_t ldy)
{
    gemm_k_t(l, w, r0, r1, act, y, ldy, false);
}

/* ---- packed Q4_K (hr_matmul_pack; layout in matmul-impl.h) ---- */

/*
 * Decode on packed Q4_K: one 16-row group at a time, M tokens, every block
 * in order. Per 64-byte vector of nibbles, vpandd with 0x0F and 0xF0 gives
 * two sub-blocks' unsigned weights for 16 rows, each one vpdpbusd against
 * 4 broadcast activation bytes; the high nibbles stay 16 times their value,
 * and the scaled sub-block sum is shifted back down by 4 (exact: a multiple
 * of 16, at most 2^26). The integer block sums and mins are exact, so they
 * equal tile_k's, and the float operations per block are tile_k's in its
 * order (scale term, then min term): the same bits as the GEMM at any m.
 */
INLINE T512 void q4kp_group(const uint8_t *grp, size_t nb, const struct hr_mm_layout *l,
                            const void *act, size_t i0, const int M, float *y, size_t ldy,
                            size_t r, size_t nr)
{
    const __m512i m_lo = _mm512_set1_epi8(0x0F), m_hi = _mm512_set1_epi8((char)0xF0);
    const int8_t *qs[TILE_K_MAX];
    const float *da[TILE_K_MAX];
    const int16_t *s32[TILE_K_MAX];
    __m512 c[TILE_K_MAX];
    UNROLL
    for (int i = 0; i < M; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + (size_t)i);
        da[i] = hr_mm_d(l, act, i0 + (size_t)i);
        s32[i] = hr_mm_sum32(l, act, i0 + (size_t)i);
        c[i] = _mm512_setzero_ps();
    }
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + b * HR_MM_Q4KP_BLOCK;
        if (M <= 2) { /* memory-bound: see Q4KP_PF */
            UNROLL
            for (int o = 0; o < HR_MM_Q4KP_BLOCK; o += 64)
                _mm_prefetch((const char *)blk + Q4KP_PF + o, _MM_HINT_T1);
        }
        __m512i isum[TILE_K_MAX];
        UNROLL
        for (int i = 0; i < M; i++)
            isum[i] = _mm512_setzero_si512();
        UNROLL
        for (int c4 = 0; c4 < 4; c4++) {
            __m512i al[TILE_K_MAX], ah[TILE_K_MAX];
            UNROLL
            for (int i = 0; i < M; i++)
                al[i] = ah[i] = _mm512_setzero_si512();
            UNROLL
            for (int j = 0; j < 8; j++) {
                const __m512i v = _mm512_load_si512(blk + 64 * (8 * c4 + j));
                const __m512i lo = _mm512_and_si512(v, m_lo), hi = _mm512_and_si512(v, m_hi);
                UNROLL
                for (int i = 0; i < M; i++) {
                    int32_t a0, a1;
                    memcpy(&a0, qs[i] + 256 * b + 64 * c4 + 4 * j, 4);
                    memcpy(&a1, qs[i] + 256 * b + 64 * c4 + 32 + 4 * j, 4);
                    al[i] = _mm512_dpbusd_epi32(al[i], lo, _mm512_set1_epi32(a0));
                    ah[i] = _mm512_dpbusd_epi32(ah[i], hi, _mm512_set1_epi32(a1));
                }
            }
            const __m512i scl = _mm512_cvtepu8_epi32(
                _mm_load_si128((const __m128i *)(blk + HR_MM_Q4KP_SC + 32 * c4)));
            const __m512i sch = _mm512_cvtepu8_epi32(
                _mm_load_si128((const __m128i *)(blk + HR_MM_Q4KP_SC + 32 * c4 + 16)));
            UNROLL
            for (int i = 0; i < M; i++)
                isum[i] = _mm512_add_epi32(
                    isum[i], _mm512_add_epi32(_mm512_mullo_epi32(al[i], scl),
                                              _mm512_srai_epi32(_mm512_mullo_epi32(ah[i], sch), 4)));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(blk + HR_MM_Q4KP_D)));
        const __m512 dm =
            _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(blk + HR_MM_Q4KP_DMIN)));
        UNROLL
        for (int i = 0; i < M; i++) {
            const __m512 ad = _mm512_set1_ps(da[i][b]);
            c[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, ad), c[i]);
        }
        UNROLL
        for (int i = 0; i < M; i++) {
            __m512i ms = _mm512_setzero_si512();
            UNROLL
            for (int j = 0; j < 4; j++) {
                int32_t pair;
                memcpy(&pair, s32[i] + 8 * b + 2 * (size_t)j, 4);
                const __m512i mp = _mm512_cvtepu8_epi16(
                    _mm256_load_si256((const __m256i *)(blk + HR_MM_Q4KP_MN + 32 * j)));
                ms = _mm512_dpwssd_epi32(ms, mp, _mm512_set1_epi32(pair));
            }
            const __m512 ad = _mm512_set1_ps(da[i][b]);
            c[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dm, ad), c[i]);
        }
    }
    const __mmask16 rows = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    UNROLL
    for (int i = 0; i < M; i++)
        _mm512_mask_storeu_ps(y + (i0 + (size_t)i) * ldy + r, rows, c[i]);
}

T512 static void gemv_q4kp(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                           const void *act, float *y, size_t ldy)
{
    const size_t nb = l->nb, m = l->m;
    for (size_t r = r0; r < r1; r += HR_MM_Q4KP_ROWS) {
        const uint8_t *grp = (const uint8_t *)w + r / HR_MM_Q4KP_ROWS * nb * HR_MM_Q4KP_BLOCK;
        const size_t nr = min_sz(HR_MM_Q4KP_ROWS, r1 - r);
#define C(M) q4kp_group(grp, nb, l, act, i0, M, y, ldy, r, nr)
        GEMV_DISPATCH(C)
#undef C
    }
}

/* Prefill on packed Q4_K: gemm_k's tiles on panels widened from the packed
 * groups (no transposes, no 6-bit scale unpacking). */
T512 static void gemm_q4kp(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                           const void *act, float *y, size_t ldy)
{
    gemm_k_t(l, w, r0, r1, act, y, ldy, true);
}

/* ---- Q2_K, Q3_K, IQ4_XS ---- */

/*
 * The tiles of tile_k for the low-bit types (T: 0 Q2_K, 1 Q3_K, 2 IQ4_XS;
 * block layouts in quant.h). The panel holds the quants as unsigned bytes:
 * Q2_K's 0..3, Q3_K's q = value + 4 (0..7), IQ4_XS's grid value + 128
 * (1..241); each sub-block's vpdpbusd chain starts at the offset that
 * removes the +4 (-4 * bsum) or +128 (-128 * sum32), then is multiplied by
 * the sub-block's signed scale. Q2_K's 16 mins go in pairs through vpdpwssd
 * against the bsums, scaled by dmin. The float operations per block are
 * those of gemv_k2k3_rows8 (matmul-k2k3-x86.h), so decode and prefill give
 * the same bits.
 */
struct panel_k2k3 {
    __m512i w[KB_K][64][2];
    int32_t sc[KB_K][16][2][16]; /* signed sub-block scales (Q3_K: sc - 32; IQ4_XS: ls - 32) */
    int32_t mp[KB_K][8][2][16];  /* Q2_K: min pairs m_2p | m_2p+1 << 16 */
    float d[KB_K][2][16];
    float dmin[KB_K][2][16];
};

/* Values 32c .. 32c + 31 of a block of type T as the panel's unsigned bytes. */
INLINE T512 __m256i k2k3_chunk(const int T, const uint8_t *blk, int c)
{
    if (T == 2) {
        const struct hr_block_iq4_xs *x = (const struct hr_block_iq4_xs *)blk;
        const __m128i q = _mm_loadu_si128((const __m128i *)(x->qs + 16 * c));
        const __m256i idx = _mm256_and_si256(
            _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1),
            _mm256_set1_epi8(0x0F));
        const __m256i grid = _mm256_xor_si256(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hr_iq4nl_values)),
            _mm256_set1_epi8((char)0x80)); /* v + 128 */
        return _mm256_shuffle_epi8(grid, idx);
    }
    /* Q2_K / Q3_K: the low 2 bits from qs (qs at 16 / 32 bytes into the block) */
    const uint8_t *qs = blk + (T == 0 ? 16 : 32);
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * (c / 4)));
    __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * (c % 4)), _mm256_set1_epi8(3));
    if (T == 1) {
        const __m256i hm = _mm256_loadu_si256((const __m256i *)blk);
        const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(hm, c), _mm256_set1_epi8(1));
        v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 2));
    }
    return v;
}

/* Packs rows [0, nr) of a 32-row panel, super-blocks [kb0, kb0 + kbn), as pack_k. */
T512 static void pack_k2k3(struct panel_k2k3 *p, const int T, const uint8_t *w, size_t row_bytes,
                           size_t nr, size_t kb0, size_t kbn)
{
    const size_t bb = T == 0 ? 84 : T == 1 ? 110 : 136;
    for (size_t v = 0; v < 2; v++) {
        const size_t rv = 16 * v;
        for (size_t b = 0; b < kbn; b++) {
            const uint8_t *base = w + rv * row_bytes + (kb0 + b) * bb;
            for (int c = 0; c < 8; c++) {
                __m256i q[16];
                __m512i out[8];
                UNROLL
                for (int r = 0; r < 16; r++)
                    q[r] = rv + (size_t)r < nr ? k2k3_chunk(T, base + (size_t)r * row_bytes, c)
                                               : _mm256_setzero_si256();
                transpose16x8(q, out);
                UNROLL
                for (int g = 0; g < 8; g++)
                    _mm512_store_si512(&p->w[b][8 * c + g][v], out[g]);
            }
            for (size_t lane = 0; lane < 16; lane++) {
                int32_t sc[16] = {0}, mn[16] = {0};
                float d = 0, dmin = 0;
                if (rv + lane < nr) {
                    const uint8_t *blk = base + lane * row_bytes;
                    if (T == 0) {
                        const struct hr_block_q2_K *x = (const struct hr_block_q2_K *)blk;
                        for (int j = 0; j < 16; j++)
                            sc[j] = x->scales[j] & 0xF, mn[j] = x->scales[j] >> 4;
                        d = hr_f16_to_f32(x->d), dmin = hr_f16_to_f32(x->dmin);
                    } else if (T == 1) {
                        const struct hr_block_q3_K *x = (const struct hr_block_q3_K *)blk;
                        for (int j = 0; j < 16; j++)
                            sc[j] = hr_q3_K_scale(x->scales, j) - 32;
                        d = hr_f16_to_f32(x->d);
                    } else {
                        const struct hr_block_iq4_xs *x = (const struct hr_block_iq4_xs *)blk;
                        for (int j = 0; j < 8; j++)
                            sc[j] = hr_iq4_xs_scale(x, j) - 32;
                        d = hr_f16_to_f32(x->d);
                    }
                }
                for (int j = 0; j < 16; j++)
                    p->sc[b][j][v][lane] = sc[j];
                for (int j = 0; j < 8; j++)
                    p->mp[b][j][v][lane] =
                        (int32_t)((uint32_t)mn[2 * j] | ((uint32_t)mn[2 * j + 1] << 16));
                p->d[b][v][lane] = d;
                p->dmin[b][v][lane] = dmin;
            }
        }
    }
}

/* I tokens x 32 rows over the panel's kbn super-blocks (see tile_k). */
INLINE T512 void tile_k2k3(const struct panel_k2k3 *p, size_t kbn, size_t kb0,
                           const struct hr_mm_layout *l, const void *act, size_t i0, const int I,
                           float *y, size_t ldy, size_t r, size_t nr, bool first, const int T)
{
    const int NS = T == 2 ? 8 : 16, G = 64 / NS; /* sub-blocks; groups of 4 k per sub-block */
    const int8_t *qs[TILE_K_MAX];
    const float *da[TILE_K_MAX];
    const int16_t *bs[TILE_K_MAX], *s32[TILE_K_MAX];
    __m512 c[TILE_K_MAX][2];
    UNROLL
    for (int i = 0; i < I; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + i) + 256 * kb0;
        da[i] = hr_mm_d(l, act, i0 + i) + kb0;
        bs[i] = hr_mm_bsum(l, act, i0 + i) + 16 * kb0;
        s32[i] = hr_mm_sum32(l, act, i0 + i) + 8 * kb0;
        if (first)
            c[i][0] = c[i][1] = _mm512_setzero_ps();
        else
            load_row(y + (i0 + i) * ldy + r, &c[i][0], &c[i][1], nr);
    }
    for (size_t b = 0; b < kbn; b++) {
        __m512i isum[TILE_K_MAX][2];
        UNROLL
        for (int i = 0; i < I; i++)
            isum[i][0] = isum[i][1] = _mm512_setzero_si512();
        UNROLL
        for (int s = 0; s < NS; s++) {
            __m512i acc[TILE_K_MAX][2];
            UNROLL
            for (int i = 0; i < I; i++) {
                const int32_t off = T == 0   ? 0
                                    : T == 1 ? -4 * bs[i][16 * b + (size_t)s]
                                             : -128 * s32[i][8 * b + (size_t)s];
                acc[i][0] = acc[i][1] = _mm512_set1_epi32(off);
            }
            UNROLL
            for (int g = 0; g < G; g++) {
                const __m512i w0 = _mm512_load_si512(&p->w[b][s * G + g][0]);
                const __m512i w1 = _mm512_load_si512(&p->w[b][s * G + g][1]);
                UNROLL
                for (int i = 0; i < I; i++) {
                    int32_t a4;
                    memcpy(&a4, qs[i] + 256 * b + (size_t)(4 * (s * G + g)), 4);
                    const __m512i a = _mm512_set1_epi32(a4);
                    acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], w0, a);
                    acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], w1, a);
                }
            }
            const __m512i sc0 = _mm512_load_si512(p->sc[b][s][0]);
            const __m512i sc1 = _mm512_load_si512(p->sc[b][s][1]);
            UNROLL
            for (int i = 0; i < I; i++) {
                isum[i][0] = _mm512_add_epi32(isum[i][0], _mm512_mullo_epi32(acc[i][0], sc0));
                isum[i][1] = _mm512_add_epi32(isum[i][1], _mm512_mullo_epi32(acc[i][1], sc1));
            }
        }
        const __m512 d0 = _mm512_load_ps(p->d[b][0]), d1 = _mm512_load_ps(p->d[b][1]);
        UNROLL
        for (int i = 0; i < I; i++) {
            const __m512 ad = _mm512_set1_ps(da[i][b]);
            c[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][0]), _mm512_mul_ps(d0, ad), c[i][0]);
            c[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][1]), _mm512_mul_ps(d1, ad), c[i][1]);
        }
        if (T == 0) {
            const __m512 m0 = _mm512_load_ps(p->dmin[b][0]), m1 = _mm512_load_ps(p->dmin[b][1]);
            UNROLL
            for (int i = 0; i < I; i++) {
                __m512i ms0 = _mm512_setzero_si512(), ms1 = _mm512_setzero_si512();
                UNROLL
                for (int j = 0; j < 8; j++) {
                    int32_t pair;
                    memcpy(&pair, bs[i] + 16 * b + 2 * (size_t)j, 4);
                    const __m512i sp = _mm512_set1_epi32(pair);
                    ms0 = _mm512_dpwssd_epi32(ms0, _mm512_load_si512(p->mp[b][j][0]), sp);
                    ms1 = _mm512_dpwssd_epi32(ms1, _mm512_load_si512(p->mp[b][j][1]), sp);
                }
                const __m512 ad = _mm512_set1_ps(da[i][b]);
                c[i][0] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms0), _mm512_mul_ps(m0, ad), c[i][0]);
                c[i][1] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms1), _mm512_mul_ps(m1, ad), c[i][1]);
            }
        }
    }
    UNROLL
    for (int i = 0; i < I; i++)
        store_row(y + (i0 + i) * ldy + r, c[i][0], c[i][1], nr);
}

#define TILE_K2K3_SWITCH(TV)                                                                       \
    do {                                                                                           \
        size_t i0 = 0;                                                                             \
        for (; i0 + 4 <= m; i0 += 4)                                                               \
            tile_k2k3(&p, kbn, kb0, l, act, i0, 4, y, ldy, r, nr, kb0 == 0, TV);                   \
        switch (m - i0) {                                                                          \
        case 3: tile_k2k3(&p, kbn, kb0, l, act, i0, 3, y, ldy, r, nr, kb0 == 0, TV); break;        \
        case 2: tile_k2k3(&p, kbn, kb0, l, act, i0, 2, y, ldy, r, nr, kb0 == 0, TV); break;        \
        case 1: tile_k2k3(&p, kbn, kb0, l, act, i0, 1, y, ldy, r, nr, kb0 == 0, TV); break;        \
        default: break;                                                                            \
        }                                                                                          \
    } while (0)

T512 static void gemm_k2k3(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                           const void *act, float *y, size_t ldy)
{
    const int T = l->wtype == HR_GGML_Q2_K ? 0 : l->wtype == HR_GGML_Q3_K ? 1 : 2;
    const size_t nb = l->nb, m = l->m, row_bytes = nb * (T == 0 ? 84 : T == 1 ? 110 : 136);
    struct panel_k2k3 p __attribute__((aligned(64)));
    for (size_t r = r0; r < r1; r += NR) {
        const size_t nr = min_sz(NR, r1 - r);
        for (size_t kb0 = 0; kb0 < nb; kb0 += KB_K) {
            const size_t kbn = min_sz(KB_K, nb - kb0);
            const uint8_t *wr = (const uint8_t *)w + r * row_bytes;
            if (T == 0) {
                pack_k2k3(&p, 0, wr, row_bytes, nr, kb0, kbn);
                TILE_K2K3_SWITCH(0);
            } else if (T == 1) {
                pack_k2k3(&p, 1, wr, row_bytes, nr, kb0, kbn);
                TILE_K2K3_SWITCH(1);
            } else {
                pack_k2k3(&p, 2, wr, row_bytes, nr, kb0, kbn);
                TILE_K2K3_SWITCH(2);
            }
        }
    }
}

/* ---- F32 / F16 ---- */

/* In-register transpose of a 16 x 16 f32 block: r[i] row i in, r[e] column
 * e out (16 unpcklps/unpckhps, 16 unpcklpd/unpckhpd, 32 vshuff32x4). */
INLINE T512 void transpose16(__m512 r[16])
{
    __m512 a[16], b[16];
    UNROLL
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    UNROLL
    for (int g = 0; g < 4; g++) {
        const __m512d x0 = _mm512_castps_pd(a[4 * g]), x1 = _mm512_castps_pd(a[4 * g + 1]);
        const __m512d x2 = _mm512_castps_pd(a[4 * g + 2]), x3 = _mm512_castps_pd(a[4 * g + 3]);
        b[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(x0, x2));
        b[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x0, x2));
        b[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(x1, x3));
        b[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(x1, x3));
    }
    /* b[4g + j], 128-bit lane L: element 4L + j of rows 4g .. 4g + 3 */
    UNROLL
    for (int j = 0; j < 4; j++) {
        const __m512 c_lo = _mm512_shuffle_f32x4(b[j], b[4 + j], 0x88);
        const __m512 c_hi = _mm512_shuffle_f32x4(b[j], b[4 + j], 0xDD);
        const __m512 d_lo = _mm512_shuffle_f32x4(b[8 + j], b[12 + j], 0x88);
        const __m512 d_hi = _mm512_shuffle_f32x4(b[8 + j], b[12 + j], 0xDD);
        r[0 + j] = _mm512_shuffle_f32x4(c_lo, d_lo, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(c_lo, d_lo, 0xDD);
        r[4 + j] = _mm512_shuffle_f32x4(c_hi, d_hi, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(c_hi, d_hi, 0xDD);
    }
}

/* Packs rows [0, nr) of a 32-row panel, k in [k0, k0 + kn), widened to f32:
 * 16 x 16 blocks loaded (F16 through vcvtph2ps), transposed in registers,
 * stored as one vector per k. Rows past nr and k past kn are zero. */
T512 static void pack_f32(struct panel_f32 *p, enum hr_ggml_type t, const uint8_t *w, size_t k,
                          size_t nr, size_t k0, size_t kn)
{
    const size_t esz = t == HR_GGML_F32 ? 4 : 2;
    for (size_t v = 0; v < 2; v++) {
        for (size_t g = 0; g < kn; g += 16) {
            const __mmask16 mk = kn - g >= 16 ? 0xffff : (__mmask16)((1u << (kn - g)) - 1);
            __m512 r[16];
            UNROLL
            for (int i = 0; i < 16; i++) {
                const size_t row = 16 * v + (size_t)i;
                const uint8_t *src = w + (row * k + k0 + g) * esz;
                if (row >= nr)
                    r[i] = _mm512_setzero_ps();
                else if (t == HR_GGML_F32)
                    r[i] = _mm512_maskz_loadu_ps(mk, src);
                else
                    r[i] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, src));
            }
            transpose16(r);
            UNROLL
            for (int e = 0; e < 16; e++)
                _mm512_store_ps(p->w[g + (size_t)e][v], r[e]);
        }
    }
}

INLINE T512 void tile_f32(const struct panel_f32 *p, size_t kn, size_t k0,
                          const struct hr_mm_layout *l, const void *act, size_t i0, const int I,
                          float *y, size_t ldy, size_t r, size_t nr, bool first, float *abuf)
{
    const float *a[TILE_F_MAX];
    __m512 c[TILE_F_MAX][2];
    UNROLL
    for (int i = 0; i < I; i++) {
        if (l->wtype == HR_GGML_F16) {
            /* F16 activations are widened once per tile and chunk (3% of the fmas) */
            const uint16_t *h = hr_mm_u16(l, act, i0 + i) + k0;
            for (size_t j = 0; j < kn; j += 16) /* rows are zero-padded to 32 */
                _mm512_store_ps(abuf + i * KC_F32 + j,
                                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + j))));
            a[i] = abuf + i * KC_F32;
        } else {
            a[i] = hr_mm_f32(l, act, i0 + i) + k0;
        }
        if (first)
            c[i][0] = c[i][1] = _mm512_setzero_ps();
        else
            load_row(y + (i0 + i) * ldy + r, &c[i][0], &c[i][1], nr);
    }
    for (size_t j = 0; j < kn; j++) {
        const __m512 w0 = _mm512_load_ps(p->w[j][0]), w1 = _mm512_load_ps(p->w[j][1]);
        UNROLL
        for (int i = 0; i < I; i++) {
            const __m512 av = _mm512_set1_ps(a[i][j]);
            c[i][0] = _mm512_fmadd_ps(w0, av, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(w1, av, c[i][1]);
        }
    }
    UNROLL
    for (int i = 0; i < I; i++)
        store_row(y + (i0 + i) * ldy + r, c[i][0], c[i][1], nr);
}

T512 static void gemm_f32(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                          const void *act, float *y, size_t ldy)
{
    const enum hr_ggml_type t = l->wtype;
    const size_t k = l->k, m = l->m, esz = t == HR_GGML_F32 ? 4 : 2;
    struct panel_f32 p __attribute__((aligned(64)));
    float abuf[TILE_F_MAX * KC_F32] __attribute__((aligned(64))); /* widened F16 activations */
    for (size_t r = r0; r < r1; r += NR) {
        const size_t nr = min_sz(NR, r1 - r);
        for (size_t k0 = 0; k0 < k; k0 += KC_F32) {
            const size_t kn = min_sz(KC_F32, k - k0);
            pack_f32(&p, t, (const uint8_t *)w + r * k * esz, k, nr, k0, kn);
            size_t i0 = 0;
            for (; i0 + 12 <= m; i0 += 12)
                tile_f32(&p, kn, k0, l, act, i0, 12, y, ldy, r, nr, k0 == 0, abuf);
            const size_t left = m - i0;
            if (left >= 8) {
                tile_f32(&p, kn, k0, l, act, i0, 8, y, ldy, r, nr, k0 == 0, abuf);
                i0 += 8;
            } else if (left >= 4) {
                tile_f32(&p, kn, k0, l, act, i0, 4, y, ldy, r, nr, k0 == 0, abuf);
                i0 += 4;
            }
            for (; i0 < m; i0++)
                tile_f32(&p, kn, k0, l, act, i0, 1, y, ldy, r, nr, k0 == 0, abuf);
        }
    }
}

/* ---- BF16 (vdpbf16ps) ---- */

T512 static void pack_bf16(struct panel_bf16 *p, const uint16_t *w, size_t k, size_t nr,
                           size_t k0, size_t kn)
{
    const size_t np = (kn + 1) / 2;
    for (size_t rr = 0; rr < NR; rr++) {
        const size_t v = rr / 16, lane = rr % 16;
        const uint16_t *src = w + rr * k + k0;
        for (size_t j = 0; j < np; j++) {
            uint32_t lo = 0, hi = 0;
            if (rr < nr) {
                lo = src[2 * j];
                hi = 2 * j + 1 < kn ? src[2 * j + 1] : 0;
            }
            p->w[j][v][lane] = lo | hi << 16;
        }
    }
}

INLINE T512BF void tile_bf16(const struct panel_bf16 *p, size_t np, size_t k0,
                             const struct hr_mm_layout *l, const void *act, size_t i0, const int I,
                             float *y, size_t ldy, size_t r, size_t nr, bool first)
{
    const uint16_t *a[TILE_F_MAX];
    __m512 c[TILE_F_MAX][2];
    UNROLL
    for (int i = 0; i < I; i++) {
        a[i] = hr_mm_u16(l, act, i0 + i) + k0;
        if (first)
            c[i][0] = c[i][1] = _mm512_setzero_ps();
        else
            load_row(y + (i0 + i) * ldy + r, &c[i][0], &c[i][1], nr);
    }
    for (size_t j = 0; j < np; j++) {
        const __m512bh w0 = (__m512bh)_mm512_load_si512(p->w[j][0]);
        const __m512bh w1 = (__m512bh)_mm512_load_si512(p->w[j][1]);
        UNROLL
        for (int i = 0; i < I; i++) {
            int32_t pair;
            memcpy(&pair, a[i] + 2 * j, 4);
            const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
            c[i][0] = _mm512_dpbf16_ps(c[i][0], w0, av);
            c[i][1] = _mm512_dpbf16_ps(c[i][1], w1, av);
        }
    }
    UNROLL
    for (int i = 0; i < I; i++)
        store_row(y + (i0 + i) * ldy + r, c[i][0], c[i][1], nr);
}

T512BF static void gemm_bf16(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                             const void *act, float *y, size_t ldy)
{
    const size_t k = l->k, m = l->m;
    struct panel_bf16 p __attribute__((aligned(64)));
    for (size_t r = r0; r < r1; r += NR) {
        const size_t nr = min_sz(NR, r1 - r);
        for (size_t k0 = 0; k0 < k; k0 += KC_BF16) {
            const size_t kn = min_sz(KC_BF16, k - k0), np = (kn + 1) / 2;
            pack_bf16(&p, (const uint16_t *)w + r * k, k, nr, k0, kn);
            size_t i0 = 0;
            for (; i0 + 12 <= m; i0 += 12)
                tile_bf16(&p, np, k0, l, act, i0, 12, y, ldy, r, nr, k0 == 0);
            if (m - i0 >= 4) {
                tile_bf16(&p, np, k0, l, act, i0, 4, y, ldy, r, nr, k0 == 0);
                i0 += 4;
            }
            if (m - i0 >= 4) {
                tile_bf16(&p, np, k0, l, act, i0, 4, y, ldy, r, nr, k0 == 0);
                i0 += 4;
            }
            for (; i0 < m; i0++)
                tile_bf16(&p, np, k0, l, act, i0, 1, y, ldy, r, nr, k0 == 0);
        }
    }
}

/* ======================================================================== */
/* F32 / F16 / BF16: one summation order for every m                        */
/* ======================================================================== */

/*
 * The float types are batch invariant by construction: every output, at any
 * m, is one 16-lane accumulator per (row, token) that walks k in steps of 16
 * (vfmadd231ps; F16 and BF16 widened on load) or 32 (vdpbf16ps, products of
 * pairs), a masked tail, then one fixed horizontal reduction. Decode and
 * prefill differ only in the tile shape (rows x tokens held in registers),
 * which changes which outputs are computed together, never the order of one
 * output's sum. So a token gets the same bits whether it is decoded alone or
 * batched with a long prefill (tests/unit/test-engine.c checks exactly that).
 *
 * Cost: the k lanes need no packing or transposing; a tile of 4 rows x 6
 * tokens keeps 24 accumulators, and each step loads 4 weight and 6
 * activation vectors for 24 fmas (fma-bound). Panels of rows whose weights
 * fit in ~256 KiB of L2 are swept by every token tile, so each weight byte
 * comes from DRAM once per call; the activations, re-read per panel, come
 * from L2/L3.
 */
/* Decode (one token) takes 4 rows at a time, like prefill. 8 rows read 8
 * interleaved streams, which at 4 KiB rows (Llama-1B F16) also share one L1
 * set: bench-matmul at m = 1, 2 threads, medians of 3 rounds next to ggml's
 * one-row kernel on the Llama-1B F16 shapes: 0.77 of ggml's GB/s with 8
 * rows, 0.92 with 4, 0.89 with 1 (latency-bound: one fma chain per output).
 * The tile shape never changes a result. */
#define FT_MAX_R 4
#define FT_MAX_I 6
#ifndef FT_PF_MAX_I
#define FT_PF_MAX_I 2 /* prefetch at decode-like tiles only */
#endif
#ifndef FT_PF_DIST
#define FT_PF_DIST 1024
#endif
#ifndef FT_PF_LONG
#define FT_PF_LONG 8193 /* rows longer than this prefetch per row, shorter ones the next tile */
#endif

/* 16 values k = j .. j + 15 of a row of packed F16 (row start `wr`). */
INLINE T512 __m512 load_f16p(const uint8_t *wr, size_t j)
{
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wr + j / 16 * HR_MM_F16P_CHUNK)));
}

/* `packed`: F16 weights packed at load (matmul-impl.h), rows interleaved 4
 * at a time in 16-value chunks, k padded with zeros: the same values in the
 * same order as the row-major masked loads, so the same bits. */
INLINE T512 void ftile(const struct hr_mm_layout *l, const void *w, size_t r, const int R,
                       const void *act, size_t i0, const int I, float *y, size_t ldy,
                       const bool packed)
{
    const size_t k = l->k;
    const enum hr_ggml_type wt = l->wtype;
    const size_t esz = wt == HR_GGML_F32 ? 4 : 2;
    const size_t kp = packed ? (k + 15) / 16 * 16 : k; /* values per (padded) row */
    const uint8_t *wr[FT_MAX_R];
    const void *a[FT_MAX_I];
    __m512 acc[FT_MAX_R][FT_MAX_I];
    UNROLL
    for (int u = 0; u < R; u++)
        wr[u] = packed ? (const uint8_t *)w + hr_mm_f16p_row_off(r + (size_t)u, kp)
                       : (const uint8_t *)w + (r + (size_t)u) * k * esz;
    /* F16's inputs from their widened copy (a32: no conversion here) */
    const bool a32 = wt == HR_GGML_F32 || wt == HR_GGML_F16;
    UNROLL
    for (int i = 0; i < I; i++) {
        a[i] = wt == HR_GGML_F32   ? (const void *)hr_mm_f32(l, act, i0 + i)
               : wt == HR_GGML_F16 ? (const void *)hr_mm_a32(l, act, i0 + i)
                                   : (const void *)hr_mm_u16(l, act, i0 + i);
        UNROLL
        for (int u = 0; u < R; u++)
            acc[u][i] = _mm512_setzero_ps();
    }
    /* The R rows are one contiguous span; at few tokens the loop is
     * memory-bound and R short interleaved streams defeat the hardware
     * prefetcher, so the next tile's span is prefetched at the rate this one
     * is consumed (R * 16 * esz bytes per step), into L2 (bench-matmul, m =
     * 1, 2 threads, F16 shapes next to ggml: 0.87 of ggml's GB/s into L1,
     * 0.96 into L2, 0.67 without). */
    const uint8_t *next = wr[0] + (size_t)R * kp * esz; /* packed: the next group */
    const size_t pf_step = (size_t)R * 16 * esz;
    const bool long_rows = !packed && k * esz >= FT_PF_LONG;
    size_t j = 0;
    for (; j + 16 <= k; j += 16) {
        if (I <= FT_PF_MAX_I) {
            if (long_rows) {
                if ((j * esz) % 64 == 0) {
                    UNROLL
                    for (int u = 0; u < R; u++)
                        _mm_prefetch((const char *)wr[u] + j * esz + FT_PF_DIST, _MM_HINT_T1);
                }
            } else {
                for (size_t o = 0; o < pf_step; o += 64)
                    _mm_prefetch((const char *)next + j / 16 * pf_step + o, _MM_HINT_T1);
            }
        }
        __m512 wv[FT_MAX_R];
        UNROLL
        for (int u = 0; u < R; u++)
            wv[u] = packed ? load_f16p(wr[u], j) : load_w16(wt, wr[u], j, 0xffff);
        UNROLL
        for (int i = 0; i < I; i++) {
            const __m512 av = a32 ? _mm512_loadu_ps((const float *)a[i] + j) : load_a16(wt, a[i], j);
            UNROLL
            for (int u = 0; u < R; u++)
                acc[u][i] = _mm512_fmadd_ps(wv[u], av, acc[u][i]);
        }
    }
    if (j < k) { /* activation padding is zero, weights masked (packed: zero) */
        const __mmask16 mk = (__mmask16)((1u << (k - j)) - 1);
        __m512 wv[FT_MAX_R];
        UNROLL
        for (int u = 0; u < R; u++)
            wv[u] = packed ? load_f16p(wr[u], j) : load_w16(wt, wr[u], j, mk);
        UNROLL
        for (int i = 0; i < I; i++) {
            const __m512 av = a32 ? _mm512_loadu_ps((const float *)a[i] + j) : load_a16(wt, a[i], j);
            UNROLL
            for (int u = 0; u < R; u++)
                acc[u][i] = _mm512_fmadd_ps(wv[u], av, acc[u][i]);
        }
    }
    UNROLL
    for (int i = 0; i < I; i++) {
        UNROLL
        for (int u = 0; u < R; u++)
            y[(i0 + (size_t)i) * ldy + r + (size_t)u] = _mm512_reduce_add_ps(acc[u][i]);
    }
}

/* The same with vdpbf16ps: 32 bf16 of k per step, lane l summing the
 * products of k = 32s + 2l and 32s + 2l + 1. */
INLINE T512BF void ftile_bf16(const struct hr_mm_layout *l, const void *w, size_t r, const int R,
                              const void *act, size_t i0, const int I, float *y, size_t ldy)
{
    const size_t k = l->k;
    const uint16_t *wr[FT_MAX_R], *a[FT_MAX_I];
    __m512 acc[FT_MAX_R][FT_MAX_I];
    UNROLL
    for (int u = 0; u < R; u++)
        wr[u] = (const uint16_t *)w + (r + (size_t)u) * k;
    UNROLL
    for (int i = 0; i < I; i++) {
        a[i] = hr_mm_u16(l, act, i0 + i);
        UNROLL
        for (int u = 0; u < R; u++)
            acc[u][i] = _mm512_setzero_ps();
    }
    for (size_t j = 0; j < k; j += 32) {
        const __mmask32 mk = j + 32 <= k ? 0xffffffffu : (__mmask32)((1u << (k - j)) - 1);
        __m512bh wv[FT_MAX_R];
        UNROLL
        for (int u = 0; u < R; u++)
            wv[u] = (__m512bh)_mm512_maskz_loadu_epi16(mk, wr[u] + j);
        UNROLL
        for (int i = 0; i < I; i++) { /* activation padding is zero */
            const __m512bh av = (__m512bh)_mm512_loadu_si512(a[i] + j);
            UNROLL
            for (int u = 0; u < R; u++)
                acc[u][i] = _mm512_dpbf16_ps(acc[u][i], wv[u], av);
        }
    }
    UNROLL
    for (int i = 0; i < I; i++) {
        UNROLL
        for (int u = 0; u < R; u++)
            y[(i0 + (size_t)i) * ldy + r + (size_t)u] = _mm512_reduce_add_ps(acc[u][i]);
    }
}

#define FT_SWEEP(TILE)                                                                             \
    do {                                                                                           \
        const size_t m = l->m, esz = l->wtype == HR_GGML_F32 ? 4 : 2;                              \
        size_t pr = (256u << 10) / (l->k * esz) / 4 * 4;                                           \
        if (pr < 4)                                                                                \
            pr = 4;                                                                                \
        for (size_t p0 = r0; p0 < r1; p0 += pr) {                                                  \
            const size_t p1 = min_sz(p0 + pr, r1);                                                 \
            for (size_t i0 = 0; i0 < m;) {                                                         \
                const int I = (int)min_sz(FT_MAX_I, m - i0);                                       \
                size_t r = p0;                                                                     \
                switch (I) {                                                                       \
                case 1: for (; r + 4 <= p1; r += 4) TILE(l, w, r, 4, act, i0, 1, y, ldy); break;   \
                case 2: for (; r + 4 <= p1; r += 4) TILE(l, w, r, 4, act, i0, 2, y, ldy); break;   \
                case 3: for (; r + 4 <= p1; r += 4) TILE(l, w, r, 4, act, i0, 3, y, ldy); break;   \
                case 4: for (; r + 4 <= p1; r += 4) TILE(l, w, r, 4, act, i0, 4, y, ldy); break;   \
                case 5: for (; r + 4 <= p1; r += 4) TILE(l, w, r, 4, act, i0, 5, y, ldy); break;   \
                default: for (; r + 4 <= p1; r += 4) TILE(l, w, r, 4, act, i0, 6, y, ldy); break;  \
                }                                                                                  \
                for (; r < p1; r++)                                                                \
                    for (int i = 0; i < I; i++)                                                    \
                        TILE(l, w, r, 1, act, i0 + (size_t)i, 1, y, ldy);                          \
                i0 += (size_t)I;                                                                   \
            }                                                                                      \
        }                                                                                          \
    } while (0)

INLINE T512 void ftile_rm(const struct hr_mm_layout *l, const void *w, size_t r, const int R,
                          const void *act, size_t i0, const int I, float *y, size_t ldy)
{
    ftile(l, w, r, R, act, i0, I, y, ldy, false);
}

INLINE T512 void ftile_pk(const struct hr_mm_layout *l, const void *w, size_t r, const int R,
                          const void *act, size_t i0, const int I, float *y, size_t ldy)
{
    ftile(l, w, r, R, act, i0, I, y, ldy, true);
}

T512 static void float_mm(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                          const void *act, float *y, size_t ldy)
{
    FT_SWEEP(ftile_rm);
}

/* F16 packed at load: the same tiles on one sequential stream per thread
 * (r0 is a multiple of 32, so every 4-row tile is one packed group). */
T512 static void float_mm_packed(const struct hr_mm_layout *l, const void *w, size_t r0,
                                 size_t r1, const void *act, float *y, size_t ldy)
{
    FT_SWEEP(ftile_pk);
}

T512BF static void float_mm_bf16(const struct hr_mm_layout *l, const void *w, size_t r0,
                                 size_t r1, const void *act, float *y, size_t ldy)
{
    FT_SWEEP(ftile_bf16);
}

/* ======================================================================== */

T512 static void compute_avx512(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                                const void *act, float *y, size_t ldy)
{
    if (k2k3_type(l->wtype)) { /* Q2_K, Q3_K, IQ4_XS */
        if (l->m >= gemm_min_m(l->wtype))
            gemm_k2k3(l, w, r0, r1, act, y, ldy);
        else if (hr_kernels_batch_invariant())
            gemv_k2k3_invariant(l, w, r0, r1, act, y, ldy); /* the GEMM's float order */
        else
            compute_k2k3(l, w, r0, r1, act, y, ldy); /* free-running */
        return;
    }
    const bool is_float = l->wtype == HR_GGML_F32 || l->wtype == HR_GGML_F16 ||
                          l->wtype == HR_GGML_BF16;
    if (is_float && hr_kernels_batch_invariant()) {
        if (l->wtype == HR_GGML_BF16 && hr_mm_cpu_has_avx512bf16())
            float_mm_bf16(l, w, r0, r1, act, y, ldy);
        else
            float_mm(l, w, r0, r1, act, y, ldy);
        return;
    }
    if (l->m < gemm_min_m(l->wtype)) {
        if (l->wtype == HR_GGML_BF16 && hr_mm_cpu_has_avx512bf16())
            gemv_bf16_avx512(l, w, r0, r1, act, y, ldy);
        else
            gemv_avx512(l, w, r0, r1, act, y, ldy);
        return;
    }
    switch (l->wtype) {
    case HR_GGML_Q8_0: gemm_q8_0_t(l, w, r0, r1, act, y, ldy, HR_GGML_Q8_0); break;
    case HR_GGML_Q4_0: gemm_q8_0_t(l, w, r0, r1, act, y, ldy, HR_GGML_Q4_0); break;
    case HR_GGML_Q4_1: gemm_q8_0_t(l, w, r0, r1, act, y, ldy, HR_GGML_Q4_1); break;
    case HR_GGML_Q5_0: gemm_q8_0_t(l, w, r0, r1, act, y, ldy, HR_GGML_Q5_0); break;
    case HR_GGML_Q5_1: gemm_q8_0_t(l, w, r0, r1, act, y, ldy, HR_GGML_Q5_1); break;
    case HR_GGML_IQ4_NL: gemm_q8_0_t(l, w, r0, r1, act, y, ldy, HR_GGML_IQ4_NL); break;
    case HR_GGML_MXFP4: gemm_q8_0_t(l, w, r0, r1, act, y, ldy, HR_GGML_MXFP4); break;
    case HR_GGML_Q4_K:
    case HR_GGML_Q5_K:
    case HR_GGML_Q6_K: gemm_k(l, w, r0, r1, act, y, ldy); break;
    case HR_GGML_BF16:
        if (hr_mm_cpu_has_avx512bf16())
            gemm_bf16(l, w, r0, r1, act, y, ldy);
        else
            gemv_avx512(l, w, r0, r1, act, y, ldy);
        break;
    default: gemm_f32(l, w, r0, r1, act, y, ldy); break;
    }
}

T512 static void compute_packed_avx512(const struct hr_mm_layout *l, const void *w, size_t r0,
                                       size_t r1, const void *act, float *y, size_t ldy)
{
    if (l->wtype == HR_GGML_F16)
        float_mm_packed(l, w, r0, r1, act, y, ldy);
    else if (l->wtype == HR_GGML_Q4_K && l->m < gemm_min_m(HR_GGML_Q4_K))
        gemv_q4kp(l, w, r0, r1, act, y, ldy);
    else if (l->wtype == HR_GGML_Q4_K)
        gemm_q4kp(l, w, r0, r1, act, y, ldy);
    else
        gemm_q8_0_packed(l, w, r0, r1, act, y, ldy);
}

const struct hr_mm_isa hr_mm_isa_avx512 = {
    .name = "avx512vnni",
    .row_align = NR,
    .prepare = prepare_avx512,
    .compute = compute_avx512,
    .compute_packed = compute_packed_avx512,
};

#endif
