/*
 * test-sampler.c - the sampling chain: greedy, each filter alone, penalties,
 * reproducibility per seed, and the empirical distribution of the draw.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rand.h"
#include "sample/sampler.h"

static struct hr_sampler *make(struct hr_sampler_params p, uint32_t n)
{
    struct hr_sampler *s = NULL;
    struct hr_err err = {{0}};
    if (hr_sampler_init(&p, n, &s, &err) != HR_OK)
        fail_msg("%s", err.msg);
    return s;
}

static struct hr_sampler_params plain(void)
{
    return (struct hr_sampler_params){.temperature = 1.0f, .top_p = 1.0f, .repeat_penalty = 1.0f};
}

static void test_greedy(void **state)
{
    (void)state;
    float l[] = {0.1f, 3.0f, -2.0f, 3.0f, 2.9f};
    struct hr_sampler_params p = plain();
    p.temperature = 0.0f;
    struct hr_sampler *s = make(p, 5);
    assert_int_equal(hr_sampler_sample(s, l), 1); /* ties go to the lower id */
    hr_sampler_free(s);
}

static void test_top_k_1_is_greedy(void **state)
{
    (void)state;
    float l[100];
    for (int i = 0; i < 100; i++)
        l[i] = (float)((i * 37) % 100) / 10.0f;
    struct hr_sampler_params p = plain();
    p.top_k = 1;
    p.seed = 3;
    struct hr_sampler *s = make(p, 100);
    for (int i = 0; i < 50; i++)
        assert_int_equal(hr_sampler_sample(s, l), 27); /* (27*37) % 100 = 99: the max */
    hr_sampler_free(s);
}

/* Drawing many times matches the softmax within sampling noise. */
static void test_distribution(void **state)
{
    (void)state;
    float l[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)}; /* p = 0.1 0.2 0.3 0.4 */
    struct hr_sampler_params p = plain();
    p.seed = 42;
    struct hr_sampler *s = make(p, 4);
    int counts[4] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++)
        counts[hr_sampler_sample(s, l)]++;
    for (int i = 0; i < 4; i++) {
        double want = 0.1 * (i + 1), got = (double)counts[i] / N;
        assert_true(fabs(got - want) < 0.01);
    }
    hr_sampler_free(s);
}

/* The draw from the whole vocabulary (no cut, no penalty: the APIs'
 * default) on 3,237 tokens (50 blocks of 64 and a tail of 37) at
 * temperature 0.5: the frequencies of 8 groups of ids against the softmax
 * computed in double, masked logits (-inf) and NaNs never drawn (a NaN
 * first too), and a +inf logit drawn every time. */
static void test_distribution_whole_vocabulary(void **state)
{
    (void)state;
    enum { V = 64 * 50 + 37, G = 8 };
    static float l[V];
    struct hr_rng g;
    hr_rng_seed(&g, 23);
    for (uint32_t i = 0; i < V; i++)
        l[i] = (float)(hr_rng_normal(&g) * 1.5) + (i % G == 3 ? 2.0f : 0.0f);
    l[5] = -INFINITY, l[700] = -INFINITY, l[V - 2] = -INFINITY;
    l[64 * 7 + 1] = NAN, l[V - 5] = NAN;
    struct hr_sampler_params p = plain();
    p.temperature = 0.5f;
    p.seed = 8;
    double want[G] = {0}, sum = 0.0, mx = -1e30;
    for (uint32_t i = 0; i < V; i++)
        mx = l[i] == l[i] && l[i] > mx ? l[i] : mx;
    for (uint32_t i = 0; i < V; i++)
        if (l[i] == l[i]) {
            const double e = exp(((double)l[i] - mx) / 0.5);
            want[i % G] += e, sum += e;
        }
    struct hr_sampler *s = make(p, V);
    int counts[G] = {0}, bad = 0;
    const int N = 50000;
    for (int k = 0; k < N; k++) {
        const int32_t t = hr_sampler_sample(s, l);
        if (t < 0 || t >= V || !(l[t] > -INFINITY))
            bad++;
        else
            counts[t % G]++;
    }
    assert_int_equal(bad, 0);
    for (int i = 0; i < G; i++)
        assert_true(fabs((double)counts[i] / N - want[i] / sum) < 0.01);
    /* a NaN first is ignored as any other; a +inf logit takes every draw */
    l[0] = NAN;
    for (int k = 0; k < 200; k++) {
        const int32_t t = hr_sampler_sample(s, l);
        assert_true(t > 0 && t < V && l[t] > -INFINITY);
    }
    l[2000] = INFINITY;
    for (int k = 0; k < 20; k++)
        assert_int_equal(hr_sampler_sample(s, l), 2000);
    hr_sampler_free(s);
}

