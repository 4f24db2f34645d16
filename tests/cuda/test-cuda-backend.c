/*
 * test-cuda-backend.c - the CUDA engine behind the backend interface
 * (engine/backend.h), on a GPU:
 *
 *  - the same greedy tokens as the CPU backend: for every model given, a
 *    24-token prompt then 32 greedy tokens through hr_backend_* on
 *    --device cpu and cuda:0; F32 weights must agree on all 32 (the issue's
 *    bar), the other types print how many agree;
 *  - the seed scenario under a device ceiling (the first qwen3 F32 model):
 *    a 32,768-token prompt with 2048-token steps and no ceiling
 *    ("ungoverned") sets the peak device use P (cudaMemGetInfo after every
 *    step); a ceiling halfway between P and what a 256-token step would
 *    need makes init size smaller steps, and the same prompt completes
 *    with its peak below the ceiling, which the ungoverned run crossed;
 *    both reach the same next token;
 *  - parking on the device (every model): a 40-token sequence's KV copied
 *    to pinned host memory, its blocks overwritten by another sequence,
 *    restored: the next token's logits equal those of a sequence never
 *    parked, bit for bit;
 *  - a model opened for the device (every model; hr_model_open_opts.device):
 *    the same greedy tokens on cuda:0 as the model opened for the CPU, no
 *    host weights left to account (hr_backend_host_weight_bytes 0), and its
 *    file mapping's resident bytes (smaps Rss) down to the metadata plus
 *    each tensor's edge pages and fault-around (64 KiB) once uploaded; and
 *    when auto's GPU refuses it (a q8_0 KV cache), the CPU takes it packed
 *    as if it had been opened for the CPU;
 *  - the dynamic ceiling (the first qwen3 F32 model): the KV pool maps its
 *    memory as blocks are needed; an allocation that takes the device down
 *    to 16 MiB free stops its growth (the step needing a block is refused,
 *    nothing lost, and free groups go back), and once it is freed the
 *    sequence goes on with the tokens of an unsqueezed run.
 *
 *   test-cuda-backend MODEL.gguf...
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-test.h"
#include "cuda/cuda-engine.h"
#include "engine/backend.h"
#include "model/model.h"

#define N_PROMPT 24
#define N_GEN    32

static uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Prompt then greedy decode on `dev`; fills out[N_GEN]. */
static int greedy(const struct hr_model *m, const struct hr_device *dev, int32_t *out, char *name,
                  size_t name_cap)
{
    const struct hr_backend_config cfg = {.n_threads = 0,
                                          .kv_type = HR_GGML_F32,
                                          .kv_budget_bytes = 4u << 20,
                                          .max_step_tokens = 64,
                                          .max_step_logits = 1,
                                          .max_step_seqs = 1,
                                          .max_seq_tokens = 256};
    struct hr_backend *b = NULL;
    struct hr_err err = {{0}};
    if (hr_backend_init(m, dev, &cfg, &b, &err) != HR_OK) {
        printf("  FAIL  backend init: %s\n", err.msg);
        ct_failed++;
        return -1;
    }
    snprintf(name, name_cap, "%s", hr_backend_info(b)->name);
    int32_t prompt[N_PROMPT];
    for (uint32_t i = 0; i < N_PROMPT; i++) prompt[i] = (int32_t)((i * 37u + 11u) % m->hp.n_vocab);
    struct hr_kv_seq seq = {0};
    int rc = 0;
    if (hr_backend_seq_init(b, &seq, 256, &err) != HR_OK) {
        rc = -1;
        goto out;
    }
    struct hr_step_seq it = {.kv = &seq, .tokens = prompt, .n_tokens = N_PROMPT, .n_logits = 1};
    struct hr_step st = {.seqs = &it, .n_seqs = 1};
    for (uint32_t g = 0; g < N_GEN; g++) {
        if (hr_backend_step(b, &st, &err) != HR_OK) {
            rc = -1;
            goto out;
        }
        out[g] = (int32_t)argmax(hr_backend_logits(b, 0, 0), m->hp.n_vocab);
        it = (struct hr_step_seq){.kv = &seq, .tokens = &out[g], .n_tokens = 1, .n_logits = 1};
    }
out:
    if (rc) printf("  FAIL  %s: %s\n", hr_backend_info(b)->name, err.msg), ct_failed++;
    hr_kv_seq_free(&seq, hr_backend_kv_pool(b));
    hr_backend_free(b);
    return rc;
}

