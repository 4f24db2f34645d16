/*
 * rand.h - seeded, portable random numbers for generated test models.
 *
 * The same seed gives the same floats on every machine and build, so a test
 * can regenerate a model instead of storing it. splitmix64 seeds a
 * xoshiro256** state; normals come from Box-Muller in double precision.
 */
#ifndef HR_TOOLS_RAND_H
#define HR_TOOLS_RAND_H

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
