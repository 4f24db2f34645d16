/*
 * test-attention.c - the tiled attention kernel (engine/attention.c) against
 * a plain reference in double, for every cache type (F32, F16, Q8_0, Q4_0),
 * head dims that do and do not fill the micro-kernels (64, 72, 80, 96, 128),
 * GQA groups 1..8, cache blocks of 16, 32 and 48 tokens (KV blocks of 32
 * crossing cache blocks), sliding windows (llama.cpp's standard SWA: key p0
 * masked iff p - p0 >= window) and attention sinks; and batch invariance:
 * every row computed alone, in tiles from position 0, and in tiles from an
 * odd offset gives the same bits.
 *
 * The reference reads the cache back (f16 values widened exactly; quantized
 * scores from hr_attn_score_ref, V from the reference dequantizers), then
 * takes the softmax over the unmasked keys plus the sink in double.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "base/fp16.h"
#include "engine/attention.h"
#include "engine/kv-cache.h"
#include "kernels/quant.h"

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

struct setup {
    enum hr_ggml_type type;
    uint32_t hd, group, bt, window;
    bool sinks;
};

struct cache {
    struct hr_kv_pool *pool;
    struct hr_kv_seq seq;
    uint32_t n_pos;
};

enum { N_HEAD_KV = 2, LAYER = 1 };

static void cache_fill(struct cache *c, const struct setup *su, uint32_t n_pos, uint32_t *rs)
{
    struct hr_kv_config kc = {.n_layer = 2, .n_head_kv = N_HEAD_KV, .head_dim = su->hd,
                              .block_tokens = su->bt, .type = su->type};
    const uint32_t n_blocks = (n_pos + su->bt - 1) / su->bt;
    kc.budget_bytes = (n_blocks + 1) * hr_kv_block_bytes_for(&kc);
    struct hr_err err = {{0}};
    c->pool = NULL;
    c->n_pos = n_pos;
    assert_int_equal(hr_kv_pool_init(&kc, &c->pool, &err), HR_OK);
    assert_int_equal(hr_kv_seq_init(&c->seq, n_blocks * su->bt, su->bt, &err), HR_OK);
    assert_int_equal(hr_kv_seq_reserve(&c->seq, c->pool, n_pos, &err), HR_OK);
    const size_t kv_dim = (size_t)N_HEAD_KV * su->hd;
    float *k = malloc(kv_dim * sizeof(float)), *v = malloc(kv_dim * sizeof(float));
    for (uint32_t p = 0; p < n_pos; p++) {
        for (size_t i = 0; i < kv_dim; i++) {
            k[i] = frand(rs) * 2.0f;
            v[i] = frand(rs);
        }
        hr_attn_store(c->pool, c->seq.blocks, LAYER, N_HEAD_KV, su->hd, (int32_t)p, k, v);
    }
    free(k);
    free(v);
}

static void cache_free(struct cache *c)
{
    hr_kv_seq_free(&c->seq, c->pool);
    hr_kv_pool_free(c->pool);
}

/* Key or value of position p, KV head g, read back from the cache as f32;
 * for quantized caches only V (K goes through hr_attn_score_ref). */
static void read_row(const struct cache *c, const struct setup *su, bool want_k, uint32_t p,
                     uint32_t g, float *dst)
{
    const uint32_t hd = su->hd, bt = su->bt;
    const int32_t b = c->seq.blocks[p / bt];
    const uint8_t *base = want_k ? hr_kv_block_k(c->pool, b, LAYER) : hr_kv_block_v(c->pool, b, LAYER);
    base += g * hr_kv_head_bytes(c->pool);
    if (su->type == HR_GGML_Q8_0 || su->type == HR_GGML_Q4_0) {
        assert_int_equal(hr_dequantize_row(su->type, base + (p % bt) * hr_kv_row_bytes(su->type, hd),
                                           dst, hd),
                         0);
        return;
    }
    for (uint32_t d = 0; d < hd; d++) {
        /* K is stored [d][bt], V [bt][d]. */
        const size_t i = want_k ? (size_t)d * bt + p % bt : (size_t)(p % bt) * hd + d;
        dst[d] = su->type == HR_GGML_F32 ? ((const float *)base)[i]
                                         : hr_f16_to_f32(((const uint16_t *)base)[i]);
    }
}

