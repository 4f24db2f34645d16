/*
 * matmul-avx2.c - AVX2 + FMA + F16C matmul kernels, for x86 CPUs without
 * AVX-512 (and a second, independently tested implementation on those with).
 *
 * One shape for every m: the decode kernels of matmul-gemv-x86.h (built here
 * without VNNI: vpmaddubsw + vpmaddwd instead of vpdpbusd / vpdpwssd; Q8_0
 * multiplies |w| by sign(w) * a as ggml's AVX2 code does) over blocks of 16
 * weight rows, each block reused from L1/L2 for every group of 4 tokens. It
 * is a fallback, not a GEMM: prefill here runs at GEMV speed times 4 tokens
 * per weight load, well below the AVX-512 packed kernels. Activations for
 * Q8_0/Q4_0 and F16 weights are converted here, the others by the plain C
 * prepare (O(m k) against the O(m k n_out) of the product).
 *
 * Every function has a target attribute, so a portable build carries this
 * file and matmul.c picks it from CPUID. Tested against hr_mm_dot_ref in
 * tests/unit/test-kernels.c.
 */
#include "kernels/matmul-impl.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

#define T2 __attribute__((target("avx2,fma,f16c,bmi2")))
#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

#define HR_GEMV_TARGET T2
#define HR_GEMV_VNNI 0
#include "kernels/matmul-gemv-x86.h"
#include "kernels/matmul-k2k3-x86.h"

#define ROW_BLOCK 16 /* weight rows kept in cache while every token group passes */

/* hr_quantize_row_q8_0_act, vectorized the way ggml-cpu's AVX2 code is (the
 * maximum in SIMD order, 127 / amax, vroundps to nearest even, saturating
 * packs), so the bytes are the reference's. */
T2 static void prep_q8_0_row(const float *x, size_t nb, int8_t *qs, float *d, int32_t *comp,
                             int32_t *comp4, int32_t *comp5)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (size_t b = 0; b < nb; b++) {
        __m256 v[4];
        for (int j = 0; j < 4; j++)
            v[j] = _mm256_loadu_ps(x + 32 * b + 8 * (size_t)j);
        __m256 am = _mm256_andnot_ps(sign, v[0]);
        for (int j = 1; j < 4; j++)
            am = _mm256_max_ps(am, _mm256_andnot_ps(sign, v[j]));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(am, 1), _mm256_castps256_ps128(am));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        d[b] = hr_f16_to_f32(hr_f32_to_f16(amax / 127.f));
        const __m256 mul = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        __m256i q[4];
        for (int j = 0; j < 4; j++)
            q[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], mul), _MM_ROUND_NEAREST));
        const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(qs + 32 * b), p);
        /* the quants are within [-127, 127] for finite input; otherwise
         * (inf * 0 = NaN saturates to -128) sum the stored bytes */
        int32_t s = hsum256_epi32(sum);
        if (!(amax <= 3.4028235e38f)) {
            s = 0;
            for (int j = 0; j < 32; j++)
                s += qs[32 * b + (size_t)j];
        }
        comp[b] = -128 * s;
        comp4[b] = -8 * s;
        comp5[b] = -16 * s;
    }
}

/* Q8_0 rows and F16 rows vectorized; the other formats through the plain C
 * converter (their share of a matmul's time is O(1 / n_out)). */
T2 static void prepare_avx2(const struct hr_mm_layout *l, const float *x, size_t i0, size_t i1,
                            void *act)
{
    const enum hr_ggml_type vt = hr_matmul_vec_dot_type(l->wtype);
    if (vt != HR_GGML_Q8_0 && vt != HR_GGML_F16) {
        hr_mm_prepare_generic(l, x, i0, i1, act);
        return;
    }
    uint8_t *base = act;
    const size_t k = l->k;
    for (size_t i = i0; i < i1; i++) {
        const float *xi = x + i * k;
        if (vt == HR_GGML_Q8_0) {
            int8_t *qs = (int8_t *)(base + l->qs_off + i * l->qs_stride);
            prep_q8_0_row(xi, l->nb, qs, (float *)(base + l->d_off) + i * l->nb,
                          (int32_t *)(base + l->comp_off) + i * l->nb,
                          (int32_t *)(base + l->comp4_off) + i * l->nb,
                          (int32_t *)(base + l->comp5_off) + i * l->nb);
            memset(qs + k, 0, l->qs_stride - k);
        } else {
            uint16_t *row = (uint16_t *)(base + l->qs_off + i * l->qs_stride);
            size_t j = 0;
            for (; j + 8 <= k; j += 8)
                _mm_storeu_si128((__m128i *)(row + j),
                                 _mm256_cvtps_ph(_mm256_loadu_ps(xi + j), _MM_FROUND_TO_NEAREST_INT));
            for (; j < k; j++)
                row[j] = hr_f32_to_f16(xi[j]);
            memset(row + k, 0, l->qs_stride - k * sizeof(uint16_t));
            hr_mm_widen_f16_row(l, act, i);
        }
    }
}