static void test_tokens(const char *path, const struct hr_model *m)
{
    int32_t cpu[N_GEN], gpu[N_GEN];
    char n1[16], n2[16];
    const struct hr_device dc = {.kind = HR_DEVICE_CPU}, dg = {.kind = HR_DEVICE_CUDA};
    if (greedy(m, &dc, cpu, n1, sizeof(n1)) || greedy(m, &dg, gpu, n2, sizeof(n2))) return;
    uint32_t same = 0;
    while (same < N_GEN && cpu[same] == gpu[same]) same++;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const bool f32 = strstr(base, "f32") != NULL;
    if (f32)
        CT_CHECK(same == N_GEN, "%s: greedy %u/%u tokens identical, %s vs %s (F32: all)", base,
                 same, N_GEN, n1, n2);
    else
        printf("  info  %s: greedy %u/%u tokens identical before the first difference, %s vs "
               "%s\n",
               base, same, N_GEN, n1, n2);
}

/* Resident bytes of the mapping holding p (/proc/self/smaps' Rss), or -1. */
static long long mapping_rss(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    bool in = false;
    long long rss = -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        long long kb;
        if (in && sscanf(line, "Rss: %lld kB", &kb) == 1) {
            rss = kb * 1024;
            break;
        }
    }
    fclose(f);
    return rss;
}

