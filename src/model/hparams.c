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
    return HR_OK;
}
