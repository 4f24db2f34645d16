/*
 * matmul-ref.c - the plain-C reference: activation conversion into the act
 * layout (matmul-impl.h), one dot product per (weight, vec-dot) pair, and the
 * "generic" implementation built from them (the fallback on CPUs without
 * AVX2, and what tests/unit/test-kernels.c holds every SIMD kernel to).
 *
 * The dot products follow ggml's definitions (ggml-cpu/quants.c and the x86
 * kernels in arch/x86/quants.c): per block an exact integer sum, scaled by
 * f32(d_w) * d_a rounded to f32; the K-quants sum sub-block scales times
 * sub-block sums in integers and subtract the mins (Q4_K, Q5_K) through
 * Q8_K's bsums; Q4_1 / Q5_1 add m_w * s_a per block (Q8_1's s). Only the order of the float accumulation differs from
 * ggml's SIMD code; here it is a double, so the reference is the exact value
 * of ggml's per-block terms to within one rounding.
 *
 * Cost: about 1 ns per weight (scalar); never the fast path where AVX2 exists.
 */
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/matmul-impl.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

/* ---- activation conversion ----------------------------------------------- */

void hr_mm_prepare_generic(const struct hr_mm_layout *l, const float *x, size_t i0, size_t i1,
                           void *act)
{
    const size_t k = l->k;
    uint8_t *base = act;
    for (size_t i = i0; i < i1; i++) {
        const float *xi = x + i * k;
        switch (hr_matmul_vec_dot_type(l->wtype)) {
        case HR_GGML_Q8_0: {
            int8_t *qs = (int8_t *)(base + l->qs_off + i * l->qs_stride);
            float *d = (float *)(base + l->d_off) + i * l->nb;
            int32_t *comp = (int32_t *)(base + l->comp_off) + i * l->nb;
            int32_t *comp4 = (int32_t *)(base + l->comp4_off) + i * l->nb;
            int32_t *comp5 = (int32_t *)(base + l->comp5_off) + i * l->nb;
            for (size_t b = 0; b < l->nb; b++) {
                struct hr_block_q8_0 blk;
                hr_quantize_row_q8_0_act(xi + 32 * b, &blk, 32);
                int32_t sum = 0;
                for (int j = 0; j < 32; j++)
                    sum += blk.qs[j];
                memcpy(qs + 32 * b, blk.qs, 32);
                d[b] = hr_f16_to_f32(blk.d);
                comp[b] = -128 * sum;
                comp4[b] = -8 * sum;
                comp5[b] = -16 * sum;
            }
            memset(qs + k, 0, l->qs_stride - k);
            break;
        }
        case HR_GGML_Q8_1: {
            int8_t *qs = (int8_t *)(base + l->qs_off + i * l->qs_stride);
            float *d = (float *)(base + l->d_off) + i * l->nb;
            int32_t *comp = (int32_t *)(base + l->comp_off) + i * l->nb;
            float *sa = (float *)(base + l->s_off) + i * l->nb;
            for (size_t b = 0; b < l->nb; b++) {
                struct hr_block_q8_1 blk;
                hr_quantize_row_q8_1_act(xi + 32 * b, &blk, 32);
                memcpy(qs + 32 * b, blk.qs, 32);
                d[b] = hr_f16_to_f32(blk.d);
                comp[b] = 0;
                sa[b] = hr_f16_to_f32(blk.s);
            }
            memset(qs + k, 0, l->qs_stride - k);
            break;
        }
        case HR_GGML_Q8_K: {
            int8_t *qs = (int8_t *)(base + l->qs_off + i * l->qs_stride);
            float *d = (float *)(base + l->d_off) + i * l->nb;
            int16_t *bsum = (int16_t *)(base + l->bsum_off) + i * l->nb * 16;
            for (size_t b = 0; b < l->nb; b++) {
                struct hr_block_q8_K blk;
                hr_quantize_row_q8_K(xi + 256 * b, &blk, 256);
                memcpy(qs + 256 * b, blk.qs, 256);
                d[b] = blk.d;
                memcpy(bsum + 16 * b, blk.bsums, sizeof(blk.bsums));
                int32_t *c16 = (int32_t *)(base + l->comp16_off) + i * l->nb * 16 + 16 * b;
                for (int j = 0; j < 16; j++)
                    c16[j] = -32 * blk.bsums[j];
                int16_t *s32 = (int16_t *)(base + l->sum32_off) + i * l->nb * 8 + 8 * b;
                for (int j = 0; j < 8; j++)
                    s32[j] = (int16_t)(blk.bsums[2 * j] + blk.bsums[2 * j + 1]);
            }
            memset(qs + k, 0, l->qs_stride - k);
            break;
        }
        case HR_GGML_BF16: {
            uint16_t *row = (uint16_t *)(base + l->qs_off + i * l->qs_stride);
            hr_convert_row_bf16(xi, row, k);
            memset(row + k, 0, l->qs_stride - k * sizeof(uint16_t));
            break;
        }
        case HR_GGML_F16: {
            uint16_t *row = (uint16_t *)(base + l->qs_off + i * l->qs_stride);
            hr_convert_row_f16(xi, row, k);
            memset(row + k, 0, l->qs_stride - k * sizeof(uint16_t));
            hr_mm_widen_f16_row(l, act, i);
            break;
        }
        default: {
            float *row = (float *)(base + l->qs_off + i * l->qs_stride);
            memcpy(row, xi, k * sizeof(float));
            memset(row + k, 0, l->qs_stride - k * sizeof(float));
            break;
        }
        }
    }
}

