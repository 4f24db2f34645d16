/*
 * test-prefix-cache.c - the prefix cache over a real KV pool: hash chaining,
 * references taken by lookups, full blocks only, idempotent inserts, LRU
 * order (leaves first), referenced blocks never evicted, a full table,
 * hash collisions, freeing, statistics, recurrent state snapshots (hybrid
 * models: lookups end on a snapshot, LRU among snapshots, eviction with
 * their block), and a randomized run that checks every invariant against a
 * shadow model after each operation; windowed pools: an entry carries the
 * window of where a sequence ended, a hit stops at the deepest such entry
 * and restores the window, eviction returns it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rand.h"
#include "engine/kv-cache.h"
#include "engine/prefix-cache.h"

#define BT 16 /* block tokens in every test */

static struct hr_kv_pool *pool_of(uint32_t n_blocks)
{
    struct hr_kv_config c = {
        .n_layer = 1, .n_head_kv = 1, .head_dim = 16, .block_tokens = BT, .type = HR_GGML_F16};
    c.budget_bytes = n_blocks * hr_kv_block_bytes_for(&c);
    struct hr_kv_pool *p = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_pool_init(&c, &p, &err), HR_OK);
    assert_int_equal(hr_kv_n_blocks(p), n_blocks);
    return p;
}

static struct hr_pcache *cache_of(struct hr_kv_pool *pool, uint32_t max_entries)
{
    struct hr_pcache *pc = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_pcache_init(pool, 0x1234abcdull, max_entries, &pc, &err), HR_OK);
    return pc;
}

static void check(const struct hr_pcache *pc)
{
    struct hr_err err = {{0}};
    enum hr_status st = hr_pcache_check(pc, &err);
    if (st != HR_OK) fail_msg("prefix cache invariant: %s", err.msg);
}

/* Fills block k of `t` (BT tokens) with a pattern named by `v`. */
static void fill_block(int32_t *t, uint32_t k, int32_t v)
{
    for (uint32_t i = 0; i < BT; i++) t[k * BT + i] = v * 1000 + (int32_t)i;
}

/* A sequence that computed all n tokens itself (no lookup): fresh blocks. */
static void seq_compute(struct hr_kv_seq *s, struct hr_kv_pool *pool, uint32_t n)
{
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_seq_init(s, 256, BT, &err), HR_OK);
    assert_int_equal(hr_kv_seq_reserve(s, pool, n, &err), HR_OK);
    s->n_tokens = n;
}

/* A sequence that starts from the cache, then computes the rest. */
static uint32_t seq_prefill(struct hr_kv_seq *s, struct hr_pcache *pc, struct hr_kv_pool *pool,
                            const int32_t *t, uint32_t n)
{
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_seq_init(s, 256, BT, &err), HR_OK);
    uint32_t k = hr_pcache_lookup(pc, t, n, (n - 1) / BT, s->blocks);
    s->n_blocks = k;
    s->n_tokens = k * BT;
    assert_int_equal(hr_kv_seq_reserve(s, pool, n - s->n_tokens, &err), HR_OK);
    s->n_tokens = n;
    return k;
}

static void test_init_and_free(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(4);
    struct hr_pcache *pc = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_pcache_init(pool, 1, 0, &pc, &err), HR_ERR_INVALID);
    assert_null(pc);
    assert_non_null(strstr(err.msg, "0 entries"));
    /* More entries than the pool has blocks: clamped, still works. */
    pc = cache_of(pool, 1000);
    assert_int_equal(hr_pcache_n_entries(pc), 0);
    assert_int_equal(hr_pcache_n_evictable(pc), 0);
    check(pc);
    hr_pcache_free(pc);
    hr_pcache_free(NULL);
    hr_kv_pool_free(pool);
}

static void test_hash_chaining(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(16);
    struct hr_pcache *pc = cache_of(pool, 16);
    int32_t t[4 * BT], q[4 * BT];
    fill_block(t, 0, 1);
    fill_block(t, 1, 2);
    fill_block(t, 2, 3);
    struct hr_kv_seq s;
    seq_compute(&s, pool, 3 * BT);
    assert_int_equal(hr_pcache_insert(pc, t, 3, s.blocks), 3);
    check(pc);
    assert_int_equal(hr_pcache_peek(pc, t, 3 * BT), 3);

    /* The same tokens at another position do not match: blocks 2, 3 at 0, 1. */
    memcpy(q, t + BT, 2 * BT * sizeof(int32_t));
    assert_int_equal(hr_pcache_peek(pc, q, 2 * BT), 0);
    /* Block 1's tokens at position 1 after another block 0: no match. */
    memcpy(q, t, 3 * BT * sizeof(int32_t));
    q[5] ^= 1;
    assert_int_equal(hr_pcache_peek(pc, q, 3 * BT), 0);
    /* A change in block k leaves exactly blocks 0..k-1 matching. */
    for (uint32_t k = 0; k < 3; k++) {
        memcpy(q, t, 3 * BT * sizeof(int32_t));
        q[k * BT + BT - 1] += 7;
        assert_int_equal(hr_pcache_peek(pc, q, 3 * BT), k);
    }
    /* A cache with another model fingerprint over the same tokens: nothing
     * shared (its hashes differ, and it indexes its own entries). */
    struct hr_pcache *other = NULL;
    assert_int_equal(hr_pcache_init(pool, 0x1234abceull, 16, &other, NULL), HR_OK);
    assert_int_equal(hr_pcache_peek(other, t, 3 * BT), 0);
    hr_pcache_free(other);

    hr_kv_seq_free(&s, pool);
    hr_pcache_free(pc);
    assert_int_equal(hr_kv_n_free(pool), 16);
    hr_kv_pool_free(pool);
}