/* The reference output of query row q (KV head g, global head gh) at pos. */
static void reference(const struct cache *c, const struct setup *su, const float *q, uint32_t g,
                      const float *sink, int32_t pos, float scale, double *out)
{
    const uint32_t hd = su->hd;
    float *row = malloc(hd * sizeof(float));
    double *w = malloc(((size_t)pos + 1) * sizeof(double));
    const int32_t lo = su->window && pos - (int32_t)su->window + 1 > 0 ? pos - (int32_t)su->window + 1 : 0;
    double mx = sink ? (double)*sink : -INFINITY;
    for (int32_t p = lo; p <= pos; p++) {
        double s = 0;
        if (su->type == HR_GGML_Q8_0 || su->type == HR_GGML_Q4_0) {
            const uint8_t *kb = (const uint8_t *)hr_kv_block_k(c->pool, c->seq.blocks[p / su->bt], LAYER) +
                                g * hr_kv_head_bytes(c->pool) +
                                (p % su->bt) * hr_kv_row_bytes(su->type, hd);
            s = hr_attn_score_ref(su->type, kb, q, hd);
        } else {
            read_row(c, su, true, (uint32_t)p, g, row);
            for (uint32_t d = 0; d < hd; d++)
                s += (double)q[d] * row[d];
        }
        w[p] = s * scale;
        mx = w[p] > mx ? w[p] : mx;
    }
    double sum = sink ? exp(*sink - mx) : 0;
    memset(out, 0, hd * sizeof(double));
    for (int32_t p = lo; p <= pos; p++) {
        const double e = exp(w[p] - mx);
        sum += e;
        read_row(c, su, false, (uint32_t)p, g, row);
        for (uint32_t d = 0; d < hd; d++)
            out[d] += e * row[d];
    }
    for (uint32_t d = 0; d < hd; d++)
        out[d] /= sum;
    free(row);
    free(w);
}

/* Runs every position 0 .. n_pos - 1 through hr_attention in tiles of `bq`
 * tokens starting at `first` (positions before it alone, one per call). */
static void run_tiles(const struct cache *c, const struct setup *su, const float *q,
                      const float *sinks, uint32_t first, uint32_t bq, float *out, void *scr)
{
    const uint32_t hd = su->hd, G = su->group;
    const size_t q_stride = (size_t)N_HEAD_KV * G * hd;
    struct hr_attn_ctx ac = {.kv = c->pool, .blocks = c->seq.blocks, .layer = LAYER,
                             .head_dim = hd, .block_tokens = su->bt, .group = G,
                             .scale = 1.0f / sqrtf((float)hd), .window = su->window,
                             .sinks = sinks};
    for (uint32_t g = 0; g < N_HEAD_KV; g++) {
        uint32_t t0 = 0;
        while (t0 < c->n_pos) {
            uint32_t nq = t0 < first ? 1 : bq;
            if (nq > c->n_pos - t0)
                nq = c->n_pos - t0;
            const size_t at = (size_t)t0 * q_stride + (size_t)g * G * hd;
            hr_attention(&ac, g, q + at, q_stride, (int32_t)t0, nq, out + at, q_stride, scr);
            t0 += nq;
        }
    }
}

