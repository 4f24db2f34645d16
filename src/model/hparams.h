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
    /* YaRN (llama.cpp's hparams and cparams defaults): ext_factor < 0 means
     * "not set" (1 for yarn scaling, else 0); attn_factor is
     * rope.scaling.attn_factor (default 1); betas default 32 and 1. */
    float yarn_ext_factor;
    float yarn_attn_factor;
    float yarn_beta_fast;
    float yarn_beta_slow;
    /* Sliding-window attention (gpt-oss): attention.sliding_window (0: none)
     * and attention.sliding_window_pattern (UINT32_MAX: absent, the
     * architecture's default applies; 0: every layer windowed, as in
     * llama.cpp's set_swa_pattern). rope_base_swa: rope.freq_base_swa, else
     * rope_base. */
    uint32_t n_swa;
    uint32_t swa_period;
    float rope_base_swa;
    uint32_t n_vocab;      /* from tokenizer.ggml.tokens, else {arch}.vocab_size, else 0 */
    bool tied_output;      /* no output.weight: logits use token_embd */
    /* Mixture of experts ({arch}.expert_*); n_expert = 0 for a dense model.
     * Which of them an architecture needs is the model's business (model.c):
     * this module reads what is there. */
    uint32_t n_expert;           /* expert_count */
    uint32_t n_expert_used;      /* expert_used_count: k, the experts each token runs */
    uint32_t n_ff_exp;           /* expert_feed_forward_length (0: absent) */
    uint32_t n_ff_shexp;         /* expert_shared_feed_forward_length (0: absent) */
    float expert_weights_scale;  /* expert_weights_scale (0: absent, no scaling) */
    int expert_weights_norm;     /* expert_weights_norm: 1, 0, or -1 when absent */
    uint32_t expert_gating_func; /* expert_gating_func as llama.cpp numbers it (0: absent,
                                    1 softmax, 2 sigmoid, 3 softmax over the k chosen) */
    /* Hybrid recurrent models (qwen35, qwen35moe, qwen3next): the Gated
     * DeltaNet layers' sizes ({arch}.ssm.*; all 0 when absent) and which
     * layers are full attention. */
    uint32_t ssm_d_conv;         /* ssm.conv_kernel: the causal conv's width (4) */
    uint32_t ssm_d_inner;        /* ssm.inner_size: v heads x v head dim */
    uint32_t ssm_d_state;        /* ssm.state_size: the k (and v) head dim */
    uint32_t ssm_dt_rank;        /* ssm.time_step_rank: the number of v heads */
    uint32_t ssm_n_group;        /* ssm.group_count: the number of k heads */
    uint32_t full_attn_interval; /* full_attention_interval (0: absent; llama.cpp's default 4) */
    /* attention.recurrent_layers, when present: bit l set = layer l is
     * recurrent (layers past 256 are not described; such files are refused) */
    bool has_recurrent_layers;
    uint64_t recurrent_layers[4];
    int32_t rope_sections[4];    /* rope.dimension_sections (M-RoPE), zeros when absent */
};

/* Parameters of the file's tensors: all of them, and those one token
 * multiplies by (`active`: of each stacked expert tensor [.., .., n_expert],
 * only n_expert_used slices). Equal for a dense model. */
void hr_hparams_count_params(const struct hr_gguf *g, const struct hr_hparams *hp,
                             uint64_t *total, uint64_t *active);

/* Fills `hp` from `g`; an error names the missing or mistyped key. */
enum hr_status hr_hparams_read(const struct hr_gguf *g, struct hr_hparams *hp, struct hr_err *err);

#endif
