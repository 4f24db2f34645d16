/*
 * bench.h - what every benchmark program shares: sorting samples for the
 * medians and spreads they print.
 */
#ifndef HR_BENCH_BENCH_H
#define HR_BENCH_BENCH_H
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

#endif
