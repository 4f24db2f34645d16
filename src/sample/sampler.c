/* sampler.c - penalties, top-k/p, min-p, temperature, seeded draw; see sampler.h. */
#include "sample/sampler.h"

#include "base/exp512.h"
#include "base/rand.h"
#include "base/sys.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    int32_t id;
    float logit;
};

/* s->probs' floats an id: the radix sort's buffer of candidates (8 bytes) */
enum { PROBS_PER_ID = sizeof(struct cand) / sizeof(float) };

struct hr_sampler {
    struct hr_sampler_params p;
    uint32_t n_vocab;
    struct cand *cands;   /* n_vocab */
    float *probs;         /* 2 n_vocab: weights, or the radix sort's n_vocab candidates */
    int32_t *history;     /* ring of penalty_last_n tokens */
    uint32_t n_hist, hist_pos;
    uint32_t *counts;     /* per token, over the history window; n_vocab (NULL: no penalty) */
    bool owns_scratch;    /* cands and probs are its own (not an hr_sampler_scratch's) */
    struct hr_rng rng;
    double cut_sum;       /* sort_reachable: the whole vocabulary's mass, when has_cut_sum */
    bool has_cut_sum;
};

struct hr_sampler_params hr_sampler_defaults(void)
{
    return (struct hr_sampler_params){
        .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repeat_penalty = 1.0f, .penalty_last_n = 64, .seed = 0,
    };
}

struct hr_sampler_scratch {
    uint32_t n_vocab;
    struct cand *cands;
    float *probs;
};

/* A penalty changes some logit: otherwise the history and the counts are
 * not kept at all (applying a no-op penalty leaves every logit's bits). */
static bool penalized(const struct hr_sampler_params *p)
{
    return p->penalty_last_n > 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
                                     p->frequency_penalty != 0.0f);
}

static enum hr_status sampler_new(const struct hr_sampler_params *p, uint32_t n_vocab,
                                  struct hr_sampler_scratch *sc, struct hr_sampler **out,
                                  struct hr_err *err)
{
    *out = NULL;
    if (n_vocab == 0)
        return hr_err_set(err, HR_ERR_INVALID, "sampler needs a vocabulary");
    if (sc && sc->n_vocab != n_vocab)
        return hr_err_set(err, HR_ERR_INVALID, "sampler scratch is for %u tokens, not %u",
                          sc->n_vocab, n_vocab);
    if (!(p->top_p > 0.0f) || p->min_p > 1.0f || !(p->repeat_penalty > 0.0f) ||
        p->penalty_last_n < 0 || isnan(p->temperature) || isnan(p->presence_penalty) ||
        isnan(p->frequency_penalty))
        return hr_err_set(err, HR_ERR_RANGE,
                          "sampler settings out of range (top_p in (0,1], min_p <= 1, "
                          "repeat_penalty > 0, penalty_last_n >= 0)");
    struct hr_sampler *s = calloc(1, sizeof(*s));
    if (!s)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->owns_scratch = !sc;
    if (sc) {
        s->cands = sc->cands;
        s->probs = sc->probs;
    } else {
        s->cands = malloc(n_vocab * sizeof(*s->cands));
        s->probs = malloc(PROBS_PER_ID * n_vocab * sizeof(*s->probs));
    }
    bool ok = s->cands && s->probs;
    if (penalized(p)) {
        s->counts = calloc(n_vocab, sizeof(*s->counts));
        s->history = malloc(((size_t)p->penalty_last_n + 1) * sizeof(*s->history));
        ok = ok && s->counts && s->history;
    }
    if (!ok) {
        hr_sampler_free(s);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the sampler");
    }
    /* Resident from the start (see the header): fresh pages stay unmapped
     * until written. */
    if (!sc) {
        hr_mem_touch(s->cands, n_vocab * sizeof(*s->cands));
        hr_mem_touch(s->probs, PROBS_PER_ID * n_vocab * sizeof(*s->probs));
    }
    if (s->counts)
        hr_mem_touch(s->counts, n_vocab * sizeof(*s->counts));
    hr_rng_seed(&s->rng, p->seed);
    *out = s;
    return HR_OK;
}

enum hr_status hr_sampler_init(const struct hr_sampler_params *p, uint32_t n_vocab,
                               struct hr_sampler **out, struct hr_err *err)
{
    return sampler_new(p, n_vocab, NULL, out, err);
}

