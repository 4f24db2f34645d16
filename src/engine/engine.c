/*
 * engine.c - the forward pass of llama-family models on the CPU; see engine.h.
 *
 * One step is one hr_pool_run: every thread walks the same list of
 * operations (embedding, then per layer: norm, the layer's token-mixer kind
 * - attention: Q/K/V, RoPE, KV store, attention, output projection; or, in
 * hybrid models, the Gated DeltaNet over the sequence's state slot
 * (deltanet_mixer, deltanet.h) - then norm, then the layer's FFN kind - dense
 * (gate/up, SwiGLU, down) or a mixture of experts (moe_ffn: router, top-k,
 * one GEMM per chosen expert over its tokens, optional shared expert);
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
#include "engine/deltanet.h"
#include "engine/moe-weights.h"
#include "engine/rope-row.h"
#include "engine/state-pool.h"
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
    float *state;         /* its recurrent state slot (hybrid models), else NULL */
};

struct hr_engine {
    const struct hr_model *m;
    struct hr_engine_config cfg;
    struct hr_plan_dims dims;
    struct hr_pool *pool;
    struct hr_kv_pool *kv;
    struct hr_state_pool *state; /* recurrent state slots (empty without recurrent layers) */
    uint8_t *arena;
    uint64_t arena_cap;
    uint64_t high_water;
    struct seq_info *seqs; /* max_step_tokens entries, fixed at init */
    uint32_t *kv_slot;     /* per layer: its layer in a KV block of its kind (kv-cache.h) */
    bool windowed;         /* the pool has windowed blocks for the sliding-window layers */
    int32_t *logit_rows;   /* token index of each logit row; max_step_logits entries */
    struct hr_rope rope;   /* RoPE's constants (hr_rope_init) */
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

/* ggml_rope_yarn_corr_dim: the dimension whose wavelength fits n_rot_turns
 * turns into the original context. */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot_turns, float base)
{
    return n_dims * logf(n_ctx_orig / (n_rot_turns * 2 * (float)M_PI)) / (2 * logf(base));
}

/* YaRN's constants as llama.cpp derives them (llama-context.cpp: ext_factor 1
 * for yarn scaling unless the metadata sets it; attn_factor = mscale(factor)
 * / (1 + 0.1 ln factor) x rope.scaling.attn_factor, so that ggml's rope,
 * which multiplies by (1 + 0.1 ln factor) again, scales by mscale; ggml's
 * corr dims from beta_fast and beta_slow). */