/* ---- reference dot products ---------------------------------------------- */

static float dot_q8_0(const struct hr_mm_layout *l, const struct hr_block_q8_0 *w,
                      const void *act, size_t i)
{
    const int8_t *a = hr_mm_qs(l, act, i);
    const float *da = hr_mm_d(l, act, i);
    double sum = 0;
    for (size_t b = 0; b < l->nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += w[b].qs[j] * a[32 * b + j];
        const float d = hr_f16_to_f32(w[b].d) * da[b];
        sum += (double)d * (double)(float)isum;
    }
    return (float)sum;
}

static float dot_q4_0(const struct hr_mm_layout *l, const struct hr_block_q4_0 *w,
                      const void *act, size_t i)
{
    const int8_t *a = hr_mm_qs(l, act, i);
    const float *da = hr_mm_d(l, act, i);
    double sum = 0;
    for (size_t b = 0; b < l->nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((w[b].qs[j] & 0xF) - 8) * a[32 * b + j];
            isum += ((w[b].qs[j] >> 4) - 8) * a[32 * b + j + 16];
        }
        const float d = hr_f16_to_f32(w[b].d) * da[b];
        sum += (double)d * (double)(float)isum;
    }
    return (float)sum;
}

const uint8_t hr_mm_iq4nl_u8[16] = {1, 24, 45, 63, 79, 93, 106, 118,
                                    129, 141, 153, 166, 181, 197, 217, 241};
const uint8_t hr_mm_mxfp4_u8[16] = {128, 129, 130, 131, 132, 134, 136, 140,
                                    128, 127, 126, 125, 124, 122, 120, 116};

/* The signed value (what multiplies d) of quant j of a 32-value block. */
static int b32_value(enum hr_ggml_type t, const uint8_t *blk, int j)
{
    const uint8_t *qs = blk + hr_mm_b32_qs_off(t);
    if (t == HR_GGML_Q8_0)
        return (int8_t)qs[j];
    int q = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
    if (t == HR_GGML_Q5_0 || t == HR_GGML_Q5_1) {
        uint32_t h;
        memcpy(&h, blk + hr_mm_b32_qh_off(t), 4);
        q |= (int)((h >> j) & 1) << 4;
    }
    switch (t) {
    case HR_GGML_Q4_0: return q - 8;
    case HR_GGML_Q5_0: return q - 16;
    case HR_GGML_IQ4_NL: return hr_iq4nl_values[q];
    case HR_GGML_MXFP4: return hr_mxfp4_values[q];
    default: return q; /* Q4_1, Q5_1 */
    }
}

/* Block scale (and offset) of a 32-value block as f32. */
static float b32_scale(enum hr_ggml_type t, const uint8_t *blk)
{
    if (t == HR_GGML_MXFP4)
        return hr_e8m0_to_f32_half(blk[0]);
    uint16_t h;
    memcpy(&h, blk, 2);
    return hr_f16_to_f32(h);
}

/* Every 32-value block type: per block the exact integer sum, times
 * f32(d_w) * d_a, plus m_w * s_a for Q4_1 / Q5_1 (ggml's vec_dot). */
static float dot_b32(const struct hr_mm_layout *l, const uint8_t *w, const void *act, size_t i)
{
    const enum hr_ggml_type t = l->wtype;
    const size_t bb = hr_mm_b32_bytes(t);
    const int8_t *a = hr_mm_qs(l, act, i);
    const float *da = hr_mm_d(l, act, i);
    double sum = 0;
    for (size_t b = 0; b < l->nb; b++) {
        const uint8_t *blk = w + b * bb;
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += b32_value(t, blk, j) * a[32 * b + (size_t)j];
        const float d = b32_scale(t, blk) * da[b];
        sum += (double)d * (double)(float)isum;
        if (hr_mm_b32_has_min(t)) {
            uint16_t m;
            memcpy(&m, blk + 2, 2);
            sum += (double)hr_f16_to_f32(m) * (double)hr_mm_s(l, act, i)[b];
        }
    }
    return (float)sum;
}