enum hr_status hr_sampler_init_shared(const struct hr_sampler_params *p, uint32_t n_vocab,
                                      struct hr_sampler_scratch *sc, struct hr_sampler **out,
                                      struct hr_err *err)
{
    if (!sc)
        return hr_err_set(err, HR_ERR_INVALID, "shared sampler without its scratch");
    return sampler_new(p, n_vocab, sc, out, err);
}

uint64_t hr_sampler_shared_bytes(const struct hr_sampler_params *p, uint32_t n_vocab)
{
    uint64_t b = sizeof(struct hr_sampler);
    if (penalized(p))
        b += (uint64_t)n_vocab * sizeof(uint32_t) +
             ((uint64_t)p->penalty_last_n + 1) * sizeof(int32_t);
    return b;
}

uint64_t hr_sampler_bytes(const struct hr_sampler_params *p, uint32_t n_vocab)
{
    return hr_sampler_shared_bytes(p, n_vocab) +
           (uint64_t)n_vocab * (sizeof(struct cand) + PROBS_PER_ID * sizeof(float));
}

uint64_t hr_sampler_scratch_bytes(uint32_t n_vocab)
{
    return sizeof(struct hr_sampler_scratch) +
           (uint64_t)n_vocab * (sizeof(struct cand) + PROBS_PER_ID * sizeof(float));
}

enum hr_status hr_sampler_scratch_new(uint32_t n_vocab, struct hr_sampler_scratch **out,
                                      struct hr_err *err)
{
    *out = NULL;
    struct hr_sampler_scratch *sc = calloc(1, sizeof(*sc));
    if (!sc || !(sc->cands = malloc((size_t)n_vocab * sizeof(*sc->cands))) ||
        !(sc->probs = malloc(PROBS_PER_ID * (size_t)n_vocab * sizeof(*sc->probs)))) {
        hr_sampler_scratch_free(sc);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the sampler scratch");
    }
    sc->n_vocab = n_vocab;
    hr_mem_touch(sc->cands, (size_t)n_vocab * sizeof(*sc->cands));
    hr_mem_touch(sc->probs, PROBS_PER_ID * (size_t)n_vocab * sizeof(*sc->probs));
    *out = sc;
    return HR_OK;
}

void hr_sampler_scratch_free(struct hr_sampler_scratch *sc)
{
    if (!sc)
        return;
    free(sc->cands);
    free(sc->probs);
    free(sc);
}

void hr_sampler_free(struct hr_sampler *s)
{
    if (!s)
        return;
    if (s->owns_scratch) {
        free(s->cands);
        free(s->probs);
    }
    free(s->counts);
    free(s->history);
    free(s);
}

void hr_sampler_accept(struct hr_sampler *s, int32_t token)
{
    uint32_t n = (uint32_t)s->p.penalty_last_n;
    if (!s->counts || n == 0 || token < 0 || (uint32_t)token >= s->n_vocab)
        return;
    if (s->n_hist == n) {
        /* The ring is full: the oldest token leaves the window. */
        s->counts[s->history[s->hist_pos]]--;
    } else {
        s->n_hist++;
    }
    s->history[s->hist_pos] = token;
    s->counts[token]++;
    s->hist_pos = (s->hist_pos + 1) % n;
}

static int cmp_cand_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id; /* ties: lower id first, for determinism */
}

/*
 * Without top-k the candidates are the whole vocabulary, and sorting 150K of
 * them for every token costs about 18 ms on this machine class - more than
 * the forward pass of a small model. Only the part a cut can reach needs
 * order, and it is found from the values lv (the logits, or the penalized
 * ones) without copying the vocabulary into candidates:
 *   - top-p: the nucleus. One pass buckets the values by logit (128 equal
 *     steps from the best down to the worst finite one) with their mass
 *     e^(l - mx); the buckets from the top that first hold top_p of it
 *     contain the nucleus. Their k candidates are exactly the k best (the
 *     bucket index falls as the logit falls), so gathering and sorting only
 *     them gives a full sort's prefix (ties by id).
 *   - min-p alone: the candidates with e^(l - mx) >= min_p, the comparison
 *     the cut below makes, gathered and sorted.
 * The passes run 16 values at a time (AVX-512: hr_exp512, so a cut's edge
 * can differ from libm's in the last bit, as the whole-vocabulary draw's
 * weights do). Before, a copy of the vocabulary, a libm expf and a double
 * sum per id and a quickselect over 150K candidates cost about 2.8 ms a
 * token even when the nucleus was a handful of ids: 90 ms of every step at
 * 32 streams. NaN values are never candidates. Returns how many candidates
 * (at the front of s->cands, sorted) remain; s->cut_sum is the mass of the
 * whole vocabulary when a top-p search needed it. Only for a cut: without
 * one the draw walks the vocabulary in id order.
 */
