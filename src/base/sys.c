/* sys.c - monotonic clock, CPU times and peak RSS; see sys.h. */
#include "base/sys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double hr_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t hr_peak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %" SCNu64 " kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

void hr_cpu_times(double *all_s, double *self_s)
{
    *all_s = *self_s = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        unsigned long long v[8] = {0};
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) == 8)
            *all_s = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / 100.0;
        fclose(f);
    }
    f = fopen("/proc/self/stat", "r");
    if (f) {
        char buf[1024];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')');
        unsigned long long ut = 0, st = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            *self_s = (double)(ut + st) / 100.0;
        fclose(f);
    }
}

void hr_mem_touch(void *p, size_t n_bytes)
{
    const size_t page = 4096; /* the smallest x86-64 and arm64 page: never skips one */
    volatile uint8_t *b = p;
    for (size_t o = 0; o < n_bytes; o += page)
        b[o] = b[o];
    if (n_bytes)
        b[n_bytes - 1] = b[n_bytes - 1];
}

int hr_env_on(const char *name)
{
    const char *s = getenv(name);
    return !(s && !strcmp(s, "0"));
}
