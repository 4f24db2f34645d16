/*
 * test-kv-cache.c - the paged KV pool and block tables: allocation order,
 * refcounts, exhaustion without partial effects, trim, table capacity, and
 * the threadpool the engine runs on (dispatch, barriers, reuse), the cache
 * types' real block bytes, and attention over quantized (Q8_0 / Q4_0) blocks
 * against a plain reference; windowed tables (sliding-window layers): the
 * slide returns exactly the blocks out of every later window, and the
 * counts admission prices are the most a sequence ever holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "engine/attention.h"
#include "engine/kv-cache.h"
#include "engine/threadpool.h"
#include "kernels/quant.h"

static struct hr_kv_pool *pool_of(uint32_t n_blocks)
{
    struct hr_kv_config c = {.n_layer = 2, .n_head_kv = 2, .head_dim = 64, .block_tokens = 32,
                             .type = HR_GGML_F16};
    c.budget_bytes = n_blocks * hr_kv_block_bytes_for(&c) + 100; /* a partial block is not a block */
    struct hr_kv_pool *p = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_OK);
    return p;
}

static void test_blocks_and_refcounts(void **state)
{
    (void)state;
    struct hr_kv_pool *p = pool_of(4);
    assert_int_equal(hr_kv_n_blocks(p), 4);
    assert_int_equal(hr_kv_block_bytes(p), 2 * 2 * 32 * 2 * 64 * 2);
    int32_t a = hr_kv_alloc_block(p), b = hr_kv_alloc_block(p);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    /* Layer 1's K follows layer 0's K and V inside the block. */
    assert_ptr_equal((uint8_t *)hr_kv_block_k(p, a, 1),
                     (uint8_t *)hr_kv_block_k(p, a, 0) + 2 * 2 * hr_kv_head_bytes(p));
    assert_int_equal(hr_kv_head_bytes(p), 32 * 64 * 2);
    hr_kv_ref_block(p, a);
    assert_int_equal(hr_kv_refcount(p, a), 2);
    hr_kv_unref_block(p, a);
    assert_int_equal(hr_kv_n_free(p), 2);
    hr_kv_unref_block(p, a);
    assert_int_equal(hr_kv_n_free(p), 3);
    /* Writing a block commits its pages; trim gives them back. */
    memset(hr_kv_block_k(p, b, 0), 1, hr_kv_block_bytes(p));
    hr_kv_unref_block(p, b);
    assert_true(hr_kv_pool_trim(p) > 0 || hr_kv_block_bytes(p) < 4096);
    assert_int_equal(hr_kv_pool_trim(p), 0);
    hr_kv_pool_free(p);
}

static void test_seq_reserve(void **state)
{
    (void)state;
    struct hr_kv_pool *p = pool_of(3);
    struct hr_kv_seq s;
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_seq_init(&s, 200, 32, &err), HR_OK);
    assert_int_equal(s.cap_blocks, 7);
    assert_int_equal(hr_kv_seq_reserve(&s, p, 33, &err), HR_OK);
    assert_int_equal(s.n_blocks, 2);
    s.n_tokens = 33;
    assert_int_equal(hr_kv_blocks_needed(s.n_blocks, 64, 32), 0);
    assert_int_equal(hr_kv_blocks_needed(s.n_blocks, 65, 32), 1);
    /* 100 more tokens need 3 more blocks; 1 is free: nothing is taken. */
    assert_int_equal(hr_kv_seq_reserve(&s, p, 100, &err), HR_ERR_NOMEM);
    assert_int_equal(s.n_blocks, 2);
    assert_int_equal(hr_kv_n_free(p), 1);
    /* Past the table's capacity. */
    assert_int_equal(hr_kv_seq_reserve(&s, p, 200, &err), HR_ERR_LIMIT);
    hr_kv_seq_free(&s, p);
    assert_int_equal(hr_kv_n_free(p), 3);
    struct hr_kv_seq z = {0};
    hr_kv_seq_free(&z, p);
    hr_kv_pool_free(p);
    hr_kv_pool_free(NULL);
}

/* Usable blocks (a GPU pool mapped in groups): only [0, usable) is handed
 * out; a block in use above it leaves circulation when freed; raising the
 * limit brings the free ones back; used counts every referenced block. */