static void test_lookup_takes_references(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(16);
    struct hr_pcache *pc = cache_of(pool, 16);
    int32_t t[4 * BT];
    for (uint32_t k = 0; k < 4; k++) fill_block(t, k, (int32_t)k + 10);
    struct hr_kv_seq a, b, c;
    seq_compute(&a, pool, 3 * BT);
    assert_int_equal(hr_pcache_insert(pc, t, 3, a.blocks), 3);
    for (uint32_t k = 0; k < 3; k++) assert_int_equal(hr_kv_refcount(pool, a.blocks[k]), 2);
    assert_int_equal(hr_pcache_n_evictable(pc), 0);
    hr_pcache_release_seq(pc, &a);
    assert_int_equal(a.n_blocks, 0);
    assert_int_equal(hr_pcache_n_evictable(pc), 3);
    check(pc);

    /* The longest prefix: 4 blocks asked, 3 cached. */
    int32_t out[4];
    assert_int_equal(hr_kv_seq_init(&b, 256, BT, NULL), HR_OK);
    assert_int_equal(hr_pcache_lookup(pc, t, 4 * BT, 4, out), 3);
    for (uint32_t k = 0; k < 3; k++) {
        assert_int_equal(out[k], a.blocks[k]); /* the table still holds the old ids */
        assert_int_equal(hr_kv_refcount(pool, out[k]), 2);
        b.blocks[b.n_blocks++] = out[k];
    }
    assert_int_equal(hr_pcache_n_evictable(pc), 0);
    /* max_blocks caps the walk. */
    assert_int_equal(hr_kv_seq_init(&c, 256, BT, NULL), HR_OK);
    assert_int_equal(hr_pcache_lookup(pc, t, 4 * BT, 1, c.blocks), 1);
    c.n_blocks = 1;
    assert_int_equal(hr_kv_refcount(pool, out[0]), 3);
    assert_int_equal(hr_kv_refcount(pool, out[1]), 2);
    check(pc);
    /* Releases: the blocks become evictable when only the cache holds them. */
    hr_pcache_release_seq(pc, &b);
    assert_int_equal(hr_pcache_n_evictable(pc), 2);
    hr_pcache_release_seq(pc, &c);
    assert_int_equal(hr_pcache_n_evictable(pc), 3);
    check(pc);
    hr_kv_seq_free(&a, pool);
    hr_kv_seq_free(&b, pool);
    hr_kv_seq_free(&c, pool);
    assert_int_equal(hr_kv_n_free(pool), 13);
    hr_pcache_free(pc);
    assert_int_equal(hr_kv_n_free(pool), 16);
    hr_kv_pool_free(pool);
}

static void test_full_blocks_only(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(16);
    struct hr_pcache *pc = cache_of(pool, 16);
    int32_t t[4 * BT];
    for (uint32_t k = 0; k < 4; k++) fill_block(t, k, (int32_t)k + 20);
    /* 40 tokens: two full blocks and a partial one, which is not indexed. */
    struct hr_kv_seq a;
    seq_compute(&a, pool, 2 * BT + 8);
    assert_int_equal(a.n_blocks, 3);
    assert_int_equal(hr_pcache_insert(pc, t, a.n_tokens / BT, a.blocks), 2);
    assert_false(hr_pcache_has_block(pc, a.blocks[2]));
    /* A query matches full blocks only, however many tokens follow. */
    assert_int_equal(hr_pcache_peek(pc, t, 2 * BT + 8), 2);
    assert_int_equal(hr_pcache_peek(pc, t, 3 * BT), 2);
    assert_int_equal(hr_pcache_peek(pc, t, 2 * BT - 1), 1);
    assert_int_equal(hr_pcache_peek(pc, t, BT - 1), 0);
    assert_int_equal(hr_pcache_peek(pc, t, 0), 0);
    int32_t out[4];
    assert_int_equal(hr_pcache_lookup(pc, t, BT - 1, 4, out), 0);
    /* A prompt of exactly two blocks keeps its last token to compute. */
    struct hr_kv_seq b;
    assert_int_equal(seq_prefill(&b, pc, pool, t, 2 * BT), 1);
    assert_int_equal(hr_pcache_insert(pc, t, 0, a.blocks), 0);
    hr_pcache_release_seq(pc, &a);
    hr_pcache_release_seq(pc, &b);
    check(pc);
    hr_kv_seq_free(&a, pool);
    hr_kv_seq_free(&b, pool);
    hr_pcache_free(pc);
    assert_int_equal(hr_kv_n_free(pool), 16);
    hr_kv_pool_free(pool);
}

static void test_insert_idempotent(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(16);
    struct hr_pcache *pc = cache_of(pool, 16);
    int32_t t[4 * BT];
    for (uint32_t k = 0; k < 4; k++) fill_block(t, k, (int32_t)k + 30);
    struct hr_kv_seq a, b;
    seq_compute(&a, pool, 2 * BT);
    assert_int_equal(hr_pcache_insert(pc, t, 2, a.blocks), 2);
    assert_int_equal(hr_pcache_insert(pc, t, 2, a.blocks), 0);
    assert_int_equal(hr_pcache_n_entries(pc), 2);
    assert_int_equal(hr_kv_refcount(pool, a.blocks[0]), 2);
    assert_int_equal(hr_kv_refcount(pool, a.blocks[1]), 2);

    /* Another sequence computed the same two blocks and one more in its own
     * blocks: the cached ones stay, only the third is added, and it chains
     * from the cached entries. */
    seq_compute(&b, pool, 3 * BT);
    assert_int_equal(hr_pcache_insert(pc, t, 3, b.blocks), 1);
    assert_false(hr_pcache_has_block(pc, b.blocks[0]));
    assert_false(hr_pcache_has_block(pc, b.blocks[1]));
    assert_true(hr_pcache_has_block(pc, b.blocks[2]));
    assert_int_equal(hr_kv_refcount(pool, b.blocks[0]), 1);
    int32_t out[3];
    assert_int_equal(hr_pcache_lookup(pc, t, 3 * BT, 3, out), 3);
    assert_int_equal(out[0], a.blocks[0]);
    assert_int_equal(out[1], a.blocks[1]);
    assert_int_equal(out[2], b.blocks[2]);
    hr_pcache_release_blocks(pc, out, 3);
    check(pc);
    hr_pcache_release_seq(pc, &a);
    hr_pcache_release_seq(pc, &b);
    assert_int_equal(hr_pcache_n_evictable(pc), 3);
    assert_int_equal(hr_kv_n_free(pool), 13);
    check(pc);
    hr_kv_seq_free(&a, pool);
    hr_kv_seq_free(&b, pool);
    hr_pcache_free(pc);
    hr_kv_pool_free(pool);
}

