/*
 * bench-gemv.c - each decode GEMV's achieved bandwidth beside the card's.
 *
 *   bench-gemv [--types f16,q8_0,q4_k,...] [--shapes 8b|0.5b|all|8b_ffn_up,...] [--iters N]
 *
 * For every weight type and matrix shape of the Llama-3-8B and Qwen2.5-0.5B
 * decode (one input row), times the engine's GEMV kernels through their
 * public entry points (cuda-kernels.h): the float GEMV (f32 inputs) and,
 * where the type has one, the integer GEMV (inputs quantized to Q8_0 or
 * Q8_K first, as decode does; the quantizing is not timed). Next to each:
 *   read_gbps  a kernel that only reads the same bytes (read-probe.cu)
 *   copy_gbps  cudaMemcpy device to device of the same bytes, counting its
 *              reads and writes (the number the 4.3 TB/s is)
 * A matrix is timed cycling over enough copies (>= 1 GiB in all) that no
 * launch finds its weights in L2 (50 MiB on the H100, 60 on the H200), as
 * a model's layers never do; each number is the median of 7 runs of
 * --iters launches timed with CUDA events. The kernels' switches
 * (HR_CUDA_Q4K=warp, HR_CUDA_GEMV=float, ...) are read from the
 * environment as in the engine, so variants compare side by side.
 * One line per (type, shape, path): machine-readable, the GPU named.
 * A benchmark, not a test: it never gates a run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/rand.h"
#include "cuda/cuda-kernels.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

cudaError_t bench_read_probe(const void *p, uint64_t bytes, uint32_t *out, int blocks,
                             cudaStream_t s);

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench-gemv: %s: %s (line %d)\n", #x, cudaGetErrorString(e_),          \
                    __LINE__);                                                                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct shape {
    const char *name;
    uint32_t n, k; /* n weight rows of k */
};

static const struct shape SHAPES_8B[] = {
    {"8b_attn_q", 4096, 4096},    {"8b_attn_kv", 1024, 4096}, {"8b_ffn_up", 14336, 4096},
    {"8b_ffn_down", 4096, 14336}, {"8b_output", 128256, 4096},
};
static const struct shape SHAPES_05B[] = {
    {"0.5b_attn_q", 896, 896}, {"0.5b_ffn_up", 4864, 896}, {"0.5b_ffn_down", 896, 4864},
};

static struct hr_rng rng;

static float frand(void) /* in [-1, 1) */
{
    return (float)(hr_rng_uniform(&rng) * 2.0 - 1.0);
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The matrices being cycled: n_copies of `bytes` each. */
struct mats {
    uint8_t *base;
    uint64_t bytes, stride;
    int n_copies;
};

enum path { PATH_FLOAT, PATH_INT, PATH_READ, PATH_COPY };

struct run {
    enum path path;
    int type;
    const struct shape *sh;
    uint64_t row_bytes;
    const float *x;
    const struct hr_cuda_q8_act *qa;
    float *y;
    uint8_t *dst; /* PATH_COPY */
    uint32_t *probe;
    int blocks;
};

static void launch(const struct run *r, const uint8_t *w, uint64_t bytes)
{
    switch (r->path) {
    case PATH_FLOAT:
        CK(hr_cuda_gemv(r->type, w, r->row_bytes, r->sh->k, r->sh->n, r->x, 1, r->y, r->sh->n, NULL,
                        0, 0));
        break;
    case PATH_INT:
        CK(hr_cuda_gemv_int(r->type, w, r->row_bytes, r->sh->k, r->sh->n, r->qa, 1, r->y, r->sh->n,
                            NULL, 0, 0));
        break;
    case PATH_READ: CK(bench_read_probe(w, bytes, r->probe, r->blocks, 0)); break;
    case PATH_COPY: CK(cudaMemcpyAsync(r->dst, w, bytes, cudaMemcpyDeviceToDevice, 0)); break;
    }
}

/* Median seconds a launch over 7 runs of iters launches. */
static double time_path(const struct run *r, const struct mats *m, int iters)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++)
        launch(r, m->base + (uint64_t)(i % m->n_copies) * m->stride, m->bytes);
    float t[7];
    int c = 0;
    for (int rep = 0; rep < 7; rep++) {
        CK(cudaEventRecord(a, 0));
        for (int i = 0; i < iters; i++, c++)
            launch(r, m->base + (uint64_t)(c % m->n_copies) * m->stride, m->bytes);
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t[rep], a, b));
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    qsort(t, 7, sizeof(float), cmp_f);
    return (double)t[3] / 1e3 / iters;
}

