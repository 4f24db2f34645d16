/*
 * test-quant-oracle.c - our quantizers and dot products against llama.cpp's
 * own: quantized bytes bit for bit, dot products to float rounding.
 *
 * The oracle is ggml itself: libggml-base.so from the prebuilt CPU binaries of
 * node-llama-cpp@3.21.1 (installed by `scripts/deps.sh --oracle` into
 * tests/oracle/node_modules). We dlopen it and call ggml_quantize_chunk and
 * the f16/bf16 row converters on the same floats we quantize, then compare
 * bytes. Data: random normals at several scales, all-zero blocks, blocks
 * whose scaled values land exactly on .5 (rounding ties), huge and tiny
 * magnitudes (infinities included), and rows of odd block counts; K-quants
 * (Q2_K .. Q6_K) and IQ4_XS on rows of 256, 512, 4096 and 256 * 19 values.
 *
 * The CPU backend is a second library, libggml-cpu-<variant>.so, one per
 * instruction-set level; llama.cpp loads the variant whose
 * ggml_backend_score() is highest on this CPU, and so do we (zen4 on the
 * project's machines). From it we take ggml_get_type_traits_cpu(type):
 * `from_float` of the vec-dot types (Q8_0, Q8_K, F16, BF16) is what llama.cpp
 * does to activations before a matmul, compared byte for byte with
 * hr_convert_act_row; `vec_dot` is its dot product, compared with our matmul
 * (m = 1, 4, 12, 20 tokens: every kernel shape) on every ISA this machine
 * runs, within float rounding of the sum of |terms|; `to_float` is its
 * dequantizer, compared value for value.
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

#include "base/rand.h"
#include "base/fp16.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

#define GGML_BINS HR_SOURCE_DIR "/tests/oracle/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"
#define GGML_LIB GGML_BINS "libggml-base.so"

typedef size_t (*quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start,
                                    int64_t nrows, int64_t n_per_row, const float *imatrix);
typedef void (*row16_fn)(const float *x, uint16_t *y, int64_t n);

/* ggml/include/ggml-cpu.h, struct ggml_type_traits_cpu (enum ggml_type is an int). */
typedef void (*from_float_fn)(const float *x, void *y, int64_t n);
typedef void (*vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                           size_t by, int nrc);
struct ggml_type_traits_cpu {
    from_float_fn from_float;
    vec_dot_fn vec_dot;
    int vec_dot_type;
    int64_t nrows;
};
typedef const struct ggml_type_traits_cpu *(*traits_fn)(int type);
/* ggml/include/ggml.h, struct ggml_type_traits (the part up to to_float). */
struct ggml_type_traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    void (*to_float)(const void *x, float *y, int64_t n);
};
typedef const struct ggml_type_traits *(*base_traits_fn)(int type);

static void *g_lib, *g_cpu;
static quantize_chunk_fn g_quantize_chunk;
static row16_fn g_fp16_row, g_bf16_row;
static traits_fn g_traits;
static base_traits_fn g_base_traits;
static char g_cpu_variant[32];

/* Loads the CPU backend variant llama.cpp's loader would pick: the highest
 * ggml_backend_score() (0 = this CPU cannot run it). */
static void load_cpu_backend(void)
{
    static const char *const variants[] = {
        "sapphirerapids", "zen4", "cooperlake", "cannonlake", "cascadelake", "icelake",
        "skylakex",       "alderlake", "haswell", "ivybridge", "sandybridge", "piledriver",
        "sse42",          "x64"};
    int best = 0;
    for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
        char path[1024];
        snprintf(path, sizeof(path), GGML_BINS "libggml-cpu-%s.so", variants[v]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        int (*score)(void) = (int (*)(void))dlsym(h, "ggml_backend_score");
        int sc = score ? score() : 0;
        if (sc > best) {
            if (g_cpu)
                dlclose(g_cpu);
            g_cpu = h;
            best = sc;
            snprintf(g_cpu_variant, sizeof(g_cpu_variant), "%s", variants[v]);
        } else {
            dlclose(h);
        }
    }
    if (!g_cpu)
        return;
    void (*init)(void) = (void (*)(void))dlsym(g_cpu, "ggml_cpu_init");
    if (init)
        init();
    g_traits = (traits_fn)dlsym(g_cpu, "ggml_get_type_traits_cpu");
    fprintf(stderr, "# ggml CPU backend: libggml-cpu-%s.so (score %d)\n", g_cpu_variant, best);
}

