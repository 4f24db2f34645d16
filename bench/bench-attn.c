/*
 * bench-attn - the attention kernel alone (engine/attention.c) on one
 * thread, in GFLOP/s against the thread's f32 FMA peak, and decode reads in
 * GB/s.
 *
 *   bench-attn [--ctx 16384] [--shapes 64x7,64x4,128x4] [--types f16,q8_0]
 *              [--queries 512] [--rounds 5]
 *
 * A shape HDxG is a head dim and a GQA group (Qwen2.5-0.5B: 64x7, Llama-3.2-1B
 * 64x4, Llama-3-8B 128x4). For each shape and cache type one KV head of
 * --ctx random keys is cached, then, alternating types round by round:
 *   prefill: the last --queries positions of a causal --ctx-token prompt, in
 *     the engine's query tiles (hr_attn_block_tokens); FLOPs counted as
 *     4 x head_dim per (row, visible key): QK^T and PV multiply-adds.
 *   decode: one token at position ctx - 1 (the group's rows share each KV
 *     load); GB/s of K and V bytes read.
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), for the kernel
 * and the peak alike, so that a shared, loaded host still gives the
 * fraction of peak the kernel reaches while it runs; on a quiet host they
 * equal wall time. One line per shape and type, medians of --rounds:
 *   bench attn hd=64 group=7 type=f16 ctx=16384 gflops=.. pct_peak=.. peak=..
 *     decode_us=.. decode_gbps=..
 */
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys.h"
#include "bench.h"
#include "engine/attention.h"
#include "engine/kv-cache.h"

#define MAX_ROUNDS 64

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* One thread's f32 FMA peak, GFLOP/s: 12 independent 512-bit chains (the
 * method of bench-flops). */
static double fma_peak(void)
{
#if defined(__AVX512F__)
    __m512 a[12];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++)
        a[i] = _mm512_set1_ps((float)i);
    const long n = 20000000;
    const double t0 = cpu_seconds();
    for (long it = 0; it < n; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            a[i] = _mm512_fmadd_ps(a[i], x, y);
    }
    const double dt = cpu_seconds() - t0;
    __m512 s = a[0];
    for (int i = 1; i < 12; i++)
        s = _mm512_add_ps(s, a[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)n * 12 * 16 * 2 / dt / 1e9;
#else
    return 0;
#endif
}

struct run {
    enum hr_ggml_type type;
    struct hr_kv_pool *pool;
    struct hr_kv_seq seq;
    void *scr;
    double gflops[MAX_ROUNDS], dec_us[MAX_ROUNDS];
};

