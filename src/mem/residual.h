/*
 * residual.h - the residual tracker: learns, from measurement, the memory a
 * step uses beyond what the plan accounted for (DESIGN.md 4.5).
 *
 * Everything the engine allocates for a step is planned exactly; what is
 * left (libc heap growth, allocator slack, pages the kernel charges late) is
 * the residual, and only it is predicted from history. The algorithm is the
 * seed server's (../shared/seeds/), kept faithfully including the two gate
 * corners its maintainer fixed after merging:
 *
 * After each step the caller feeds d = (measured_post - measured_pre) -
 * (accounted_post - accounted_pre) and the step's prefill tokens n:
 *
 *   1. d < 0: a release. Remember -d as the one-shot reclaim charge
 *      (replacing an older one). This happens before any gate below, so a
 *      release on a tail chunk smaller than the minimum chunk is remembered.
 *   2. d > 0: clear the charge (the pool has been reallocated), also when the
 *      sample is then skipped for the rate.
 *   3. n < chunk_min, or d <= 0: no rate sample (counted as skipped).
 *   4. rate = d / n. The first rate sample seeds the EWMA; later ones blend
 *      with alpha 0.3, except a rate over 8x the EWMA, which is counted as an
 *      outlier and not blended, so one pool reallocation does not poison the
 *      average. Every rate sample, outlier or not, becomes `last_rate`: the
 *      seed's large reallocations are real and the next chunk should expect
 *      one as big as the last.
 *
 *   predict(n) = max(max(last_rate, ewma) x n, static(n), static(n) + charge)
 *
 * The charge is compared with, never added to, the rate prediction: when
 * the last rate already covers the reallocation (raw-last 11.83 GiB, static
 * 4.11, release 6.86), the answer stays 11.83, not 18.69. static(n) is the
 * modelled cost of n tokens; for the residual it is small (a per-token
 * constant, 0 if none).
 *
 * Not thread-safe: a tracker belongs to its governor, which holds its lock
 * around every call.
 */
#ifndef HR_MEM_RESIDUAL_H
#define HR_MEM_RESIDUAL_H

#include <stdbool.h>
#include <stdint.h>

#define HR_MEM_RESIDUAL_ALPHA       0.3
#define HR_MEM_RESIDUAL_OUTLIER_MUL 8.0

struct hr_mem_residual {
    /* Configuration (set by _init, kept by _reset). */
    uint32_t chunk_min_tokens;     /* rate samples only from chunks this large */
    double static_bytes_per_token; /* static(n) = n x this */
    /* State. */
    bool seeded; /* the EWMA has had its first sample */
    double ewma_bytes_per_token;
    double last_rate_bytes_per_token; /* the latest rate sample, outlier or not */
    uint64_t charge_bytes;            /* the one-shot reclaim charge; 0 = none */
    /* Counts, for logs and tests. */
    uint64_t n_samples;  /* rate samples taken (blended or outlier) */
    uint64_t n_outliers; /* rate samples over 8x the EWMA, not blended */
    uint64_t n_skipped;  /* observations that gave no rate sample */
    uint64_t n_releases; /* observations with d < 0 */
};

void hr_mem_residual_init(struct hr_mem_residual *t, uint32_t chunk_min_tokens,
                          double static_bytes_per_token);

/* Forgets every sample and the charge; keeps the configuration. */
void hr_mem_residual_reset(struct hr_mem_residual *t);

/* Feeds one step: n_tokens prefill tokens, residual delta d in bytes. */
void hr_mem_residual_observe(struct hr_mem_residual *t, uint32_t n_tokens, int64_t delta_bytes);

/* predict(n) with static(n) = n x static_bytes_per_token. Saturates at UINT64_MAX. */
uint64_t hr_mem_residual_predict(const struct hr_mem_residual *t, uint32_t n_tokens);

/* predict(n) with static(n) given by the caller (for a richer static model). */
uint64_t hr_mem_residual_predict_with(const struct hr_mem_residual *t, uint32_t n_tokens,
                                      uint64_t static_bytes);

#endif