static void test_lru_order(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(16);
    struct hr_pcache *pc = cache_of(pool, 16);
    /* Three two-block chains A, B, C, cached and released in that order,
     * then A used again: least recent is B, and within a chain the leaf. */
    int32_t t[3][2 * BT];
    struct hr_kv_seq s[3];
    for (uint32_t c = 0; c < 3; c++) {
        fill_block(t[c], 0, 100 + (int32_t)c);
        fill_block(t[c], 1, 200 + (int32_t)c);
        seq_compute(&s[c], pool, 2 * BT);
        assert_int_equal(hr_pcache_insert(pc, t[c], 2, s[c].blocks), 2);
    }
    int32_t blk[3][2];
    for (uint32_t c = 0; c < 3; c++) {
        blk[c][0] = s[c].blocks[0];
        blk[c][1] = s[c].blocks[1];
        hr_pcache_release_seq(pc, &s[c]);
    }
    assert_int_equal(hr_pcache_n_evictable(pc), 6);
    struct hr_kv_seq again;
    assert_int_equal(hr_kv_seq_init(&again, 256, BT, NULL), HR_OK);
    assert_int_equal(hr_pcache_lookup(pc, t[0], 2 * BT, 2, again.blocks), 2);
    again.n_blocks = 2;
    hr_pcache_release_seq(pc, &again);
    check(pc);

    const int32_t order[6] = {blk[1][1], blk[1][0], blk[2][1], blk[2][0], blk[0][1], blk[0][0]};
    for (uint32_t i = 0; i < 6; i++) {
        uint32_t free_before = hr_kv_n_free(pool);
        assert_true(hr_pcache_has_block(pc, order[i]));
        assert_int_equal(hr_pcache_evict(pc, 1), 1);
        assert_false(hr_pcache_has_block(pc, order[i]));
        assert_int_equal(hr_kv_refcount(pool, order[i]), 0);
        assert_int_equal(hr_kv_n_free(pool), free_before + 1);
        assert_int_equal(hr_pcache_n_evictable(pc), 5 - i);
        check(pc);
    }
    assert_int_equal(hr_pcache_evict(pc, 1), 0);
    assert_int_equal(hr_kv_n_free(pool), 16);

    /* A child that becomes evictable after its parent still goes first: P
     * caches [p0] and finishes; Q computed [p0 p1] in its own blocks, so its
     * p1 chains from P's p0, and is released last. */
    struct hr_kv_seq p, q;
    seq_compute(&p, pool, BT);
    assert_int_equal(hr_pcache_insert(pc, t[0], 1, p.blocks), 1);
    int32_t p0 = p.blocks[0];
    hr_pcache_release_seq(pc, &p);
    seq_compute(&q, pool, 2 * BT);
    int32_t q1 = q.blocks[1];
    assert_int_equal(hr_pcache_insert(pc, t[0], 2, q.blocks), 1);
    hr_pcache_release_seq(pc, &q);
    assert_int_equal(hr_pcache_n_evictable(pc), 2);
    check(pc);
    assert_int_equal(hr_pcache_evict(pc, 1), 1);
    assert_false(hr_pcache_has_block(pc, q1));
    assert_true(hr_pcache_has_block(pc, p0));
    assert_int_equal(hr_pcache_evict(pc, 1), 1);
    assert_int_equal(hr_kv_n_free(pool), 16);
    hr_kv_seq_free(&p, pool);
    hr_kv_seq_free(&q, pool);
    for (uint32_t c = 0; c < 3; c++) hr_kv_seq_free(&s[c], pool);
    hr_kv_seq_free(&again, pool);
    hr_pcache_free(pc);
    hr_kv_pool_free(pool);
}

static void test_no_eviction_of_referenced(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(16);
    struct hr_pcache *pc = cache_of(pool, 16);
    int32_t t[2][2 * BT];
    struct hr_kv_seq a, b;
    for (uint32_t c = 0; c < 2; c++) {
        fill_block(t[c], 0, 300 + (int32_t)c);
        fill_block(t[c], 1, 400 + (int32_t)c);
    }
    seq_compute(&a, pool, 2 * BT);
    seq_compute(&b, pool, 2 * BT);
    assert_int_equal(hr_pcache_insert(pc, t[0], 2, a.blocks), 2);
    assert_int_equal(hr_pcache_insert(pc, t[1], 2, b.blocks), 2);
    /* Both running: nothing evictable. */
    assert_int_equal(hr_pcache_evict(pc, 10), 0);
    assert_int_equal(hr_pcache_n_entries(pc), 4);
    /* B finishes: only its blocks go, A's stay with refcount 2. */
    hr_pcache_release_seq(pc, &b);
    assert_int_equal(hr_pcache_evict(pc, 10), 2);
    assert_int_equal(hr_kv_refcount(pool, a.blocks[0]), 2);
    assert_int_equal(hr_kv_refcount(pool, a.blocks[1]), 2);
    assert_int_equal(hr_kv_n_free(pool), 14);
    check(pc);

    /* A reference taken behind the cache's back (not through lookup) still
     * protects the block: evict re-reads the refcount and skips it. */
    int32_t a0 = a.blocks[0], a1 = a.blocks[1];
    hr_pcache_release_seq(pc, &a);
    assert_int_equal(hr_pcache_n_evictable(pc), 2);
    hr_kv_ref_block(pool, a1);
    assert_int_equal(hr_pcache_evict(pc, 10), 1); /* a1 is skipped, a0 goes */
    assert_false(hr_pcache_has_block(pc, a0));
    assert_true(hr_pcache_has_block(pc, a1));
    assert_int_equal(hr_kv_refcount(pool, a1), 2);
    assert_int_equal(hr_pcache_n_evictable(pc), 0);
    check(pc);
    hr_pcache_release_blocks(pc, &a1, 1);
    assert_int_equal(hr_pcache_n_evictable(pc), 1);
    assert_int_equal(hr_pcache_evict(pc, 10), 1);
    assert_int_equal(hr_kv_n_free(pool), 16);
    hr_kv_seq_free(&a, pool);
    hr_kv_seq_free(&b, pool);
    hr_pcache_free(pc);
    hr_kv_pool_free(pool);
}