static void test_usable_limit(void **state)
{
    (void)state;
    struct hr_kv_pool *p = pool_of(8);
    hr_kv_pool_set_usable(p, 0);
    assert_int_equal(hr_kv_n_free(p), 0);
    assert_int_equal(hr_kv_alloc_block(p), -1);
    hr_kv_pool_set_usable(p, 4);
    assert_int_equal(hr_kv_pool_usable(p), 4);
    assert_int_equal(hr_kv_n_free(p), 4);
    int32_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = hr_kv_alloc_block(p);
    assert_int_equal(b[0], 0); /* the lowest first */
    assert_int_equal(hr_kv_alloc_block(p), -1);
    assert_int_equal(hr_kv_n_used(p), 4);
    hr_kv_pool_set_usable(p, 8);
    assert_int_equal(hr_kv_n_free(p), 4);
    int32_t hi = hr_kv_alloc_block(p);
    assert_int_equal(hi, 4);
    assert_int_equal(hr_kv_n_used_from(p, 4), 1);
    /* Down to 2: blocks 2 and 3 are in use, 5..7 free; only 0..1 may serve. */
    hr_kv_unref_block(p, b[0]);
    hr_kv_pool_set_usable(p, 2);
    assert_int_equal(hr_kv_n_free(p), 1);
    assert_int_equal(hr_kv_n_used(p), 4);
    hr_kv_unref_block(p, b[3]); /* above the limit: out of circulation */
    assert_int_equal(hr_kv_n_free(p), 1);
    assert_int_equal(hr_kv_n_used(p), 3);
    assert_int_equal(hr_kv_n_used_from(p, 2), 2);
    assert_int_equal(hr_kv_alloc_block(p), 0);
    assert_int_equal(hr_kv_alloc_block(p), -1);
    hr_kv_pool_set_usable(p, 8); /* 3, 5, 6, 7 come back */
    assert_int_equal(hr_kv_n_free(p), 4);
    assert_int_equal(hr_kv_n_used_peak(p), 5);
    hr_kv_pool_free(p);
}

static void test_budget_too_small(void **state)
{
    (void)state;
    struct hr_kv_config c = {.n_layer = 2, .n_head_kv = 2, .head_dim = 64, .type = HR_GGML_F16,
                             .budget_bytes = 100};
    struct hr_kv_pool *p = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_ERR_RANGE);
    assert_non_null(strstr(err.msg, "holds no block"));
    c.type = HR_GGML_BF16;
    assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_ERR_UNSUPPORTED);
}

struct pool_ctx {
    struct hr_pool *pool;
    _Atomic int hits[8];
    _Atomic int phase_errors;
    _Atomic int stage;
};

/* Block bytes are the cache type's real bytes; quantized types need head
 * dims that are multiples of 32 and say so; names parse both ways. */
static void test_cache_types(void **state)
{
    (void)state;
    struct hr_kv_config c = {.n_layer = 3, .n_head_kv = 2, .head_dim = 128, .block_tokens = 32,
                             .budget_bytes = 1 << 24};
    const struct {
        enum hr_ggml_type t;
        uint64_t row;
    } rows[] = {{HR_GGML_F32, 512}, {HR_GGML_F16, 256}, {HR_GGML_Q8_0, 4 * 34}, {HR_GGML_Q4_0, 4 * 18}};
    for (size_t i = 0; i < 4; i++) {
        c.type = rows[i].t;
        assert_int_equal(hr_kv_block_bytes_for(&c), 2 * 3 * 32 * 2 * rows[i].row);
        struct hr_kv_pool *p = NULL;
        struct hr_err err = {{0}};
        assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_OK);
        assert_int_equal(hr_kv_block_bytes(p), hr_kv_block_bytes_for(&c));
        assert_int_equal(hr_kv_head_bytes(p), 32 * rows[i].row);
        hr_kv_pool_free(p);
        enum hr_ggml_type back = HR_GGML_BF16;
        assert_int_equal(hr_kv_type_parse(hr_kv_type_name(rows[i].t), &back, &err), HR_OK);
        assert_int_equal(back, rows[i].t);
    }
    struct hr_err err = {{0}};
    enum hr_ggml_type t;
    assert_int_equal(hr_kv_type_parse("q5_0", &t, &err), HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "q5_0"));
    c.type = HR_GGML_Q8_0;
    c.head_dim = 80;
    assert_int_equal(hr_kv_block_bytes_for(&c), 0);
    struct hr_kv_pool *p = NULL;
    assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "head dim is 80"));
    assert_non_null(strstr(err.msg, "q8_0"));
    c.type = HR_GGML_BF16;
    assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_ERR_UNSUPPORTED);
}

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/*
 * Attention over a quantized cache against a plain reference built from the
 * pieces whose exactness is established elsewhere: scores from
 * hr_attn_score_ref (ggml's vec_dot arithmetic), a softmax in double, V
 * dequantized with the reference dequantizers. Also checks that the cache
 * holds exactly the quantizers' bytes (the write is bit-identical to what
 * llama.cpp's set_rows stores). Positions cross a 16-key tile and a
 * 32-token block, queries are ragged (nq < the call's maximum).
 */
