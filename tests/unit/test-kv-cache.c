/*
 * test-kv-cache.c - the paged KV pool and block tables: allocation order,
 * refcounts, exhaustion without partial effects, trim, table capacity, and
 * the threadpool the engine runs on (dispatch, barriers, reuse).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/kv-cache.h"
#include "engine/threadpool.h"

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

static void test_budget_too_small(void **state)
{
    (void)state;
    struct hr_kv_config c = {.n_layer = 2, .n_head_kv = 2, .head_dim = 64, .type = HR_GGML_F16,
                             .budget_bytes = 100};
    struct hr_kv_pool *p = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_ERR_RANGE);
    assert_non_null(strstr(err.msg, "holds no block"));
    c.type = HR_GGML_Q8_0;
    assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_ERR_UNSUPPORTED);
}

struct pool_ctx {
    struct hr_pool *pool;
    _Atomic int hits[8];
    _Atomic int phase_errors;
    _Atomic int stage;
};

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_and_refcounts),
        cmocka_unit_test(test_seq_reserve),
        cmocka_unit_test(test_budget_too_small),
        cmocka_unit_test(test_threadpool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