static void test_temperature_sharpens(void **state)
{
    (void)state;
    float l[2] = {0.0f, 1.0f};
    struct hr_sampler_params p = plain();
    p.temperature = 0.25f; /* p1 / p0 = e^4 */
    p.seed = 1;
    struct hr_sampler *s = make(p, 2);
    int ones = 0;
    for (int i = 0; i < 20000; i++)
        ones += hr_sampler_sample(s, l);
    double want = expf(4.0f) / (1.0f + expf(4.0f));
    assert_true(fabs((double)ones / 20000 - want) < 0.01);
    hr_sampler_free(s);
}

static void test_top_p_and_min_p_cut(void **state)
{
    (void)state;
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct hr_sampler_params p = plain();
    p.top_p = 0.7f; /* keeps 0.5 and 0.3 */
    p.seed = 9;
    struct hr_sampler *s = make(p, 4);
    for (int i = 0; i < 2000; i++)
        assert_true(hr_sampler_sample(s, l) < 2);
    hr_sampler_free(s);
    p = plain();
    p.min_p = 0.35f; /* keeps p >= 0.175: 0.5 and 0.3 */
    s = make(p, 4);
    for (int i = 0; i < 2000; i++)
        assert_true(hr_sampler_sample(s, l) < 2);
    hr_sampler_free(s);
}

/* The reference chain: sort the whole vocabulary (ties by id), cut, draw.
 * The sampler sorts only what a cut can reach; its draws must be the same. */
struct rc {
    int32_t id;
    float logit;
};
static int rc_desc(const void *a, const void *b)
{
    const struct rc *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}
static int32_t reference_draw(const float *l, uint32_t n, const struct hr_sampler_params *p,
                              struct hr_rng *rng, struct rc *c, float *pr)
{
    for (uint32_t i = 0; i < n; i++)
        c[i] = (struct rc){(int32_t)i, l[i]};
    qsort(c, n, sizeof(*c), rc_desc);
    const float mx = c[0].logit;
    if (p->top_k > 0 && (uint32_t)p->top_k < n)
        n = (uint32_t)p->top_k;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += pr[i] = expf(c[i].logit - mx);
    uint32_t keep = n;
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (uint32_t i = 0; i < n; i++)
            if ((cum += pr[i] / sum) >= p->top_p) {
                keep = i + 1;
                break;
            }
    }
    if (p->min_p > 0.0f) {
        uint32_t k = 1;
        while (k < keep && pr[k] >= p->min_p * pr[0])
            k++;
        keep = k;
    }
    sum = 0;
    for (uint32_t i = 0; i < keep; i++)
        sum += pr[i] = expf((c[i].logit - mx) / p->temperature);
    double r = hr_rng_uniform(rng) * sum, acc = 0;
    for (uint32_t i = 0; i < keep; i++)
        if (r < (acc += pr[i]))
            return c[i].id;
    return c[keep - 1].id;
}

static void test_partial_sort_equals_full_sort(void **state)
{
    (void)state;
    enum { V = 40000 };
    static float l[V], pr[V];
    static struct rc c[V];
    struct hr_rng g;
    hr_rng_seed(&g, 77);
    for (uint32_t i = 0; i < V; i++)
        l[i] = (float)(hr_rng_normal(&g) * 2.5);
    const float cuts[][2] = {{0.9f, 0.0f}, {0.999f, 0.0f}, {0.5f, 0.02f}, {1.0f, 0.05f},
                             {1.0f, 0.001f}};
    for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
        struct hr_sampler_params p = plain();
        p.temperature = 0.7f;
        p.top_p = cuts[k][0];
        p.min_p = cuts[k][1];
        p.seed = 100 + k;
        struct hr_sampler *s = make(p, V);
        struct hr_rng rr;
        hr_rng_seed(&rr, p.seed);
        for (int i = 0; i < 40; i++)
            assert_int_equal(hr_sampler_sample(s, l), reference_draw(l, V, &p, &rr, c, pr));
        hr_sampler_free(s);
    }
    /* a large nucleus of tied logits (its sort is a radix sort, stable in
     * id order), -0 and +0 among them, drawn near-uniformly to reach the
     * cut's ties */
    for (uint32_t i = 0; i < V; i++)
        l[i] = roundf((float)(hr_rng_normal(&g) * 3.0)) * 0.5f;
    for (uint32_t i = 0; i < V; i += 3)
        l[i] = l[i] == 0.0f ? -0.0f : l[i];
    struct hr_sampler_params p = plain();
    p.temperature = 20.0f;
    p.top_p = 0.6f;
    p.seed = 7;
    struct hr_sampler *s = make(p, V);
    struct hr_rng rr;
    hr_rng_seed(&rr, p.seed);
    for (int i = 0; i < 60; i++)
        assert_int_equal(hr_sampler_sample(s, l), reference_draw(l, V, &p, &rr, c, pr));
    hr_sampler_free(s);
}