static void test_table_full(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(16);
    struct hr_pcache *pc = cache_of(pool, 2);
    int32_t t[4][3 * BT];
    for (uint32_t c = 0; c < 4; c++)
        for (uint32_t k = 0; k < 3; k++) fill_block(t[c], k, 500 + 10 * (int32_t)c + (int32_t)k);
    struct hr_kv_seq s[4];
    for (uint32_t c = 0; c < 4; c++) seq_compute(&s[c], pool, BT);

    /* A and B fill the table and finish; C's insert evicts A, the least recent. */
    int32_t a0 = s[0].blocks[0], b0 = s[1].blocks[0];
    assert_int_equal(hr_pcache_insert(pc, t[0], 1, s[0].blocks), 1);
    assert_int_equal(hr_pcache_insert(pc, t[1], 1, s[1].blocks), 1);
    hr_pcache_release_seq(pc, &s[0]);
    hr_pcache_release_seq(pc, &s[1]);
    uint32_t free_before = hr_kv_n_free(pool);
    assert_int_equal(hr_pcache_insert(pc, t[2], 1, s[2].blocks), 1);
    assert_false(hr_pcache_has_block(pc, a0));
    assert_true(hr_pcache_has_block(pc, b0));
    assert_int_equal(hr_kv_n_free(pool), free_before + 1);
    assert_int_equal(hr_pcache_n_entries(pc), 2);
    check(pc);
    /* D's insert evicts B; then the table holds C and D, both running:
     * another insert stops without failing. */
    assert_int_equal(hr_pcache_insert(pc, t[3], 1, s[3].blocks), 1);
    assert_false(hr_pcache_has_block(pc, b0));
    struct hr_kv_seq e;
    seq_compute(&e, pool, 3 * BT);
    assert_int_equal(hr_pcache_insert(pc, t[0], 3, e.blocks), 0);
    assert_int_equal(hr_pcache_n_entries(pc), 2);
    assert_int_equal(hr_kv_refcount(pool, e.blocks[0]), 1);
    check(pc);

    /* An insert never evicts an entry it touched itself (that would orphan
     * what it adds next): C and D finish, E = C's block + 2 more, computed in
     * its own blocks. C's entry is touched, D is evicted for E's second
     * block, and the third finds only E's own chain: it stops. */
    hr_pcache_release_seq(pc, &s[2]);
    hr_pcache_release_seq(pc, &s[3]);
    int32_t f[3 * BT];
    memcpy(f, t[2], BT * sizeof(int32_t));
    fill_block(f, 1, 901);
    fill_block(f, 2, 902);
    assert_int_equal(hr_pcache_insert(pc, f, 3, e.blocks), 1);
    assert_int_equal(hr_pcache_n_entries(pc), 2);
    assert_int_equal(hr_pcache_peek(pc, f, 3 * BT), 2);
    assert_true(hr_pcache_has_block(pc, e.blocks[1]));
    assert_false(hr_pcache_has_block(pc, e.blocks[2]));
    check(pc);
    hr_pcache_release_seq(pc, &e);
    /* Now the table holds C (evictable) and E's block 1 (evictable): a
     * chain whose parents are all evictable, with the table full, gets no
     * further than its own walk allows. */
    struct hr_kv_seq g;
    seq_compute(&g, pool, 3 * BT);
    assert_int_equal(hr_pcache_insert(pc, f, 3, g.blocks), 0);
    assert_int_equal(hr_pcache_peek(pc, f, 3 * BT), 2);
    check(pc);
    hr_pcache_release_seq(pc, &g);
    for (uint32_t c = 0; c < 4; c++) hr_kv_seq_free(&s[c], pool);
    hr_kv_seq_free(&e, pool);
    hr_kv_seq_free(&g, pool);
    hr_pcache_free(pc);
    assert_int_equal(hr_kv_n_free(pool), 16);
    hr_kv_pool_free(pool);
}

static void test_collisions(void **state)
{
    (void)state;
    /* Every hash the same (0 bits) and 4 entries in one bucket: only the
     * token and parent comparisons tell entries apart. */
    struct hr_kv_pool *pool = pool_of(16);
    struct hr_pcache *pc = cache_of(pool, 4);
    hr_pcache_test_set_hash_bits(pc, 0);
    int32_t x[2 * BT], y[2 * BT], q[2 * BT];
    fill_block(x, 0, 1);
    fill_block(x, 1, 2); /* X = [1 2] */
    fill_block(y, 0, 2);
    fill_block(y, 1, 1); /* Y = [2 1] */
    struct hr_kv_seq a, b;
    seq_compute(&a, pool, 2 * BT);
    seq_compute(&b, pool, 2 * BT);
    assert_int_equal(hr_pcache_insert(pc, x, 2, a.blocks), 2);
    assert_int_equal(hr_pcache_insert(pc, y, 2, b.blocks), 2);
    assert_int_equal(hr_pcache_n_entries(pc), 4);
    check(pc);
    int32_t out[2];
    assert_int_equal(hr_pcache_lookup(pc, x, 2 * BT, 2, out), 2);
    assert_int_equal(out[0], a.blocks[0]);
    assert_int_equal(out[1], a.blocks[1]);
    hr_pcache_release_blocks(pc, out, 2);
    assert_int_equal(hr_pcache_lookup(pc, y, 2 * BT, 2, out), 2);
    assert_int_equal(out[0], b.blocks[0]);
    assert_int_equal(out[1], b.blocks[1]);
    hr_pcache_release_blocks(pc, out, 2);
    /* [1 1]: block 1's tokens equal Y's second block, but its parent differs. */
    fill_block(q, 0, 1);
    fill_block(q, 1, 1);
    assert_int_equal(hr_pcache_peek(pc, q, 2 * BT), 1);
    /* [2 2]: same, the other way. */
    fill_block(q, 0, 2);
    fill_block(q, 1, 2);
    assert_int_equal(hr_pcache_peek(pc, q, 2 * BT), 1);
    /* One token off in block 0. */
    memcpy(q, x, sizeof(q));
    q[BT - 1]++;
    assert_int_equal(hr_pcache_peek(pc, q, 2 * BT), 0);
    /* Evicting from a long bucket chain keeps the others reachable. */
    hr_pcache_release_seq(pc, &a);
    assert_int_equal(hr_pcache_evict(pc, 1), 1); /* X's leaf */
    assert_int_equal(hr_pcache_peek(pc, x, 2 * BT), 1);
    assert_int_equal(hr_pcache_peek(pc, y, 2 * BT), 2);
    check(pc);
    hr_pcache_release_seq(pc, &b);
    hr_kv_seq_free(&a, pool);
    hr_kv_seq_free(&b, pool);
    hr_pcache_free(pc);
    assert_int_equal(hr_kv_n_free(pool), 16);
    hr_kv_pool_free(pool);
}

