/*
 * quant.c - reference (de)quantization and activation conversion; see quant.h.
 *
 * Matching llama.cpp bit for bit means matching its float arithmetic
 * operation by operation: the same expression shapes ((w * x) * l, not
 * w * (x * l)), the same reciprocal-then-multiply where ggml does it, the
 * same rounding (roundf, the 1.5 * 2^23 "nearest_int" trick, or the x86
 * round-half-even of the SIMD activation quantizer), and no fused
 * multiply-add: ggml-base is compiled without FMA, so an FMA here would round
 * differently. GCC does not contract in ISO C mode (-std=c11, our build);
 * clang contracts within expressions by default, hence the pragma.
 *
 * Out-of-range float-to-integer conversions (huge or non-finite inputs) are
 * undefined in C; on x86 they produce INT32_MIN, and that is what llama.cpp's
 * compiled code stores. cvtt_i32 reproduces it without the undefined
 * behaviour, so even inputs with infinities quantize to the same bytes.
 *
 * Cost: the K-quant quantizers search 20-36 candidate scales per sub-block
 * (about 1 us per 256 values); they run only in the generator.
 */
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/quant-impl.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define GROUP_MAX_EPS 1e-15f

/* ---- Q8_0 ---------------------------------------------------------------- */

void hr_quantize_row_q8_0(const float *x, struct hr_block_q8_0 *y, size_t n)
{
    for (size_t b = 0; b < n / HR_QK8_0; b++) {
        const float *xb = x + b * HR_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < HR_QK8_0; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = hr_f32_to_f16(d);
        for (int j = 0; j < HR_QK8_0; j++)
            y[b].qs[j] = low_i8(cvtt_i32(roundf(xb[j] * id)));
    }
}

void hr_dequantize_row_q8_0(const struct hr_block_q8_0 *x, float *y, size_t n)
{
    for (size_t b = 0; b < n / HR_QK8_0; b++) {
        const float d = hr_f16_to_f32(x[b].d);
        for (int j = 0; j < HR_QK8_0; j++)
            y[b * HR_QK8_0 + j] = (float)x[b].qs[j] * d;
    }
}

/* SSE's maxps: a > b ? a : b (the second operand when either is NaN). */
static inline float max_sse(float a, float b) { return a > b ? a : b; }

/* Saturating int32 -> int16 -> int8, as packssdw + packsswb. */
static inline int8_t sat_i8(int32_t v)
{
    int32_t s16 = v < -32768 ? -32768 : v > 32767 ? 32767 : v;
    return (int8_t)(s16 < -128 ? -128 : s16 > 127 ? 127 : s16);
}

/*
 * ggml-cpu's quantize_row_q8_0 for AVX2/AVX-512 (arch/x86/quants.c): the
 * block maximum is reduced in the SIMD order (8 lanes over the 4 vectors,
 * then 8 -> 4 -> 2 -> 1), the multiplier is 127 / amax, values round to
 * nearest even (vroundps), convert with cvtps2dq and pack with saturation.
 */
void hr_quantize_row_q8_0_act(const float *x, struct hr_block_q8_0 *y, size_t n)
{
    for (size_t b = 0; b < n / HR_QK8_0; b++) {
        const float *xb = x + b * HR_QK8_0;
        float m8[8];
        for (int l = 0; l < 8; l++) {
            float m = max_sse(fabsf(xb[l]), fabsf(xb[8 + l]));
            m = max_sse(m, fabsf(xb[16 + l]));
            m8[l] = max_sse(m, fabsf(xb[24 + l]));
        }
        float m4[4];
        for (int l = 0; l < 4; l++)
            m4[l] = max_sse(m8[4 + l], m8[l]);
        float m2a = max_sse(m4[0], m4[2]), m2b = max_sse(m4[1], m4[3]);
        const float amax = max_sse(m2a, m2b);
        const float d = amax / 127.f;
        y[b].d = hr_f32_to_f16(d);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int j = 0; j < HR_QK8_0; j++)
            y[b].qs[j] = sat_i8(cvtt_i32(nearbyintf(xb[j] * id)));
    }
}

/* ---- Q4_0 ---------------------------------------------------------------- */

