/*
 * model-gen.c - random-weight llama-family GGUF models; see model-gen.h.
 *
 * Tensor names and shapes follow llama.cpp's (ne[0] is the input dimension
 * of a matrix, so attn_q.weight is [n_embd, n_head * head_dim]). 1-D tensors
 * (norms, biases, rope factors) are always F32, as llama.cpp's converter and
 * quantizer leave them. A 2-D tensor whose rows do not divide into the
 * requested type's blocks falls back the way llama-quantize's
 * tensor_type_fallback does, except that we write Q8_0 where it would pick
 * Q5_0/Q5_1 (for Q4_K/Q5_K; Q6_K falls back to Q8_0 there too), since the
 * engine does not implement those: 256-blocks -> Q8_0 when rows divide by
 * 32, anything else -> F16. (Qwen2.5-0.5B's n_embd = 896 is such a case:
 * only its ffn_down, 4864 wide, stays K-quantized.)
 *
 * Weight scale: matrices are N(0, 1/sqrt(fan_in)) so activations keep unit
 * scale through the layers and the final distribution is neither flat nor a
 * single spike; norm weights are 1 + N(0, 0.1); biases N(0, 0.1).
 */
#include "model-gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "hf-vocab.h"
#include "kernels/quant.h"
#include "base/rand.h"
#include "base/sys.h"

const char *const hr_gen_shape_names[] = {"tiny", "demo", "qwen2.5-0.5b", "llama-3.2-1b",
                                          "qwen3-0.6b", NULL};

enum hr_status hr_gen_shape(const char *shape, struct hr_gen_params *p, struct hr_err *err)
{
    struct hr_gen_params d = {
        .arch = "qwen3",
        .vocab = "builtin",
        .type = HR_GGML_F32,
        .n_ctx = 4096,
        .rope_base = 1000000.0f,
        .rms_eps = 1e-6f,
        .tied = true,
        .seed = 42,
    };
    if (strcmp(shape, "tiny") == 0) {
        d.name = "tiny (random weights)";
        d.n_embd = 64, d.n_layer = 2, d.n_head = 4, d.n_head_kv = 2, d.n_ff = 128;
    } else if (strcmp(shape, "demo") == 0) {
        /* Qwen3-style and small: the real Qwen3 vocabulary dominates its size. */
        d.name = "headroom demo (random weights, not a trained model)";
        d.type = HR_GGML_Q8_0;
        d.n_embd = 256, d.n_layer = 4, d.n_head = 4, d.n_head_kv = 2, d.head_dim = 64;
        d.n_ff = 768;
        d.n_ctx = 32768;
    } else if (strcmp(shape, "qwen2.5-0.5b") == 0) {
        d.name = "Qwen2.5-0.5B shape (random weights)";
        d.arch = "qwen2";
        d.n_embd = 896, d.n_layer = 24, d.n_head = 14, d.n_head_kv = 2, d.n_ff = 4864;
        d.n_ctx = 32768;
    } else if (strcmp(shape, "llama-3.2-1b") == 0) {
        d.name = "Llama-3.2-1B shape (random weights)";
        d.arch = "llama";
        d.n_embd = 2048, d.n_layer = 16, d.n_head = 32, d.n_head_kv = 8, d.n_ff = 8192;
        d.n_ctx = 131072;
        d.rope_base = 500000.0f;
        d.rms_eps = 1e-5f;
        d.rope_scaling = HR_GEN_ROPE_LLAMA3, d.rope_factor = 32.0f, d.rope_orig_ctx = 8192;
    } else if (strcmp(shape, "qwen3-0.6b") == 0) {
        d.name = "Qwen3-0.6B shape (random weights)";
        d.n_embd = 1024, d.n_layer = 28, d.n_head = 16, d.n_head_kv = 8, d.head_dim = 128;
        d.n_ff = 3072;
        d.n_ctx = 40960;
    } else {
        return hr_err_set(err, HR_ERR_NOT_FOUND, "unknown shape '%s'", shape);
    }
    *p = d;
    return HR_OK;
}