/* Q4_K and Q5_K: value l of sub-block j, 0..15 or 0..31. */
static inline int q45_value(const uint8_t *qs, const uint8_t *qh, int j, int l)
{
    int q = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xF;
    if (qh)
        q |= ((qh[l] >> j) & 1) << 4;
    return q;
}

static float dot_q45_K(const struct hr_mm_layout *l, const void *w, const void *act, size_t i)
{
    const bool q5 = l->wtype == HR_GGML_Q5_K;
    const int8_t *a = hr_mm_qs(l, act, i);
    const float *da = hr_mm_d(l, act, i);
    const int16_t *bsum = hr_mm_bsum(l, act, i);
    double sum = 0;
    for (size_t b = 0; b < l->nb; b++) {
        const uint8_t *scales, *qs, *qh = NULL;
        uint16_t d16, dmin16;
        if (q5) {
            const struct hr_block_q5_K *x = (const struct hr_block_q5_K *)w + b;
            scales = x->scales, qs = x->qs, qh = x->qh, d16 = x->d, dmin16 = x->dmin;
        } else {
            const struct hr_block_q4_K *x = (const struct hr_block_q4_K *)w + b;
            scales = x->scales, qs = x->qs, d16 = x->d, dmin16 = x->dmin;
        }
        const int8_t *ab = a + 256 * b;
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            hr_q4_K_scale_min(j, scales, &sc, &m);
            int32_t s = 0;
            for (int e = 0; e < 32; e++)
                s += q45_value(qs, qh, j, e) * ab[32 * j + e];
            sumi += sc * s;
            summ += m * (bsum[16 * b + 2 * j] + bsum[16 * b + 2 * j + 1]);
        }
        const float d = da[b] * hr_f16_to_f32(d16);
        const float dmin = da[b] * hr_f16_to_f32(dmin16);
        sum += (double)d * (double)(float)sumi - (double)dmin * (double)(float)summ;
    }
    return (float)sum;
}

/* Q6_K: value e (0..255) of a block, 0..63 (the stored q; x = d * sc * (q - 32)). */
static inline int q6_value(const struct hr_block_q6_K *x, int e)
{
    int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
    int lo = quarter & 1 ? ql[l + 32] : ql[l];
    lo = quarter & 2 ? lo >> 4 : lo & 0xF;
    return lo | (((qh[l] >> (2 * quarter)) & 3) << 4);
}

static float dot_q6_K(const struct hr_mm_layout *l, const struct hr_block_q6_K *w,
                      const void *act, size_t i)
{
    const int8_t *a = hr_mm_qs(l, act, i);
    const float *da = hr_mm_d(l, act, i);
    double sum = 0;
    for (size_t b = 0; b < l->nb; b++) {
        const int8_t *ab = a + 256 * b;
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int e = 0; e < 16; e++)
                s += (q6_value(&w[b], 16 * j + e) - 32) * ab[16 * j + e];
            sumi += w[b].scales[j] * s;
        }
        const float d = da[b] * hr_f16_to_f32(w[b].d);
        sum += (double)d * (double)(float)sumi;
    }
    return (float)sum;
}

/* ---- Q2_K, Q3_K, IQ4_XS (quant-k2k3.c) -------------------------------------- */

/* The low 2 bits of value e (0..255) of a Q2_K or Q3_K block's qs. */
static inline int q2_bits(const uint8_t *qs, int e)
{
    const int h = e / 128, r = e % 128;
    return (qs[32 * h + r % 32] >> (2 * (r / 32))) & 3;
}

/* Q2_K, as ggml: per block d * sum_j sc_j (q . a)_j - dmin * sum_j m_j bsum_j. */
static float dot_q2_K(const struct hr_mm_layout *l, const struct hr_block_q2_K *w,
                      const void *act, size_t i)
{
    const int8_t *a = hr_mm_qs(l, act, i);
    const float *da = hr_mm_d(l, act, i);
    const int16_t *bsum = hr_mm_bsum(l, act, i);
    double sum = 0;
    for (size_t b = 0; b < l->nb; b++) {
        const int8_t *ab = a + 256 * b;
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int e = 16 * j; e < 16 * j + 16; e++)
                s += q2_bits(w[b].qs, e) * ab[e];
            sumi += (w[b].scales[j] & 0xF) * s;
            summ += (w[b].scales[j] >> 4) * bsum[16 * b + (size_t)j];
        }
        const float d = da[b] * hr_f16_to_f32(w[b].d);
        const float dmin = da[b] * hr_f16_to_f32(w[b].dmin);
        sum += (double)d * (double)(float)sumi - (double)dmin * (double)(float)summ;
    }
    return (float)sum;
}

