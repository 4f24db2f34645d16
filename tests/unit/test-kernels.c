/*
 * test-kernels.c - the matmul kernels (src/kernels/matmul*.c) against the
 * plain-C reference, on every implementation this machine can run.
 *
 * For every weight type (F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K, IQ4_XS) and
 * every ISA (generic, avx2, avx512vnni; hr_kernels_force_isa picks), with
 * batch invariance on and off where the kernels differ:
 *  - prepare writes the same act bytes on every ISA, and those bytes are
 *    ggml's activation blocks (hr_convert_act_row, itself compared with
 *    ggml-cpu in test-quant-oracle.c);
 *  - on random data the result is within float-accumulation rounding of the
 *    reference (hr_mm_dot_ref), for odd shapes: m = 1, 2, 3, 5, 6, 12, 16,
 *    17, 64 (the decode kernels, the switches to the packed GEMM at 6, 12 and
 *    16 tokens, tile tails), n_out = 1, 7, 33,
 *    64 (partial panels), k = the smallest block multiple and larger (k-chunk
 *    boundaries included);
 *  - on data where every float operation is exact (power-of-two scales,
 *    integer values) the result equals the reference bit for bit, which
 *    proves the integer block sums exact: an off-by-one in any block would
 *    show;
 *  - the result is within the activation-quantization error of the f32 dot
 *    product of the dequantized weights with the original activations;
 *  - splitting the work over 2 or 3 threads gives the same bits as 1;
 *  - a token's outputs do not depend on the other tokens of the call (bit for
 *    bit for the quantized types, within 1e-6 for the float types).
 */
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
#include "kernels/matmul-impl.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

/* New types go at the end: the exact-data test draws every type's data from
 * one generator, and its data for the older types is known to stay exact. */
static const enum hr_ggml_type k_types[] = {
    HR_GGML_F32,  HR_GGML_F16,  HR_GGML_BF16, HR_GGML_Q8_0,   HR_GGML_Q4_0,  HR_GGML_Q4_K,
    HR_GGML_Q5_K, HR_GGML_Q6_K, HR_GGML_Q4_1, HR_GGML_Q5_0,   HR_GGML_Q5_1,  HR_GGML_IQ4_NL,
    HR_GGML_MXFP4, HR_GGML_Q2_K, HR_GGML_Q3_K, HR_GGML_IQ4_XS};
#define N_TYPES (sizeof(k_types) / sizeof(k_types[0]))
static const char *const k_isas[] = {"generic", "avx2", "avx512vnni"};
#define N_ISAS (sizeof(k_isas) / sizeof(k_isas[0]))

static size_t block_of(enum hr_ggml_type t) { return hr_ggml_type_info(t)->block_elems; }

/* k values per type: the smallest legal one and larger ones crossing the
 * kernels' k-chunks (128 floats, 512 quantized values). */
static size_t ks_for(enum hr_ggml_type t, size_t out[4])
{
    size_t b = block_of(t);
    if (b == 1) {
        out[0] = 1, out[1] = 17, out[2] = 160, out[3] = 300;
        return 4;
    }
    if (b == 32) {
        out[0] = 32, out[1] = 96, out[2] = 544;
        return 3;
    }
    out[0] = 256, out[1] = 768;
    return 2;
}

static void *xalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    assert_non_null(p);
    memset(p, 0, (n + 63) / 64 * 64);
    return p;
}

static void fill_normal(float *x, size_t n, double scale, uint64_t seed)
{
    struct hr_rng r;
    hr_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(hr_rng_normal(&r) * scale);
}

/* Runs the whole matmul (prepare + compute) single-threaded on the current ISA. */
static void run_matmul(enum hr_ggml_type t, const void *w, size_t k, size_t n_out, const float *x,
                       size_t m, float *y, size_t ldy, int nth)
{
    void *act = xalloc(hr_matmul_act_bytes(t, m, k));
    for (int ith = 0; ith < nth; ith++)
        hr_matmul_prepare(t, x, m, k, act, ith, nth);
    for (int ith = nth - 1; ith >= 0; ith--) /* any order: the shares are disjoint */
        hr_matmul_compute(t, w, k, n_out, act, m, y, ldy, ith, nth);
    free(act);
}

/* The reference result and sum |w| |a| of every output, from the generic prepare. */
static void reference(enum hr_ggml_type t, const void *w, size_t k, size_t n_out, const float *x,
                      size_t m, float *ref, double *mag)
{
    struct hr_mm_layout l;
    hr_mm_layout_init(&l, t, m, k);
    void *act = xalloc(l.total);
    hr_mm_prepare_generic(&l, x, 0, m, act);
    const size_t rb = hr_row_bytes(t, k);
    float *wd = malloc(k * sizeof(float)), *ad = malloc(m * k * sizeof(float));
    enum hr_ggml_type vt = hr_matmul_vec_dot_type(t);
    const struct hr_ggml_type_info *vi = hr_ggml_type_info(vt);
    uint8_t *abuf = malloc(k / vi->block_elems * vi->block_bytes + 64);
    for (size_t i = 0; i < m; i++) {
        assert_int_equal(hr_convert_act_row(vt, x + i * k, abuf, k), 0);
        assert_int_equal(hr_dequantize_row(vt, abuf, ad + i * k, k), 0);
    }
    for (size_t r = 0; r < n_out; r++) {
        const uint8_t *wr = (const uint8_t *)w + r * rb;
        assert_int_equal(hr_dequantize_row(t, wr, wd, k), 0);
        for (size_t i = 0; i < m; i++) {
            ref[i * n_out + r] = hr_mm_dot_ref(&l, wr, act, i);
            double s = 0;
            for (size_t j = 0; j < k; j++)
                s += fabs((double)wd[j] * (double)ad[i * k + j]);
            mag[i * n_out + r] = s;
        }
    }
    free(wd);
    free(ad);
    free(abuf);
    free(act);
}

