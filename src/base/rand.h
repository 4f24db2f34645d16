/*
 * rand.h - seeded, portable random numbers: the sampler's draws and the
 * generated test models' weights.
 *
 * The same seed gives the same numbers on every machine and build, so a test
 * can regenerate a model instead of storing it and a seeded request samples
 * the same tokens anywhere. splitmix64 seeds a xoshiro256** state; normals
 * come from Box-Muller in double precision. A struct hr_rng belongs to one
 * thread at a time.
 */
#ifndef HR_BASE_RAND_H
#define HR_BASE_RAND_H

#include <stdint.h>

struct hr_rng {
    uint64_t s[4];
};

void hr_rng_seed(struct hr_rng *r, uint64_t seed);
uint64_t hr_rng_u64(struct hr_rng *r);
double hr_rng_uniform(struct hr_rng *r); /* [0, 1) */
double hr_rng_normal(struct hr_rng *r);  /* mean 0, sd 1 */

/* FNV-1a of a string, to derive one stream per tensor name. */
uint64_t hr_hash_str(const char *s);

#endif
