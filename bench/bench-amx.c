/*
 * bench-amx - an experiment, not an engine path: could AMX-BF16 multiply
 * F16 weights as exactly as the f32 FMAs do, and how much faster?
 *
 *   bench-amx [--m M] [--runs R]
 *
 * An f16 value (11 significant bits) is the sum of two bf16 values: hi, its
 * round to 8 bits, and lo = value - hi (the rest, exact in bf16). Inputs
 * rounded to f16 (ggml's vec-dot type for F16 weights) split the same way,
 * so w x = wh xh + wh xl + wl xh + wl xl, each product exact in f32. The
 * AMX tile multiply (tdpbf16ps: 16 x 16 outputs x 32 terms a instruction,
 * f32 accumulation) runs the first three; wl xl is under 2^-16 of the
 * product. On the Qwen2.5-0.5B shape's matrices at m tokens, one thread,
 * this prints our F16 kernel (hr_matmul_compute on packed weights, f32
 * FMAs) and the three-term AMX product side by side: GFLOP/s of the real
 * product (2 m n k / time) and each one's worst error against a double
 * reference, as a share of the sum of |terms|.
 *
 * Hosts without AMX-BF16 (or whose kernel refuses the tile state) print a
 * line saying so and exit 0. Tile loads come straight from row-major
 * arrays (inputs) and from a VNNI-paired copy (weights), both made before
 * the timing: how the engine would pack them is the open question.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fp16.h"
#include "base/sys.h"
#include "bench.h"
#include "kernels/matmul.h"

/* bf16 halves of f: hi rounded to nearest even, lo the exact rest */
static void split_bf16(float f, uint16_t *hi, uint16_t *lo)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1)) & 0xFFFF0000u;
    float h, r;
    memcpy(&h, &u, 4);
    r = f - h;
    *hi = (uint16_t)(u >> 16);
    memcpy(&u, &r, 4);
    *lo = (uint16_t)(u >> 16);
}

static bool amx_ok(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) /* AMX-BF16, AMX-TILE */
        return false;
    /* Linux hands out the tile state only on request (ARCH_REQ_XCOMP_PERM,
     * XFEATURE_XTILEDATA) */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

/* /proc/cpuinfo's model name (benchmarks name the CPU they ran on) */
static void cpu_name(char *out, size_t n)
{
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            snprintf(out, n, "%s", c + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    }
    if (f)
        fclose(f);
}

struct tilecfg {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* The four accumulators (tiles 0-3, a 32 x 32 block) += the input tiles 4,
 * 5 times the weight tiles 6, 7. */
__attribute__((target("amx-tile,amx-bf16"))) static inline void dp_2x2(void)
{
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
}

/* y[m][n] = x w^T from the split copies: xh, xl [m][k] row-major; wh, wl
 * [n / 16][k / 2][16][2] (pairs of k for each of 16 columns). m % 32,
 * n % 32 and k % 32 are 0. Four 16 x 16 accumulators (a 32 x 32 block),
 * two input and two weight tiles. */
__attribute__((target("amx-tile,amx-bf16"))) static void amx_gemm(
    const uint16_t *xh, const uint16_t *xl, const uint16_t *wh, const uint16_t *wl, float *y,
    int m, int n, int k)
{
    struct tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++)
        c.rows[t] = 16, c.colsb[t] = 64;
    _tile_loadconfig(&c);
    for (int i0 = 0; i0 < m; i0 += 32)
        for (int j0 = 0; j0 < n; j0 += 32) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int k0 = 0; k0 < k; k0 += 32) {
                const size_t b0 = ((size_t)(j0 / 16) * (k / 2) + k0 / 2) * 32;
                const size_t b1 = ((size_t)(j0 / 16 + 1) * (k / 2) + k0 / 2) * 32;
                _tile_loadd(4, xh + (size_t)i0 * k + k0, 2 * k);
                _tile_loadd(5, xh + (size_t)(i0 + 16) * k + k0, 2 * k);
                _tile_loadd(6, wh + b0, 64);
                _tile_loadd(7, wh + b1, 64);
                dp_2x2();
                _tile_loadd(6, wl + b0, 64);
                _tile_loadd(7, wl + b1, 64);
                dp_2x2();
                _tile_loadd(4, xl + (size_t)i0 * k + k0, 2 * k);
                _tile_loadd(5, xl + (size_t)(i0 + 16) * k + k0, 2 * k);
                _tile_loadd(6, wh + b0, 64);
                _tile_loadd(7, wh + b1, 64);
                dp_2x2();
            }
            _tile_stored(0, y + (size_t)i0 * n + j0, 4 * n);
            _tile_stored(1, y + (size_t)i0 * n + j0 + 16, 4 * n);
            _tile_stored(2, y + (size_t)(i0 + 16) * n + j0, 4 * n);
            _tile_stored(3, y + (size_t)(i0 + 16) * n + j0 + 16, 4 * n);
        }
    _tile_release();
}

