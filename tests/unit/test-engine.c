/*
 * test-engine.c - the engine's promises, on generated models:
 *
 *  - the plan is exact: for random ragged batches the arena's high-water mark
 *    equals plan.arena_bytes byte for byte, no byte past it is written (a
 *    canary), and no heap allocation happens inside a step (counted with the
 *    sanitizer allocator's hooks: every malloc, calloc, realloc, free);
 *  - ragged batches agree: several sequences prefilled and decoded together
 *    give the same logits as each sequence run alone. Attention and all
 *    elementwise work are per row, so the only source of difference is the
 *    matmul kernels choosing another path by row count (GEMV below a
 *    threshold, GEMM tiles above). We allow 1e-3 relative: measured up to
 *    3e-4 for F32 and F16, which is more than summation order explains and
 *    is an open kernel issue (the goal is bit-identity). The quantized kernels
 *    are batch-invariant by default (hr_kernels_set_batch_invariant), so
 *    Q8_0 agrees; known open bug: for F16 the decode and prefill paths
 *    disagree by about 1e-3 in the logits, so that case is skipped with a
 *    message until fixed;
 *  - a step that cannot run is refused before anything changes;
 *  - a matrix of a type the kernels cannot compute with is refused at load,
 *    naming the tensor and the type's id and name;
 *  - hybrid Gated-DeltaNet models (qwen35 F32, qwen35moe Q8_0): the plan is
 *    exact, ragged == alone and chunk sizes 9, 16 and 64 == one chunk, bit
 *    for bit (the recurrence runs token by token in prefill as in decode);
 *    the state slots hold exactly the layers' conv inputs and S matrices and
 *    KV blocks only the attention layers; a step needing more slots than are
 *    free, or continuing a sequence without its state, is refused unchanged;
 *  - all of it also with quantized caches (Q8_0 and Q4_0, head dims 64 with
 *    the Hadamard rotation and 96 without), and a quantized cache on a head
 *    dim that its blocks cannot hold is refused at init;
 *  - gpt-oss (sinks, a 16-token window on even layers, YaRN, expert biases,
 *    clamped SwiGLU; F32 and MXFP4 experts): plan exact, ragged == alone and
 *    chunking invariant with prompts longer than the window; windowed KV
 *    (the sliding-window layers' blocks slide): the same logits bit for bit
 *    as keeping every position, the blocks held never above what admission
 *    prices (hr_kv_blocks_for), about half the blocks' bytes, and a prefix
 *    cache hit (its entry carrying the window) continues exactly as cold,
 *    one without its window is refused unchanged;
 *  - attention's window and sinks (hr_attn_ctx.window, .sinks) against a
 *    plain double-precision reference, f32 and f16 caches.
 *
 * Agreement with llama.cpp is tests/oracle/engine.test.mjs's job.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fp16.h"
#include "engine/attention.h"
#include "engine/engine.h"
#include "engine/prefix-cache.h"
#include "engine/state-pool.h"
#include "model-gen.h"
#include "base/rand.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HR_HAVE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define HR_HAVE_ASAN 1
#endif

#ifdef HR_HAVE_ASAN
/* From the sanitizer runtime (gcc ships no header for it): called on every
 * allocation and free the sanitizer's allocator sees, in any thread. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
static volatile long g_allocs;
static volatile int g_counting;
static void on_malloc(const volatile void *p, size_t n)
{
    (void)p;
    (void)n;
    if (g_counting)
        __atomic_fetch_add(&g_allocs, 1, __ATOMIC_RELAXED);
}
static void on_free(const volatile void *p)
{
    (void)p;
    if (g_counting)
        __atomic_fetch_add(&g_allocs, 1, __ATOMIC_RELAXED);
}
#endif

struct fixture {
    char path[64];
    struct hr_model *model;
    enum hr_ggml_type kv_type; /* the engine's cache type (f16 unless a setup says) */
    uint32_t head_dim;         /* 0: n_embd / n_head (16) */
    /* MoE models (make_moe): experts, experts per token, fused gate/up */
    uint32_t n_expert, n_expert_used;
    bool fuse_gate_up;
    bool real_mix; /* gen-model's q4_k_m_real (Q4_K, Q6_K, Q5_0, Q8_0, IQ4_NL in one model) */
};

static int make_fixture(void **state, struct fixture *fx, const char *arch,
                        enum hr_ggml_type type);

static int make_model_mix(void **state, const char *arch, enum hr_ggml_type type,
                          enum hr_ggml_type kv_type, uint32_t head_dim, bool real_mix)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    fx->kv_type = kv_type;
    fx->head_dim = head_dim;
    fx->real_mix = real_mix;
    return make_fixture(state, fx, arch, type);
}

/* A mixture-of-experts model: n_expert experts, k per token. */
static int make_moe(void **state, const char *arch, enum hr_ggml_type type, uint32_t n_expert,
                    uint32_t k, bool fused)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    fx->kv_type = HR_GGML_F16;
    fx->n_expert = n_expert;
    fx->n_expert_used = k;
    fx->fuse_gate_up = fused;
    return make_fixture(state, fx, arch, type);
}

static int make_fixture(void **state, struct fixture *fx, const char *arch,
                        enum hr_ggml_type type)
{
    const uint32_t head_dim = fx->head_dim;
    struct hr_gen_params p;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gen_shape("tiny", &p, &err), HR_OK);
    p.arch = arch;
    p.type = type;
    /* K-quant rows are whole 256-value super-blocks. */
    const bool kq = type == HR_GGML_Q4_K || type == HR_GGML_Q5_K || type == HR_GGML_Q6_K;
    p.real_mix = fx->real_mix;
    p.n_embd = kq ? 256 : 64;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = kq ? (fx->n_expert ? 256 : 512) : 96; /* Mixtral's experts are n_ff wide */
    /* hybrid: 3 Gated DeltaNet layers and 1 attention layer */
    const bool hybrid = strncmp(arch, "qwen35", 6) == 0;
    p.n_layer = hybrid ? 4 : 2;
    p.head_dim = head_dim;
    p.n_expert = fx->n_expert;
    p.n_expert_used = fx->n_expert_used;
    p.n_ff_exp = kq ? 256 : 32;
    p.n_ff_shexp = kq ? 256 : 64;
    p.fuse_gate_up = fx->fuse_gate_up;
    if (strcmp(arch, "gpt-oss") == 0) {
        /* a window shorter than the prompts, gpt-oss's YaRN */
        p.n_swa = 16;
        p.mxfp4_mix = type == HR_GGML_MXFP4;
        p.rope_scaling = HR_GEN_ROPE_YARN, p.rope_factor = 32.0f, p.rope_orig_ctx = 4096;
        p.rope_base = 150000.0f;
    }
    snprintf(fx->path, sizeof(fx->path), "/tmp/hr-test-engine-%d-%s%s.gguf", (int)getpid(), arch,
             fx->fuse_gate_up ? "-fused" : "");
    if (hr_gen_model(&p, fx->path, &err) != HR_OK)
        fail_msg("%s", err.msg);
    if (hr_model_open(fx->path, &fx->model, &err) != HR_OK)
        fail_msg("%s", err.msg);
    *state = fx;
    return 0;
}

