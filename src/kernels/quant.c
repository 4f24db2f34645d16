/*
 * quant.c - reference (de)quantization; see quant.h.
 *
 * Matching llama.cpp bit for bit means matching its arithmetic exactly:
 * Q8_0 multiplies by the reciprocal of the scale (x * (1/d), not x / d) and
 * rounds with roundf (half away from zero), and the scale is stored as f16
 * after the quants were computed from the f32 scale.
 */
#include "kernels/quant.h"

#include <math.h>

#include "base/fp16.h"

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
            y[b].qs[j] = (int8_t)roundf(xb[j] * id);
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
    case HR_GGML_F32:
        for (size_t i = 0; i < n; i++)
            ((float *)dst)[i] = x[i];
        return 0;
    case HR_GGML_F16: hr_convert_row_f16(x, dst, n); return 0;
    case HR_GGML_BF16: hr_convert_row_bf16(x, dst, n); return 0;
    case HR_GGML_Q8_0: hr_quantize_row_q8_0(x, dst, n); return 0;
    default: return -1;
    }
}

int hr_dequantize_row(enum hr_ggml_type type, const void *src, float *y, size_t n)
{
    switch (type) {
    case HR_GGML_F32:
        for (size_t i = 0; i < n; i++)
            y[i] = ((const float *)src)[i];
        return 0;
    case HR_GGML_F16:
        for (size_t i = 0; i < n; i++)
            y[i] = hr_f16_to_f32(((const uint16_t *)src)[i]);
        return 0;
    case HR_GGML_BF16:
        for (size_t i = 0; i < n; i++)
            y[i] = hr_bf16_to_f32(((const uint16_t *)src)[i]);
        return 0;
    case HR_GGML_Q8_0: hr_dequantize_row_q8_0(src, y, n); return 0;
    default: return -1;
    }
}
