/*
 * quant-k2k3.c - reference quantizers and dequantizers of the low-bit
 * 256-value super-block types Q2_K, Q3_K and IQ4_XS; see quant.h for the
 * block layouts.
 *
 * Each quantizer is llama.cpp's reference (quantize_row_q2_K_ref,
 * quantize_row_q3_K_ref, and quantize_iq4_xs without an importance matrix,
 * which is what ggml_quantize_chunk runs), operation for operation, for the
 * same reasons as in quant.c: the same expression shapes, ggml's
 * nearest_int, no fused multiply-add (ISO C mode does not contract; clang
 * gets the pragma). tests/unit/test-quant-oracle.c compares the bytes with
 * ggml's on normal, zero, tie and extreme (infinite) inputs.
 *
 * Kept apart from quant.c so the helpers these searches need (a
 * mean-absolute-deviation variant of make_qkx2_quants, make_q3_quants, the
 * IQ4 grid search) live next to their only users.
 *
 * Cost (one core of the project's loaded 2-core machine, per 256 values):
 * Q3_K ~4 us, Q2_K ~15-20 (16 candidate scales per 16 values), IQ4_XS
 * ~50-70 (16 candidate scales per 32 values, a grid search per value);
 * Q4_K's is ~16-24 for scale. They run only in the generator.
 */
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/quant.h"
#include "kernels/quant-impl.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define GROUP_MAX_EPS 1e-15f

/* ---- Q2_K ---------------------------------------------------------------- */

/* Packs 256 2-bit quants as Q2_K and Q3_K store their low bits. */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < HR_QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                      (L[j + l + 96] << 6));
}

void hr_quantize_row_q2_K(const float *x, struct hr_block_q2_K *y, size_t n)
{
    uint8_t L[HR_QK_K], Laux[16];
    float weights[16], mins[HR_QK_K / 16], scales[HR_QK_K / 16];
    const float q4scale = 15.f;
    for (size_t i = 0; i < n / HR_QK_K; i++, x += HR_QK_K) {
        /* the min is subtracted, so scales and mins are never negative */
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < HR_QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = hr_quant_qkx2(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                      0.1f, 15, true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < HR_QK_K / 16; ++j)
                y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = hr_f32_to_f16(max_scale / q4scale);
        } else {
            memset(y[i].scales, 0, sizeof(y[i].scales));
            y[i].d = hr_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < HR_QK_K / 16; ++j)
                y[i].scales[j] |= (uint8_t)((unsigned)nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = hr_f32_to_f16(max_min / q4scale);
        } else {
            y[i].dmin = hr_f32_to_f16(0.f);
        }
        for (int j = 0; j < HR_QK_K / 16; ++j) {
            const float d = hr_f16_to_f32(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (!d)
                continue; /* L keeps the search's quants, as in ggml */
            const float dm = hr_f16_to_f32(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

void hr_dequantize_row_q2_K(const struct hr_block_q2_K *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / HR_QK_K; i++) {
        const float d = hr_f16_to_f32(x[i].d);
        const float min = hr_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int n0 = 0; n0 < HR_QK_K; n0 += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
                    for (int l = 0; l < 16; ++l)
                        *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
            q += 32;
        }
    }
}

/* ---- Q3_K ---------------------------------------------------------------- */

/*
 * ggml's make_q3_quants with do_rmse: a symmetric sub-block, L in
 * -nmax..nmax-1 from the scale -nmax / max, then up to 5 rounds of
 * coordinate descent that move one quant at a time when that improves the
 * x^2-weighted least-squares fit. Returns the fitted scale; L gets q + nmax
 * (all zero for an all-zero sub-block, as in ggml).
 */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L)
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
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = imax(-nmax, imin(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; ++i)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void hr_quantize_row_q3_K(const float *x, struct hr_block_q3_K *y, size_t n)
{
    int8_t L[HR_QK_K];
    float scales[HR_QK_K / 16];
    for (size_t i = 0; i < n / HR_QK_K; i++, x += HR_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < HR_QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < HR_QK_K / 16; ++j) {
                int8_t l = low_i8(nearest_int(iscale * scales[j]));
                l = (int8_t)(imax(-32, imin(31, l)) + 32);
                if (j < 8)
                    y[i].scales[j] = (uint8_t)(l & 0xF);
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l = (int8_t)(l >> 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = hr_f32_to_f16(1 / iscale);
        } else {
            y[i].d = hr_f32_to_f16(0.f);
        }
        for (int j = 0; j < HR_QK_K / 16; ++j) {
            const int sc = hr_q3_K_scale(y[i].scales, j) - 32;
            float d = hr_f16_to_f32(y[i].d) * (float)sc;
            if (!d)
                continue; /* L keeps the search's quants, as in ggml */
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = imax(-4, imin(3, l));
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }
        /* the high bit of values 0-31 goes to bit 0 of hmask[0..31], of
         * values 32-63 to bit 1, and so on */
        memset(y[i].hmask, 0, HR_QK_K / 8);
        uint8_t Lu[HR_QK_K];
        for (int j = 0; j < HR_QK_K; ++j) {
            Lu[j] = (uint8_t)L[j];
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                Lu[j] = (uint8_t)(L[j] - 4);
            }
        }
        pack_2bit(Lu, y[i].qs);
    }
}

void hr_dequantize_row_q3_K(const struct hr_block_q3_K *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / HR_QK_K; i++) {
        const float d_all = hr_f16_to_f32(x[i].d);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int n0 = 0; n0 < HR_QK_K; n0 += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * (float)(hr_q3_K_scale(x[i].scales, is++) - 32);
                    for (int l = 16 * half; l < 16 * half + 16; ++l)
                        *y++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
                m = (uint8_t)(m << 1);
            }
            q += 32;
        }
    }
}