static int make_model_kv(void **state, const char *arch, enum hr_ggml_type type,
                         enum hr_ggml_type kv_type, uint32_t head_dim)
{
    return make_model_mix(state, arch, type, kv_type, head_dim, false);
}

static int make_model(void **state, const char *arch, enum hr_ggml_type type)
{
    return make_model_kv(state, arch, type, HR_GGML_F16, 0);
}

static int setup_qwen3(void **state) { return make_model(state, "qwen3", HR_GGML_F32); }
/* Quantized caches need head dims that are multiples of 32; 64 also turns on
 * the Hadamard rotation (attention.h), 96 leaves it off. */
static int setup_qwen3_kv_q8(void **state)
{
    return make_model_kv(state, "qwen3", HR_GGML_F32, HR_GGML_Q8_0, 64);
}
static int setup_llama_kv_q4(void **state)
{
    return make_model_kv(state, "llama", HR_GGML_Q8_0, HR_GGML_Q4_0, 64);
}
static int setup_qwen2_kv_q8_hd96(void **state)
{
    return make_model_kv(state, "qwen2", HR_GGML_F16, HR_GGML_Q8_0, 96);
}
static int setup_qwen2_q8(void **state) { return make_model(state, "qwen2", HR_GGML_Q8_0); }
static int setup_llama_f16(void **state) { return make_model(state, "llama", HR_GGML_F16); }
static int setup_llama_bf16(void **state) { return make_model(state, "llama", HR_GGML_BF16); }
static int setup_llama_q4_0(void **state) { return make_model(state, "llama", HR_GGML_Q4_0); }
static int setup_qwen3_q4_k(void **state) { return make_model(state, "qwen3", HR_GGML_Q4_K); }
static int setup_qwen2_q5_k(void **state) { return make_model(state, "qwen2", HR_GGML_Q5_K); }
static int setup_llama_q6_k(void **state) { return make_model(state, "llama", HR_GGML_Q6_K); }
static int setup_llama_q5_1(void **state) { return make_model(state, "llama", HR_GGML_Q5_1); }
static int setup_qwen3_q4_k_m_real(void **state)
{
    return make_model_mix(state, "qwen3", HR_GGML_Q4_K, HR_GGML_F16, 0, true);
}
/* MoE: 8 experts, 3 per token, so a ragged batch's tokens share some experts
 * and not others; Q8_0 experts are packed per slice on AVX-512. */
static int setup_qwen3moe(void **state) { return make_moe(state, "qwen3moe", HR_GGML_F32, 8, 3, 0); }
static int setup_qwen2moe_q8(void **state)
{
    return make_moe(state, "qwen2moe", HR_GGML_Q8_0, 8, 2, false);
}
static int setup_mixtral_q4_k(void **state)
{
    return make_moe(state, "llama", HR_GGML_Q4_K, 4, 2, false);
}

/* gpt-oss: 8 experts, 4 per token; F32, and MXFP4 experts with the rest Q8_0. */
static int setup_gptoss(void **state) { return make_moe(state, "gpt-oss", HR_GGML_F32, 8, 4, 0); }
static int setup_gptoss_mxfp4(void **state)
{
    return make_moe(state, "gpt-oss", HR_GGML_MXFP4, 8, 4, 0);
}
/* Hybrid Gated-DeltaNet models: 4 q/k heads shared by 8 v heads of 8. */
static int setup_qwen35(void **state) { return make_model(state, "qwen35", HR_GGML_F32); }
static int setup_qwen35moe_q8(void **state)
{
    return make_moe(state, "qwen35moe", HR_GGML_Q8_0, 8, 2, false);
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    hr_model_close(fx->model);
    unlink(fx->path);
    free(fx);
    return 0;
}

static struct hr_engine *engine(struct fixture *fx, int threads, uint32_t max_tokens)
{
    struct hr_engine_config cfg = {
        .n_threads = threads,
        .kv_type = fx->kv_type,
        .kv_budget_bytes = 64ull << 20,
        .max_step_tokens = max_tokens,
        .max_step_logits = max_tokens,
    };
    struct hr_engine *e = NULL;
    struct hr_err err = {{0}};
    if (hr_engine_init(fx->model, &cfg, &e, &err) != HR_OK)
        fail_msg("%s", err.msg);
    return e;
}

static void random_tokens(struct hr_rng *r, int32_t *t, uint32_t n, uint32_t n_vocab)
{
    for (uint32_t i = 0; i < n; i++)
        t[i] = (int32_t)(hr_rng_u64(r) % n_vocab);
}