static void test_free_drops_every_reference(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(32);
    struct hr_pcache *pc = cache_of(pool, 32);
    int32_t t[4 * BT];
    for (uint32_t k = 0; k < 4; k++) fill_block(t, k, 700 + (int32_t)k);
    struct hr_kv_seq a, b;
    seq_compute(&a, pool, 4 * BT);
    assert_int_equal(hr_pcache_insert(pc, t, 4, a.blocks), 4);
    t[3 * BT] = -5;
    assert_int_equal(seq_prefill(&b, pc, pool, t, 4 * BT), 3);
    assert_int_equal(hr_pcache_insert(pc, t, 4, b.blocks), 1);
    /* The cache goes first while sequences still run: they keep their blocks. */
    hr_pcache_free(pc);
    assert_int_equal(hr_kv_refcount(pool, a.blocks[0]), 2);
    assert_int_equal(hr_kv_refcount(pool, a.blocks[3]), 1);
    hr_kv_seq_free(&a, pool);
    hr_kv_seq_free(&b, pool);
    assert_int_equal(hr_kv_n_free(pool), 32);
    hr_kv_pool_free(pool);
}

static void test_stats(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(16);
    struct hr_pcache *pc = cache_of(pool, 16);
    int32_t t[4 * BT];
    for (uint32_t k = 0; k < 4; k++) fill_block(t, k, 800 + (int32_t)k);
    struct hr_kv_seq a, b;
    seq_compute(&a, pool, 3 * BT + 3);
    assert_int_equal(hr_pcache_insert(pc, t, 3, a.blocks), 3);
    hr_pcache_release_seq(pc, &a);
    assert_int_equal(seq_prefill(&b, pc, pool, t, 4 * BT), 3); /* 64 looked up, 48 hit */
    hr_pcache_peek(pc, t, 4 * BT);                             /* not counted */
    assert_int_equal(hr_pcache_insert(pc, t, 4, b.blocks), 1);
    hr_pcache_release_seq(pc, &b);
    assert_int_equal(hr_pcache_evict(pc, 2), 2);
    struct hr_pcache_stats st;
    hr_pcache_stats(pc, &st);
    assert_int_equal(st.lookup_tokens, 4 * BT);
    assert_int_equal(st.hit_tokens, 3 * BT);
    assert_int_equal(st.inserted_blocks, 4);
    assert_int_equal(st.evicted_blocks, 2);
    hr_kv_seq_free(&a, pool);
    hr_kv_seq_free(&b, pool);
    hr_pcache_free(pc);
    hr_kv_pool_free(pool);
}

/* ---- recurrent state snapshots ------------------------------------------- */

#define SNAP_FLOATS 8

static void state_of(float *st, float v)
{
    for (uint32_t i = 0; i < SNAP_FLOATS; i++) st[i] = v + (float)i;
}

/* With snapshots, only a prefix that ends on a block with a snapshot is a
 * hit, and it comes with that state; a full snapshot pool gives up its
 * least recently used one; evicting a block drops its snapshot. */