static void test_device_open(const char *path, const struct hr_model *m)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    struct hr_model *md = NULL;
    struct hr_err err = {{0}};
    const struct hr_model_open_opts o = {.device = true};
    if (hr_model_open_ex(path, &o, &md, &err) != HR_OK) {
        printf("  FAIL  %s opened for the device: %s\n", base, err.msg);
        ct_failed++;
        return;
    }
    int32_t a[N_GEN], d[N_GEN];
    char n1[16], n2[16];
    const struct hr_device dg = {.kind = HR_DEVICE_CUDA};
    const long long rss0 = mapping_rss(hr_gguf_bytes(md->gguf));
    if (greedy(m, &dg, a, n1, sizeof(n1)) == 0 && greedy(md, &dg, d, n2, sizeof(n2)) == 0) {
        CT_CHECK(!memcmp(a, d, sizeof(a)), "%s: opened for the device, the same %u greedy "
                 "tokens on %s", base, N_GEN, n2);
        /* what the upload left mapped: the metadata, each tensor's edge
         * pages, and fault-around's 64 KiB windows into released neighbours */
        const long long rss = mapping_rss(hr_gguf_bytes(md->gguf));
        const uint64_t bound = hr_gguf_data_offset(md->gguf) +
                               hr_gguf_n_tensors(md->gguf) * ((64u << 10) + 8192u);
        if (md->weight_bytes > 2 * bound)
            CT_CHECK(rss >= 0 && (uint64_t)rss <= bound,
                     "%s: opened for the device, %.2f MiB of its file mapped after the upload "
                     "(%.2f before; weights %.2f MiB; bound %.2f)", base, rss / 1048576.0,
                     rss0 / 1048576.0, md->weight_bytes / 1048576.0, bound / 1048576.0);
        else
            printf("  info  %s: weights %.2f MiB, too few against the bound %.2f MiB to tell "
                   "(mapped after the upload: %.2f MiB)\n", base, md->weight_bytes / 1048576.0,
                   bound / 1048576.0, rss / 1048576.0);
    }
    /* the governor's account of host weights */
    const struct hr_backend_config cfg = {.kv_type = HR_GGML_F32, .kv_budget_bytes = 4u << 20,
                                          .max_step_tokens = 64, .max_step_logits = 1,
                                          .max_step_seqs = 1, .max_seq_tokens = 256};
    struct hr_backend *b = NULL, *bc = NULL;
    if (hr_backend_init(md, &dg, &cfg, &b, &err) == HR_OK &&
        hr_backend_init(m, &dg, &cfg, &bc, &err) == HR_OK)
        CT_CHECK(hr_backend_host_weight_bytes(b) == 0 &&
                     hr_backend_host_weight_bytes(bc) == m->weight_bytes,
                 "%s: host weights accounted: %llu bytes opened for the device, %llu for the "
                 "CPU", base, (unsigned long long)hr_backend_host_weight_bytes(b),
                 (unsigned long long)(bc ? hr_backend_host_weight_bytes(bc) : 0));
    else
        printf("  FAIL  backend init: %s\n", err.msg), ct_failed++;
    hr_backend_free(b);
    hr_backend_free(bc);
    hr_model_close(md);
    /* auto, and the GPU refuses (the CUDA engine has no q8_0 KV cache): the
     * CPU runs the model in its own layout, packed as at a CPU open */
    md = NULL, b = NULL;
    struct hr_backend_config c8 = cfg;
    c8.kv_type = HR_GGML_Q8_0;
    const struct hr_device da = {.kind = HR_DEVICE_AUTO};
    if (hr_model_open_ex(path, &o, &md, &err) == HR_OK &&
        hr_backend_init(md, &da, &c8, &b, &err) == HR_OK)
        CT_CHECK(hr_backend_info(b)->kind == HR_DEVICE_CPU && hr_backend_info(b)->fallback[0] &&
                     !md->for_device && md->packed_bytes == m->packed_bytes &&
                     md->weight_bytes == m->weight_bytes,
                 "%s: opened for the device, auto's fallback to the CPU packs it as a CPU open "
                 "does (%llu of %llu bytes packed; fallback: %.60s)", base,
                 (unsigned long long)md->packed_bytes, (unsigned long long)m->packed_bytes,
                 hr_backend_info(b)->fallback);
    else
        printf("  FAIL  %s: auto with a q8_0 cache: %s\n", base, err.msg), ct_failed++;
    hr_backend_free(b);
    hr_model_close(md);
}

static void run_tokens(struct hr_backend *b, struct hr_kv_seq *seq, const int32_t *t, uint32_t n,
                       float *out, uint32_t nv, struct hr_err *err, int *rc)
{
    struct hr_step_seq it = {.kv = seq, .tokens = t, .n_tokens = n, .n_logits = out ? 1 : 0};
    struct hr_step st = {.seqs = &it, .n_seqs = 1};
    if (*rc == 0 && hr_backend_step(b, &st, err) != HR_OK) *rc = -1;
    if (*rc == 0 && out) memcpy(out, hr_backend_logits(b, 0, 0), nv * sizeof(float));
}

/* Takes device memory (cudaMalloc, largest pieces first) until at most
 * `leave` bytes are free, as another process growing would; returns how
 * many pieces it holds in ptrs (at most cap). */
static uint32_t hog(uint64_t leave, void **ptrs, uint32_t cap)
{
    uint32_t n = 0;
    for (uint64_t piece = 1ull << 30; piece >= (2ull << 20) && n < cap;) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        if ((uint64_t)fr < leave + piece || cudaMalloc(&ptrs[n], piece) != cudaSuccess) {
            cudaGetLastError();
            piece /= 2;
            continue;
        }
        n++;
    }
    return n;
}

