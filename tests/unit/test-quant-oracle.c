/*
 * test-quant-oracle.c - our quantizers against llama.cpp's own, bit for bit.
 *
 * The oracle is ggml itself: libggml-base.so from the prebuilt CPU binaries of
 * node-llama-cpp@3.21.1 (installed by `scripts/deps.sh --oracle` into
 * tests/oracle/node_modules). We dlopen it and call ggml_quantize_chunk and
 * the f16/bf16 row converters on the same floats we quantize, then compare
 * bytes. Data: random normals at several scales, all-zero blocks, blocks
 * whose scaled values land exactly on .5 (rounding ties), huge and tiny
 * magnitudes, and rows of odd block counts.
 *
 * When the library is missing the tests are skipped with a message;
 * `make test` always installs it, so there they run.
 */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../tools/lib/rand.h"
#include "base/fp16.h"
#include "kernels/quant.h"

#define GGML_LIB                                                                                   \
    HR_SOURCE_DIR "/tests/oracle/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"           \
                  "libggml-base.so"

typedef size_t (*quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start,
                                    int64_t nrows, int64_t n_per_row, const float *imatrix);
typedef void (*row16_fn)(const float *x, uint16_t *y, int64_t n);

static void *g_lib;
static quantize_chunk_fn g_quantize_chunk;
static row16_fn g_fp16_row, g_bf16_row;

static int setup(void **state)
{
    (void)state;
    g_lib = dlopen(GGML_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) {
        fprintf(stderr, "# oracle library not found (%s); run scripts/deps.sh --oracle\n",
                dlerror());
        return 0;
    }
    g_quantize_chunk = (quantize_chunk_fn)dlsym(g_lib, "ggml_quantize_chunk");
    g_fp16_row = (row16_fn)dlsym(g_lib, "ggml_fp32_to_fp16_row");
    g_bf16_row = (row16_fn)dlsym(g_lib, "ggml_fp32_to_bf16_row_ref");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_lib)
        dlclose(g_lib);
    return 0;
}

/* Test rows: kind 0 normal(scale), 1 all zero, 2 ties, 3 extremes. */
static void fill(float *x, size_t n, int kind, double scale, uint64_t seed)
{
    struct hr_rng r;
    hr_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = (float)(hr_rng_normal(&r) * scale); break;
        case 1: x[i] = 0.0f; break;
        case 2:
            /* amax 127 makes the Q8_0 scale exactly 1, so k + 0.5 is an exact tie. */
            x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(hr_rng_uniform(&r) * 250) - 125) + 0.5f;
            break;
        default: {
            static const float ext[] = {1e-30f, -1e-30f, 3e38f, -3e38f, 65504.f, 65520.f,
                                        6e-8f, 1e-45f, -0.0f, 1.0f};
            x[i] = ext[(i + seed) % 10] * (float)(1 + i % 3);
        }
        }
    }
}

static void compare_type(enum hr_ggml_type type)
{
    if (!g_quantize_chunk)
        skip();
    static const size_t rows_len[] = {32, 64, 96, 4096, 32 * 37};
    const struct hr_ggml_type_info *ti = hr_ggml_type_info(type);
    int n_cases = 0;
    for (size_t li = 0; li < sizeof(rows_len) / sizeof(rows_len[0]); li++) {
        size_t n = rows_len[li];
        if (n % ti->block_elems)
            continue;
        for (int kind = 0; kind < 4; kind++) {
            for (int s = 0; s < 4; s++) {
                double scale = pow(10.0, s * 2 - 3); /* 1e-3 .. 1e3 */
                float *x = malloc(n * sizeof(float));
                size_t bytes = n / ti->block_elems * ti->block_bytes;
                uint8_t *ours = malloc(bytes), *theirs = malloc(bytes);
                fill(x, n, kind, scale, 1000 * li + 10 * (size_t)kind + (size_t)s);
                assert_int_equal(hr_quantize_row(type, x, ours, n), 0);
                size_t got = g_quantize_chunk((int)type, x, theirs, 0, 1, (int64_t)n, NULL);
                assert_int_equal(got, bytes);
                if (memcmp(ours, theirs, bytes) != 0) {
                    size_t i = 0;
                    while (ours[i] == theirs[i])
                        i++;
                    fail_msg("%s: n=%zu kind=%d scale=%g: first difference at byte %zu "
                             "(ours %02x, llama.cpp %02x)",
                             ti->name, n, kind, scale, i, ours[i], theirs[i]);
                }
                free(x);
                free(ours);
                free(theirs);
                n_cases++;
            }
        }
    }
    assert_true(n_cases > 0);
}

static void test_q8_0_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q8_0);
}

static void test_f16_bf16_rows_match_llama_cpp(void **state)
{
    (void)state;
    if (!g_fp16_row || !g_bf16_row)
        skip();
    size_t n = 1 << 16;
    float *x = malloc(n * sizeof(float));
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    /* Every f16 midpoint region and a wide random range. */
    struct hr_rng r;
    hr_rng_seed(&r, 7);
    for (size_t i = 0; i < n; i++) {
        if (i % 2)
            x[i] = hr_bits_f32((uint32_t)hr_rng_u64(&r)); /* any bit pattern, NaNs included */
        else
            x[i] = (float)(hr_rng_normal(&r) * pow(2.0, (double)(i % 40) - 20));
    }
    hr_convert_row_f16(x, a, n);
    g_fp16_row(x, b, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i]))
            continue; /* NaN payloads are not part of the contract */
        if (a[i] != b[i])
            fail_msg("f16: x=%a (0x%08x): ours %04x, llama.cpp %04x", (double)x[i],
                     hr_f32_bits(x[i]), a[i], b[i]);
    }
    hr_convert_row_bf16(x, a, n);
    g_bf16_row(x, b, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        if (a[i] != b[i])
            fail_msg("bf16: x=%a (0x%08x): ours %04x, llama.cpp %04x", (double)x[i],
                     hr_f32_bits(x[i]), a[i], b[i]);
    }
    free(x);
    free(a);
    free(b);
}

/* Without the oracle: dequantize(quantize(x)) stays within half a step of x. */
static void test_q8_0_roundtrip_error(void **state)
{
    (void)state;
    size_t n = 32 * 64;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    struct hr_block_q8_0 *q = malloc(n / 32 * sizeof(*q));
    fill(x, n, 0, 1.0, 3);
    hr_quantize_row_q8_0(x, q, n);
    hr_dequantize_row_q8_0(q, y, n);
    for (size_t b = 0; b < n / 32; b++) {
        float d = hr_f16_to_f32(q[b].d);
        for (size_t j = 0; j < 32; j++) {
            size_t i = b * 32 + j;
            assert_true(fabsf(x[i] - y[i]) <= 0.5f * d + 1e-3f * fabsf(x[i]) + 1e-7f);
        }
    }
    free(x);
    free(y);
    free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_matches_llama_cpp),
        cmocka_unit_test(test_f16_bf16_rows_match_llama_cpp),
        cmocka_unit_test(test_q8_0_roundtrip_error),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