/* Random ragged batches: the plan is what the step uses, to the byte. */
static void test_plan_is_exact(void **state)
{
    struct fixture *fx = *state;
    struct hr_engine *e = engine(fx, 2, 96);
    const uint32_t n_vocab = fx->model->hp.n_vocab;
    struct hr_rng r;
    hr_rng_seed(&r, 11);
    enum { N_SEQ = 4 };
    struct hr_kv_seq seqs[N_SEQ];
    struct hr_err err = {{0}};
    for (int i = 0; i < N_SEQ; i++)
        assert_int_equal(hr_engine_seq_init(e, &seqs[i], 1024, &err), HR_OK);
    int32_t tokens[96];
    uint8_t *arena = hr_engine_arena_base(e);
    const uint64_t cap = hr_engine_arena_capacity(e);
#ifdef HR_HAVE_ASAN
    __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
#endif
    for (int round = 0; round < 40; round++) {
        struct hr_step_seq items[N_SEQ];
        uint32_t n_items = 1 + (uint32_t)(hr_rng_u64(&r) % N_SEQ), left = 96, off = 0;
        for (uint32_t i = 0; i < n_items; i++) {
            uint32_t n = 1 + (uint32_t)(hr_rng_u64(&r) % (left / (n_items - i) < 40 ? left / (n_items - i) : 40));
            random_tokens(&r, tokens + off, n, n_vocab);
            items[i] = (struct hr_step_seq){.kv = &seqs[i], .tokens = tokens + off, .n_tokens = n,
                                            .n_logits = (uint32_t)(hr_rng_u64(&r) % (n + 1))};
            off += n;
            left -= n;
        }
        struct hr_step step = {.seqs = items, .n_seqs = n_items};
        struct hr_plan plan;
        hr_engine_plan(e, &step, &plan);
        uint32_t used_before = hr_kv_n_used(hr_engine_kv_pool(e)), w_first[N_SEQ];
        for (uint32_t i = 0; i < n_items; i++)
            w_first[i] = seqs[i].w_first;
        /* A canary over the whole arena: nothing past the plan may change. */
        memset(arena, 0xA5, cap);
#ifdef HR_HAVE_ASAN
        g_allocs = 0;
        g_counting = 1;
#endif
        assert_int_equal(hr_engine_step(e, &step, &err), HR_OK);
#ifdef HR_HAVE_ASAN
        g_counting = 0;
        assert_int_equal(g_allocs, 0);
#endif
        assert_int_equal(hr_engine_arena_high_water(e), plan.arena_bytes);
        for (uint64_t b = plan.arena_bytes; b < cap; b++)
            if (arena[b] != 0xA5)
                fail_msg("round %d: arena byte %llu past the plan (%llu) was written", round,
                         (unsigned long long)b, (unsigned long long)plan.arena_bytes);
        /* The KV part of the plan is the blocks the step actually took
         * (windowed pools: before the slide gave some back). */
        uint32_t used_after = hr_kv_n_used(hr_engine_kv_pool(e)), slid = 0;
        for (uint32_t i = 0; i < n_items; i++)
            slid += seqs[i].w_first - w_first[i];
        assert_int_equal((uint64_t)(used_after + slid - used_before) *
                             hr_kv_block_bytes(hr_engine_kv_pool(e)),
                         plan.kv_bytes);
        /* Sequences that grew long start over, so positions stay varied. */
        for (int i = 0; i < N_SEQ; i++)
            if (seqs[i].n_tokens > 700)
                hr_kv_seq_clear(&seqs[i], hr_engine_kv_pool(e));
    }
#ifdef HR_HAVE_ASAN
    __sanitizer_install_malloc_and_free_hooks(NULL, NULL);
#endif
    for (int i = 0; i < N_SEQ; i++)
        hr_engine_seq_free(e, &seqs[i]);
    hr_engine_free(e);
}

/* Runs `n_seq` sequences: prefill in chunks then decode, either all in the
 * same steps (ragged) or each alone; records every logit row. */
static float *run_sequences(struct fixture *fx, int threads, bool together, uint32_t n_seq,
                            const uint32_t *prompt_len, uint32_t n_decode, uint32_t chunk)
{
    const uint32_t V = fx->model->hp.n_vocab;
    struct hr_engine *e = engine(fx, threads, 128);
    struct hr_err err = {{0}};
    struct hr_kv_seq seqs[8];
    int32_t toks[8][256];
    uint32_t pos[8] = {0};
    struct hr_rng r;
    hr_rng_seed(&r, 5);
    for (uint32_t s = 0; s < n_seq; s++) {
        assert_int_equal(hr_engine_seq_init(e, &seqs[s], 512, &err), HR_OK);
        random_tokens(&r, toks[s], prompt_len[s], V);
    }
    /* Output: per sequence, one logit row after each prefill chunk and decode step. */
    uint32_t rows_per_seq = 64;
    float *out = calloc((size_t)n_seq * rows_per_seq * V, sizeof(float));
    uint32_t n_rows[8] = {0};
    uint32_t order[8], n_order = together ? 1 : n_seq;
    for (uint32_t pass = 0; pass < n_order; pass++) {
        bool active[8] = {0};
        for (uint32_t s = 0; s < n_seq; s++)
            active[s] = together || s == pass;
        (void)order;
        for (;;) {
            struct hr_step_seq items[8];
            uint32_t n_items = 0, idx[8];
            for (uint32_t s = 0; s < n_seq; s++) {
                if (!active[s])
                    continue;
                uint32_t total = prompt_len[s] + n_decode;
                if (pos[s] >= total)
                    continue;
                uint32_t n = pos[s] < prompt_len[s]
                                 ? (prompt_len[s] - pos[s] < chunk ? prompt_len[s] - pos[s] : chunk)
                                 : 1;
                items[n_items] = (struct hr_step_seq){.kv = &seqs[s], .tokens = toks[s] + pos[s],
                                                      .n_tokens = n, .n_logits = 1};
                idx[n_items++] = s;
            }
            if (n_items == 0)
                break;
            struct hr_step step = {.seqs = items, .n_seqs = n_items};
            assert_int_equal(hr_engine_step(e, &step, &err), HR_OK);
            for (uint32_t i = 0; i < n_items; i++) {
                uint32_t s = idx[i];
                const float *lg = hr_engine_logits(e, i, 0);
                memcpy(out + ((size_t)s * rows_per_seq + n_rows[s]++) * V, lg, V * sizeof(float));
                pos[s] += items[i].n_tokens;
                if (pos[s] >= prompt_len[s] && pos[s] < prompt_len[s] + n_decode) {
                    /* Greedy next token, so both runs feed identical inputs. */
                    uint32_t best = 0;
                    for (uint32_t v = 1; v < V; v++)
                        if (lg[v] > lg[best])
                            best = v;
                    toks[s][pos[s]] = (int32_t)best;
                }
            }
        }
    }
    for (uint32_t s = 0; s < n_seq; s++)
        hr_engine_seq_free(e, &seqs[s]);
    hr_engine_free(e);
    return out;
}

/* Bit-identical: every kernel sums one output in the same order whatever the
 * batch around it (see matmul.h, batch invariance), and attention works per
 * sequence. -0.0 and 0.0 count as equal. */
static bool same(float a, float b) { return a == b || (a != a && b != b); }

static void test_ragged_equals_alone(void **state)
{
    struct fixture *fx = *state;
    const uint32_t V = fx->model->hp.n_vocab;
    const uint32_t lens[] = {37, 5, 64, 1};
    for (int threads = 1; threads <= 2; threads++) {
        float *a = run_sequences(fx, threads, true, 4, lens, 6, 16);
        float *b = run_sequences(fx, threads, false, 4, lens, 6, 16);
        size_t n = (size_t)4 * 64 * V;
        for (size_t i = 0; i < n; i++)
            if (!same(a[i], b[i]))
                fail_msg("threads %d: logit %zu differs: ragged %.9g, alone %.9g", threads, i,
                         (double)a[i], (double)b[i]);
        free(a);
        free(b);
    }
}

