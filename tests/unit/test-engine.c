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
 *  - all of it also with quantized caches (Q8_0 and Q4_0, head dims 64 with
 *    the Hadamard rotation and 96 without), and a quantized cache on a head
 *    dim that its blocks cannot hold is refused at init.
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

#include "engine/engine.h"
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
};

static int make_model_kv(void **state, const char *arch, enum hr_ggml_type type,
                         enum hr_ggml_type kv_type, uint32_t head_dim)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    fx->kv_type = kv_type;
    fx->head_dim = head_dim;
    struct hr_gen_params p;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gen_shape("tiny", &p, &err), HR_OK);
    p.arch = arch;
    p.type = type;
    /* K-quant rows are whole 256-value super-blocks. */
    const bool kq = type == HR_GGML_Q4_K || type == HR_GGML_Q5_K || type == HR_GGML_Q6_K;
    p.n_embd = kq ? 256 : 64;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = kq ? 512 : 96;
    p.n_layer = 2;
    p.head_dim = head_dim;
    snprintf(fx->path, sizeof(fx->path), "/tmp/hr-test-engine-%d-%s.gguf", (int)getpid(), arch);
    if (hr_gen_model(&p, fx->path, &err) != HR_OK)
        fail_msg("%s", err.msg);
    if (hr_model_open(fx->path, &fx->model, &err) != HR_OK)
        fail_msg("%s", err.msg);
    *state = fx;
    return 0;
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
        uint32_t used_before = hr_kv_n_used(hr_engine_kv_pool(e));
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
        /* The KV part of the plan is the blocks the step actually took. */
        uint32_t used_after = hr_kv_n_used(hr_engine_kv_pool(e));
        assert_int_equal((uint64_t)(used_after - used_before) * hr_kv_block_bytes(hr_engine_kv_pool(e)),
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
        hr_kv_seq_free(&seqs[i], hr_engine_kv_pool(e));
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
        hr_kv_seq_free(&seqs[s], hr_engine_kv_pool(e));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