void hr_quantize_row_q4_0(const float *x, struct hr_block_q4_0 *y, size_t n)
{
    const int qk = HR_QK4_0;
    for (size_t i = 0; i < n / HR_QK4_0; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < qk; j++) {
            const float v = x[i * qk + j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = hr_f32_to_f16(d);
        for (int j = 0; j < qk / 2; ++j) {
            const float x0 = x[i * qk + 0 + j] * id;
            const float x1 = x[i * qk + qk / 2 + j] * id;
            const uint8_t xi0 = (uint8_t)imin(15, low_i8(cvtt_i32(x0 + 8.5f)));
            const uint8_t xi1 = (uint8_t)imin(15, low_i8(cvtt_i32(x1 + 8.5f)));
            y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
}

void hr_dequantize_row_q4_0(const struct hr_block_q4_0 *x, float *y, size_t n)
{
    const int qk = HR_QK4_0;
    for (size_t i = 0; i < n / HR_QK4_0; i++) {
        const float d = hr_f16_to_f32(x[i].d);
        for (int j = 0; j < qk / 2; ++j) {
            const int x0 = (x[i].qs[j] & 0x0F) - 8;
            const int x1 = (x[i].qs[j] >> 4) - 8;
            y[i * qk + j + 0] = (float)x0 * d;
            y[i * qk + j + qk / 2] = (float)x1 * d;
        }
    }
}

/* ---- K-quant helpers (ggml-quants.c) ------------------------------------- */

/*
 * Scale search for a symmetric sub-block (Q6_K): start from -nmax / max, then
 * try 18 nearby scales and keep the one with the best weighted least-squares
 * fit (weights x^2, rmse_type 1). Returns the scale; L gets q + nmax.
 */
static float make_qx_quants_rmse1(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = imax(-nmax, imin(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* The scale-and-min search of the K-quants (quant-impl.h). */
float hr_quant_qkx2(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                    float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                    bool use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        float w = weights[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = imax(0, imin(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                float w = weights[i];
                cur_error += w * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i)
                    L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs the 8 six-bit scales and mins of a Q4_K/Q5_K super-block (the
 * inverse of hr_q4_K_scale_min), quantizing them against max_scale/max_min,
 * and stores d and dmin. */
static void pack_k4_scales(const float *scales, const float *mins, float max_scale, float max_min,
                           uint8_t *out, uint16_t *d, uint16_t *dmin)
{
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < HR_QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = (uint8_t)imin(63, ls);
        lm = (uint8_t)imin(63, lm);
        if (j < 4) {
            out[j] = ls;
            out[j + 4] = lm;
        } else {
            out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            out[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d = hr_f32_to_f16(max_scale / 63.f);
    *dmin = hr_f32_to_f16(max_min / 63.f);
}

/* The shared first half of quantize_row_q4_K_ref / q5_K_ref: per-sub-block
 * scale and min search, scale packing, and the final quants in L[256]. */
static void quantize_k4_superblock(const float *x, int nmax, float rmin, float rdelta, int nstep,
                                   uint8_t *L, uint8_t *scales_out, uint16_t *d_out,
                                   uint16_t *dmin_out)
{
    uint8_t Laux[32];
    float weights[32];
    float mins[HR_QK_K / 32];
    float scales[HR_QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < HR_QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = hr_quant_qkx2(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                  rmin, rdelta, nstep, false);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    memset(scales_out, 0, 12);
    pack_k4_scales(scales, mins, max_scale, max_min, scales_out, d_out, dmin_out);
    for (int j = 0; j < HR_QK_K / 32; ++j) {
        uint8_t sc, m;
        hr_q4_K_scale_min(j, scales_out, &sc, &m);
        const float d = hr_f16_to_f32(*d_out) * (float)sc;
        if (!d)
            continue; /* L keeps the search's quants, as in ggml */
        const float dm = hr_f16_to_f32(*dmin_out) * (float)m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

/* ---- Q4_K ---------------------------------------------------------------- */

void hr_quantize_row_q4_K(const float *x, struct hr_block_q4_K *y, size_t n)
{
    uint8_t L[HR_QK_K];
    for (size_t i = 0; i < n / HR_QK_K; i++, x += HR_QK_K) {
        quantize_k4_superblock(x, 15, -1.f, 0.1f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < HR_QK_K; j += 64) {
            for (int l = 0; l < 32; ++l)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
            q += 32;
        }
    }
}

void hr_dequantize_row_q4_K(const struct hr_block_q4_K *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / HR_QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = hr_f16_to_f32(x[i].d);
        const float min = hr_f16_to_f32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < HR_QK_K; j += 64) {
            hr_q4_K_scale_min(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            hr_q4_K_scale_min(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

/* ---- Q5_K ---------------------------------------------------------------- */

void hr_quantize_row_q5_K(const float *x, struct hr_block_q5_K *y, size_t n)
{
    uint8_t L[HR_QK_K];
    for (size_t i = 0; i < n / HR_QK_K; i++, x += HR_QK_K) {
        quantize_k4_superblock(x, 31, -0.5f, 0.1f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        uint8_t *qh = y[i].qh;
        uint8_t *ql = y[i].qs;
        memset(qh, 0, HR_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n0 = 0; n0 < HR_QK_K; n0 += 64) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n0 + j];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                int l2 = L[n0 + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
            ql += 32;
        }
    }
}

void hr_dequantize_row_q5_K(const struct hr_block_q5_K *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / HR_QK_K; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = hr_f16_to_f32(x[i].d);
        const float min = hr_f16_to_f32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < HR_QK_K; j += 64) {
            hr_q4_K_scale_min(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            hr_q4_K_scale_min(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

/* ---- Q6_K ---------------------------------------------------------------- */

void hr_quantize_row_q6_K(const float *x, struct hr_block_q6_K *y, size_t n)
{
    int8_t L[HR_QK_K];
    float scales[HR_QK_K / 16];
    for (size_t i = 0; i < n / HR_QK_K; i++, x += HR_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < HR_QK_K / 16; ++ib) {
            const float scale = make_qx_quants_rmse1(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(y[i]));
            y[i].d = hr_f32_to_f16(0.f);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = hr_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < HR_QK_K / 16; ++ib)
            y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < HR_QK_K / 16; ++j) {
            float d = hr_f16_to_f32(y[i].d) * (float)y[i].scales[j];
            if (!d)
                continue; /* L keeps the search's quants, as in ggml */
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = imax(-32, imin(31, l));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = y[i].ql;
        uint8_t *qh = y[i].qh;
        for (int j = 0; j < HR_QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
            ql += 64;
            qh += 32;
        }
    }
}

void hr_dequantize_row_q6_K(const struct hr_block_q6_K *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / HR_QK_K; i++) {
        const float d = hr_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n0 = 0; n0 < HR_QK_K; n0 += 128) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

/* ---- Q8_K ---------------------------------------------------------------- */

void hr_quantize_row_q8_K(const float *x, struct hr_block_q8_K *y, size_t n)
{
    for (size_t i = 0; i < n / HR_QK_K; i++, x += HR_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < HR_QK_K; ++j) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            y[i].d = 0;
            memset(y[i].qs, 0, HR_QK_K);
            /* ggml leaves bsums untouched here; we zero them (they are only
             * read through d, which is 0) so the block is fully defined. */
            memset(y[i].bsums, 0, sizeof(y[i].bsums));
            continue;
        }
        /* -127, not -128, so a sign flip stays in range (ggml's IQ2 needs it). */
        const float iscale = -127.f / max;
        for (int j = 0; j < HR_QK_K; ++j) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = low_i8(imin(127, v));
        }
        for (int j = 0; j < HR_QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii)
                sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void hr_dequantize_row_q8_K(const struct hr_block_q8_K *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / HR_QK_K; i++)
        for (int j = 0; j < HR_QK_K; ++j)
            *y++ = x[i].d * (float)x[i].qs[j];
}

/* ---- f16 / bf16 rows and the type switch --------------------------------- */

void hr_convert_row_f16(const float *x, uint16_t *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = hr_f32_to_f16(x[i]);
}

void hr_convert_row_bf16(const float *x, uint16_t *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = hr_f32_to_bf16(x[i]);
}

int hr_quantize_row(enum hr_ggml_type type, const float *x, void *dst, size_t n)
{
    switch (type) {
    case HR_GGML_F32: memcpy(dst, x, n * sizeof(float)); return 0;
    case HR_GGML_F16: hr_convert_row_f16(x, dst, n); return 0;
    case HR_GGML_BF16: hr_convert_row_bf16(x, dst, n); return 0;
    case HR_GGML_Q8_0: hr_quantize_row_q8_0(x, dst, n); return 0;
    case HR_GGML_Q4_0: hr_quantize_row_q4_0(x, dst, n); return 0;
    case HR_GGML_Q4_1: hr_quantize_row_q4_1(x, dst, n); return 0;
    case HR_GGML_Q5_0: hr_quantize_row_q5_0(x, dst, n); return 0;
    case HR_GGML_Q5_1: hr_quantize_row_q5_1(x, dst, n); return 0;
    case HR_GGML_IQ4_NL: hr_quantize_row_iq4_nl(x, dst, n); return 0;
    case HR_GGML_MXFP4: hr_quantize_row_mxfp4(x, dst, n); return 0;
    case HR_GGML_Q8_1: hr_quantize_row_q8_1_act(x, dst, n); return 0;
    case HR_GGML_Q4_K: hr_quantize_row_q4_K(x, dst, n); return 0;
    case HR_GGML_Q5_K: hr_quantize_row_q5_K(x, dst, n); return 0;
    case HR_GGML_Q6_K: hr_quantize_row_q6_K(x, dst, n); return 0;
    case HR_GGML_Q8_K: hr_quantize_row_q8_K(x, dst, n); return 0;
    case HR_GGML_Q2_K: hr_quantize_row_q2_K(x, dst, n); return 0;
    case HR_GGML_Q3_K: hr_quantize_row_q3_K(x, dst, n); return 0;
    case HR_GGML_IQ4_XS: hr_quantize_row_iq4_xs(x, dst, n); return 0;
    default: return -1;
    }
}

int hr_dequantize_row(enum hr_ggml_type type, const void *src, float *y, size_t n)
{
    switch (type) {
    case HR_GGML_F32: memcpy(y, src, n * sizeof(float)); return 0;
    case HR_GGML_F16:
        for (size_t i = 0; i < n; i++)
            y[i] = hr_f16_to_f32(((const uint16_t *)src)[i]);
        return 0;
    case HR_GGML_BF16:
        for (size_t i = 0; i < n; i++)
            y[i] = hr_bf16_to_f32(((const uint16_t *)src)[i]);
        return 0;
    case HR_GGML_Q8_0: hr_dequantize_row_q8_0(src, y, n); return 0;
    case HR_GGML_Q4_0: hr_dequantize_row_q4_0(src, y, n); return 0;
    case HR_GGML_Q4_1: hr_dequantize_row_q4_1(src, y, n); return 0;
    case HR_GGML_Q5_0: hr_dequantize_row_q5_0(src, y, n); return 0;
    case HR_GGML_Q5_1: hr_dequantize_row_q5_1(src, y, n); return 0;
    case HR_GGML_IQ4_NL: hr_dequantize_row_iq4_nl(src, y, n); return 0;
    case HR_GGML_MXFP4: hr_dequantize_row_mxfp4(src, y, n); return 0;
    case HR_GGML_Q8_1: hr_dequantize_row_q8_1(src, y, n); return 0;
    case HR_GGML_Q4_K: hr_dequantize_row_q4_K(src, y, n); return 0;
    case HR_GGML_Q5_K: hr_dequantize_row_q5_K(src, y, n); return 0;
    case HR_GGML_Q6_K: hr_dequantize_row_q6_K(src, y, n); return 0;
    case HR_GGML_Q8_K: hr_dequantize_row_q8_K(src, y, n); return 0;
    case HR_GGML_Q2_K: hr_dequantize_row_q2_K(src, y, n); return 0;
    case HR_GGML_Q3_K: hr_dequantize_row_q3_K(src, y, n); return 0;
    case HR_GGML_IQ4_XS: hr_dequantize_row_iq4_xs(src, y, n); return 0;
    default: return -1;
    }
}

int hr_convert_act_row(enum hr_ggml_type type, const float *x, void *dst, size_t n)
{
    switch (type) {
    case HR_GGML_F32: memcpy(dst, x, n * sizeof(float)); return 0;
    case HR_GGML_F16: hr_convert_row_f16(x, dst, n); return 0;
    case HR_GGML_BF16: hr_convert_row_bf16(x, dst, n); return 0;
    case HR_GGML_Q8_0: hr_quantize_row_q8_0_act(x, dst, n); return 0;
    case HR_GGML_Q8_1: hr_quantize_row_q8_1_act(x, dst, n); return 0;
    case HR_GGML_Q8_K: hr_quantize_row_q8_K(x, dst, n); return 0;
    case HR_GGML_Q2_K: hr_quantize_row_q2_K(x, dst, n); return 0;
    case HR_GGML_Q3_K: hr_quantize_row_q3_K(x, dst, n); return 0;
    case HR_GGML_IQ4_XS: hr_quantize_row_iq4_xs(x, dst, n); return 0;
    default: return -1;
    }
}
