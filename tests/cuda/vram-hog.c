/*
 * vram-hog.c - another process growing on the GPU, for the squeeze test
 * (tests/cuda/squeeze-serve.sh): it makes its CUDA context, prints "ready"
 * and waits for a line on stdin; then takes device memory (cudaMalloc,
 * largest pieces first) until at most LEAVE MiB are free, and keeps taking
 * whatever frees up (every 2 ms) for HOLD seconds; then frees it all and
 * exits. It prints what it took.
 *
 *   vram-hog LEAVE_MIB HOLD_SECONDS
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t free_now(void)
{
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    return fr;
}

enum { MAX_PIECES = 4096 };
static void *pieces[MAX_PIECES];
static unsigned n_pieces;
static uint64_t taken;

/* One pass, largest pieces first, down to 2 MiB. */
static void take(uint64_t leave)
{
    for (uint64_t piece = 1ull << 30; piece >= (2ull << 20) && n_pieces < MAX_PIECES;) {
        if (free_now() < leave + piece || cudaMalloc(&pieces[n_pieces], piece) != cudaSuccess) {
            cudaGetLastError();
            piece /= 2;
            continue;
        }
        n_pieces++;
        taken += piece;
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: vram-hog LEAVE_MIB HOLD_SECONDS\n");
        return 2;
    }
    const uint64_t leave = strtoull(argv[1], NULL, 10) << 20;
    const double hold = atof(argv[2]);
    if (cudaFree(NULL) != cudaSuccess) {
        fprintf(stderr, "vram-hog: no CUDA device\n");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    const double t0 = now();
    take(leave);
    printf("took %.0f MiB, %.0f MiB free\n", taken / 1048576.0, free_now() / 1048576.0);
    fflush(stdout);
    const struct timespec tick = {0, 2000000};
    while (now() - t0 < hold) {
        take(leave);
        nanosleep(&tick, NULL);
    }
    printf("held %.0f MiB for %.1f s; releasing\n", taken / 1048576.0, now() - t0);
    fflush(stdout);
    for (unsigned i = 0; i < n_pieces; i++)
        cudaFree(pieces[i]);
    return 0;
}