/*
 * The dynamic device ceiling: the pool maps memory as blocks are needed;
 * what another allocation takes (this process's own cudaMalloc here, which
 * cudaMemGetInfo counts as any process's) stops its growth, so a step that
 * needs a new block fails with HR_ERR_NOMEM, nothing lost, and
 * hr_backend_kv_squeezed says the device, not the pool, is short; free
 * trailing groups go back to the device; once the memory returns the
 * sequence goes on, and its tokens equal an unsqueezed run's.
 */
static void test_squeeze(const char *path, const struct hr_model *m)
{
    enum { N_PRE = 4000, N_DEC = 200 };
    const struct hr_kv_config kc = {.n_layer = m->hp.n_layer, .n_head_kv = m->hp.n_head_kv,
                                    .head_dim = m->hp.head_dim_k, .block_tokens = 32,
                                    .type = HR_GGML_F16};
    const uint64_t bb = hr_kv_block_bytes_for(&kc);
    const struct hr_backend_config cfg = {.kv_type = HR_GGML_F16,
                                          .kv_budget_bytes = 512 * bb,
                                          .kv_block_tokens = 32,
                                          .max_step_tokens = 512,
                                          .max_step_logits = 1,
                                          .max_step_seqs = 1,
                                          .max_seq_tokens = N_PRE + N_DEC + 1};
    const struct hr_device dg = {.kind = HR_DEVICE_CUDA};
    struct hr_backend *b = NULL;
    struct hr_err err = {{0}};
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (hr_backend_init(m, &dg, &cfg, &b, &err) != HR_OK) {
        printf("  FAIL  squeeze init: %s\n", err.msg);
        ct_failed++;
        return;
    }
    const uint32_t nv = m->hp.n_vocab;
    struct hr_backend_mem mem;
    hr_backend_mem(b, &mem);
    const uint64_t mapped0 = mem.kv_bytes;
    CT_CHECK(mapped0 > 0 && mapped0 < 512 * bb,
             "%s: squeeze: the pool maps as it is needed (%.1f MiB mapped of %.1f at start)", base,
             mapped0 / 1048576.0, 512 * bb / 1048576.0);
    int32_t *prompt = malloc(N_PRE * sizeof(int32_t)), ref[N_DEC], got[N_DEC];
    for (uint32_t i = 0; i < N_PRE; i++) prompt[i] = (int32_t)((i * 2654435761u >> 7) % nv);
    struct hr_kv_seq seq = {0};
    int rc = hr_backend_seq_init(b, &seq, N_PRE + N_DEC + 1, &err) == HR_OK ? 0 : -1;
    /* The unsqueezed run. */
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        int32_t *out = pass ? got : ref;
        void *held[256];
        uint32_t n_held = 0, n_nomem = 0, at_nomem = 0;
        bool squeezed_seen = false;
        uint64_t given = 0;
        hr_kv_seq_clear(&seq, hr_backend_kv_pool(b));
        for (uint32_t done = 0; done < N_PRE && rc == 0; done += 500)
            run_tokens(b, &seq, prompt + done, 500, NULL, nv, &err, &rc);
        if (pass) { /* another allocation takes the device, down to 16 MiB free */
            n_held = hog(16u << 20, held, 256);
            given = hr_backend_kv_give_back(b);
        }
        int32_t tok = prompt[N_PRE - 1];
        for (uint32_t g = 0; g < N_DEC && rc == 0;) {
            struct hr_step_seq it = {.kv = &seq, .tokens = &tok, .n_tokens = 1, .n_logits = 1};
            struct hr_step st = {.seqs = &it, .n_seqs = 1};
            const enum hr_status s2 = hr_backend_step(b, &st, &err);
            if (s2 == HR_ERR_NOMEM && n_held) {
                n_nomem++;
                at_nomem = seq.n_tokens;
                squeezed_seen = hr_backend_kv_squeezed(b, 1);
                for (uint32_t i = 0; i < n_held; i++) cudaFree(held[i]);
                n_held = 0; /* the memory returns; the same step again */
                continue;
            }
            if (s2 != HR_OK) {
                rc = -1;
                break;
            }
            out[g++] = tok = (int32_t)argmax(hr_backend_logits(b, 0, 0), nv);
        }
        for (uint32_t i = 0; i < n_held; i++) cudaFree(held[i]);
        if (pass && rc == 0) {
            CT_CHECK(given > 0, "%s: squeeze: free groups went back to the short device "
                     "(%.1f MiB)", base, given / 1048576.0);
            CT_CHECK(n_nomem == 1 && squeezed_seen,
                     "%s: squeeze: the step needing a new block was refused (HR_ERR_NOMEM at %u "
                     "tokens, nothing lost) and the backend said the device was short", base,
                     at_nomem);
        }
    }
    if (rc)
        printf("  FAIL  %s: squeeze: %s\n", base, err.msg), ct_failed++;
    else
        CT_CHECK(memcmp(ref, got, sizeof(ref)) == 0,
                 "%s: squeeze: after the memory returned, %u greedy tokens equal the unsqueezed "
                 "run's", base, (unsigned)N_DEC);
    free(prompt);
    hr_kv_seq_free(&seq, hr_backend_kv_pool(b));
    hr_backend_free(b);
}