enum { REACH_NB = 128, REACH_TOP = 32, REACH_NAN = 255 };

/* Bucket of value x (mx the largest, scale REACH_NB over the finite range):
 * REACH_NAN for NaN; -inf is the last bucket. */
static inline uint32_t reach_bucket(float x, float mx, float scale)
{
    if (x != x)
        return REACH_NAN;
    if (x == -INFINITY)
        return REACH_NB - 1;
    const uint32_t b = (uint32_t)((mx - x) * scale);
    return b < REACH_NB ? b : REACH_NB - 1;
}

#if defined(__AVX512F__)
static inline __m512i reach_bucket16(__m512 x, __m512 vmx, __m512 vscale)
{
    /* (mx - x) * scale >= 0; -inf gives +inf, which converts to all ones */
    __m512i b = _mm512_cvttps_epu32(_mm512_mul_ps(_mm512_sub_ps(vmx, x), vscale));
    b = _mm512_min_epu32(b, _mm512_set1_epi32(REACH_NB - 1));
    return _mm512_mask_mov_epi32(b, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                                 _mm512_set1_epi32(REACH_NAN));
}

static inline __m512 reach_mass16(__m512 x, __m512 vmx)
{
    const __mmask16 some = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_GT_OQ);
    return _mm512_maskz_mov_ps(some, hr_exp512(_mm512_sub_ps(x, vmx)));
}
#endif

/* Adds the mass e^(x - mx) of the values whose bucket is in [lo, hi) to
 * their bucket; returns the mass of every value (double sums of 8). NaN and
 * -inf values have none. */
static double reach_scatter(const float *lv, uint32_t n, float mx, float scale, uint32_t lo,
                            uint32_t hi, double mass[REACH_NB])
{
    double total = 0.0;
    uint32_t i = 0;
#if defined(__AVX512F__)
    const __m512 vmx = _mm512_set1_ps(mx), vscale = _mm512_set1_ps(scale);
    const __m512i vlo = _mm512_set1_epi32((int)lo), vhi = _mm512_set1_epi32((int)hi);
    __m512d t0 = _mm512_setzero_pd(), t1 = _mm512_setzero_pd();
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(lv + i);
        const __m512i b = reach_bucket16(x, vmx, vscale);
        const __m512 e = reach_mass16(x, vmx);
        t0 = _mm512_add_pd(t0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        t1 = _mm512_add_pd(t1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
        uint32_t m = _mm512_cmp_epu32_mask(b, vlo, _MM_CMPINT_NLT) &
                     _mm512_cmp_epu32_mask(b, vhi, _MM_CMPINT_LT);
        if (!m)
            continue;
        uint32_t bb[16];
        float ee[16];
        _mm512_storeu_si512(bb, b);
        _mm512_storeu_ps(ee, e);
        for (; m; m &= m - 1) {
            const uint32_t j = (uint32_t)__builtin_ctz(m);
            mass[bb[j]] += ee[j];
        }
    }
    total = _mm512_reduce_add_pd(_mm512_add_pd(t0, t1));
#endif
    for (; i < n; i++) {
        const uint32_t b = reach_bucket(lv[i], mx, scale);
        const float e = b == REACH_NAN || lv[i] == -INFINITY ? 0.0f : expf(lv[i] - mx);
        total += e;
        if (b >= lo && b < hi)
            mass[b] += e;
    }
    return total;
}

/* The smallest finite value (mx when there is none). */
static float min_finite(const float *l, uint32_t n, float mx)
{
    float mn = mx;
    uint32_t i = 0;
#if defined(__AVX512F__)
    __m512 vm = _mm512_set1_ps(mx);
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(l + i);
        const __mmask16 fin = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
        vm = _mm512_mask_min_ps(vm, fin, vm, x);
    }
    mn = _mm512_reduce_min_ps(vm);
#endif
    for (; i < n; i++)
        if (l[i] == l[i] && l[i] != -INFINITY && l[i] < mn)
            mn = l[i];
    return mn;
}

