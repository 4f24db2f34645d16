/* hparams.c - read hyper-parameters from GGUF metadata; see hparams.h. */
#include "model/hparams.h"

#include <stdio.h>
#include <string.h>

const char *hr_rope_scaling_name(enum hr_rope_scaling s)
{
    switch (s) {
    case HR_ROPE_SCALING_NONE: return "none";
    case HR_ROPE_SCALING_LINEAR: return "linear";
    case HR_ROPE_SCALING_YARN: return "yarn";
    case HR_ROPE_SCALING_LLAMA3: return "llama3";
    }
    return "?";
}

static enum hr_status get_u32(const struct hr_gguf *g, const char *arch, const char *suffix,
                              bool required, uint32_t def, uint32_t *out, struct hr_err *err)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    enum hr_status st = hr_gguf_get_u32(g, key, out, err);
    if (st == HR_ERR_NOT_FOUND && !required) {
        *out = def;
        return HR_OK;
    }
    if (st == HR_ERR_NOT_FOUND)
        return hr_err_set(err, st, "required key '%s' is missing", key);
    return st;
}

static enum hr_status get_f32(const struct hr_gguf *g, const char *arch, const char *suffix,
                              float def, float *out, struct hr_err *err)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    enum hr_status st = hr_gguf_get_f32(g, key, out, err);
    if (st == HR_ERR_NOT_FOUND) {
        *out = def;
        return HR_OK;
    }
    return st;
}

/* Element i of an integer or bool array as int64; false for other element
 * types (the caller names the key). */
static bool arr_int(const struct hr_gguf_value *arr, uint64_t i, int64_t *out)
{
    switch (arr->v.arr.elem_type) {
    case HR_GGUF_INT8:
    case HR_GGUF_INT16:
    case HR_GGUF_INT32:
    case HR_GGUF_INT64: *out = hr_gguf_arr_get_i64(arr, i); return true;
    case HR_GGUF_UINT8:
    case HR_GGUF_UINT16:
    case HR_GGUF_UINT32:
    case HR_GGUF_BOOL: *out = (int64_t)hr_gguf_arr_get_u64(arr, i); return true;
    default: return false;
    }
}

enum hr_status hr_hparams_read(const struct hr_gguf *g, struct hr_hparams *hp, struct hr_err *err)
{
    memset(hp, 0, sizeof(*hp));
    struct hr_gguf_str arch;
    enum hr_status st = hr_gguf_get_str(g, "general.architecture", &arch, err);
    if (st == HR_ERR_NOT_FOUND)
        return hr_err_set(err, st, "required key 'general.architecture' is missing");
    if (st != HR_OK)
        return st;
    if (arch.len == 0 || arch.len >= sizeof(hp->arch) || memchr(arch.ptr, '\0', arch.len))
        return hr_err_set(err, HR_ERR_INVALID, "general.architecture is not a valid name");
    memcpy(hp->arch, arch.ptr, arch.len);
    const char *a = hp->arch;

    if ((st = get_u32(g, a, "context_length", true, 0, &hp->n_ctx_train, err)) ||
        (st = get_u32(g, a, "embedding_length", true, 0, &hp->n_embd, err)) ||
        (st = get_u32(g, a, "block_count", true, 0, &hp->n_layer, err)) ||
        (st = get_u32(g, a, "feed_forward_length", false, 0, &hp->n_ff, err)) ||
        (st = get_u32(g, a, "attention.head_count", true, 0, &hp->n_head, err)))
        return st;
    if (hp->n_head == 0 || hp->n_embd == 0 || hp->n_layer == 0)
        return hr_err_set(err, HR_ERR_INVALID, "%s: head_count, embedding_length and block_count "
                          "must be > 0", a);
    uint32_t hd = hp->n_embd / hp->n_head;
    if ((st = get_u32(g, a, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv, err)) ||
        (st = get_u32(g, a, "attention.key_length", false, hd, &hp->head_dim_k, err)) ||
        (st = get_u32(g, a, "attention.value_length", false, hd, &hp->head_dim_v, err)) ||
        (st = get_u32(g, a, "rope.dimension_count", false, hp->head_dim_k, &hp->n_rot, err)) ||
        (st = get_f32(g, a, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps, err)) ||
        (st = get_f32(g, a, "rope.freq_base", 10000.0f, &hp->rope_base, err)) ||
        (st = get_f32(g, a, "rope.scaling.factor", 1.0f, &hp->rope_factor, err)) ||
        (st = get_u32(g, a, "rope.scaling.original_context_length", false, 0, &hp->rope_orig_ctx,
                      err)))
        return st;