static void check(const struct setup *su, uint32_t n_pos)
{
    const uint32_t hd = su->hd, G = su->group, n_head = N_HEAD_KV * G;
    uint32_t rs = 11 + hd * 7 + G * 3 + su->bt + su->window + (uint32_t)su->type * 13;
    struct cache c;
    cache_fill(&c, su, n_pos, &rs);
    const size_t q_stride = (size_t)n_head * hd, n = (size_t)n_pos * q_stride;
    float *q = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float));
    float *b = malloc(n * sizeof(float)), *d = malloc(n * sizeof(float));
    float sinks[64];
    for (size_t i = 0; i < n; i++)
        q[i] = frand(&rs) * 1.5f;
    for (uint32_t h = 0; h < n_head; h++)
        sinks[h] = frand(&rs) * 3.0f;
    const float *sk = su->sinks ? sinks : NULL;
    const size_t scr_bytes = (hr_attn_scratch_bytes(su->type, hd, G) + 63) / 64 * 64;
    void *scr = aligned_alloc(64, scr_bytes);
    const uint32_t bq = hr_attn_block_tokens(G);
    /* Scratch is fully (re)initialized by each call: poison it. */
    memset(scr, 0xFF, scr_bytes);
    run_tiles(&c, su, q, sk, 0, bq, a, scr);
    memset(scr, 0xFF, scr_bytes);
    run_tiles(&c, su, q, sk, n_pos, 1, b, scr);
    run_tiles(&c, su, q, sk, 3, bq, d, scr);
    assert_memory_equal(a, b, n * sizeof(float));
    assert_memory_equal(a, d, n * sizeof(float));

    double *ref = malloc(hd * sizeof(double)), max_err = 0;
    const float scale = 1.0f / sqrtf((float)hd);
    for (uint32_t p = 0; p < n_pos; p++)
        for (uint32_t h = 0; h < n_head; h++) {
            const size_t at = (size_t)p * q_stride + (size_t)h * hd;
            reference(&c, su, q + at, h / G, sk ? sk + h : NULL, (int32_t)p, scale, ref);
            for (uint32_t i = 0; i < hd; i++) {
                const double e = fabs(a[at + i] - ref[i]);
                max_err = e > max_err ? e : max_err;
            }
        }
    print_message("  %s hd %u group %u bt %u window %u sinks %d: max |out - ref| %.2e\n",
                  hr_kv_type_name(su->type), hd, G, su->bt, su->window, su->sinks, max_err);
    assert_true(max_err < 2e-6);
    free(ref);
    free(scr);
    free(q);
    free(a);
    free(b);
    free(d);
    cache_free(&c);
}

static void test_float_caches(void **state)
{
    (void)state;
    static const struct setup s[] = {
        {HR_GGML_F16, 64, 7, 32, 0, false},  {HR_GGML_F16, 128, 4, 16, 0, false},
        {HR_GGML_F32, 96, 2, 48, 0, false},  {HR_GGML_F16, 80, 1, 32, 0, false},
        {HR_GGML_F16, 72, 3, 32, 0, false},  {HR_GGML_F32, 64, 8, 16, 0, false},
    };
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
        check(&s[i], 100);
}

static void test_quant_caches(void **state)
{
    (void)state;
    static const struct setup s[] = {
        {HR_GGML_Q8_0, 64, 7, 32, 0, false},
        {HR_GGML_Q4_0, 128, 4, 16, 0, false},
        {HR_GGML_Q8_0, 96, 2, 48, 0, false},
    };
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
        check(&s[i], 90);
}

/* Sliding windows shorter than, equal to and longer than a KV block, and
 * sinks, alone and together (gpt-oss has both). */
static void test_window_and_sinks(void **state)
{
    (void)state;
    static const struct setup s[] = {
        {HR_GGML_F16, 64, 8, 32, 5, false},   {HR_GGML_F16, 64, 8, 32, 32, false},
        {HR_GGML_F32, 64, 2, 16, 40, false},  {HR_GGML_F16, 64, 8, 32, 0, true},
        {HR_GGML_F16, 64, 8, 48, 17, true},   {HR_GGML_Q8_0, 64, 8, 32, 33, true},
        {HR_GGML_Q4_0, 128, 2, 16, 1, true},
    };
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
        check(&s[i], 110);
}

/* Costs grow with the keys a tile visits and stop growing past the window. */
static void test_cost(void **state)
{
    (void)state;
    struct hr_attn_ctx c = {.group = 7, .head_dim = 64};
    assert_true(hr_attn_cost(&c, 16000, 9) > 100 * hr_attn_cost(&c, 0, 9));
    c.window = 128;
    assert_true(hr_attn_cost(&c, 16000, 9) == hr_attn_cost(&c, 8000, 9));
    assert_true(hr_attn_cost(&c, 16000, 9) < hr_attn_cost(&c, 0, 9) * 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_caches),
        cmocka_unit_test(test_quant_caches),
        cmocka_unit_test(test_window_and_sinks),
        cmocka_unit_test(test_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