/* Chunk size must not change the result either (bit for bit). */
static void test_chunking_invariant(void **state)
{
    struct fixture *fx = *state;
    const uint32_t V = fx->model->hp.n_vocab;
    const uint32_t lens[] = {70};
    float *a = run_sequences(fx, 2, true, 1, lens, 4, 70);
    float *b = run_sequences(fx, 2, true, 1, lens, 4, 9);
    /* One row per chunk, then one per decode step: compare the last prefill row
     * and the 4 decode rows (rows 0..4 of the one-chunk run, 7..11 of the other). */
    float *ra = a, *rb = b + (size_t)7 * V;
    for (size_t i = 0; i < (size_t)5 * V; i++)
        if (!same(ra[i], rb[i]))
            fail_msg("logit %zu differs between chunk sizes: %.9g vs %.9g", i, (double)ra[i],
                     (double)rb[i]);
    free(a);
    free(b);
}

/* A hybrid model's recurrent state advances token by token (deltanet.h), so
 * prefill in chunks of 9, 16 or 64 (llama.cpp's DeltaNet chunk) equals one
 * chunk of 70, bit for bit, through the prefill and 4 decode steps. */
static void test_chunking_invariant_hybrid(void **state)
{
    struct fixture *fx = *state;
    const uint32_t V = fx->model->hp.n_vocab;
    const uint32_t lens[] = {70}, chunks[] = {9, 16, 64};
    float *a = run_sequences(fx, 2, true, 1, lens, 4, 70);
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        float *b = run_sequences(fx, 2, true, 1, lens, 4, chunks[c]);
        const uint32_t last = (70 + chunks[c] - 1) / chunks[c] - 1; /* last prefill row */
        const float *rb = b + (size_t)last * V;
        for (size_t i = 0; i < (size_t)5 * V; i++)
            if (!same(a[i], rb[i]))
                fail_msg("chunk %u: logit %zu differs from one chunk: %.9g vs %.9g", chunks[c],
                         i, (double)rb[i], (double)a[i]);
        free(b);
    }
    free(a);
}

/* The recurrent state is its own memory category: slots of exactly the
 * layers' conv and S matrices, allocated at init, while KV blocks hold only
 * the attention layers. A sequence continuing without its state, or more
 * new sequences than free slots, is refused before anything changes. */
static void test_state_is_counted(void **state)
{
    struct fixture *fx = *state;
    const struct hr_model *m = fx->model;
    const struct hr_hparams *hp = &m->hp;
    struct hr_engine_config cfg = {.n_threads = 2, .kv_type = HR_GGML_F16,
                                   .kv_budget_bytes = 8ull << 20, .max_step_tokens = 64,
                                   .max_step_logits = 8, .n_state_slots = 2};
    struct hr_engine *e = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_engine_init(m, &cfg, &e, &err), HR_OK);
    /* From the metadata, not from the model's derived sizes. */
    const uint64_t d = hp->ssm_d_state, hv = hp->ssm_dt_rank;
    const uint64_t conv_ch = 2 * (uint64_t)hp->ssm_n_group * d + hp->ssm_d_inner;
    const uint64_t per_layer = (hp->ssm_d_conv - 1) * conv_ch + hv * d * d;
    assert_int_equal(m->dn.n_layers, 3);
    assert_int_equal(m->n_attn_layers, 1);
    assert_int_equal(hr_state_slot_bytes(hr_engine_state_pool(e)), 3 * per_layer * sizeof(float));
    assert_int_equal(hr_state_n_slots(hr_engine_state_pool(e)), 2);
    assert_true(hr_engine_state_bytes(e) >= 2 * 3 * per_layer * sizeof(float));
    assert_int_equal(hr_kv_block_bytes(hr_engine_kv_pool(e)),
                     2ull * 1 * HR_KV_DEFAULT_BLOCK_TOKENS * hp->n_head_kv * hp->head_dim_k * 2);

    struct hr_kv_seq s[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(hr_engine_seq_init(e, &s[i], 256, &err), HR_OK);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct hr_step_seq items[3];
    for (int i = 0; i < 3; i++)
        items[i] = (struct hr_step_seq){.kv = &s[i], .tokens = toks, .n_tokens = 4, .n_logits = 1};
    struct hr_step step = {.seqs = items, .n_seqs = 3};
    const uint32_t used = hr_kv_n_used(hr_engine_kv_pool(e));
    assert_int_equal(hr_engine_step(e, &step, &err), HR_ERR_NOMEM); /* 3 sequences, 2 slots */
    assert_int_equal(hr_kv_n_used(hr_engine_kv_pool(e)), used);
    assert_int_equal(hr_state_n_used(hr_engine_state_pool(e)), 0);
    step.n_seqs = 2;
    assert_int_equal(hr_engine_step(e, &step, &err), HR_OK);
    assert_int_equal(hr_state_n_used(hr_engine_state_pool(e)), 2);
    /* KV at position 4 without the state that goes with it (what a KV-only
     * prefix-cache hit would be): refused. */
    s[2].n_tokens = 0;
    hr_engine_seq_free(e, &s[0]); /* frees a slot, and s[0] */
    assert_int_equal(hr_engine_seq_init(e, &s[0], 256, &err), HR_OK);
    assert_int_equal(hr_kv_seq_reserve(&s[2], hr_engine_kv_pool(e), 4, &err), HR_OK);
    s[2].n_tokens = 4;
    items[0] = (struct hr_step_seq){.kv = &s[2], .tokens = toks + 4, .n_tokens = 1, .n_logits = 1};
    step.n_seqs = 1;
    assert_int_equal(hr_engine_step(e, &step, &err), HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "recurrent state"));
    for (int i = 0; i < 3; i++)
        hr_engine_seq_free(e, &s[i]);
    assert_int_equal(hr_state_n_used(hr_engine_state_pool(e)), 0);
    hr_engine_free(e);
}

/* ffn_gate_up_exps holding the same values as ffn_gate_exps + ffn_up_exps
 * computes the same logits, bit for bit (the fused GEMM's gate rows are the
 * separate gate GEMM's rows). */
static void test_fused_gate_up_equals_separate(void **state)
{
    struct fixture *fx = *state, *fused = NULL;
    void *st2 = NULL;
    make_moe(&st2, "qwen3moe", HR_GGML_F32, fx->n_expert, fx->n_expert_used, true);
    fused = st2;
    assert_true(fused->model->layers[0].gate_up_fused);
    assert_false(fx->model->layers[0].gate_up_fused);
    const uint32_t V = fx->model->hp.n_vocab;
    const uint32_t lens[] = {23, 4};
    float *a = run_sequences(fx, 2, true, 2, lens, 3, 23);
    float *b = run_sequences(fused, 2, true, 2, lens, 3, 23);
    for (size_t i = 0; i < (size_t)2 * 23 * V; i++)
        if (!same(a[i], b[i]))
            fail_msg("logit %zu differs: separate %.9g, fused %.9g", i, (double)a[i],
                     (double)b[i]);
    free(a);
    free(b);
    teardown(&st2);
}