    if ((st = get_f32(g, a, "rope.scaling.yarn_ext_factor", -1.0f, &hp->yarn_ext_factor, err)) ||
        (st = get_f32(g, a, "rope.scaling.attn_factor", 1.0f, &hp->yarn_attn_factor, err)) ||
        (st = get_f32(g, a, "rope.scaling.yarn_beta_fast", 32.0f, &hp->yarn_beta_fast, err)) ||
        (st = get_f32(g, a, "rope.scaling.yarn_beta_slow", 1.0f, &hp->yarn_beta_slow, err)) ||
        (st = get_f32(g, a, "rope.freq_base_swa", hp->rope_base, &hp->rope_base_swa, err)) ||
        (st = get_u32(g, a, "attention.sliding_window", false, 0, &hp->n_swa, err)) ||
        (st = get_u32(g, a, "attention.sliding_window_pattern", false, UINT32_MAX,
                      &hp->swa_period, err)))
        return st;
    if (!hp->rope_orig_ctx) /* llama.cpp's n_ctx_orig_yarn falls back to the training context */
        hp->rope_orig_ctx = hp->n_ctx_train;

    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
    struct hr_gguf_str scaling;
    st = hr_gguf_get_str(g, key, &scaling, err);
    if (st == HR_OK) {
        if (hr_gguf_str_eq(scaling, "linear"))
            hp->rope_scaling = HR_ROPE_SCALING_LINEAR;
        else if (hr_gguf_str_eq(scaling, "yarn"))
            hp->rope_scaling = HR_ROPE_SCALING_YARN;
        else if (!hr_gguf_str_eq(scaling, "none"))
            return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s: unknown value '%.*s'", key,
                              (int)(scaling.len > 32 ? 32 : scaling.len), scaling.ptr);
    } else if (st != HR_ERR_NOT_FOUND) {
        return st;
    }
    if (hr_gguf_find_tensor(g, "rope_freqs.weight"))
        hp->rope_scaling = HR_ROPE_SCALING_LLAMA3;

    const struct hr_gguf_value *tokens = NULL;
    if (hr_gguf_get_arr(g, "tokenizer.ggml.tokens", HR_GGUF_STRING, &tokens, NULL) == HR_OK &&
        tokens->v.arr.n <= UINT32_MAX)
        hp->n_vocab = (uint32_t)tokens->v.arr.n;
    else if ((st = get_u32(g, a, "vocab_size", false, 0, &hp->n_vocab, err)))
        return st;
    hp->tied_output = hr_gguf_find_tensor(g, "output.weight") == NULL;

    if ((st = get_u32(g, a, "expert_count", false, 0, &hp->n_expert, err)) ||
        (st = get_u32(g, a, "expert_used_count", false, 0, &hp->n_expert_used, err)) ||
        (st = get_u32(g, a, "expert_feed_forward_length", false, 0, &hp->n_ff_exp, err)) ||
        (st = get_u32(g, a, "expert_shared_feed_forward_length", false, 0, &hp->n_ff_shexp,
                      err)) ||
        (st = get_f32(g, a, "expert_weights_scale", 0.0f, &hp->expert_weights_scale, err)) ||
        (st = get_u32(g, a, "expert_gating_func", false, 0, &hp->expert_gating_func, err)))
        return st;
    if ((st = get_u32(g, a, "ssm.conv_kernel", false, 0, &hp->ssm_d_conv, err)) ||
        (st = get_u32(g, a, "ssm.inner_size", false, 0, &hp->ssm_d_inner, err)) ||
        (st = get_u32(g, a, "ssm.state_size", false, 0, &hp->ssm_d_state, err)) ||
        (st = get_u32(g, a, "ssm.time_step_rank", false, 0, &hp->ssm_dt_rank, err)) ||
        (st = get_u32(g, a, "ssm.group_count", false, 0, &hp->ssm_n_group, err)) ||
        (st = get_u32(g, a, "full_attention_interval", false, 0, &hp->full_attn_interval, err)))
        return st;
    const struct hr_gguf_value *arr = NULL;
    snprintf(key, sizeof(key), "%s.rope.dimension_sections", a);
    st = hr_gguf_get_arr(g, key, HR_GGUF_TYPE_COUNT, &arr, err);
    if (st == HR_OK) {
        if (arr->v.arr.raw == NULL || arr->v.arr.n < 1 || arr->v.arr.n > 4)
            return hr_err_set(err, HR_ERR_INVALID, "key '%s' must be 1 to 4 integers", key);
        for (uint64_t i = 0; i < arr->v.arr.n; i++) {
            int64_t v = -1;
            if (!arr_int(arr, i, &v) || v < 0 || v > 65536)
                return hr_err_set(err, HR_ERR_INVALID, "key '%s'[%llu] = %lld is out of range",
                                  key, (unsigned long long)i, (long long)v);
            hp->rope_sections[i] = (int32_t)v;
        }
    } else if (st != HR_ERR_NOT_FOUND) {
        return st;
    }
    snprintf(key, sizeof(key), "%s.attention.recurrent_layers", a);
    st = hr_gguf_get_arr(g, key, HR_GGUF_TYPE_COUNT, &arr, err);
    if (st == HR_OK) {
        if (arr->v.arr.raw == NULL || arr->v.arr.n > 256)
            return hr_err_set(err, HR_ERR_INVALID, "key '%s' must be at most 256 flags", key);
        hp->has_recurrent_layers = true;
        for (uint64_t i = 0; i < arr->v.arr.n; i++) {
            int64_t v = 0;
            if (!arr_int(arr, i, &v))
                return hr_err_set(err, HR_ERR_INVALID, "key '%s' is not an array of flags", key);
            if (v != 0)
                hp->recurrent_layers[i / 64] |= 1ull << (i % 64);
        }
    } else if (st != HR_ERR_NOT_FOUND) {
        return st;
    }
    snprintf(key, sizeof(key), "%s.expert_weights_norm", a);
    bool norm = false;
    st = hr_gguf_get_bool(g, key, &norm, err);
    if (st == HR_OK)
        hp->expert_weights_norm = norm;
    else if (st == HR_ERR_NOT_FOUND)
        hp->expert_weights_norm = -1;
    else
        return st;
    return HR_OK;
}

void hr_hparams_count_params(const struct hr_gguf *g, const struct hr_hparams *hp,
                             uint64_t *total, uint64_t *active)
{
    uint64_t all = 0, act = 0;
    for (uint64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        const struct hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        uint64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        all += n;
        if (hp->n_expert > 1 && t->ne[2] == hp->n_expert && hp->n_expert_used <= hp->n_expert)
            n = n / hp->n_expert * hp->n_expert_used;
        act += n;
    }
    *total = all;
    *active = act;
}
