/*
 * bench-membw - the machine's streaming read bandwidth, the ceiling of a
 * memory-bound decode step (every weight byte is read once per token).
 *
 *   bench-membw [--mib N] [--runs R]
 *
 * Reads a buffer of N MiB (default 1024, far larger than any cache) with 1
 * and with 2 threads, each thread summing its contiguous half (membw-read.h).
 * Prints the median of R runs (default 7) per thread count:
 *   bench membw threads=T mib=N runs=R gbps=MEDIAN min=.. max=.. foreign_cpus=..
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys.h"
#include "membw-read.h"
#include "bench.h"

struct part {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
};

static void *read_part(void *arg)
{
    struct part *pt = arg;
    pt->sum = membw_sum(pt->p, pt->n);
    return NULL;
}

int main(int argc, char **argv)
{
    size_t mib = 1024;
    int runs = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--mib") == 0)
            mib = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--runs") == 0)
            runs = atoi(argv[i + 1]);
    }
    if (mib == 0 || runs <= 0 || runs > 99) {
        fprintf(stderr, "usage: bench-membw [--mib N] [--runs R]\n");
        return 2;
    }
    const size_t n = mib << 17; /* uint64 words */
    uint64_t *buf = malloc(n * sizeof(uint64_t));
    if (!buf) {
        fprintf(stderr, "bench-membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n; i++) /* touch every page, and give the sum something to do */
        buf[i] = i;
    double gb[99];
    uint64_t check = 0;
    for (int threads = 1; threads <= 2; threads++) {
        double all0, self0, all1, self1;
        hr_cpu_times(&all0, &self0);
        const double w0 = hr_now_seconds();
        for (int r = 0; r < runs; r++) {
            struct part parts[2];
            pthread_t th[2];
            const double t0 = hr_now_seconds();
            for (int t = 0; t < threads; t++) {
                parts[t] = (struct part){.p = buf + n / (size_t)threads * (size_t)t,
                                         .n = n / (size_t)threads};
                if (pthread_create(&th[t], NULL, read_part, &parts[t]) != 0) {
                    fprintf(stderr, "bench-membw: cannot start a thread\n");
                    return 1;
                }
            }
            for (int t = 0; t < threads; t++) {
                pthread_join(th[t], NULL);
                check += parts[t].sum;
            }
            gb[r] = (double)(n * sizeof(uint64_t)) / (hr_now_seconds() - t0) / 1e9;
        }
        const double wall = hr_now_seconds() - w0;
        hr_cpu_times(&all1, &self1);
        const double foreign = ((all1 - all0) - (self1 - self0)) / wall;
        bench_sort(gb, (size_t)runs);
        printf("bench membw threads=%d mib=%zu runs=%d gbps=%.1f min=%.1f max=%.1f "
               "foreign_cpus=%.2f\n",
               threads, mib, runs, gb[runs / 2], gb[0], gb[runs - 1], foreign < 0 ? 0 : foreign);
        fflush(stdout);
    }
    free(buf);
    return check == 42 ? 3 : 0; /* keeps the sums live */
}