/* Candidates i with keep(i) into s->cands in id order; how many. */
#define REACH_GATHER(s, lv, n, k, KEEP16, KEEP1)                                                   \
    do {                                                                                           \
        uint32_t i_ = 0;                                                                           \
        REACH_GATHER16(s, lv, n, k, i_, KEEP16);                                                   \
        for (; i_ < (n); i_++)                                                                     \
            if (KEEP1(lv[i_]))                                                                     \
                (s)->cands[(k)++] = (struct cand){(int32_t)i_, lv[i_]};                            \
    } while (0)
#if defined(__AVX512F__)
#define REACH_GATHER16(s, lv, n, k, i_, KEEP16)                                                    \
    for (; i_ + 16 <= (n); i_ += 16) {                                                             \
        const __m512 x_ = _mm512_loadu_ps(lv + i_);                                                \
        for (uint32_t m_ = (uint32_t)(KEEP16(x_)); m_; m_ &= m_ - 1) {                             \
            const uint32_t j_ = i_ + (uint32_t)__builtin_ctz(m_);                                  \
            (s)->cands[(k)++] = (struct cand){(int32_t)j_, lv[j_]};                                \
        }                                                                                          \
    }
#else
#define REACH_GATHER16(s, lv, n, k, i_, KEEP16)
#endif

/* Byte d of a logit's sort key: ascending keys are logits descending. */
static inline uint32_t digit_of(float logit, int d)
{
    const float x = logit + 0.0f; /* -0 sorts with +0 */
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    u = ~(u & 0x80000000u ? ~u : u | 0x80000000u);
    return (u >> (8 * d)) & 255;
}

/* Sorts s->cands[0..k), gathered in id order, as cmp_cand_desc does. A
 * large nucleus (a broad distribution: thousands of ids) took most of a
 * draw in qsort; an LSD radix sort on the logit's order-preserving bits,
 * 8 bits a pass, is stable, so ties stay in id order as the comparison
 * puts them. Its buffer is s->probs (room for n_vocab candidates), free
 * until draw_cut; qsort for small k. */
static void sort_gathered(struct hr_sampler *s, uint32_t k)
{
    if (k < 256) {
        qsort(s->cands, k, sizeof(*s->cands), cmp_cand_desc);
        return;
    }
    struct cand *a = s->cands, *b = (struct cand *)(void *)s->probs;
    uint32_t count[4][256] = {{0}};
    for (uint32_t i = 0; i < k; i++)
        for (int d = 0; d < 4; d++)
            count[d][digit_of(a[i].logit, d)]++;
    for (int d = 0; d < 4; d++) {
        if (count[d][digit_of(a[0].logit, d)] == k)
            continue; /* one value of this digit for all (the sign and exponent, often) */
        uint32_t at = 0;
        for (int v = 0; v < 256; v++) {
            const uint32_t c = count[d][v];
            count[d][v] = at;
            at += c;
        }
        for (uint32_t i = 0; i < k; i++)
            b[count[d][digit_of(a[i].logit, d)]++] = a[i];
        struct cand *t = a;
        a = b, b = t;
    }
    if (a != s->cands) /* an odd number of passes ran */
        memcpy(s->cands, a, (size_t)k * sizeof(*a));
}