/* worst |y - exact| / sum |terms| over a sample of outputs */
static double worst_error(const float *y, const float *xr, const float *wf, int m, int n, int k)
{
    double worst = 0.0;
    for (int i = 0; i < m; i += 7)
        for (int j = 0; j < n; j += 13) {
            double ref = 0.0, mag = 0.0;
            for (int t = 0; t < k; t++) {
                const double p = (double)xr[(size_t)i * k + t] * wf[(size_t)j * k + t];
                ref += p, mag += fabs(p);
            }
            const double e = fabs(y[(size_t)i * n + j] - ref) / (mag + 1e-30);
            worst = e > worst ? e : worst;
        }
    return worst;
}

int main(int argc, char **argv)
{
    int m = 512, runs = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--m"))
            m = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[i + 1]);
    }
    if (m <= 0 || m % 32 || runs <= 0 || runs > 100) {
        fprintf(stderr, "usage: bench-amx [--m M (a multiple of 32)] [--runs R]\n");
        return 2;
    }
    if (!amx_ok()) {
        printf("bench amx skipped: no AMX-BF16 on this CPU (or the kernel refused its tile "
               "state)\n");
        return 0;
    }
    const struct {
        const char *name;
        int k, n;
    } shapes[] = {{"qwen.attn_q", 896, 896}, {"qwen.ffn_up", 896, 4864}, {"qwen.ffn_down", 4864, 896}};
    char cpu[128];
    cpu_name(cpu, sizeof cpu);
    printf("bench amx_setup isa=%s m=%d runs=%d threads=1 cpu=\"%s\"\n", hr_kernels_isa(), m, runs,
           cpu);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const int k = shapes[s].k, n = shapes[s].n;
        uint16_t *w16 = malloc(2 * (size_t)n * k);
        float *wf = malloc(4 * (size_t)n * k), *x = malloc(4 * (size_t)m * k);
        float *xr = malloc(4 * (size_t)m * k);
        uint64_t r = 88172645463325252ull;
        for (size_t i = 0; i < (size_t)n * k; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            w16[i] = hr_f32_to_f16(((float)(r >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * 0.05f);
            wf[i] = hr_f16_to_f32(w16[i]);
        }
        for (size_t i = 0; i < (size_t)m * k; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            x[i] = (float)(r >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
            xr[i] = hr_f16_to_f32(hr_f32_to_f16(x[i])); /* the vec-dot type's values */
        }
        /* ours: prepare + compute on the packed copy, one thread */
        const size_t ab = hr_matmul_act_bytes(HR_GGML_F16, m, k);
        void *act = aligned_alloc(64, (ab + 63) / 64 * 64);
        const size_t pb = hr_matmul_packed_bytes(HR_GGML_F16, k, n);
        void *pw = pb ? aligned_alloc(64, (pb + 63) / 64 * 64) : NULL;
        if (pw)
            hr_matmul_pack(HR_GGML_F16, w16, k, n, pw);
        float *y = aligned_alloc(64, 4 * (size_t)m * n), *ya = aligned_alloc(64, 4 * (size_t)m * n);
        double t_ours[100], t_amx[100];
        /* AMX: the split copies */
        uint16_t *xh = aligned_alloc(64, 2 * (size_t)m * k), *xl = aligned_alloc(64, 2 * (size_t)m * k);
        uint16_t *wh = aligned_alloc(64, 2 * (size_t)n * k), *wl = aligned_alloc(64, 2 * (size_t)n * k);
        for (size_t i = 0; i < (size_t)m * k; i++)
            split_bf16(xr[i], &xh[i], &xl[i]);
        for (int j = 0; j < n; j++)
            for (int t = 0; t < k; t++) {
                const size_t o = (((size_t)(j / 16) * (k / 2) + t / 2) * 16 + j % 16) * 2 + t % 2;
                split_bf16(wf[(size_t)j * k + t], &wh[o], &wl[o]);
            }
        /* alternate the two, `runs` rounds each */
        for (int i = 0; i < runs; i++) {
            double t0 = hr_now_seconds();
            hr_matmul_prepare(HR_GGML_F16, x, m, k, act, 0, 1);
            if (pw)
                hr_matmul_compute_packed(HR_GGML_F16, pw, k, n, act, m, y, n, 0, 1);
            else
                hr_matmul_compute(HR_GGML_F16, w16, k, n, act, m, y, n, 0, 1);
            t_ours[i] = hr_now_seconds() - t0;
            t0 = hr_now_seconds();
            amx_gemm(xh, xl, wh, wl, ya, m, n, k);
            t_amx[i] = hr_now_seconds() - t0;
        }
        bench_sort(t_ours, (size_t)runs);
        bench_sort(t_amx, (size_t)runs);
        const double fl = 2.0 * m * n * k, go = fl / t_ours[runs / 2] / 1e9,
                     ga = fl / t_amx[runs / 2] / 1e9;
        printf("bench amx shape=%s m=%d k=%d n=%d ours_gflops=%.1f amx_gflops=%.1f ratio=%.2f "
               "ours_err=%.2e amx_err=%.2e\n",
               shapes[s].name, m, k, n, go, ga, ga / go, worst_error(y, xr, wf, m, n, k),
               worst_error(ya, xr, wf, m, n, k));
        free(w16), free(wf), free(x), free(xr), free(act), free(pw), free(y), free(ya);
        free(xh), free(xl), free(wh), free(wl);
    }
    return 0;
}