/* Sequential float accumulations per output in the worst kernel (bounds the rounding). */
static double n_accum(enum hr_ggml_type t, size_t k)
{
    size_t b = block_of(t);
    return b == 1 ? (double)k : (double)(k / b) * (b == 256 ? 2 : 1);
}

/* ---- prepare ------------------------------------------------------------- */

static void test_prepare_identical_across_isas(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum hr_ggml_type t = k_types[ti];
        size_t ks[4], nk = ks_for(t, ks);
        for (size_t ki = 0; ki < nk; ki++) {
            const size_t k = ks[ki], m = 5;
            float *x = malloc(m * k * sizeof(float));
            fill_normal(x, m * k, 2.0, 100 + ti * 10 + ki);
            x[0] = 0; /* a zero, an all-zero block and a tie are worth having */
            for (size_t j = 0; j < (k < 256 ? k : 256); j++)
                x[k + j] = 0;
            /* row 2: extremes (no NaN: its propagation through a maximum is
             * order-dependent and not part of the contract) */
            static const float ext[] = {INFINITY, -3e38f, 1e-45f, -0.0f, 65520.f, 6e-8f, 1.0f};
            for (size_t j = 0; j < k; j++)
                x[2 * k + j] = ext[j % 7] * (float)(1 + j % 3);
            struct hr_mm_layout l;
            hr_mm_layout_init(&l, t, m, k);
            assert_int_equal(l.total, hr_matmul_act_bytes(t, m, k));
            uint8_t *ref = xalloc(l.total), *got = xalloc(l.total);
            /* Gaps between the arrays are never written; row padding must be zeroed. */
            memset(ref, 0xAB, l.total);
            hr_mm_prepare_generic(&l, x, 0, m, ref);
            for (size_t i = 0; i < m; i++) {
                const uint8_t *row = ref + l.qs_off + i * l.qs_stride;
                size_t used = hr_mm_layout_row_used_bytes(&l);
                for (size_t j = used; j < l.qs_stride; j++)
                    assert_int_equal(row[j], 0);
            }
            /* the generic layout carries exactly ggml's activation blocks */
            enum hr_ggml_type vt = hr_matmul_vec_dot_type(t);
            const struct hr_ggml_type_info *vi = hr_ggml_type_info(vt);
            uint8_t *blk = malloc(k / vi->block_elems * vi->block_bytes);
            for (size_t i = 0; i < m; i++) {
                assert_int_equal(hr_convert_act_row(vt, x + i * k, blk, k), 0);
                if (vt == HR_GGML_Q8_0) {
                    const struct hr_block_q8_0 *b = (const void *)blk;
                    for (size_t bi = 0; bi < k / 32; bi++) {
                        assert_int_equal(hr_f32_to_f16(hr_mm_d(&l, ref, i)[bi]), b[bi].d);
                        assert_memory_equal(hr_mm_qs(&l, ref, i) + 32 * bi, b[bi].qs, 32);
                    }
                } else if (vt == HR_GGML_Q8_1) {
                    const struct hr_block_q8_1 *b = (const void *)blk;
                    for (size_t bi = 0; bi < k / 32; bi++) {
                        assert_int_equal(hr_f32_to_f16(hr_mm_d(&l, ref, i)[bi]), b[bi].d);
                        assert_int_equal(hr_f32_to_f16(hr_mm_s(&l, ref, i)[bi]), b[bi].s);
                        assert_int_equal(hr_mm_comp(&l, ref, i)[bi], 0);
                        assert_memory_equal(hr_mm_qs(&l, ref, i) + 32 * bi, b[bi].qs, 32);
                    }
                } else if (vt == HR_GGML_Q8_K) {
                    const struct hr_block_q8_K *b = (const void *)blk;
                    for (size_t bi = 0; bi < k / 256; bi++) {
                        assert_true(hr_mm_d(&l, ref, i)[bi] == b[bi].d);
                        assert_memory_equal(hr_mm_qs(&l, ref, i) + 256 * bi, b[bi].qs, 256);
                        assert_memory_equal(hr_mm_bsum(&l, ref, i) + 16 * bi, b[bi].bsums, 32);
                    }
                } else if (vt == HR_GGML_F16 || vt == HR_GGML_BF16) {
                    assert_memory_equal(hr_mm_u16(&l, ref, i), blk, k * 2);
                } else {
                    assert_memory_equal(hr_mm_f32(&l, ref, i), blk, k * 4);
                }
            }
            free(blk);
            for (size_t is = 1; is < N_ISAS; is++) {
                if (!hr_kernels_force_isa(k_isas[is]))
                    continue;
                memset(got, 0xAB, l.total);
                hr_matmul_prepare(t, x, m, k, got, 0, 2);
                hr_matmul_prepare(t, x, m, k, got, 1, 2);
                if (memcmp(ref, got, l.total) != 0) {
                    size_t i = 0;
                    while (ref[i] == got[i])
                        i++;
                    fail_msg("%s prepare (%s) k=%zu differs from generic at byte %zu of %zu",
                             hr_ggml_type_name(t), k_isas[is], k, i, l.total);
                }
            }
            hr_kernels_force_isa("best");
            free(x);
            free(ref);
            free(got);
        }
    }
}

