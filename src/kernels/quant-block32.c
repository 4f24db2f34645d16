/*
 * quant-block32.c - reference (de)quantizers of the 32-value block types that
 * real downloads carry besides Q8_0/Q4_0 and the K-quants: Q4_1, Q5_0, Q5_1,
 * IQ4_NL and MXFP4, and the Q8_1 activation conversion Q4_1/Q5_1 pair with.
 * Block layouts are drawn in quant.h.
 *
 * Each quantizer is what ggml_quantize_chunk runs without an importance
 * matrix (what llama-quantize and the gguf writers produce), operation by
 * operation, for the reasons given at the top of quant.c (no FMA, the same
 * expression shapes, x86's answer for out-of-range conversions). Note IQ4_NL:
 * ggml_quantize_chunk calls quantize_iq4_nl, which searches 15 scales
 * (ntry = 7) with weights x^2; quantize_row_iq4_nl_ref (ntry = -1) is a
 * different, cheaper quantizer that no file writer uses, so we do not copy it.
 * tests/unit/test-quant-oracle.c compares the bytes with ggml's.
 *
 * Thread safety: pure functions. Cost: IQ4_NL about 16 passes over a block
 * (generator only); the others one pass.
 */
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/quant.h"
#include "kernels/quant-impl.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

const int8_t hr_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
const int8_t hr_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* (int8_t)v as llama.cpp's compiled code does it: truncate to int32, keep the low byte. */
static inline int to_i8(float v) { return (int8_t)(uint8_t)((uint32_t)cvtt_i32(v) & 0xffu); }

float hr_e8m0_to_f32_half(uint8_t e)
{
    /* 2^(e - 128): the MXFP4 table holds twice the E2M1 values, so the
     * scale is halved; e 0 and 1 are subnormal. */
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* ---- Q4_1 / Q5_1: x = d * q + m ------------------------------------------ */

/* Shared by Q4_1 (nmax 15) and Q5_1 (nmax 31): d = (max - min) / nmax,
 * q = (int8)((x - min) / d + 0.5) capped at nmax. */
static void quantize_min_block(const float *x, int nmax, uint16_t *d16, uint16_t *m16, uint8_t *q)
{
    float min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < 32; j++) {
        const float v = x[j];
        if (v < min)
            min = v;
        if (v > max)
            max = v;
    }
    const float d = (max - min) / (float)nmax;
    const float id = d ? 1.0f / d : 0.0f;
    *d16 = hr_f32_to_f16(d);
    *m16 = hr_f32_to_f16(min);
    for (int j = 0; j < 32; j++)
        q[j] = (uint8_t)imin(nmax, to_i8((x[j] - min) * id + 0.5f));
}

void hr_quantize_row_q4_1(const float *x, struct hr_block_q4_1 *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++) {
        uint8_t q[32];
        quantize_min_block(x + 32 * i, 15, &y[i].d, &y[i].m, q);
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    }
}

