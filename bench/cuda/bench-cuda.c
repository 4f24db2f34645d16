/*
 * bench-cuda.c - the CUDA engine's speed on model-sized shapes.
 *
 *   bench-cuda [--shape llama-3.2-1b|llama-3-8b|qwen2.5-0.5b] [--type q4_k|q8_0|f16|...]
 *
 * Builds a synthetic llama model in host memory (no file: every matrix is
 * its own buffer of valid blocks, a few quantized random rows repeated, so
 * nothing is shared on the device and the weights are really streamed),
 * then measures with CUDA events around each step:
 *   prefill  one 512-token step (1 logit row)
 *   decode   one token at a time after 512 tokens of context
 *   batch    8 and 32 sequences decoding one token each in one step
 *   pp512    (wall clock) 512 tokens in one step, as llama-bench's pp512
 *   pp4096   (wall clock) 4096 tokens in 8 steps of 512, as llama-bench's pp4096
 *            with its default micro-batch of 512
 *   tg128    (wall clock) 128 tokens one at a time from an empty context, as
 *            llama-bench's tg128; each its median over rounds
 * and prints one machine-readable line per shape and type. decode_gbps is
 * weight bytes / decode time: against the H200's ~4.3 TB/s copy rate it
 * says how far the GEMV is from streaming the weights at full speed.
 * HR_BENCH_QUICK=1 runs the decode rows alone (decode, tg128; the rest print
 * 0): A/B rounds of an HR_CUDA_* switch in seconds.
 * A benchmark, not a test: it never gates a run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_profiler_api.h>

#include "cuda/cuda-engine.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

static uint64_t rng = 88172645463325252ull;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* A matrix of `rows` x `k` in `type`: 16 random rows quantized, repeated. */
static struct hr_weight matrix(enum hr_ggml_type type, uint64_t k, uint64_t rows, const char *name)
{
    const size_t rb = hr_row_bytes(type, k);
    uint8_t *pool = malloc(rb * 16), *data = malloc(rb * rows);
    float *x = malloc(sizeof(float) * k);
    for (int r = 0; r < 16; r++) {
        for (uint64_t i = 0; i < k; i++)
            x[i] = frand() * 0.05f;
        hr_quantize_row(type, x, pool + r * rb, k);
    }
    for (uint64_t r = 0; r < rows; r++)
        memcpy(data + r * rb, pool + (r % 16) * rb, rb);
    free(pool);
    free(x);
    return (struct hr_weight){.type = type, .data = data, .ne0 = k, .ne1 = rows, .name = name};
}

static struct hr_weight vector(uint64_t n, const char *name)
{
    float *v = malloc(sizeof(float) * n);
    for (uint64_t i = 0; i < n; i++)
        v[i] = 1.0f;
    return (struct hr_weight){.type = HR_GGML_F32, .data = v, .ne0 = n, .ne1 = 1, .name = name};
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* n tokens in ms milliseconds as tokens/s; 0 for a row not run */
static double rate(double n, double ms)
{
    return ms > 0 ? n / (ms / 1000.0) : 0.0;
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof(float), cmp_f);
    return v[n / 2];
}

/* One step of one sequence: n tokens, the last n_logits of them with logits. */
static bool step1(struct hr_cuda_engine *e, struct hr_kv_seq *kv, const int32_t *toks, uint32_t n,
                  uint32_t n_logits, struct hr_err *err)
{
    struct hr_step_seq it = {.kv = kv, .tokens = toks, .n_tokens = n, .n_logits = n_logits};
    struct hr_step st = {.seqs = &it, .n_seqs = 1};
    return hr_cuda_engine_step(e, &st, err) == HR_OK;
}

/* tg128_d16384's context, as llama-bench -d 16384 */
#define DEPTH 16384

