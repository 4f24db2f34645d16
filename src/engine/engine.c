/*
 * engine.c - the forward pass of llama-family models on the CPU; see engine.h.
 *
 * One step is one hr_pool_run: every thread walks the same list of
 * operations (embedding, then per layer: norm, Q/K/V, RoPE, KV store,
 * attention, output projection, norm, gate/up, SwiGLU, down projection;
 * then the final norm and the logits), splitting each by rows and meeting
 * at a barrier between operations, the way ggml walks its graph. All
 * buffers are views into the step arena at offsets from hr_plan_layout.
 *
 * Numerics follow llama.cpp's CPU backend where it matters for agreement:
 * RMSNorm sums squares in double and scales by 1/sqrtf(mean + eps); RoPE
 * builds its cos/sin table the way ggml_rope_cache_init does (theta
 * multiplied by powf(base, -2/n_rot) step by step, divided by the Llama-3
 * frequency factor when present); matmuls convert activations as ggml-cpu
 * does (kernels/matmul.h). Attention is the exception by design: it streams
 * the paged KV with an online softmax (flash style) instead of
 * materializing a score matrix, so its rounding differs from llama.cpp's
 * non-flash path at the 1e-7 level. With a quantized cache it follows
 * llama.cpp's flash path (attention.h), Hadamard rotations included.
 */
#include "engine/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/fp16.h"
#include "base/log.h"
#include "engine/attention.h"
#include "engine/threadpool.h"
#include "kernels/matmul.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* Per-sequence facts of the current step, derived before it runs. */
struct seq_info {
    struct hr_kv_seq *kv;
    uint32_t first_token; /* index of its first token in the step */
    uint32_t n_tokens;
    uint32_t pos0;        /* position of its first token (= KV length before the step) */
    uint32_t first_logit; /* its first logit row */
    uint32_t n_logits;
};

struct hr_engine {
    const struct hr_model *m;
    struct hr_engine_config cfg;
    struct hr_plan_dims dims;
    struct hr_pool *pool;
    struct hr_kv_pool *kv;
    uint8_t *arena;
    uint64_t arena_cap;
    uint64_t high_water;
    struct seq_info *seqs; /* max_step_tokens entries, fixed at init */
    int32_t *logit_rows;   /* token index of each logit row; max_step_logits entries */
    float theta_scale;     /* powf(rope_base, -2 / n_rot) */
    float freq_scale;      /* 1 / linear factor */
    /* The step being run (valid inside hr_engine_step only). */
    struct hr_plan plan;
    uint32_t n_seqs, n_tokens, n_logits;
};

/* ---- arena views ------------------------------------------------------- */

/* Every buffer the runner touches comes through here, so the high-water mark
 * is exactly the end of the furthest buffer used. */
static void *view(struct hr_engine *e, uint64_t off, uint64_t bytes)
{
    uint64_t end = off + bytes;
    HR_ASSERT(end <= e->arena_cap);
    if (bytes && end > e->high_water)
        e->high_water = end;
    return e->arena + off;
}

/* ---- init -------------------------------------------------------------- */

/* Records `t` in a set of at most 4 distinct weight types; false when full. */
static bool add_type(enum hr_ggml_type *set, uint32_t *n, enum hr_ggml_type t)
{
    for (uint32_t i = 0; i < *n; i++)
        if (set[i] == t)
            return true;
    if (*n == 4)
        return false;
    set[(*n)++] = t;
    return true;
}

enum hr_status hr_engine_init(const struct hr_model *m, const struct hr_engine_config *cfg_in,
                              struct hr_engine **out, struct hr_err *err)
{
    *out = NULL;
    struct hr_engine_config cfg = *cfg_in;
    if (cfg.n_threads <= 0)
        cfg.n_threads = hr_physical_cores();
    /* hr_kv_pool_init refuses a type that is not a cache type. */
    if (!cfg.kv_block_tokens)
        cfg.kv_block_tokens = HR_KV_DEFAULT_BLOCK_TOKENS;
    if (!cfg.max_step_tokens)
        cfg.max_step_tokens = 512;
    if (!cfg.max_step_logits)
        cfg.max_step_logits = cfg.max_step_tokens;
    if (cfg.max_step_logits > cfg.max_step_tokens)
        cfg.max_step_logits = cfg.max_step_tokens;