void hr_rope_init(const struct hr_model *m, struct hr_rope *r)
{
    const struct hr_hparams *hp = &m->hp;
    r->theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    r->freq_scale = hp->rope_scaling == HR_ROPE_SCALING_LINEAR ||
                            hp->rope_scaling == HR_ROPE_SCALING_YARN
                        ? 1.0f / hp->rope_factor
                        : 1.0f;
    r->ext_factor = hp->yarn_ext_factor >= 0.0f ? hp->yarn_ext_factor
                    : hp->rope_scaling == HR_ROPE_SCALING_YARN ? 1.0f
                                                                : 0.0f;
    r->attn_factor = 1.0f;
    if (r->ext_factor != 0.0f) {
        const float factor = 1.0f / r->freq_scale;
        r->attn_factor = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(factor) + 1.0f;
        r->attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    r->attn_factor *= hp->yarn_attn_factor;
    const int n_dims = (int)hp->n_rot, n_ctx_orig = (int)hp->rope_orig_ctx;
    const float base = hp->rope_base;
    const float start = floorf(yarn_corr_dim(n_dims, n_ctx_orig, hp->yarn_beta_fast, base));
    const float end = ceilf(yarn_corr_dim(n_dims, n_ctx_orig, hp->yarn_beta_slow, base));
    r->corr_dims[0] = start > 0.0f ? start : 0.0f;
    r->corr_dims[1] = end < (float)(n_dims - 1) ? end : (float)(n_dims - 1);
}

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

void hr_engine_kv_config(const struct hr_model *m, enum hr_ggml_type kv_type,
                         uint32_t block_tokens, bool full_window, struct hr_kv_config *out)
{
    /* KV only for the attention layers: a hybrid model's recurrent layers
     * keep their state in the state pool instead. With sliding-window and
     * full layers both present, each kind is numbered from 0 in blocks of
     * its own (kv-cache.h, "Windowed KV"); a block holds the larger count. */
    const struct hr_hparams *hp = &m->hp;
    uint32_t n_full = 0, n_win = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        if (m->layers[l].mixer == HR_MIXER_ATTN)
            *(m->layers[l].window ? &n_win : &n_full) += 1;
    const bool windowed = n_win > 0 && n_full > 0 && !full_window;
    *out = (struct hr_kv_config){
        .n_layer = windowed ? (n_full > n_win ? n_full : n_win) : m->n_attn_layers,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim_k,
        .block_tokens = block_tokens ? block_tokens : HR_KV_DEFAULT_BLOCK_TOKENS,
        .type = kv_type,
        .window = windowed ? hp->n_swa : 0,
    };
}

void hr_engine_kv_slots(const struct hr_model *m, bool windowed, uint32_t *slot)
{
    uint32_t n_full = 0, n_win = 0;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const struct hr_layer *L = &m->layers[l];
        slot[l] = 0;
        if (L->mixer == HR_MIXER_ATTN)
            slot[l] = !windowed ? L->kv_layer : L->window ? n_win++ : n_full++;
    }
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
    struct hr_kv_config kc;
    hr_engine_kv_config(m, cfg.kv_type, cfg.kv_block_tokens, cfg.kv_full_window, &kc);
    kc.budget_bytes = cfg.kv_budget_bytes;
    /* Each attention layer's place in a block of its kind. */
    e->windowed = kc.window != 0;
    e->kv_slot = calloc(hp->n_layer ? hp->n_layer : 1, sizeof(*e->kv_slot));
    if (!e->kv_slot) {
        free(e);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    hr_engine_kv_slots(m, e->windowed, e->kv_slot);
    struct hr_plan_dims *d = &e->dims;
    d->n_embd = hp->n_embd;
    d->n_head = hp->n_head;
    d->n_head_kv = hp->n_head_kv;
    d->head_dim = hp->head_dim_k;
    d->n_rot = hp->n_rot;
    const struct hr_moe *mo = &m->moe;
    d->n_ff = mo->n_expert ? mo->n_ff_shexp : hp->n_ff; /* width of the gate/up buffers */
    d->n_expert = mo->n_expert;
    d->n_expert_used = mo->n_expert_used;
    d->n_ff_exp = mo->n_ff_exp;
    d->n_vocab = hp->n_vocab;
    d->attn_gated = m->attn_gated;
    d->dn_conv_dim = m->dn.conv_dim;
    d->dn_value_dim = m->dn.value_dim;
    d->dn_n_v_heads = m->dn.n_v_heads;
    d->n_threads = (uint32_t)cfg.n_threads;
    d->attn_scratch_bytes = hr_attn_scratch_bytes(cfg.kv_type, hp->head_dim_k,
                                                  hp->n_head / hp->n_head_kv);
    d->kv_block_bytes = hr_kv_block_bytes_for(&kc);
    bool types_ok = true;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct hr_layer *L = &m->layers[l];
        const struct hr_weight *in_embd[] = {&L->wq,         &L->wk,        &L->wv,
                                             &L->w_gate,     &L->w_up,      &L->gate_inp,
                                             &L->gate_shexp, &L->up_shexp,  &L->ssm_qkv,
                                             &L->ssm_z,      &L->ssm_beta,  &L->ssm_alpha,
                                             &L->ssm_ba};
        for (size_t i = 0; i < sizeof(in_embd) / sizeof(in_embd[0]); i++)
            if (in_embd[i]->data)
                types_ok &= add_type(d->types_embd, &d->n_types_embd, in_embd[i]->type);
        if (L->wo.data)
            types_ok &= add_type(d->types_q, &d->n_types_q, L->wo.type);
        if (L->ssm_out.data)
            types_ok &= add_type(d->types_dn_out, &d->n_types_dn_out, L->ssm_out.type);
        if (L->w_down.data)
            types_ok &= add_type(d->types_ff, &d->n_types_ff, L->w_down.type);
        if (L->down_shexp.data)
            types_ok &= add_type(d->types_ff, &d->n_types_ff, L->down_shexp.type);
        if (L->ffn_kind == HR_FFN_MOE) {
            types_ok &= add_type(d->types_exp_in, &d->n_types_exp_in, L->gate_exps.type);
            if (L->up_exps.data) {
                types_ok &= add_type(d->types_exp_in, &d->n_types_exp_in, L->up_exps.type);
                d->exp_up_own_act |= L->up_exps.type != L->gate_exps.type;
            }
            types_ok &= add_type(d->types_exp_ff, &d->n_types_exp_ff, L->down_exps.type);
        }
    }
    if (!types_ok) {
        free(e->kv_slot);
        free(e);
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "the model mixes more than 4 weight types in one kind of matrix");
    }
    d->type_out = m->output.type;

    hr_rope_init(m, &e->rope);

    /* One state slot per sequence that may run at once (the state category). */
    if (!cfg.n_state_slots)
        cfg.n_state_slots = cfg.max_step_logits;
    e->cfg.n_state_slots = cfg.n_state_slots;
    const uint64_t slot_floats = (uint64_t)m->dn.n_layers * (m->dn.conv_floats + m->dn.ssm_floats);
    enum hr_status st;
    if ((st = hr_pool_init(cfg.n_threads, &e->pool, err)) != HR_OK ||
        (st = hr_kv_pool_init(&kc, &e->kv, err)) != HR_OK ||
        (st = hr_state_pool_init(slot_floats ? cfg.n_state_slots : 0, slot_floats, &e->state,
                                 err)) != HR_OK) {
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
    hr_state_pool_free(e->state);
    if (e->arena)
        munmap(e->arena, e->arena_cap);
    free(e->seqs);
    free(e->logit_rows);
    free(e->kv_slot);
    free(e);
}

const struct hr_model *hr_engine_model(const struct hr_engine *e) { return e->m; }
struct hr_kv_pool *hr_engine_kv_pool(struct hr_engine *e) { return e->kv; }
struct hr_state_pool *hr_engine_state_pool(struct hr_engine *e) { return e->state; }
uint64_t hr_engine_state_bytes(const struct hr_engine *e)
{
    return hr_state_pool_bytes(e->state);
}
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

void hr_engine_seq_free(struct hr_engine *e, struct hr_kv_seq *seq)
{
    hr_state_release(e->state, seq);
    hr_kv_seq_free(seq, e->kv);
}

