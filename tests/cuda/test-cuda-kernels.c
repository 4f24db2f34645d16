/*
 * test-cuda-kernels.c - each CUDA kernel against the CPU reference.
 *
 *   dequantization  every weight type, bit-identical to kernels/quant.c
 *   act rounding    f16, bf16, Q8_0 (x86 from_float), Q8_K: bit-identical to
 *                   hr_convert_act_row followed by the CPU's dequantizer
 *   GEMV            every type, 1..8 rows, against a double-precision dot of
 *                   the CPU-dequantized weights and CPU-rounded inputs;
 *                   also the bias and accumulate forms
 *   RMSNorm         with the fused residual add and a row index
 *   SwiGLU, RoPE table
 *   attention       the tiled (prefill) and one-warp kernels over paged f16
 *                   KV, head_dim 64 and 128, against a double-precision
 *                   softmax of the same f16 values
 * The Q/K post-processing and the KV store are checked through whole models
 * in test-cuda-engine.c (against the CPU engine).
 */
#include <stdint.h>
#include <string.h>

#include "base/fp16.h"
#include "base/rand.h"
#include "cuda-test.h"
#include "cuda/cuda-kernels.h"
#include "cuda/cuda-plan.h"
#include "engine/engine.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static void *to_dev(const void *h, size_t n)
{
    void *d = NULL;
    CT_CUDA(cudaMalloc(&d, n ? n : 1));
    if (n)
        CT_CUDA(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

static void from_dev(void *h, const void *d, size_t n)
{
    CT_CUDA(cudaDeviceSynchronize());
    CT_CUDA(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

/* Whether two device buffers hold the same bytes. */
static int same_dev(const void *a, const void *b, size_t n)
{
    char *x = malloc(n), *y = malloc(n);
    from_dev(x, a, n), from_dev(y, b, n);
    const int same = memcmp(x, y, n) == 0;
    free(x), free(y);
    return same;
}

static const enum hr_ggml_type types[] = {
    HR_GGML_F32,  HR_GGML_F16,    HR_GGML_BF16,  HR_GGML_Q8_0, HR_GGML_Q4_0, HR_GGML_Q4_1,
    HR_GGML_Q5_0, HR_GGML_Q5_1,   HR_GGML_IQ4_NL, HR_GGML_MXFP4, HR_GGML_Q2_K, HR_GGML_Q3_K,
    HR_GGML_Q4_K, HR_GGML_Q5_K,   HR_GGML_Q6_K,  HR_GGML_IQ4_XS};

static enum hr_cuda_act act_of(enum hr_ggml_type t)
{
    switch (hr_matmul_vec_dot_type(t)) {
    case HR_GGML_F16: return HR_CUDA_ACT_F16;
    case HR_GGML_BF16: return HR_CUDA_ACT_BF16;
    case HR_GGML_Q8_0: case HR_GGML_Q8_1: return HR_CUDA_ACT_Q8_0;
    case HR_GGML_Q8_K: return HR_CUDA_ACT_Q8_K;
    default: return HR_CUDA_ACT_F32;
    }
}

/* The CPU's rounding of one activation row: convert, then dequantize. */
static void cpu_round(enum hr_ggml_type t, const float *x, float *y, size_t k, void *scratch)
{
    enum hr_ggml_type vt = hr_matmul_vec_dot_type(t);
    if (vt == HR_GGML_F32) {
        memcpy(y, x, k * sizeof(float));
        return;
    }
    hr_convert_act_row(vt, x, scratch, k);
    if (vt == HR_GGML_Q8_K)
        hr_dequantize_row_q8_K(scratch, y, k);
    else
        hr_dequantize_row(vt, scratch, y, k);
}

/* The fused launch (hr_cuda_gemv_parts / hr_cuda_gemv_int_parts): rows
 * [0, n) of dw as three parts of unequal size, each with its own output
 * (its own row stride) and bias, against each part run alone through
 * hr_cuda_gemv(_int): bit for bit, for m = 1 and m = M. qa != NULL: the
 * integer GEMV on those inputs, else the float one on dxr. */
static void check_parts(enum hr_ggml_type t, const uint8_t *dw, size_t rb, uint32_t k, uint32_t n,
                        const float *dxr, const struct hr_cuda_q8_act *qa, uint32_t M,
                        const float *dbias)
{
    const uint32_t cut[4] = {0, n * 2 / 5, n * 7 / 10, n};
    float *dy[3], *dz[3];
    uint32_t ldy[3];
    hr_cuda_gemv_out o;
    memset(&o, 0, sizeof(o));
    for (int p = 0; p < 3; p++) {
        const uint32_t np = cut[p + 1] - cut[p];
        ldy[p] = np + 3 + p;
        CT_CUDA(cudaMalloc((void **)&dy[p], sizeof(float) * ldy[p] * M));
        CT_CUDA(cudaMalloc((void **)&dz[p], sizeof(float) * ldy[p] * M));
        CT_CUDA(cudaMemset(dy[p], 0, sizeof(float) * ldy[p] * M));
        CT_CUDA(cudaMemset(dz[p], 0, sizeof(float) * ldy[p] * M));
        o.w[p] = dw + (size_t)cut[p] * rb;
        o.y[p] = dy[p];
        o.bias[p] = p == 1 ? NULL : dbias + cut[p];
        o.ldy[p] = ldy[p];
        o.end[p] = cut[p + 1];
    }
    o.n = n, o.n_parts = 3;
    int same = 1;
    const uint32_t ms[2] = {1, M};
    for (int mi = 0; mi < 2; mi++) {
        const uint32_t m = ms[mi];
        if (qa)
            CT_CUDA(hr_cuda_gemv_int_parts((int)t, rb, k, &o, qa, m, 0, 0));
        else
            CT_CUDA(hr_cuda_gemv_parts((int)t, rb, k, &o, dxr, m, 0, 0));
        for (int p = 0; p < 3; p++) {
            const uint32_t np = cut[p + 1] - cut[p];
            if (qa)
                CT_CUDA(hr_cuda_gemv_int((int)t, o.w[p], rb, k, np, qa, m, dz[p], ldy[p],
                                         o.bias[p], 0, 0));
            else
                CT_CUDA(hr_cuda_gemv((int)t, o.w[p], rb, k, np, dxr, m, dz[p], ldy[p], o.bias[p],
                                     0, 0));
            float *a = malloc(sizeof(float) * ldy[p] * M), *b = malloc(sizeof(float) * ldy[p] * M);
            from_dev(a, dy[p], sizeof(float) * ldy[p] * M);
            from_dev(b, dz[p], sizeof(float) * ldy[p] * M);
            same &= memcmp(a, b, sizeof(float) * ldy[p] * M) == 0;
            free(a), free(b);
        }
    }
    CT_CHECK(same, "%-5s %s GEMV as three parts in one launch (rows %u/%u/%u, own strides and "
             "biases), m = 1 and %u: each part == its matrix alone, bit for bit",
             hr_ggml_type_name(t), qa ? "integer" : "float", cut[1], cut[2] - cut[1],
             n - cut[2], M);
    for (int p = 0; p < 3; p++)
        cudaFree(dy[p]), cudaFree(dz[p]);
}

/* Expert rows (hr_cuda_gemv_out.rx, a MoE's decode): dw's 99 rows as 3
 * stacked experts of 33, each as two parts (rows 0-15, 16-32, as gate and
 * up); input row r (of 5) by expert rx[r]: each row == that expert's
 * matrices alone on that input row (m = 1), bit for bit. */
static void check_expert_rows(enum hr_ggml_type t, const uint8_t *dw, size_t rb, uint32_t k,
                              const float *dxr, const struct hr_cuda_q8_act *qa, uint32_t dg)
{
    const uint32_t R = 5, NE = 33, ld = 40;
    const int32_t rx[5] = {2, 0, 2, 1, 0};
    int32_t *drx = to_dev(rx, sizeof(rx));
    float *dy = NULL, *dz = NULL;
    CT_CUDA(cudaMalloc((void **)&dy, sizeof(float) * R * ld));
    CT_CUDA(cudaMalloc((void **)&dz, sizeof(float) * R * ld));
    CT_CUDA(cudaMemset(dy, 0, sizeof(float) * R * ld));
    CT_CUDA(cudaMemset(dz, 0, sizeof(float) * R * ld));
    hr_cuda_gemv_out o;
    memset(&o, 0, sizeof(o));
    o.w[0] = dw, o.y[0] = dy, o.ldy[0] = ld, o.end[0] = 16;
    o.w[1] = dw + 16 * rb, o.y[1] = dy + 20, o.ldy[1] = ld, o.end[1] = o.end[2] = NE;
    o.n = NE, o.n_parts = 2, o.rx = drx, o.mat_bytes = (uint64_t)NE * rb;
    if (qa)
        CT_CUDA(hr_cuda_gemv_int_parts((int)t, rb, k, &o, qa, R, 0, 0));
    else
        CT_CUDA(hr_cuda_gemv_parts((int)t, rb, k, &o, dxr, R, 0, 0));
    for (uint32_t r = 0; r < R; r++) {
        const uint8_t *we = dw + (size_t)rx[r] * NE * rb;
        if (qa) {
            struct hr_cuda_q8_act q1 = {qa->q + (size_t)r * k, qa->d + (size_t)r * (k / dg),
                                        qa->s ? qa->s + (size_t)r * (k / 16) : NULL};
            CT_CUDA(hr_cuda_gemv_int((int)t, we, rb, k, 16, &q1, 1, dz + r * ld, ld, NULL, 0, 0));
            CT_CUDA(hr_cuda_gemv_int((int)t, we + 16 * rb, rb, k, NE - 16, &q1, 1,
                                     dz + r * ld + 20, ld, NULL, 0, 0));
        } else {
            CT_CUDA(hr_cuda_gemv((int)t, we, rb, k, 16, dxr + (size_t)r * k, 1, dz + r * ld, ld,
                                 NULL, 0, 0));
            CT_CUDA(hr_cuda_gemv((int)t, we + 16 * rb, rb, k, NE - 16, dxr + (size_t)r * k, 1,
                                 dz + r * ld + 20, ld, NULL, 0, 0));
        }
    }
    float *a = malloc(sizeof(float) * R * ld), *b = malloc(sizeof(float) * R * ld);
    from_dev(a, dy, sizeof(float) * R * ld), from_dev(b, dz, sizeof(float) * R * ld);
    CT_CHECK(memcmp(a, b, sizeof(float) * R * ld) == 0, "%-5s %s GEMV on expert rows (5 rows, "
             "3 experts, 2 parts): each row == its expert alone, bit for bit",
             hr_ggml_type_name(t), qa ? "integer" : "float");
    free(a), free(b);
    cudaFree(drx), cudaFree(dy), cudaFree(dz);
}

static void test_type(enum hr_ggml_type t)
{
    /* n = 99: the Q4_K GEMV takes rows four to a warp and 16 to a block; 99
     * leaves a warp with 3 rows and a block with 3 warps */
    const uint32_t k = 512, n = 99, M = HR_CUDA_GEMV_MAX_ROWS;
    const char *name = hr_ggml_type_name(t);
    const size_t rb = hr_row_bytes(t, k);
    float *wf = malloc(sizeof(float) * k * n), *wd = malloc(sizeof(float) * k * n);
    uint8_t *wq = malloc(rb * n);
    for (size_t i = 0; i < (size_t)k * n; i++)
        wf[i] = frand() * 0.5f;
    for (uint32_t r = 0; r < n; r++) {
        hr_quantize_row(t, wf + (size_t)r * k, wq + r * rb, k);
        hr_dequantize_row(t, wq + r * rb, wd + (size_t)r * k, k);
    }
    void *dw = to_dev(wq, rb * n);

    /* dequantization: bit for bit */
    float *dout = NULL, *hout = malloc(sizeof(float) * k * n);
    CT_CUDA(cudaMalloc((void **)&dout, sizeof(float) * k * n));
    CT_CUDA(hr_cuda_dequant_rows((int)t, dw, rb, k, 0, n, dout, 0));
    from_dev(hout, dout, sizeof(float) * k * n);
    CT_CHECK(memcmp(hout, wd, sizeof(float) * k * n) == 0, "%-5s dequantize %u x %u rows: "
             "bit-identical to the CPU", name, n, k);

    /* act rounding: bit for bit */
    float *x = malloc(sizeof(float) * k * M), *xr = malloc(sizeof(float) * k * M);
    void *scratch = malloc(k * 4 + 4096);
    for (size_t i = 0; i < (size_t)k * M; i++)
        x[i] = frand() * 3.0f;
    x[7] = 0.0f; /* an exact zero in the first block */
    for (uint32_t r = 0; r < M; r++)
        cpu_round(t, x + (size_t)r * k, xr + (size_t)r * k, k, scratch);
    float *dx = to_dev(x, sizeof(float) * k * M), *dxr = NULL;
    CT_CUDA(cudaMalloc((void **)&dxr, sizeof(float) * k * M));
    enum hr_cuda_act act = act_of(t);
    CT_CUDA(hr_cuda_act_round(act, dx, M, k, dxr, 0));
    float *hxr = malloc(sizeof(float) * k * M);
    from_dev(hxr, dxr, sizeof(float) * k * M);
    CT_CHECK(memcmp(hxr, xr, sizeof(float) * k * M) == 0, "%-5s rounding of the inputs (act %d): "
             "bit-identical to the CPU's", name, (int)act);

    /* GEMV for every m, plain, with bias, accumulating */
    float *bias = malloc(sizeof(float) * n);
    for (uint32_t j = 0; j < n; j++)
        bias[j] = frand();
    float *dbias = to_dev(bias, sizeof(float) * n);
    float *dy = NULL, *hy = malloc(sizeof(float) * n * M), *y0 = malloc(sizeof(float) * n * M);
    CT_CUDA(cudaMalloc((void **)&dy, sizeof(float) * n * M));
    double worst = 0.0;
    int all_m_ok = 1;
    for (uint32_t m = 1; m <= M; m++) {
        for (int mode = 0; mode < 3; mode++) { /* 0 plain, 1 bias, 2 accumulate onto y0 */
            for (size_t i = 0; i < (size_t)n * M; i++)
                y0[i] = frand();
            CT_CUDA(cudaMemcpy(dy, y0, sizeof(float) * n * M, cudaMemcpyHostToDevice));
            CT_CUDA(hr_cuda_gemv((int)t, dw, rb, k, n, dxr, m, dy, n, mode == 1 ? dbias : NULL,
                                 mode == 2, 0));
            from_dev(hy, dy, sizeof(float) * n * M);
            for (uint32_t r = 0; r < m; r++)
                for (uint32_t j = 0; j < n; j++) {
                    double ref = 0.0, mag = 0.0;
                    for (uint32_t i = 0; i < k; i++) {
                        ref += (double)wd[(size_t)j * k + i] * xr[(size_t)r * k + i];
                        mag += fabs((double)wd[(size_t)j * k + i] * xr[(size_t)r * k + i]);
                    }
                    if (mode == 1)
                        ref += bias[j];
                    if (mode == 2)
                        ref += y0[(size_t)r * n + j];
                    double e = fabs(hy[(size_t)r * n + j] - ref) / (mag + 1e-30);
                    if (e > worst)
                        worst = e;
                }
            /* rows past m untouched */
            for (uint32_t r = m; r < M; r++)
                for (uint32_t j = 0; j < n; j++)
                    if (hy[(size_t)r * n + j] != y0[(size_t)r * n + j])
                        all_m_ok = 0;
        }
    }
    CT_CHECK(worst < 1e-6 && all_m_ok, "%-5s GEMV m = 1..%u (plain, bias, accumulate): worst error "
             "%.2e of sum |terms| (< 1e-6), other rows untouched", name, M, worst);
    check_parts(t, dw, rb, k, n, dxr, NULL, M, dbias);
    check_expert_rows(t, dw, rb, k, dxr, NULL, 0);

    /* The integer GEMV (dp4a on int8 inputs), where the type has one: the
     * same reference, every m, and a row's result independent of m. */
    if (hr_cuda_gemv_int_type((int)t, act)) {
        struct hr_cuda_q8_act qa;
        CT_CUDA(cudaMalloc((void **)&qa.q, (size_t)k * M));
        CT_CUDA(cudaMalloc((void **)&qa.d, sizeof(float) * (k / 32) * M));
        CT_CUDA(cudaMalloc((void **)&qa.s, sizeof(int16_t) * (k / 16) * M));
        CT_CUDA(hr_cuda_quant_act(act, dx, M, k, &qa, 0));
        double iw = 0.0;
        int im_ok = 1;
        for (uint32_t m = 1; m <= M; m++) {
            for (int mode = 0; mode < 3; mode++) {
                for (size_t i = 0; i < (size_t)n * M; i++)
                    y0[i] = frand();
                CT_CUDA(cudaMemcpy(dy, y0, sizeof(float) * n * M, cudaMemcpyHostToDevice));
                CT_CUDA(hr_cuda_gemv_int((int)t, dw, rb, k, n, &qa, m, dy, n,
                                         mode == 1 ? dbias : NULL, mode == 2, 0));
                from_dev(hy, dy, sizeof(float) * n * M);
                for (uint32_t r = 0; r < m; r++)
                    for (uint32_t j = 0; j < n; j++) {
                        double ref = 0.0, mag = 0.0;
                        for (uint32_t i = 0; i < k; i++) {
                            ref += (double)wd[(size_t)j * k + i] * xr[(size_t)r * k + i];
                            mag += fabs((double)wd[(size_t)j * k + i] * xr[(size_t)r * k + i]);
                        }
                        if (mode == 1)
                            ref += bias[j];
                        if (mode == 2)
                            ref += y0[(size_t)r * n + j];
                        double e = fabs(hy[(size_t)r * n + j] - ref) / (mag + 1e-30);
                        iw = e > iw ? e : iw;
                    }
                for (uint32_t r = m; r < M; r++)
                    for (uint32_t j = 0; j < n; j++)
                        if (hy[(size_t)r * n + j] != y0[(size_t)r * n + j])
                            im_ok = 0;
            }
        }
        CT_CHECK(iw < 1e-6 && im_ok, "%-5s integer GEMV m = 1..%u (plain, bias, accumulate): "
                 "worst error %.2e of sum |terms| (< 1e-6), other rows untouched", name, M, iw);
        float *ia = malloc(sizeof(float) * n), *ib = malloc(sizeof(float) * n * M);
        const uint32_t dg = act == HR_CUDA_ACT_Q8_0 ? 32 : 256;
        struct hr_cuda_q8_act q3 = {qa.q + 3 * k, qa.d + 3 * (k / dg), qa.s + 3 * (k / 16)};
        CT_CUDA(hr_cuda_gemv_int((int)t, dw, rb, k, n, &q3, 1, dy, n, NULL, 0, 0));
        from_dev(ia, dy, sizeof(float) * n);
        CT_CUDA(hr_cuda_gemv_int((int)t, dw, rb, k, n, &qa, M, dy, n, NULL, 0, 0));
        from_dev(ib, dy, sizeof(float) * n * M);
        CT_CHECK(memcmp(ia, ib + 3 * n, sizeof(float) * n) == 0, "%-5s integer GEMV row 3 alone "
                 "== row 3 of %u rows, bit for bit", name, M);
        check_parts(t, dw, rb, k, n, NULL, &qa, M, dbias);
        check_expert_rows(t, dw, rb, k, NULL, &qa, dg);
        free(ia), free(ib);
        cudaFree(qa.q), cudaFree(qa.d), cudaFree(qa.s);
    }

    /* Weights dequantized to f16 for the tensor-core GEMM: the CPU's values,
     * rounded to nearest f16, bit for bit. */
    {
        uint16_t *dh = NULL, *hh = malloc(sizeof(uint16_t) * k * n);
        CT_CUDA(cudaMalloc((void **)&dh, sizeof(uint16_t) * k * n));
        CT_CUDA(hr_cuda_dequant_half((int)t, dw, rb, k, 0, n, dh, 0, 0));
        from_dev(hh, dh, sizeof(uint16_t) * k * n);
        int same = 1;
        for (size_t i = 0; i < (size_t)k * n && same; i++)
            same = hh[i] == hr_f32_to_f16(wd[i]);
        CT_CHECK(same, "%-5s dequantize to f16 (tensor-core tiles): the CPU's values rounded, bit "
                 "for bit", name);
        cudaFree(dh);
        free(hh);
    }

    /* The CPU's own kernel against the same reference: how far ggml-cpu's
     * arithmetic (integer block sums, scaled) is from the dot product of the
     * values the GPU multiplies. Printed, not checked: it explains the GPU -
     * CPU differences the whole-model test sees. */
    {
        /* act is 64-byte aligned (matmul.h): the K-quant kernels load it aligned */
        void *cact = aligned_alloc(64, (hr_matmul_act_bytes(t, M, k) + 63) / 64 * 64);
        float *cy = malloc(sizeof(float) * n * M);
        hr_matmul_prepare(t, x, M, k, cact, 0, 1);
        hr_matmul_compute(t, wq, k, n, cact, M, cy, n, 0, 1);
        double cw = 0.0;
        for (uint32_t r = 0; r < M; r++)
            for (uint32_t j = 0; j < n; j++) {
                double ref = 0.0, mag = 0.0;
                for (uint32_t i = 0; i < k; i++) {
                    ref += (double)wd[(size_t)j * k + i] * xr[(size_t)r * k + i];
                    mag += fabs((double)wd[(size_t)j * k + i] * xr[(size_t)r * k + i]);
                }
                double e = fabs(cy[(size_t)r * n + j] - ref) / (mag + 1e-30);
                cw = e > cw ? e : cw;
            }
        printf("  data  %-5s the CPU kernel (%s) against the same reference: worst error %.2e of "
               "sum |terms|\n", name, hr_kernels_isa(), cw);
        free(cact), free(cy);
    }

    /* GEMM (m > 8): against the reference, and row 3 the same at m = 9 and 70 */
    {
        const uint32_t MG = 70;
        float *gx = malloc(sizeof(float) * k * MG), *gy = malloc(sizeof(float) * n * MG);
        float *gy9 = malloc(sizeof(float) * n * 9);
        for (size_t i = 0; i < (size_t)k * MG; i++)
            gx[i] = frand();
        float *dgx = to_dev(gx, sizeof(float) * k * MG), *dgy = NULL;
        CT_CUDA(cudaMalloc((void **)&dgy, sizeof(float) * n * MG));
        double gw = 0.0;
        for (int mode = 0; mode < 3; mode++) {
            for (size_t i = 0; i < (size_t)n * MG; i++)
                gy[i] = frand();
            float *y0g = malloc(sizeof(float) * n * MG);
            memcpy(y0g, gy, sizeof(float) * n * MG);
            CT_CUDA(cudaMemcpy(dgy, gy, sizeof(float) * n * MG, cudaMemcpyHostToDevice));
            CT_CUDA(hr_cuda_gemm((int)t, dw, rb, k, n, dgx, MG, dgy, n, mode == 1 ? dbias : NULL,
                                 mode == 2, 0));
            from_dev(gy, dgy, sizeof(float) * n * MG);
            for (uint32_t r = 0; r < MG; r++)
                for (uint32_t j = 0; j < n; j++) {
                    double ref = 0.0, mag = 0.0;
                    for (uint32_t i = 0; i < k; i++) {
                        ref += (double)wd[(size_t)j * k + i] * gx[(size_t)r * k + i];
                        mag += fabs((double)wd[(size_t)j * k + i] * gx[(size_t)r * k + i]);
                    }
                    if (mode == 1)
                        ref += bias[j];
                    if (mode == 2)
                        ref += y0g[(size_t)r * n + j];
                    double e = fabs(gy[(size_t)r * n + j] - ref) / (mag + 1e-30);
                    gw = e > gw ? e : gw;
                }
            free(y0g);
        }
        CT_CHECK(gw < 1e-6, "%-5s GEMM m = %u (plain, bias, accumulate): worst error %.2e of sum "
                 "|terms| (< 1e-6)", name, MG, gw);
        CT_CUDA(hr_cuda_gemm((int)t, dw, rb, k, n, dgx, MG, dgy, n, NULL, 0, 0));
        from_dev(gy, dgy, sizeof(float) * n * MG);
        CT_CUDA(hr_cuda_gemm((int)t, dw, rb, k, n, dgx + (size_t)61 * k, 9, dgy, n, NULL, 0, 0));
        from_dev(gy9, dgy, sizeof(float) * n * 9);
        CT_CHECK(memcmp(gy + (size_t)64 * n, gy9 + (size_t)3 * n, sizeof(float) * n) == 0,
                 "%-5s GEMM row 64 of 70 == row 3 of 9 (another tile), bit for bit", name);

        /* The integer GEMM (int8 MMA on Q8_0 inputs), where the type has one:
         * against the dot of the weights' values and the inputs' rounded
         * values, every mode, and a row's result independent of m. */
        if (hr_cuda_gemm_int_type((int)t, act)) {
            struct hr_cuda_q8_act qg;
            float *dgxr = NULL, *gxr = malloc(sizeof(float) * k * MG);
            CT_CUDA(cudaMalloc((void **)&qg.q, (size_t)k * MG));
            CT_CUDA(cudaMalloc((void **)&qg.d, sizeof(float) * (k / 32) * MG));
            CT_CUDA(cudaMalloc((void **)&dgxr, sizeof(float) * k * MG));
            /* Q8_K inputs (Q4_K): a scale per 256 and sums per 16 */
            const uint32_t dg = act == HR_CUDA_ACT_Q8_K ? 256 : 32;
            CT_CUDA(cudaMalloc((void **)&qg.s, sizeof(int16_t) * (k / 16) * MG));
            CT_CUDA(hr_cuda_quant_act(act, dgx, MG, k, &qg, 0));
            CT_CUDA(hr_cuda_act_round(act, dgx, MG, k, dgxr, 0));
            from_dev(gxr, dgxr, sizeof(float) * k * MG);
            double qw = 0.0;
            for (int mode = 0; mode < 3; mode++) {
                float *y0g = malloc(sizeof(float) * n * MG);
                for (size_t i = 0; i < (size_t)n * MG; i++)
                    y0g[i] = frand();
                CT_CUDA(cudaMemcpy(dgy, y0g, sizeof(float) * n * MG, cudaMemcpyHostToDevice));
                CT_CUDA(hr_cuda_gemm_int((int)t, dw, rb, k, n, &qg, MG, dgy, n,
                                         mode == 1 ? dbias : NULL, mode == 2, 0));
                from_dev(gy, dgy, sizeof(float) * n * MG);
                for (uint32_t r = 0; r < MG; r++)
                    for (uint32_t j = 0; j < n; j++) {
                        double ref = 0.0, mag = 0.0;
                        for (uint32_t i = 0; i < k; i++) {
                            const double p = (double)wd[(size_t)j * k + i] * gxr[(size_t)r * k + i];
                            ref += p, mag += fabs(p);
                        }
                        if (mode == 1)
                            ref += bias[j];
                        if (mode == 2)
                            ref += y0g[(size_t)r * n + j];
                        double e = fabs(gy[(size_t)r * n + j] - ref) / (mag + 1e-30);
                        qw = e > qw ? e : qw;
                    }
                free(y0g);
            }
            CT_CHECK(qw < 1e-6, "%-5s integer GEMM m = %u (plain, bias, accumulate): worst error "
                     "%.2e of sum |terms| (< 1e-6)", name, MG, qw);
            CT_CUDA(hr_cuda_gemm_int((int)t, dw, rb, k, n, &qg, MG, dgy, n, NULL, 0, 0));
            from_dev(gy, dgy, sizeof(float) * n * MG);
            struct hr_cuda_q8_act q61 = {qg.q + (size_t)61 * k, qg.d + (size_t)61 * (k / dg),
                                         qg.s + (size_t)61 * (k / 16)};
            CT_CUDA(hr_cuda_gemm_int((int)t, dw, rb, k, n, &q61, 9, dgy, n, NULL, 0, 0));
            from_dev(gy9, dgy, sizeof(float) * n * 9);
            CT_CHECK(memcmp(gy + (size_t)64 * n, gy9 + (size_t)3 * n, sizeof(float) * n) == 0,
                     "%-5s integer GEMM row 64 of 70 == row 3 of 9 (another tile), bit for bit",
                     name);
            cudaFree(qg.q), cudaFree(qg.d), cudaFree(qg.s), cudaFree(dgxr);
            free(gxr);
        }
        cudaFree(dgx), cudaFree(dgy);
        free(gx), free(gy), free(gy9);
    }

    /* batch invariance: row r's result is the same for every m */
    float *ya = malloc(sizeof(float) * n), *yb = malloc(sizeof(float) * n * M);
    CT_CUDA(hr_cuda_gemv((int)t, dw, rb, k, n, dxr + 3 * k, 1, dy, n, NULL, 0, 0));
    from_dev(ya, dy, sizeof(float) * n);
    CT_CUDA(hr_cuda_gemv((int)t, dw, rb, k, n, dxr, M, dy, n, NULL, 0, 0));
    from_dev(yb, dy, sizeof(float) * n * M);
    CT_CHECK(memcmp(ya, yb + 3 * n, sizeof(float) * n) == 0, "%-5s GEMV row 3 alone == row 3 of "
             "%u rows, bit for bit", name, M);

    cudaFree(dw), cudaFree(dout), cudaFree(dx), cudaFree(dxr), cudaFree(dbias), cudaFree(dy);
    free(wf), free(wd), free(wq), free(hout), free(x), free(xr), free(scratch), free(hxr);
    free(bias), free(hy), free(y0), free(ya), free(yb);
}

/* The norm that also prepares the next matmul's inputs: the same xn, and
 * the same f16-rounded or Q8_0 bytes as the separate kernels make, bit for
 * bit; n = 160 leaves idle threads in the block, 8192 takes two passes. */
static void test_norm_prep(void)
{
    const uint32_t ns[] = {160, 896, 4096, 8192}, R = 3;
    int same = 1;
    for (size_t c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
        const uint32_t n = ns[c];
        float *x = malloc(sizeof(float) * n * R), *w = malloc(sizeof(float) * n);
        for (size_t i = 0; i < (size_t)n * R; i++)
            x[i] = frand() * 4.0f;
        x[5] = 0.0f;
        for (uint32_t i = 0; i < 32; i++)
            x[n + i] = 0.0f; /* a block of zeros: amax 0 */
        for (uint32_t i = 0; i < n; i++)
            w[i] = 0.5f + frand();
        float *dx = to_dev(x, sizeof(float) * n * R), *dw = to_dev(w, sizeof(float) * n);
        float *dy0, *dy1, *da0, *da1;
        struct hr_cuda_q8_act q0 = {0}, q1 = {0};
        CT_CUDA(cudaMalloc((void **)&dy0, sizeof(float) * n * R));
        CT_CUDA(cudaMalloc((void **)&dy1, sizeof(float) * n * R));
        CT_CUDA(cudaMalloc((void **)&da0, sizeof(float) * n * R));
        CT_CUDA(cudaMalloc((void **)&da1, sizeof(float) * n * R));
        CT_CUDA(cudaMalloc((void **)&q0.q, (size_t)n * R));
        CT_CUDA(cudaMalloc((void **)&q1.q, (size_t)n * R));
        CT_CUDA(cudaMalloc((void **)&q0.d, sizeof(float) * (n / 32) * R));
        CT_CUDA(cudaMalloc((void **)&q1.d, sizeof(float) * (n / 32) * R));
        CT_CUDA(hr_cuda_rms_norm(dx, NULL, NULL, R, n, dw, 1e-6f, dy0, 0));
        CT_CUDA(hr_cuda_act_round(HR_CUDA_ACT_F16, dy0, R, n, da0, 0));
        CT_CUDA(hr_cuda_quant_act(HR_CUDA_ACT_Q8_0, dy0, R, n, &q0, 0));
        hr_cuda_norm_prep pr = {.kind = HR_CUDA_NORM_PREP_F16, .act = da1};
        CT_CUDA(hr_cuda_rms_norm_prep(dx, R, n, dw, 1e-6f, dy1, &pr, 0));
        const size_t fb = sizeof(float) * n * R;
        char *a = malloc(fb), *b = malloc(fb);
        from_dev(a, dy0, fb), from_dev(b, dy1, fb);
        same &= memcmp(a, b, fb) == 0;
        from_dev(a, da0, fb), from_dev(b, da1, fb);
        same &= memcmp(a, b, fb) == 0;
        pr = (hr_cuda_norm_prep){.kind = HR_CUDA_NORM_PREP_Q8_0, .q = q1};
        CT_CUDA(cudaMemset(dy1, 0, fb));
        CT_CUDA(hr_cuda_rms_norm_prep(dx, R, n, dw, 1e-6f, dy1, &pr, 0));
        same &= same_dev(dy0, dy1, fb) && same_dev(q0.q, q1.q, (size_t)n * R) &&
                same_dev(q0.d, q1.d, sizeof(float) * (n / 32) * R);
        if (n % 256 == 0) { /* Q8_K: q, the scale per 256 and the sums per 16 */
            struct hr_cuda_q8_act k0 = {0}, k1 = {0};
            CT_CUDA(cudaMalloc((void **)&k0.q, (size_t)n * R));
            CT_CUDA(cudaMalloc((void **)&k1.q, (size_t)n * R));
            CT_CUDA(cudaMalloc((void **)&k0.d, sizeof(float) * (n / 256) * R));
            CT_CUDA(cudaMalloc((void **)&k1.d, sizeof(float) * (n / 256) * R));
            CT_CUDA(cudaMalloc((void **)&k0.s, sizeof(int16_t) * (n / 16) * R));
            CT_CUDA(cudaMalloc((void **)&k1.s, sizeof(int16_t) * (n / 16) * R));
            CT_CUDA(hr_cuda_quant_act(HR_CUDA_ACT_Q8_K, dy0, R, n, &k0, 0));
            pr = (hr_cuda_norm_prep){.kind = HR_CUDA_NORM_PREP_Q8_K, .q = k1};
            CT_CUDA(hr_cuda_rms_norm_prep(dx, R, n, dw, 1e-6f, dy1, &pr, 0));
            same &= same_dev(dy0, dy1, fb) && same_dev(k0.q, k1.q, (size_t)n * R) &&
                    same_dev(k0.d, k1.d, sizeof(float) * (n / 256) * R) &&
                    same_dev(k0.s, k1.s, sizeof(int16_t) * (n / 16) * R);
            cudaFree(k0.q), cudaFree(k1.q), cudaFree(k0.d), cudaFree(k1.d), cudaFree(k0.s), cudaFree(k1.s);
        }
        free(a), free(b), free(x), free(w);
        cudaFree(dx), cudaFree(dw), cudaFree(dy0), cudaFree(dy1), cudaFree(da0), cudaFree(da1);
        cudaFree(q0.q), cudaFree(q1.q), cudaFree(q0.d), cudaFree(q1.d);
    }
    CT_CHECK(same, "RMSNorm with the next matmul's inputs (f16-rounded; Q8_0; Q8_K from 4096), "
             "n = 160, 896, 4096, 8192: the separate kernels' bytes, bit for bit");
}

/* The norm's quantized inputs for `t` (Q8_K for Q4_K, Q8_0 for Q8_0) as
 * two equal rows of qa (hr_cuda_rms_norm_prep twice): the batch kernel's
 * reference for a fused launch's one row. */
static void normed_ref_inputs(enum hr_ggml_type t, const float *dx, const float *dg, uint32_t k,
                              float *dxn, struct hr_cuda_q8_act *qa)
{
    const uint32_t dgp = t == HR_GGML_Q4_K ? 256 : 32;
    for (int r = 0; r < 2; r++) {
        hr_cuda_norm_prep pr = {.kind = t == HR_GGML_Q4_K ? HR_CUDA_NORM_PREP_Q8_K
                                                         : HR_CUDA_NORM_PREP_Q8_0};
        pr.q.q = qa->q + (size_t)r * k, pr.q.d = qa->d + (size_t)r * (k / dgp);
        pr.q.s = qa->s + (size_t)r * (k / 16);
        CT_CUDA(hr_cuda_rms_norm_prep((float *)dx, 1, k, dg, 1e-5f, dxn, &pr, 0));
    }
}

/* n random rows of k values quantized to t, on the device */
static uint8_t *rand_matrix_dev(enum hr_ggml_type t, uint32_t k, uint32_t n)
{
    const size_t rb = hr_row_bytes(t, k);
    float *wf = malloc(sizeof(float) * k);
    uint8_t *wq = malloc(rb * n);
    for (uint32_t r = 0; r < n; r++) {
        for (uint32_t i = 0; i < k; i++)
            wf[i] = frand();
        hr_quantize_row(t, wf, wq + r * rb, k);
    }
    uint8_t *dw = to_dev(wq, rb * n);
    free(wf), free(wq);
    return dw;
}

/* A norm's random residual x and weights g (k values each), on the device */
static void rand_norm_dev(uint32_t k, float **dx, float **dg)
{
    float *x = malloc(sizeof(float) * k), *g = malloc(sizeof(float) * k);
    for (uint32_t i = 0; i < k; i++)
        x[i] = frand() * 3.0f, g[i] = 0.5f + frand();
    *dx = to_dev(x, sizeof(float) * k), *dg = to_dev(g, sizeof(float) * k);
    free(x), free(g);
}

static void alloc_q8(struct hr_cuda_q8_act *qa, uint32_t rows, uint32_t k)
{
    CT_CUDA(cudaMalloc((void **)&qa->q, (size_t)rows * k));
    CT_CUDA(cudaMalloc((void **)&qa->d, sizeof(float) * rows * (k / 32)));
    CT_CUDA(cudaMalloc((void **)&qa->s, sizeof(int16_t) * rows * (k / 16)));
}

static void free_q8(struct hr_cuda_q8_act *qa)
{
    cudaFree(qa->q), cudaFree(qa->d), cudaFree(qa->s);
}

/* The GEMV that does the RMSNorm before it (hr_cuda_gemv_normed; Q4_K by
 * default, Q8_0 under HR_CUDA_Q80=pipe): against the norm's inputs then
 * the type's batch kernel (two equal input rows, so not the one-row
 * kernel: the fused kernel's bits are a ragged step's), row 0, bit for
 * bit: k = 2304 and 4096, 99 rows as three parts with their own strides
 * and biases. */
static void test_normed(enum hr_ggml_type t)
{
    if (!hr_cuda_gemv_normed_ok((int)t, 4096)) {
        printf("  skip  %s GEMV with its norm: its pipelined kernel is off\n", hr_ggml_type_name(t));
        return;
    }
    int same = 1;
    const uint32_t ks[2] = {2304, 4096}, n = 99, cut[4] = {0, 39, 69, 99};
    for (int ki = 0; ki < 2; ki++) {
        const uint32_t k = ks[ki];
        const size_t rb = hr_row_bytes(t, k);
        float *bias = malloc(sizeof(float) * n), *dx, *dg, *dxn;
        for (uint32_t j = 0; j < n; j++)
            bias[j] = frand();
        uint8_t *dw = rand_matrix_dev(t, k, n);
        rand_norm_dev(k, &dx, &dg);
        float *db = to_dev(bias, sizeof(float) * n);
        struct hr_cuda_q8_act qa = {0};
        CT_CUDA(cudaMalloc((void **)&dxn, sizeof(float) * k));
        alloc_q8(&qa, 2, k);
        float *dy[2][3];
        hr_cuda_gemv_out o[2];
        for (int v = 0; v < 2; v++) {
            memset(&o[v], 0, sizeof(o[v]));
            for (int p = 0; p < 3; p++) {
                const uint32_t ld = cut[p + 1] - cut[p] + 3 + (uint32_t)p;
                CT_CUDA(cudaMalloc((void **)&dy[v][p], sizeof(float) * ld * 2));
                CT_CUDA(cudaMemset(dy[v][p], 0, sizeof(float) * ld * 2));
                o[v].w[p] = dw + (size_t)cut[p] * rb, o[v].y[p] = dy[v][p];
                o[v].bias[p] = p == 1 ? NULL : db + cut[p], o[v].ldy[p] = ld;
                o[v].end[p] = cut[p + 1];
            }
            o[v].n = n, o[v].n_parts = 3;
        }
        normed_ref_inputs(t, dx, dg, k, dxn, &qa);
        CT_CUDA(hr_cuda_gemv_int_parts((int)t, rb, k, &o[0], &qa, 2, 0, 0));
        CT_CUDA(hr_cuda_gemv_normed((int)t, rb, k, &o[1], dx, dg, 1e-5f, NULL, 0, 0));
        for (int p = 0; p < 3; p++)
            same &= same_dev(dy[0][p], dy[1][p], sizeof(float) * (cut[p + 1] - cut[p] + 3 + p));
        for (int v = 0; v < 2; v++)
            for (int p = 0; p < 3; p++)
                cudaFree(dy[v][p]);
        cudaFree(dw), cudaFree(dx), cudaFree(dg), cudaFree(db), cudaFree(dxn);
        free_q8(&qa);
        free(bias);
    }
    CT_CHECK(same, "%-5s integer GEMV with its RMSNorm (k = 2304, 4096; one input row; 3 parts, "
             "own strides and biases) == the norm's inputs then the batch kernel, bit for bit",
             hr_ggml_type_name(t));
}

/* Gate/up with its norm and the SwiGLU after it in one launch
 * (hr_cuda_gemv_normed with hr_cuda_swiglu_q8): against the norm's inputs,
 * the batch GEMV of both parts (two equal rows), then SwiGLU with down's
 * inputs (hr_cuda_swiglu_prep: Q8_K after Q4_K, Q8_0 after Q8_0), bit for
 * bit: h in gate's place, up, and down's input bytes and scales (and
 * Q8_K's sums); F = 768 at k = 4096 and F = 256 at k = 2304, each launched
 * three times on the same counters (they count on). */
static void test_swiglu_fused(enum hr_ggml_type t)
{
    if (!hr_cuda_gemv_normed_ok((int)t, 4096)) {
        printf("  skip  %s gate/up with its norm and SwiGLU: its pipelined kernel is off\n",
               hr_ggml_type_name(t));
        return;
    }
    int same = 1;
    const int q8k = t == HR_GGML_Q4_K;
    const uint32_t ks[2] = {4096, 2304}, fs[2] = {768, 256}, grp = q8k ? 256 : 32;
    for (int ki = 0; ki < 2; ki++) {
        const uint32_t k = ks[ki], F = fs[ki], n = 2 * F;
        const size_t rb = hr_row_bytes(t, k);
        uint8_t *dw = rand_matrix_dev(t, k, n);
        float *dx, *dg, *dxn;
        rand_norm_dev(k, &dx, &dg);
        uint32_t *ctr;
        CT_CUDA(cudaMalloc((void **)&dxn, sizeof(float) * k));
        CT_CUDA(cudaMalloc((void **)&ctr, sizeof(uint32_t) * (F / grp)));
        CT_CUDA(cudaMemset(ctr, 0, sizeof(uint32_t) * (F / grp)));
        struct hr_cuda_q8_act qa = {0}, qh[2] = {{0}, {0}};
        alloc_q8(&qa, 2, k);
        float *gy[2], *uy[2];
        hr_cuda_gemv_out o[2];
        for (int v = 0; v < 2; v++) {
            alloc_q8(&qh[v], 1, F);
            CT_CUDA(cudaMalloc((void **)&gy[v], sizeof(float) * F * 2));
            CT_CUDA(cudaMalloc((void **)&uy[v], sizeof(float) * F * 2));
            memset(&o[v], 0, sizeof(o[v]));
            o[v].w[0] = dw, o[v].w[1] = dw + (size_t)F * rb;
            o[v].y[0] = gy[v], o[v].y[1] = uy[v], o[v].ldy[0] = o[v].ldy[1] = F;
            o[v].end[0] = F, o[v].end[1] = o[v].end[2] = n;
            o[v].n = n, o[v].n_parts = 2;
        }
        normed_ref_inputs(t, dx, dg, k, dxn, &qa);
        CT_CUDA(hr_cuda_gemv_int_parts((int)t, rb, k, &o[0], &qa, 2, 0, 0));
        hr_cuda_norm_prep pr = {.kind = q8k ? HR_CUDA_NORM_PREP_Q8_K : HR_CUDA_NORM_PREP_Q8_0,
                                .q = qh[0]};
        CT_CUDA(hr_cuda_swiglu_prep(gy[0], uy[0], F, &pr, 0));
        const hr_cuda_swiglu_q8 sw = {.q = qh[1], .ctr = ctr};
        for (int rep = 0; rep < 3; rep++) {
            CT_CUDA(cudaMemset(gy[1], 0, sizeof(float) * F));
            CT_CUDA(cudaMemset(qh[1].q, 0, F));
            CT_CUDA(hr_cuda_gemv_normed((int)t, rb, k, &o[1], dx, dg, 1e-5f, &sw, 0, 0));
            same &= same_dev(gy[0], gy[1], sizeof(float) * F) &&
                    same_dev(uy[0], uy[1], sizeof(float) * F) && same_dev(qh[0].q, qh[1].q, F) &&
                    same_dev(qh[0].d, qh[1].d, sizeof(float) * (F / grp));
            if (q8k)
                same &= same_dev(qh[0].s, qh[1].s, sizeof(int16_t) * (F / 16));
        }
        for (int v = 0; v < 2; v++) {
            cudaFree(gy[v]), cudaFree(uy[v]);
            free_q8(&qh[v]);
        }
        cudaFree(dw), cudaFree(dx), cudaFree(dg), cudaFree(dxn), cudaFree(ctr);
        free_q8(&qa);
    }
    CT_CHECK(same, "%-5s integer gate/up with its RMSNorm and SwiGLU (k = 4096, F = 768; k = "
             "2304, F = 256; 3 launches on the same counters) == norm, batch GEMV, SwiGLU with "
             "down's inputs, bit for bit", hr_ggml_type_name(t));
}

/* SwiGLU that also prepares the down matmul's inputs, the same way. */
static void test_swiglu_prep(void)
{
    const uint32_t n = 3 * 4864; /* three rows of Qwen2.5-0.5B's FFN */
    float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n);
    for (uint32_t i = 0; i < n; i++)
        g[i] = frand() * 6.0f, u[i] = frand() * 2.0f;
    for (uint32_t i = 64; i < 96; i++)
        u[i] = 0.0f; /* a block of zeros */
    float *dg0 = to_dev(g, sizeof(float) * n), *dg1 = to_dev(g, sizeof(float) * n);
    float *du = to_dev(u, sizeof(float) * n), *da0, *da1;
    struct hr_cuda_q8_act q0 = {0}, q1 = {0};
    CT_CUDA(cudaMalloc((void **)&da0, sizeof(float) * n));
    CT_CUDA(cudaMalloc((void **)&da1, sizeof(float) * n));
    CT_CUDA(cudaMalloc((void **)&q0.q, n));
    CT_CUDA(cudaMalloc((void **)&q1.q, n));
    CT_CUDA(cudaMalloc((void **)&q0.d, sizeof(float) * (n / 32)));
    CT_CUDA(cudaMalloc((void **)&q1.d, sizeof(float) * (n / 32)));
    CT_CUDA(hr_cuda_swiglu(dg0, du, n, 0));
    CT_CUDA(hr_cuda_act_round(HR_CUDA_ACT_F16, dg0, 1, n, da0, 0));
    CT_CUDA(hr_cuda_quant_act(HR_CUDA_ACT_Q8_0, dg0, 1, n, &q0, 0));
    hr_cuda_norm_prep pr = {.kind = HR_CUDA_NORM_PREP_F16, .act = da1};
    CT_CUDA(hr_cuda_swiglu_prep(dg1, du, n, &pr, 0));
    int same = same_dev(dg0, dg1, sizeof(float) * n) && same_dev(da0, da1, sizeof(float) * n);
    CT_CUDA(cudaMemcpy(dg1, g, sizeof(float) * n, cudaMemcpyHostToDevice));
    pr = (hr_cuda_norm_prep){.kind = HR_CUDA_NORM_PREP_Q8_0, .q = q1};
    CT_CUDA(hr_cuda_swiglu_prep(dg1, du, n, &pr, 0));
    same &= same_dev(q0.q, q1.q, n) && same_dev(q0.d, q1.d, sizeof(float) * (n / 32));
    {
        struct hr_cuda_q8_act k0 = {0}, k1 = {0};
        CT_CUDA(cudaMalloc((void **)&k0.q, n));
        CT_CUDA(cudaMalloc((void **)&k1.q, n));
        CT_CUDA(cudaMalloc((void **)&k0.d, sizeof(float) * (n / 256)));
        CT_CUDA(cudaMalloc((void **)&k1.d, sizeof(float) * (n / 256)));
        CT_CUDA(cudaMalloc((void **)&k0.s, sizeof(int16_t) * (n / 16)));
        CT_CUDA(cudaMalloc((void **)&k1.s, sizeof(int16_t) * (n / 16)));
        CT_CUDA(hr_cuda_quant_act(HR_CUDA_ACT_Q8_K, dg0, 1, n, &k0, 0));
        CT_CUDA(cudaMemcpy(dg1, g, sizeof(float) * n, cudaMemcpyHostToDevice));
        pr = (hr_cuda_norm_prep){.kind = HR_CUDA_NORM_PREP_Q8_K, .q = k1};
        CT_CUDA(hr_cuda_swiglu_prep(dg1, du, n, &pr, 0));
        same &= same_dev(k0.q, k1.q, n) && same_dev(k0.d, k1.d, sizeof(float) * (n / 256)) &&
                same_dev(k0.s, k1.s, sizeof(int16_t) * (n / 16));
        cudaFree(k0.q), cudaFree(k1.q), cudaFree(k0.d), cudaFree(k1.d), cudaFree(k0.s), cudaFree(k1.s);
    }
    CT_CHECK(same, "SwiGLU with the down matmul's inputs (f16-rounded; Q8_0; Q8_K): the "
             "separate kernels' bytes, bit for bit");
    free(g), free(u);
    cudaFree(dg0), cudaFree(dg1), cudaFree(du), cudaFree(da0), cudaFree(da1);
    cudaFree(q0.q), cudaFree(q1.q), cudaFree(q0.d), cudaFree(q1.d);
}

static void test_small(void)
{
    const uint32_t n = 384, rows = 5;
    float *x = malloc(sizeof(float) * n * rows), *add = malloc(sizeof(float) * n * rows);
    float *w = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n * 2);
    for (size_t i = 0; i < (size_t)n * rows; i++)
        x[i] = frand() * 2, add[i] = frand();
    for (uint32_t i = 0; i < n; i++)
        w[i] = frand();
    int32_t idx[2] = {3, 1};
    float *dx = to_dev(x, sizeof(float) * n * rows), *dadd = to_dev(add, sizeof(float) * n * rows);
    float *dw = to_dev(w, sizeof(float) * n), *dy = NULL;
    int32_t *didx = to_dev(idx, sizeof(idx));
    CT_CUDA(cudaMalloc((void **)&dy, sizeof(float) * n * 2));
    CT_CUDA(hr_cuda_rms_norm(dx, dadd, didx, 2, n, dw, 1e-6f, dy, 0));
    from_dev(y, dy, sizeof(float) * n * 2);
    double worst = 0;
    for (int r = 0; r < 2; r++) {
        const float *xr = x + (size_t)idx[r] * n, *ar = add + (size_t)idx[r] * n;
        float s[384];
        double sum = 0;
        for (uint32_t i = 0; i < n; i++) {
            s[i] = xr[i] + ar[i];
            sum += (double)(s[i] * s[i]);
        }
        const float scale = 1.0f / sqrtf((float)(sum / n) + 1e-6f);
        for (uint32_t i = 0; i < n; i++) {
            double e = fabs(y[(size_t)r * n + i] - (s[i] * scale) * w[i]);
            worst = e > worst ? e : worst;
        }
    }
    CT_CHECK(worst <= 1e-6, "RMSNorm with residual add and row index: worst abs error %.2e", worst);

    /* SwiGLU */
    float *dg = to_dev(x, sizeof(float) * n), *du = to_dev(add, sizeof(float) * n);
    CT_CUDA(hr_cuda_swiglu(dg, du, n, 0));
    from_dev(y, dg, sizeof(float) * n);
    worst = 0;
    for (uint32_t i = 0; i < n; i++) {
        double ref = x[i] / (1.0 + exp(-(double)x[i])) * add[i];
        double e = fabs(y[i] - ref);
        worst = e > worst ? e : worst;
    }
    CT_CHECK(worst < 1e-6, "SwiGLU: worst abs error %.2e", worst);

    /* RoPE table: the CPU's multiply chain, cos/sin to a few ulp */
    const uint32_t n_rot = 64, T = 3;
    int32_t pos[3] = {0, 17, 4000};
    float freqs[32];
    for (int i = 0; i < 32; i++)
        freqs[i] = 1.0f + (float)i / 8;
    int32_t *dpos = to_dev(pos, sizeof(pos));
    float *dfreqs = to_dev(freqs, sizeof(freqs)), *drope = NULL, rope[3 * 64];
    CT_CUDA(cudaMalloc((void **)&drope, sizeof(rope)));
    const float ts = powf(10000.0f, -2.0f / (float)n_rot);
    const struct hr_cuda_rope lin = {.theta_scale = ts, .freq_scale = 0.5f, .attn_factor = 1.0f};
    CT_CUDA(hr_cuda_rope_table(dpos, T, n_rot, &lin, dfreqs, drope, 0));
    from_dev(rope, drope, sizeof(rope));
    worst = 0;
    for (uint32_t t = 0; t < T; t++) {
        float theta = (float)pos[t];
        for (uint32_t i0 = 0; i0 < n_rot; i0 += 2) {
            const float a = 0.5f * (theta / freqs[i0 / 2]);
            double e = fmax(fabs(rope[t * n_rot + i0] - cosf(a)), fabs(rope[t * n_rot + i0 + 1] - sinf(a)));
            worst = e > worst ? e : worst;
            theta *= ts;
        }
    }
    CT_CHECK(worst < 1e-6, "RoPE table (llama3 factors, linear scale): worst abs error %.2e", worst);

    /* YaRN (gpt-oss's constants, from the engine's hr_rope_init): each
     * pair's angle on the ramp between interpolated and extrapolated, cos
     * and sin scaled; the reference restates ggml's rope_yarn in float */
    struct hr_model ym;
    memset(&ym, 0, sizeof(ym));
    ym.hp.rope_base = 150000.0f, ym.hp.n_rot = n_rot, ym.hp.rope_scaling = HR_ROPE_SCALING_YARN;
    ym.hp.rope_factor = 32.0f, ym.hp.rope_orig_ctx = 4096, ym.hp.yarn_beta_fast = 32.0f;
    ym.hp.yarn_beta_slow = 1.0f, ym.hp.yarn_ext_factor = -1.0f, ym.hp.yarn_attn_factor = 1.0f;
    struct hr_rope yr;
    hr_rope_init(&ym, &yr);
    const struct hr_cuda_rope yc = {yr.theta_scale, yr.freq_scale, yr.ext_factor, yr.attn_factor,
                                    {yr.corr_dims[0], yr.corr_dims[1]}};
    CT_CUDA(hr_cuda_rope_table(dpos, T, n_rot, &yc, NULL, drope, 0));
    from_dev(rope, drope, sizeof(rope));
    worst = 0;
    for (uint32_t t = 0; t < T; t++) {
        float theta = (float)pos[t];
        for (uint32_t i0 = 0; i0 < n_rot; i0 += 2) {
            const float ex = theta, ip = yr.freq_scale * ex;
            float r = ((float)(i0 / 2) - yr.corr_dims[0]) / fmaxf(0.001f, yr.corr_dims[1] - yr.corr_dims[0]);
            r = fminf(1.0f, fmaxf(0.0f, r));
            const float mix = (1 - r) * yr.ext_factor, a = ip * (1 - mix) + ex * mix;
            const float ms = yr.attn_factor * (1.0f + 0.1f * logf(1.0f / yr.freq_scale));
            double e = fmax(fabs(rope[t * n_rot + i0] - cosf(a) * ms),
                            fabs(rope[t * n_rot + i0 + 1] - sinf(a) * ms));
            worst = e > worst ? e : worst;
            theta *= yr.theta_scale;
        }
    }
    CT_CHECK(yr.ext_factor == 1.0f && yr.freq_scale == 1.0f / 32,
             "YaRN constants: ext_factor %g, freq_scale %g", yr.ext_factor, yr.freq_scale);
    CT_CHECK(worst < 1e-5, "RoPE table (YaRN, factor 32): worst abs error %.2e", worst);
    cudaFree(dx), cudaFree(dadd), cudaFree(dw), cudaFree(dy), cudaFree(didx), cudaFree(dg);
    cudaFree(du), cudaFree(dpos), cudaFree(dfreqs), cudaFree(drope);
    free(x), free(add), free(w), free(y);
}

/* The small integer GEMM (Q4_K on Q8_K inputs, decode batches of up to
 * HR_CUDA_GEMM_SMALL_ROWS rows): against the dot of the weights' values and
 * the inputs' rounded values (plain, bias, accumulate); and a token's
 * result the same bit for bit whatever m and its place in the batch (rows
 * of 9, 33 and 64 inputs: each n-tile template). n picks the split along
 * k: 100 rows run as 4 parts of a cluster (the last block's rows partly
 * past n), 7000 as 2, 13000 as 1; 2304 inputs are 9 super-blocks, cut
 * 2 + 2 + 2 + 3. */
static void test_gemm_small(uint32_t n, uint32_t k)
{
    enum { M = HR_CUDA_GEMM_SMALL_ROWS };
    const size_t rb = hr_row_bytes(HR_GGML_Q4_K, k);
    float *wf = malloc(sizeof(float) * k), *wd = malloc(sizeof(float) * k * n);
    uint8_t *wq = malloc(rb * n);
    for (uint32_t r = 0; r < n; r++) {
        for (uint32_t i = 0; i < k; i++)
            wf[i] = frand() * 0.5f;
        hr_quantize_row(HR_GGML_Q4_K, wf, wq + r * rb, k);
        hr_dequantize_row(HR_GGML_Q4_K, wq + r * rb, wd + (size_t)r * k, k);
    }
    float *x = malloc(sizeof(float) * k * M), *xr = malloc(sizeof(float) * k * M);
    for (size_t i = 0; i < (size_t)k * M; i++)
        x[i] = frand();
    float bias[13000];
    for (uint32_t j = 0; j < n; j++)
        bias[j] = frand();
    void *dw = to_dev(wq, rb * n);
    float *dx = to_dev(x, sizeof(float) * k * M), *dxr = NULL, *dy = NULL;
    float *db = to_dev(bias, sizeof(float) * n);
    struct hr_cuda_q8_act q;
    CT_CUDA(cudaMalloc((void **)&q.q, (size_t)k * M));
    CT_CUDA(cudaMalloc((void **)&q.d, sizeof(float) * (k / 256) * M));
    CT_CUDA(cudaMalloc((void **)&q.s, sizeof(int16_t) * (k / 16) * M));
    CT_CUDA(cudaMalloc((void **)&dxr, sizeof(float) * k * M));
    CT_CUDA(cudaMalloc((void **)&dy, sizeof(float) * n * M));
    CT_CUDA(hr_cuda_quant_act(HR_CUDA_ACT_Q8_K, dx, M, k, &q, 0));
    CT_CUDA(hr_cuda_act_round(HR_CUDA_ACT_Q8_K, dx, M, k, dxr, 0));
    from_dev(xr, dxr, sizeof(float) * k * M);
    float *y = malloc(sizeof(float) * n * M), *y0 = malloc(sizeof(float) * n * M);
    double worst = 0.0;
    for (int mode = 0; mode < 3; mode++) {
        for (size_t i = 0; i < (size_t)n * M; i++)
            y0[i] = frand();
        CT_CUDA(cudaMemcpy(dy, y0, sizeof(float) * n * M, cudaMemcpyHostToDevice));
        CT_CUDA(hr_cuda_gemm_q4k_small(dw, rb, k, n, &q, M, dy, n, mode == 1 ? db : NULL,
                                       mode == 2, 0));
        from_dev(y, dy, sizeof(float) * n * M);
        for (uint32_t t = 0; t < M; t++)
            for (uint32_t j = 0; j < n; j++) {
                double ref = mode == 1 ? bias[j] : mode == 2 ? y0[(size_t)t * n + j] : 0.0;
                double mag = 0.0;
                for (uint32_t i = 0; i < k; i++) {
                    const double p = (double)wd[(size_t)j * k + i] * xr[(size_t)t * k + i];
                    ref += p, mag += fabs(p);
                }
                const double e = fabs(y[(size_t)t * n + j] - ref) / (mag + 1e-30);
                worst = e > worst || e != e ? e : worst;
            }
    }
    CT_CHECK(worst < 1e-6, "Q4_K small integer GEMM %u x %u, m = %u (plain, bias, accumulate): "
             "worst error %.2e of sum |terms| (< 1e-6)", n, k, (unsigned)M, worst);
    /* token 60 of 64 == token 29 of 33 == token 5 of 9 */
    CT_CUDA(hr_cuda_gemm_q4k_small(dw, rb, k, n, &q, M, dy, n, NULL, 0, 0));
    from_dev(y, dy, sizeof(float) * n * M);
    int same = 1;
    for (uint32_t mm = 9; mm <= 33; mm += 24) {
        const uint32_t t0 = M - mm;
        struct hr_cuda_q8_act qs = {q.q + (size_t)t0 * k, q.d + (size_t)t0 * (k / 256),
                                    q.s + (size_t)t0 * (k / 16)};
        CT_CUDA(hr_cuda_gemm_q4k_small(dw, rb, k, n, &qs, mm, dy, n, NULL, 0, 0));
        from_dev(y0, dy, sizeof(float) * n * mm);
        same &= memcmp(y + (size_t)60 * n, y0 + (size_t)(60 - t0) * n, sizeof(float) * n) == 0;
    }
    CT_CHECK(same, "Q4_K small integer GEMM %u x %u: token 60 of 64 == token 29 of 33 == token 5 "
             "of 9, bit for bit", n, k);
    cudaFree(dw), cudaFree(dx), cudaFree(dxr), cudaFree(dy), cudaFree(db);
    cudaFree(q.q), cudaFree(q.d), cudaFree(q.s);
    free(wf), free(wd), free(wq), free(x), free(xr), free(y), free(y0);
}

/* Causal attention over a paged f16 KV: two sequences in one step, one
 * prefilling from position 0 (tiles 64, 64, 64, 8) and one continuing after
 * 300 cached positions (64, 7), blocks of 16 tokens in a shuffled order,
 * nh query heads over 2 KV heads. The tiled kernel rounds Q and P to f16,
 * so it is held to 2e-3 of a double-precision softmax over the same f16 K,
 * V and Q; the one-warp kernels (f32 throughout) and the decode kernel on
 * tensor cores (Q and P as two f16 terms each) to 1e-5 of one over f32 Q. */
/* window 0 / sinks 0: plain causal attention; else gpt-oss's: a token
 * sees its last `window` positions (here not a multiple of the 64-key
 * tiles or the 32-key warps' steps), and each head's sink joins the
 * softmax's denominator. */
static void test_attention(uint32_t hd, uint32_t window, int sinks, uint32_t nh)
{
    enum { NH = 32, NKV = 2, BT = 16, T0 = 200, C1 = 300, T1 = 71, T = T0 + T1 };
    const uint32_t nb0 = (T0 + BT - 1) / BT, nb1 = (C1 + T1 + BT - 1) / BT, nb = nb0 + nb1;
    const uint64_t block_bytes = 2ull * NKV * BT * hd * 2;
    uint16_t *pool = malloc(block_bytes * nb);
    for (size_t i = 0; i < block_bytes * nb / 2; i++)
        pool[i] = hr_f32_to_f16(frand());
    int32_t tables[64], pos[T], seq_of[T], tab_off[2] = {0, (int32_t)nb0};
    for (uint32_t i = 0; i < nb; i++)
        tables[i] = (int32_t)((i * 7 + 3) % nb); /* 7 is prime to nb: a permutation */
    for (int t = 0; t < T; t++) {
        seq_of[t] = t >= T0;
        pos[t] = t < T0 ? t : C1 + (t - T0);
    }
    const uint32_t qd = nh * hd;
    float *q = malloc(sizeof(float) * T * qd), *out = malloc(sizeof(float) * T * qd);
    for (size_t i = 0; i < (size_t)T * qd; i++)
        q[i] = frand();
    int32_t tiles[] = {0, 64, 64, 64, 128, 64, 192, 8, T0, 64, T0 + 64, 7}, seq_fa[2] = {1, 1};
    struct hr_cuda_attn_args a = {0};
    a.q = to_dev(q, sizeof(float) * T * qd);
    CT_CUDA(cudaMalloc((void **)&a.out, sizeof(float) * T * qd));
    a.n_tokens = T, a.n_head = nh, a.scale = 1.0f / sqrtf((float)hd);
    a.kv.pool = to_dev(pool, block_bytes * nb);
    a.kv.block_bytes = block_bytes, a.kv.block_tokens = BT, a.kv.n_head_kv = NKV;
    a.kv.head_dim = hd, a.kv.layer = 0, a.kv.f16 = 1;
    a.kv.pos = to_dev(pos, sizeof(pos)), a.kv.seq_of = to_dev(seq_of, sizeof(seq_of));
    a.kv.tab_off = to_dev(tab_off, sizeof(tab_off)), a.kv.tables = to_dev(tables, sizeof(tables));
    a.seq_fa = to_dev(seq_fa, sizeof(seq_fa)), a.tiles = to_dev(tiles, sizeof(tiles));
    a.n_tiles = sizeof(tiles) / sizeof(tiles[0]) / 2;
    float sink[NH];
    for (uint32_t h = 0; h < nh; h++)
        sink[h] = 2.0f * frand();
    a.window = window;
    a.sinks = sinks ? to_dev(sink, sizeof(sink)) : NULL;
    CT_CUDA(hr_cuda_kernels_preload());
    float *part = NULL;
    CT_CUDA(cudaMalloc((void **)&part, sizeof(float) * T * nh * HR_CUDA_ATTN_SPLITS * (hd + 2)));
    /* mode 2: tiled; 1: one warp per (token, head); 0: the same split over
     * keys (decode's: runs of 32-key tiles, then merged); -1, -2: modes 1
     * and 0 with a block per KV head's group (gqa 1); -3, -4: the same on
     * tensor cores (gqa 2) */
    for (int mode = 2; mode >= -4; mode--) {
        const int tiled = mode == 2;
        struct hr_cuda_attn_args b = a;
        if (mode != 2)
            b.seq_fa = NULL, b.tiles = NULL, b.n_tiles = 0;
        if (mode == 0 || mode == -2 || mode == -4)
            b.part = part, b.n_split = HR_CUDA_ATTN_SPLITS;
        b.gqa = mode <= -3 ? 2 : mode < 0;
        CT_CUDA(cudaMemset(a.out, 0xff, sizeof(float) * T * qd)); /* NaN: rows not written show */
        CT_CUDA(hr_cuda_attention(&b, 0));
        from_dev(out, a.out, sizeof(float) * T * qd);
        double worst = 0;
        for (int t = 0; t < T; t++) {
            const int32_t tab0 = tab_off[seq_of[t]];
            for (uint32_t h = 0; h < nh; h++) {
                const uint32_t g = h / (nh / NKV);
                double qv[128], acc[128] = {0}, mx = sinks ? sink[h] : -1e300, l = 0, sc[400];
                const int32_t lo = window && pos[t] >= (int32_t)window
                                       ? pos[t] - (int32_t)window + 1 : 0;
                for (uint32_t d = 0; d < hd; d++) {
                    const float x = q[(size_t)t * qd + h * hd + d];
                    qv[d] = tiled ? hr_f16_to_f32(hr_f32_to_f16(x)) : x;
                }
                for (int32_t j = lo; j <= pos[t]; j++) {
                    const uint16_t *k = pool + (tables[tab0 + j / BT] * block_bytes +
                                                ((0ull * NKV + g) * BT + j % BT) * hd * 2) / 2;
                    double dot = 0;
                    for (uint32_t d = 0; d < hd; d++)
                        dot += qv[d] * hr_f16_to_f32(k[d]);
                    sc[j] = dot * a.scale;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                if (sinks)
                    l = exp(sink[h] - mx);
                for (int32_t j = lo; j <= pos[t]; j++) {
                    const uint16_t *v = pool + (tables[tab0 + j / BT] * block_bytes +
                                                ((1ull * NKV + g) * BT + j % BT) * hd * 2) / 2;
                    const double p = exp(sc[j] - mx);
                    l += p;
                    for (uint32_t d = 0; d < hd; d++)
                        acc[d] += p * hr_f16_to_f32(v[d]);
                }
                for (uint32_t d = 0; d < hd; d++) {
                    const double e = fabs(out[(size_t)t * qd + h * hd + d] - acc[d] / l);
                    worst = e > worst || e != e ? e : worst;
                }
            }
        }
        char what[64] = "";
        if (window)
            snprintf(what, sizeof(what), ", a %u-token window", window);
        static const char *const kind[] = {
            "tiled (f16 MMA)", "one warp per token (f32)", "split over keys (f32, up to 64 runs)",
            "a block per KV head's group (f32)", "a block per group, split over keys (f32)",
            "a block per group on tensor cores (f16 MMA, two terms)",
            "a block per group on tensor cores, split over keys (f16 MMA, two terms)"};
        CT_CHECK(worst <= (tiled ? 2e-3 : 1e-5),
                 "attention head_dim %u, %u heads over %u, %s, 2 sequences (200 from 0, 71 after "
                 "300)%s%s: worst abs error %.2e", hd, nh, (unsigned)NKV, kind[2 - mode], what,
                 sinks ? ", sinks" : "", worst);
    }
    /* Wo's inputs made by the merge: the tiled sequence's output, the
     * one-run tokens' and the merged ones', as the separate kernels make
     * them from the output, bit for bit (and the output unchanged) */
    for (uint32_t gqa = 0; gqa <= 2; gqa += 2) {
        struct hr_cuda_attn_args b = a;
        b.part = part, b.n_split = HR_CUDA_ATTN_SPLITS, b.gqa = gqa;
        float *ref = malloc(sizeof(float) * T * qd), *got = malloc(sizeof(float) * T * qd);
        float *da = NULL;
        struct hr_cuda_q8_act q0 = {0}, q1 = {0};
        CT_CUDA(cudaMalloc((void **)&da, sizeof(float) * T * qd));
        CT_CUDA(cudaMalloc((void **)&q0.q, (size_t)T * qd));
        CT_CUDA(cudaMalloc((void **)&q1.q, (size_t)T * qd));
        CT_CUDA(cudaMalloc((void **)&q0.d, sizeof(float) * T * qd / 32));
        CT_CUDA(cudaMalloc((void **)&q1.d, sizeof(float) * T * qd / 32));
        CT_CUDA(hr_cuda_attention(&b, 0));
        from_dev(ref, a.out, sizeof(float) * T * qd);
        CT_CUDA(hr_cuda_quant_act(HR_CUDA_ACT_Q8_0, a.out, T, qd, &q0, 0));
        b.prep = (hr_cuda_norm_prep){.kind = HR_CUDA_NORM_PREP_Q8_0, .q = q1};
        CT_CUDA(hr_cuda_attention(&b, 0));
        from_dev(got, a.out, sizeof(float) * T * qd);
        int same = memcmp(ref, got, sizeof(float) * T * qd) == 0;
        char *x0 = malloc((size_t)T * qd), *x1 = malloc((size_t)T * qd);
        from_dev(x0, q0.q, (size_t)T * qd), from_dev(x1, q1.q, (size_t)T * qd);
        same &= memcmp(x0, x1, (size_t)T * qd) == 0;
        from_dev(ref, q0.d, sizeof(float) * T * qd / 32), from_dev(got, q1.d, sizeof(float) * T * qd / 32);
        same &= memcmp(ref, got, sizeof(float) * T * qd / 32) == 0;
        CT_CUDA(hr_cuda_act_round(HR_CUDA_ACT_F16, a.out, T, qd, da, 0));
        from_dev(ref, da, sizeof(float) * T * qd);
        CT_CUDA(cudaMemset(da, 0, sizeof(float) * T * qd));
        b.prep = (hr_cuda_norm_prep){.kind = HR_CUDA_NORM_PREP_F16, .act = da};
        CT_CUDA(hr_cuda_attention(&b, 0));
        from_dev(got, da, sizeof(float) * T * qd);
        same &= memcmp(ref, got, sizeof(float) * T * qd) == 0;
        const int q8k = qd % 256 == 0; /* Q8_K: a block of 256 / hd heads */
        if (q8k) {
            struct hr_cuda_q8_act k0 = {0}, k1 = {0};
            CT_CUDA(cudaMalloc((void **)&k0.q, (size_t)T * qd));
            CT_CUDA(cudaMalloc((void **)&k1.q, (size_t)T * qd));
            CT_CUDA(cudaMalloc((void **)&k0.d, sizeof(float) * T * qd / 256));
            CT_CUDA(cudaMalloc((void **)&k1.d, sizeof(float) * T * qd / 256));
            CT_CUDA(cudaMalloc((void **)&k0.s, sizeof(int16_t) * T * qd / 16));
            CT_CUDA(cudaMalloc((void **)&k1.s, sizeof(int16_t) * T * qd / 16));
            from_dev(ref, a.out, sizeof(float) * T * qd);
            CT_CUDA(hr_cuda_quant_act(HR_CUDA_ACT_Q8_K, a.out, T, qd, &k0, 0));
            CT_CUDA(cudaMemset(a.out, 0, sizeof(float) * T * qd));
            b.prep = (hr_cuda_norm_prep){.kind = HR_CUDA_NORM_PREP_Q8_K, .q = k1};
            CT_CUDA(hr_cuda_attention(&b, 0));
            from_dev(got, a.out, sizeof(float) * T * qd);
            same &= memcmp(ref, got, sizeof(float) * T * qd) == 0 &&
                    same_dev(k0.q, k1.q, (size_t)T * qd) &&
                    same_dev(k0.d, k1.d, sizeof(float) * T * qd / 256) &&
                    same_dev(k0.s, k1.s, sizeof(int16_t) * T * qd / 16);
            cudaFree(k0.q), cudaFree(k1.q), cudaFree(k0.d), cudaFree(k1.d), cudaFree(k0.s),
                cudaFree(k1.s);
        }
        CT_CHECK(same, "attention head_dim %u%s, gqa %u: Wo's inputs made by the merge (Q8_0; "
                 "f16%s) for tiled, one-run and split tokens == the separate kernels', bit for bit",
                 hd, window ? ", windowed" : "", gqa, q8k ? "; Q8_K" : "");
        free(ref), free(got), free(x0), free(x1);
        cudaFree(da), cudaFree(q0.q), cudaFree(q1.q), cudaFree(q0.d), cudaFree(q1.d);
    }
    /* The merge in the attention kernel's last blocks (ctr): every token
     * as a decode token (no tiles; 1 to 12 runs), each prep kind, against
     * the attention and merge kernels bit for bit, twice on the same
     * counters (the last block puts them back to 0) */
    {
        struct hr_cuda_attn_args b = a;
        b.seq_fa = NULL, b.tiles = NULL, b.n_tiles = 0;
        b.part = part, b.n_split = HR_CUDA_ATTN_SPLITS, b.gqa = 2;
        uint32_t *ctr = NULL;
        CT_CUDA(cudaMalloc((void **)&ctr, sizeof(uint32_t) * T * NKV));
        CT_CUDA(cudaMemset(ctr, 0, sizeof(uint32_t) * T * NKV));
        const size_t n = (size_t)T * qd;
        float *o0 = NULL, *o1 = NULL, *a0 = NULL, *a1 = NULL;
        struct hr_cuda_q8_act k0 = {0}, k1 = {0};
        CT_CUDA(cudaMalloc((void **)&o0, sizeof(float) * n));
        CT_CUDA(cudaMalloc((void **)&o1, sizeof(float) * n));
        CT_CUDA(cudaMalloc((void **)&a0, sizeof(float) * n));
        CT_CUDA(cudaMalloc((void **)&a1, sizeof(float) * n));
        alloc_q8(&k0, 1, (uint32_t)n);
        alloc_q8(&k1, 1, (uint32_t)n);
        int same = 1, ran = 0;
        const int kinds[4] = {HR_CUDA_NORM_PREP_NONE, HR_CUDA_NORM_PREP_Q8_0,
                              HR_CUDA_NORM_PREP_F16, HR_CUDA_NORM_PREP_Q8_K};
        for (int ki = 0; ki < 4; ki++) {
            const int kind = kinds[ki], q8k = kind == HR_CUDA_NORM_PREP_Q8_K;
            hr_cuda_norm_prep pr[2];
            for (int v = 0; v < 2; v++) {
                memset(&pr[v], 0, sizeof(pr[v]));
                pr[v].kind = kind;
                pr[v].act = v ? a1 : a0;
                pr[v].q = v ? k1 : k0;
            }
            b.ctr = NULL, b.out = o0, b.prep = pr[0];
            if (q8k && !hr_cuda_attention_merged_ok(&(struct hr_cuda_attn_args){
                           .part = part, .n_head = nh, .kv = a.kv, .gqa = 2, .prep = pr[1],
                           .ctr = ctr}))
                continue;
            CT_CUDA(hr_cuda_attention(&b, 0));
            for (int rep = 0; rep < 2; rep++) {
                CT_CUDA(cudaMemset(o1, 0xff, sizeof(float) * n));
                CT_CUDA(cudaMemset(a1, 0, sizeof(float) * n));
                CT_CUDA(cudaMemset(k1.q, 0, n));
                b.ctr = ctr, b.out = o1, b.prep = pr[1];
                same &= hr_cuda_attention_merged_ok(&b);
                CT_CUDA(hr_cuda_attention(&b, 0));
                same &= same_dev(o0, o1, sizeof(float) * n);
                if (kind == HR_CUDA_NORM_PREP_F16)
                    same &= same_dev(a0, a1, sizeof(float) * n);
                if (kind == HR_CUDA_NORM_PREP_Q8_0)
                    same &= same_dev(k0.q, k1.q, n) &&
                            same_dev(k0.d, k1.d, sizeof(float) * (n / 32));
                if (q8k)
                    same &= same_dev(k0.q, k1.q, n) &&
                            same_dev(k0.d, k1.d, sizeof(float) * (n / 256)) &&
                            same_dev(k0.s, k1.s, sizeof(int16_t) * (n / 16));
            }
            ran++;
        }
        uint32_t zero[T * NKV], back[T * NKV];
        memset(zero, 0, sizeof(zero));
        from_dev(back, ctr, sizeof(back));
        same &= memcmp(zero, back, sizeof(back)) == 0;
        CT_CHECK(same && ran >= 3, "attention head_dim %u%s%s, %u heads: the merge and Wo's inputs "
                 "(none, Q8_0, f16%s) in the attention kernel's last blocks == the merge kernel's, "
                 "bit for bit, twice on the same counters (back at 0)", hd,
                 window ? ", windowed" : "", sinks ? ", sinks" : "", nh, ran == 4 ? ", Q8_K" : "");
        cudaFree(ctr), cudaFree(o0), cudaFree(o1), cudaFree(a0), cudaFree(a1);
        free_q8(&k0), free_q8(&k1);
    }
    cudaFree(part);
    cudaFree((void *)a.q), cudaFree(a.out), cudaFree(a.kv.pool), cudaFree((void *)a.kv.pos);
    cudaFree((void *)a.kv.seq_of), cudaFree((void *)a.kv.tab_off), cudaFree((void *)a.kv.tables);
    cudaFree((void *)a.seq_fa), cudaFree((void *)a.tiles), cudaFree((void *)a.sinks);
    free(pool), free(q), free(out);
}

/* The attention kernel doing qkv_post's work too (hr_cuda_attn_args.qkv):
 * tokens of their own sequences at positions 0 to 700 (1 to 22 runs),
 * against hr_cuda_qkv_post then the attention, bit for bit: the output
 * and the whole cache after (each token's K and V stored at its
 * position). variant 0: llama's (adjacent-pair RoPE over all dims); 1:
 * qwen2's biases; 2: qwen3's Q/K norms with NeoX RoPE over half the
 * dims. The merge in the kernel's last blocks (ctr) in both runs. */
static void test_attention_qkv(uint32_t hd, uint32_t nh, int variant)
{
    enum { NKV = 2, BT = 16, T = 6, NB = 81 }; /* 1 + 1 + 2 + 5 + 19 + 44 blocks used */
    const int32_t pos_h[T] = {0, 5, 31, 64, 300, 700};
    const uint64_t block_bytes = 2ull * NKV * BT * hd * 2;
    const uint32_t qd = nh * hd, kvd = NKV * hd, n_rot = variant == 2 ? hd / 2 : hd;
    uint16_t *pool = malloc(block_bytes * NB);
    for (size_t i = 0; i < block_bytes * NB / 2; i++)
        pool[i] = hr_f32_to_f16(frand());
    int32_t tables[NB], seq_of[T], tab_off[T];
    for (uint32_t i = 0; i < NB; i++)
        tables[i] = (int32_t)((i * 7 + 3) % NB); /* 7 is prime to NB: a permutation */
    for (int t = 0, n = 0; t < T; t++) { /* each sequence its own blocks */
        seq_of[t] = t, tab_off[t] = n;
        n += pos_h[t] / BT + 1;
    }
    float *q = malloc(sizeof(float) * T * qd), *k = malloc(sizeof(float) * T * kvd);
    float *v = malloc(sizeof(float) * T * kvd), *rope = malloc(sizeof(float) * T * n_rot);
    float *bq = malloc(sizeof(float) * qd), *bk = malloc(sizeof(float) * kvd);
    float *bv = malloc(sizeof(float) * kvd), *qn = malloc(sizeof(float) * hd);
    float *kn = malloc(sizeof(float) * hd);
    for (size_t i = 0; i < (size_t)T * qd; i++)
        q[i] = frand() * 2.0f;
    for (size_t i = 0; i < (size_t)T * kvd; i++)
        k[i] = frand() * 2.0f, v[i] = frand();
    for (int t = 0; t < T; t++)
        for (uint32_t i = 0; i < n_rot / 2; i++) {
            const float th = (float)pos_h[t] * powf(10000.0f, -2.0f * (float)i / (float)n_rot);
            rope[(size_t)t * n_rot + 2 * i] = cosf(th);
            rope[(size_t)t * n_rot + 2 * i + 1] = sinf(th);
        }
    for (uint32_t i = 0; i < qd; i++)
        bq[i] = frand();
    for (uint32_t i = 0; i < kvd; i++)
        bk[i] = frand(), bv[i] = frand();
    for (uint32_t i = 0; i < hd; i++)
        qn[i] = 0.5f + frand(), kn[i] = 0.5f + frand();
    struct hr_cuda_kv_view kv = {0};
    kv.block_bytes = block_bytes, kv.block_tokens = BT, kv.n_head_kv = NKV, kv.head_dim = hd;
    kv.f16 = 1, kv.pos = to_dev(pos_h, sizeof(pos_h)), kv.seq_of = to_dev(seq_of, sizeof(seq_of));
    kv.tab_off = to_dev(tab_off, sizeof(tab_off)), kv.tables = to_dev(tables, sizeof(tables));
    uint8_t *pools[2] = {to_dev(pool, block_bytes * NB), to_dev(pool, block_bytes * NB)};
    float *qs[2] = {to_dev(q, sizeof(float) * T * qd), to_dev(q, sizeof(float) * T * qd)};
    float *dk = to_dev(k, sizeof(float) * T * kvd), *dv = to_dev(v, sizeof(float) * T * kvd);
    float *drope = to_dev(rope, sizeof(float) * T * n_rot);
    float *dbq = to_dev(bq, sizeof(float) * qd), *dbk = to_dev(bk, sizeof(float) * kvd);
    float *dbv = to_dev(bv, sizeof(float) * kvd), *dqn = to_dev(qn, sizeof(float) * hd);
    float *dkn = to_dev(kn, sizeof(float) * hd), *outs[2], *part;
    uint32_t *ctr;
    CT_CUDA(cudaMalloc((void **)&outs[0], sizeof(float) * T * qd));
    CT_CUDA(cudaMalloc((void **)&outs[1], sizeof(float) * T * qd));
    CT_CUDA(cudaMalloc((void **)&part, sizeof(float) * T * nh * HR_CUDA_ATTN_SPLITS * (hd + 2)));
    CT_CUDA(cudaMalloc((void **)&ctr, sizeof(uint32_t) * T * NKV));
    CT_CUDA(cudaMemset(ctr, 0, sizeof(uint32_t) * T * NKV));
    int same = 1;
    for (int v2 = 0; v2 < 2; v2++) {
        kv.pool = pools[v2];
        struct hr_cuda_qkv_args qa = {.q = qs[v2], .k = dk, .v = dv, .rope = drope,
                                      .n_tokens = T, .n_head = nh, .n_rot = n_rot,
                                      .neox = variant == 2, .eps = 1e-6f, .kv = kv};
        if (variant == 1)
            qa.bq = dbq, qa.bk = dbk, qa.bv = dbv;
        if (variant == 2)
            qa.q_norm = dqn, qa.k_norm = dkn;
        struct hr_cuda_attn_args b = {.q = qs[v2], .out = outs[v2], .n_tokens = T, .n_head = nh,
                                      .scale = 1.0f / sqrtf((float)hd), .kv = kv, .part = part,
                                      .n_split = HR_CUDA_ATTN_SPLITS, .gqa = 2, .ctr = ctr};
        if (v2 == 0) {
            CT_CUDA(hr_cuda_qkv_post(&qa, 0));
        } else {
            b.qkv = qa;
            same &= hr_cuda_attention_qkv_ok(&b);
        }
        CT_CUDA(hr_cuda_attention(&b, 0));
    }
    same &= same_dev(outs[0], outs[1], sizeof(float) * T * qd) &&
            same_dev(pools[0], pools[1], block_bytes * NB);
    static const char *const what[] = {"llama's RoPE", "qwen2's biases", "qwen3's Q/K norms, NeoX RoPE on half"};
    CT_CHECK(same, "attention head_dim %u, %u heads over %u doing qkv_post's work (%s; 6 tokens "
             "at 0..700) == qkv_post then the attention: output and cache, bit for bit", hd, nh,
             (unsigned)NKV, what[variant]);
    cudaFree(pools[0]), cudaFree(pools[1]), cudaFree(qs[0]), cudaFree(qs[1]), cudaFree(dk);
    cudaFree(dv), cudaFree(drope), cudaFree(dbq), cudaFree(dbk), cudaFree(dbv), cudaFree(dqn);
    cudaFree(dkn), cudaFree(outs[0]), cudaFree(outs[1]), cudaFree(part), cudaFree(ctr);
    cudaFree((void *)kv.pos), cudaFree((void *)kv.seq_of), cudaFree((void *)kv.tab_off);
    cudaFree((void *)kv.tables);
    free(pool), free(q), free(k), free(v), free(rope), free(bq), free(bk), free(bv), free(qn), free(kn);
}

/* The integer GEMVs' block-per-row kernels (rows of 2048 values and more):
 * Q8_0 on rows that are not 16-byte aligned (2080 inputs: 2210-byte rows),
 * which the 16-byte-load kernel reads from each row's start rounded down,
 * and Q4_K on 2304 inputs (9 super-blocks: 72 pieces over 128 threads).
 * Against the dot of the weights' and the rounded inputs' values, and as
 * three parts in one launch. */
static void test_int_rows(enum hr_ggml_type t, uint32_t k)
{
    const uint32_t n = 37, M = 3;
    const size_t rb = hr_row_bytes(t, k);
    const enum hr_cuda_act act = act_of(t);
    float *wf = malloc(sizeof(float) * k * n), *wd = malloc(sizeof(float) * k * n);
    float *x = malloc(sizeof(float) * k * M), *xr = malloc(sizeof(float) * k * M);
    float *y = malloc(sizeof(float) * n * M);
    uint8_t *wq = malloc(rb * n);
    for (size_t i = 0; i < (size_t)k * n; i++)
        wf[i] = frand() * 0.5f;
    for (uint32_t r = 0; r < n; r++) {
        hr_quantize_row(t, wf + (size_t)r * k, wq + r * rb, k);
        hr_dequantize_row(t, wq + r * rb, wd + (size_t)r * k, k);
    }
    for (size_t i = 0; i < (size_t)k * M; i++)
        x[i] = frand() * 3.0f;
    void *dw = to_dev(wq, rb * n);
    float *dx = to_dev(x, sizeof(float) * k * M), *dxr = NULL, *dy = NULL;
    struct hr_cuda_q8_act qa = {0};
    CT_CUDA(cudaMalloc((void **)&dxr, sizeof(float) * k * M));
    CT_CUDA(cudaMalloc((void **)&dy, sizeof(float) * n * M));
    CT_CUDA(cudaMalloc((void **)&qa.q, (size_t)k * M));
    CT_CUDA(cudaMalloc((void **)&qa.d, sizeof(float) * (k / 32) * M));
    CT_CUDA(cudaMalloc((void **)&qa.s, sizeof(int16_t) * (k / 16) * M));
    CT_CUDA(hr_cuda_act_round(act, dx, M, k, dxr, 0));
    CT_CUDA(hr_cuda_quant_act(act, dx, M, k, &qa, 0));
    from_dev(xr, dxr, sizeof(float) * k * M);
    double worst = 0.0;
    float *y1 = malloc(sizeof(float) * n);
    bool same = true; /* row 0 at m = 1 (the one-row instantiation) == at m = 2..M */
    for (uint32_t m = 1; m <= M; m++) {
        CT_CUDA(hr_cuda_gemv_int((int)t, dw, rb, k, n, &qa, m, dy, n, NULL, 0, 0));
        from_dev(y, dy, sizeof(float) * n * m);
        if (m == 1)
            memcpy(y1, y, sizeof(float) * n);
        else
            same = same && !memcmp(y1, y, sizeof(float) * n);
        for (uint32_t r = 0; r < m; r++)
            for (uint32_t j = 0; j < n; j++) {
                double ref = 0.0, mag = 0.0;
                for (uint32_t i = 0; i < k; i++) {
                    const double p = (double)wd[(size_t)j * k + i] * xr[(size_t)r * k + i];
                    ref += p, mag += fabs(p);
                }
                const double e = fabs(y[(size_t)r * n + j] - ref) / (mag + 1e-30);
                worst = e > worst || e != e ? e : worst;
            }
    }
    CT_CHECK(worst < 1e-6, "%-5s integer GEMV on %u inputs (%zu-byte rows), m = 1..%u: worst "
             "error %.2e of sum |terms| (< 1e-6)", hr_ggml_type_name(t), k, rb, M, worst);
    CT_CHECK(same, "%-5s integer GEMV on %u inputs: a row's result at m = 1 (its one-row kernel) "
             "is the same at m = 2..%u, bit for bit", hr_ggml_type_name(t), k, M);
    free(y1);
    {
        float *bias = malloc(sizeof(float) * n), *dbias;
        for (uint32_t j = 0; j < n; j++)
            bias[j] = frand();
        dbias = to_dev(bias, sizeof(float) * n);
        check_parts(t, dw, rb, k, n, NULL, &qa, M, dbias);
        cudaFree(dbias), free(bias);
    }
    cudaFree(dw), cudaFree(dx), cudaFree(dxr), cudaFree(dy);
    cudaFree(qa.q), cudaFree(qa.d), cudaFree(qa.s);
    free(wf), free(wd), free(x), free(xr), free(y), free(wq);
}

int main(int argc, char **argv)
{
    ct_require_device("test-cuda-kernels");
    if (argc > 1 && strcmp(argv[1], "--probe") == 0)
        return 0; /* exit 0: a device answers (77 above: none) */
    double t0 = ct_now();
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        test_type(types[i]);
    test_small();
    test_norm_prep();
    test_swiglu_prep();
    test_normed(HR_GGML_Q4_K);
    test_normed(HR_GGML_Q8_0);
    test_swiglu_fused(HR_GGML_Q4_K);
    test_swiglu_fused(HR_GGML_Q8_0);
    test_int_rows(HR_GGML_Q8_0, 2080);
    test_int_rows(HR_GGML_Q8_0, 2304); /* whole words: the pipelined kernel's too */
    test_int_rows(HR_GGML_Q8_0, 4096);
    test_int_rows(HR_GGML_Q4_K, 2304);
    test_gemm_small(100, 2304);
    test_gemm_small(7000, 512);
    test_gemm_small(13000, 256);
    test_attention(64, 0, 0, 8);
    test_attention(128, 0, 0, 8);
    test_attention(64, 100, 1, 8);
    test_attention(128, 100, 0, 8);
    /* Qwen2.5-0.5B's group of 7; 16, the most the tensor-core decode takes
     * (rows g + 8 of its tiles) */
    test_attention(64, 0, 1, 14);
    test_attention(128, 100, 0, 32);
    test_attention_qkv(128, 8, 0);
    test_attention_qkv(128, 8, 1);
    test_attention_qkv(64, 14, 2);
    test_attention_qkv(128, 32, 2);
    printf("test-cuda-kernels: %.1f s\n", ct_now() - t0);
    return ct_finish("test-cuda-kernels");
}