int main(int argc, char **argv)
{
    const char *shape = "llama-3.2-1b", *tname = "q4_k";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--shape") == 0)
            shape = argv[i + 1];
        else if (strcmp(argv[i], "--type") == 0)
            tname = argv[i + 1];
    }
    enum hr_ggml_type type;
    if (!hr_ggml_type_from_name(tname, &type) || !hr_matmul_supports(type)) {
        fprintf(stderr, "bench-cuda: unknown type %s\n", tname);
        return 2;
    }
    struct hr_model m;
    memset(&m, 0, sizeof(m));
    struct hr_hparams *hp = &m.hp;
    if (strcmp(shape, "llama-3-8b") == 0) {
        hp->n_embd = 4096, hp->n_layer = 32, hp->n_head = 32, hp->n_head_kv = 8;
        hp->head_dim_k = hp->head_dim_v = 128, hp->n_ff = 14336;
    } else if (strcmp(shape, "qwen2.5-0.5b") == 0) {
        hp->n_embd = 896, hp->n_layer = 24, hp->n_head = 14, hp->n_head_kv = 2;
        hp->head_dim_k = hp->head_dim_v = 64, hp->n_ff = 4864;
    } else {
        shape = "llama-3.2-1b";
        hp->n_embd = 2048, hp->n_layer = 16, hp->n_head = 32, hp->n_head_kv = 8;
        hp->head_dim_k = hp->head_dim_v = 64, hp->n_ff = 8192;
    }
    const bool qwen = strcmp(shape, "qwen2.5-0.5b") == 0;
    hp->n_vocab = qwen ? 151936 : 128256, hp->n_rot = hp->head_dim_k, hp->rms_eps = 1e-5f;
    hp->rope_base = qwen ? 1000000.0f : 500000.0f, hp->rope_factor = 1.0f;
    m.arch = qwen ? HR_ARCH_QWEN2 : HR_ARCH_LLAMA;
    m.rope_neox = qwen;
    const uint64_t E = hp->n_embd, qd = (uint64_t)hp->n_head * hp->head_dim_k;
    const uint64_t kvd = (uint64_t)hp->n_head_kv * hp->head_dim_k, F = hp->n_ff;
    m.tok_embd = matrix(type, E, hp->n_vocab, "token_embd.weight");
    /* qwen2.5-0.5b ties its output to the embeddings (one matrix on the device) */
    m.output = qwen ? m.tok_embd : matrix(type, E, hp->n_vocab, "output.weight");
    m.output_norm = vector(E, "output_norm.weight");
    m.layers = calloc(hp->n_layer, sizeof(*m.layers));
    uint64_t wbytes = hr_row_bytes(type, E) * hp->n_vocab; /* the output matrix, read per token */
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        struct hr_layer *L = &m.layers[l];
        L->mixer = HR_MIXER_ATTN; /* every layer attention, each its KV layer */
        L->kv_layer = m.n_attn_layers++;
        L->attn_norm = vector(E, "attn_norm");
        L->ffn_norm = vector(E, "ffn_norm");
        L->wq = matrix(type, E, qd, "attn_q");
        L->wk = matrix(type, E, kvd, "attn_k");
        L->wv = matrix(type, E, kvd, "attn_v");
        if (qwen) {
            L->bq = vector(qd, "attn_q.bias");
            L->bk = vector(kvd, "attn_k.bias");
            L->bv = vector(kvd, "attn_v.bias");
        }
        L->wo = matrix(type, qd, E, "attn_output");
        L->w_gate = matrix(type, E, F, "ffn_gate");
        L->w_up = matrix(type, E, F, "ffn_up");
        L->w_down = matrix(type, F, E, "ffn_down");
        wbytes += hr_row_bytes(type, E) * (qd + 2 * kvd + 2 * F) + hr_row_bytes(type, qd) * E +
                  hr_row_bytes(type, F) * E;
    }
    struct hr_cuda_config cfg = {.device = 0, .kv_type = HR_GGML_F16, .kv_budget_bytes = 4ull << 30,
                                 .max_step_tokens = 512, .max_step_logits = 32,
                                 .max_step_seqs = 32, .max_seq_tokens = DEPTH + 256};
    struct hr_cuda_engine *e = NULL;
    struct hr_err err = {{0}};
    if (hr_cuda_engine_init(&m, &cfg, &e, &err) != HR_OK) {
        fprintf(stderr, "bench-cuda: %s\n", err.msg);
        return 1;
    }
    int32_t *toks = malloc(sizeof(int32_t) * 512);
    for (int i = 0; i < 512; i++)
        toks[i] = (int32_t)(rng % hp->n_vocab), rng = rng * 6364136223846793005ull + 1;
    struct hr_kv_seq seqs[32];
    memset(seqs, 0, sizeof(seqs));
    for (int i = 0; i < 32; i++)
        hr_cuda_engine_seq_init(e, &seqs[i], i ? 4096 : DEPTH + 256, &err);
    struct hr_kv_pool *pool = hr_cuda_engine_kv_pool(e);
    float t_pre[5], t_dec[32], t_b8[8], t_b32[8];
    int ok = 1;
    for (int r = 0; ok && r < 5; r++) { /* prefill, 512 tokens */
        hr_kv_seq_clear(&seqs[0], pool);
        ok = step1(e, &seqs[0], toks, 512, 1, &err);
        t_pre[r] = hr_cuda_engine_last_step_ms(e);
    }
    /* HR_BENCH_PROFILE=1: only two decode steps (after 512 tokens) between
     * cudaProfilerStart and Stop, for `ncu --profile-from-start off`;
     * =prefill: the last 512-token step of 4096; =d16384: two decode steps
     * after 16384 tokens. */
    if (getenv("HR_BENCH_PROFILE") && !strcmp(getenv("HR_BENCH_PROFILE"), "prefill")) {
        /* the last 512-token step of a 4096-token prompt */
        hr_kv_seq_clear(&seqs[0], pool);
        for (int c = 0; ok && c < 8; c++) {
            if (c == 7)
                cudaProfilerStart();
            ok = step1(e, &seqs[0], toks, 512, c == 7, &err);
        }
        cudaProfilerStop();
        hr_cuda_engine_free(e);
        return ok ? 0 : 1;
    }
    if (getenv("HR_BENCH_PROFILE") && !strcmp(getenv("HR_BENCH_PROFILE"), "d16384")) {
        /* two decode steps after DEPTH tokens of context (tg128_d16384's) */
        hr_kv_seq_clear(&seqs[0], pool);
        for (int c = 0; ok && c < DEPTH / 512; c++)
            ok = step1(e, &seqs[0], toks, 512, 0, &err);
        cudaProfilerStart();
        for (int r = 0; ok && r < 2; r++)
            ok = step1(e, &seqs[0], &toks[r], 1, 1, &err);
        cudaProfilerStop();
        hr_cuda_engine_free(e);
        return ok ? 0 : 1;
    }
    if (getenv("HR_BENCH_PROFILE")) {
        cudaProfilerStart();
        for (int r = 0; ok && r < 2; r++) {
            ok = step1(e, &seqs[0], &toks[r], 1, 1, &err);
        }
        cudaProfilerStop();
        hr_cuda_engine_free(e);
        return ok ? 0 : 1;
    }
    for (int r = 0; ok && r < 32; r++) { /* decode after 512 tokens */
        ok = step1(e, &seqs[0], &toks[r], 1, 1, &err);
        t_dec[r] = hr_cuda_engine_last_step_ms(e);
    }
    /* HR_BENCH_QUICK=1: the decode rows alone (decode_ms, tg128), for A/B
     * rounds of a switch; the other rows print 0. */
    const bool quick = getenv("HR_BENCH_QUICK") && strcmp(getenv("HR_BENCH_QUICK"), "0");
    for (int i = 1; ok && !quick && i < 32; i++) { /* 31 more sequences, 64 tokens of context */
        ok = step1(e, &seqs[i], toks, 64, 0, &err);
    }
    memset(t_b8, 0, sizeof(t_b8));
    memset(t_b32, 0, sizeof(t_b32));
    for (int b = 0; ok && !quick && b < 2; b++) {
        const uint32_t n = b ? 32 : 8;
        for (int r = 0; ok && r < 8; r++) {
            struct hr_step_seq its[32];
            for (uint32_t i = 0; i < n; i++)
                its[i] = (struct hr_step_seq){.kv = &seqs[i], .tokens = &toks[100 + r], .n_tokens = 1,
                                              .n_logits = 1};
            struct hr_step st = {.seqs = its, .n_seqs = n};
            ok = hr_cuda_engine_step(e, &st, &err) == HR_OK;
            (b ? t_b32 : t_b8)[r] = hr_cuda_engine_last_step_ms(e);
        }
    }
    /* llama-bench's rows, wall clock: pp512, pp4096 (8 x 512), tg128. */
    float w_pp512[5] = {0}, w_pp4096[3] = {0};
    for (int r = 0; ok && !quick && r < 5; r++) {
        hr_kv_seq_clear(&seqs[0], pool);
        const double t0 = now_ms();
        ok = step1(e, &seqs[0], toks, 512, 1, &err);
        w_pp512[r] = (float)(now_ms() - t0);
    }
    for (int r = 0; ok && !quick && r < 3; r++) {
        hr_kv_seq_clear(&seqs[0], pool);
        const double t0 = now_ms();
        for (int c = 0; ok && c < 8; c++) {
            ok = step1(e, &seqs[0], toks, 512, c == 7, &err);
        }
        w_pp4096[r] = (float)(now_ms() - t0);
    }
    /* tg128 and tg128 at depth (llama-bench -d 16384): 128 tokens one at a
     * time after no context, then after DEPTH tokens of it (steps of 512,
     * not timed) */
    float w_tg[2][3] = {{0}};
    for (int d = 0; ok && d < (quick ? 1 : 2); d++)
        for (int r = 0; ok && r < 3; r++) {
            hr_kv_seq_clear(&seqs[0], pool);
            for (int c = 0; ok && c < (d ? DEPTH / 512 : 0); c++)
                ok = step1(e, &seqs[0], toks, 512, 0, &err);
            const double t0 = now_ms();
            for (int i = 0; ok && i < 128; i++)
                ok = step1(e, &seqs[0], &toks[i], 1, 1, &err);
            w_tg[d][r] = (float)(now_ms() - t0);
        }
    if (!ok) {
        fprintf(stderr, "bench-cuda: %s\n", err.msg);
        return 1;
    }
    const char *gm = getenv("HR_CUDA_GEMM"), *gv = getenv("HR_CUDA_GEMV");
    const char *ga = getenv("HR_CUDA_ATTN"), *gg = getenv("HR_CUDA_GRAPH");
    const char *gp = getenv("HR_CUDA_PDL");
    const float pp512 = median(w_pp512, 5), pp4096 = median(w_pp4096, 3);
    const float tg128 = median(w_tg[0], 3);
    printf("bench-cuda-llama shape=%s type=%s gemm=%s gemv=%s attn=%s graph=%s pdl=%s "
           "pp512_tok_s=%.0f pp4096_tok_s=%.0f tg128_tok_s=%.1f tg128_d16384_tok_s=%.1f "
           "rounds=5/3/3/3 attn_split=%s\n", shape, tname,
           gm ? gm : "tc", gv ? gv : "fast", ga ? ga : "tiled", gg ? gg : "1", gp ? gp : "1",
           rate(512, pp512), rate(4096, pp4096), rate(128, tg128), rate(128, median(w_tg[1], 3)),
           getenv("HR_CUDA_ATTN_SPLIT") ? getenv("HR_CUDA_ATTN_SPLIT") : "1");
    const float pre = median(t_pre, 5), dec = median(t_dec + 2, 30);
    const float b8 = median(t_b8, 8), b32 = median(t_b32, 8);
    const struct hr_cuda_mem *mem = hr_cuda_engine_mem(e);
    printf("bench-cuda shape=%s type=%s weights_mib=%.0f prefill512_ms=%.2f prefill_tok_s=%.0f "
           "decode_ms=%.3f decode_tok_s=%.1f decode_gbps=%.0f batch8_ms=%.3f batch8_tok_s=%.0f "
           "batch32_ms=%.3f batch32_tok_s=%.0f context_mib=%.0f library_mib=%.1f arena_mib=%.1f "
           "graph_mib=%.1f\n",
           shape, tname, (double)mem->weights_bytes / 1048576.0, pre, 512.0 / (pre / 1000.0), dec,
           1000.0 / dec, (double)wbytes / (dec / 1000.0) / 1e9, b8, rate(8, b8), b32, rate(32, b32), (double)mem->context_bytes / 1048576.0,
           (double)mem->library_bytes / 1048576.0, (double)mem->arena_bytes / 1048576.0,
           (double)mem->graph_bytes / 1048576.0);
    hr_cuda_engine_free(e);
    return 0;
}