void hr_engine_step_shape(const struct hr_engine *e, const struct hr_step *step,
                          struct hr_step_shape *shape)
{
    memset(shape, 0, sizeof(*shape));
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        const struct hr_step_seq *s = &step->seqs[i];
        shape->n_tokens += s->n_tokens;
        shape->n_logits += s->n_logits;
        shape->new_blocks += hr_kv_seq_new_blocks(s->kv, e->kv, s->n_tokens);
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

/* cos/sin pairs for one position, as ggml_rope_cache_init computes them
 * (rope_yarn: with YaRN, each pair's angle mixes the interpolated and the
 * extrapolated one along a ramp over the dimension pairs, and cos/sin are
 * scaled by the magnitude correction). */
static void rope_cache_row(const struct hr_engine *e, int32_t pos, float *cache)
{
    const struct hr_rope *r = &e->rope;
    hr_rope_row(pos, e->m->hp.n_rot, r->theta_scale, r->freq_scale, r->ext_factor, r->attn_factor,
                r->corr_dims[0], r->corr_dims[1], e->m->rope_freqs.data, cache);
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
    /* MoE (plan.h) */
    float *moe_logits, *moe_w, *moe_shg, *moe_x, *moe_gu, *moe_h;
    int32_t *moe_sel, *moe_row, *moe_tok;
    uint32_t *moe_off;
    uint8_t *moe_act;
    /* gated attention and the Gated DeltaNet (plan.h) */
    float *qg, *qgate, *dn_qkv, *dn_z, *dn_beta, *dn_g, *dn_conv, *dn_o;
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

/* ---- the FFN layer kinds ----------------------------------------------- */

/* xn <- down(silu(gate xn) * up xn) over the step's T rows, F wide: the dense
 * FFN, and the shared expert of a MoE layer. Ends after a barrier. */
static void dense_ffn(struct fwd *f, const struct hr_weight *w_gate, const struct hr_weight *w_up,
                      const struct hr_weight *w_down, uint32_t F, int ith, int nth)
{
    struct hr_engine *e = f->e;
    const uint32_t T = e->n_tokens;
    matmul(e, w_gate, f->xn, T, f->act, f->gate, ith, nth, false);
    bool prepared = same_act(w_gate, w_up);
    if (!prepared)
        hr_pool_barrier(e->pool);
    matmul(e, w_up, f->xn, T, f->act, f->up, ith, nth, prepared);
    hr_pool_barrier(e->pool);
    /* Element-wise: split over all T x F values, not by token, so a decode
     * step's one token does not leave the other threads idle. */
    uint32_t i0, i1;
    rows_of(T * F, ith, nth, &i0, &i1);
    for (uint32_t i = i0; i < i1; i++)
        f->gate[i] = silu(f->gate[i]) * f->up[i];
    hr_pool_barrier(e->pool);
    matmul(e, w_down, f->gate, T, f->act, f->xn, ith, nth, false);
    hr_pool_barrier(e->pool);
}

/*
 * One token's routing: the router's logits (n_expert) to k experts in
 * top-k order and their weights, as llama.cpp's build_moe_ffn computes them
 * (probabilities, selection, the weights gathered from the unbiased
 * probabilities, renormalisation with the sum clamped at f16's smallest
 * normal, then the scale). Ties go to the lower expert index.
 */
static void moe_route(const struct hr_moe *mo, const struct hr_layer *L, float *logits,
                      int32_t *sel, float *w)
{
    const uint32_t NX = mo->n_expert, K = mo->n_expert_used;
    float probs[HR_MOE_MAX_EXPERTS], score[HR_MOE_MAX_EXPERTS];
    bool taken[HR_MOE_MAX_EXPERTS] = {false};
    if (L->gate_inp_b.data)
        for (uint32_t i = 0; i < NX; i++)
            logits[i] += ((const float *)L->gate_inp_b.data)[i];
    switch (mo->gating) {
    case HR_MOE_GATING_SOFTMAX:
        hr_moe_softmax(logits, probs, NX);
        break;
    case HR_MOE_GATING_SIGMOID:
        for (uint32_t i = 0; i < NX; i++)
            probs[i] = 1.0f / (1.0f + expf(-logits[i]));
        break;
    case HR_MOE_GATING_SOFTMAX_WEIGHT:
        memcpy(probs, logits, NX * sizeof(float));
        break;
    }
    /* Selection may see a bias the weights do not (DeepSeek V3's exp_probs_b). */
    for (uint32_t i = 0; i < NX; i++)
        score[i] = probs[i] + (L->exp_probs_b.data ? ((const float *)L->exp_probs_b.data)[i] : 0);
    for (uint32_t j = 0; j < K; j++) { /* k passes: k x n_expert compares, ~1k for 8 of 128 */
        uint32_t best = UINT32_MAX;
        float bv = -INFINITY;
        for (uint32_t i = 0; i < NX; i++)
            if (!taken[i] && (best == UINT32_MAX || score[i] > bv))
                bv = score[i], best = i;
        taken[best] = true;
        sel[j] = (int32_t)best;
        w[j] = probs[best]; /* the unbiased value */
    }
    hr_moe_finish_weights(w, K, mo->gating == HR_MOE_GATING_SOFTMAX_WEIGHT, mo->norm_w,
                          mo->w_scale);
}

/* Thread ith's share of expert `ex`'s output rows (all n_out of its slice
 * of `stack`) for the m rows prepared in `act`. */
static void expert_compute(const struct hr_weight *stack, uint32_t ex, uint64_t n_out,
                           const void *act, uint32_t m, float *y, uint64_t ldy, int ith, int nth)
{
    const struct hr_weight w = hr_weight_expert(stack, ex);
    if (w.packed)
        hr_matmul_compute_packed(w.type, w.packed, w.ne0, n_out, act, m, y, ldy, ith, nth);
    else
        hr_matmul_compute(w.type, w.data, w.ne0, n_out, act, m, y, ldy, ith, nth);
}

/* Converts expert group g's m rows of `x` (width k) into `act`. A small
 * group (decode: one row) goes whole to one thread, round-robin over the
 * groups, instead of leaving every thread but the first idle. */
static void expert_prepare(enum hr_ggml_type type, const float *x, uint32_t m, uint32_t k,
                           void *act, uint32_t g, int ith, int nth)
{
    if (m < 4 * (uint32_t)nth) {
        if (g % (uint32_t)nth == (uint32_t)ith)
            hr_matmul_prepare(type, x, m, k, act, 0, 1);
    } else {
        hr_matmul_prepare(type, x, m, k, act, ith, nth);
    }
}

/* Adds row `ex` of a [n, n_expert] F32 bias (one bias per expert) to y. */
static void add_bias_row(float *y, const struct hr_weight *b, uint32_t ex, uint32_t n)
{
    const float *bb = (const float *)b->data + (size_t)ex * n;
    for (uint32_t i = 0; i < n; i++)
        y[i] += bb[i];
}

/* The expert of grouped row r: the group whose end (moe_off, after the
 * grouping) is the first past r. */
static uint32_t row_expert(const uint32_t *off, uint32_t n_expert, uint32_t r)
{
    uint32_t lo = 0, hi = n_expert - 1;
    while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (off[mid] > r)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* gpt-oss's expert activation over values i0 .. i1 of the TK x FX grouped
 * rows: each expert's gate and up biases, then ggml_swiglu_oai (alpha
 * 1.702, limit 7) with ggml-cpu's arithmetic. */
static void swiglu_oai_rows(struct fwd *f, const struct hr_layer *L, uint32_t i0, uint32_t i1)
{
    const struct hr_moe *mo = &f->e->m->moe;
    const uint32_t FX = mo->n_ff_exp;
    const float alpha = 1.702f, limit = 7.0f;
    const float *gb = L->gate_exps_b.data, *ub = L->up_exps_b.data;
    uint32_t r_cur = UINT32_MAX, ex = 0;
    for (uint32_t i = i0; i < i1; i++) {
        const uint32_t r = i / FX, c = i % FX;
        if (r != r_cur) {
            r_cur = r;
            ex = row_expert(f->moe_off, mo->n_expert, r);
        }
        const float *gu = f->moe_gu + (size_t)r * 2 * FX;
        float g = gu[c], u = gu[FX + c];
        if (gb)
            g += gb[(size_t)ex * FX + c];
        if (ub)
            u += ub[(size_t)ex * FX + c];
        const float x = g < limit ? g : limit;
        const float y = u < -limit ? -limit : u > limit ? limit : u;
        f->moe_h[i] = x / (1.f + expf(alpha * (-x))) * (y + 1.f);
    }
}

/*
 * The MoE FFN: xn (normed rows) -> x += sum over the k chosen experts of
 * weight x expert(xn) [+ the shared expert].
 *
 * The step's T x k (token, expert) pairs are grouped by expert, so each
 * expert with work runs once, as one GEMM over all its tokens (prefill), or
 * as a GEMV (decode: k experts of one row). Every thread walks every group
 * and computes its share of the group's output rows, so in decode both
 * threads stream each chosen expert's weights; phases meet at barriers (a
 * fixed nine per layer, however many experts run). A token's result depends
 * only on its own row in each expert's GEMM (the kernels are batch
 * invariant) and on its own weights, summed in slot order, so what it was
 * batched with changes nothing.
 */
static void moe_ffn(struct fwd *f, const struct hr_layer *L, int ith, int nth)
{
    struct hr_engine *e = f->e;
    const struct hr_model *m = e->m;
    const struct hr_moe *mo = &m->moe;
    const uint32_t T = e->n_tokens, E = m->hp.n_embd, K = mo->n_expert_used;
    const uint32_t NX = mo->n_expert, FX = mo->n_ff_exp, TK = T * K;
    const struct hr_weight *wg = &L->gate_exps, *wu = L->gate_up_fused ? NULL : &L->up_exps;
    const bool up_own_act = wu && wu->type != wg->type;
    uint32_t r0, r1;

    /* 1. Router logits, then each token's experts and weights. */
    matmul(e, &L->gate_inp, f->xn, T, f->act, f->moe_logits, ith, nth, false);
    hr_pool_barrier(e->pool);
    rows_of(T, ith, nth, &r0, &r1);
    for (uint32_t t = r0; t < r1; t++) {
        moe_route(mo, L, f->moe_logits + (size_t)t * NX, f->moe_sel + (size_t)t * K,
                  f->moe_w + (size_t)t * K);
        if (mo->shexp == HR_SHEXP_SIGMOID) {
            /* llama.cpp forms this sigmoid as silu(g) / g; so do we */
            const float *gw = L->gate_inp_shexp.data, *xn = f->xn + (size_t)t * E;
            float g = 0.0f;
            for (uint32_t i = 0; i < E; i++)
                g += gw[i] * xn[i];
            f->moe_shg[t] = silu(g) / g;
        }
    }
    hr_pool_barrier(e->pool);

    /* 2. Group the (token, slot) pairs by expert, in token order within a
     * group: a counting sort, O(T k + n_expert), on one thread. After it,
     * group e is rows [e ? off[e-1] : 0, off[e]). */
    if (ith == 0) {
        memset(f->moe_off, 0, NX * sizeof(uint32_t));
        for (uint32_t i = 0; i < TK; i++)
            f->moe_off[f->moe_sel[i]]++;
        uint32_t acc = 0;
        for (uint32_t x = 0; x < NX; x++) {
            uint32_t c = f->moe_off[x];
            f->moe_off[x] = acc; /* start, advanced to the end as rows are placed */
            acc += c;
        }
        for (uint32_t i = 0; i < TK; i++) {
            uint32_t r = f->moe_off[f->moe_sel[i]]++;
            f->moe_row[i] = (int32_t)r;
            f->moe_tok[r] = (int32_t)(i / K);
        }
    }
    hr_pool_barrier(e->pool);

    /* 3. Gather each group's input rows. */
    rows_of(TK, ith, nth, &r0, &r1);
    for (uint32_t r = r0; r < r1; r++)
        memcpy(f->moe_x + (size_t)r * E, f->xn + (size_t)f->moe_tok[r] * E, E * sizeof(float));
    hr_pool_barrier(e->pool);

    /* 4. Gate and up: activations of every group, then every group's GEMM.
     * Group g's activations sit after those of the groups before it. */
    uint64_t aoff = 0;
    for (uint32_t x = 0, g = 0, start = 0; x < NX; start = f->moe_off[x], x++) {
        const uint32_t n = f->moe_off[x] - start;
        if (!n)
            continue;
        expert_prepare(wg->type, f->moe_x + (size_t)start * E, n, E, f->moe_act + aoff, g, ith,
                       nth);
        aoff += hr_matmul_act_bytes(wg->type, n, E);
        if (up_own_act) {
            expert_prepare(wu->type, f->moe_x + (size_t)start * E, n, E, f->moe_act + aoff, g,
                           ith, nth);
            aoff += hr_matmul_act_bytes(wu->type, n, E);
        }
        g++;
    }
    hr_pool_barrier(e->pool);
    aoff = 0;
    for (uint32_t x = 0, start = 0; x < NX; start = f->moe_off[x], x++) {
        const uint32_t n = f->moe_off[x] - start;
        if (!n)
            continue;
        float *y = f->moe_gu + (size_t)start * 2 * FX;
        const uint8_t *ag = f->moe_act + aoff;
        aoff += hr_matmul_act_bytes(wg->type, n, E);
        if (!wu) { /* fused: one matrix, gate rows then up rows */
            expert_compute(wg, x, 2 * (uint64_t)FX, ag, n, y, 2 * FX, ith, nth);
            continue;
        }
        expert_compute(wg, x, FX, ag, n, y, 2 * FX, ith, nth);
        const uint8_t *au = ag;
        if (up_own_act) {
            au = f->moe_act + aoff;
            aoff += hr_matmul_act_bytes(wu->type, n, E);
        }
        expert_compute(wu, x, FX, au, n, y + FX, 2 * FX, ith, nth);
    }
    hr_pool_barrier(e->pool);

    /* 5. The activation, split over all TK x FX values. */
    rows_of(TK * FX, ith, nth, &r0, &r1);
    if (mo->act == HR_FFN_ACT_SWIGLU) {
        for (uint32_t i = r0; i < r1; i++) {
            const uint32_t r = i / FX, c = i % FX;
            const float *gu = f->moe_gu + (size_t)r * 2 * FX;
            f->moe_h[i] = silu(gu[c]) * gu[FX + c];
        }
    } else {
        swiglu_oai_rows(f, L, r0, r1);
    }
    hr_pool_barrier(e->pool);

    /* 6. Down: activations, then GEMMs into moe_x (its inputs are dead). */
    const struct hr_weight *wd = &L->down_exps;
    aoff = 0;
    for (uint32_t x = 0, g = 0, start = 0; x < NX; start = f->moe_off[x], x++) {
        const uint32_t n = f->moe_off[x] - start;
        if (!n)
            continue;
        expert_prepare(wd->type, f->moe_h + (size_t)start * FX, n, FX, f->moe_act + aoff, g++,
                       ith, nth);
        aoff += hr_matmul_act_bytes(wd->type, n, FX);
    }
    hr_pool_barrier(e->pool);
    aoff = 0;
    for (uint32_t x = 0, start = 0; x < NX; start = f->moe_off[x], x++) {
        const uint32_t n = f->moe_off[x] - start;
        if (!n)
            continue;
        expert_compute(wd, x, E, f->moe_act + aoff, n, f->moe_x + (size_t)start * E, E, ith,
                       nth);
        aoff += hr_matmul_act_bytes(wd->type, n, FX);
    }
    hr_pool_barrier(e->pool);

    /* 7. The shared expert, on xn, into xn (dense_ffn ends on a barrier). */
    if (mo->shexp != HR_SHEXP_NONE)
        dense_ffn(f, &L->gate_shexp, &L->up_shexp, &L->down_shexp, mo->n_ff_shexp, ith, nth);

    /* 8. Per token: the weighted experts summed in slot order (llama.cpp
     * adds expert 0's weighted output to expert 1's, and so on), plus the
     * shared expert, then the residual. */
    rows_of(T, ith, nth, &r0, &r1);
    for (uint32_t t = r0; t < r1; t++) {
        float *x = f->x + (size_t)t * E;
        const float *xs = f->xn + (size_t)t * E, *w = f->moe_w + (size_t)t * K;
        const int32_t *row = f->moe_row + (size_t)t * K;
        const float sg = mo->shexp == HR_SHEXP_SIGMOID ? f->moe_shg[t] : 1.0f;
        if (L->down_exps_b.data) /* each expert's down bias, before its weight */
            for (uint32_t j = 0; j < K; j++)
                add_bias_row(f->moe_x + (size_t)row[j] * E, &L->down_exps_b,
                             (uint32_t)f->moe_sel[(size_t)t * K + j], E);
        for (uint32_t i = 0; i < E; i++) {
            float o = f->moe_x[(size_t)row[0] * E + i] * w[0];
            for (uint32_t j = 1; j < K; j++)
                o += f->moe_x[(size_t)row[j] * E + i] * w[j];
            if (mo->shexp != HR_SHEXP_NONE)
                o += xs[i] * sg;
            x[i] += o;
        }
    }
}

/*
 * The attention of layer l: units of (sequence, KV head, query tile), split
 * over threads by cost (hr_attn_cost, ~ multiply-adds), not by count: causal
 * tiles late in a long prompt cost far more than early ones. With total = 0
 * it only returns the sum of the costs (the same on every thread); else
 * thread ith runs the units whose cost midpoint falls in its equal share of
 * that total, consecutive units (same KV head, neighbouring tiles) staying
 * together. Results do not depend on the split (attention.h, exactness).
 */
static uint64_t attention_units(struct fwd *f, const struct hr_layer *L, uint32_t l, int ith,
                                int nth, uint64_t total)
{
    struct hr_engine *e = f->e;
    const struct hr_hparams *hp = &e->m->hp;
    const uint32_t hd = hp->head_dim_k, q_dim = hp->n_head * hd;
    const uint32_t group = hp->n_head / hp->n_head_kv, bq = hr_attn_block_tokens(group);
    void *scr = f->attn_scr + (size_t)ith * e->plan.attn_scr_stride;
    uint64_t done = 0;
    for (uint32_t si = 0; si < e->n_seqs; si++) {
        const struct seq_info *s = &e->seqs[si];
        const int32_t *table = L->window && e->windowed ? s->kv->wblocks : s->kv->blocks;
        struct hr_attn_ctx ac = {.kv = e->kv, .blocks = table, .layer = e->kv_slot[l],
                                 .head_dim = hd, .block_tokens = e->cfg.kv_block_tokens,
                                 .group = group, .scale = 1.0f / sqrtf((float)hd),
                                 .window = L->window, .sinks = L->sinks.data};
        for (uint32_t g = 0; g < hp->n_head_kv; g++) {
            for (uint32_t t0 = 0; t0 < s->n_tokens; t0 += bq) {
                const uint32_t nq = s->n_tokens - t0 < bq ? s->n_tokens - t0 : bq;
                const int32_t pos0 = (int32_t)(s->pos0 + t0);
                const uint64_t cost = hr_attn_cost(&ac, pos0, nq), mid = done + cost / 2;
                done += cost;
                if (!total || mid * (uint64_t)nth / total != (uint64_t)ith)
                    continue;
                const size_t row = (size_t)(s->first_token + t0) * q_dim + (size_t)g * group * hd;
                hr_attention(&ac, g, f->q + row, q_dim, pos0, nq, f->attn + row, q_dim, scr);
            }
        }
    }
    return done;
}

/* ---- the mixer layer kinds --------------------------------------------- */

/* Attention: xn (normed rows) -> Q/K/V, RoPE, the new K/V into the paged
 * cache, attention over it, then Wo into xn. With attn_gated (qwen35) Wq
 * also yields a per-head gate and the output is scaled by its sigmoid. Ends
 * after Wo, without a barrier. */
static void attention_mixer(struct fwd *f, const struct hr_layer *L, uint32_t l, int ith, int nth)
{
    struct hr_engine *e = f->e;
    const struct hr_model *m = e->m;
    const struct hr_hparams *hp = &m->hp;
    const uint32_t T = e->n_tokens, hd = hp->head_dim_k, kl = e->kv_slot[l];
    const bool in_window = L->window && e->windowed;
    const uint32_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    const uint32_t rot_k = hr_attn_rot_k_dim(e->cfg.kv_type, hd);
    const uint32_t rot_v = hr_attn_rot_v_dim(e->cfg.kv_type, hd);
    const bool gated = m->attn_gated;
    uint32_t r0, r1;
    rows_of(T, ith, nth, &r0, &r1);

    /* A gated layer's Wq gives per head its query then its gate: into qg,
     * split below. */
    matmul(e, &L->wq, f->xn, T, f->act, gated ? f->qg : f->q, ith, nth, false);
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
        if (gated)
            for (uint32_t h = 0; h < hp->n_head; h++) {
                const float *qg = f->qg + (size_t)t * 2 * q_dim + (size_t)h * 2 * hd;
                memcpy(q + h * hd, qg, hd * sizeof(float));
                memcpy(f->qgate + (size_t)t * q_dim + h * hd, qg + hd, hd * sizeof(float));
            }
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
        const struct hr_kv_seq *kv = e->seqs[f->seq_of[t]].kv;
        hr_attn_store(e->kv, in_window ? kv->wblocks : kv->blocks, kl, hp->n_head_kv, hd,
                      f->pos[t], k, v);
    }
    hr_pool_barrier(e->pool);

    /* Attention, split over threads by cost (see attention_units). */
    attention_units(f, L, l, ith, nth, attention_units(f, L, l, ith, nth, 0));
    hr_pool_barrier(e->pool);
    if (rot_v) { /* back from the Hadamard basis of V (H x H = I) */
        for (uint32_t t = r0; t < r1; t++)
            for (uint32_t i = 0; i < q_dim; i += rot_v)
                hr_attn_rotate(f->attn + (size_t)t * q_dim + i, rot_v);
        hr_pool_barrier(e->pool);
    }
    if (gated) { /* the output times sigmoid(gate), before Wo */
        for (uint32_t t = r0; t < r1; t++) {
            float *a = f->attn + (size_t)t * q_dim;
            const float *g = f->qgate + (size_t)t * q_dim;
            for (uint32_t i = 0; i < q_dim; i++)
                a[i] *= 1.0f / (1.0f + expf(-g[i]));
        }
        hr_pool_barrier(e->pool);
    }

    matmul(e, &L->wo, f->attn, T, f->act, f->xn, ith, nth, false);
}

/*
 * The Gated DeltaNet (deltanet.h): xn -> the q|k|v, z, beta and alpha
 * projections; per sequence the conv and the recurrence over its state slot;
 * the gated RMSNorm; then ssm_out into xn. Work splits: the conv by
 * channels, the recurrence by (sequence, v head) units round-robin, the
 * rest by token rows. Ends after ssm_out, without a barrier.
 */
static void deltanet_mixer(struct fwd *f, const struct hr_layer *L, int ith, int nth)
{
    struct hr_engine *e = f->e;
    const struct hr_model *m = e->m;
    const struct hr_deltanet *dn = &m->dn;
    const uint32_t T = e->n_tokens, CD = dn->conv_dim, VD = dn->value_dim, HV = dn->n_v_heads;
    const uint32_t HK = dn->n_k_heads, d = dn->head_k_dim;
    const uint64_t layer_off = (uint64_t)L->dn_layer * (dn->conv_floats + dn->ssm_floats);
    uint32_t r0, r1;
    rows_of(T, ith, nth, &r0, &r1);

    matmul(e, &L->ssm_qkv, f->xn, T, f->act, f->dn_qkv, ith, nth, false);
    bool prepared = same_act(&L->ssm_qkv, &L->ssm_z);
    if (!prepared)
        hr_pool_barrier(e->pool);
    matmul(e, &L->ssm_z, f->xn, T, f->act, f->dn_z, ith, nth, prepared);
    if (L->ssm_ba.data) {
        /* qwen3next: beta and alpha in one matrix, per k head its r = HV/HK
         * betas then its r alphas, into dn_conv (free until the conv), then
         * split into v-head order. */
        prepared = same_act(&L->ssm_z, &L->ssm_ba);
        if (!prepared)
            hr_pool_barrier(e->pool);
        matmul(e, &L->ssm_ba, f->xn, T, f->act, f->dn_conv, ith, nth, prepared);
        hr_pool_barrier(e->pool);
        const uint32_t r = HV / HK;
        for (uint32_t t = r0; t < r1; t++) {
            const float *ba = f->dn_conv + (size_t)t * 2 * HV;
            for (uint32_t h = 0; h < HV; h++) {
                f->dn_beta[(size_t)t * HV + h] = ba[(h / r) * 2 * r + h % r];
                f->dn_g[(size_t)t * HV + h] = ba[(h / r) * 2 * r + r + h % r];
            }
        }
    } else {
        prepared = same_act(&L->ssm_z, &L->ssm_beta);
        if (!prepared)
            hr_pool_barrier(e->pool);
        matmul(e, &L->ssm_beta, f->xn, T, f->act, f->dn_beta, ith, nth, prepared);
        prepared = same_act(&L->ssm_beta, &L->ssm_alpha);
        if (!prepared)
            hr_pool_barrier(e->pool);
        matmul(e, &L->ssm_alpha, f->xn, T, f->act, f->dn_g, ith, nth, prepared);
    }
    hr_pool_barrier(e->pool);

    /* The conv (by channels, each sequence's tokens in order) and the gates. */
    uint32_t c0, c1;
    rows_of(CD, ith, nth, &c0, &c1);
    for (uint32_t si = 0; si < e->n_seqs; si++) {
        const struct seq_info *s = &e->seqs[si];
        const size_t row = (size_t)s->first_token * CD;
        hr_deltanet_conv(f->dn_qkv + row, f->dn_conv + row, s->n_tokens, CD,
                         s->state + layer_off, L->ssm_conv1d.data, dn->conv_kernel, c0, c1);
    }
    for (uint32_t t = r0; t < r1; t++)
        hr_deltanet_gates(f->dn_beta + (size_t)t * HV, f->dn_g + (size_t)t * HV,
                          L->ssm_dt.data, L->ssm_a.data, HV);
    hr_pool_barrier(e->pool);

    /* q and k L2-normalised per k head. */
    for (uint32_t t = r0; t < r1; t++)
        for (uint32_t h = 0; h < 2 * HK; h++)
            hr_deltanet_l2_norm(f->dn_conv + (size_t)t * CD + (size_t)h * d, d,
                                m->hp.rms_eps);
    hr_pool_barrier(e->pool);

    /* The recurrence: one unit per (sequence, v head). */
    float delta[1024]; /* head_k_dim <= 1024 (model.c) */
    uint32_t unit = 0;
    for (uint32_t si = 0; si < e->n_seqs; si++) {
        const struct seq_info *s = &e->seqs[si];
        float *S0 = s->state + layer_off + dn->conv_floats;
        for (uint32_t h = 0; h < HV; h++, unit++) {
            if (unit % (uint32_t)nth != (uint32_t)ith)
                continue;
            const uint32_t hk = dn->k_blocked ? h / (HV / HK) : h % HK;
            const float *c = f->dn_conv + (size_t)s->first_token * CD;
            hr_deltanet_recur(S0 + (uint64_t)h * d * d, c + (size_t)hk * d,
                              c + dn->key_dim + (size_t)hk * d, CD, c + 2 * dn->key_dim + h * d,
                              CD, f->dn_g + (size_t)s->first_token * HV + h,
                              f->dn_beta + (size_t)s->first_token * HV + h, HV, s->n_tokens, d,
                              f->dn_o + (size_t)s->first_token * VD + h * d, VD, delta);
        }
    }
    hr_pool_barrier(e->pool);

    /* RMSNorm per v head times SiLU(z). */
    for (uint32_t t = r0; t < r1; t++) {
        float *o = f->dn_o + (size_t)t * VD;
        const float *z = f->dn_z + (size_t)t * VD;
        for (uint32_t h = 0; h < HV; h++)
            rms_norm_row(o + h * d, L->ssm_norm.data, o + h * d, d, m->hp.rms_eps);
        for (uint32_t i = 0; i < VD; i++)
            o[i] *= silu(z[i]);
    }
    hr_pool_barrier(e->pool);
    matmul(e, &L->ssm_out, f->dn_o, T, f->act, f->xn, ith, nth, false);
}

static void forward_worker(void *ctx, int ith, int nth)
{
    struct fwd *f = ctx;
    struct hr_engine *e = f->e;
    const struct hr_model *m = e->m;
    const struct hr_hparams *hp = &m->hp;
    const uint32_t T = e->n_tokens, E = hp->n_embd, F = e->dims.n_ff;
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

        if (L->mixer == HR_MIXER_DELTANET)
            deltanet_mixer(f, L, ith, nth);
        else
            attention_mixer(f, L, l, ith, nth);
        hr_pool_barrier(e->pool);
        for (uint32_t t = r0; t < r1; t++) {
            float *x = f->x + (size_t)t * E, *xn = f->xn + (size_t)t * E;
            add_bias(xn, &L->bo, E);
            for (uint32_t i = 0; i < E; i++)
                x[i] += xn[i];
            rms_norm_row(x, L->ffn_norm.data, xn, E, hp->rms_eps);
        }
        hr_pool_barrier(e->pool);

        if (L->ffn_kind == HR_FFN_MOE) {
            moe_ffn(f, L, ith, nth);
        } else {
            dense_ffn(f, &L->w_gate, &L->w_up, &L->w_down, F, ith, nth);
            uint32_t i0, i1;
            rows_of(T * E, ith, nth, &i0, &i1);
            for (uint32_t i = i0; i < i1; i++)
                f->x[i] += f->xn[i];
        }
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

enum hr_status hr_step_state_check(const struct hr_state_pool *p, const struct hr_step *step,
                                   struct hr_err *err)
{
    uint32_t need = 0;
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        const struct hr_kv_seq *kv = step->seqs[i].kv;
        const bool bound = hr_state_find(p, kv) >= 0;
        if (kv->n_tokens == 0 && !bound)
            need++;
        else if (kv->n_tokens > 0 && !bound)
            return hr_err_set(err, HR_ERR_INVALID, "sequence %u continues at position %u "
                              "without its recurrent state (a hybrid model's KV alone "
                              "cannot resume it)", i, kv->n_tokens);
    }
    const uint32_t n_free = hr_state_n_slots(p) - hr_state_n_used(p);
    if (need > n_free)
        return hr_err_set(err, HR_ERR_NOMEM, "the step needs %u recurrent state slots, %u "
                          "are free", need, n_free);
    return HR_OK;
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
        /* A windowed sequence's two tables cover the same positions, with
         * the window's blocks held (a cache hit restores them, see
         * prefix-cache.h). */
        if (!hr_kv_seq_window_held(s->kv, e->kv))
            return hr_err_set(err, HR_ERR_INVALID, "sequence %u continues at position %u "
                              "without its sliding-window KV blocks", i, s->kv->n_tokens);
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
    /* Recurrent state: a sequence at position 0 binds (or keeps) a slot; one
     * further on must have the slot its earlier steps advanced. */
    const bool recurrent = e->m->dn.n_layers > 0;
    if (recurrent) {
        enum hr_status st = hr_step_state_check(e->state, step, err);
        if (st != HR_OK)
            return st;
    }
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
    const uint64_t NX = e->dims.n_expert, TK = (uint64_t)T * e->dims.n_expert_used;
    const uint64_t FX = e->dims.n_ff_exp;
    f.moe_logits = view(e, p->off_moe_logits, T * NX * sizeof(float));
    f.moe_sel = view(e, p->off_moe_sel, TK * sizeof(int32_t));
    f.moe_w = view(e, p->off_moe_w, TK * sizeof(float));
    f.moe_shg = view(e, p->off_moe_shg, NX ? T * sizeof(float) : 0);
    f.moe_off = view(e, p->off_moe_off, NX * sizeof(uint32_t));
    f.moe_row = view(e, p->off_moe_row, TK * sizeof(int32_t));
    f.moe_tok = view(e, p->off_moe_tok, TK * sizeof(int32_t));
    f.moe_x = view(e, p->off_moe_x, TK * e->dims.n_embd * sizeof(float));
    f.moe_gu = view(e, p->off_moe_gu, TK * 2 * FX * sizeof(float));
    f.moe_h = view(e, p->off_moe_h, TK * FX * sizeof(float));
    f.moe_act = view(e, p->off_moe_act, p->moe_act_bytes);
    if (e->dims.attn_gated) {
        f.qg = view(e, p->off_qg, (uint64_t)T * 2 * q_dim * sizeof(float));
        f.qgate = view(e, p->off_qgate, (uint64_t)T * q_dim * sizeof(float));
    }
    if (e->dims.dn_conv_dim) {
        const uint64_t CD = e->dims.dn_conv_dim, VD = e->dims.dn_value_dim;
        const uint64_t HV = e->dims.dn_n_v_heads;
        f.dn_qkv = view(e, p->off_dn_qkv, T * CD * sizeof(float));
        f.dn_z = view(e, p->off_dn_z, T * VD * sizeof(float));
        f.dn_beta = view(e, p->off_dn_beta, T * HV * sizeof(float));
        f.dn_g = view(e, p->off_dn_g, T * HV * sizeof(float));
        f.dn_conv = view(e, p->off_dn_conv, T * CD * sizeof(float));
        f.dn_o = view(e, p->off_dn_o, T * VD * sizeof(float));
    }
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
        si->state = NULL;
        if (recurrent) {
            const int32_t slot = hr_state_acquire(e->state, s->kv);
            HR_ASSERT(slot >= 0);
            si->state = hr_state_slot(e->state, slot);
            if (si->pos0 == 0) /* a sequence (re)starting: zero state */
                memset(si->state, 0, hr_state_slot_bytes(e->state));
        }
        for (uint32_t j = 0; j < s->n_tokens; j++, t++) {
            f.tokens[t] = s->tokens[j];
            f.pos[t] = (int32_t)(si->pos0 + j);
            f.seq_of[t] = (int32_t)i;
            if (j >= s->n_tokens - s->n_logits)
                e->logit_rows[row++] = (int32_t)t;
        }
    }
    hr_pool_run(e->pool, forward_worker, &f);
    /* Windowed blocks now out of every later query's reach go back. */
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        step->seqs[i].kv->n_tokens += step->seqs[i].n_tokens;
        hr_kv_seq_slide(step->seqs[i].kv, e->kv);
    }
    return HR_OK;
}