/* One act serves every weight type of its vec-dot type (the engine prepares
 * once for Q, K and V): same size, same bytes, same results. */
static void test_act_shared_within_vec_dot_type(void **state)
{
    (void)state;
    static const enum hr_ggml_type fam[][3] = {{HR_GGML_Q8_0, HR_GGML_Q4_0, HR_GGML_Q8_0},
                                               {HR_GGML_Q5_0, HR_GGML_IQ4_NL, HR_GGML_MXFP4},
                                               {HR_GGML_Q4_1, HR_GGML_Q5_1, HR_GGML_Q4_1},
                                               {HR_GGML_Q4_K, HR_GGML_Q5_K, HR_GGML_Q6_K},
                                               {HR_GGML_Q6_K, HR_GGML_Q2_K, HR_GGML_Q3_K},
                                               {HR_GGML_Q4_K, HR_GGML_IQ4_XS, HR_GGML_Q2_K}};
    const size_t m = 17, k = 512, n_out = 40;
    float *x = malloc(m * k * sizeof(float));
    fill_normal(x, m * k, 1.0, 4242);
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        for (size_t is = 0; is < N_ISAS; is++) {
            if (!hr_kernels_force_isa(k_isas[is]))
                continue;
            const size_t bytes = hr_matmul_act_bytes(fam[f][0], m, k);
            uint8_t *act0 = xalloc(bytes);
            hr_matmul_prepare(fam[f][0], x, m, k, act0, 0, 1);
            for (int t = 1; t < 3; t++) {
                assert_int_equal(hr_matmul_act_bytes(fam[f][t], m, k), bytes);
                uint8_t *act = xalloc(bytes);
                hr_matmul_prepare(fam[f][t], x, m, k, act, 0, 1);
                assert_memory_equal(act, act0, bytes);
                free(act);
                /* the weights of type t computed with the act of type 0 */
                const size_t rb = hr_row_bytes(fam[f][t], k);
                float *wf = malloc(n_out * k * sizeof(float));
                uint8_t *w = malloc(n_out * rb);
                float *y0 = malloc(m * n_out * sizeof(float)), *y1 = malloc(m * n_out * sizeof(float));
                fill_normal(wf, n_out * k, 0.1, 77 + (uint64_t)t);
                for (size_t r = 0; r < n_out; r++)
                    assert_int_equal(hr_quantize_row(fam[f][t], wf + r * k, w + r * rb, k), 0);
                hr_matmul_compute(fam[f][t], w, k, n_out, act0, m, y0, n_out, 0, 1);
                run_matmul(fam[f][t], w, k, n_out, x, m, y1, n_out, 1);
                assert_memory_equal(y0, y1, m * n_out * sizeof(float));
                free(wf);
                free(w);
                free(y0);
                free(y1);
            }
            free(act0);
        }
    }
    hr_kernels_force_isa("best");
    free(x);
}

/* ---- random data vs the reference ----------------------------------------- */

static void check_random(enum hr_ggml_type t, size_t m, size_t n_out, size_t k, uint64_t seed)
{
    const size_t rb = hr_row_bytes(t, k);
    float *wf = malloc(n_out * k * sizeof(float)), *x = malloc(m * k * sizeof(float));
    uint8_t *w = malloc(n_out * rb);
    fill_normal(wf, n_out * k, 0.1, seed);
    fill_normal(x, m * k, 1.5, seed + 1);
    for (size_t r = 0; r < n_out; r++)
        assert_int_equal(hr_quantize_row(t, wf + r * k, w + r * rb, k), 0);
    float *ref = malloc(m * n_out * sizeof(float));
    double *mag = malloc(m * n_out * sizeof(double));
    reference(t, w, k, n_out, x, m, ref, mag);
    const size_t ldy = n_out + 3; /* a row stride wider than n_out */
    float *y = malloc(m * ldy * sizeof(float));
    const double tol = 2.0 * (n_accum(t, k) + 16) * 6e-8;
    for (size_t run = 0; run < 2 * N_ISAS; run++) {
        /* every ISA, with batch invariance on and off (other decode kernels) */
        const size_t is = run / 2;
        hr_kernels_set_batch_invariant(run % 2 == 0);
        if (!hr_kernels_force_isa(k_isas[is]))
            continue;
        for (size_t i = 0; i < m * ldy; i++)
            y[i] = NAN;
        run_matmul(t, w, k, n_out, x, m, y, ldy, 1);
        for (size_t i = 0; i < m; i++) {
            for (size_t r = 0; r < n_out; r++) {
                double got = y[i * ldy + r], want = ref[i * n_out + r];
                double err = fabs(got - want), lim = tol * mag[i * n_out + r] + 1e-30;
                if (!(err <= lim))
                    fail_msg("%s (%s) m=%zu n_out=%zu k=%zu: y[%zu][%zu] = %.9g, reference "
                             "%.9g (err %.3g > %.3g)",
                             hr_ggml_type_name(t), k_isas[is], m, n_out, k, i, r, got, want, err,
                             lim);
            }
            for (size_t r = n_out; r < ldy; r++) /* nothing written past n_out */
                assert_true(isnan(y[i * ldy + r]));
        }
    }
    hr_kernels_set_batch_invariant(true);
    hr_kernels_force_isa("best");
    free(wf);
    free(x);
    free(w);
    free(ref);
    free(mag);
    free(y);
}