int main(int argc, char **argv)
{
    uint32_t ctx = 16384, queries = 512, rounds = 5;
    char shapes[128] = "64x7,64x4,128x4", types[64] = "f16,q8_0";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--ctx") == 0)
            ctx = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--queries") == 0)
            queries = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--shapes") == 0)
            snprintf(shapes, sizeof(shapes), "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--types") == 0)
            snprintf(types, sizeof(types), "%s", argv[i + 1]);
        else {
            fprintf(stderr, "bench-attn: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || ctx < 64 || queries < 1 || queries > ctx) {
        fprintf(stderr, "bench-attn: need 1 <= rounds <= %d, ctx >= 64, 1 <= queries <= ctx\n",
                MAX_ROUNDS);
        return 2;
    }
    const double peak = fma_peak();
    for (char *sp = strtok(shapes, ","); sp; sp = strtok(NULL, ",")) {
        unsigned hd_u = 0, g_u = 0;
        if (sscanf(sp, "%ux%u", &hd_u, &g_u) != 2 || !hd_u || !g_u || hd_u % 32) {
            fprintf(stderr, "bench-attn: bad shape %s (HDxG, HD a multiple of 32)\n", sp);
            return 2;
        }
        const uint32_t hd = hd_u, G = g_u;
        struct run runs[4];
        uint32_t n_runs = 0;
        char tl[64];
        snprintf(tl, sizeof(tl), "%s", types);
        char *save = NULL;
        for (char *tp = strtok_r(tl, ",", &save); tp && n_runs < 4; tp = strtok_r(NULL, ",", &save)) {
            struct run *r = &runs[n_runs];
            memset(r, 0, sizeof(*r));
            struct hr_err err;
            if (hr_kv_type_parse(tp, &r->type, &err) != HR_OK) {
                fprintf(stderr, "bench-attn: %s\n", err.msg);
                return 2;
            }
            struct hr_kv_config kc = {.n_layer = 1, .n_head_kv = 1, .head_dim = hd,
                                      .block_tokens = 32, .type = r->type};
            kc.budget_bytes = (ctx / 32 + 1) * hr_kv_block_bytes_for(&kc);
            if (hr_kv_pool_init(&kc, &r->pool, &err) != HR_OK ||
                hr_kv_seq_init(&r->seq, ctx, 32, &err) != HR_OK ||
                hr_kv_seq_reserve(&r->seq, r->pool, ctx, &err) != HR_OK) {
                fprintf(stderr, "bench-attn: %s\n", err.msg);
                return 1;
            }
            r->scr = aligned_alloc(64, (hr_attn_scratch_bytes(r->type, hd, G) + 63) / 64 * 64);
            uint32_t rs = 1;
            float *k = malloc(hd * sizeof(float)), *v = malloc(hd * sizeof(float));
            for (uint32_t p = 0; p < ctx; p++) {
                for (uint32_t i = 0; i < hd; i++) {
                    k[i] = frand(&rs);
                    v[i] = frand(&rs);
                }
                hr_attn_store(r->pool, r->seq.blocks, 0, 1, hd, (int32_t)p, k, v);
            }
            free(k);
            free(v);
            n_runs++;
        }
        const size_t q_stride = (size_t)G * hd;
        float *q = malloc((size_t)queries * q_stride * sizeof(float));
        float *out = malloc((size_t)queries * q_stride * sizeof(float));
        uint32_t rs = 2;
        for (size_t i = 0; i < (size_t)queries * q_stride; i++)
            q[i] = frand(&rs);
        const uint32_t bq = hr_attn_block_tokens(G), first = ctx - queries;
        double flops = 0;
        for (uint32_t p = first; p < ctx; p++)
            flops += 4.0 * hd * G * (p + 1.0);
        for (uint32_t round = 0; round < rounds; round++)
            for (uint32_t i = 0; i < n_runs; i++) {
                struct run *r = &runs[i];
                struct hr_attn_ctx ac = {.kv = r->pool, .blocks = r->seq.blocks, .layer = 0,
                                         .head_dim = hd, .block_tokens = 32, .group = G,
                                         .scale = 1.0f / sqrtf((float)hd)};
                double t0 = cpu_seconds();
                for (uint32_t t = 0; t < queries; t += bq) {
                    const uint32_t nq = queries - t < bq ? queries - t : bq;
                    hr_attention(&ac, 0, q + (size_t)t * q_stride, q_stride, (int32_t)(first + t),
                                 nq, out + (size_t)t * q_stride, q_stride, r->scr);
                }
                r->gflops[round] = flops / (cpu_seconds() - t0) / 1e9;
                t0 = cpu_seconds();
                for (int rep = 0; rep < 10; rep++)
                    hr_attention(&ac, 0, q, 0, (int32_t)ctx - 1, 1, out, 0, r->scr);
                r->dec_us[round] = (cpu_seconds() - t0) * 1e6 / 10;
            }
        for (uint32_t i = 0; i < n_runs; i++) {
            struct run *r = &runs[i];
            bench_sort(r->gflops, rounds);
            bench_sort(r->dec_us, rounds);
            const double g = r->gflops[rounds / 2], us = r->dec_us[rounds / 2];
            const double bytes = 2.0 * (double)hr_kv_row_bytes(r->type, hd) * ctx;
            printf("bench attn hd=%u group=%u type=%s ctx=%u queries=%u gflops=%.1f min=%.1f "
                   "max=%.1f pct_peak=%.0f peak=%.0f decode_us=%.0f decode_gbps=%.1f\n",
                   hd, G, hr_kv_type_name(r->type), ctx, queries, g, r->gflops[0],
                   r->gflops[rounds - 1], peak > 0 ? 100 * g / peak : 0, peak, us, bytes / us / 1e3);
            free(r->scr);
            hr_kv_seq_free(&r->seq, r->pool);
            hr_kv_pool_free(r->pool);
        }
        free(q);
        free(out);
    }
    return 0;
}
