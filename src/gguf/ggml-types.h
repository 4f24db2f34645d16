/*
 * ggml-types.h - the tensor element types a GGUF file can name, with their
 * block geometry.
 *
 * Quantized types store elements in blocks: `block_elems` values packed into
 * `block_bytes` bytes (Q8_0: 32 int8 plus one f16 scale = 34 bytes). A row's
 * element count must be a multiple of the block size. The ids are ggml's and
 * are stored in files, so they never change; gaps are ids ggml retired.
 * The table covers every type ggml defines so `headroom info` can describe any
 * file; which types the engine can compute with is the engine's business.
 */
#ifndef HR_GGUF_GGML_TYPES_H
#define HR_GGUF_GGML_TYPES_H

#include <stdbool.h>
#include <stdint.h>

enum hr_ggml_type {
    HR_GGML_F32 = 0,
    HR_GGML_F16 = 1,
    HR_GGML_Q4_0 = 2,
    HR_GGML_Q4_1 = 3,
    HR_GGML_Q5_0 = 6,
    HR_GGML_Q5_1 = 7,
    HR_GGML_Q8_0 = 8,
    HR_GGML_Q8_1 = 9,
    HR_GGML_Q2_K = 10,
    HR_GGML_Q3_K = 11,
    HR_GGML_Q4_K = 12,
    HR_GGML_Q5_K = 13,
    HR_GGML_Q6_K = 14,
    HR_GGML_Q8_K = 15,
    HR_GGML_IQ2_XXS = 16,
    HR_GGML_IQ2_XS = 17,
    HR_GGML_IQ3_XXS = 18,
    HR_GGML_IQ1_S = 19,
    HR_GGML_IQ4_NL = 20,
    HR_GGML_IQ3_S = 21,
    HR_GGML_IQ2_S = 22,
    HR_GGML_IQ4_XS = 23,
    HR_GGML_I8 = 24,
    HR_GGML_I16 = 25,
    HR_GGML_I32 = 26,
    HR_GGML_I64 = 27,
    HR_GGML_F64 = 28,
    HR_GGML_IQ1_M = 29,
    HR_GGML_BF16 = 30,
    HR_GGML_TQ1_0 = 34,
    HR_GGML_TQ2_0 = 35,
    HR_GGML_MXFP4 = 39,
    HR_GGML_TYPE_COUNT = 40 /* one past the largest id */
};

struct hr_ggml_type_info {
    const char *name;     /* "Q8_0"; NULL for an id ggml does not (or no longer) define */
    uint32_t block_elems; /* elements per block (1 for plain types) */
    uint32_t block_bytes; /* bytes per block */
};

/* Geometry of `type`, or NULL when the id is not a defined type. */
const struct hr_ggml_type_info *hr_ggml_type_info(uint32_t type);

/* "Q8_0", or "type#N" style placeholder "?" when unknown. Never NULL. */
const char *hr_ggml_type_name(uint32_t type);

/* Looks a type up by case-insensitive name ("q8_0", "F16"); false if none. */
bool hr_ggml_type_from_name(const char *name, enum hr_ggml_type *out);

#endif
