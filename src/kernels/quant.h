/*
 * quant.h - reference quantizers and dequantizers for the GGUF weight types.
 *
 * These are the plain-C definitions every faster kernel is tested against,
 * and what the test-model generator uses to write quantized tensors. Each
 * quantizer is bit-identical to llama.cpp's reference quantizer
 * (`quantize_row_*_ref` in ggml-quants.c) for the same f32 input, so a model
 * we generate is the model llama.cpp would have produced from those floats.
 *
 * Block layouts (little-endian, packed, as stored in GGUF):
 *   Q8_0: 32 values -> f16 d, int8 q[32];            x = d * q
 *
 * Row lengths must be multiples of the block size (checked by the callers:
 * the GGUF reader and writer refuse other shapes).
 * Thread safety: pure functions.
 */
#ifndef HR_KERNELS_QUANT_H
#define HR_KERNELS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/ggml-types.h"

#define HR_QK8_0 32

struct hr_block_q8_0 {
    uint16_t d;            /* f16 scale */
    int8_t qs[HR_QK8_0];   /* quants */
};

_Static_assert(sizeof(struct hr_block_q8_0) == 34, "Q8_0 block is 34 bytes");

/* n must be a multiple of 32. */
void hr_quantize_row_q8_0(const float *x, struct hr_block_q8_0 *y, size_t n);
void hr_dequantize_row_q8_0(const struct hr_block_q8_0 *x, float *y, size_t n);

void hr_convert_row_f16(const float *x, uint16_t *y, size_t n);
void hr_convert_row_bf16(const float *x, uint16_t *y, size_t n);

/*
 * Converts n f32 values (a multiple of the block size) into `type` at `dst`,
 * which holds n / block_elems * block_bytes bytes. Returns 0, or -1 when this
 * build cannot write `type`.
 */
int hr_quantize_row(enum hr_ggml_type type, const float *x, void *dst, size_t n);

/* The inverse, for every type hr_quantize_row writes; -1 otherwise. */
int hr_dequantize_row(enum hr_ggml_type type, const void *src, float *y, size_t n);

#endif