static int setup(void **state)
{
    (void)state;
    g_lib = dlopen(GGML_LIB, RTLD_NOW | RTLD_GLOBAL);
    if (!g_lib) {
        fprintf(stderr, "# oracle library not found (%s); run scripts/deps.sh --oracle\n",
                dlerror());
        return 0;
    }
    g_quantize_chunk = (quantize_chunk_fn)dlsym(g_lib, "ggml_quantize_chunk");
    g_fp16_row = (row16_fn)dlsym(g_lib, "ggml_fp32_to_fp16_row");
    g_bf16_row = (row16_fn)dlsym(g_lib, "ggml_fp32_to_bf16_row_ref");
    g_base_traits = (base_traits_fn)dlsym(g_lib, "ggml_get_type_traits");
    load_cpu_backend();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_cpu)
        dlclose(g_cpu);
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
    static const size_t rows_len[] = {32, 64, 96, 256, 512, 4096, 32 * 37, 256 * 19};
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

static void test_q4_0_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q4_0);
}

static void test_q4_1_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q4_1);
}

static void test_q5_0_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q5_0);
}

static void test_q5_1_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q5_1);
}

static void test_iq4_nl_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_IQ4_NL);
}

static void test_mxfp4_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_MXFP4);
}

static void test_q4_K_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q4_K);
}

static void test_q5_K_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q5_K);
}

static void test_q6_K_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q6_K);
}

static void test_q2_K_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q2_K);
}

static void test_q3_K_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_Q3_K);
}

static void test_iq4_xs_matches_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_IQ4_XS);
}

static void test_f16_bf16_f32_chunks_match_llama_cpp(void **state)
{
    (void)state;
    compare_type(HR_GGML_F16);
    compare_type(HR_GGML_BF16);
    compare_type(HR_GGML_F32);
}