/* Renames the first occurrence of `from` in the file to `to` (same length),
 * so the loader no longer finds that key or tensor. */
static void patch_file(const char *path, const char *from, const char *to)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    char *buf = malloc((size_t)n);
    fseek(f, 0, SEEK_SET);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    const size_t len = strlen(from);
    assert_int_equal(strlen(to), len);
    long at = -1;
    for (long i = 0; i + (long)len <= n && at < 0; i++)
        if (memcmp(buf + i, from, len) == 0)
            at = i;
    assert_true(at >= 0);
    fseek(f, at, SEEK_SET);
    fwrite(to, 1, len, f);
    fclose(f);
    free(buf);
}

/* Missing or inconsistent expert keys and tensors are errors naming them. */
static void test_moe_errors_name_the_fault(void **state)
{
    (void)state;
    const struct {
        const char *from, *to, *want;
    } cases[] = {
        {"qwen3moe.expert_count", "qwen3moe.expert_cOunt", "'qwen3moe.expert_count' is missing"},
        {"qwen3moe.expert_used_count", "qwen3moe.expert_used_cOunt",
         "'qwen3moe.expert_used_count' is 0"},
        {"qwen3moe.expert_feed_forward_length", "qwen3moe.expert_feed_forward_lengtX",
         "'qwen3moe.expert_feed_forward_length' is missing"},
        {"blk.1.ffn_down_exps.weight", "blk.1.ffn_down_exps.weighX",
         "missing tensor 'blk.1.ffn_down_exps.weight'"},
        {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_gate_exps.weighX",
         "missing tensor 'blk.0.ffn_gate_exps.weight'"},
        {"blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_inp.weighX",
         "missing tensor 'blk.0.ffn_gate_inp.weight'"},
    };
    struct hr_gen_params p;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gen_shape("tiny-moe", &p, &err), HR_OK);
    char path[128];
    snprintf(path, sizeof(path), "/tmp/hr-test-engine-%d-bad-moe.gguf", (int)getpid());
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(hr_gen_model(&p, path, &err), HR_OK);
        patch_file(path, cases[i].from, cases[i].to);
        struct hr_model *m = NULL;
        assert_int_not_equal(hr_model_open(path, &m, &err), HR_OK);
        assert_null(m);
        if (!strstr(err.msg, cases[i].want))
            fail_msg("renaming %s: got \"%s\", want \"%s\"", cases[i].from, err.msg,
                     cases[i].want);
    }
    unlink(path);
}

static void test_refusals_change_nothing(void **state)
{
    struct fixture *fx = *state;
    struct hr_engine_config cfg = {.n_threads = 1, .kv_type = HR_GGML_F16,
                                   .max_step_tokens = 64, .max_step_logits = 64};
    struct hr_kv_config kc = {.n_layer = fx->model->hp.n_layer,
                              .n_head_kv = fx->model->hp.n_head_kv,
                              .head_dim = fx->model->hp.head_dim_k, .type = HR_GGML_F16};
    cfg.kv_budget_bytes = 3 * hr_kv_block_bytes_for(&kc); /* three blocks: 96 positions */
    struct hr_engine *e = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_engine_init(fx->model, &cfg, &e, &err), HR_OK);
    struct hr_kv_seq a, b;
    assert_int_equal(hr_engine_seq_init(e, &a, 1000, &err), HR_OK);
    assert_int_equal(hr_engine_seq_init(e, &b, 20, &err), HR_OK); /* one block */
    int32_t t[64] = {0};
    struct hr_step_seq it = {.kv = &a, .tokens = t, .n_tokens = 64, .n_logits = 1};
    struct hr_step step = {.seqs = &it, .n_seqs = 1};
    assert_int_equal(hr_engine_step(e, &step, &err), HR_OK); /* 2 blocks */
    /* 40 more tokens need 2 more blocks; only 1 is free. */
    it.n_tokens = 40;
    assert_int_equal(hr_engine_step(e, &step, &err), HR_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "KV blocks"));
    assert_int_equal(a.n_tokens, 64);
    assert_int_equal(hr_kv_n_free(hr_engine_kv_pool(e)), 1);
    /* Too many tokens for one step. */
    struct hr_step_seq two[2] = {{.kv = &a, .tokens = t, .n_tokens = 40},
                                 {.kv = &b, .tokens = t, .n_tokens = 40}};
    step = (struct hr_step){.seqs = two, .n_seqs = 2};
    assert_int_equal(hr_engine_step(e, &step, &err), HR_ERR_LIMIT);
    /* The same sequence twice, a token outside the vocabulary, past a table. */
    two[1].kv = &a;
    two[0].n_tokens = two[1].n_tokens = 1;
    assert_int_equal(hr_engine_step(e, &step, &err), HR_ERR_INVALID);
    int32_t bad = (int32_t)fx->model->hp.n_vocab;
    it = (struct hr_step_seq){.kv = &b, .tokens = &bad, .n_tokens = 1};
    step = (struct hr_step){.seqs = &it, .n_seqs = 1};
    assert_int_equal(hr_engine_step(e, &step, &err), HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "vocabulary"));
    it = (struct hr_step_seq){.kv = &b, .tokens = t, .n_tokens = 64};
    assert_int_equal(hr_engine_step(e, &step, &err), HR_ERR_LIMIT);
    assert_int_equal(b.n_tokens, 0);
    assert_int_equal(b.n_blocks, 0);
    hr_kv_seq_free(&a, hr_engine_kv_pool(e));
    hr_kv_seq_free(&b, hr_engine_kv_pool(e));
    assert_int_equal(hr_kv_n_free(hr_engine_kv_pool(e)), 3);
    hr_engine_free(e);
}

/* A quantized cache on a model whose head dim (16) is not a multiple of 32
 * is refused at init, naming both. */
static void test_quant_cache_rejects_head_dim(void **state)
{
    struct fixture *fx = *state;
    struct hr_engine_config cfg = {.n_threads = 1, .kv_type = HR_GGML_Q8_0,
                                   .kv_budget_bytes = 1 << 20, .max_step_tokens = 8};
    struct hr_engine *e = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_engine_init(fx->model, &cfg, &e, &err), HR_ERR_UNSUPPORTED);
    assert_null(e);
    assert_non_null(strstr(err.msg, "head dim is 16"));
    assert_non_null(strstr(err.msg, "q8_0"));
}

/* An F16 model with one matrix relabelled I16 (same element size, so the
 * GGUF reader accepts the file): hr_model_open refuses it, naming the
 * tensor, the type id and its name. */
