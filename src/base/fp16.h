/*
 * fp16.h - bit-exact conversions between f32 and the two 16-bit float
 * formats GGUF files carry: IEEE half (f16) and bfloat16 (bf16).
 *
 * Rounding matches ggml's (and the x86 F16C instruction's): round to
 * nearest, ties to even, with correct subnormals, infinities and NaNs. The
 * generator depends on this to write F16 and Q8_0 tensors bit-identical to
 * llama.cpp's quantizer; tests/unit/test-fp16.c checks every f16 value and
 * the rounding boundaries.
 */
#ifndef HR_BASE_FP16_H
#define HR_BASE_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t hr_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float hr_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint16_t hr_f32_to_f16(float f)
{
    uint32_t x = hr_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf stays inf; NaN stays a quiet NaN with its top payload bits */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) /* 65520 and above round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        /* Below 2^-14 the result is subnormal. Adding 0.5 puts the value where one
         * f32 ulp (2^-24) equals one f16 subnormal step, so the FPU's own
         * round-to-nearest-even does the rounding for us. */
        uint32_t r = hr_f32_bits(hr_bits_f32(ax) + 0.5f);
        return (uint16_t)(sign | (r - 0x3f000000u));
    }
    /* Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even. */
    ax += 0xc8000fffu + ((ax >> 13) & 1u);
    return (uint16_t)(sign | (ax >> 13));
}

static inline float hr_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf / NaN */
        return hr_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        /* zero or subnormal: mant x 2^-24, exact in f32 */
        float v = (float)mant * hr_bits_f32(0x33800000u);
        return sign ? -v : v;
    }
    return hr_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t hr_f32_to_bf16(float f)
{
    uint32_t u = hr_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

static inline float hr_bf16_to_f32(uint16_t h)
{
    return hr_bits_f32((uint32_t)h << 16);
}

#endif