/* Q3_K: per block d * sum_j (sc_j - 32) ((q - 4) . a)_j. */
static float dot_q3_K(const struct hr_mm_layout *l, const struct hr_block_q3_K *w,
                      const void *act, size_t i)
{
    const int8_t *a = hr_mm_qs(l, act, i);
    const float *da = hr_mm_d(l, act, i);
    double sum = 0;
    for (size_t b = 0; b < l->nb; b++) {
        const int8_t *ab = a + 256 * b;
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int e = 16 * j; e < 16 * j + 16; e++) {
                const int q = q2_bits(w[b].qs, e) | (((w[b].hmask[e % 32] >> (e / 32)) & 1) << 2);
                s += (q - 4) * ab[e];
            }
            sumi += (hr_q3_K_scale(w[b].scales, j) - 32) * s;
        }
        const float d = da[b] * hr_f16_to_f32(w[b].d);
        sum += (double)d * (double)(float)sumi;
    }
    return (float)sum;
}

/* IQ4_XS: per block d * sum_j (ls_j - 32) (grid(q) . a)_j. */
static float dot_iq4_xs(const struct hr_mm_layout *l, const struct hr_block_iq4_xs *w,
                        const void *act, size_t i)
{
    const int8_t *a = hr_mm_qs(l, act, i);
    const float *da = hr_mm_d(l, act, i);
    double sum = 0;
    for (size_t b = 0; b < l->nb; b++) {
        const int8_t *ab = a + 256 * b;
        int32_t sumi = 0;
        for (int j = 0; j < 8; j++) {
            int32_t s = 0;
            for (int e = 0; e < 32; e++) {
                const int q = (w[b].qs[16 * j + e % 16] >> (4 * (e / 16))) & 0xF;
                s += hr_iq4nl_values[q] * ab[32 * j + e];
            }
            sumi += (hr_iq4_xs_scale(&w[b], j) - 32) * s;
        }
        const float d = da[b] * hr_f16_to_f32(w[b].d);
        sum += (double)d * (double)(float)sumi;
    }
    return (float)sum;
}

float hr_mm_dot_ref(const struct hr_mm_layout *l, const void *w, const void *act, size_t i)
{
    const size_t k = l->k;
    switch (l->wtype) {
    case HR_GGML_Q8_0: return dot_q8_0(l, w, act, i);
    case HR_GGML_Q4_0: return dot_q4_0(l, w, act, i);
    case HR_GGML_Q4_1:
    case HR_GGML_Q5_0:
    case HR_GGML_Q5_1:
    case HR_GGML_IQ4_NL:
    case HR_GGML_MXFP4: return dot_b32(l, w, act, i);
    case HR_GGML_Q4_K:
    case HR_GGML_Q5_K: return dot_q45_K(l, w, act, i);
    case HR_GGML_Q6_K: return dot_q6_K(l, w, act, i);
    case HR_GGML_Q2_K: return dot_q2_K(l, w, act, i);
    case HR_GGML_Q3_K: return dot_q3_K(l, w, act, i);
    case HR_GGML_IQ4_XS: return dot_iq4_xs(l, w, act, i);
    case HR_GGML_F16: {
        const uint16_t *wr = w;
        const uint16_t *a = hr_mm_u16(l, act, i);
        double sum = 0;
        for (size_t j = 0; j < k; j++)
            sum += (double)hr_f16_to_f32(wr[j]) * (double)hr_f16_to_f32(a[j]);
        return (float)sum;
    }
    case HR_GGML_BF16: {
        const uint16_t *wr = w;
        const uint16_t *a = hr_mm_u16(l, act, i);
        double sum = 0;
        for (size_t j = 0; j < k; j++)
            sum += (double)hr_bf16_to_f32(wr[j]) * (double)hr_bf16_to_f32(a[j]);
        return (float)sum;
    }
    default: {
        const float *wr = w;
        const float *a = hr_mm_f32(l, act, i);
        double sum = 0;
        for (size_t j = 0; j < k; j++)
            sum += (double)wr[j] * (double)a[j];
        return (float)sum;
    }
    }
}

/* ---- the generic implementation ------------------------------------------ */

static void compute_generic(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                            const void *act, float *y, size_t ldy)
{
    const size_t row_bytes = hr_row_bytes(l->wtype, l->k);
    for (size_t r = r0; r < r1; r++) {
        const void *wr = (const uint8_t *)w + r * row_bytes;
        for (size_t i = 0; i < l->m; i++)
            y[i * ldy + r] = hr_mm_dot_ref(l, wr, act, i);
    }
}

const struct hr_mm_isa hr_mm_isa_generic = {
    .name = "generic",
    .row_align = 1,
    .prepare = hr_mm_prepare_generic,
    .compute = compute_generic,
};