static bool in_list(const char *list, const char *name)
{
    if (!list)
        return true;
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

static void bench_shape(int type, const struct shape *sh, int iters, const char *gpu, int sms)
{
    const size_t rb = hr_row_bytes((enum hr_ggml_type)type, sh->k);
    const uint64_t bytes = (uint64_t)rb * sh->n;
    const uint64_t stride = (bytes + 255) / 256 * 256;
    int copies = (int)((1ull << 30) / stride) + 1;
    if (copies < 2)
        copies = 2;
    struct mats m = {NULL, bytes, stride, copies};
    CK(cudaMalloc((void **)&m.base, stride * (uint64_t)copies));
    /* 16 quantized random rows, repeated down the matrix, then the copies */
    uint8_t *pool = malloc(rb * 16), *host = malloc(bytes);
    float *xr = malloc(sizeof(float) * sh->k);
    for (int r = 0; r < 16; r++) {
        for (uint32_t i = 0; i < sh->k; i++)
            xr[i] = frand() * 0.05f;
        hr_quantize_row((enum hr_ggml_type)type, xr, pool + r * rb, sh->k);
    }
    for (uint32_t r = 0; r < sh->n; r++)
        memcpy(host + (uint64_t)r * rb, pool + (r % 16) * rb, rb);
    CK(cudaMemcpy(m.base, host, bytes, cudaMemcpyHostToDevice));
    for (int c = 1; c < copies; c++)
        CK(cudaMemcpy(m.base + (uint64_t)c * stride, m.base, bytes, cudaMemcpyDeviceToDevice));
    for (uint32_t i = 0; i < sh->k; i++)
        xr[i] = frand();
    float *x, *y;
    uint8_t *dst;
    uint32_t *probe;
    CK(cudaMalloc((void **)&x, sizeof(float) * sh->k));
    CK(cudaMalloc((void **)&y, sizeof(float) * sh->n));
    CK(cudaMalloc((void **)&dst, stride));
    CK(cudaMalloc((void **)&probe, sizeof(uint32_t) * 4096));
    CK(cudaMemcpy(x, xr, sizeof(float) * sh->k, cudaMemcpyHostToDevice));
    struct hr_cuda_q8_act qa = {0};
    CK(cudaMalloc((void **)&qa.q, sh->k));
    CK(cudaMalloc((void **)&qa.d, sizeof(float) * (sh->k / 32)));
    CK(cudaMalloc((void **)&qa.s, sizeof(int16_t) * (sh->k / 16)));
    enum hr_cuda_act act = HR_CUDA_ACT_F32;
    if (hr_cuda_gemv_int_type(type, HR_CUDA_ACT_Q8_K) && sh->k % 256 == 0)
        act = HR_CUDA_ACT_Q8_K;
    else if (hr_cuda_gemv_int_type(type, HR_CUDA_ACT_Q8_0))
        act = HR_CUDA_ACT_Q8_0;
    if (act != HR_CUDA_ACT_F32)
        CK(hr_cuda_quant_act(act, x, 1, sh->k, &qa, 0));
    int blocks = 4 * sms;
    if (blocks > 4096)
        blocks = 4096;
    struct run r = {PATH_READ, type, sh, rb, x, &qa, y, dst, probe, blocks};
    const double t_read = time_path(&r, &m, iters);
    r.path = PATH_COPY;
    const double t_copy = time_path(&r, &m, iters);
    const double read_gbps = (double)bytes / t_read / 1e9;
    const double copy_gbps = 2.0 * (double)bytes / t_copy / 1e9;
    for (int p = PATH_FLOAT; p <= PATH_INT; p++) {
        if (p == PATH_INT && act == HR_CUDA_ACT_F32)
            continue;
        r.path = (enum path)p;
        const double t = time_path(&r, &m, iters);
        const double gbps = (double)bytes / t / 1e9;
        printf("bench-gemv gpu=\"%s\" type=%s shape=%s n=%u k=%u path=%s%s mib=%.1f us=%.2f "
               "gbps=%.0f read_gbps=%.0f copy_gbps=%.0f of_read=%.0f%%\n",
               gpu, hr_ggml_type_name((uint32_t)type), sh->name, sh->n, sh->k,
               p == PATH_FLOAT ? "float" : "int",
               p == PATH_FLOAT ? "" : act == HR_CUDA_ACT_Q8_K ? "_q8k" : "_q80",
               (double)bytes / 1048576.0, t * 1e6, gbps, read_gbps, copy_gbps,
               100.0 * gbps / read_gbps);
        fflush(stdout);
    }
    cudaFree(qa.q), cudaFree(qa.d), cudaFree(qa.s);
    cudaFree(x), cudaFree(y), cudaFree(dst), cudaFree(probe), cudaFree(m.base);
    free(pool), free(host), free(xr);
}

int main(int argc, char **argv)
{
    const char *types = "f16,bf16,q8_0,q4_k,q6_k,q5_k,q4_0,mxfp4", *shapes = "all";
    int iters = 20;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--types") == 0 && v)
            types = v, i++;
        else if (strcmp(argv[i], "--shapes") == 0 && v)
            shapes = v, i++;
        else if (strcmp(argv[i], "--iters") == 0 && v && atoi(v) > 0)
            iters = atoi(v), i++;
        else {
            fprintf(stderr, "usage: bench-gemv [--types f16,q8_0,...] [--shapes 8b|0.5b|all|8b_ffn_up,...] "
                            "[--iters N]\n");
            return 2;
        }
    }
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        fprintf(stderr, "bench-gemv: no CUDA device\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    hr_rng_seed(&rng, 42);
    CK(hr_cuda_kernels_preload());
    char list[256];
    snprintf(list, sizeof(list), "%s", types);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        enum hr_ggml_type type;
        if (!hr_ggml_type_from_name(t, &type) || !hr_matmul_supports(type)) {
            fprintf(stderr, "bench-gemv: unknown type %s\n", t);
            return 2;
        }
        for (int s = 0; s < 2; s++) {
            const struct shape *sv = s ? SHAPES_05B : SHAPES_8B;
            const size_t ns = s ? sizeof(SHAPES_05B) / sizeof(*sv) : sizeof(SHAPES_8B) / sizeof(*sv);
            const bool group = !strcmp(shapes, "all") || in_list(shapes, s ? "0.5b" : "8b");
            for (size_t i = 0; i < ns; i++) {
                const struct hr_ggml_type_info *ti = hr_ggml_type_info(type);
                if (!group && !in_list(shapes, sv[i].name))
                    continue;
                if (sv[i].k % ti->block_elems) /* e.g. K-quants on 896: not a file's layout */
                    continue;
                bench_shape((int)type, &sv[i], iters, prop.name, prop.multiProcessorCount);
            }
        }
    }
    return 0;
}
