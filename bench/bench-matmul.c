/*
 * bench-matmul - matmul throughput per weight type on the real shapes of
 * Qwen2.5-0.5B and Llama-3.2-1B, side by side with llama.cpp's CPU backend.
 *
 * For every (type, shape, m, threads) it times hr_matmul_prepare +
 * hr_matmul_compute (split over plain pthreads with a spinning barrier, the
 * way the engine's pool will run them) and, when the oracle libraries are
 * installed (tests/oracle/node_modules, `scripts/deps.sh --oracle`), the same
 * ggml_mul_mat through ggml-cpu's own graph executor and threadpool, with the
 * CPU variant llama.cpp would load here. One machine-readable line each:
 *
 *   bench matmul type=Q8_0 shape=qwen.ffn_up k=896 n_out=4864 m=1 threads=2
 *     isa=avx512vnni runs=N ms=X gflops=G gbps=B foreign_cpus=F ggml_ms=..
 *     ggml_gflops=.. ggml_gbps=.. speedup=S
 *
 * foreign_cpus is the CPU time other processes used during our measurement,
 * in cores (from /proc/stat): above ~0.1 the numbers are disturbed.
 *
 * gflops counts 2 * m * k * n_out; gbps counts the weight bytes read once per
 * call (the decode bound). For m = 1 the weights rotate over copies totalling
 * more than the 32 MiB L3, so every call streams them from DRAM as decode
 * does; for larger m one copy is used (prefill reads each weight once per
 * call and is compute-bound). Times are medians; the load average is printed
 * before and after because other processes share these machines.
 *
 * Usage: bench-matmul [--types q8_0,f16,mxfp4,...] [--shapes qwen,llama,moe] [--m 1,512]
 *                     [--threads 1,2] [--isa avx512vnni|avx2|generic] [--no-ggml]
 *                     [--no-invariant] [--min-time SECONDS]
 * (--no-invariant: the faster decode kernels that are not batch-invariant,
 * see hr_kernels_set_batch_invariant.)
 * ggml's side does not use llama.cpp's weight repacking (CPU_REPACK buffers
 * for Q4_0/Q4_K), only the plain type traits and llamafile's sgemm.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "bench.h"

#include <strings.h>

/* The oracle binaries, found from this file's own (absolute, under CMake)
 * path, or from $HR_GGML_BINS. */
#define GGML_BINS_REL "tests/oracle/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"

static void ggml_bins(char *out, size_t n)
{
    const char *env = getenv("HR_GGML_BINS");
    if (env) {
        snprintf(out, n, "%s/", env);
        return;
    }
    const char *file = __FILE__, *tail = strstr(file, "bench/bench-matmul.c");
    snprintf(out, n, "%.*s" GGML_BINS_REL, tail ? (int)(tail - file) : 0, file);
}

