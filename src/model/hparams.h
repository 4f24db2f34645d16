/*
 * hparams.h - a llama-family model's hyper-parameters, read from GGUF
 * metadata.
 *
 * Keys follow llama.cpp's naming: `general.architecture` names the
 * architecture and the rest live under it (`qwen3.embedding_length`, ...).
 * Optional keys get llama.cpp's defaults (head_count_kv = head_count,
 * key_length = embedding_length / head_count, rope.freq_base = 10000). A
 * missing required key is an error naming it; the engine issue decides which
 * architectures it can run, this module only describes.
 *
 * Used by `headroom info` and the engine. Pure: reads an immutable hr_gguf.
 */
#ifndef HR_MODEL_HPARAMS_H
#define HR_MODEL_HPARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "gguf/gguf.h"

enum hr_rope_scaling {
    HR_ROPE_SCALING_NONE,
    HR_ROPE_SCALING_LINEAR,
    HR_ROPE_SCALING_YARN,
    HR_ROPE_SCALING_LLAMA3, /* per-frequency factors in rope_freqs.weight */
};

const char *hr_rope_scaling_name(enum hr_rope_scaling s);

struct hr_hparams {
    char arch[32];
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_ff;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim_k;
    uint32_t head_dim_v;
    uint32_t n_rot;        /* rotated dims per head */
    float rms_eps;
    float rope_base;
    enum hr_rope_scaling rope_scaling;
    float rope_factor;     /* 1 when unscaled */
    uint32_t rope_orig_ctx;
    uint32_t n_vocab;      /* from tokenizer.ggml.tokens, else {arch}.vocab_size, else 0 */
    bool tied_output;      /* no output.weight: logits use token_embd */
};

/* Fills `hp` from `g`; an error names the missing or mistyped key. */
enum hr_status hr_hparams_read(const struct hr_gguf *g, struct hr_hparams *hp, struct hr_err *err);

#endif