static void check_quant_attention(enum hr_ggml_type type, uint32_t hd, uint32_t group)
{
    const uint32_t n_head_kv = 2, n_pos = 75, bt = 32;
    struct hr_kv_config c = {.n_layer = 2, .n_head_kv = n_head_kv, .head_dim = hd,
                             .block_tokens = bt, .type = type};
    c.budget_bytes = 3 * hr_kv_block_bytes_for(&c);
    struct hr_kv_pool *pool = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_pool_init(&c, &pool, &err), HR_OK);
    struct hr_kv_seq seq;
    assert_int_equal(hr_kv_seq_init(&seq, 96, bt, &err), HR_OK);
    assert_int_equal(hr_kv_seq_reserve(&seq, pool, n_pos, &err), HR_OK);
    const size_t kv_dim = (size_t)n_head_kv * hd, rb = hr_kv_row_bytes(type, hd);
    float *k = malloc(n_pos * kv_dim * sizeof(float)), *v = malloc(n_pos * kv_dim * sizeof(float));
    uint8_t *row = malloc(rb);
    uint32_t rs = 7 + hd + (uint32_t)type;
    for (size_t i = 0; i < n_pos * kv_dim; i++) {
        k[i] = frand(&rs) * 2.0f;
        v[i] = frand(&rs);
    }
    const uint32_t layer = 1;
    for (uint32_t p = 0; p < n_pos; p++)
        hr_attn_store(pool, seq.blocks, layer, n_head_kv, hd, (int32_t)p, k + p * kv_dim,
                      v + p * kv_dim);
    /* Quantize-on-write: the bytes are the quantizers' (Q8_0: ggml-cpu's x86
     * from_float; Q4_0: the reference). */
    for (uint32_t p = 0; p < n_pos; p += 13)
        for (uint32_t h = 0; h < n_head_kv; h++) {
            const float *src = k + p * kv_dim + h * hd;
            if (type == HR_GGML_Q8_0)
                hr_quantize_row_q8_0_act(src, (struct hr_block_q8_0 *)row, hd);
            else
                hr_quantize_row_q4_0(src, (struct hr_block_q4_0 *)row, hd);
            const uint8_t *at = (const uint8_t *)hr_kv_block_k(pool, seq.blocks[p / bt], layer) +
                                h * hr_kv_head_bytes(pool) + (p % bt) * rb;
            assert_memory_equal(at, row, rb);
        }

    const uint32_t nq = hr_attn_block_tokens(group) > 3 ? 3 : hr_attn_block_tokens(group);
    const int32_t pos0 = (int32_t)n_pos - (int32_t)nq;
    const size_t q_stride = (size_t)n_head_kv * group * hd;
    float *q = malloc(nq * q_stride * sizeof(float)), *out = calloc(nq * q_stride, sizeof(float));
    for (size_t i = 0; i < nq * q_stride; i++)
        q[i] = frand(&rs);
    void *scr = aligned_alloc(64, (hr_attn_scratch_bytes(type, hd, group) + 63) / 64 * 64);
    const float scale = 1.0f / sqrtf((float)hd);
    struct hr_attn_ctx ac = {.kv = pool, .blocks = seq.blocks, .layer = layer, .head_dim = hd,
                             .block_tokens = bt, .group = group, .scale = scale};
    double *w = malloc(n_pos * sizeof(double)), *ref = malloc(hd * sizeof(double));
    float *vrow = malloc(hd * sizeof(float));
    double max_err = 0;
    for (uint32_t g = 0; g < n_head_kv; g++) {
        hr_attention(&ac, g, q + (size_t)g * group * hd, q_stride, pos0, nq,
                     out + (size_t)g * group * hd, q_stride, scr);
        for (uint32_t t = 0; t < nq; t++)
            for (uint32_t h = 0; h < group; h++) {
                const float *qr = q + t * q_stride + ((size_t)g * group + h) * hd;
                const uint32_t n_keys = (uint32_t)pos0 + t + 1;
                double mx = -INFINITY, sum = 0;
                for (uint32_t p = 0; p < n_keys; p++) {
                    const uint8_t *kr = (const uint8_t *)hr_kv_block_k(pool, seq.blocks[p / bt], layer) +
                                        g * hr_kv_head_bytes(pool) + (p % bt) * rb;
                    w[p] = (double)(hr_attn_score_ref(type, kr, qr, hd) * scale);
                    mx = w[p] > mx ? w[p] : mx;
                }
                memset(ref, 0, hd * sizeof(double));
                for (uint32_t p = 0; p < n_keys; p++) {
                    w[p] = exp(w[p] - mx);
                    sum += w[p];
                    const uint8_t *vr = (const uint8_t *)hr_kv_block_v(pool, seq.blocks[p / bt], layer) +
                                        g * hr_kv_head_bytes(pool) + (p % bt) * rb;
                    assert_int_equal(hr_dequantize_row(type, vr, vrow, hd), 0);
                    for (uint32_t i = 0; i < hd; i++)
                        ref[i] += w[p] * vrow[i];
                }
                const float *o = out + t * q_stride + ((size_t)g * group + h) * hd;
                for (uint32_t i = 0; i < hd; i++) {
                    double e = fabs(o[i] - ref[i] / sum);
                    max_err = e > max_err ? e : max_err;
                }
            }
    }
    print_message("  %s head_dim %u group %u: max |out - ref| %.2e\n", hr_kv_type_name(type), hd,
                  group, max_err);
    assert_true(max_err < 2e-6);
    free(w);
    free(ref);
    free(vrow);
    free(scr);
    free(q);
    free(out);
    free(k);
    free(v);
    free(row);
    hr_kv_seq_free(&seq, pool);
    hr_kv_pool_free(pool);
}