/* splitmix64 normals, enough for benchmark data */
static uint64_t g_seed = 0x9e3779b97f4a7c15ull;
static double rnd_normal(void)
{
    double u[2];
    for (int i = 0; i < 2; i++) {
        uint64_t z = (g_seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        u[i] = ((double)(z >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* ---- our side: a fixed pool of pthreads and a spinning barrier ---------- */

struct job {
    enum hr_ggml_type type;
    const uint8_t *const *w; /* weight copies */
    const uint8_t *const *pw; /* their packed copies (hr_matmul_pack), or NULL */
    size_t n_copies, k, n_out, m;
    const float *x;
    void *act;
    float *y;
    size_t call; /* which copy this call uses */
};

static struct {
    int nth;
    pthread_t th[64];
    _Atomic unsigned arrived, phase;
    _Atomic bool quit;
    struct job *job;
} g_pool;

static void barrier(void)
{
    unsigned ph = atomic_load_explicit(&g_pool.phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&g_pool.arrived, 1, memory_order_acq_rel) + 1 ==
        (unsigned)g_pool.nth) {
        atomic_store_explicit(&g_pool.arrived, 0, memory_order_relaxed);
        atomic_store_explicit(&g_pool.phase, ph + 1, memory_order_release);
    } else {
        while (atomic_load_explicit(&g_pool.phase, memory_order_acquire) == ph)
            __builtin_ia32_pause();
    }
}

/* One matmul call: prepare, barrier, compute. */
static void run_share(int ith)
{
    struct job *j = g_pool.job;
    const size_t c = j->call % j->n_copies;
    hr_matmul_prepare(j->type, j->x, j->m, j->k, j->act, ith, g_pool.nth);
    barrier();
    if (j->pw)
        hr_matmul_compute_packed(j->type, j->pw[c], j->k, j->n_out, j->act, j->m, j->y, j->n_out,
                                 ith, g_pool.nth);
    else
        hr_matmul_compute(j->type, j->w[c], j->k, j->n_out, j->act, j->m, j->y, j->n_out, ith,
                          g_pool.nth);
}

static void *worker(void *arg)
{
    int ith = (int)(intptr_t)arg;
    for (;;) {
        barrier(); /* start */
        if (atomic_load_explicit(&g_pool.quit, memory_order_acquire))
            return NULL;
        run_share(ith);
        barrier(); /* done */
    }
}

static void pool_start(int nth)
{
    g_pool.nth = nth;
    atomic_store(&g_pool.quit, false);
    for (int i = 1; i < nth; i++)
        pthread_create(&g_pool.th[i], NULL, worker, (void *)(intptr_t)i);
}

static void pool_stop(void)
{
    atomic_store(&g_pool.quit, true);
    barrier();
    for (int i = 1; i < g_pool.nth; i++)
        pthread_join(g_pool.th[i], NULL);
}

static double ours_call(void)
{
    double t0 = hr_now_seconds();
    barrier();
    run_share(0);
    barrier();
    return hr_now_seconds() - t0;
}

/* ---- ggml side, through dlopen ---------------------------------------- */

struct ggml_init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};
struct ggml_cplan {
    size_t work_size;
    uint8_t *work_data;
    int n_threads;
    void *threadpool;
    void *abort_callback;
    void *abort_callback_data;
    bool use_ref;
};

static struct {
    bool ok;
    void *(*init)(struct ggml_init_params);
    void (*free)(void *);
    void *(*new_tensor_2d)(void *, int, int64_t, int64_t);
    void *(*mul_mat)(void *, void *, void *);
    void *(*new_graph)(void *);
    void (*build_forward_expand)(void *, void *);
    void *(*get_data)(void *);
    size_t (*tensor_overhead)(void);
    size_t (*graph_overhead)(void);
    void (*tp_params_init)(void *, int);
    void *(*tp_new)(void *);
    void (*tp_free)(void *);
    struct ggml_cplan (*graph_plan)(const void *, int, void *);
    int (*graph_compute)(void *, struct ggml_cplan *);
    char variant[32];
} G;

static void ggml_load(void)
{
    char dir[900], path[1024];
    ggml_bins(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%slibggml-base.so", dir);
    void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!base)
        return;
    static const char *const variants[] = {"sapphirerapids", "zen4",      "cooperlake",
                                           "cannonlake",     "cascadelake", "icelake",
                                           "skylakex",       "alderlake", "haswell",
                                           "sse42",          "x64"};
    void *cpu = NULL;
    int best = 0;
    for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
        snprintf(path, sizeof(path), "%slibggml-cpu-%s.so", dir, variants[v]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        int (*score)(void) = (int (*)(void))dlsym(h, "ggml_backend_score");
        int sc = score ? score() : 0;
        if (sc > best) {
            if (cpu)
                dlclose(cpu);
            cpu = h, best = sc;
            snprintf(G.variant, sizeof(G.variant), "%s", variants[v]);
        } else {
            dlclose(h);
        }
    }
    if (!cpu)
        return;
#define SYM(lib, field, name) *(void **)&G.field = dlsym(lib, name)
    SYM(base, init, "ggml_init");
    SYM(base, free, "ggml_free");
    SYM(base, new_tensor_2d, "ggml_new_tensor_2d");
    SYM(base, mul_mat, "ggml_mul_mat");
    SYM(base, new_graph, "ggml_new_graph");
    SYM(base, build_forward_expand, "ggml_build_forward_expand");
    SYM(base, get_data, "ggml_get_data");
    SYM(base, tensor_overhead, "ggml_tensor_overhead");
    SYM(base, graph_overhead, "ggml_graph_overhead");
    SYM(base, tp_params_init, "ggml_threadpool_params_init");
    SYM(cpu, tp_new, "ggml_threadpool_new");
    SYM(cpu, tp_free, "ggml_threadpool_free");
    SYM(cpu, graph_plan, "ggml_graph_plan");
    SYM(cpu, graph_compute, "ggml_graph_compute");
#undef SYM
    void (*cpu_init)(void) = (void (*)(void))dlsym(cpu, "ggml_cpu_init");
    if (cpu_init)
        cpu_init();
    G.ok = G.init && G.free && G.new_tensor_2d && G.mul_mat && G.new_graph &&
           G.build_forward_expand && G.get_data && G.tensor_overhead && G.graph_overhead &&
           G.tp_params_init && G.tp_new && G.tp_free && G.graph_plan && G.graph_compute;
}

/* Median seconds per ggml_mul_mat call, rotating over the weight copies. */
static double ggml_time(enum hr_ggml_type t, const uint8_t *const *w, size_t n_copies, size_t k,
                        size_t n_out, size_t m, const float *x, int nth, double min_time,
                        int *runs_out)
{
    const size_t wbytes = hr_row_bytes(t, k) * n_out;
    struct ggml_init_params ip = {
        .mem_size = n_copies * (G.tensor_overhead() * 2 + wbytes + n_out * m * 4 + G.graph_overhead() + 256) +
                    G.tensor_overhead() + k * m * 4 + (1 << 20),
        .mem_buffer = NULL,
        .no_alloc = false};
    void *ctx = G.init(ip);
    if (!ctx)
        return NAN;
    void *X = G.new_tensor_2d(ctx, 0 /* F32 */, (int64_t)k, (int64_t)m);
    memcpy(G.get_data(X), x, k * m * sizeof(float));
    void **graphs = calloc(n_copies, sizeof(void *));
    for (size_t c = 0; c < n_copies; c++) {
        void *W = G.new_tensor_2d(ctx, (int)t, (int64_t)k, (int64_t)n_out);
        memcpy(G.get_data(W), w[c], wbytes);
        graphs[c] = G.new_graph(ctx);
        G.build_forward_expand(graphs[c], G.mul_mat(ctx, W, X));
    }
    uint8_t params[8192] = {0}; /* struct ggml_threadpool_params (~530 bytes) */
    G.tp_params_init(params, nth);
    void *tp = G.tp_new(params);
    struct ggml_cplan plan = G.graph_plan(graphs[0], nth, tp);
    uint8_t *work = malloc(plan.work_size + 64);
    double times[4096];
    int runs = 0;
    double start = hr_now_seconds();
    for (size_t call = 0; runs < 4096; call++) {
        struct ggml_cplan p = G.graph_plan(graphs[call % n_copies], nth, tp);
        p.work_data = work;
        double t0 = hr_now_seconds();
        G.graph_compute(graphs[call % n_copies], &p);
        double dt = hr_now_seconds() - t0;
        if (call >= 2) /* warm-up */
            times[runs++] = dt;
        if (runs >= 5 && hr_now_seconds() - start > min_time)
            break;
    }
    G.tp_free(tp);
    free(work);
    free(graphs);
    G.free(ctx);
    bench_sort(times, (size_t)runs);
    *runs_out = runs;
    return times[runs / 2];
}

/* ---- driver ------------------------------------------------------------ */

struct shape {
    const char *name;
    size_t k, n_out;
};

static const struct shape k_qwen[] = {
    {"qwen.ffn_up", 896, 4864}, {"qwen.attn_q", 896, 896}, {"qwen.attn_kv", 896, 128},
    {"qwen.ffn_down", 4864, 896}};
static const struct shape k_llama[] = {
    {"llama.ffn_up", 2048, 8192}, {"llama.attn_q", 2048, 2048}, {"llama.attn_kv", 2048, 512},
    {"llama.ffn_down", 8192, 2048}};
/* One expert of a MoE layer: Qwen3-30B-A3B (gate/up 2048 -> 768, down 768 ->
 * 2048: 3 K-quant blocks per row) and gpt-oss (2880 -> 2880, not a multiple
 * of 256: its files keep experts in MXFP4). Decode runs 8 (4) of these. */
static const struct shape k_moe[] = {
    {"moe.exp_up", 2048, 768}, {"moe.exp_down", 768, 2048}, {"moe.oss_up", 2880, 2880},
    {"moe.oss_down", 2880, 2880}};

static bool in_list(const char *list, const char *item)
{
    if (!list)
        return true;
    size_t n = strlen(item);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncasecmp(p, item, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

static void bench_one(enum hr_ggml_type t, const struct shape *s, size_t m, int nth, bool with_ggml,
                      double min_time)
{
    const size_t k = s->k, n_out = s->n_out, rb = hr_row_bytes(t, k), wbytes = rb * n_out;
    /* decode streams weights from DRAM: rotate over > 96 MiB of copies */
    size_t n_copies = m < 16 ? (96u << 20) / wbytes + 1 : 1;
    if (n_copies > 256)
        n_copies = 256;
    uint8_t **w = calloc(n_copies, sizeof(uint8_t *));
    float *row = malloc(k * sizeof(float));
    w[0] = aligned_alloc(64, (wbytes + 63) / 64 * 64);
    for (size_t r = 0; r < n_out; r++) {
        for (size_t j = 0; j < k; j++)
            row[j] = (float)(rnd_normal() / sqrt((double)k));
        hr_quantize_row(t, row, w[0] + r * rb, k);
    }
    for (size_t c = 1; c < n_copies; c++) {
        w[c] = aligned_alloc(64, (wbytes + 63) / 64 * 64);
        memcpy(w[c], w[0], wbytes);
    }
    /* the engine's layout: packed where the model would pack */
    const size_t pbytes = hr_matmul_packed_bytes(t, k, n_out);
    uint8_t **pw = pbytes ? calloc(n_copies, sizeof(uint8_t *)) : NULL;
    for (size_t c = 0; pw && c < n_copies; c++) {
        pw[c] = aligned_alloc(64, (pbytes + 63) / 64 * 64);
        hr_matmul_pack(t, w[c], k, n_out, pw[c]);
    }
    float *x = malloc(k * m * sizeof(float));
    for (size_t i = 0; i < k * m; i++)
        x[i] = (float)rnd_normal();
    size_t act_bytes = hr_matmul_act_bytes(t, m, k);
    void *act = aligned_alloc(64, (act_bytes + 63) / 64 * 64);
    float *y = malloc(n_out * m * sizeof(float));

    struct job j = {.type = t, .w = (const uint8_t *const *)w, .pw = (const uint8_t *const *)pw,
                    .n_copies = n_copies, .k = k,
                    .n_out = n_out, .m = m, .x = x, .act = act, .y = y};
    g_pool.job = &j;
    double all0, self0, all1, self1, wall0 = hr_now_seconds();
    hr_cpu_times(&all0, &self0);
    pool_start(nth);
    double times[4096];
    int runs = 0;
    double start = hr_now_seconds();
    for (j.call = 0; runs < 4096; j.call++) {
        double dt = ours_call();
        if (j.call >= 2)
            times[runs++] = dt;
        if (runs >= 5 && hr_now_seconds() - start > min_time)
            break;
    }
    pool_stop();
    hr_cpu_times(&all1, &self1);
    const double foreign = ((all1 - all0) - (self1 - self0)) / (hr_now_seconds() - wall0);
    bench_sort(times, (size_t)runs);
    const double ms = times[runs / 2];
    const double flop = 2.0 * (double)m * (double)k * (double)n_out;
    printf("bench matmul type=%s shape=%s k=%zu n_out=%zu m=%zu threads=%d isa=%s runs=%d "
           "packed=%d ms=%.4f gflops=%.1f gbps=%.1f foreign_cpus=%.2f",
           hr_ggml_type_name(t), s->name, k, n_out, m, nth, hr_kernels_isa(), runs, pw != NULL,
           ms * 1e3,
           flop / ms * 1e-9, (double)wbytes / ms * 1e-9, foreign < 0 ? 0 : foreign);
    if (with_ggml) {
        int gruns = 0;
        double gms = ggml_time(t, (const uint8_t *const *)w, n_copies, k, n_out, m, x, nth,
                               min_time, &gruns);
        printf(" ggml_ms=%.4f ggml_gflops=%.1f ggml_gbps=%.1f speedup=%.2f", gms * 1e3,
               flop / gms * 1e-9, (double)wbytes / gms * 1e-9, gms / ms);
    }
    printf("\n");
    fflush(stdout);
    for (size_t c = 0; c < n_copies; c++) {
        free(w[c]);
        if (pw)
            free(pw[c]);
    }
    free(w);
    free(pw);
    free(row);
    free(x);
    free(act);
    free(y);
}

int main(int argc, char **argv)
{
    const char *types = "f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,mxfp4,q2_k,q3_k,q4_k,q5_k,q6_k,iq4_xs",
               *shapes = "qwen,llama",
               *ms = "1,512", *threads = "1,2";
    bool with_ggml = true;
    double min_time = 0.4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--types") == 0 && v)
            types = v, i++;
        else if (strcmp(a, "--shapes") == 0 && v)
            shapes = v, i++;
        else if (strcmp(a, "--m") == 0 && v)
            ms = v, i++;
        else if (strcmp(a, "--threads") == 0 && v)
            threads = v, i++;
        else if (strcmp(a, "--min-time") == 0 && v)
            min_time = atof(v), i++;
        else if (strcmp(a, "--no-ggml") == 0)
            with_ggml = false;
        else if (strcmp(a, "--no-invariant") == 0)
            hr_kernels_set_batch_invariant(false);
        else if (strcmp(a, "--isa") == 0 && v) {
            if (!hr_kernels_force_isa(v)) {
                fprintf(stderr, "bench-matmul: this CPU or build cannot run ISA '%s'\n", v);
                return 2;
            }
            i++;
        }
        else {
            fprintf(stderr, "usage: bench-matmul [--types LIST] [--shapes qwen,llama,moe|NAME,..] "
                            "[--m LIST] [--threads LIST] [--isa NAME] [--no-ggml] "
                            "[--no-invariant] [--min-time S]\n");
            return 2;
        }
    }
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (la) {
        if (!fgets(load, sizeof(load), la))
            load[0] = 0;
        load[strcspn(load, "\n")] = 0;
        fclose(la);
    }
    if (with_ggml)
        ggml_load();
    printf("bench matmul_setup isa=%s invariant=%d ggml=%s load=\"%s\"\n", hr_kernels_isa(),
           hr_kernels_batch_invariant(), G.ok ? G.variant : "unavailable", load);
    with_ggml = with_ggml && G.ok;
    static const enum hr_ggml_type all[] = {
        HR_GGML_F32,  HR_GGML_F16,  HR_GGML_BF16,   HR_GGML_Q8_0,  HR_GGML_Q4_0, HR_GGML_Q4_1,
        HR_GGML_Q5_0, HR_GGML_Q5_1, HR_GGML_IQ4_NL, HR_GGML_MXFP4, HR_GGML_Q2_K, HR_GGML_Q3_K,
        HR_GGML_Q4_K, HR_GGML_Q5_K, HR_GGML_Q6_K,   HR_GGML_IQ4_XS};
    for (size_t ti = 0; ti < sizeof(all) / sizeof(all[0]); ti++) {
        const enum hr_ggml_type t = all[ti];
        if (!in_list(types, hr_ggml_type_name(t)))
            continue;
        const size_t blk = hr_ggml_type_info(t)->block_elems;
        static const char *const fam_name[] = {"qwen", "llama", "moe"};
        for (int fam = 0; fam < 3; fam++) {
            const struct shape *sh = fam == 0 ? k_qwen : fam == 1 ? k_llama : k_moe;
            for (int si = 0; si < 4; si++) {
                if (!in_list(shapes, fam_name[fam]) && !in_list(shapes, sh[si].name))
                    continue;
                if (sh[si].k % blk)
                    continue; /* e.g. K-quants on k = 896: llama-quantize falls back too */
                for (const char *p = ms; p && *p;) {
                    size_t m = strtoul(p, NULL, 10);
                    for (const char *q = threads; q && *q;) {
                        int nth = atoi(q);
                        if (m > 0 && nth > 0 && nth <= 64)
                            bench_one(t, &sh[si], m, nth, with_ggml, min_time);
                        q = strchr(q, ',');
                        q = q ? q + 1 : NULL;
                    }
                    p = strchr(p, ',');
                    p = p ? p + 1 : NULL;
                }
            }
        }
    }
    la = fopen("/proc/loadavg", "r");
    if (la) {
        if (!fgets(load, sizeof(load), la))
            load[0] = 0;
        load[strcspn(load, "\n")] = 0;
        fclose(la);
    }
    printf("bench matmul_done load=\"%s\"\n", load);
    return 0;
}