static void test_random_vs_reference(void **state)
{
    (void)state;
    static const size_t ms[] = {1, 2, 3, 5, 6, 12, 16, 17, 64};
    static const size_t ns[] = {1, 7, 33, 64};
    uint64_t seed = 1;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        size_t ks[4], nk = ks_for(k_types[ti], ks);
        for (size_t ki = 0; ki < nk; ki++)
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++)
                for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
                    check_random(k_types[ti], ms[mi], ns[ni], ks[ki], seed += 2);
    }
}

/* ---- exact data ------------------------------------------------------------ */

/*
 * Weights built directly as blocks: random quants and sub-block scales,
 * super-block scales 2^-12 (2^-14 for the mins); float weights small
 * integers. Activations: integers in [-127, 127] with a +-127 in every block,
 * so every activation scale is exactly +-1 and the quants are the values.
 * Then every product and partial sum is a multiple of a power of two well
 * inside f32's 24 bits, so any summation order gives the same float, and the
 * kernels must agree with the reference exactly.
 */
static void make_exact_weights(enum hr_ggml_type t, uint8_t *w, size_t n_out, size_t k,
                               struct hr_rng *r)
{
    const size_t rb = hr_row_bytes(t, k);
    const uint16_t d_small = hr_f32_to_f16(1.0f / 4096), d_min = hr_f32_to_f16(1.0f / 16384);
    for (size_t row = 0; row < n_out; row++) {
        uint8_t *wr = w + row * rb;
        for (size_t i = 0; i < rb; i++)
            wr[i] = (uint8_t)hr_rng_u64(r);
        const size_t n = k / block_of(t);
        for (size_t b = 0; b < n; b++) {
            switch (t) {
            case HR_GGML_F32: ((float *)wr)[b] = (float)((int)(hr_rng_u64(r) % 15) - 7); break;
            case HR_GGML_F16:
                ((uint16_t *)wr)[b] = hr_f32_to_f16((float)((int)(hr_rng_u64(r) % 15) - 7));
                break;
            case HR_GGML_BF16:
                ((uint16_t *)wr)[b] = hr_f32_to_bf16((float)((int)(hr_rng_u64(r) % 15) - 7));
                break;
            case HR_GGML_Q8_0: ((struct hr_block_q8_0 *)wr)[b].d = d_small; break;
            case HR_GGML_Q4_0: ((struct hr_block_q4_0 *)wr)[b].d = d_small; break;
            case HR_GGML_Q5_0: ((struct hr_block_q5_0 *)wr)[b].d = d_small; break;
            case HR_GGML_IQ4_NL: ((struct hr_block_iq4_nl *)wr)[b].d = d_small; break;
            case HR_GGML_MXFP4: ((struct hr_block_mxfp4 *)wr)[b].e = 128 - 12; break;
            /* the offset m times Q8_1's s (an integer here) stays a multiple of 2^-12 */
            case HR_GGML_Q4_1:
                ((struct hr_block_q4_1 *)wr)[b].d = d_small;
                ((struct hr_block_q4_1 *)wr)[b].m = d_small;
                break;
            case HR_GGML_Q5_1:
                ((struct hr_block_q5_1 *)wr)[b].d = d_small;
                ((struct hr_block_q5_1 *)wr)[b].m = d_small;
                break;
            case HR_GGML_Q4_K:
                ((struct hr_block_q4_K *)wr)[b].d = d_small;
                ((struct hr_block_q4_K *)wr)[b].dmin = d_min;
                break;
            case HR_GGML_Q5_K:
                ((struct hr_block_q5_K *)wr)[b].d = d_small;
                ((struct hr_block_q5_K *)wr)[b].dmin = d_min;
                break;
            case HR_GGML_Q6_K: {
                /* small sub-block scales keep the block sums far below 2^24 */
                struct hr_block_q6_K *x6 = (struct hr_block_q6_K *)wr + b;
                x6->d = d_small;
                for (int j = 0; j < 16; j++)
                    x6->scales[j] = (int8_t)((int)(hr_rng_u64(r) % 32) - 16);
                break;
            }
            case HR_GGML_Q2_K:
                ((struct hr_block_q2_K *)wr)[b].d = d_small;
                ((struct hr_block_q2_K *)wr)[b].dmin = d_min;
                break;
            case HR_GGML_Q3_K: ((struct hr_block_q3_K *)wr)[b].d = d_small; break;
            case HR_GGML_IQ4_XS: {
                /* scales 32 +- 3 keep the block sums (grid values up to 127)
                 * below 2^24 */
                struct hr_block_iq4_xs *x4 = (struct hr_block_iq4_xs *)wr + b;
                x4->d = d_small;
                x4->scales_h = 0;
                for (int j = 0; j < 8; j++) {
                    const int ls = 32 + (int)(hr_rng_u64(r) % 7) - 3;
                    x4->scales_h |= (uint16_t)((ls >> 4) << (2 * j));
                    if (j % 2 == 0)
                        x4->scales_l[j / 2] = (uint8_t)(ls & 0xF);
                    else
                        x4->scales_l[j / 2] |= (uint8_t)((ls & 0xF) << 4);
                }
                break;
            }
            default: break;
            }
        }
    }
}

