/*
 * membw-read.h - the streaming read that bench-membw and bench-engine time:
 * each thread sums its contiguous share of the bytes with 32-byte loads into
 * four accumulators (enough loads in flight that the core is not the limit;
 * scalar 8-byte loads left two threads at ~32 GB/s where the engine's own
 * F16 decode reads 41). The sum is returned so the loads stay live.
 */
#ifndef HR_BENCH_MEMBW_READ_H
#define HR_BENCH_MEMBW_READ_H
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

__attribute__((target("avx2"))) static inline uint64_t membw_sum_avx2(const uint64_t *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t,
                        _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    uint64_t s = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++)
        s += p[i];
    return s;
}

/* Sums n 8-byte words at p (8-byte aligned). */
static inline uint64_t membw_sum(const uint64_t *p, size_t n)
{
    if (__builtin_cpu_supports("avx2"))
        return membw_sum_avx2(p, n);
    uint64_t s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += p[i + (size_t)j];
    for (; i < n; i++)
        s[0] += p[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

#endif