    struct hr_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    e->m = m;
    e->cfg = cfg;
    const struct hr_hparams *hp = &m->hp;
    struct hr_kv_config kc = {
        .n_layer = hp->n_layer,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim_k,
        .block_tokens = cfg.kv_block_tokens,
        .type = cfg.kv_type,
        .budget_bytes = cfg.kv_budget_bytes,
    };
    struct hr_plan_dims *d = &e->dims;
    d->n_embd = hp->n_embd;
    d->n_head = hp->n_head;
    d->n_head_kv = hp->n_head_kv;
    d->head_dim = hp->head_dim_k;
    d->n_rot = hp->n_rot;
    d->n_ff = hp->n_ff;
    d->n_vocab = hp->n_vocab;
    d->n_threads = (uint32_t)cfg.n_threads;
    d->attn_scratch_bytes = hr_attn_scratch_bytes(cfg.kv_type, hp->head_dim_k,
                                                  hp->n_head / hp->n_head_kv);
    d->kv_block_bytes = hr_kv_block_bytes_for(&kc);
    bool types_ok = true;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct hr_layer *L = &m->layers[l];
        const struct hr_weight *in_embd[] = {&L->wq, &L->wk, &L->wv, &L->w_gate, &L->w_up};
        for (size_t i = 0; i < 5; i++)
            types_ok &= add_type(d->types_embd, &d->n_types_embd, in_embd[i]->type);
        types_ok &= add_type(d->types_q, &d->n_types_q, L->wo.type);
        types_ok &= add_type(d->types_ff, &d->n_types_ff, L->w_down.type);
    }
    if (!types_ok) {
        free(e);
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "the model mixes more than 4 weight types in one kind of matrix");
    }
    d->type_out = m->output.type;

    e->theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    e->freq_scale = hp->rope_scaling == HR_ROPE_SCALING_LINEAR ? 1.0f / hp->rope_factor : 1.0f;

    enum hr_status st;
    if ((st = hr_pool_init(cfg.n_threads, &e->pool, err)) != HR_OK ||
        (st = hr_kv_pool_init(&kc, &e->kv, err)) != HR_OK) {
        hr_engine_free(e);
        return st;
    }
    struct hr_step_shape max_shape = {cfg.max_step_tokens, cfg.max_step_logits, 0};
    struct hr_plan max_plan;
    hr_plan_layout(d, &max_shape, &max_plan);
    e->arena_cap = max_plan.arena_bytes;
    /* Reserved address space; pages are committed by the steps that use them. */
    e->arena = mmap(NULL, e->arena_cap, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    e->seqs = calloc(cfg.max_step_tokens, sizeof(*e->seqs));
    e->logit_rows = calloc(cfg.max_step_logits, sizeof(*e->logit_rows));
    if (e->arena == MAP_FAILED || !e->seqs || !e->logit_rows) {
        if (e->arena == MAP_FAILED)
            e->arena = NULL;
        hr_engine_free(e);
        return hr_err_set(err, HR_ERR_NOMEM, "cannot reserve the step arena");
    }
    *out = e;
    return HR_OK;
}

void hr_engine_free(struct hr_engine *e)
{
    if (!e)
        return;
    hr_pool_free(e->pool);
    hr_kv_pool_free(e->kv);
    if (e->arena)
        munmap(e->arena, e->arena_cap);
    free(e->seqs);
    free(e->logit_rows);
    free(e);
}

