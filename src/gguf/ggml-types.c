/* ggml-types.c - the block geometry table; see ggml-types.h. */
#include "gguf/ggml-types.h"

#include <stddef.h>
#include <strings.h>

/* Sizes follow ggml's block structs, e.g. Q4_K: f16 d + f16 dmin + 12 scale
 * bytes + 128 nibble bytes = 144 bytes per 256 values. */
static const struct hr_ggml_type_info g_types[HR_GGML_TYPE_COUNT] = {
    [HR_GGML_F32] = {"F32", 1, 4},
    [HR_GGML_F16] = {"F16", 1, 2},
    [HR_GGML_Q4_0] = {"Q4_0", 32, 18},
    [HR_GGML_Q4_1] = {"Q4_1", 32, 20},
    [HR_GGML_Q5_0] = {"Q5_0", 32, 22},
    [HR_GGML_Q5_1] = {"Q5_1", 32, 24},
    [HR_GGML_Q8_0] = {"Q8_0", 32, 34},
    [HR_GGML_Q8_1] = {"Q8_1", 32, 36},
    [HR_GGML_Q2_K] = {"Q2_K", 256, 84},
    [HR_GGML_Q3_K] = {"Q3_K", 256, 110},
    [HR_GGML_Q4_K] = {"Q4_K", 256, 144},
    [HR_GGML_Q5_K] = {"Q5_K", 256, 176},
    [HR_GGML_Q6_K] = {"Q6_K", 256, 210},
    [HR_GGML_Q8_K] = {"Q8_K", 256, 292},
    [HR_GGML_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [HR_GGML_IQ2_XS] = {"IQ2_XS", 256, 74},
    [HR_GGML_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [HR_GGML_IQ1_S] = {"IQ1_S", 256, 50},
    [HR_GGML_IQ4_NL] = {"IQ4_NL", 32, 18},
    [HR_GGML_IQ3_S] = {"IQ3_S", 256, 110},
    [HR_GGML_IQ2_S] = {"IQ2_S", 256, 82},
    [HR_GGML_IQ4_XS] = {"IQ4_XS", 256, 136},
    [HR_GGML_I8] = {"I8", 1, 1},
    [HR_GGML_I16] = {"I16", 1, 2},
    [HR_GGML_I32] = {"I32", 1, 4},
    [HR_GGML_I64] = {"I64", 1, 8},
    [HR_GGML_F64] = {"F64", 1, 8},
    [HR_GGML_IQ1_M] = {"IQ1_M", 256, 56},
    [HR_GGML_BF16] = {"BF16", 1, 2},
    [HR_GGML_TQ1_0] = {"TQ1_0", 256, 54},
    [HR_GGML_TQ2_0] = {"TQ2_0", 256, 66},
    [HR_GGML_MXFP4] = {"MXFP4", 32, 17},
};

const struct hr_ggml_type_info *hr_ggml_type_info(uint32_t type)
{
    if (type >= HR_GGML_TYPE_COUNT || g_types[type].name == NULL)
        return NULL;
    return &g_types[type];
}

const char *hr_ggml_type_name(uint32_t type)
{
    const struct hr_ggml_type_info *info = hr_ggml_type_info(type);
    return info ? info->name : "?";
}

bool hr_ggml_type_from_name(const char *name, enum hr_ggml_type *out)
{
    for (uint32_t t = 0; t < HR_GGML_TYPE_COUNT; t++) {
        if (g_types[t].name && strcasecmp(g_types[t].name, name) == 0) {
            *out = (enum hr_ggml_type)t;
            return true;
        }
    }
    return false;
}
