/*
 * bench-gguf - how long opening and validating a GGUF file takes.
 *
 * `headroom serve` opens its model once, but `headroom info` and every test
 * open files all the time, and a 150k-token vocabulary is 150k strings to
 * check. Prints one machine-readable line per file:
 *   bench gguf_open file=F bytes=N runs=R median_ms=X min_ms=Y
 * Usage: bench-gguf FILE... (default runs 21, HR_BENCH_RUNS to change).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/sys.h"
#include "gguf/gguf.h"
#include "bench.h"

int main(int argc, char **argv)
{
    int runs = getenv("HR_BENCH_RUNS") ? atoi(getenv("HR_BENCH_RUNS")) : 21;
    if (runs < 1)
        runs = 1;
    double *t = malloc(sizeof(double) * (size_t)runs);
    for (int i = 1; i < argc; i++) {
        uint64_t bytes = 0;
        for (int r = 0; r < runs; r++) {
            struct hr_err err;
            struct hr_gguf *g = NULL;
            double t0 = (hr_now_seconds() * 1e3);
            if (hr_gguf_open(argv[i], &g, &err) != HR_OK) {
                fprintf(stderr, "bench-gguf: %s: %s\n", argv[i], err.msg);
                free(t);
                return 1;
            }
            t[r] = (hr_now_seconds() * 1e3) - t0;
            bytes = hr_gguf_file_size(g);
            hr_gguf_close(g);
        }
        bench_sort(t, (size_t)runs);
        printf("bench gguf_open file=%s bytes=%llu runs=%d median_ms=%.3f min_ms=%.3f\n", argv[i],
               (unsigned long long)bytes, runs, t[runs / 2], t[0]);
    }
    free(t);
    return 0;
}