/* The cuts read the values in place (sort_reachable): with repetition
 * penalties they read the penalized ones, -inf logits (masked tokens) are
 * candidates with no weight that the bucket range ignores, NaN logits are
 * never candidates, and a +inf logit is drawn. Each against the full sort
 * of the same values (NaN as -inf: no weight either way). */
static void test_cuts_penalized_and_masked(void **state)
{
    (void)state;
    enum { V = 20000 };
    static float l[V], pen[V], pr[V];
    static struct rc c[V];
    struct hr_rng g;
    hr_rng_seed(&g, 11);
    for (uint32_t i = 0; i < V; i++)
        l[i] = (float)(hr_rng_normal(&g) * 2.0);
    for (uint32_t i = 0; i < V; i += 7)
        l[i] = -INFINITY;
    for (uint32_t i = 3; i < V; i += 101)
        l[i] = NAN;
    /* the best ids, so the penalties move the nucleus */
    int32_t hist[6];
    for (int h = 0; h < 6; h++) {
        hist[h] = 0;
        for (uint32_t i = 1; i < V; i++)
            if (l[i] == l[i] && l[i] > l[hist[h]] && (h == 0 || l[i] < l[hist[h - 1]]))
                hist[h] = (int32_t)i;
    }
    /* top-p, min-p, top-k */
    const float cuts[][3] = {{0.9f, 0.0f, 0}, {0.6f, 0.01f, 0}, {1.0f, 0.02f, 0}, {0.95f, 0.0f, 50},
                             {1.0f, 0.0f, 3}};
    for (int pen_on = 0; pen_on < 2; pen_on++)
        for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
            struct hr_sampler_params p = plain();
            p.temperature = 0.8f;
            p.top_p = cuts[k][0];
            p.min_p = cuts[k][1];
            p.top_k = (int32_t)cuts[k][2];
            p.seed = 40 + k;
            if (pen_on)
                p.repeat_penalty = 1.3f, p.presence_penalty = 0.5f, p.penalty_last_n = 8;
            struct hr_sampler *s = make(p, V);
            for (uint32_t i = 0; i < V; i++)
                pen[i] = l[i] == l[i] ? l[i] : -INFINITY;
            if (pen_on)
                for (int h = 0; h < 6; h++) {
                    hr_sampler_accept(s, hist[h]);
                    float *x = &pen[hist[h]];
                    *x = (*x <= 0.0f ? *x * 1.3f : *x / 1.3f) - 0.5f;
                }
            struct hr_rng rr;
            hr_rng_seed(&rr, p.seed);
            for (int i = 0; i < 40; i++) {
                const int32_t got = hr_sampler_sample(s, l);
                assert_int_equal(got, reference_draw(pen, V, &p, &rr, c, pr));
                assert_true(l[got] == l[got] && l[got] != -INFINITY);
            }
            hr_sampler_free(s);
        }
    /* nearly flat: a top-p of 0.999 reaches the last bucket, where the
     * -inf and NaN logits would fall */
    for (uint32_t i = 0; i < V; i++)
        l[i] = i % 7 == 0 ? -INFINITY : i % 101 == 3 ? NAN : (float)(i % 1000) * 1e-4f;
    struct hr_sampler_params p = plain();
    p.top_p = 0.999f;
    p.seed = 3;
    struct hr_sampler *s = make(p, V);
    struct hr_rng rr;
    hr_rng_seed(&rr, p.seed);
    for (uint32_t i = 0; i < V; i++)
        pen[i] = l[i] == l[i] ? l[i] : -INFINITY;
    for (int i = 0; i < 40; i++)
        assert_int_equal(hr_sampler_sample(s, l), reference_draw(pen, V, &p, &rr, c, pr));
    hr_sampler_free(s);
    p = plain();
    p.top_p = 0.9f;
    s = make(p, V);
    l[V / 2] = INFINITY;
    l[V / 2 + 5] = INFINITY;
    for (int i = 0; i < 5; i++)
        assert_int_equal(hr_sampler_sample(s, l), V / 2);
    for (uint32_t i = 0; i < V; i++)
        l[i] = i % 2 ? NAN : -INFINITY;
    assert_int_equal(hr_sampler_sample(s, l), 0); /* nothing has weight */
    hr_sampler_free(s);
}