static uint32_t sort_reachable(struct hr_sampler *s, const float *lv, uint32_t n, float mx)
{
    const struct hr_sampler_params *p = &s->p;
    uint32_t k = 0;
    if (p->top_p < 1.0f) {
        /* The nucleus of a peaked distribution lies in the top buckets:
         * the first pass sums every mass (16 at a time, in double) but
         * adds per bucket only the values of the top REACH_TOP buckets,
         * few; the rest are bucketed only if the top ones hold less than
         * top_p (a flat distribution). */
        double mass[REACH_NB] = {0}, total, cum;
        const float mn = min_finite(lv, n, mx);
        const float scale = mx > mn ? (float)REACH_NB / (mx - mn) : 0.0f;
        total = reach_scatter(lv, n, mx, scale, 0, REACH_TOP, mass);
        uint32_t last = 0;
        for (bool all = false;; all = true) {
            cum = 0.0;
            for (last = 0; last < REACH_NB; last++) {
                if ((cum += mass[last]) >= p->top_p * total)
                    break;
            }
            if (last < REACH_TOP || all)
                break;
            reach_scatter(lv, n, mx, scale, REACH_TOP, REACH_NB, mass);
        }
        s->cut_sum = total;
        s->has_cut_sum = true;
        last = last < REACH_NB ? last : REACH_NB - 1;
#if defined(__AVX512F__)
        const __m512 vmx = _mm512_set1_ps(mx), vscale = _mm512_set1_ps(scale);
        const __m512i vlast = _mm512_set1_epi32((int)last);
#define KEEP16_P(x) _mm512_cmp_epu32_mask(reach_bucket16(x, vmx, vscale), vlast, _MM_CMPINT_LE)
#endif
#define KEEP1_P(x) (reach_bucket(x, mx, scale) <= last)
        REACH_GATHER(s, lv, n, k, KEEP16_P, KEEP1_P);
    } else { /* min-p */
#if defined(__AVX512F__)
        const __m512 vmx = _mm512_set1_ps(mx), vmin = _mm512_set1_ps(p->min_p);
#define KEEP16_M(x) _mm512_cmp_ps_mask(reach_mass16(x, vmx), vmin, _CMP_GE_OQ)
#endif
#define KEEP1_M(x) ((x) != -INFINITY && expf((x) - mx) >= p->min_p)
        REACH_GATHER(s, lv, n, k, KEEP16_M, KEEP1_M);
    }
    sort_gathered(s, k);
    return k;
}

/* The first id of the largest logit: a strict > scan's answer from l[0]
 * (NaNs never win; a NaN l[0] does, as the scan would keep it).
 *
 * In one pass: each SIMD lane keeps its largest value and that value's
 * first index (strict >, so the first of its own subsequence), then the
 * lanes' winners are merged by value, ties to the lower index. A 150K-token
 * vocabulary's scan had been eight running maxima then a search for the
 * first equal value, which gcc -O2 compiled to scalar code with the maxima
 * in memory: 140 us a token, a quarter of the engine thread at 32 streams
 * of the CPU demo model and about 5 ms of every 32-stream step of the 8B
 * model on a GPU (between steps: the logits come back to host memory). */
#if defined(__AVX512F__)
#define ARGMAX_LANES 64 /* 4 vectors of 16: four independent chains */
static void argmax_lanes(const float *l, uint32_t n, float *mv, int32_t *mi, uint32_t *done)
{
    __m512 m[4];
    __m512i ix[4];
    const __m512i step = _mm512_set1_epi32(64);
    for (int v = 0; v < 4; v++) {
        m[v] = _mm512_set1_ps(l[0]);
        ix[v] = _mm512_setzero_si512();
    }
    __m512i cur[4];
    for (int v = 0; v < 4; v++)
        cur[v] = _mm512_add_epi32(_mm512_set1_epi32(16 * v),
                                  _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                    13, 14, 15));
    uint32_t i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int v = 0; v < 4; v++) {
            const __m512 x = _mm512_loadu_ps(l + i + 16 * v);
            const __mmask16 gt = _mm512_cmp_ps_mask(x, m[v], _CMP_GT_OQ);
            m[v] = _mm512_mask_mov_ps(m[v], gt, x);
            ix[v] = _mm512_mask_mov_epi32(ix[v], gt, cur[v]);
            cur[v] = _mm512_add_epi32(cur[v], step);
        }
    }
    for (int v = 0; v < 4; v++) {
        _mm512_storeu_ps(mv + 16 * v, m[v]);
        _mm512_storeu_si512(mi + 16 * v, ix[v]);
    }
    *done = i;
}
#elif defined(__AVX2__)
#include <immintrin.h>
#define ARGMAX_LANES 32 /* 4 vectors of 8 */
static void argmax_lanes(const float *l, uint32_t n, float *mv, int32_t *mi, uint32_t *done)
{
    __m256 m[4];
    __m256i ix[4], cur[4];
    const __m256i step = _mm256_set1_epi32(32);
    for (int v = 0; v < 4; v++) {
        m[v] = _mm256_set1_ps(l[0]);
        ix[v] = _mm256_setzero_si256();
        cur[v] = _mm256_add_epi32(_mm256_set1_epi32(8 * v), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int v = 0; v < 4; v++) {
            const __m256 x = _mm256_loadu_ps(l + i + 8 * v);
            const __m256 gt = _mm256_cmp_ps(x, m[v], _CMP_GT_OQ);
            m[v] = _mm256_blendv_ps(m[v], x, gt);
            ix[v] = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(ix[v]),
                                                         _mm256_castsi256_ps(cur[v]), gt));
            cur[v] = _mm256_add_epi32(cur[v], step);
        }
    }
    for (int v = 0; v < 4; v++) {
        _mm256_storeu_ps(mv + 8 * v, m[v]);
        _mm256_storeu_si256((__m256i *)(mi + 8 * v), ix[v]);
    }
    *done = i;
}
#else
#define ARGMAX_LANES 1
static void argmax_lanes(const float *l, uint32_t n, float *mv, int32_t *mi, uint32_t *done)
{
    (void)n;
    mv[0] = l[0], mi[0] = 0, *done = 0;
}
#endif