/* The activation conversion (ggml-cpu's from_float of each vec-dot type). */
static void test_act_conversion_matches_ggml_cpu(void **state)
{
    (void)state;
    if (!g_traits)
        skip();
    static const enum hr_ggml_type types[] = {HR_GGML_Q8_0, HR_GGML_Q8_1, HR_GGML_Q8_K,
                                              HR_GGML_F16,  HR_GGML_BF16, HR_GGML_F32};
    static const size_t lens[] = {256, 512, 896, 4096, 256 * 19};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const struct hr_ggml_type_info *info = hr_ggml_type_info(types[ti]);
        int n_cases = 0;
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
            size_t n = lens[li];
            if (n % info->block_elems)
                continue;
            for (int kind = 0; kind < 4; kind++) {
                for (int s = 0; s < 4; s++) {
                    float *x = malloc(n * sizeof(float));
                    size_t bytes = n / info->block_elems * info->block_bytes;
                    uint8_t *ours = calloc(1, bytes), *theirs = calloc(1, bytes);
                    fill(x, n, kind, pow(10.0, s * 2 - 3), 7000 + 100 * li + 10 * (size_t)kind + (size_t)s);
                    assert_int_equal(hr_convert_act_row(types[ti], x, ours, n), 0);
                    g_traits((int)types[ti])->from_float(x, theirs, (int64_t)n);
                    if (memcmp(ours, theirs, bytes) != 0) {
                        size_t i = 0;
                        while (ours[i] == theirs[i])
                            i++;
                        fail_msg("from_float %s: n=%zu kind=%d scale=%g: first difference at "
                                 "byte %zu (ours %02x, ggml-cpu %02x)",
                                 info->name, n, kind, pow(10.0, s * 2 - 3), i, ours[i], theirs[i]);
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
}

/*
 * Dot products: ggml-cpu's vec_dot on (quantized weight row, converted
 * activations) against our matmul, on every ISA, for m = 1, 4, 12 and 20
 * tokens times 3 weight rows, so the decode kernels (one and several tokens
 * per pass) and the packed prefill kernels are all held to ggml. The integer
 * block sums are exact on both sides, so the only difference is the order of
 * float additions: we require |ours - ggml| <= 4e-6 * sum|terms| (an integer
 * block sum off by one would exceed that by far).
 */
static void test_vec_dot_matches_ggml_cpu(void **state)
{
    (void)state;
    if (!g_traits || !g_quantize_chunk)
        skip();
    static const enum hr_ggml_type types[] = {
        HR_GGML_F32,  HR_GGML_F16,  HR_GGML_BF16,   HR_GGML_Q8_0,  HR_GGML_Q4_0, HR_GGML_Q4_1,
        HR_GGML_Q5_0, HR_GGML_Q5_1, HR_GGML_IQ4_NL, HR_GGML_MXFP4, HR_GGML_Q4_K, HR_GGML_Q5_K,
        HR_GGML_Q6_K, HR_GGML_Q2_K, HR_GGML_Q3_K,   HR_GGML_IQ4_XS};
    static const size_t lens[] = {256, 512, 896, 4096, 4864};
    static const size_t ms[] = {1, 4, 12, 20};
    static const char *const isas[] = {"generic", "avx2", "avx512vnni"};
    const size_t n_out = 3;
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const enum hr_ggml_type wt = types[ti];
        const enum hr_ggml_type vt = hr_matmul_vec_dot_type(wt);
        const struct hr_ggml_type_info *wi = hr_ggml_type_info(wt), *vi = hr_ggml_type_info(vt);
        assert_int_equal(g_traits((int)wt)->vec_dot_type, (int)vt);
        double worst = 0;
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
            const size_t k = lens[li];
            if (k % wi->block_elems)
                continue;
            const size_t m_max = 20, rb = hr_row_bytes(wt, k);
            const size_t ab = k / vi->block_elems * vi->block_bytes;
            for (int trial = 0; trial < 3; trial++) {
                float *wf = malloc(n_out * k * sizeof(float)), *x = malloc(m_max * k * sizeof(float));
                float *wd = malloc(n_out * k * sizeof(float)), *ad = malloc(m_max * k * sizeof(float));
                uint8_t *wq = malloc(n_out * rb), *aq = calloc(m_max, ab);
                float *theirs = malloc(m_max * n_out * sizeof(float));
                float *ours = malloc(m_max * n_out * sizeof(float));
                void *act = aligned_alloc(64, hr_matmul_act_bytes(wt, m_max, k));
                fill(wf, n_out * k, 0, 0.05 * (trial + 1), 9000 + 10 * li + (size_t)trial);
                fill(x, m_max * k, 0, trial % 2 ? 3.0 : 0.3, 9500 + 10 * li + (size_t)trial);
                x[k / 3] = 40.0f; /* a spike: one large activation in token 0 */
                for (size_t r = 0; r < n_out; r++) {
                    g_quantize_chunk((int)wt, wf + r * k, wq + r * rb, 0, 1, (int64_t)k, NULL);
                    assert_int_equal(hr_dequantize_row(wt, wq + r * rb, wd + r * k, k), 0);
                }
                for (size_t i = 0; i < m_max; i++) {
                    g_traits((int)vt)->from_float(x + i * k, aq + i * ab, (int64_t)k);
                    assert_int_equal(hr_dequantize_row(vt, aq + i * ab, ad + i * k, k), 0);
                    for (size_t r = 0; r < n_out; r++)
                        g_traits((int)wt)->vec_dot((int)k, &theirs[i * n_out + r], 0, wq + r * rb,
                                                   0, aq + i * ab, 0, 1);
                }
                for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
                    const size_t m = ms[mi];
                    for (size_t is = 0; is < sizeof(isas) / sizeof(isas[0]); is++) {
                        if (!hr_kernels_force_isa(isas[is]))
                            continue;
                        hr_matmul_prepare(wt, x, m, k, act, 0, 1);
                        hr_matmul_compute(wt, wq, k, n_out, act, m, ours, n_out, 0, 1);
                        for (size_t i = 0; i < m; i++) {
                            for (size_t r = 0; r < n_out; r++) {
                                double mag = 0;
                                for (size_t j = 0; j < k; j++)
                                    mag += fabs((double)wd[r * k + j] * (double)ad[i * k + j]);
                                const double o = ours[i * n_out + r], t = theirs[i * n_out + r];
                                const double err = fabs(o - t) / (mag + 1e-30);
                                if (err > worst)
                                    worst = err;
                                if (!(err <= 4e-6))
                                    fail_msg("vec_dot %s x %s (%s) k=%zu m=%zu trial %d token %zu "
                                             "row %zu: ours %.9g, ggml-cpu %.9g (|diff| / "
                                             "sum|terms| = %.3g)",
                                             wi->name, vi->name, isas[is], k, m, trial, i, r, o, t,
                                             err);
                            }
                        }
                    }
                }
                hr_kernels_force_isa("best");
                free(wf);
                free(x);
                free(wd);
                free(ad);
                free(wq);
                free(aq);
                free(theirs);
                free(ours);
                free(act);
            }
        }
        fprintf(stderr, "# vec_dot %-4s x %-4s: max |ours - ggml| / sum|terms| = %.2e\n",
                wi->name, vi->name, worst);
    }
}

