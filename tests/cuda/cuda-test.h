/*
 * cuda-test.h - the few helpers the GPU tests share. They are plain C
 * programs (no cmocka: the GPU host lacks our -dev packages) that print one
 * line per check and exit 0 when all passed, 1 when one failed, and 77
 * (skipped) when there is no CUDA device.
 */
#ifndef HR_TESTS_CUDA_TEST_H
#define HR_TESTS_CUDA_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

static int ct_failed, ct_passed;

/* Records one check; `fmt` describes it (printed either way). */
#define CT_CHECK(cond, ...)                                                                       \
    do {                                                                                          \
        if (cond) {                                                                               \
            ct_passed++;                                                                          \
            printf("  ok    ");                                                                   \
        } else {                                                                                  \
            ct_failed++;                                                                          \
            printf("  FAIL  ");                                                                   \
        }                                                                                         \
        printf(__VA_ARGS__);                                                                      \
        printf("\n");                                                                             \
        fflush(stdout);                                                                           \
    } while (0)

/* A CUDA call the test itself makes; a failure ends the program. */
#define CT_CUDA(call)                                                                             \
    do {                                                                                          \
        cudaError_t ce_ = (call);                                                                 \
        if (ce_ != cudaSuccess) {                                                                 \
            printf("  FAIL  %s: %s\n", #call, cudaGetErrorString(ce_));                          \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* Exits 77 when no device can run the tests. */
static inline void ct_require_device(const char *prog)
{
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n == 0) {
        printf("%s: skipped, no CUDA device (%s)\n", prog,
               ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        exit(77);
    }
}

static inline double ct_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int ct_finish(const char *prog)
{
    printf("%s: %d passed, %d failed\n", prog, ct_passed, ct_failed);
    return ct_failed ? 1 : 0;
}

#endif