static void test_park(const char *path, const struct hr_model *m)
{
    const struct hr_backend_config cfg = {.kv_type = HR_GGML_F16,
                                          .kv_budget_bytes = 4u << 20,
                                          .max_step_tokens = 64,
                                          .max_step_logits = 1,
                                          .max_step_seqs = 1,
                                          .max_seq_tokens = 256};
    const struct hr_device dg = {.kind = HR_DEVICE_CUDA};
    struct hr_backend *b = NULL;
    struct hr_err err = {{0}};
    if (hr_backend_init(m, &dg, &cfg, &b, &err) != HR_OK) {
        printf("  FAIL  park init: %s\n", err.msg);
        ct_failed++;
        return;
    }
    const uint32_t nv = m->hp.n_vocab;
    int32_t p[40], q[64], t = 11;
    for (uint32_t i = 0; i < 40; i++) p[i] = (int32_t)((i * 7 + 3) % nv);
    for (uint32_t i = 0; i < 64; i++) q[i] = (int32_t)((i * 13 + 5) % nv);
    float *want = malloc(nv * sizeof(float)), *got = malloc(nv * sizeof(float));
    struct hr_kv_pool *pool = hr_backend_kv_pool(b);
    struct hr_kv_seq a = {0}, c = {0};
    int rc = hr_backend_seq_init(b, &a, 256, &err) == HR_OK &&
                     hr_backend_seq_init(b, &c, 256, &err) == HR_OK
                 ? 0
                 : -1;
    run_tokens(b, &a, p, 40, NULL, nv, &err, &rc);
    run_tokens(b, &a, &t, 1, want, nv, &err, &rc);
    hr_kv_seq_clear(&a, pool);
    run_tokens(b, &a, p, 40, NULL, nv, &err, &rc);
    void *host = NULL;
    uint32_t n_tok = 0;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (rc == 0 && hr_kv_window(pool)) {
        /* A windowed pool (gpt-oss) parks nothing: the scheduler recomputes
         * such a request (memory.md); the backend refuses, saying why. */
        uint8_t one[1];
        const enum hr_status st = hr_backend_kv_park(b, &a, one, &n_tok, &err);
        CT_CHECK(st != HR_OK && strstr(err.msg, "window"),
                 "%s: a windowed pool: parking refused (%s)", base, err.msg);
        hr_backend_seq_free(b, &a);
        hr_backend_seq_free(b, &c);
        free(want), free(got);
        hr_backend_free(b);
        return;
    }
    if (rc == 0 &&
        cudaMallocHost(&host, hr_backend_kv_park_bytes(b, &a) ? hr_backend_kv_park_bytes(b, &a)
                                                              : 1) != cudaSuccess)
        rc = -1;
    if (rc == 0 && hr_backend_kv_park(b, &a, host, &n_tok, &err) != HR_OK) rc = -1;
    /* A hybrid model's recurrent state goes to host memory too, and its slot
     * (the only one: max_step_seqs 1) to the other sequence. */
    struct hr_state_pool *sp = hr_backend_state_pool(b);
    void *state = sp ? malloc(hr_state_slot_bytes(sp)) : NULL;
    if (rc == 0 && sp &&
        hr_backend_state_copy(b, hr_state_find(sp, &a), state, true, &err) != HR_OK)
        rc = -1;
    hr_state_release(sp, &a);
    run_tokens(b, &c, q, 64, NULL, nv, &err, &rc); /* takes the freed blocks */
    hr_backend_seq_free(b, &c);
    if (rc == 0 && hr_backend_kv_unpark(b, &a, n_tok, host, &err) != HR_OK) rc = -1;
    if (rc == 0 && sp &&
        hr_backend_state_copy(b, hr_state_acquire(sp, &a), state, false, &err) != HR_OK)
        rc = -1;
    free(state);
    run_tokens(b, &a, &t, 1, got, nv, &err, &rc);
    if (rc)
        printf("  FAIL  %s: park: %s\n", base, err.msg), ct_failed++;
    else
        CT_CHECK(memcmp(want, got, nv * sizeof(float)) == 0,
                 "%s: parked in host RAM and restored%s: the next logits equal a never-parked "
                 "sequence's bit for bit (%u tokens)",
                 base, sp ? " with its recurrent state" : "", n_tok);
    cudaFreeHost(host);
    hr_backend_seq_free(b, &a);
    hr_backend_seq_free(b, &c);
    free(want);
    free(got);
    hr_backend_free(b);
}