static void test_exact_vs_reference(void **state)
{
    (void)state;
    static const size_t ms[] = {1, 3, 6, 17};
    static const size_t ns[] = {7, 33};
    struct hr_rng rng;
    hr_rng_seed(&rng, 77);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum hr_ggml_type t = k_types[ti];
        size_t ks[4], nk = ks_for(t, ks);
        for (size_t ki = 0; ki < nk; ki++) {
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
                for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
                    const size_t k = ks[ki], m = ms[mi], n_out = ns[ni];
                    const size_t rb = hr_row_bytes(t, k);
                    uint8_t *w = malloc(n_out * rb);
                    make_exact_weights(t, w, n_out, k, &rng);
                    float *x = malloc(m * k * sizeof(float));
                    const size_t blk = block_of(t) == 1 ? 32 : block_of(t);
                    for (size_t i = 0; i < m * k; i++) {
                        const bool first = (i % k) % blk == 0;
                        x[i] = first ? (hr_rng_u64(&rng) & 1 ? 127.f : -127.f)
                                     : (float)((int)(hr_rng_u64(&rng) % 255) - 127);
                    }
                    float *ref = malloc(m * n_out * sizeof(float)), *y = malloc(m * n_out * sizeof(float));
                    double *mag = malloc(m * n_out * sizeof(double));
                    reference(t, w, k, n_out, x, m, ref, mag);
                    for (size_t run = 0; run < 2 * N_ISAS; run++) {
                        const size_t is = run / 2;
                        hr_kernels_set_batch_invariant(run % 2 == 0);
                        if (!hr_kernels_force_isa(k_isas[is]))
                            continue;
                        run_matmul(t, w, k, n_out, x, m, y, n_out, 1);
                        for (size_t e = 0; e < m * n_out; e++)
                            if (y[e] != ref[e])
                                fail_msg("%s (%s, invariant %d) exact data m=%zu n_out=%zu k=%zu: "
                                         "y[%zu] = %.9g, reference %.9g",
                                         hr_ggml_type_name(t), k_isas[is], (int)(run % 2 == 0), m,
                                         n_out, k, e, (double)y[e], (double)ref[e]);
                    }
                    hr_kernels_set_batch_invariant(true);
                    hr_kernels_force_isa("best");
                    free(w);
                    free(x);
                    free(ref);
                    free(y);
                    free(mag);
                }
            }
        }
    }
}

/* ---- quantization error ------------------------------------------------- */

/*
 * Against the f32 dot product of the dequantized weights with the original
 * (unquantized) activations: the only difference is the activation
 * conversion, bounded per element by half a quantization step (Q8_0 and
 * Q8_K: d / 2 of the element's block; f16: 2^-11 relative; bf16: 2^-8).
 */