void hr_dequantize_row_q4_1(const struct hr_block_q4_1 *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++) {
        const float d = hr_f16_to_f32(x[i].d), m = hr_f16_to_f32(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[32 * i + j] = (float)(x[i].qs[j] & 0xF) * d + m;
            y[32 * i + j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* Packs 32 five-bit quants: low nibbles as Q4_0, bit 4 of value j in bit j of qh. */
static void pack_q5(const uint8_t *q, uint8_t *qs, uint8_t *qh)
{
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        h |= (uint32_t)((q[j] & 0x10u) >> 4) << j;
        h |= (uint32_t)((q[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    memcpy(qh, &h, 4);
}

/* The 5-bit quant of value j (0..31) of a Q5_0/Q5_1 block. */
static inline int q5_value(const uint8_t *qs, const uint8_t *qh, int j)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    const int lo = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
    return lo | (int)(((h >> j) & 1) << 4);
}

void hr_quantize_row_q5_1(const float *x, struct hr_block_q5_1 *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++) {
        uint8_t q[32];
        quantize_min_block(x + 32 * i, 31, &y[i].d, &y[i].m, q);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

void hr_dequantize_row_q5_1(const struct hr_block_q5_1 *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++) {
        const float d = hr_f16_to_f32(x[i].d), m = hr_f16_to_f32(x[i].m);
        for (int j = 0; j < 32; j++)
            y[32 * i + j] = (float)q5_value(x[i].qs, x[i].qh, j) * d + m;
    }
}

/* ---- Q5_0: x = d * (q - 16) ----------------------------------------------- */

void hr_quantize_row_q5_0(const float *x, struct hr_block_q5_0 *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++) {
        const float *xb = x + 32 * i;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(xb[j])) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = hr_f32_to_f16(d);
        uint8_t q[32];
        for (int j = 0; j < 32; j++)
            q[j] = (uint8_t)imin(31, to_i8(xb[j] * id + 16.5f));
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

void hr_dequantize_row_q5_0(const struct hr_block_q5_0 *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++) {
        const float d = hr_f16_to_f32(x[i].d);
        for (int j = 0; j < 32; j++)
            y[32 * i + j] = (float)(q5_value(x[i].qs, x[i].qh, j) - 16) * d;
    }
}

/* ---- IQ4_NL: x = d * hr_iq4nl_values[q] ----------------------------------- */

/* ggml's best_index_int8: the index of the table value nearest x (ties to
 * the lower), by bisection over the sorted table. */
static int best_index_iq4nl(float x)
{
    const int8_t *val = hr_iq4nl_values;
    if (x <= val[0])
        return 0;
    if (x >= val[15])
        return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/*
 * quantize_iq4_nl without an importance matrix (quantize_row_iq4_nl_impl
 * with block 32, weights x^2, ntry 7): the first scale maps the largest
 * magnitude onto the table's end (-127), its least-squares refit is the
 * first candidate; then scales (t - 127) / max for t = -7..7 are tried and
 * the best weighted fit kept; finally every value is requantized with the
 * chosen scale (which also names the quants of an all-tiny block: scale 0,
 * every value the index nearest 0).
 */
void hr_quantize_row_iq4_nl(const float *x, struct hr_block_iq4_nl *y, size_t n)
{
    const int ntry = 7;
    const int8_t *values = hr_iq4nl_values;
    for (size_t i = 0; i < n / 32; i++) {
        const float *xb = x + 32 * i;
        float weight[32];
        uint8_t L[32];
        float scale = 0;
        for (int j = 0; j < 32; j++)
            weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (!(amax < 1e-15f)) { /* GROUP_MAX_EPS */
            float d = -max / values[0];
            float id = 1 / d;
            float sumqx = 0, sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                const float al = id * xb[j];
                const float q = values[best_index_iq4nl(al)];
                const float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
            float best = d * sumqx;
            for (int itry = -ntry; itry <= ntry; ++itry) {
                id = (float)(itry + values[0]) / max;
                sumqx = sumq2 = 0;
                for (int j = 0; j < 32; j++) {
                    const float al = id * xb[j];
                    const float q = values[best_index_iq4nl(al)];
                    const float w = weight[j];
                    sumqx += w * q * xb[j];
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    d = sumqx / sumq2;
                    best = d * sumqx;
                }
            }
            scale = d;
        }
        y[i].d = hr_f32_to_f16(scale);
        const float id = scale ? 1 / scale : 0;
        for (int j = 0; j < 32; j++)
            L[j] = (uint8_t)best_index_iq4nl(id * xb[j]);
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

void hr_dequantize_row_iq4_nl(const struct hr_block_iq4_nl *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++) {
        const float d = hr_f16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[32 * i + j] = d * (float)hr_iq4nl_values[x[i].qs[j] & 0xF];
            y[32 * i + j + 16] = d * (float)hr_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

/* ---- MXFP4: x = 2^(e - 128) * hr_mxfp4_values[q] -------------------------- */

/* The first index whose value times e is nearest x (an exhaustive search,
 * as ggml's best_index_mxfp4: the table is not sorted). */
static int best_index_mxfp4(float x, float e)
{
    int best_index = 0;
    float best_err = fabsf((float)hr_mxfp4_values[0] * e - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf((float)hr_mxfp4_values[i] * e - x);
        if (err < best_err) {
            best_index = i;
            best_err = err;
        }
    }
    return best_index;
}

void hr_quantize_row_mxfp4(const float *x, struct hr_block_mxfp4 *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++) {
        const float *xb = x + 32 * i;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(xb[j]))
                amax = fabsf(xb[j]);
        /* the shared exponent puts amax's leading bit at the table's top (6 = 1.5 * 2^2) */
        const uint8_t e =
            amax > 0.0f ? (uint8_t)(uint32_t)cvtt_i32(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = hr_e8m0_to_f32_half(e);
        y[i].e = e;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(best_index_mxfp4(xb[j], d) | (best_index_mxfp4(xb[j + 16], d) << 4));
    }
}

void hr_dequantize_row_mxfp4(const struct hr_block_mxfp4 *x, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++) {
        const float d = hr_e8m0_to_f32_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[32 * i + j] = (float)hr_mxfp4_values[x[i].qs[j] & 0xF] * d;
            y[32 * i + j + 16] = (float)hr_mxfp4_values[x[i].qs[j] >> 4] * d;
        }
    }
}

/* ---- Q8_1 activations ----------------------------------------------------- */

/*
 * ggml-cpu's quantize_row_q8_1 on x86 (AVX2 and up): the quants and d of
 * quantize_row_q8_0's SIMD code (hr_quantize_row_q8_0_act), plus
 * s = f16(d * sum of the quants), with d the unrounded max / 127 and the sum
 * taken over the 32-bit values before the saturating packs (wrapping, as
 * vpaddd does, for non-finite input).
 */
void hr_quantize_row_q8_1_act(const float *x, struct hr_block_q8_1 *y, size_t n)
{
    for (size_t b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        struct hr_block_q8_0 q;
        hr_quantize_row_q8_0_act(xb, &q, 32);
        /* recompute amax exactly as hr_quantize_row_q8_0_act does (its SIMD
         * reduction order), to get the unrounded d */
        float m8[8];
        for (int l = 0; l < 8; l++) {
            float m = fabsf(xb[l]) > fabsf(xb[8 + l]) ? fabsf(xb[l]) : fabsf(xb[8 + l]);
            m = m > fabsf(xb[16 + l]) ? m : fabsf(xb[16 + l]);
            m8[l] = m > fabsf(xb[24 + l]) ? m : fabsf(xb[24 + l]);
        }
        float m4[4];
        for (int l = 0; l < 4; l++)
            m4[l] = m8[4 + l] > m8[l] ? m8[4 + l] : m8[l];
        const float m2a = m4[0] > m4[2] ? m4[0] : m4[2], m2b = m4[1] > m4[3] ? m4[1] : m4[3];
        const float amax = m2a > m2b ? m2a : m2b;
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        uint32_t sum = 0;
        for (int j = 0; j < 32; j++)
            sum += (uint32_t)cvtt_i32(nearbyintf(xb[j] * id));
        y[b].d = q.d;
        y[b].s = hr_f32_to_f16(d * (float)(int32_t)sum);
        memcpy(y[b].qs, q.qs, 32);
    }
}

void hr_dequantize_row_q8_1(const struct hr_block_q8_1 *x, float *y, size_t n)
{
    for (size_t b = 0; b < n / 32; b++) {
        const float d = hr_f16_to_f32(x[b].d);
        for (int j = 0; j < 32; j++)
            y[32 * b + j] = (float)x[b].qs[j] * d;
    }
}
