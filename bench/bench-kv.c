/*
 * bench-kv - decode speed at long context, one KV cache type against another.
 *
 *   bench-kv MODEL [--types f16,q8_0,q4_0] [--ctx 4096] [--tg 32] [--rounds 3]
 *                  [--threads N] [--attn-only]
 *
 * For each cache type an engine (all sharing the one loaded model) prefills
 * the same --ctx-token prompt once. Then, in alternating rounds (type A, type
 * B, ..., type A, ...) so that this host's drifting bandwidth hits every type
 * alike, each engine decodes --tg tokens greedily from that position and goes
 * back to it (the sequence's length is reset; its blocks stay, and the next
 * round overwrites the same slots). Attention then reads ~ctx keys per token:
 * the part of a decode step the cache type changes. One line per type:
 *   bench kv model=F type=q8_0 ctx=4096 tg=32 threads=2 rounds=3
 *     tokens_per_s=MEDIAN min=.. max=.. kv_bytes_per_token=..
 *
 * With --attn-only the model gives only its shape, and the program times
 * hr_attention itself on one thread: one decode row group (the GQA group of
 * one KV head) over ctx random keys, for every layer and KV head, i.e. the
 * attention of one decode token, alternating types round by round (rounds
 * default 15 there). Needs no prefill, so it is quick and still readable on
 * a busy host:
 *   bench kv-attn model=F type=q8_0 ctx=4096 rounds=15 us_per_token=MEDIAN min=.. max=..
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys.h"
#include "bench.h"
#include "engine/attention.h"
#include "engine/engine.h"

#define MAX_TYPES 4

static int step(struct hr_engine *e, struct hr_kv_seq *seq, const int32_t *tokens, uint32_t n)
{
    struct hr_step_seq it = {.kv = seq, .tokens = tokens, .n_tokens = n, .n_logits = 1};
    struct hr_step st = {.seqs = &it, .n_seqs = 1};
    struct hr_err err;
    if (hr_engine_step(e, &st, &err) != HR_OK) {
        fprintf(stderr, "bench-kv: %s\n", err.msg);
        return -1;
    }
    return bench_argmax(hr_engine_logits(e, 0, 0), hr_engine_model(e)->hp.n_vocab);
}

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* Attention of one decode token (all layers and KV heads) for each type. */
static int attn_only(const char *path, const struct hr_model *m, const enum hr_ggml_type *types,
                     uint32_t n_types, uint32_t ctx, uint32_t rounds)
{
    const struct hr_hparams *hp = &m->hp;
    const uint32_t hd = hp->head_dim_k, G = hp->n_head / hp->n_head_kv, L = hp->n_layer;
    struct hr_kv_pool *pool[MAX_TYPES] = {0};
    struct hr_kv_seq seq[MAX_TYPES];
    void *scr[MAX_TYPES] = {0};
    struct hr_err err;
    const size_t kv_dim = (size_t)hp->n_head_kv * hd;
    float *k = malloc(kv_dim * sizeof(float)), *v = malloc(kv_dim * sizeof(float));
    float *q = malloc((size_t)G * hd * sizeof(float)), *out = malloc((size_t)G * hd * sizeof(float));
    uint32_t rs = 1;
    for (uint32_t i = 0; i < G * hd; i++)
        q[i] = frand(&rs);
    for (uint32_t t = 0; t < n_types; t++) {
        struct hr_kv_config kc = {.n_layer = L, .n_head_kv = hp->n_head_kv, .head_dim = hd,
                                  .type = types[t]};
        kc.budget_bytes = (ctx / 32 + 1) * hr_kv_block_bytes_for(&kc);
        if (!hr_kv_block_bytes_for(&kc) || hr_kv_pool_init(&kc, &pool[t], &err) != HR_OK ||
            hr_kv_seq_init(&seq[t], ctx, 32, &err) != HR_OK ||
            hr_kv_seq_reserve(&seq[t], pool[t], ctx, &err) != HR_OK) {
            fprintf(stderr, "bench-kv: %s: cannot make the cache\n", hr_kv_type_name(types[t]));
            return 1;
        }
        scr[t] = aligned_alloc(64, (hr_attn_scratch_bytes(types[t], hd, G) + 63) / 64 * 64);
        for (uint32_t p = 0; p < ctx; p++) {
            for (size_t i = 0; i < kv_dim; i++) {
                k[i] = frand(&rs);
                v[i] = frand(&rs);
            }
            for (uint32_t l = 0; l < L; l++)
                hr_attn_store(pool[t], seq[t].blocks, l, hp->n_head_kv, hd, (int32_t)p, k, v);
        }
    }
    double us[MAX_TYPES][64];
    for (uint32_t r = 0; r < rounds; r++)
        for (uint32_t t = 0; t < n_types; t++) {
            const double t0 = hr_now_seconds();
            for (uint32_t l = 0; l < L; l++) {
                struct hr_attn_ctx ac = {.kv = pool[t], .blocks = seq[t].blocks, .layer = l,
                                         .head_dim = hd, .block_tokens = 32, .group = G,
                                         .scale = 0.125f};
                for (uint32_t g = 0; g < hp->n_head_kv; g++)
                    hr_attention(&ac, g, q, 0, (int32_t)ctx - 1, 1, out, 0, scr[t]);
            }
            us[t][r] = (hr_now_seconds() - t0) * 1e6;
        }
    for (uint32_t t = 0; t < n_types; t++) {
        bench_sort(us[t], rounds);
        printf("bench kv-attn model=%s type=%s ctx=%u rounds=%u us_per_token=%.0f min=%.0f "
               "max=%.0f\n", path, hr_kv_type_name(types[t]), ctx, rounds, us[t][rounds / 2],
               us[t][0], us[t][rounds - 1]);
        free(scr[t]);
        hr_kv_seq_free(&seq[t], pool[t]);
        hr_kv_pool_free(pool[t]);
    }
    free(k);
    free(v);
    free(q);
    free(out);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench-kv MODEL [--types f16,q8_0,q4_0] [--ctx 4096] [--tg 32] "
                        "[--rounds 3] [--threads N] [--attn-only]\n");
        return 2;
    }
    const char *path = argv[1];
    char types_arg[64] = "f16,q8_0";
    uint32_t ctx = 4096, tg = 32, rounds = 3, batch = 512;
    int threads = 2, attn = 0;
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--attn-only") == 0) {
            attn = 1;
            rounds = 15;
            memmove(argv + i, argv + i + 1, sizeof(char *) * (size_t)(argc - i - 1));
            argc--;
        }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--types") == 0)
            snprintf(types_arg, sizeof(types_arg), "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--ctx") == 0)
            ctx = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--tg") == 0)
            tg = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
    }
    if (rounds < 1 || rounds > 64 || tg < 1 || ctx < 1) {
        fprintf(stderr, "bench-kv: --rounds 1..64, --tg and --ctx at least 1\n");
        return 2;
    }
    struct hr_err err;
    struct hr_model *m = NULL;
    if (hr_model_open(path, &m, &err) != HR_OK) {
        fprintf(stderr, "bench-kv: %s\n", err.msg);
        return 1;
    }
    enum hr_ggml_type types[MAX_TYPES];
    uint32_t n_types = 0;
    for (char *t = strtok(types_arg, ","); t && n_types < MAX_TYPES; t = strtok(NULL, ","))
        if (hr_kv_type_parse(t, &types[n_types], &err) == HR_OK)
            n_types++;
        else
            fprintf(stderr, "bench-kv: --types: %s\n", err.msg);
    if (attn) {
        int rc = attn_only(path, m, types, n_types, ctx, rounds);
        hr_model_close(m);
        return rc;
    }
    struct hr_engine *eng[MAX_TYPES] = {0};
    struct hr_kv_seq seq[MAX_TYPES];
    memset(seq, 0, sizeof(seq));
    int32_t *prompt = malloc(sizeof(int32_t) * ctx);
    for (uint32_t i = 0; i < ctx; i++)
        prompt[i] = (int32_t)(1 + (i * 7919u) % (m->hp.n_vocab - 1));
    int32_t first[MAX_TYPES];
    for (uint32_t k = 0; k < n_types; k++) {
        struct hr_kv_config kc = {.n_layer = m->hp.n_layer, .n_head_kv = m->hp.n_head_kv,
                                  .head_dim = m->hp.head_dim_k, .type = types[k]};
        const uint64_t bb = hr_kv_block_bytes_for(&kc);
        struct hr_engine_config cfg = {.n_threads = threads, .kv_type = types[k],
                                       .kv_budget_bytes = ((ctx + tg) / 32 + 2) * (bb ? bb : 1),
                                       .max_step_tokens = batch, .max_step_logits = 1};
        if (hr_engine_init(m, &cfg, &eng[k], &err) != HR_OK ||
            hr_engine_seq_init(eng[k], &seq[k], ctx + tg, &err) != HR_OK) {
            fprintf(stderr, "bench-kv: %s: %s\n", hr_kv_type_name(types[k]), err.msg);
            return 1;
        }
        const double t0 = hr_now_seconds();
        for (uint32_t p = 0; p < ctx; p += batch)
            first[k] = step(eng[k], &seq[k], prompt + p, ctx - p < batch ? ctx - p : batch);
        fprintf(stderr, "bench-kv: %s: prefilled %u tokens in %.1f s\n", hr_kv_type_name(types[k]),
                ctx, hr_now_seconds() - t0);
        if (first[k] < 0)
            return 1;
    }
    double tps[MAX_TYPES][64];
    for (uint32_t r = 0; r < rounds; r++)
        for (uint32_t k = 0; k < n_types; k++) {
            int32_t tok = first[k];
            const double t0 = hr_now_seconds();
            for (uint32_t i = 0; i < tg && tok >= 0; i++)
                tok = step(eng[k], &seq[k], &tok, 1);
            tps[k][r] = tg / (hr_now_seconds() - t0);
            seq[k].n_tokens = ctx; /* back to the prompt's end; its blocks stay */
        }
    for (uint32_t k = 0; k < n_types; k++) {
        struct hr_kv_config kc = {.n_layer = m->hp.n_layer, .n_head_kv = m->hp.n_head_kv,
                                  .head_dim = m->hp.head_dim_k, .type = types[k]};
        bench_sort(tps[k], rounds);
        printf("bench kv model=%s type=%s ctx=%u tg=%u threads=%d rounds=%u tokens_per_s=%.2f "
               "min=%.2f max=%.2f kv_bytes_per_token=%" PRIu64 "\n",
               path, hr_kv_type_name(types[k]), ctx, tg, threads, rounds, tps[k][rounds / 2],
               tps[k][0], tps[k][rounds - 1], hr_kv_block_bytes_for(&kc) / 32);
        hr_kv_seq_free(&seq[k], hr_engine_kv_pool(eng[k]));
        hr_engine_free(eng[k]);
    }
    free(prompt);
    hr_model_close(m);
    return 0;
}