const struct hr_model *hr_engine_model(const struct hr_engine *e) { return e->m; }
struct hr_kv_pool *hr_engine_kv_pool(struct hr_engine *e) { return e->kv; }
const struct hr_plan_dims *hr_engine_plan_dims(const struct hr_engine *e) { return &e->dims; }
int hr_engine_n_threads(const struct hr_engine *e) { return e->cfg.n_threads; }
uint64_t hr_engine_arena_high_water(const struct hr_engine *e) { return e->high_water; }
uint64_t hr_engine_arena_capacity(const struct hr_engine *e) { return e->arena_cap; }

uint64_t hr_engine_arena_release(struct hr_engine *e)
{
    /* Between steps nothing in the arena is live. MADV_DONTNEED on private
     * anonymous memory drops the pages at once; the next step faults in
     * zero pages as it touches them. */
    const long page = sysconf(_SC_PAGESIZE);
    const uint64_t len = (e->arena_cap + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
    if (!e->arena || madvise(e->arena, len, MADV_DONTNEED) != 0)
        return 0;
    return len;
}
void *hr_engine_arena_base(struct hr_engine *e) { return e->arena; }

enum hr_status hr_engine_seq_init(struct hr_engine *e, struct hr_kv_seq *seq, uint32_t max_tokens,
                                  struct hr_err *err)
{
    return hr_kv_seq_init(seq, max_tokens, e->cfg.kv_block_tokens, err);
}

void hr_engine_step_shape(const struct hr_engine *e, const struct hr_step *step,
                          struct hr_step_shape *shape)
{
    memset(shape, 0, sizeof(*shape));
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        const struct hr_step_seq *s = &step->seqs[i];
        shape->n_tokens += s->n_tokens;
        shape->n_logits += s->n_logits;
        shape->new_blocks += hr_kv_blocks_needed(s->kv->n_blocks, s->kv->n_tokens + s->n_tokens,
                                                 e->cfg.kv_block_tokens);
    }
}

void hr_engine_plan(const struct hr_engine *e, const struct hr_step *step, struct hr_plan *plan)
{
    struct hr_step_shape shape;
    hr_engine_step_shape(e, step, &shape);
    hr_plan_layout(&e->dims, &shape, plan);
}

const float *hr_engine_logits(const struct hr_engine *e, uint32_t seq, uint32_t j)
{
    HR_ASSERT(seq < e->n_seqs && j < e->seqs[seq].n_logits);
    uint64_t row = e->seqs[seq].first_logit + j;
    return (const float *)(e->arena + e->plan.off_logits) + row * e->dims.n_vocab;
}

/* ---- small kernels ----------------------------------------------------- */