static int32_t argmax(const float *l, uint32_t n)
{
    float mv[ARGMAX_LANES];
    int32_t mi[ARGMAX_LANES];
    uint32_t i;
    argmax_lanes(l, n, mv, mi, &i);
    float best = mv[0];
    int32_t at = mi[0];
    for (int j = 1; j < ARGMAX_LANES; j++)
        if (mv[j] > best || (mv[j] == best && mi[j] < at))
            best = mv[j], at = mi[j];
    for (; i < n; i++) /* the tail, after every lane's indices */
        if (l[i] > best)
            best = l[i], at = (int32_t)i;
    return at;
}

/* Offers candidate i to the min-heap h of k (full): it enters only if it
 * sorts before h[0], the worst kept. */
static inline void heap_offer(struct cand *h, uint32_t k, const struct cand c)
{
    if (!(c.logit > h[0].logit))
        return; /* equal logits: the later id sorts after */
    uint32_t j = 0; /* sift down */
    for (;;) {
        uint32_t a = 2 * j + 1, b = a + 1, w = j;
        const struct cand *wc = &c;
        if (a < k && cmp_cand_desc(&h[a], wc) > 0)
            w = a, wc = &h[a];
        if (b < k && cmp_cand_desc(&h[b], wc) > 0)
            w = b;
        if (w == j)
            break;
        h[j] = h[w];
        j = w;
    }
    h[j] = c;
}

/* The k best candidates (cmp_cand_desc's order: ties by id) into
 * s->cands[0..k), unordered, in one pass over the logits: each either
 * misses the k-th best so far (one compare, almost all of them) or
 * replaces it in a min-heap: the k best of a full sort. NaN values are
 * never candidates (fewer than k when fewer are numbers); returns how many. */
static uint32_t heap_top(struct hr_sampler *s, const float *l, uint32_t n, uint32_t k)
{
    struct cand *h = s->cands;
    /* h[0] is the worst kept: a candidate enters only if it sorts before it */
    uint32_t i = 0, kept = 0;
    for (; i < n && kept < k; i++) {
        if (l[i] != l[i])
            continue; /* NaN: never a candidate */
        const struct cand c = {(int32_t)i, l[i]};
        uint32_t j = kept++; /* sift up */
        while (j > 0 && cmp_cand_desc(&h[(j - 1) / 2], &c) < 0) {
            h[j] = h[(j - 1) / 2];
            j = (j - 1) / 2;
        }
        h[j] = c;
    }
#if defined(__AVX512F__)
    /* 16 at a time against the worst kept: almost every vector misses it
     * (a scalar compare a logit was 0.3 ms of a 151,936-token draw) */
    for (; i + 16 <= n; i += 16)
        for (uint32_t m = _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i), _mm512_set1_ps(h[0].logit),
                                             _CMP_GT_OQ);
             m; m &= m - 1) {
            const uint32_t j = i + (uint32_t)__builtin_ctz(m);
            heap_offer(h, k, (struct cand){(int32_t)j, l[j]});
        }
#endif
    for (; i < n; i++)
        heap_offer(h, k, (struct cand){(int32_t)i, l[i]});
    return kept;
}

