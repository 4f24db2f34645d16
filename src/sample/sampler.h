/*
 * sampler.h - turns a row of logits into the next token.
 *
 * The chain, in llama.cpp's default order: repetition / presence /
 * frequency penalties over the last `penalty_last_n` tokens, then top-k,
 * top-p, min-p, temperature, and a draw from the remaining distribution with
 * the sampler's own seeded generator. temperature <= 0 is greedy (argmax,
 * ties to the lowest id) and ignores the rest but the penalties.
 *
 * Reproducible: the same seed, logits and accepted tokens give the same
 * draws on any machine of the same build (the generator is xoshiro256**,
 * the arithmetic float in a fixed order). The draw from the whole
 * vocabulary (no top-k, top-p, min-p or penalty) takes its exponentials 16
 * at a time in AVX-512 builds and from libm's expf in others: the same
 * distribution, but a seed's tokens can differ between the two.
 *
 * Memory: hr_sampler_init allocates its candidate scratch (n_vocab entries)
 * and, when a penalty is on, its penalty history and per-token counts, once,
 * and touches all of it, so that what is resident is hr_sampler_bytes from
 * the start (the scheduler accounts it as request memory; a scratch paged in
 * lazily would make RSS drift from that figure depending on the sampling
 * settings); sampling allocates nothing. A sampler belongs to one request
 * and one thread at a time. hr_sampler_init_shared borrows the candidate
 * scratch (the vocabulary-sized part: 1.8 MB of a 152K vocabulary) from an
 * hr_sampler_scratch instead, for samplers that sample one at a time on one
 * thread (the scheduler's engine thread): a queued request then holds only
 * its own few bytes, not a vocabulary's worth.
 */
#ifndef HR_SAMPLE_SAMPLER_H
#define HR_SAMPLE_SAMPLER_H

#include <stdint.h>

#include "base/status.h"

struct hr_sampler_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    int32_t penalty_last_n;  /* tokens of history the penalties look at; 0: off */
    uint64_t seed;
};

/* llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalties. */
struct hr_sampler_params hr_sampler_defaults(void);

struct hr_sampler;

enum hr_status hr_sampler_init(const struct hr_sampler_params *p, uint32_t n_vocab,
                               struct hr_sampler **out, struct hr_err *err);
void hr_sampler_free(struct hr_sampler *s);
/* The bytes hr_sampler_init allocates for these settings and vocabulary. */
uint64_t hr_sampler_bytes(const struct hr_sampler_params *p, uint32_t n_vocab);

/* Candidate scratch that samplers made by hr_sampler_init_shared borrow;
 * it must outlive them, and they must sample one at a time. */
struct hr_sampler_scratch;
enum hr_status hr_sampler_scratch_new(uint32_t n_vocab, struct hr_sampler_scratch **out,
                                      struct hr_err *err);
void hr_sampler_scratch_free(struct hr_sampler_scratch *sc);
uint64_t hr_sampler_scratch_bytes(uint32_t n_vocab);
/* hr_sampler_init over a shared scratch of the same vocabulary; it then
 * allocates hr_sampler_shared_bytes. */
enum hr_status hr_sampler_init_shared(const struct hr_sampler_params *p, uint32_t n_vocab,
                                      struct hr_sampler_scratch *sc, struct hr_sampler **out,
                                      struct hr_err *err);
uint64_t hr_sampler_shared_bytes(const struct hr_sampler_params *p, uint32_t n_vocab);

/* Picks a token from `logits` (n_vocab floats, not modified). */
int32_t hr_sampler_sample(struct hr_sampler *s, const float *logits);

/* Records a token (prompt or generated) for the penalties. */
void hr_sampler_accept(struct hr_sampler *s, int32_t token);

/*
 * The k most likely tokens under the raw distribution (log-softmax of the
 * logits, before any sampling transform), most likely first. Writes k ids
 * and log-probabilities; returns how many were written (min(k, n_vocab)).
 */
uint32_t hr_top_logprobs(const float *logits, uint32_t n_vocab, uint32_t k, int32_t *ids,
                         float *logprobs);

#endif
