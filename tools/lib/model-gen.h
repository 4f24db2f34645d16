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
    const char *arch;     /* "llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "gpt-oss",
                           * "qwen35", "qwen35moe" or "qwen3next" */
    const char *name;     /* general.name */
    const char *vocab;    /* a directory with tokenizer.json, or "builtin" */
    const char *chat_template; /* tokenizer.chat_template instead of the vocabulary's;
                                * NULL: the vocabulary's own */
    enum hr_ggml_type type; /* weight type of the 2-D tensors (hr_gen_model lists them) */
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;    /* 0: n_embd / n_head */
    uint32_t n_ff;
    /* Mixture of experts: qwen3moe and qwen2moe need n_expert; llama with
     * n_expert > 0 is Mixtral-style (experts n_ff wide). */
    uint32_t n_expert;
    uint32_t n_expert_used;
    uint32_t n_ff_exp;    /* expert width (qwen*moe); 0: n_ff */
    uint32_t n_ff_shexp;  /* qwen2moe's shared expert width; 0: n_ff */
    bool fuse_gate_up;    /* write ffn_gate_up_exps (expert e: its gate rows, then its up
                           * rows) instead of ffn_gate_exps + ffn_up_exps, with the same
                           * values: the two files compute the same */
    uint32_t n_vocab;     /* the model's vocab_size (config.json's): the tokenizer's
                           * ids padded with "[PAD<id>]" UNUSED tokens up to it, as
                           * llama.cpp's converter does (gpt-oss: 201,088 over
                           * o200k's 200,019); 0: the tokenizer's own size */
    uint32_t n_ctx;       /* context_length metadata */
    float rope_base;
    float rms_eps;
    enum hr_gen_rope_scaling rope_scaling;
    float rope_factor;    /* linear/yarn/llama3 factor */
    uint32_t rope_orig_ctx; /* original context for llama3/yarn */
    bool tied;            /* output shares token_embd */
    bool k_mix;           /* with Q4_K or Q5_K: llama-quantize's _M mix (Q6_K for the
                           * output and for attn_v / ffn_down of some layers) */
    bool real_mix;        /* with Q4_K: the five types of a real Q4_K_M download in
                           * one file, fallbacks included (model-gen.c, mix_type) */
    bool mxfp4_mix;       /* with MXFP4: experts MXFP4, every other matrix Q8_0, as
                           * every gpt-oss download keeps its experts */
    /* gpt-oss: attention.sliding_window (0: 128) and, when > 0,
     * attention.sliding_window_pattern (windowed layers: l % period < period - 1) */
    uint32_t n_swa;
    uint32_t swa_period;
    /* Hybrid Gated-DeltaNet models (qwen35, qwen35moe); 0 picks the default
     * noted. */
    uint32_t n_rot;         /* rotated dims per head (0: head_dim; qwen35*: head_dim / 4) */
    uint32_t ssm_k_heads;   /* DeltaNet q/k heads (0: n_head) */
    uint32_t ssm_v_heads;   /* DeltaNet v heads (0: 2 x ssm_k_heads) */
    uint32_t ssm_head_dim;  /* their dim (0: head_dim / 2) */
    uint32_t full_attn_interval; /* every Nth layer is attention (0: 4) */
    uint64_t seed;
    /* A stream per row (seeded by the tensor's stream and the row) instead
     * of one per tensor, so rows are drawn on every core: benchmark files of
     * several GiB in seconds instead of minutes. Different values from the
     * default draw (same seed, same shape: same file every time). */
    bool row_streams;
    bool progress;        /* a stderr line a second once writing takes longer than a
                           * second (gen-model sets it; large models take minutes) */
};

/* Fills `p` with the named shape: "tiny", "demo", "qwen2.5-0.5b",
 * "llama-3.2-1b", "qwen3-0.6b", "qwen3-30b-a3b", "tiny-moe", "gpt-oss-20b",
 * "gpt-oss-120b", "qwen3.5-27b", "qwen3.5-35b-a3b".
 * HR_ERR_NOT_FOUND for other names. */
enum hr_status hr_gen_shape(const char *shape, struct hr_gen_params *p, struct hr_err *err);

/* Names of the shapes, NULL-terminated, for --help. */
extern const char *const hr_gen_shape_names[];

/* Writes the model to `path` (atomically: .tmp then rename). */
enum hr_status hr_gen_model(const struct hr_gen_params *p, const char *path, struct hr_err *err);

#endif