/* ---- tensor data ------------------------------------------------------- */

enum init_kind { INIT_MATRIX, INIT_NORM, INIT_BIAS, INIT_ROPE_FREQS };

struct tensor_src {
    char name[96];
    enum hr_ggml_type type;
    uint32_t n_dims;
    uint64_t ne[2];
    enum init_kind init;
    uint64_t seed;
    const struct hr_gen_params *params;
    struct gen *gen; /* for the progress line */
};

/* Llama 3 frequency scaling, stored as per-frequency divisors in
 * rope_freqs.weight the way llama.cpp's converter writes it: high
 * frequencies (short wavelengths) are kept, low ones divided by the factor,
 * and the band between is interpolated. */
static float llama3_rope_factor(const struct hr_gen_params *p, uint32_t head_dim, uint64_t i)
{
    const double low_freq_factor = 1.0, high_freq_factor = 4.0;
    double freq = 1.0 / pow(p->rope_base, (double)(2 * i) / head_dim);
    double wavelen = 2.0 * M_PI / freq;
    double low_wavelen = p->rope_orig_ctx / low_freq_factor;
    double high_wavelen = p->rope_orig_ctx / high_freq_factor;
    if (wavelen < high_wavelen)
        return 1.0f;
    if (wavelen > low_wavelen)
        return p->rope_factor;
    double smooth = (p->rope_orig_ctx / wavelen - low_freq_factor) /
                    (high_freq_factor - low_freq_factor);
    return (float)(1.0 / ((1.0 - smooth) / p->rope_factor + smooth));
}

static void note_written(struct gen *g, uint64_t n_bytes);

static enum hr_status fill_tensor(void *ctx, void *dst, uint64_t n_bytes, struct hr_err *err)
{
    const struct tensor_src *t = ctx;
    const struct hr_ggml_type_info *ti = hr_ggml_type_info(t->type);
    uint64_t row = t->ne[0], rows = t->n_dims > 1 ? t->ne[1] : 1;
    uint64_t row_bytes = row / ti->block_elems * ti->block_bytes;
    if (row_bytes * rows != n_bytes)
        return hr_err_set(err, HR_ERR_INVALID, "size mismatch");
    float *buf = malloc(row * sizeof(float));
    if (!buf)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    struct hr_rng rng;
    hr_rng_seed(&rng, t->seed);
    double sd = 1.0 / sqrt((double)row);
    uint32_t head_dim = t->params->head_dim;
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t i = 0; i < row; i++) {
            switch (t->init) {
            case INIT_MATRIX: buf[i] = (float)(hr_rng_normal(&rng) * sd); break;
            case INIT_NORM: buf[i] = (float)(1.0 + 0.1 * hr_rng_normal(&rng)); break;
            case INIT_BIAS: buf[i] = (float)(0.1 * hr_rng_normal(&rng)); break;
            case INIT_ROPE_FREQS: buf[i] = llama3_rope_factor(t->params, head_dim, i); break;
            }
        }
        if (hr_quantize_row(t->type, buf, (uint8_t *)dst + r * row_bytes, row) != 0) {
            free(buf);
            return hr_err_set(err, HR_ERR_UNSUPPORTED, "cannot write type %s",
                              hr_ggml_type_name(t->type));
        }
    }
    free(buf);
    note_written(t->gen, n_bytes);
    return HR_OK;
}

/* ---- the model --------------------------------------------------------- */

struct gen {
    struct hr_gen_params p;
    struct hr_gguf_writer *w;
    struct tensor_src *tensors;
    size_t n_tensors;
    /* progress: bytes of tensor data written of the total, since t0 */
    uint64_t total_bytes, done_bytes;
    double t0, t_last;
};

/* A line a second once the write has taken a second: a model of several
 * GiB takes minutes to generate, and silence looks like a hang. */