/* ---- the draw from the whole vocabulary (no cut) --------------------------
 *
 * The APIs' default (temperature 1, no top-k, top-p or min-p) draws from
 * every token. Copying the vocabulary into candidates, a libm expf each
 * and two serial double sums cost 1.2 ms a token on a 151,936-token
 * vocabulary: at 32 streams the engine thread sampled four times as long
 * as it stepped (the CPU demo model; on a GPU 32 such draws are about five
 * 8B decode steps). Here the weights come from the logits directly, e^x 16
 * at a time, summed per block of 64 (f32 lanes, then the blocks in double);
 * the draw walks the blocks' sums, then one block's weights (without
 * AVX-512: libm's expf and one walk, as before). The same distribution,
 * walked in id order as before; for a given seed the tokens can differ
 * between the two builds (the exponential's last bits). NaN logits weigh
 * nothing (before, one NaN made every draw the last id); if any logit is
 * +inf the first such id is drawn; if none has weight, id 0. With
 * penalties the values are s->probs (penalize()) and the weights replace
 * them in place. */

/* The largest logit, NaNs ignored (-inf when every logit is NaN or -inf). */
static float max_logit(const float *l, uint32_t n)
{
    float mx = -INFINITY;
    uint32_t i = 0;
#if defined(__AVX512F__)
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(l + i);
        vm = _mm512_mask_mov_ps(vm, _mm512_cmp_ps_mask(x, vm, _CMP_GT_OQ), x);
    }
    mx = _mm512_reduce_max_ps(vm);
#endif
    for (; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    return mx;
}

/* The largest value into *mx; false when the extremes decide the draw
 * (*id): nothing has weight (id 0), or some value is +inf (the first: the
 * weights are 0 but these). */
static bool finite_max(const float *l, uint32_t n, float *mx, int32_t *id)
{
    *mx = max_logit(l, n);
    *id = 0;
    if (*mx == INFINITY)
        while (l[*id] != INFINITY)
            (*id)++;
    return *mx != -INFINITY && *mx != INFINITY;
}

static int32_t draw_all(struct hr_sampler *s, const float *l, uint32_t n)
{
    float mx;
    int32_t id;
    if (!finite_max(l, n, &mx, &id))
        return id;
    float *w = s->probs;
    double total = 0.0;
    uint32_t i = 0;
#if defined(__AVX512F__)
    /* e^((l - mx) / T) 16 at a time, summed per block of 64 */
    enum { BLOCK = 64 };
    const __m512 vmx = _mm512_set1_ps(mx), vit = _mm512_set1_ps(1.0f / s->p.temperature);
    float *bsum = (float *)s->cands; /* n / 64 block sums */
    const uint32_t nb = n / BLOCK;
    for (uint32_t b = 0; b < nb; b++) {
        __m512 acc = _mm512_setzero_ps();
        for (uint32_t j = b * BLOCK; j < (b + 1) * BLOCK; j += 16) {
            const __m512 x = _mm512_loadu_ps(l + j);
            /* a NaN or -inf logit weighs nothing (hr_exp512 gives -inf a
             * tiny finite value) */
            const __mmask16 some = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_GT_OQ);
            const __m512 e = _mm512_maskz_mov_ps(
                some, hr_exp512(_mm512_mul_ps(_mm512_sub_ps(x, vmx), vit)));
            _mm512_storeu_ps(w + j, e);
            acc = _mm512_add_ps(acc, e);
        }
        bsum[b] = _mm512_reduce_add_ps(acc);
        total += bsum[b];
    }
    i = nb * BLOCK;
#endif
    for (uint32_t j = i; j < n; j++) {
        w[j] = l[j] == l[j] ? expf((l[j] - mx) / s->p.temperature) : 0.0f;
        total += w[j];
    }
    const double r = hr_rng_uniform(&s->rng) * total;
    double acc = 0.0;
#if defined(__AVX512F__)
    uint32_t b = 0;
    while (b < nb && r >= acc + bsum[b]) /* whole blocks below r */
        acc += bsum[b++];
    i = b * BLOCK;
#endif
    int32_t last = -1;
    for (; i < n; i++) {
        if (w[i] > 0.0f)
            last = (int32_t)i;
        acc += w[i];
        if (r < acc)
            return (int32_t)i;
    }
    /* r at the very top (rounding): the last weighed id */
    return last >= 0 ? last : (int32_t)n - 1;
}

static int32_t draw_cut(struct hr_sampler *s, uint32_t n, float mx);

/* The logits with the repetition penalties over the history window, in
 * s->probs (llama.cpp's rule: divide positive logits, multiply negative
 * ones, then subtract the count-based terms). Only the history's tokens
 * change; every path then reads these values as it reads raw logits. */