/* hr_attn_rotate against the dense normalized Sylvester-Hadamard matrix (the
 * matrix llama.cpp builds, ggml_gen_hadamard), in double; applying it twice
 * gives the input back. Chunk sizes as the engine picks them. */
static void test_rotation(void **state)
{
    (void)state;
    assert_int_equal(hr_attn_rot_k_dim(HR_GGML_Q8_0, 128), 128);
    assert_int_equal(hr_attn_rot_k_dim(HR_GGML_Q4_0, 192), 64);
    assert_int_equal(hr_attn_rot_k_dim(HR_GGML_Q8_0, 96), 0);
    assert_int_equal(hr_attn_rot_k_dim(HR_GGML_F16, 128), 0);
    assert_int_equal(hr_attn_rot_v_dim(HR_GGML_Q8_0, 128), 64);
    assert_int_equal(hr_attn_rot_v_dim(HR_GGML_F32, 128), 0);
    const uint32_t sizes[] = {64, 128, 256};
    uint32_t rs = 99;
    for (size_t si = 0; si < 3; si++) {
        const uint32_t n = sizes[si];
        float x[256], y[256];
        for (uint32_t i = 0; i < n; i++)
            x[i] = y[i] = frand(&rs) * 3.0f;
        hr_attn_rotate(y, n);
        double max_err = 0;
        for (uint32_t r = 0; r < n; r++) {
            double acc = 0;
            for (uint32_t c = 0; c < n; c++) /* H[r][c] = (-1)^popcount(r & c) / sqrt(n) */
                acc += (__builtin_popcount(r & c) & 1 ? -1.0 : 1.0) * x[c];
            acc /= sqrt((double)n);
            max_err = fmax(max_err, fabs(acc - y[r]));
        }
        assert_true(max_err < 1e-5);
        hr_attn_rotate(y, n);
        for (uint32_t i = 0; i < n; i++)
            assert_true(fabsf(y[i] - x[i]) < 1e-5f);
    }
}