static void test_snapshots(void **state)
{
    (void)state;
    struct hr_kv_pool *pool = pool_of(32);
    struct hr_pcache *pc = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_pcache_init_snapshots(pool, 0x1234abcdull, 32, 3, SNAP_FLOATS, &pc, &err),
                     HR_OK);
    assert_int_equal(hr_pcache_snapshot_slots(pc), 3);
    assert_int_equal(hr_pcache_snapshot_bytes(pc), SNAP_FLOATS * sizeof(float));
    int32_t t[4][5 * BT];
    for (int c = 0; c < 4; c++)
        for (uint32_t k = 0; k < 5; k++) fill_block(t[c], k, 100 * c + (int32_t)k);
    float st[SNAP_FLOATS];

    /* Chain 0: 4 blocks cached, no snapshot yet: nothing usable. */
    struct hr_kv_seq a, b;
    seq_compute(&a, pool, 4 * BT);
    assert_int_equal(hr_pcache_insert(pc, t[0], 4, a.blocks), 4);
    assert_int_equal(hr_pcache_peek(pc, t[0], 5 * BT), 0);
    /* Snapshots after blocks 2 and 4: the deepest one within reach wins. */
    state_of(st, 2.0f);
    assert_true(hr_pcache_save_snapshot(pc, t[0], 2, st));
    state_of(st, 4.0f);
    assert_true(hr_pcache_save_snapshot(pc, t[0], 4, st));
    state_of(st, 9.0f); /* the same tokens again: kept, not overwritten */
    assert_true(hr_pcache_save_snapshot(pc, t[0], 4, st));
    assert_int_equal(hr_pcache_n_snapshots(pc), 2);
    check(pc);
    assert_int_equal(hr_pcache_peek(pc, t[0], 5 * BT), 4);
    assert_int_equal(hr_pcache_peek(pc, t[0], 4 * BT - 1), 2);
    hr_pcache_release_seq(pc, &a);
    assert_int_equal(seq_prefill(&b, pc, pool, t[0], 3 * BT + 5), 2);
    const float *snap = hr_pcache_snapshot(pc, b.blocks[1]);
    assert_non_null(snap);
    state_of(st, 2.0f);
    assert_memory_equal(snap, st, sizeof(st));
    assert_null(hr_pcache_snapshot(pc, b.blocks[0])); /* block 1 has none */
    hr_pcache_release_seq(pc, &b);
    hr_kv_seq_free(&b, pool);
    check(pc);

    /* A prefix that is not cached takes no snapshot. */
    assert_false(hr_pcache_save_snapshot(pc, t[1], 1, st));

    /* Chain 1 fills the pool of 3; chain 0's block 2 is restored again;
     * then chains 2 and 3 each take the least recently used snapshot's
     * slot: chain 0's block 4, then chain 1's. */
    for (int c = 1; c <= 3; c++) {
        struct hr_kv_seq x;
        seq_compute(&x, pool, 2 * BT);
        assert_int_equal(hr_pcache_insert(pc, t[c], 2, x.blocks), 2);
        state_of(st, 10.0f * (float)c);
        assert_true(hr_pcache_save_snapshot(pc, t[c], 2, st));
        hr_pcache_release_seq(pc, &x);
        hr_kv_seq_free(&x, pool);
        if (c == 1) {
            assert_int_equal(seq_prefill(&b, pc, pool, t[0], 3 * BT), 2);
            assert_non_null(hr_pcache_snapshot(pc, b.blocks[1]));
            hr_pcache_release_seq(pc, &b);
            hr_kv_seq_free(&b, pool);
        }
        check(pc);
    }
    assert_int_equal(hr_pcache_n_snapshots(pc), 3);
    assert_int_equal(hr_pcache_peek(pc, t[0], 5 * BT), 2); /* block 4's snapshot is gone */
    assert_int_equal(hr_pcache_peek(pc, t[1], 5 * BT), 0); /* and chain 1's, older than 0's */
    assert_int_equal(hr_pcache_peek(pc, t[3], 5 * BT), 2);
    struct hr_pcache_stats ps;
    hr_pcache_stats(pc, &ps);
    assert_int_equal(ps.saved_snapshots, 5);
    assert_int_equal(ps.evicted_snapshots, 2);

    /* Under pressure: snapshots go on their own, or with their block. */
    assert_int_equal(hr_pcache_evict_snapshots(pc, 1), 1);
    assert_int_equal(hr_pcache_n_snapshots(pc), 2);
    check(pc);
    const uint32_t n_entries = hr_pcache_n_entries(pc);
    assert_int_equal(n_entries, 4 + 3 * 2);
    assert_int_equal(hr_pcache_evict(pc, 32), n_entries);
    assert_int_equal(hr_pcache_n_entries(pc), 0);
    assert_int_equal(hr_pcache_n_snapshots(pc), 0);
    assert_int_equal(hr_pcache_evict_snapshots(pc, 1), 0);
    check(pc);
    hr_kv_seq_free(&a, pool);
    hr_pcache_free(pc);
    hr_kv_pool_free(pool);
}

/* ---- randomized ---------------------------------------------------------- */

#define R_BLOCKS 40
#define R_MAXT   (8 * BT)
#define R_SEQS   6
#define R_BASES  4

struct rseq {
    struct hr_kv_seq kv;
    int32_t tokens[R_MAXT];
    uint32_t n;
    bool live;
};

struct rworld {
    struct hr_kv_pool *pool;
    struct hr_pcache *pc;
    struct hr_rng rng;
    struct rseq seqs[R_SEQS];
    int32_t bases[R_BASES][R_MAXT];
    /* The shadow: for each pool block, the token prefix its KV was computed
     * from (valid while shadow_len > 0), and how many sequences hold it. */
    int32_t shadow[R_BLOCKS][R_MAXT];
    uint32_t shadow_len[R_BLOCKS];
    uint32_t holders[R_BLOCKS];
};

static uint32_t rnd(struct rworld *w, uint32_t n)
{
    return (uint32_t)(hr_rng_u64(&w->rng) % n);
}

/* A prompt: a prefix (usually most of it) of one of a few base texts, maybe
 * with one token changed, then a random tail over a two-token alphabet. */
static uint32_t make_prompt(struct rworld *w, int32_t *t, uint32_t max)
{
    uint32_t n = 1 + rnd(w, max);
    uint32_t shared = rnd(w, 4) ? n - rnd(w, n / 2 + 1) : rnd(w, n + 1);
    memcpy(t, w->bases[rnd(w, R_BASES)], shared * sizeof(int32_t));
    if (shared && rnd(w, 4) == 0) t[rnd(w, shared)] ^= 1;
    for (uint32_t i = shared; i < n; i++) t[i] = (int32_t)rnd(w, 2);
    return n;
}

/* Records the prefixes of the blocks of s that positions [from, s->n) filled. */
static void shadow_write(struct rworld *w, struct rseq *s, uint32_t from)
{
    for (uint32_t k = from / BT; k < s->n / BT; k++) {
        int32_t b = s->kv.blocks[k];
        memcpy(w->shadow[b], s->tokens, (k + 1) * BT * sizeof(int32_t));
        w->shadow_len[b] = (k + 1) * BT;
    }
}

/* Makes room for `need` more blocks in the pool, evicting cache if needed. */
static bool room_for(struct rworld *w, uint32_t need)
{
    uint32_t nf = hr_kv_n_free(w->pool);
    if (need > nf) {
        uint32_t want = need - nf, ev = hr_pcache_n_evictable(w->pc);
        uint32_t got = hr_pcache_evict(w->pc, want);
        assert_int_equal(got, want < ev ? want : ev);
        assert_int_equal(hr_kv_n_free(w->pool), nf + got);
    }
    return need <= hr_kv_n_free(w->pool);
}

static void hold(struct rworld *w, struct rseq *s, uint32_t from_block, int delta)
{
    for (uint32_t k = from_block; k < s->kv.n_blocks; k++)
        w->holders[s->kv.blocks[k]] += (uint32_t)delta;
}

static void release(struct rworld *w, struct rseq *s)
{
    hold(w, s, 0, -1);
    hr_pcache_release_seq(w->pc, &s->kv);
    s->live = false;
}