/* Top-k picks its k from the logits directly (a heap, no candidate copy)
 * and greedy scans them: the same draws as the full sort, ties included
 * (logits rounded to a few values so many are equal). */
static void test_top_k_and_greedy_equal_full_sort(void **state)
{
    (void)state;
    enum { V = 30011 };
    static float l[V], pr[V];
    static struct rc c[V];
    struct hr_rng g;
    hr_rng_seed(&g, 5);
    for (uint32_t i = 0; i < V; i++)
        l[i] = roundf((float)(hr_rng_normal(&g) * 3.0));
    const int ks[] = {1, 2, 7, 40, 1000, V - 1};
    for (size_t k = 0; k < sizeof(ks) / sizeof(ks[0]); k++) {
        struct hr_sampler_params p = plain();
        p.temperature = 50.0f; /* a near-uniform draw reaches the cut's ties */
        p.top_k = ks[k];
        p.top_p = k % 2 ? 0.9f : 1.0f;
        p.min_p = k % 3 ? 0.0f : 0.05f;
        p.seed = 300 + k;
        struct hr_sampler *s = make(p, V);
        struct hr_rng rr;
        hr_rng_seed(&rr, p.seed);
        for (int i = 0; i < 30; i++)
            assert_int_equal(hr_sampler_sample(s, l), reference_draw(l, V, &p, &rr, c, pr));
        hr_sampler_free(s);
    }
    /* All equal: the k lowest ids, and every draw one of them */
    static float flat[100];
    struct hr_sampler_params p = plain();
    p.top_k = 5;
    p.seed = 9;
    struct hr_sampler *s = make(p, 100);
    for (int i = 0; i < 50; i++)
        assert_true(hr_sampler_sample(s, flat) < 5);
    hr_sampler_free(s);
    p = plain();
    p.temperature = 0.0f;
    s = make(p, V);
    for (uint32_t n = 0; n < 3; n++) {
        l[V - 1 - n * 5000] = 99.0f; /* ties at the max: the lowest id wins */
        int32_t want = 0;
        for (uint32_t i = 1; i < V; i++)
            want = l[i] > l[want] ? (int32_t)i : want;
        assert_int_equal(hr_sampler_sample(s, l), want);
    }
    hr_sampler_free(s);
}

/* Greedy against a strict > scan from l[0] on every length up to 300 and
 * a 151,936-token row (the SIMD lanes, their merge and the tail), values
 * rounded so that ties are common, the maximum anywhere (first, in the
 * tail, several times), NaNs that never win, and a NaN first that does (as
 * the scan keeps it). */
static void test_greedy_scan(void **state)
{
    (void)state;
    enum { V = 151936 };
    static float l[V];
    struct hr_rng g;
    hr_rng_seed(&g, 17);
    struct hr_sampler_params p = plain();
    p.temperature = 0.0f;
    for (uint32_t n = 1; n <= 300; n++) {
        struct hr_sampler *s = make(p, n);
        for (int rep = 0; rep < 8; rep++) {
            for (uint32_t i = 0; i < n; i++)
                l[i] = roundf((float)(hr_rng_normal(&g) * 2.0));
            if (rep == 1)
                l[n - 1] = 50.0f; /* the last one */
            if (rep == 2)
                l[0] = 50.0f, l[n / 2] = 50.0f; /* the first one, tied later */
            if (rep == 3 && n > 2)
                l[n / 3] = NAN, l[n - 1] = NAN;
            if (rep == 4)
                l[0] = NAN;
            int32_t want = 0;
            for (uint32_t i = 1; i < n; i++)
                want = l[i] > l[want] ? (int32_t)i : want;
            assert_int_equal(hr_sampler_sample(s, l), want);
        }
        hr_sampler_free(s);
    }
    struct hr_sampler *s = make(p, V);
    for (int rep = 0; rep < 6; rep++) {
        for (uint32_t i = 0; i < V; i++)
            l[i] = roundf((float)(hr_rng_normal(&g) * 4.0));
        if (rep == 1)
            l[V - 1] = 99.0f, l[V - 70] = 99.0f;
        if (rep == 2)
            l[100000] = 99.0f, l[31] = 99.0f, l[64] = 99.0f;
        int32_t want = 0;
        for (uint32_t i = 1; i < V; i++)
            want = l[i] > l[want] ? (int32_t)i : want;
        assert_int_equal(hr_sampler_sample(s, l), want);
    }
    hr_sampler_free(s);
}