static const float *penalize(struct hr_sampler *s, const float *logits)
{
    const struct hr_sampler_params *p = &s->p;
    float *v = s->probs;
    memcpy(v, logits, (size_t)s->n_vocab * sizeof(*v));
    for (uint32_t h = 0; h < s->n_hist; h++) {
        const int32_t t = s->history[h];
        const uint32_t c = s->counts[t];
        /* Apply once per distinct token: after the first application the
         * value differs from the raw logit, unless the penalty is a no-op,
         * and then applying it again changes nothing either. */
        if (c == 0 || logits[t] != v[t])
            continue;
        if (v[t] <= 0.0f)
            v[t] *= p->repeat_penalty;
        else
            v[t] /= p->repeat_penalty;
        v[t] -= (float)c * p->frequency_penalty + (float)(c > 0) * p->presence_penalty;
    }
    return v;
}

int32_t hr_sampler_sample(struct hr_sampler *s, const float *logits)
{
    const struct hr_sampler_params *p = &s->p;
    const uint32_t V = s->n_vocab;
    /* Nothing copies the vocabulary into candidates: the paths read the
     * values (s->probs holds the penalized ones; each path is done with
     * them before it writes s->probs again). */
    const float *lv = s->n_hist ? penalize(s, logits) : logits;
    if (p->temperature <= 0.0f)
        return argmax(lv, V);
    const bool cut_k = p->top_k > 0 && (uint32_t)p->top_k < V;
    if (!cut_k && p->top_p >= 1.0f && p->min_p <= 0.0f)
        return draw_all(s, lv, V); /* in place over s->probs: each weight replaces its value */
    float mx;
    int32_t id;
    if (!finite_max(lv, V, &mx, &id))
        return id;
    s->has_cut_sum = false;
    if (!cut_k)
        return draw_cut(s, sort_reachable(s, lv, V, mx), mx);
    const uint32_t k = heap_top(s, lv, V, (uint32_t)p->top_k);
    qsort(s->cands, k, sizeof(*s->cands), cmp_cand_desc);
    return draw_cut(s, k, mx);
}

/* The draw from s->cands[0..n), sorted best first (mx the best logit):
 * the top-p and min-p cuts on them (at temperature 1, as llama.cpp's
 * chain), then the temperature, then the walk in that order. */
static int32_t draw_cut(struct hr_sampler *s, uint32_t n, float mx)
{
    const struct hr_sampler_params *p = &s->p;
    /* Softmax at temperature 1 for the top-p / min-p cuts (only they need it). */
    double sum = 0.0;
    if (p->top_p < 1.0f || p->min_p > 0.0f)
        for (uint32_t i = 0; i < n; i++) {
            s->probs[i] = expf(s->cands[i].logit - mx);
            sum += s->probs[i];
        }
    if (s->has_cut_sum)
        sum = s->cut_sum; /* the mass of the whole vocabulary, not only the sorted part */
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        uint32_t keep = n;
        for (uint32_t i = 0; i < n; i++) {
            cum += s->probs[i] / sum;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        /* probs[0] is the maximum (1 before normalization). */
        uint32_t keep = 1;
        while (keep < n && s->probs[keep] >= p->min_p * s->probs[0])
            keep++;
        n = keep;
    }
    /* Temperature, then the draw. */
    sum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        s->probs[i] = expf((s->cands[i].logit - mx) / p->temperature);
        sum += s->probs[i];
    }
    double r = hr_rng_uniform(&s->rng) * sum, acc = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        acc += s->probs[i];
        if (r < acc)
            return s->cands[i].id;
    }
    return s->cands[n - 1].id;
}

uint32_t hr_top_logprobs(const float *logits, uint32_t n_vocab, uint32_t k, int32_t *ids,
                         float *logprobs)
{
    if (k > n_vocab)
        k = n_vocab;
    float mx = logits[0];
    for (uint32_t i = 1; i < n_vocab; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double sum = 0.0;
    for (uint32_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    /* Insertion into a small sorted list: k is small (<= 20 in practice). */
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (n == k && l <= logits[ids[n - 1]])
            continue;
        uint32_t j = n < k ? n++ : k - 1;
        while (j > 0 && logits[ids[j - 1]] < l) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = (int32_t)i;
    }
    for (uint32_t j = 0; j < n; j++)
        logprobs[j] = (float)((double)logits[ids[j]] - lse);
    return n;
}
