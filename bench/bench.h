/*
 * bench.h - what every benchmark program shares: sorting samples for the
 * medians and spreads they print.
 */
#ifndef HR_BENCH_BENCH_H
#define HR_BENCH_BENCH_H
#include <stdint.h>
#include <stdlib.h>

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts n samples ascending: the median is v[n / 2], the spread v[0], v[n - 1]. */
static inline void bench_sort(double *v, size_t n)
{
    qsort(v, n, sizeof(double), bench_cmp_double);
}

/* The greedy token: the first index of the largest of n logits. */
static inline int32_t bench_argmax(const float *l, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[b])
            b = i;
    return (int32_t)b;
}

#endif