/* Appends `add` tokens to s (src's, or random ones when src is NULL),
 * computing them in new blocks; false when the pool cannot hold them even
 * after eviction. */
static bool compute(struct rworld *w, struct rseq *s, const int32_t *src, uint32_t add)
{
    uint32_t need = hr_kv_blocks_needed(s->kv.n_blocks, s->n + add, BT);
    if (!room_for(w, need)) return false;
    uint32_t from_block = s->kv.n_blocks, from = s->n;
    assert_int_equal(hr_kv_seq_reserve(&s->kv, w->pool, add, NULL), HR_OK);
    hold(w, s, from_block, 1);
    for (uint32_t i = 0; i < add; i++) s->tokens[s->n + i] = src ? src[i] : (int32_t)rnd(w, 2);
    s->n += add;
    s->kv.n_tokens = s->n;
    shadow_write(w, s, from);
    return true;
}

static void op_start(struct rworld *w, struct rseq *s)
{
    s->n = make_prompt(w, s->tokens, R_MAXT - 2 * BT);
    uint32_t limit = (s->n - 1) / BT;
    uint32_t max_blocks = rnd(w, 3) ? limit : rnd(w, limit + 1);
    uint32_t peek = hr_pcache_peek(w->pc, s->tokens, s->n);
    uint32_t k = hr_pcache_lookup(w->pc, s->tokens, s->n, max_blocks, s->kv.blocks);
    assert_int_equal(k, peek < max_blocks ? peek : max_blocks);
    /* Every block found holds exactly the KV of the query's prefix. */
    for (uint32_t j = 0; j < k; j++) {
        int32_t b = s->kv.blocks[j];
        assert_int_equal(w->shadow_len[b], (j + 1) * BT);
        assert_memory_equal(w->shadow[b], s->tokens, (j + 1) * BT * sizeof(int32_t));
    }
    s->kv.n_blocks = k;
    s->kv.n_tokens = k * BT;
    s->live = true;
    hold(w, s, 0, 1);
    int32_t prompt[R_MAXT];
    memcpy(prompt, s->tokens, s->n * sizeof(int32_t));
    uint32_t n = s->n;
    s->n = k * BT;
    if (!compute(w, s, prompt + k * BT, n - k * BT)) release(w, s);
}

static void check_world(struct rworld *w)
{
    check(w->pc);
    uint32_t n_cached = 0, n_evictable = 0;
    for (int32_t b = 0; b < R_BLOCKS; b++) {
        bool cached = hr_pcache_has_block(w->pc, b);
        uint32_t rc = hr_kv_refcount(w->pool, b);
        assert_int_equal(rc, w->holders[b] + (cached ? 1 : 0));
        n_cached += cached;
        n_evictable += cached && rc == 1;
    }
    assert_int_equal(hr_pcache_n_entries(w->pc), n_cached);
    assert_int_equal(hr_pcache_n_evictable(w->pc), n_evictable);
}

static void run_random(uint64_t seed, uint32_t max_entries, unsigned hash_bits, uint32_t n_ops)
{
    struct rworld *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    hr_rng_seed(&w->rng, seed);
    w->pool = pool_of(R_BLOCKS);
    w->pc = cache_of(w->pool, max_entries);
    hr_pcache_test_set_hash_bits(w->pc, hash_bits);
    for (uint32_t i = 0; i < R_BASES; i++)
        for (uint32_t j = 0; j < R_MAXT; j++) w->bases[i][j] = (int32_t)rnd(w, 3);
    for (uint32_t i = 0; i < R_SEQS; i++)
        assert_int_equal(hr_kv_seq_init(&w->seqs[i].kv, R_MAXT, BT, NULL), HR_OK);

    for (uint32_t op = 0; op < n_ops; op++) {
        struct rseq *s = &w->seqs[rnd(w, R_SEQS)];
        switch (rnd(w, 6)) {
        case 0:
        case 1:
            if (!s->live) op_start(w, s);
            break;
        case 2: /* insert a running sequence's full blocks (maybe not all) */
            if (s->live) {
                uint32_t nf = s->n / BT;
                hr_pcache_insert(w->pc, s->tokens, rnd(w, 4) ? nf : rnd(w, nf + 1), s->kv.blocks);
            }
            break;
        case 3: /* finish: usually leave its blocks in the cache */
            if (s->live) {
                if (rnd(w, 4)) hr_pcache_insert(w->pc, s->tokens, s->n / BT, s->kv.blocks);
                release(w, s);
            }
            break;
        case 4: /* decode a few tokens */
            if (s->live && s->n + 20 <= R_MAXT) compute(w, s, NULL, 1 + rnd(w, 20));
            break;
        case 5: {
            uint32_t ev = hr_pcache_n_evictable(w->pc), want = rnd(w, 5);
            uint32_t nf = hr_kv_n_free(w->pool);
            uint32_t got = hr_pcache_evict(w->pc, want);
            assert_int_equal(got, want < ev ? want : ev);
            assert_int_equal(hr_kv_n_free(w->pool), nf + got);
            break;
        }
        }
        check_world(w);
    }
    struct hr_pcache_stats st;
    hr_pcache_stats(w->pc, &st);
    assert_true(st.hit_tokens > 0 && st.evicted_blocks > 0);
    assert_true(st.hit_tokens <= st.lookup_tokens);
    assert_int_equal(st.inserted_blocks - st.evicted_blocks, hr_pcache_n_entries(w->pc));
    for (uint32_t i = 0; i < R_SEQS; i++) {
        if (w->seqs[i].live) release(w, &w->seqs[i]);
        hr_kv_seq_free(&w->seqs[i].kv, w->pool);
    }
    check_world(w);
    assert_int_equal(hr_pcache_n_evictable(w->pc), hr_pcache_n_entries(w->pc));
    hr_pcache_free(w->pc);
    assert_int_equal(hr_kv_n_free(w->pool), R_BLOCKS);
    hr_kv_pool_free(w->pool);
    free(w);
}