static void rms_norm_row(const float *x, const float *w, float *y, uint32_t n, float eps)
{
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (uint32_t i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

/* cos/sin pairs for one position, as ggml_rope_cache_init computes them. */
static void rope_cache_row(const struct hr_engine *e, int32_t pos, float *cache)
{
    const struct hr_model *m = e->m;
    const float *ff = m->rope_freqs.data;
    float theta = (float)pos;
    for (uint32_t i0 = 0; i0 < m->hp.n_rot; i0 += 2) {
        const float f = ff ? ff[i0 / 2] : 1.0f;
        const float t = e->freq_scale * (theta / f);
        cache[i0] = cosf(t);
        cache[i0 + 1] = sinf(t);
        theta *= e->theta_scale;
    }
}

/* Rotates one head of `hd` values in place. Llama rotates adjacent pairs
 * (x[2i], x[2i+1]); NeoX (qwen) rotates x[i] with x[i + n_rot/2]. */
static void rope_head(float *x, const float *cache, uint32_t n_rot, bool neox)
{
    for (uint32_t i0 = 0; i0 < n_rot; i0 += 2) {
        const float c = cache[i0], s = cache[i0 + 1];
        uint32_t a = neox ? i0 / 2 : i0, b = neox ? i0 / 2 + n_rot / 2 : i0 + 1;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

static inline float silu(float x)
{
    return x / (1.0f + expf(-x));
}

static void rows_of(uint32_t n, int ith, int nth, uint32_t *r0, uint32_t *r1)
{
    *r0 = (uint32_t)((uint64_t)n * (uint64_t)ith / (uint64_t)nth);
    *r1 = (uint32_t)((uint64_t)n * (uint64_t)(ith + 1) / (uint64_t)nth);
}

/* ---- the forward pass -------------------------------------------------- */

struct fwd {
    struct hr_engine *e;
    int32_t *tokens, *pos, *seq_of;
    float *rope, *x, *xn, *q, *k, *v, *attn, *gate, *up, *out_x, *logits;
    void *act;
    uint8_t *attn_scr;
};

/* Y = X W^T over m rows: both phases, with the barrier between them. */
static void matmul(struct hr_engine *e, const struct hr_weight *w, const float *x, uint32_t m,
                   void *act, float *y, int ith, int nth, bool prepared)
{
    if (!prepared) {
        hr_matmul_prepare(w->type, x, m, w->ne0, act, ith, nth);
        hr_pool_barrier(e->pool);
    }
    if (w->packed)
        hr_matmul_compute_packed(w->type, w->packed, w->ne0, w->ne1, act, m, y, w->ne1, ith, nth);
    else
        hr_matmul_compute(w->type, w->data, w->ne0, w->ne1, act, m, y, w->ne1, ith, nth);
}

/* Reuse prepared activations only for the same weight type: the kernels'
 * activation layout may carry per-type extras (the K-quants' auxiliary sums
 * differ between Q4_K/Q5_K and Q6_K), so equal vec-dot types are not enough. */
static bool same_act(const struct hr_weight *a, const struct hr_weight *b)
{
    return a->type == b->type;
}

static void add_bias(float *y, const struct hr_weight *b, uint32_t n)
{
    if (!b->data)
        return;
    const float *bb = b->data;
    for (uint32_t i = 0; i < n; i++)
        y[i] += bb[i];
}

static void forward_worker(void *ctx, int ith, int nth)
{
    struct fwd *f = ctx;
    struct hr_engine *e = f->e;
    const struct hr_model *m = e->m;
    const struct hr_hparams *hp = &m->hp;
    const uint32_t T = e->n_tokens, E = hp->n_embd, hd = hp->head_dim_k;
    const uint32_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd, F = hp->n_ff;
    const uint32_t group = hp->n_head / hp->n_head_kv;
    const uint32_t rot_k = hr_attn_rot_k_dim(e->cfg.kv_type, hd);
    const uint32_t rot_v = hr_attn_rot_v_dim(e->cfg.kv_type, hd);
    uint32_t r0, r1;
    rows_of(T, ith, nth, &r0, &r1);

    /* Embeddings and the RoPE table. */
    for (uint32_t t = r0; t < r1; t++) {
        if (m->tok_embd.packed) { /* the tied output matrix, packed */
            hr_matmul_packed_row(m->tok_embd.type, m->tok_embd.packed, E, (size_t)f->tokens[t],
                                 f->x + (size_t)t * E);
        } else {
            const uint8_t *row = (const uint8_t *)m->tok_embd.data +
                                 (size_t)f->tokens[t] * hr_row_bytes(m->tok_embd.type, E);
            hr_dequantize_row_any(m->tok_embd.type, row, f->x + (size_t)t * E, E);
        }
        rope_cache_row(e, f->pos[t], f->rope + (size_t)t * hp->n_rot);
    }
    hr_pool_barrier(e->pool);

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct hr_layer *L = &m->layers[l];
        for (uint32_t t = r0; t < r1; t++)
            rms_norm_row(f->x + (size_t)t * E, L->attn_norm.data, f->xn + (size_t)t * E, E,
                         hp->rms_eps);
        hr_pool_barrier(e->pool);

        matmul(e, &L->wq, f->xn, T, f->act, f->q, ith, nth, false);
        bool prepared = same_act(&L->wq, &L->wk);
        if (!prepared)
            hr_pool_barrier(e->pool);
        matmul(e, &L->wk, f->xn, T, f->act, f->k, ith, nth, prepared);
        prepared = same_act(&L->wk, &L->wv);
        if (!prepared)
            hr_pool_barrier(e->pool);
        matmul(e, &L->wv, f->xn, T, f->act, f->v, ith, nth, prepared);
        hr_pool_barrier(e->pool);

        /* Biases, Q/K norms, RoPE, and the new K/V rows into the cache. */
        for (uint32_t t = r0; t < r1; t++) {
            float *q = f->q + (size_t)t * q_dim, *k = f->k + (size_t)t * kv_dim;
            float *v = f->v + (size_t)t * kv_dim;
            add_bias(q, &L->bq, q_dim);
            add_bias(k, &L->bk, kv_dim);
            add_bias(v, &L->bv, kv_dim);
            const float *rc = f->rope + (size_t)t * hp->n_rot;
            for (uint32_t h = 0; h < hp->n_head; h++) {
                if (L->q_norm.data)
                    rms_norm_row(q + h * hd, L->q_norm.data, q + h * hd, hd, hp->rms_eps);
                rope_head(q + h * hd, rc, hp->n_rot, m->rope_neox);
            }
            for (uint32_t h = 0; h < hp->n_head_kv; h++) {
                if (L->k_norm.data)
                    rms_norm_row(k + h * hd, L->k_norm.data, k + h * hd, hd, hp->rms_eps);
                rope_head(k + h * hd, rc, hp->n_rot, m->rope_neox);
            }
            /* Quantized caches see Q, K and V in the Hadamard basis (see
             * attention.h): scores are unchanged, quantization error is not. */
            if (rot_k)
                for (uint32_t i = 0; i < q_dim; i += rot_k)
                    hr_attn_rotate(q + i, rot_k);
            if (rot_k)
                for (uint32_t i = 0; i < kv_dim; i += rot_k)
                    hr_attn_rotate(k + i, rot_k);
            if (rot_v)
                for (uint32_t i = 0; i < kv_dim; i += rot_v)
                    hr_attn_rotate(v + i, rot_v);
            hr_attn_store(e->kv, e->seqs[f->seq_of[t]].kv->blocks, l, hp->n_head_kv, hd,
                          f->pos[t], k, v);
        }
        hr_pool_barrier(e->pool);

        /* Attention: units of (sequence, KV head, block of query tokens), dealt
         * round-robin so early (cheap) and late (long) blocks mix on every
         * thread. */
        void *scr = f->attn_scr + (size_t)ith * e->plan.attn_scr_stride;
        const uint32_t bq = hr_attn_block_tokens(group);
        uint32_t unit = 0;
        for (uint32_t si = 0; si < e->n_seqs; si++) {
            const struct seq_info *s = &e->seqs[si];
            struct hr_attn_ctx ac = {.kv = e->kv, .blocks = s->kv->blocks, .layer = l,
                                     .head_dim = hd, .block_tokens = e->cfg.kv_block_tokens,
                                     .group = group, .scale = 1.0f / sqrtf((float)hd)};
            for (uint32_t g = 0; g < hp->n_head_kv; g++) {
                for (uint32_t t0 = 0; t0 < s->n_tokens; t0 += bq, unit++) {
                    if (unit % (uint32_t)nth != (uint32_t)ith)
                        continue;
                    uint32_t nq = s->n_tokens - t0 < bq ? s->n_tokens - t0 : bq;
                    size_t row = (size_t)(s->first_token + t0) * q_dim + (size_t)g * group * hd;
                    hr_attention(&ac, g, f->q + row, q_dim, (int32_t)(s->pos0 + t0), nq,
                                 f->attn + row, q_dim, scr);
                }
            }
        }
        hr_pool_barrier(e->pool);
        if (rot_v) { /* back from the Hadamard basis of V (H x H = I) */
            for (uint32_t t = r0; t < r1; t++)
                for (uint32_t i = 0; i < q_dim; i += rot_v)
                    hr_attn_rotate(f->attn + (size_t)t * q_dim + i, rot_v);
            hr_pool_barrier(e->pool);
        }

        matmul(e, &L->wo, f->attn, T, f->act, f->xn, ith, nth, false);
        hr_pool_barrier(e->pool);
        for (uint32_t t = r0; t < r1; t++) {
            float *x = f->x + (size_t)t * E, *xn = f->xn + (size_t)t * E;
            for (uint32_t i = 0; i < E; i++)
                x[i] += xn[i];
            rms_norm_row(x, L->ffn_norm.data, xn, E, hp->rms_eps);
        }
        hr_pool_barrier(e->pool);

        matmul(e, &L->w_gate, f->xn, T, f->act, f->gate, ith, nth, false);
        prepared = same_act(&L->w_gate, &L->w_up);
        if (!prepared)
            hr_pool_barrier(e->pool);
        matmul(e, &L->w_up, f->xn, T, f->act, f->up, ith, nth, prepared);
        hr_pool_barrier(e->pool);
        /* Element-wise: split over all T x F values, not by token, so a
         * decode step's one token does not leave the other threads idle. */
        uint32_t i0, i1;
        rows_of(T * F, ith, nth, &i0, &i1);
        for (uint32_t i = i0; i < i1; i++)
            f->gate[i] = silu(f->gate[i]) * f->up[i];
        hr_pool_barrier(e->pool);

        matmul(e, &L->w_down, f->gate, T, f->act, f->xn, ith, nth, false);
        hr_pool_barrier(e->pool);
        rows_of(T * E, ith, nth, &i0, &i1);
        for (uint32_t i = i0; i < i1; i++)
            f->x[i] += f->xn[i];
        hr_pool_barrier(e->pool);
    }

    /* Logits only for the rows asked for. */
    const uint32_t Lr = e->n_logits;
    if (Lr == 0)
        return;
    uint32_t j0, j1;
    rows_of(Lr, ith, nth, &j0, &j1);
    for (uint32_t j = j0; j < j1; j++)
        rms_norm_row(f->x + (size_t)e->logit_rows[j] * E, m->output_norm.data,
                     f->out_x + (size_t)j * E, E, hp->rms_eps);
    hr_pool_barrier(e->pool);
    matmul(e, &m->output, f->out_x, Lr, f->act, f->logits, ith, nth, false);
}

enum hr_status hr_engine_step(struct hr_engine *e, struct hr_step *step, struct hr_err *err)
{
    struct hr_step_shape shape;
    if (step->n_seqs == 0)
        return hr_err_set(err, HR_ERR_INVALID, "a step needs at least one sequence");
    hr_engine_step_shape(e, step, &shape);
    if (shape.n_tokens > e->cfg.max_step_tokens || shape.n_logits > e->cfg.max_step_logits)
        return hr_err_set(err, HR_ERR_LIMIT,
                          "step of %u tokens and %u logit rows exceeds the engine's %u and %u",
                          shape.n_tokens, shape.n_logits, e->cfg.max_step_tokens,
                          e->cfg.max_step_logits);
    const uint32_t n_vocab = e->dims.n_vocab;
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        const struct hr_step_seq *s = &step->seqs[i];
        if (!s->kv || !s->tokens || s->n_tokens == 0 || s->n_logits > s->n_tokens)
            return hr_err_set(err, HR_ERR_INVALID, "step sequence %u is malformed", i);
        for (uint32_t j = 0; j < i; j++)
            if (step->seqs[j].kv == s->kv)
                return hr_err_set(err, HR_ERR_INVALID, "sequence %u appears twice in a step", i);
        uint64_t end = (uint64_t)s->kv->n_tokens + s->n_tokens;
        if (end > (uint64_t)s->kv->cap_blocks * e->cfg.kv_block_tokens)
            return hr_err_set(err, HR_ERR_LIMIT, "sequence %u would reach %llu tokens, past its "
                              "table of %u", i, (unsigned long long)end,
                              s->kv->cap_blocks * e->cfg.kv_block_tokens);
        for (uint32_t t = 0; t < s->n_tokens; t++)
            if (s->tokens[t] < 0 || (uint32_t)s->tokens[t] >= n_vocab)
                return hr_err_set(err, HR_ERR_INVALID, "token id %d is outside the vocabulary "
                                  "of %u", s->tokens[t], n_vocab);
    }
    if (shape.new_blocks > hr_kv_n_free(e->kv))
        return hr_err_set(err, HR_ERR_NOMEM, "the step needs %u KV blocks, %u are free",
                          shape.new_blocks, hr_kv_n_free(e->kv));
    /* From here on nothing can fail. */
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        enum hr_status st = hr_kv_seq_reserve(step->seqs[i].kv, e->kv, step->seqs[i].n_tokens, err);
        HR_ASSERT(st == HR_OK);
    }
    hr_plan_layout(&e->dims, &shape, &e->plan);
    const struct hr_plan *p = &e->plan;
    e->high_water = 0;
    e->n_seqs = step->n_seqs;
    e->n_tokens = shape.n_tokens;
    e->n_logits = shape.n_logits;

    const uint32_t T = shape.n_tokens, L = shape.n_logits;
    const uint32_t q_dim = e->dims.n_head * e->dims.head_dim;
    const uint32_t kv_dim = e->dims.n_head_kv * e->dims.head_dim;
    struct fwd f = {.e = e};
    f.tokens = view(e, p->off_tokens, T * sizeof(int32_t));
    f.pos = view(e, p->off_pos, T * sizeof(int32_t));
    f.seq_of = view(e, p->off_seq_of, T * sizeof(int32_t));
    f.rope = view(e, p->off_rope, (uint64_t)T * e->dims.n_rot * sizeof(float));
    f.x = view(e, p->off_x, (uint64_t)T * e->dims.n_embd * sizeof(float));
    f.xn = view(e, p->off_xn, (uint64_t)T * e->dims.n_embd * sizeof(float));
    f.act = view(e, p->off_act, p->act_bytes);
    f.q = view(e, p->off_q, (uint64_t)T * q_dim * sizeof(float));
    f.k = view(e, p->off_k, (uint64_t)T * kv_dim * sizeof(float));
    f.v = view(e, p->off_v, (uint64_t)T * kv_dim * sizeof(float));
    f.attn = view(e, p->off_attn, (uint64_t)T * q_dim * sizeof(float));
    f.gate = view(e, p->off_gate, (uint64_t)T * e->dims.n_ff * sizeof(float));
    f.up = view(e, p->off_up, (uint64_t)T * e->dims.n_ff * sizeof(float));
    f.attn_scr = view(e, p->off_attn_scr, p->attn_scr_stride * e->dims.n_threads);
    f.out_x = view(e, p->off_out_x, (uint64_t)L * e->dims.n_embd * sizeof(float));
    f.logits = view(e, p->off_logits, (uint64_t)L * n_vocab * sizeof(float));

    uint32_t t = 0, row = 0;
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        struct hr_step_seq *s = &step->seqs[i];
        struct seq_info *si = &e->seqs[i];
        si->kv = s->kv;
        si->first_token = t;
        si->n_tokens = s->n_tokens;
        si->pos0 = s->kv->n_tokens;
        si->first_logit = row;
        si->n_logits = s->n_logits;
        for (uint32_t j = 0; j < s->n_tokens; j++, t++) {
            f.tokens[t] = s->tokens[j];
            f.pos[t] = (int32_t)(si->pos0 + j);
            f.seq_of[t] = (int32_t)i;
            if (j >= s->n_tokens - s->n_logits)
                e->logit_rows[row++] = (int32_t)t;
        }
    }
    hr_pool_run(e->pool, forward_worker, &f);
    for (uint32_t i = 0; i < step->n_seqs; i++)
        step->seqs[i].kv->n_tokens += step->seqs[i].n_tokens;
    return HR_OK;
}
