/*
 * residual.c - the residual tracker; the algorithm and its reasons are in
 * residual.h. The order of the steps in hr_mem_residual_observe is the
 * point of the module: sign handling first, then the gates.
 */
#include "mem/residual.h"

#include <string.h>

void hr_mem_residual_init(struct hr_mem_residual *t, uint32_t chunk_min_tokens,
                          double static_bytes_per_token)
{
    memset(t, 0, sizeof(*t));
    t->chunk_min_tokens = chunk_min_tokens;
    t->static_bytes_per_token = static_bytes_per_token > 0 ? static_bytes_per_token : 0;
}

void hr_mem_residual_reset(struct hr_mem_residual *t)
{
    hr_mem_residual_init(t, t->chunk_min_tokens, t->static_bytes_per_token);
}

void hr_mem_residual_observe(struct hr_mem_residual *t, uint32_t n_tokens, int64_t delta_bytes)
{
    /* 1-2: the sign, before any gate (the seed's follow-up fix). */
    if (delta_bytes < 0) {
        /* -INT64_MIN does not exist; the cast through uint64_t is exact. */
        t->charge_bytes = (uint64_t)0 - (uint64_t)delta_bytes;
        t->n_releases++;
    } else if (delta_bytes > 0) {
        t->charge_bytes = 0;
    }
    /* 3: the gates. */
    if (n_tokens == 0 || n_tokens < t->chunk_min_tokens || delta_bytes <= 0) {
        t->n_skipped++;
        return;
    }
    /* 4: the rate. */
    double rate = (double)delta_bytes / (double)n_tokens;
    t->n_samples++;
    t->last_rate_bytes_per_token = rate;
    if (!t->seeded) {
        t->ewma_bytes_per_token = rate;
        t->seeded = true;
    } else if (rate > HR_MEM_RESIDUAL_OUTLIER_MUL * t->ewma_bytes_per_token) {
        t->n_outliers++;
    } else {
        t->ewma_bytes_per_token =
            HR_MEM_RESIDUAL_ALPHA * rate + (1.0 - HR_MEM_RESIDUAL_ALPHA) * t->ewma_bytes_per_token;
    }
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t bytes_of(double v)
{
    /* 1.8e19 is just under 2^64; anything above saturates. */
    if (!(v > 0)) return 0;
    if (v >= 18446744073709549568.0) return UINT64_MAX;
    return (uint64_t)v;
}

uint64_t hr_mem_residual_predict_with(const struct hr_mem_residual *t, uint32_t n_tokens,
                                      uint64_t static_bytes)
{
    double rate = t->last_rate_bytes_per_token > t->ewma_bytes_per_token
                      ? t->last_rate_bytes_per_token
                      : t->ewma_bytes_per_token;
    uint64_t raw = bytes_of(rate * (double)n_tokens);
    uint64_t best = raw > static_bytes ? raw : static_bytes;
    uint64_t charged = sat_add(static_bytes, t->charge_bytes);
    return best > charged ? best : charged;
}

uint64_t hr_mem_residual_predict(const struct hr_mem_residual *t, uint32_t n_tokens)
{
    return hr_mem_residual_predict_with(t, n_tokens,
                                        bytes_of(t->static_bytes_per_token * (double)n_tokens));
}