/* The device's use now (every process's bytes). */
static uint64_t dev_used(void)
{
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    return (uint64_t)(tot - fr);
}

/* A 32,768-token prompt of one repeated token, in steps of what init gave;
 * returns the peak device use and the next token (-1 on failure). */
static int seed_run(const struct hr_model *m, uint64_t limit, uint32_t *steps_of, uint64_t *peak,
                    int32_t *next)
{
    enum { N = 32768 };
    /* The pool holds the prompt and one more token, no more: under the
     * ceiling the step must shrink, the pool cannot. */
    const struct hr_kv_config kc = {.n_layer = m->hp.n_layer,
                                    .n_head_kv = m->hp.n_head_kv,
                                    .head_dim = m->hp.head_dim_k,
                                    .block_tokens = 32,
                                    .type = HR_GGML_F16};
    const struct hr_backend_config cfg = {.kv_type = HR_GGML_F16,
                                          .kv_budget_bytes =
                                              (N / 32 + 1) * hr_kv_block_bytes_for(&kc),
                                          .kv_block_tokens = 32,
                                          .max_step_tokens = 2048,
                                          .max_step_logits = 1,
                                          .max_step_seqs = 1,
                                          .max_seq_tokens = N + 1,
                                          .device_limit_bytes = limit};
    struct hr_backend *b = NULL;
    struct hr_err err = {{0}};
    const struct hr_device dg = {.kind = HR_DEVICE_CUDA};
    if (hr_backend_init(m, &dg, &cfg, &b, &err) != HR_OK) {
        printf("  FAIL  seed init (limit %llu): %s\n", (unsigned long long)limit, err.msg);
        ct_failed++;
        return -1;
    }
    *steps_of = hr_backend_info(b)->max_step_tokens;
    int32_t *prompt = malloc(N * sizeof(int32_t));
    for (uint32_t i = 0; i < N; i++) prompt[i] = (int32_t)('x' % m->hp.n_vocab);
    struct hr_kv_seq seq = {0};
    int rc = hr_backend_seq_init(b, &seq, N + 1, &err) == HR_OK ? 0 : -1;
    *peak = dev_used();
    for (uint32_t done = 0; rc == 0 && done < N;) {
        const uint32_t n = N - done < *steps_of ? N - done : *steps_of;
        struct hr_step_seq it = {
            .kv = &seq, .tokens = prompt + done, .n_tokens = n, .n_logits = done + n == N ? 1 : 0};
        struct hr_step st = {.seqs = &it, .n_seqs = 1};
        if (hr_backend_step(b, &st, &err) != HR_OK) {
            rc = -1;
            break;
        }
        const uint64_t u = dev_used();
        if (u > *peak) *peak = u;
        done += n;
        if (done == N) *next = (int32_t)argmax(hr_backend_logits(b, 0, 0), m->hp.n_vocab);
    }
    if (rc) printf("  FAIL  seed run: %s\n", err.msg), ct_failed++;
    free(prompt);
    hr_kv_seq_free(&seq, hr_backend_kv_pool(b));
    hr_backend_free(b);
    return rc;
}