static void test_random(void **state)
{
    (void)state;
    run_random(1, R_BLOCKS, 64, 20000); /* table as large as the pool */
    run_random(2, 12, 64, 20000);       /* a small table: inserts evict */
    run_random(3, 16, 2, 20000);        /* 4 hash values: long bucket chains */
    run_random(4, 8, 0, 20000);         /* one hash value */
}

/* A windowed pool (window 40, blocks of 16): a sequence of 100 positions
 * keeps windowed blocks [first(96) = 2, 7); inserted, its last full block's
 * entry (depth 6) carries [first(96), 6) = blocks 2..5; a hit on a longer
 * prompt stops there and restores them; a prompt diverging before depth 6
 * finds no window and no hit; eviction gives everything back. */
static void test_window(void **state)
{
    (void)state;
    struct hr_kv_config c = {.n_layer = 1, .n_head_kv = 1, .head_dim = 16, .block_tokens = BT,
                             .type = HR_GGML_F16, .window = 40};
    c.budget_bytes = 64 * hr_kv_block_bytes_for(&c);
    struct hr_kv_pool *pool = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_kv_pool_init(&c, &pool, &err), HR_OK);
    struct hr_pcache *pc = cache_of(pool, 32);
    int32_t t[160];
    for (uint32_t k = 0; k < 10; k++) fill_block(t, k, (int32_t)k + 1);

    struct hr_kv_seq a;
    assert_int_equal(hr_kv_seq_init(&a, 160, BT, &err), HR_OK);
    assert_int_equal(hr_kv_seq_reserve(&a, pool, 100, &err), HR_OK);
    a.n_tokens = 100;
    hr_kv_seq_slide(&a, pool);
    /* first(96): keys from 96 - 39 = 57, 32-aligned: 32, block 2 */
    const uint32_t first = hr_kv_window_first_block(40, 96, BT);
    assert_int_equal(first, 2);
    assert_int_equal(a.w_first, first);
    assert_int_equal(hr_kv_n_used(pool), 7 + 5);
    assert_int_equal(hr_pcache_insert_seq(pc, t, &a), 6);
    check(pc);
    int32_t wkept[4];
    memcpy(wkept, a.wblocks + first, 4 * sizeof(int32_t));
    hr_pcache_release_seq(pc, &a);
    check(pc);
    /* Left: 6 full blocks and the window's 4 (blocks 2..5), all idle. */
    assert_int_equal(hr_kv_n_used(pool), 6 + 4);
    assert_int_equal(hr_pcache_n_evictable(pc), 6);
    assert_int_equal(hr_pcache_n_idle_wblocks(pc), 4);

    /* A longer prompt: the hit is the 6 blocks, with the window. */
    struct hr_kv_seq b;
    assert_int_equal(hr_kv_seq_init(&b, 160, BT, &err), HR_OK);
    assert_int_equal(hr_pcache_peek(pc, t, 150), 6);
    b.n_blocks = hr_pcache_lookup(pc, t, 150, 9, b.blocks);
    b.n_tokens = b.n_blocks * BT;
    assert_int_equal(b.n_blocks, 6);
    hr_pcache_restore_window(pc, &b);
    assert_int_equal(b.n_tokens, 96);
    assert_int_equal(b.n_blocks, 6);
    assert_int_equal(b.n_wblocks, 6);
    assert_int_equal(b.w_first, first);
    assert_int_equal(b.wblocks[0], -1);
    assert_int_equal(b.wblocks[1], -1);
    assert_memory_equal(b.wblocks + first, wkept, 4 * sizeof(int32_t));
    for (uint32_t k = first; k < 6; k++) assert_int_equal(hr_kv_refcount(pool, b.wblocks[k]), 2);
    assert_int_equal(hr_pcache_n_idle_wblocks(pc), 0);
    check(pc);
    /* b continues: a step of 20 positions, then slides. */
    assert_int_equal(hr_kv_seq_reserve(&b, pool, 20, &err), HR_OK);
    b.n_tokens = 116;
    hr_kv_seq_slide(&b, pool);
    assert_int_equal(b.w_first, hr_kv_window_first_block(40, 116, BT));
    hr_pcache_release_seq(pc, &b);
    check(pc);
    assert_int_equal(hr_kv_n_used(pool), 6 + 4);

    /* Diverging in block 4: the walk finds blocks 0..3, none with a window. */
    int32_t u[160];
    memcpy(u, t, sizeof(u));
    u[4 * BT] = -5;
    assert_int_equal(hr_pcache_peek(pc, u, 150), 0);
    assert_int_equal(hr_pcache_lookup(pc, u, 150, 9, b.blocks), 0);
    hr_pcache_restore_window(pc, &b);
    assert_int_equal(b.n_tokens, 0);
    assert_int_equal(b.n_wblocks, 0);
    check(pc);

    /* Eviction returns every block, windows too; then free. */
    assert_int_equal(hr_pcache_evict(pc, 100), 6);
    assert_int_equal(hr_kv_n_used(pool), 0);
    check(pc);
    hr_kv_seq_free(&a, pool);
    hr_kv_seq_free(&b, pool);
    /* Freeing a cache that still holds windows drops them. */
    assert_int_equal(hr_kv_seq_init(&a, 160, BT, &err), HR_OK);
    assert_int_equal(hr_kv_seq_reserve(&a, pool, 64, &err), HR_OK);
    a.n_tokens = 64;
    hr_kv_seq_slide(&a, pool);
    hr_pcache_insert_seq(pc, t, &a);
    hr_pcache_release_seq(pc, &a);
    assert_true(hr_kv_n_used(pool) > 4);
    hr_pcache_free(pc);
    assert_int_equal(hr_kv_n_used(pool), 0);
    hr_kv_seq_free(&a, pool);
    hr_kv_pool_free(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_and_free),
        cmocka_unit_test(test_hash_chaining),
        cmocka_unit_test(test_lookup_takes_references),
        cmocka_unit_test(test_full_blocks_only),
        cmocka_unit_test(test_insert_idempotent),
        cmocka_unit_test(test_lru_order),
        cmocka_unit_test(test_no_eviction_of_referenced),
        cmocka_unit_test(test_table_full),
        cmocka_unit_test(test_collisions),
        cmocka_unit_test(test_free_drops_every_reference),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_snapshots),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
