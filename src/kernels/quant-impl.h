/*
 * quant-impl.h - what the quantizers (quant.c, quant-block32.c,
 * quant-k2k3.c) share: ggml's integer rounding helpers and the K-quants'
 * scale-and-min search. Private to src/kernels; the API is quant.h.
 *
 * Each helper reproduces ggml's arithmetic bit for bit (the quantizer oracle
 * test compares our bytes with ggml's), so none of them may be "improved".
 */
#ifndef HR_KERNELS_QUANT_IMPL_H
#define HR_KERNELS_QUANT_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* (int32_t)v with x86's answer (INT32_MIN) for NaN and out-of-range values. */
static inline int32_t cvtt_i32(float v)
{
    return (v >= -2147483648.0f && v < 2147483648.0f) ? (int32_t)v : INT32_MIN;
}

/* The low byte of an int, as the x86 code llama.cpp's compiler emits keeps
 * it (ggml stores nearest_int's result in an int8_t before clamping). */
static inline int8_t low_i8(int32_t v) { return (int8_t)(uint8_t)((uint32_t)v & 0xffu); }

/* ggml's nearest_int: adding 1.5 * 2^23 leaves round(fval) (ties to even)
 * in the low mantissa bits. Valid for |fval| < 2^22; outside that (and for
 * NaN) it returns whatever the bits say, exactly as ggml does. */
static inline int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/*
 * ggml's make_qkx2_quants: the scale-and-min search of an asymmetric
 * sub-block, x ~ scale * L - the_min with L in 0..nmax, over nstep + 1
 * candidate scales around nmax / (max - min), each fitted by weighted least
 * squares; candidates are ranked by the weighted squared error, or by the
 * absolute error when use_mad (Q2_K). Returns the scale; L gets the levels,
 * Laux is n bytes of scratch.
 */
float hr_quant_qkx2(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                    float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                    bool use_mad);

#endif