static void test_seed(const struct hr_model *m)
{
    uint32_t steps_u = 0, steps_g = 0;
    uint64_t peak_u = 0, peak_g = 0;
    int32_t next_u = -1, next_g = -2;
    const double t0 = ct_now();
    if (seed_run(m, 0, &steps_u, &peak_u, &next_u)) return;
    /* The arena a 2048-token step needs over a 256-token one: the ceiling
     * sits halfway, so 2048-token steps cross it and 256 fit under it. */
    struct hr_cuda_config cc = {.kv_type = HR_GGML_F16,
                                .max_step_tokens = 2048,
                                .max_step_logits = 1,
                                .max_step_seqs = 1,
                                .max_seq_tokens = 32769};
    hr_cuda_config_defaults(&cc);
    struct hr_cuda_plan_dims d;
    hr_cuda_engine_dims(m, &cc, &d);
    struct hr_cuda_plan big, small;
    hr_cuda_engine_max_plan(&d, &cc, &big);
    cc.max_step_tokens = 256;
    hr_cuda_engine_max_plan(&d, &cc, &small);
    const uint64_t gap = big.arena_bytes - small.arena_bytes;
    const uint64_t limit = peak_u - gap / 2;
    if (seed_run(m, limit, &steps_g, &peak_g, &next_g)) return;
    const double mb = 1048576.0;
    printf("  info  seed: 32768 tokens; ungoverned %u-token steps peak %.1f MiB; ceiling %.1f "
           "MiB; governed %u-token steps peak %.1f MiB; %.1f s\n",
           steps_u, peak_u / mb, limit / mb, steps_g, peak_g / mb, ct_now() - t0);
    CT_CHECK(peak_u > limit,
             "seed: ungoverned (2048-token steps) crosses the ceiling: %.1f > "
             "%.1f MiB",
             peak_u / mb, limit / mb);
    CT_CHECK(steps_g < 2048, "seed: the ceiling sized smaller steps (%u tokens)", steps_g);
    CT_CHECK(peak_g <= limit, "seed: governed completes below the ceiling: %.1f <= %.1f MiB",
             peak_g / mb, limit / mb);
    CT_CHECK(next_u == next_g, "seed: both reach the same next token (%d, %d)", next_u, next_g);
}

int main(int argc, char **argv)
{
    ct_require_device("test-cuda-backend");
    bool seeded = false;
    for (int i = 1; i < argc; i++) {
        struct hr_model *m = NULL;
        struct hr_err err = {{0}};
        if (hr_model_open(argv[i], &m, &err) != HR_OK) {
            printf("  FAIL  %s: %s\n", argv[i], err.msg);
            ct_failed++;
            continue;
        }
        test_tokens(argv[i], m);
        test_park(argv[i], m);
        test_device_open(argv[i], m);
        if (!seeded && strstr(argv[i], "qwen3-f32")) {
            test_squeeze(argv[i], m);
            test_seed(m);
            seeded = true;
        }
        hr_model_close(m);
    }
    return ct_finish("test-cuda-backend");
}