static void test_same_seed_same_draws(void **state)
{
    (void)state;
    float l[50];
    for (int i = 0; i < 50; i++)
        l[i] = sinf((float)i);
    struct hr_sampler_params p = hr_sampler_defaults();
    p.seed = 1234;
    struct hr_sampler *a = make(p, 50), *b = make(p, 50);
    p.seed = 1235;
    struct hr_sampler *c = make(p, 50);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = hr_sampler_sample(a, l), y = hr_sampler_sample(b, l), z = hr_sampler_sample(c, l);
        assert_int_equal(x, y);
        differ += x != z;
        hr_sampler_accept(a, x);
        hr_sampler_accept(b, y);
        hr_sampler_accept(c, z);
    }
    assert_true(differ > 0);
    hr_sampler_free(a);
    hr_sampler_free(b);
    hr_sampler_free(c);
}

static void test_penalties(void **state)
{
    (void)state;
    float l[3] = {2.0f, 1.9f, -1.0f};
    struct hr_sampler_params p = plain();
    p.temperature = 0.0f;
    p.repeat_penalty = 1.5f;
    p.penalty_last_n = 4;
    struct hr_sampler *s = make(p, 3);
    assert_int_equal(hr_sampler_sample(s, l), 0);
    hr_sampler_accept(s, 0); /* 2.0 / 1.5 = 1.33 < 1.9 */
    assert_int_equal(hr_sampler_sample(s, l), 1);
    /* The window forgets: four other tokens push token 0 out. */
    for (int i = 0; i < 4; i++)
        hr_sampler_accept(s, 2);
    assert_int_equal(hr_sampler_sample(s, l), 0);
    hr_sampler_free(s);

    p = plain();
    p.temperature = 0.0f;
    p.frequency_penalty = 0.1f;
    p.presence_penalty = 0.05f;
    p.penalty_last_n = 16;
    s = make(p, 3);
    hr_sampler_accept(s, 0); /* 2.0 - 0.1 - 0.05 = 1.85 < 1.9 */
    assert_int_equal(hr_sampler_sample(s, l), 1);
    hr_sampler_free(s);
}

static void test_top_logprobs(void **state)
{
    (void)state;
    float l[5] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
    int32_t ids[3];
    float lp[3];
    assert_int_equal(hr_top_logprobs(l, 5, 3, ids, lp), 3);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 2);
    double z = exp(1) + 2 * exp(3) + exp(2) + exp(-1);
    assert_true(fabs(lp[0] - (3.0 - log(z))) < 1e-6);
    assert_true(fabs(lp[2] - (2.0 - log(z))) < 1e-6);
    assert_int_equal(hr_top_logprobs(l, 5, 10, (int32_t[10]){0}, (float[10]){0}), 5);
}

static void test_bad_params(void **state)
{
    (void)state;
    struct hr_sampler *s = NULL;
    struct hr_err err = {{0}};
    struct hr_sampler_params p = plain();
    p.top_p = 0.0f;
    assert_int_equal(hr_sampler_init(&p, 10, &s, &err), HR_ERR_RANGE);
    p = plain();
    p.repeat_penalty = 0.0f;
    assert_int_equal(hr_sampler_init(&p, 10, &s, &err), HR_ERR_RANGE);
    p = plain();
    assert_int_equal(hr_sampler_init(&p, 0, &s, &err), HR_ERR_INVALID);
    assert_null(s);
    hr_sampler_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),           cmocka_unit_test(test_top_k_1_is_greedy),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_distribution_whole_vocabulary),     cmocka_unit_test(test_temperature_sharpens),
        cmocka_unit_test(test_top_p_and_min_p_cut),
        cmocka_unit_test(test_cuts_penalized_and_masked),
        cmocka_unit_test(test_partial_sort_equals_full_sort),
        cmocka_unit_test(test_top_k_and_greedy_equal_full_sort),
        cmocka_unit_test(test_greedy_scan),
        cmocka_unit_test(test_same_seed_same_draws),
        cmocka_unit_test(test_penalties),        cmocka_unit_test(test_top_logprobs),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