/* 8 weights of a float type as f32; `src` holds at least 8 of them. */
INLINE T2 __m256 load_w8(enum hr_ggml_type wt, const uint8_t *src)
{
    if (wt == HR_GGML_F32)
        return _mm256_loadu_ps((const float *)src);
    const __m128i h = _mm_loadu_si128((const __m128i *)src);
    if (wt == HR_GGML_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE T2 __m256 load_a8(enum hr_ggml_type wt, const void *a, size_t j)
{
    if (wt == HR_GGML_F32)
        return _mm256_loadu_ps((const float *)a + j);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)a + j));
    if (wt == HR_GGML_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* F32 / F16 / BF16 rows: 32 values per step in four accumulators per token;
 * the last partial step goes through a zero-padded copy of the weights (the
 * activation rows are zero-padded by prepare). */
INLINE T2 void gemv_float(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
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
        __m256 acc[GEMV_MAX_M][4];
        UNROLL
        for (int i = 0; i < M; i++)
            acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm256_setzero_ps();
        for (size_t j = 0; j < k; j += 32) {
            uint8_t tail[32 * 4] __attribute__((aligned(32)));
            const uint8_t *src = wr + j * esz;
            if (j + 32 > k) {
                memset(tail, 0, sizeof(tail));
                memcpy(tail, src, (k - j) * esz);
                src = tail;
            }
            __m256 wv[4];
            UNROLL
            for (int u = 0; u < 4; u++)
                wv[u] = load_w8(wt, src + 8 * (size_t)u * esz);
            UNROLL
            for (int i = 0; i < M; i++) {
                UNROLL
                for (int u = 0; u < 4; u++)
                    acc[i][u] = _mm256_fmadd_ps(wv[u], load_a8(wt, a[i], j + 8 * (size_t)u), acc[i][u]);
            }
        }
        UNROLL
        for (int i = 0; i < M; i++)
            y[(i0 + i) * ldy + r] = hsum256(
                _mm256_add_ps(_mm256_add_ps(acc[i][0], acc[i][1]), _mm256_add_ps(acc[i][2], acc[i][3])));
    }
}

T2 static void compute_avx2(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                            const void *act, float *y, size_t ldy)
{
    if (k2k3_type(l->wtype)) { /* Q2_K, Q3_K, IQ4_XS: matmul-k2k3-x86.h */
        compute_k2k3(l, w, r0, r1, act, y, ldy);
        return;
    }
    const size_t m = l->m;
    const bool quant = l->wtype != HR_GGML_F32 && l->wtype != HR_GGML_F16 &&
                       l->wtype != HR_GGML_BF16;
    /* One pass when m is small (decode: stream the weights once); otherwise
     * blocks of rows, each reused from cache by every token group. */
    const size_t rb = m <= GEMV_MAX_M ? r1 - r0 : ROW_BLOCK;
    for (size_t rb0 = r0; rb0 < r1; rb0 += rb) {
        const size_t rb1 = rb0 + rb < r1 ? rb0 + rb : r1;
        if (quant) {
            gemv_quant(l, w, rb0, rb1, act, 0, m, y, ldy);
        } else {
#define C(M) gemv_float(l, w, rb0, rb1, act, i0, M, y, ldy)
            GEMV_DISPATCH(C)
#undef C
        }
    }
}

const struct hr_mm_isa hr_mm_isa_avx2 = {
    .name = "avx2",
    .row_align = 8,
    .prepare = prepare_avx2,
    .compute = compute_avx2,
};

#endif