static void note_written(struct gen *g, uint64_t n_bytes)
{
    g->done_bytes += n_bytes;
    if (!g->p.progress)
        return;
    const double now = hr_now_seconds();
    if (now - g->t0 < 1.0 || now - g->t_last < 1.0)
        return;
    g->t_last = now;
    fprintf(stderr, "gen-model: %.1f of %.1f MiB written (%.0f%%, %.1f s)\n",
            (double)g->done_bytes / 1048576.0, (double)g->total_bytes / 1048576.0,
            g->total_bytes ? 100.0 * (double)g->done_bytes / (double)g->total_bytes : 100.0,
            now - g->t0);
}

/* The _M mixes of llama-quantize (Q4_K_M, Q5_K_M), which is what most
 * K-quant downloads are: the output matrix (or the tied embedding) in Q6_K,
 * and attn_v / ffn_down in Q6_K for the first and last eighth of the layers
 * and every third layer between. Other tensors keep the base type. */
static enum hr_ggml_type mix_type(const struct hr_gen_params *p, const char *name)
{
    if (!p->k_mix || (p->type != HR_GGML_Q4_K && p->type != HR_GGML_Q5_K))
        return p->type;
    if (strcmp(name, "output.weight") == 0 || (p->tied && strcmp(name, "token_embd.weight") == 0))
        return HR_GGML_Q6_K;
    unsigned il;
    int used = 0;
    if (sscanf(name, "blk.%u.%n", &il, &used) != 1 || used == 0)
        return p->type;
    const char *rest = name + used;
    if (strcmp(rest, "attn_v.weight") != 0 && strcmp(rest, "ffn_down.weight") != 0)
        return p->type;
    const unsigned n = p->n_layer;
    const bool more_bits = il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2;
    return more_bits ? HR_GGML_Q6_K : p->type;
}

static void add(struct gen *g, const char *name, uint64_t ne0, uint64_t ne1, enum init_kind init)
{
    struct tensor_src *t = &g->tensors[g->n_tensors++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->init = init;
    t->params = &g->p;
    t->seed = g->p.seed ^ hr_hash_str(name);
    t->type = HR_GGML_F32;
    if (t->n_dims == 2) {
        const enum hr_ggml_type want = mix_type(&g->p, name);
        const struct hr_ggml_type_info *ti = hr_ggml_type_info(want);
        if (ne0 % ti->block_elems == 0)
            t->type = want;
        else if (ti->block_elems > 32 && ne0 % 32 == 0)
            t->type = HR_GGML_Q8_0;
        else
            t->type = HR_GGML_F16;
    }
    t->gen = g;
    const struct hr_ggml_type_info *ti = hr_ggml_type_info(t->type);
    g->total_bytes += ne0 / ti->block_elems * ti->block_bytes * (ne1 ? ne1 : 1);
}

static uint32_t file_type_of(enum hr_ggml_type t)
{
    /* llama.cpp's llama_ftype values. For a uniform K-quant file we write what
     * `llama-quantize --pure ... Q4_K_M` writes: the _M id (the mix itself is
     * not applied). */
    switch (t) {
    case HR_GGML_F32: return 0;
    case HR_GGML_F16: return 1;
    case HR_GGML_Q4_0: return 2;
    case HR_GGML_Q8_0: return 7;
    case HR_GGML_Q4_K: return 15;
    case HR_GGML_Q5_K: return 17;
    case HR_GGML_Q6_K: return 18;
    case HR_GGML_BF16: return 32;
    default: return 0;
    }
}

#define KEY(buf, fmt) (snprintf(buf, sizeof(buf), fmt, arch), buf)

static enum hr_status write_meta(struct gen *g, uint32_t n_vocab, struct hr_err *err)
{
    const struct hr_gen_params *p = &g->p;
    const char *arch = p->arch;
    struct hr_gguf_writer *w = g->w;
    char k[128];
    enum hr_status st = HR_OK;
    st |= hr_gguf_writer_set_str(w, "general.architecture", arch);
    st |= hr_gguf_writer_set_str(w, "general.name", p->name ? p->name : "random weights");
    st |= hr_gguf_writer_set_str(w, "general.description",
                                 "Generated by headroom's gen-model with seeded random weights; "
                                 "not a trained model.");
    st |= hr_gguf_writer_set_u32(w, "general.file_type", file_type_of(p->type));
    if (p->type != HR_GGML_F32 && p->type != HR_GGML_F16 && p->type != HR_GGML_BF16)
        st |= hr_gguf_writer_set_u32(w, "general.quantization_version", 2);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.context_length"), p->n_ctx);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.embedding_length"), p->n_embd);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.block_count"), p->n_layer);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.feed_forward_length"), p->n_ff);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.attention.head_count"), p->n_head);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.attention.head_count_kv"), p->n_head_kv);
    st |= hr_gguf_writer_set_f32(w, KEY(k, "%s.attention.layer_norm_rms_epsilon"), p->rms_eps);
    st |= hr_gguf_writer_set_f32(w, KEY(k, "%s.rope.freq_base"), p->rope_base);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.attention.key_length"), p->head_dim);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.attention.value_length"), p->head_dim);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.rope.dimension_count"), p->head_dim);
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.vocab_size"), n_vocab);
    if (p->rope_scaling == HR_GEN_ROPE_LINEAR || p->rope_scaling == HR_GEN_ROPE_YARN) {
        st |= hr_gguf_writer_set_str(w, KEY(k, "%s.rope.scaling.type"),
                                     p->rope_scaling == HR_GEN_ROPE_LINEAR ? "linear" : "yarn");
        st |= hr_gguf_writer_set_f32(w, KEY(k, "%s.rope.scaling.factor"), p->rope_factor);
        if (p->rope_orig_ctx)
            st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.rope.scaling.original_context_length"),
                                         p->rope_orig_ctx);
    }
    if (st != HR_OK)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory writing metadata");
    return HR_OK;
}