static void test_unsupported_type_is_named(void **state)
{
    (void)state;
    struct hr_gen_params p;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gen_shape("tiny", &p, &err), HR_OK);
    p.type = HR_GGML_F16;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/hr-test-engine-%d-i16.gguf", (int)getpid());
    assert_int_equal(hr_gen_model(&p, path, &err), HR_OK);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    char *buf = malloc((size_t)n);
    fseek(f, 0, SEEK_SET);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    /* tensor info: name, u32 n_dims (2), u64 ne[2], u32 type */
    static const char name[] = "blk.0.attn_q.weight";
    char *at = memmem(buf, (size_t)n, name, sizeof(name) - 1);
    assert_non_null(at);
    const long type_at = (at - buf) + (long)sizeof(name) - 1 + 4 + 16;
    uint32_t type;
    memcpy(&type, buf + type_at, 4);
    assert_int_equal(type, HR_GGML_F16);
    type = HR_GGML_I16;
    fseek(f, type_at, SEEK_SET);
    assert_int_equal(fwrite(&type, 4, 1, f), 1);
    fclose(f);
    free(buf);
    struct hr_model *m = NULL;
    assert_int_equal(hr_model_open(path, &m, &err), HR_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err.msg, "blk.0.attn_q.weight"));
    assert_non_null(strstr(err.msg, "type 25 (I16)"));
    unlink(path);
}

/*
 * The attention contract (attention.h): a query at position p sees keys
 * max(0, p - window + 1) .. p, and a sink adds exp(sink) to the softmax's
 * denominator. Random K/V for 100 positions go into a pool; every query
 * block of every position is checked against softmax in double over the
 * keys the window allows, for windows 0 (full), 1, 16, 20 and 33, with and
 * without sinks, on f32 and f16 caches (f16: the reference reads the cache's
 * rounded values).
 */
static void test_attention_window_sinks(void **state)
{
    (void)state;
    const uint32_t hd = 64, G = 4, n_kv_head = 2, N = 100, bt = 32;
    const enum hr_ggml_type types[] = {HR_GGML_F32, HR_GGML_F16};
    struct hr_rng r;
    hr_rng_seed(&r, 11);
    float *k = malloc((size_t)N * n_kv_head * hd * sizeof(float));
    float *v = malloc((size_t)N * n_kv_head * hd * sizeof(float));
    float *q = malloc((size_t)N * G * n_kv_head * hd * sizeof(float));
    float *out = malloc((size_t)N * G * n_kv_head * hd * sizeof(float));
    float sinks[8];
    for (size_t i = 0; i < (size_t)N * n_kv_head * hd; i++) {
        k[i] = (float)hr_rng_normal(&r);
        v[i] = (float)hr_rng_normal(&r);
    }
    for (size_t i = 0; i < (size_t)N * G * n_kv_head * hd; i++)
        q[i] = (float)hr_rng_normal(&r);
    for (int i = 0; i < 8; i++)
        sinks[i] = (float)(2.0 * hr_rng_normal(&r));
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        struct hr_kv_config kc = {.n_layer = 1, .n_head_kv = n_kv_head, .head_dim = hd,
                                  .block_tokens = bt, .type = types[ti],
                                  .budget_bytes = 16ull << 20};
        struct hr_kv_pool *pool = NULL;
        struct hr_err err = {{0}};
        assert_int_equal(hr_kv_pool_init(&kc, &pool, &err), HR_OK);
        struct hr_kv_seq seq;
        assert_int_equal(hr_kv_seq_init(&seq, N, bt, &err), HR_OK);
        assert_int_equal(hr_kv_seq_reserve(&seq, pool, N, &err), HR_OK);
        for (uint32_t p = 0; p < N; p++)
            hr_attn_store(pool, seq.blocks, 0, n_kv_head, hd, (int32_t)p, k + (size_t)p * n_kv_head * hd,
                          v + (size_t)p * n_kv_head * hd);
        /* the values the cache holds */
        float *kc_ = malloc((size_t)N * n_kv_head * hd * sizeof(float));
        float *vc_ = malloc((size_t)N * n_kv_head * hd * sizeof(float));
        for (size_t i = 0; i < (size_t)N * n_kv_head * hd; i++) {
            kc_[i] = types[ti] == HR_GGML_F16 ? hr_f16_to_f32(hr_f32_to_f16(k[i])) : k[i];
            vc_[i] = types[ti] == HR_GGML_F16 ? hr_f16_to_f32(hr_f32_to_f16(v[i])) : v[i];
        }
        void *scr = malloc(hr_attn_scratch_bytes(types[ti], hd, G));
        const uint32_t windows[] = {0, 1, 16, 20, 33};
        const uint32_t q_dim = G * n_kv_head * hd, bq = hr_attn_block_tokens(G);
        for (size_t wi = 0; wi < sizeof(windows) / sizeof(windows[0]); wi++)
            for (int with_sinks = 0; with_sinks <= 1; with_sinks++) {
                struct hr_attn_ctx ac = {.kv = pool, .blocks = seq.blocks, .layer = 0,
                                         .head_dim = hd, .block_tokens = bt, .group = G,
                                         .scale = 1.0f / sqrtf((float)hd),
                                         .window = windows[wi],
                                         .sinks = with_sinks ? sinks : NULL};
                for (uint32_t g = 0; g < n_kv_head; g++)
                    for (uint32_t t0 = 0; t0 < N; t0 += bq) {
                        const uint32_t nq = N - t0 < bq ? N - t0 : bq;
                        const size_t row = (size_t)t0 * q_dim + (size_t)g * G * hd;
                        hr_attention(&ac, g, q + row, q_dim, (int32_t)t0, nq, out + row, q_dim,
                                     scr);
                    }
                double max_err = 0;
                for (uint32_t p = 0; p < N; p++)
                    for (uint32_t h = 0; h < G * n_kv_head; h++) {
                        const uint32_t g = h / G, w = windows[wi];
                        const uint32_t lo = w && p >= w ? p - w + 1 : 0;
                        const float *qr = q + (size_t)p * q_dim + (size_t)h * hd;
                        double mx = with_sinks ? sinks[h] : -INFINITY, sc[100];
                        for (uint32_t j = lo; j <= p; j++) {
                            double d = 0;
                            for (uint32_t i = 0; i < hd; i++)
                                d += (double)qr[i] * kc_[((size_t)j * n_kv_head + g) * hd + i];
                            sc[j] = d / sqrt((double)hd);
                            mx = sc[j] > mx ? sc[j] : mx;
                        }
                        double sum = with_sinks ? exp(sinks[h] - mx) : 0, o[64] = {0};
                        for (uint32_t j = lo; j <= p; j++) {
                            const double e = exp(sc[j] - mx);
                            sum += e;
                            for (uint32_t i = 0; i < hd; i++)
                                o[i] += e * vc_[((size_t)j * n_kv_head + g) * hd + i];
                        }
                        for (uint32_t i = 0; i < hd; i++) {
                            const double e_abs =
                                fabs(o[i] / sum - out[(size_t)p * q_dim + (size_t)h * hd + i]);
                            max_err = e_abs > max_err ? e_abs : max_err;
                        }
                    }
                if (max_err > 1e-5)
                    fail_msg("%s cache, window %u, sinks %d: max |error| %.3g vs the reference",
                             hr_kv_type_name(types[ti]), windows[wi], with_sinks, max_err);
            }
        free(scr);
        free(kc_);
        free(vc_);
        hr_kv_seq_free(&seq, pool);
        hr_kv_pool_free(pool);
    }
    free(k);
    free(v);
    free(q);
    free(out);
}