static void test_within_activation_quantization_error(void **state)
{
    (void)state;
    const size_t m = 9, n_out = 40;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum hr_ggml_type t = k_types[ti], vt = hr_matmul_vec_dot_type(t);
        const size_t k = block_of(t) == 1 ? 200 : 512, rb = hr_row_bytes(t, k);
        float *wf = malloc(n_out * k * sizeof(float)), *wd = malloc(n_out * k * sizeof(float));
        float *x = malloc(m * k * sizeof(float)), *y = malloc(m * n_out * sizeof(float));
        float *ad = malloc(k * sizeof(float));
        const struct hr_ggml_type_info *vi = hr_ggml_type_info(vt);
        uint8_t *w = malloc(n_out * rb), *abuf = malloc(k / vi->block_elems * vi->block_bytes);
        fill_normal(wf, n_out * k, 0.05, 500 + ti);
        fill_normal(x, m * k, 1.0, 600 + ti);
        for (size_t r = 0; r < n_out; r++) {
            assert_int_equal(hr_quantize_row(t, wf + r * k, w + r * rb, k), 0);
            assert_int_equal(hr_dequantize_row(t, w + r * rb, wd + r * k, k), 0);
        }
        for (size_t is = 0; is < N_ISAS; is++) {
            if (!hr_kernels_force_isa(k_isas[is]))
                continue;
            run_matmul(t, w, k, n_out, x, m, y, n_out, 2);
            for (size_t i = 0; i < m; i++) {
                const float *xi = x + i * k;
                assert_int_equal(hr_convert_act_row(vt, xi, abuf, k), 0);
                assert_int_equal(hr_dequantize_row(vt, abuf, ad, k), 0);
                for (size_t r = 0; r < n_out; r++) {
                    double exact = 0, bound = 0, mag = 0;
                    for (size_t j = 0; j < k; j++) {
                        double wj = wd[r * k + j];
                        exact += wj * xi[j];
                        mag += fabs(wj * xi[j]);
                        double step;
                        if (vt == HR_GGML_Q8_0)
                            step = 0.5 * hr_f16_to_f32(((struct hr_block_q8_0 *)abuf)[j / 32].d);
                        else if (vt == HR_GGML_Q8_1)
                            step = 0.5 * hr_f16_to_f32(((struct hr_block_q8_1 *)abuf)[j / 32].d);
                        else if (vt == HR_GGML_Q8_K)
                            step = 0.5 * fabs(((struct hr_block_q8_K *)abuf)[j / 256].d);
                        else if (vt == HR_GGML_F16)
                            step = fabs(xi[j]) * 0x1p-11;
                        else if (vt == HR_GGML_BF16)
                            step = fabs(xi[j]) * 0x1p-8;
                        else
                            step = 0;
                        bound += fabs(wj) * step * 1.0001;
                    }
                    if (vt == HR_GGML_Q8_1) {
                        /* Q4_1 / Q5_1: m_w times Q8_1's s, which is rounded to f16 */
                        for (size_t b = 0; b < k / 32; b++) {
                            uint16_t mw;
                            memcpy(&mw, w + r * rb + b * hr_mm_b32_bytes(t) + 2, 2);
                            bound += fabs(hr_f16_to_f32(mw)) *
                                     fabs(hr_f16_to_f32(((struct hr_block_q8_1 *)abuf)[b].s)) * 0x1p-11;
                        }
                    }
                    bound += 1e-5 * mag; /* float accumulation */
                    double err = fabs(y[i * n_out + r] - exact);
                    if (!(err <= bound))
                        fail_msg("%s (%s): y[%zu][%zu] = %.9g, f32 dot of dequantized weights "
                                 "%.9g: error %.3g exceeds the activation quantization bound %.3g",
                                 hr_ggml_type_name(t), k_isas[is], i, r, (double)y[i * n_out + r],
                                 exact, err, bound);
                }
            }
        }
        hr_kernels_force_isa("best");
        free(wf);
        free(wd);
        free(x);
        free(y);
        free(ad);
        free(w);
        free(abuf);
    }
}

/* ---- threads --------------------------------------------------------------- */

static void test_thread_split_is_bitwise_identical(void **state)
{
    (void)state;
    static const size_t ms[] = {1, 4, 40};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum hr_ggml_type t = k_types[ti];
        const size_t k = block_of(t) == 1 ? 96 : 512, n_out = 100, rb = hr_row_bytes(t, k);
        float *wf = malloc(n_out * k * sizeof(float));
        uint8_t *w = malloc(n_out * rb);
        fill_normal(wf, n_out * k, 0.1, 900 + ti);
        for (size_t r = 0; r < n_out; r++)
            assert_int_equal(hr_quantize_row(t, wf + r * k, w + r * rb, k), 0);
        for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
            const size_t m = ms[mi];
            float *x = malloc(m * k * sizeof(float));
            float *y1 = malloc(m * n_out * sizeof(float)), *yn = malloc(m * n_out * sizeof(float));
            fill_normal(x, m * k, 1.0, 950 + mi);
            for (size_t is = 0; is < N_ISAS; is++) {
                if (!hr_kernels_force_isa(k_isas[is]))
                    continue;
                run_matmul(t, w, k, n_out, x, m, y1, n_out, 1);
                for (int nth = 2; nth <= 3; nth++) {
                    memset(yn, 0xff, m * n_out * sizeof(float));
                    run_matmul(t, w, k, n_out, x, m, yn, n_out, nth);
                    if (memcmp(y1, yn, m * n_out * sizeof(float)) != 0)
                        fail_msg("%s (%s) m=%zu: %d threads differ from 1", hr_ggml_type_name(t),
                                 k_isas[is], m, nth);
                }
            }
            hr_kernels_force_isa("best");
            free(x);
            free(y1);
            free(yn);
        }
        free(wf);
        free(w);
    }
}

/* ---- batch invariance ------------------------------------------------------ */

/*
 * A token's outputs must not depend on the other tokens of the call: the
 * engine batches sequences raggedly and chunks prompts, and a result that
 * changed with the batch would change the generated text. Every type and
 * ISA is bit-identical across m: the AVX-512 quantized decode kernels issue
 * the packed GEMM's float operations in the GEMM's order, the AVX-512 float
 * kernel sums each output in one order at any tile shape, and the AVX2 and
 * generic code use one kernel for every m.
 */