enum hr_status hr_gen_model(const struct hr_gen_params *params, const char *path,
                            struct hr_err *err)
{
    struct gen g = {.p = *params};
    struct hr_gen_params *p = &g.p;
    bool is_llama = strcmp(p->arch, "llama") == 0, is_qwen2 = strcmp(p->arch, "qwen2") == 0,
         is_qwen3 = strcmp(p->arch, "qwen3") == 0;
    if (!is_llama && !is_qwen2 && !is_qwen3)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "architecture '%s' (the generator writes llama, qwen2 and qwen3)",
                          p->arch);
    if (!p->n_embd || !p->n_layer || !p->n_head || !p->n_ff)
        return hr_err_set(err, HR_ERR_INVALID, "n_embd, n_layer, n_head and n_ff must be > 0");
    if (!p->n_head_kv)
        p->n_head_kv = p->n_head;
    if (p->n_head % p->n_head_kv != 0)
        return hr_err_set(err, HR_ERR_INVALID, "n_head %u is not a multiple of n_head_kv %u",
                          p->n_head, p->n_head_kv);
    if (!p->head_dim) {
        if (p->n_embd % p->n_head != 0)
            return hr_err_set(err, HR_ERR_INVALID, "n_embd %u is not a multiple of n_head %u",
                              p->n_embd, p->n_head);
        p->head_dim = p->n_embd / p->n_head;
    }
    if (p->head_dim % 2 != 0)
        return hr_err_set(err, HR_ERR_INVALID, "head_dim %u must be even for RoPE", p->head_dim);
    switch (p->type) {
    case HR_GGML_F32:
    case HR_GGML_F16:
    case HR_GGML_BF16:
    case HR_GGML_Q8_0:
    case HR_GGML_Q4_0:
    case HR_GGML_Q4_K:
    case HR_GGML_Q5_K:
    case HR_GGML_Q6_K: break;
    default:
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "weight type %s (the generator writes F32, F16, BF16, Q8_0, Q4_0, "
                          "Q4_K, Q5_K and Q6_K)",
                          hr_ggml_type_name(p->type));
    }
    if (p->rope_scaling == HR_GEN_ROPE_LLAMA3 && (!is_llama || !p->rope_orig_ctx))
        return hr_err_set(err, HR_ERR_INVALID,
                          "llama3 rope scaling needs arch llama and an original context");

    struct hr_hf_vocab *vocab = NULL;
    enum hr_status st = strcmp(p->vocab, "builtin") == 0 ? hr_hf_vocab_builtin(&vocab, err)
                                                          : hr_hf_vocab_load(p->vocab, &vocab, err);
    if (st != HR_OK)
        return st;
    uint32_t n_vocab = hr_hf_vocab_n_tokens(vocab);

    g.w = hr_gguf_writer_init();
    g.tensors = calloc(4 + (size_t)p->n_layer * 16, sizeof(*g.tensors));
    if (!g.w || !g.tensors) {
        st = hr_err_set(err, HR_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = write_meta(&g, n_vocab, err)) != HR_OK)
        goto out;
    if ((st = hr_hf_vocab_write(vocab, g.w, err)) != HR_OK)
        goto out;

    uint64_t q_dim = (uint64_t)p->n_head * p->head_dim, kv_dim = (uint64_t)p->n_head_kv * p->head_dim;
    add(&g, "token_embd.weight", p->n_embd, n_vocab, INIT_MATRIX);
    if (p->rope_scaling == HR_GEN_ROPE_LLAMA3)
        add(&g, "rope_freqs.weight", p->head_dim / 2, 0, INIT_ROPE_FREQS);
    for (uint32_t l = 0; l < p->n_layer; l++) {
        char n[96];
#define LAYER(suffix) (snprintf(n, sizeof(n), "blk.%u.%s", l, suffix), n)
        add(&g, LAYER("attn_norm.weight"), p->n_embd, 0, INIT_NORM);
        add(&g, LAYER("attn_q.weight"), p->n_embd, q_dim, INIT_MATRIX);
        add(&g, LAYER("attn_k.weight"), p->n_embd, kv_dim, INIT_MATRIX);
        add(&g, LAYER("attn_v.weight"), p->n_embd, kv_dim, INIT_MATRIX);
        if (is_qwen2) {
            add(&g, LAYER("attn_q.bias"), q_dim, 0, INIT_BIAS);
            add(&g, LAYER("attn_k.bias"), kv_dim, 0, INIT_BIAS);
            add(&g, LAYER("attn_v.bias"), kv_dim, 0, INIT_BIAS);
        }
        if (is_qwen3) {
            add(&g, LAYER("attn_q_norm.weight"), p->head_dim, 0, INIT_NORM);
            add(&g, LAYER("attn_k_norm.weight"), p->head_dim, 0, INIT_NORM);
        }
        add(&g, LAYER("attn_output.weight"), q_dim, p->n_embd, INIT_MATRIX);
        add(&g, LAYER("ffn_norm.weight"), p->n_embd, 0, INIT_NORM);
        add(&g, LAYER("ffn_gate.weight"), p->n_embd, p->n_ff, INIT_MATRIX);
        add(&g, LAYER("ffn_up.weight"), p->n_embd, p->n_ff, INIT_MATRIX);
        add(&g, LAYER("ffn_down.weight"), p->n_ff, p->n_embd, INIT_MATRIX);
#undef LAYER
    }
    add(&g, "output_norm.weight", p->n_embd, 0, INIT_NORM);
    if (!p->tied)
        add(&g, "output.weight", p->n_embd, n_vocab, INIT_MATRIX);

    g.t0 = hr_now_seconds();
    for (size_t i = 0; i < g.n_tensors; i++) {
        struct tensor_src *t = &g.tensors[i];
        st = hr_gguf_writer_add_tensor_cb(g.w, t->name, t->type, t->n_dims, t->ne, fill_tensor,
                                          t, err);
        if (st != HR_OK)
            goto out;
    }
    st = hr_gguf_writer_write_file(g.w, path, err);
out:
    hr_gguf_writer_free(g.w);
    free(g.tensors);
    hr_hf_vocab_free(vocab);
    return st;
}