/* Runs one gpt-oss sequence (a 150-token prompt in chunks of `chunk`, then
 * 12 decode steps) on an engine with windowed KV or without, optionally
 * from a prefix-cache hit of `pc`'s; returns the logits of every step's
 * last row, and the KV bytes held at most. */
static float *run_window(struct fixture *fx, bool full_window, uint32_t chunk,
                         struct hr_engine *given, struct hr_pcache *pc, uint64_t *kv_most,
                         uint32_t *n_rows)
{
    const uint32_t V = fx->model->hp.n_vocab, n_prompt = 150, n_gen = 12;
    struct hr_engine_config cfg = {.n_threads = 2, .kv_type = HR_GGML_F32,
                                   .kv_budget_bytes = 16ull << 20, .max_step_tokens = 64,
                                   .max_step_logits = 64, .kv_full_window = full_window};
    struct hr_engine *e = given;
    struct hr_err err = {{0}};
    if (!e && hr_engine_init(fx->model, &cfg, &e, &err) != HR_OK)
        fail_msg("%s", err.msg);
    struct hr_kv_pool *pool = hr_engine_kv_pool(e);
    int32_t toks[162];
    struct hr_rng r;
    hr_rng_seed(&r, 5);
    random_tokens(&r, toks, n_prompt, V);
    struct hr_kv_seq s;
    assert_int_equal(hr_engine_seq_init(e, &s, 256, &err), HR_OK);
    if (pc) { /* from the cache: its blocks, then the window */
        s.n_blocks = hr_pcache_lookup(pc, toks, n_prompt, (n_prompt - 1) / 32, s.blocks);
        s.n_tokens = s.n_blocks * 32;
        assert_true(s.n_blocks > 0);
        hr_pcache_restore_window(pc, &s);
    }
    float *out = calloc((size_t)(n_prompt + n_gen) * V, sizeof(float));
    uint32_t rows = 0, pos = s.n_tokens;
    *kv_most = 0;
    while (pos < n_prompt + n_gen) {
        const uint32_t n = pos < n_prompt ? (n_prompt - pos < chunk ? n_prompt - pos : chunk) : 1;
        struct hr_step_seq it = {.kv = &s, .tokens = toks + pos, .n_tokens = n, .n_logits = 1};
        struct hr_step step = {.seqs = &it, .n_seqs = 1};
        struct hr_plan plan;
        hr_engine_plan(e, &step, &plan);
        const uint64_t during = (uint64_t)hr_kv_n_used(pool) * hr_kv_block_bytes(pool) +
                                plan.kv_bytes;
        if (during > *kv_most)
            *kv_most = during;
        /* Never more than admission prices for this length and step size
         * (a cache hit's blocks are shared, so only without one). */
        if (!pc)
            assert_true(hr_kv_seq_held_blocks(&s) + hr_kv_seq_new_blocks(&s, pool, n) <=
                        hr_kv_blocks_for(pool, pos + n, n));
        assert_int_equal(hr_engine_step(e, &step, &err), HR_OK);
        memcpy(out + (size_t)rows++ * V, hr_engine_logits(e, 0, 0), V * sizeof(float));
        pos += n;
        if (pos >= n_prompt && pos < n_prompt + n_gen) { /* greedy */
            const float *lg = hr_engine_logits(e, 0, 0);
            int32_t best = 0;
            for (uint32_t i = 1; i < V; i++)
                if (lg[i] > lg[best])
                    best = (int32_t)i;
            toks[pos] = best;
        }
    }
    if (pc) { /* back to the cache (given is the engine it was made on) */
        hr_pcache_insert_seq(pc, toks, &s);
        hr_pcache_release_seq(pc, &s);
    }
    hr_engine_seq_free(e, &s);
    if (!given)
        hr_engine_free(e);
    *n_rows = rows;
    return out;
}

/* Windowed KV changes which blocks hold the window, not what attention
 * reads: the same logits as keeping every position, bit for bit, in any
 * chunking; the windowed sequence holds ceil(n / B) full blocks plus a few
 * windowed ones (2 for this 16-token window), about half the bytes. */