static void test_batch_invariance(void **state)
{
    (void)state;
    static const size_t ms[] = {2, 3, 5, 8, 12, 16, 17, 40};
    const size_t n_out = 75, m_max = 40;
    /* Float types twice: short rows, and rows of over 4 KiB (F32: over 8 KiB,
     * which the AVX-512 decode tile prefetches row by row). */
    for (size_t tk = 0; tk < N_TYPES + 3; tk++) {
        const size_t ti = tk < N_TYPES ? tk : tk - N_TYPES;
        const enum hr_ggml_type t = k_types[ti];
        if (tk >= N_TYPES && block_of(t) != 1)
            continue;
        const bool exact = true;
        const size_t k = block_of(t) != 1 ? 512 : tk < N_TYPES ? 200 : 2176,
                     rb = hr_row_bytes(t, k);
        float *wf = malloc(n_out * k * sizeof(float)), *x = malloc(m_max * k * sizeof(float));
        uint8_t *w = malloc(n_out * rb);
        float *alone = malloc(m_max * n_out * sizeof(float)), *y = malloc(m_max * n_out * sizeof(float));
        fill_normal(wf, n_out * k, 0.1, 1300 + ti);
        fill_normal(x, m_max * k, 1.0, 1400 + ti);
        for (size_t r = 0; r < n_out; r++)
            assert_int_equal(hr_quantize_row(t, wf + r * k, w + r * rb, k), 0);
        for (size_t is = 0; is < N_ISAS; is++) {
            if (!hr_kernels_force_isa(k_isas[is]))
                continue;
            for (size_t i = 0; i < m_max; i++)
                run_matmul(t, w, k, n_out, x + i * k, 1, alone + i * n_out, n_out, 2);
            double top = 0;
            for (size_t e = 0; e < m_max * n_out; e++)
                top = fabs(alone[e]) > top ? fabs(alone[e]) : top;
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
                const size_t m = ms[mi];
                run_matmul(t, w, k, n_out, x, m, y, n_out, 2);
                for (size_t e = 0; e < m * n_out; e++) {
                    const double a = alone[e], b = y[e];
                    const bool ok = exact ? memcmp(&alone[e], &y[e], sizeof(float)) == 0
                                          : fabs(a - b) <= 1e-6 * top;
                    if (!ok)
                        fail_msg("%s (%s): token %zu output %zu: %.9g in a call of %zu tokens, "
                                 "%.9g alone",
                                 hr_ggml_type_name(t), k_isas[is], e / n_out, e % n_out, b, m, a);
                }
            }
        }
        hr_kernels_force_isa("best");
        free(wf);
        free(x);
        free(w);
        free(alone);
        free(y);
    }
}

/* ---- packed weights ------------------------------------------------------- */

/*
 * Q8_0, Q4_K and F16 packed at load (hr_matmul_pack) give exactly the row-major
 * results, for every m (decode and GEMM tiles), thread split and ISA (one
 * without a packed kernel unpacks row by row), with n_out not a multiple of
 * the panel or group and F16 rows not a multiple of 16; and a packed row
 * dequantizes to the stored row.
 */