static void test_quant_attention(void **state)
{
    (void)state;
    const enum hr_ggml_type types[] = {HR_GGML_Q8_0, HR_GGML_Q4_0};
    for (size_t i = 0; i < 2; i++) {
        check_quant_attention(types[i], 64, 2);
        check_quant_attention(types[i], 128, 1);
        check_quant_attention(types[i], 128, 7);
    }
}

static void work(void *ctx, int ith, int nth)
{
    struct pool_ctx *c = ctx;
    atomic_fetch_add(&c->hits[ith], 1);
    for (int round = 0; round < 50; round++) {
        atomic_fetch_add(&c->stage, 1);
        hr_pool_barrier(c->pool);
        /* Everyone incremented before anyone passed the barrier. */
        if (atomic_load(&c->stage) < (round + 1) * nth)
            atomic_fetch_add(&c->phase_errors, 1);
        hr_pool_barrier(c->pool);
    }
}

static void test_threadpool(void **state)
{
    (void)state;
    for (int n = 1; n <= 4; n++) {
        struct pool_ctx c = {0};
        struct hr_err err = {{0}};
        assert_int_equal(hr_pool_init(n, &c.pool, &err), HR_OK);
        assert_int_equal(hr_pool_size(c.pool), n);
        for (int run = 0; run < 20; run++) {
            atomic_store(&c.stage, 0);
            hr_pool_run(c.pool, work, &c);
        }
        for (int i = 0; i < n; i++)
            assert_int_equal(atomic_load(&c.hits[i]), 20);
        assert_int_equal(atomic_load(&c.phase_errors), 0);
        hr_pool_free(c.pool);
    }
    struct hr_pool *p = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_pool_init(0, &p, &err), HR_ERR_RANGE);
    assert_true(hr_physical_cores() >= 1);
}

/* A pool with a window: both tables grow together; after every step the
 * windowed table keeps only [first, n) and gives the rest back; the blocks
 * held never exceed hr_kv_blocks_for, and reach it (the bound is exact). */