static void test_window_kv(void **state)
{
    struct fixture *fx = *state;
    const uint32_t V = fx->model->hp.n_vocab;
    uint64_t kv_full = 0, kv_win = 0, kv_win9 = 0;
    uint32_t rows, rows_win, rows9;
    float *full = run_window(fx, true, 64, NULL, NULL, &kv_full, &rows);
    float *win = run_window(fx, false, 64, NULL, NULL, &kv_win, &rows_win);
    float *win9 = run_window(fx, false, 9, NULL, NULL, &kv_win9, &rows9);
    assert_int_equal(rows_win, rows);
    if (memcmp(full, win, (size_t)rows * V * sizeof(float)) != 0)
        fail_msg("windowed KV changed the logits");
    /* Chunks of 9: the prefill's last row and the decodes. */
    for (size_t i = 0; i < (size_t)13 * V; i++)
        if (full[(size_t)(rows - 13) * V + i] != win9[(size_t)(rows9 - 13) * V + i])
            fail_msg("windowed KV in chunks of 9: logit %zu differs", i);
    /* 162 positions: 6 full blocks of 2 layers (full window) against 6 of
     * 1 layer plus the window's, and 64-token steps hold at most 3 of those. */
    struct hr_kv_config kc = {.n_layer = 1, .n_head_kv = fx->model->hp.n_head_kv,
                              .head_dim = fx->model->hp.head_dim_k, .type = HR_GGML_F32};
    const uint64_t half = hr_kv_block_bytes_for(&kc);
    assert_int_equal(kv_full, 6 * 2 * half);
    assert_true(kv_win <= (6 + 3) * half);
    assert_true(kv_win9 <= (6 + 2) * half);
    printf("# KV held at most: %llu bytes windowed (%llu in 9-token chunks), %llu full\n",
           (unsigned long long)kv_win, (unsigned long long)kv_win9, (unsigned long long)kv_full);
    free(full);
    free(win);
    free(win9);

    /* The prefix cache: a sequence inserted at its end carries its window;
     * a second run of the same prompt hits 4 blocks (128 tokens) and
     * continues from them to the same logits as cold. */
    struct hr_engine_config cfg = {.n_threads = 2, .kv_type = HR_GGML_F32,
                                   .kv_budget_bytes = 16ull << 20, .max_step_tokens = 64,
                                   .max_step_logits = 64};
    struct hr_engine *e = NULL;
    struct hr_pcache *pc = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_engine_init(fx->model, &cfg, &e, &err), HR_OK);
    assert_int_equal(hr_pcache_init(hr_engine_kv_pool(e), 1, 64, &pc, &err), HR_OK);
    /* Seed the cache with the prompt's first 128 tokens, its window carried. */
    {
        int32_t toks[150];
        struct hr_rng r;
        hr_rng_seed(&r, 5);
        random_tokens(&r, toks, 150, V);
        struct hr_kv_seq s;
        assert_int_equal(hr_engine_seq_init(e, &s, 256, &err), HR_OK);
        struct hr_step_seq it = {.kv = &s, .tokens = toks, .n_tokens = 64, .n_logits = 0};
        struct hr_step step = {.seqs = &it, .n_seqs = 1};
        assert_int_equal(hr_engine_step(e, &step, &err), HR_OK);
        it.tokens = toks + 64;
        assert_int_equal(hr_engine_step(e, &step, &err), HR_OK);
        assert_int_equal(hr_pcache_insert_seq(pc, toks, &s), 4);
        hr_pcache_release_seq(pc, &s);
        assert_int_equal(hr_pcache_check(pc, &err), HR_OK);
        /* The prefix and its window (blocks 3..: a 16-token window from
         * position 128 starts in block 3): 4 + 1 blocks, all idle now. */
        assert_int_equal(hr_pcache_peek(pc, toks, 150), 4);
        assert_int_equal(hr_kv_n_used(hr_engine_kv_pool(e)), 5);
        assert_int_equal(hr_pcache_n_evictable(pc) + hr_pcache_n_idle_wblocks(pc), 5);
        hr_engine_seq_free(e, &s);
    }
    uint64_t kv_hit = 0, kv_cold = 0;
    uint32_t rh, rc;
    float *hit = run_window(fx, false, 64, e, pc, &kv_hit, &rh);
    assert_int_equal(hr_pcache_check(pc, &err), HR_OK);
    float *cold = run_window(fx, false, 64, NULL, NULL, &kv_cold, &rc);
    /* From the hit: the 22-token remainder in one step, then the decodes. */
    assert_int_equal(rh, 13);
    for (size_t i = 0; i < (size_t)13 * V; i++)
        if (hit[i] != cold[(size_t)(rc - 13) * V + i])
            fail_msg("continuing from a cache hit: logit %zu differs from cold", i);
    /* A hit without its window cannot continue: refused, nothing changed. */
    {
        int32_t toks[150];
        struct hr_rng r;
        hr_rng_seed(&r, 5);
        random_tokens(&r, toks, 150, V);
        struct hr_kv_seq s;
        assert_int_equal(hr_engine_seq_init(e, &s, 256, &err), HR_OK);
        s.n_blocks = hr_pcache_lookup(pc, toks, 150, 4, s.blocks);
        s.n_tokens = s.n_blocks * 32;
        assert_int_equal(s.n_blocks, 4);
        const uint32_t used = hr_kv_n_used(hr_engine_kv_pool(e));
        struct hr_step_seq it = {.kv = &s, .tokens = toks + 128, .n_tokens = 22, .n_logits = 1};
        struct hr_step step = {.seqs = &it, .n_seqs = 1};
        assert_int_equal(hr_engine_step(e, &step, &err), HR_ERR_INVALID);
        assert_non_null(strstr(err.msg, "sliding-window"));
        assert_int_equal(hr_kv_n_used(hr_engine_kv_pool(e)), used);
        assert_int_equal(s.n_tokens, 128);
        hr_pcache_release_seq(pc, &s);
        hr_engine_seq_free(e, &s);
    }
    /* Eviction gives every block back, windows included. */
    hr_pcache_evict(pc, 1000);
    assert_int_equal(hr_pcache_n_idle_wblocks(pc), 0);
    assert_int_equal(hr_kv_n_used(hr_engine_kv_pool(e)), 0);
    free(hit);
    free(cold);
    hr_pcache_free(pc);
    hr_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unsupported_type_is_named),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_qwen3, teardown),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_qwen2_q8, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen3, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen2_q8, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_llama_f16, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_llama_bf16, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_llama_q4_0, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen3_q4_k, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen2_q5_k, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_llama_q6_k, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_llama_q5_1, teardown),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_qwen3_q4_k_m_real, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen3_q4_k_m_real, teardown),
        cmocka_unit_test_setup_teardown(test_chunking_invariant, setup_llama_f16, teardown),
        cmocka_unit_test_setup_teardown(test_chunking_invariant, setup_qwen3, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_change_nothing, setup_qwen3, teardown),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_qwen3_kv_q8, teardown),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_llama_kv_q4, teardown),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_qwen2_kv_q8_hd96, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen3_kv_q8, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_llama_kv_q4, teardown),
        cmocka_unit_test_setup_teardown(test_chunking_invariant, setup_qwen3_kv_q8, teardown),
        cmocka_unit_test_setup_teardown(test_chunking_invariant, setup_qwen2_kv_q8_hd96, teardown),
        cmocka_unit_test_setup_teardown(test_quant_cache_rejects_head_dim, setup_qwen3, teardown),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_qwen3moe, teardown),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_qwen2moe_q8, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen3moe, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen2moe_q8, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_mixtral_q4_k, teardown),
        cmocka_unit_test_setup_teardown(test_chunking_invariant, setup_qwen2moe_q8, teardown),
        cmocka_unit_test_setup_teardown(test_fused_gate_up_equals_separate, setup_qwen3moe,
                                        teardown),
        cmocka_unit_test(test_moe_errors_name_the_fault),
        cmocka_unit_test(test_attention_window_sinks),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_gptoss, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_gptoss, teardown),
        cmocka_unit_test_setup_teardown(test_chunking_invariant, setup_gptoss, teardown),
        cmocka_unit_test_setup_teardown(test_window_kv, setup_gptoss, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_gptoss_mxfp4, teardown),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_qwen35, teardown),
        cmocka_unit_test_setup_teardown(test_plan_is_exact, setup_qwen35moe_q8, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen35, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_equals_alone, setup_qwen35moe_q8, teardown),
        cmocka_unit_test_setup_teardown(test_chunking_invariant_hybrid, setup_qwen35, teardown),
        cmocka_unit_test_setup_teardown(test_state_is_counted, setup_qwen35, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