/* Dequantizers (embedding lookups) against ggml's to_float, on the bytes
 * of every quantizer case: the floats must be identical. */
static void test_dequantize_matches_llama_cpp(void **state)
{
    (void)state;
    if (!g_base_traits || !g_quantize_chunk)
        skip();
    static const enum hr_ggml_type types[] = {
        HR_GGML_Q8_0,  HR_GGML_Q4_0, HR_GGML_Q4_1, HR_GGML_Q5_0, HR_GGML_Q5_1, HR_GGML_IQ4_NL,
        HR_GGML_MXFP4, HR_GGML_Q4_K, HR_GGML_Q5_K, HR_GGML_Q6_K, HR_GGML_Q2_K, HR_GGML_Q3_K,
        HR_GGML_IQ4_XS, HR_GGML_F16, HR_GGML_BF16};
    static const size_t lens[] = {256, 512, 4096};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const struct hr_ggml_type_info *info = hr_ggml_type_info(types[ti]);
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
            for (int kind = 0; kind < 3; kind++) {
                size_t n = lens[li], bytes = n / info->block_elems * info->block_bytes;
                float *x = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float));
                float *b = malloc(n * sizeof(float));
                uint8_t *q = malloc(bytes);
                fill(x, n, kind, 0.7, 3000 + 10 * li + (size_t)kind);
                g_quantize_chunk((int)types[ti], x, q, 0, 1, (int64_t)n, NULL);
                assert_int_equal(hr_dequantize_row(types[ti], q, a, n), 0);
                g_base_traits((int)types[ti])->to_float(q, b, (int64_t)n);
                for (size_t i = 0; i < n; i++)
                    if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
                        fail_msg("dequantize %s n=%zu kind=%d: value %zu: ours %.9g, ggml %.9g",
                                 info->name, n, kind, i, (double)a[i], (double)b[i]);
                free(x);
                free(a);
                free(b);
                free(q);
            }
        }
    }
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
        cmocka_unit_test(test_q4_0_matches_llama_cpp),
        cmocka_unit_test(test_q4_1_matches_llama_cpp),
        cmocka_unit_test(test_q5_0_matches_llama_cpp),
        cmocka_unit_test(test_q5_1_matches_llama_cpp),
        cmocka_unit_test(test_iq4_nl_matches_llama_cpp),
        cmocka_unit_test(test_mxfp4_matches_llama_cpp),
        cmocka_unit_test(test_q4_K_matches_llama_cpp),
        cmocka_unit_test(test_q5_K_matches_llama_cpp),
        cmocka_unit_test(test_q6_K_matches_llama_cpp),
        cmocka_unit_test(test_q2_K_matches_llama_cpp),
        cmocka_unit_test(test_q3_K_matches_llama_cpp),
        cmocka_unit_test(test_iq4_xs_matches_llama_cpp),
        cmocka_unit_test(test_f16_bf16_f32_chunks_match_llama_cpp),
        cmocka_unit_test(test_f16_bf16_rows_match_llama_cpp),
        cmocka_unit_test(test_dequantize_matches_llama_cpp),
        cmocka_unit_test(test_act_conversion_matches_ggml_cpu),
        cmocka_unit_test(test_vec_dot_matches_ggml_cpu),
        cmocka_unit_test(test_q8_0_roundtrip_error),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