/* ---- IQ4_XS -------------------------------------------------------------- */

/*
 * ggml's best_index_int8 over the grid: the index of the grid value nearest
 * to x, ties to the larger, NaN to the last. ggml bisects; counting the grid
 * values at or below x gives the same lower neighbour without the 4
 * unpredictable branches (the grid is sorted, so the count is the index):
 * the same bytes, the IQ4_XS quantizer ~1.25x faster (measured A/B).
 */
static inline int best_index_iq4(float x)
{
    const int8_t *val = hr_iq4nl_values;
    if (x <= (float)val[0])
        return 0;
    if (x >= (float)val[15])
        return 15;
    if (x != x)
        return 15; /* every comparison in ggml's bisection is false */
    int ml = 0; /* val[ml] <= x < val[ml + 1] */
    for (int j = 1; j < 15; j++)
        ml += (float)val[j] <= x;
    return x - (float)val[ml] < (float)val[ml + 1] - x ? ml : ml + 1;
}

/*
 * One super-block, ggml's quantize_row_iq4_nl_impl(QK_K, 32, ..., ntry 7)
 * without importance weights: per sub-block of 32 the scale that best fits
 * x on the grid (weights x^2) among 16 candidates, then the 8 scales
 * quantized to 6 bits against the largest, and the quants chosen again for
 * the quantized scales.
 */
static void quantize_iq4_xs_block(const float *x, struct hr_block_iq4_xs *y)
{
    const int ntry = 7;
    const int8_t *values = hr_iq4nl_values;
    float scales[HR_QK_K / 32], weight[32];
    uint8_t L[HR_QK_K];
    memset(y->qs, 0, sizeof(y->qs));
    y->d = hr_f32_to_f16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < HR_QK_K / 32; ++ib) {
        const float *xb = x + ib * 32;
        uint8_t *Lb = L + ib * 32;
        for (int j = 0; j < 32; ++j)
            weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
            float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / (float)values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            float al = id * xb[j];
            int l = best_index_iq4(al);
            Lb[j] = (uint8_t)l;
            float q = (float)values[l];
            float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = (float)(itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; ++j) {
                float al = id * xb[j];
                int l = best_index_iq4(al);
                float q = (float)values[l];
                float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        float abs_d = fabsf(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }
    y->scales_h = 0;
    float d = -max_scale / 32;
    y->d = hr_f32_to_f16(d);
    float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < HR_QK_K / 32; ++ib) {
        int l = nearest_int(id * scales[ib]);
        l = imax(-32, imin(31, l));
        float dl = d * (float)l;
        float idl = dl ? 1 / dl : 0.f;
        uint8_t *Lb = L + ib * 32;
        const float *xb = x + ib * 32;
        for (int j = 0; j < 32; ++j)
            Lb[j] = (uint8_t)best_index_iq4(idl * xb[j]);
        l += 32;
        const uint8_t l_l = (uint8_t)(l & 0xf), l_h = (uint8_t)(l >> 4);
        if (ib % 2 == 0)
            y->scales_l[ib / 2] = l_l;
        else
            y->scales_l[ib / 2] |= (uint8_t)(l_l << 4);
        y->scales_h |= (uint16_t)(l_h << 2 * (ib % 8));
    }
    for (int i = 0; i < HR_QK_K / 32; ++i)
        for (int j = 0; j < 16; ++j)
            y->qs[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void hr_quantize_row_iq4_xs(const float *x, struct hr_block_iq4_xs *y, size_t n)
{
    for (size_t i = 0; i < n / HR_QK_K; i++)
        quantize_iq4_xs_block(x + i * HR_QK_K, &y[i]);
}

void hr_dequantize_row_iq4_xs(const struct hr_block_iq4_xs *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / HR_QK_K; i++) {
        const uint8_t *qs = x[i].qs;
        const float d = hr_f16_to_f32(x[i].d);
        for (int ib = 0; ib < HR_QK_K / 32; ++ib) {
            const float dl = d * (float)(hr_iq4_xs_scale(&x[i], ib) - 32);
            for (int j = 0; j < 16; ++j) {
                y[j + 0] = dl * (float)hr_iq4nl_values[qs[j] & 0xf];
                y[j + 16] = dl * (float)hr_iq4nl_values[qs[j] >> 4];
            }
            y += 32;
            qs += 16;
        }
    }
}