static void test_packed_equals_row_major(void **state)
{
    (void)state;
    static const size_t ms[] = {1, 2, 5, 6, 7, 13, 17};
    static const struct {
        enum hr_ggml_type t;
        size_t k;
    } cases[] = {{HR_GGML_Q8_0, 32},  {HR_GGML_Q8_0, 544}, {HR_GGML_Q8_0, 2048},
                 {HR_GGML_F16, 200},  {HR_GGML_F16, 896},  {HR_GGML_F16, 2176},
                 {HR_GGML_Q4_K, 256}, {HR_GGML_Q4_K, 768}, {HR_GGML_Q4_K, 1536}};
    const size_t n_out = 75, m_max = 17;
    hr_kernels_force_isa("best");
    const bool packs = hr_matmul_packed_bytes(HR_GGML_Q8_0, 512, n_out) > 0;
    assert_int_equal(hr_matmul_packed_bytes(HR_GGML_Q4_0, 512, n_out), 0);
    assert_int_equal(hr_matmul_packed_bytes(HR_GGML_F32, 512, n_out), 0);
    if (!packs) /* no AVX-512 here: nothing is packed, nothing to test */
        skip();
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const enum hr_ggml_type t = cases[ci].t;
        const size_t k = cases[ci].k, rb = hr_row_bytes(t, k);
        const size_t pbytes = hr_matmul_packed_bytes(t, k, n_out);
        if (t == HR_GGML_Q8_0) /* the same bytes as 96 GGUF rows */
            assert_int_equal(pbytes, (n_out + 31) / 32 * 32 * rb);
        else if (t == HR_GGML_Q4_K) /* 96 rows, 2368 bytes per 16 rows and block */
            assert_int_equal(pbytes, (n_out + 31) / 32 * 2 * (k / 256) * 2368);
        else /* 76 rows of k rounded up to 16 */
            assert_int_equal(pbytes, (n_out + 3) / 4 * 4 * ((k + 15) / 16 * 16) * 2);
        float *wf = malloc(n_out * k * sizeof(float)), *x = malloc(m_max * k * sizeof(float));
        uint8_t *w = malloc(n_out * rb), *pk = xalloc(pbytes);
        float *y0 = malloc(m_max * n_out * sizeof(float)), *y1 = malloc(m_max * n_out * sizeof(float));
        float *r0 = malloc(k * sizeof(float)), *r1 = malloc(k * sizeof(float));
        fill_normal(wf, n_out * k, 0.1, 1500 + ci);
        fill_normal(x, m_max * k, 1.0, 1600 + ci);
        for (size_t r = 0; r < n_out; r++)
            assert_int_equal(hr_quantize_row(t, wf + r * k, w + r * rb, k), 0);
        hr_matmul_pack(t, w, k, n_out, pk);
        for (size_t r = 0; r < n_out; r++) {
            assert_int_equal(hr_dequantize_row(t, w + r * rb, r0, k), 0);
            hr_matmul_packed_row(t, pk, k, r, r1);
            assert_memory_equal(r0, r1, k * sizeof(float));
        }
        for (size_t is = 0; is < N_ISAS; is++) {
            if (!hr_kernels_force_isa(k_isas[is]))
                continue;
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
                const size_t m = ms[mi];
                for (int nth = 1; nth <= 3; nth += 2) {
                    run_matmul(t, w, k, n_out, x, m, y0, n_out, nth);
                    void *act = xalloc(hr_matmul_act_bytes(t, m, k));
                    for (int ith = 0; ith < nth; ith++)
                        hr_matmul_prepare(t, x, m, k, act, ith, nth);
                    for (size_t e = 0; e < m * n_out; e++)
                        y1[e] = NAN;
                    for (int ith = 0; ith < nth; ith++)
                        hr_matmul_compute_packed(t, pk, k, n_out, act, m, y1, n_out, ith, nth);
                    free(act);
                    for (size_t e = 0; e < m * n_out; e++)
                        if (memcmp(&y0[e], &y1[e], sizeof(float)) != 0)
                            fail_msg("%s packed (%s) k=%zu m=%zu threads=%d: token %zu output "
                                     "%zu: %.9g, row-major %.9g",
                                     hr_ggml_type_name(t), k_isas[is], k, m, nth, e / n_out,
                                     e % n_out, y1[e], y0[e]);
                }
            }
        }
        hr_kernels_force_isa("best");
        free(wf), free(x), free(w), free(pk), free(y0), free(y1), free(r0), free(r1);
    }
}

/* ---- API ---------------------------------------------------------------- */

static void test_api(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < N_TYPES; ti++)
        assert_true(hr_matmul_supports(k_types[ti]));
    assert_false(hr_matmul_supports(HR_GGML_IQ2_XXS));
    assert_false(hr_matmul_supports(HR_GGML_Q8_K));
    assert_false(hr_matmul_supports(HR_GGML_Q8_1));
    assert_int_equal(hr_matmul_vec_dot_type(HR_GGML_Q4_0), HR_GGML_Q8_0);
    assert_int_equal(hr_matmul_vec_dot_type(HR_GGML_Q5_0), HR_GGML_Q8_0);
    assert_int_equal(hr_matmul_vec_dot_type(HR_GGML_IQ4_NL), HR_GGML_Q8_0);
    assert_int_equal(hr_matmul_vec_dot_type(HR_GGML_MXFP4), HR_GGML_Q8_0);
    assert_int_equal(hr_matmul_vec_dot_type(HR_GGML_Q4_1), HR_GGML_Q8_1);
    assert_int_equal(hr_matmul_vec_dot_type(HR_GGML_Q5_1), HR_GGML_Q8_1);
    assert_int_equal(hr_matmul_vec_dot_type(HR_GGML_Q6_K), HR_GGML_Q8_K);
    assert_int_equal(hr_matmul_vec_dot_type(HR_GGML_F16), HR_GGML_F16);
    assert_int_equal(hr_row_bytes(HR_GGML_Q4_K, 512), 288);
    assert_int_equal(hr_matmul_act_bytes(HR_GGML_Q8_0, 3, 64) % 64, 0);
    assert_true(hr_kernels_force_isa("generic"));
    assert_string_equal(hr_kernels_isa(), "generic");
    assert_false(hr_kernels_force_isa("sse9"));
    assert_true(hr_kernels_batch_invariant()); /* the default */
    assert_true(hr_kernels_force_isa("best"));
    fprintf(stderr, "# kernels: best ISA on this machine: %s\n", hr_kernels_isa());
    /* dequantize_row_any is the reference dequantizer */
    float x[256], a[256], b[256];
    struct hr_block_q4_K q[1];
    fill_normal(x, 256, 1.0, 5);
    hr_quantize_row_q4_K(x, q, 256);
    hr_dequantize_row_any(HR_GGML_Q4_K, q, a, 256);
    hr_dequantize_row_q4_K(q, b, 256);
    assert_memory_equal(a, b, sizeof(a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_prepare_identical_across_isas),
        cmocka_unit_test(test_act_shared_within_vec_dot_type),
        cmocka_unit_test(test_random_vs_reference),
        cmocka_unit_test(test_exact_vs_reference),
        cmocka_unit_test(test_within_activation_quantization_error),
        cmocka_unit_test(test_thread_split_is_bitwise_identical),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_packed_equals_row_major),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