static void test_window_slide(void **state)
{
    (void)state;
    const uint32_t bt = 32, window = 128;
    struct hr_kv_config c = {.n_layer = 2, .n_head_kv = 2, .head_dim = 64, .block_tokens = bt,
                             .type = HR_GGML_F16, .window = window};
    c.budget_bytes = 200 * hr_kv_block_bytes_for(&c);
    struct hr_kv_pool *p = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_OK);
    assert_int_equal(hr_kv_window(p), window);
    /* Decoding holds ceil(window / B) + 1 windowed blocks at most. */
    assert_int_equal(hr_kv_window_max_blocks(p, 1), window / bt + 1);
    /* The first block kept: the query at the last block boundary's window,
     * 32-aligned. */
    assert_int_equal(hr_kv_window_first_block(window, 127, bt), 0);
    assert_int_equal(hr_kv_window_first_block(window, 160, bt), 1); /* keys 33.. -> 32.. */
    assert_int_equal(hr_kv_window_first_block(window, 191, bt), 1);
    assert_int_equal(hr_kv_window_first_block(window, 4096, bt), 124);
    assert_int_equal(hr_kv_window_first_block(0, 4096, bt), 0);

    const uint32_t steps[] = {1, 7, 64, 31, 1, 1, 100, 33, 1, 5, 200, 1, 1, 1};
    for (uint32_t chunk_max = 1; chunk_max <= 64; chunk_max *= 64) {
        struct hr_kv_seq s;
        assert_int_equal(hr_kv_seq_init(&s, 4096, bt, &err), HR_OK);
        uint32_t most = 0, step_most = 0;
        for (uint32_t i = 0; s.n_tokens < 1200; i++) {
            uint32_t n = steps[i % (sizeof(steps) / sizeof(steps[0]))];
            if (n > chunk_max)
                n = chunk_max;
            const uint32_t before = hr_kv_n_used(p), need = hr_kv_seq_new_blocks(&s, p, n);
            assert_int_equal(hr_kv_seq_reserve(&s, p, n, &err), HR_OK);
            assert_int_equal(hr_kv_n_used(p), before + need);
            assert_int_equal(hr_kv_seq_held_blocks(&s), hr_kv_n_used(p));
            /* What a step holds is within the bound for its size and length. */
            const uint32_t end = s.n_tokens + n;
            assert_true(hr_kv_seq_held_blocks(&s) <= hr_kv_blocks_for(p, end, n));
            if (hr_kv_seq_held_blocks(&s) - s.n_blocks > step_most)
                step_most = hr_kv_seq_held_blocks(&s) - s.n_blocks;
            s.n_tokens = end;
            const uint32_t first = hr_kv_window_first_block(window, s.n_tokens, bt);
            const uint32_t released = hr_kv_seq_slide(&s, p);
            assert_int_equal(s.w_first, first);
            assert_int_equal(hr_kv_n_used(p), before + need - released);
            for (uint32_t b = 0; b < first; b++)
                assert_int_equal(s.wblocks[b], -1);
            for (uint32_t b = first; b < s.n_wblocks; b++)
                assert_true(s.wblocks[b] >= 0 && hr_kv_refcount(p, s.wblocks[b]) == 1);
            assert_int_equal(s.n_wblocks, s.n_blocks);
            if (hr_kv_seq_held_blocks(&s) > most)
                most = hr_kv_seq_held_blocks(&s);
        }
        /* Full blocks: all of them; windowed: never more than the bound,
         * which decoding reaches. */
        assert_int_equal(s.n_blocks, (s.n_tokens + bt - 1) / bt);
        assert_true(step_most <= hr_kv_window_max_blocks(p, chunk_max));
        if (chunk_max == 1)
            assert_int_equal(step_most, hr_kv_window_max_blocks(p, 1));
        assert_int_equal(hr_kv_n_used_peak(p) >= most, true);
        hr_kv_seq_free(&s, p);
        assert_int_equal(hr_kv_n_used(p), 0);
    }
    /* The whole pool: a sequence of hr_kv_pool_max_tokens fits, one more block does not. */
    const uint64_t m = hr_kv_pool_max_tokens(p, 1);
    assert_true(hr_kv_blocks_for(p, (uint32_t)m, 1) <= hr_kv_n_blocks(p));
    assert_true(hr_kv_blocks_for(p, (uint32_t)m + bt, 1) > hr_kv_n_blocks(p));
    /* Monotone in the length and the step, as admission's bisection needs. */
    for (uint32_t n = 1; n < 2000; n++) {
        assert_true(hr_kv_blocks_for(p, n, 1) <= hr_kv_blocks_for(p, n + 1, 1));
        assert_true(hr_kv_blocks_for(p, n, 1) <= hr_kv_blocks_for(p, n, 64));
    }
    /* A pool without a window: one table, nothing slides. */
    struct hr_kv_pool *q = pool_of(8);
    struct hr_kv_seq s;
    assert_int_equal(hr_kv_seq_init(&s, 256, bt, &err), HR_OK);
    assert_int_equal(hr_kv_seq_reserve(&s, q, 200, &err), HR_OK);
    s.n_tokens = 200;
    assert_int_equal(hr_kv_seq_slide(&s, q), 0);
    assert_int_equal(s.n_wblocks, 0);
    assert_int_equal(hr_kv_n_used(q), 7);
    assert_int_equal(hr_kv_blocks_for(q, 200, 64), 7);
    hr_kv_seq_free(&s, q);
    hr_kv_pool_free(q);
    hr_kv_pool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_and_refcounts),
        cmocka_unit_test(test_seq_reserve),
        cmocka_unit_test(test_budget_too_small),
        cmocka_unit_test(test_usable_limit),
        cmocka_unit_test(test_threadpool),
        cmocka_unit_test(test_cache_types),
        cmocka_unit_test(test_quant_attention),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_window_slide),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
