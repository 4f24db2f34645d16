/*
 * model-gen.h - writes llama-family GGUF models with seeded random weights.
 *
 * Tests, benchmarks and the demo need models, and nothing may be downloaded,
 * so we generate them: the real tensor layout and metadata of `llama`,
 * `qwen2` and `qwen3` models (any dims, GQA, tied or untied output), random
 * weights, and a real vocabulary plus chat template from a Hugging Face
 * tokenizer directory (or the small built-in byte-level one). The files load
 * in llama.cpp (tests/oracle/load-models.mjs checks it).
 *
 * Determinism: every tensor's floats come from a stream seeded by (seed,
 * tensor name), independent of the weight type. An F32 and a Q8_0 model with
 * the same seed and shape hold the same underlying values, the Q8_0 one
 * quantized from them exactly as llama.cpp's quantizer would.
 *
 * Used by tools/gen-model.c (the command line) and by tests in-process.
 */
#ifndef HR_TOOLS_MODEL_GEN_H
#define HR_TOOLS_MODEL_GEN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "gguf/ggml-types.h"

enum hr_gen_rope_scaling { HR_GEN_ROPE_NONE, HR_GEN_ROPE_LINEAR, HR_GEN_ROPE_LLAMA3, HR_GEN_ROPE_YARN };

struct hr_gen_params {
    const char *arch;     /* "llama", "qwen2" or "qwen3" */
    const char *name;     /* general.name */
    const char *vocab;    /* a directory with tokenizer.json, or "builtin" */
    enum hr_ggml_type type; /* weight type of the 2-D tensors: F32, F16, BF16 or Q8_0 */
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;    /* 0: n_embd / n_head */
    uint32_t n_ff;
    uint32_t n_ctx;       /* context_length metadata */
    float rope_base;
    float rms_eps;
    enum hr_gen_rope_scaling rope_scaling;
    float rope_factor;    /* linear/yarn/llama3 factor */
    uint32_t rope_orig_ctx; /* original context for llama3/yarn */
    bool tied;            /* output shares token_embd */
    bool k_mix;           /* with Q4_K or Q5_K: llama-quantize's _M mix (Q6_K for the
                           * output and for attn_v / ffn_down of some layers) */
    uint64_t seed;
    bool progress;        /* a stderr line a second once writing takes longer than a
                           * second (gen-model sets it; large models take minutes) */
};

/* Fills `p` with the named shape: "tiny", "demo", "qwen2.5-0.5b",
 * "llama-3.2-1b", "qwen3-0.6b". HR_ERR_NOT_FOUND for other names. */
enum hr_status hr_gen_shape(const char *shape, struct hr_gen_params *p, struct hr_err *err);

/* Names of the shapes, NULL-terminated, for --help. */
extern const char *const hr_gen_shape_names[];

/* Writes the model to `path` (atomically: .tmp then rename). */
enum hr_status hr_gen_model(const struct hr_gen_params *p, const char *path, struct hr_err *err);

#endif
