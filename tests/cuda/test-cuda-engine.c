/*
 * test-cuda-engine.c - the CUDA engine against the CPU engine, whole models.
 *
 *   usage: test-cuda-engine MODEL.gguf ...
 *
 * Per model (the same generated file on both engines, same KV cache type):
 *   - a 24-token prompt scored at every position, then 32 greedy tokens on
 *     the CPU; the GPU is fed the same tokens (teacher forcing) and every
 *     position's log-probabilities are compared:
 *       F32 weights:      top-10 (CPU's) log-probs within 1e-3
 *       F16, BF16:        within 1e-2 (BF16 with an f16 cache: 2.5e-2, the
 *                         CPU's own spread between the two cache types)
 *       quantized:        mean KL(CPU || GPU) below 1e-3
 *   - the GPU's own greedy run: F32 must pick the CPU's 32 tokens exactly;
 *     the others report how many match
 * On the first model, in addition:
 *   - ragged == alone (the first model and F16 ones): three sequences in
 *     one step equal each run alone, bit for bit on the GEMV path and on
 *     the GEMM path (cuBLASLt on tensor cores, one algorithm per shape);
 *     across the GEMV/GEMM threshold within the type's tolerance (1e-4 for
 *     F32, whose GEMM is the f32 kernel; mean KL < 1e-3 for the others,
 *     whose GEMM multiplies f16 tiles)
 *   - the plan: random ragged batches; the arena's high-water mark equals
 *     hr_cuda_plan.arena_bytes, nothing past it is written (poisoned bytes
 *     survive), no cudaMalloc and no change of free device memory in steps
 *   - errors: a bad step and an unsupported config return statuses
 */
#include <stdint.h>
#include <string.h>

#include "cuda-test.h"
#include "cuda/cuda-engine.h"
#include "engine/engine.h"
#include "kernels/matmul.h"
#include "model/model.h"

#define N_PROMPT 24
#define N_GEN 32

static uint64_t rng = 12345;

static uint32_t urand(uint32_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rng >> 33) % n);
}

static void log_softmax(const float *x, double *lp, uint32_t n)
{
    double mx = x[0], s = 0;
    for (uint32_t i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (uint32_t i = 0; i < n; i++)
        s += exp((double)x[i] - mx);
    const double ls = log(s) + mx;
    for (uint32_t i = 0; i < n; i++)
        lp[i] = (double)x[i] - ls;
}

static uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* Largest |lp_gpu - lp_cpu| over the CPU's 10 most likely tokens; KL(cpu||gpu). */
static void compare_row(const float *cpu, const float *gpu, uint32_t n, double *top10, double *kl)
{
    double *a = malloc(sizeof(double) * n), *b = malloc(sizeof(double) * n);
    log_softmax(cpu, a, n);
    log_softmax(gpu, b, n);
    double k = 0;
    for (uint32_t i = 0; i < n; i++)
        k += exp(a[i]) * (a[i] - b[i]);
    *kl = k;
    char *used = calloc(n, 1);
    double worst = 0;
    for (int r = 0; r < 10 && r < (int)n; r++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t i = 0; i < n; i++)
            if (!used[i] && (best == UINT32_MAX || a[i] > a[best]))
                best = i;
        used[best] = 1;
        double e = fabs(a[best] - b[best]);
        worst = e > worst ? e : worst;
    }
    *top10 = worst;
    free(a), free(b), free(used);
}

static struct hr_engine_config cpu_cfg(enum hr_ggml_type kv)
{
    return (struct hr_engine_config){.kv_type = kv, .kv_budget_bytes = 64u << 20,
                                     .max_step_tokens = 64, .max_step_logits = 64};
}

static struct hr_cuda_config gpu_cfg(enum hr_ggml_type kv)
{
    return (struct hr_cuda_config){.device = 0, .kv_type = kv, .kv_budget_bytes = 64u << 20,
                                   .max_step_tokens = 64, .max_step_logits = 64,
                                   .max_step_seqs = 8, .max_seq_tokens = 256};
}

/* The weight type of the model's matrices (the FFN gate of layer 0, or
 * its experts'). */
static enum hr_ggml_type model_type(const struct hr_model *m)
{
    const struct hr_layer *L = &m->layers[0];
    return L->ffn_kind == HR_FFN_MOE ? L->gate_exps.type : L->w_gate.type;
}

/* A row this far from the CPU's in a MoE model is a routing flip (see the
 * check in test_model); at most this many of a run's 55 rows. */
#define MOE_FLIP_KL 1e-2
#define MOE_MAX_FLIPS 2

/* A windowed pool after the teacher-forced run (55 positions, 16-token
 * blocks and window): windowed blocks went back to the pool. Then the same
 * 55 tokens again in chunks of 12: a chunk after the first starts where
 * the window's early blocks are gone (the tiled attention's 64-key tiles
 * reach below the window; those keys must not be read), and every row
 * must still agree with the CPU's (F32 top-10 within 1e-3, else mean KL
 * below 1e-3, MoE routing flips bounded as in test_model). */
static void test_window_chunks(struct hr_cuda_engine *ge, struct hr_kv_seq *gs,
                               const int32_t *prompt, const int32_t *gen, const float *cl,
                               enum hr_ggml_type wt, bool moe, const char *label)
{
    struct hr_err err = {{0}};
    const uint32_t V = hr_cuda_engine_plan_dims(ge)->n_vocab, rows = N_PROMPT + N_GEN - 1;
    const uint32_t held = hr_kv_seq_held_blocks(gs);
    CT_CHECK(gs->w_first > 0 && held < 2 * gs->n_blocks,
             "%s: windowed KV: %u of %u windowed blocks released after %u positions", label,
             gs->w_first, gs->n_wblocks, gs->n_tokens);
    int32_t all[N_PROMPT + N_GEN];
    memcpy(all, prompt, sizeof(int32_t) * N_PROMPT);
    memcpy(all + N_PROMPT, gen, sizeof(int32_t) * N_GEN);
    hr_kv_seq_clear(gs, hr_cuda_engine_kv_pool(ge));
    double top10 = 0, kl_sum = 0, kl_calm = 0;
    uint32_t n_flip = 0, r = 0;
    while (r < rows) {
        const uint32_t n = rows - r < 12 ? rows - r : 12;
        struct hr_step_seq it = {.kv = gs, .tokens = all + r, .n_tokens = n, .n_logits = n};
        struct hr_step st = {.seqs = &it, .n_seqs = 1};
        if (hr_cuda_engine_step(ge, &st, &err) != HR_OK) {
            CT_CHECK(0, "%s: chunked windowed step at %u: %s", label, r, err.msg);
            return;
        }
        for (uint32_t j = 0; j < n; j++, r++) {
            double t10, kl;
            compare_row(cl + (size_t)r * V, hr_cuda_engine_logits(ge, 0, j), V, &t10, &kl);
            top10 = t10 > top10 ? t10 : top10;
            kl_sum += kl;
            if (kl > MOE_FLIP_KL)
                n_flip++;
            else
                kl_calm += kl;
        }
    }
    printf("  data  %s: chunks of 12 over the window: top10 max %.2e, KL mean %.2e, %u rows "
           "past %.0e, %u windowed blocks held at the end of %u\n", label, top10, kl_sum / rows,
           n_flip, MOE_FLIP_KL, gs->n_wblocks - gs->w_first, gs->n_wblocks);
    if (wt == HR_GGML_F32)
        CT_CHECK(top10 <= 1e-3, "%s: chunked over released windowed blocks, top-10 within 1e-3 "
                 "(%.2e)", label, top10);
    else
        CT_CHECK(kl_calm / (rows - n_flip) < 1e-3 && n_flip <= (moe ? MOE_MAX_FLIPS : 0),
                 "%s: chunked over released windowed blocks, mean KL below 1e-3 (%.2e; %u "
                 "routing flips)", label, kl_calm / (rows - n_flip), n_flip);
}

static void test_model(const char *path, const struct hr_model *m, enum hr_ggml_type kv)
{
    struct hr_err err = {{0}};
    const uint32_t V = m->hp.n_vocab;
    const enum hr_ggml_type wt = model_type(m);
    char label[256];
    snprintf(label, sizeof(label), "%s [%s %s, kv %s]", strrchr(path, '/') ? strrchr(path, '/') + 1 : path,
             hr_arch_name(m->arch), hr_ggml_type_name(wt), hr_kv_type_name(kv));

    struct hr_engine_config cc = cpu_cfg(kv);
    struct hr_cuda_config gc = gpu_cfg(kv);
    /* A windowed pool (gpt-oss; kv-cache.h) with 16-token blocks: under
     * the 16-token window both engines release blocks within the run. */
    struct hr_kv_config kcfg;
    hr_engine_kv_config(m, kv, 0, false, &kcfg);
    const bool windowed = kcfg.window != 0;
    if (windowed)
        cc.kv_block_tokens = gc.kv_block_tokens = 16;
    struct hr_engine *ce = NULL;
    if (hr_engine_init(m, &cc, &ce, &err) != HR_OK) {
        CT_CHECK(0, "%s: CPU engine: %s", label, err.msg);
        return;
    }
    struct hr_cuda_engine *ge = NULL;
    if (hr_cuda_engine_init(m, &gc, &ge, &err) != HR_OK) {
        CT_CHECK(0, "%s: CUDA engine: %s", label, err.msg);
        hr_engine_free(ce);
        return;
    }
    int32_t prompt[N_PROMPT], gen[N_GEN];
    for (int i = 0; i < N_PROMPT; i++)
        prompt[i] = (int32_t)urand(V);
    const uint32_t rows = N_PROMPT + N_GEN - 1;
    float *cl = malloc(sizeof(float) * V * rows);

    /* CPU: score the prompt, then greedy. */
    struct hr_kv_seq cs = {0};
    hr_engine_seq_init(ce, &cs, 256, &err);
    struct hr_step_seq it = {.kv = &cs, .tokens = prompt, .n_tokens = N_PROMPT, .n_logits = N_PROMPT};
    struct hr_step st = {.seqs = &it, .n_seqs = 1};
    int ok = hr_engine_step(ce, &st, &err) == HR_OK;
    for (uint32_t j = 0; ok && j < N_PROMPT; j++)
        memcpy(cl + (size_t)j * V, hr_engine_logits(ce, 0, j), sizeof(float) * V);
    gen[0] = (int32_t)argmax(cl + (size_t)(N_PROMPT - 1) * V, V);
    for (int i = 0; ok && i < N_GEN - 1; i++) {
        it = (struct hr_step_seq){.kv = &cs, .tokens = &gen[i], .n_tokens = 1, .n_logits = 1};
        ok = hr_engine_step(ce, &st, &err) == HR_OK;
        const float *l = hr_engine_logits(ce, 0, 0);
        memcpy(cl + (size_t)(N_PROMPT + i) * V, l, sizeof(float) * V);
        gen[i + 1] = (int32_t)argmax(l, V);
    }
    if (!ok) {
        CT_CHECK(0, "%s: CPU step: %s", label, err.msg);
        goto done;
    }

    /* GPU, teacher-forced on the CPU's tokens. */
    struct hr_kv_seq gs = {0};
    hr_cuda_engine_seq_init(ge, &gs, 256, &err);
    double top10 = 0, top10_pre = 0, kl_sum = 0, kl_max = 0, prefill_ms = 0, decode_ms = 0;
    double kl_calm = 0;
    uint32_t n_flip = 0;
    it = (struct hr_step_seq){.kv = &gs, .tokens = prompt, .n_tokens = N_PROMPT, .n_logits = N_PROMPT};
    if (hr_cuda_engine_step(ge, &st, &err) != HR_OK) {
        CT_CHECK(0, "%s: CUDA step: %s", label, err.msg);
        goto done;
    }
    prefill_ms = hr_cuda_engine_last_step_ms(ge);
    for (uint32_t r = 0; r < rows; r++) {
        if (r >= N_PROMPT) {
            it = (struct hr_step_seq){.kv = &gs, .tokens = &gen[r - N_PROMPT], .n_tokens = 1,
                                      .n_logits = 1};
            if (hr_cuda_engine_step(ge, &st, &err) != HR_OK) {
                CT_CHECK(0, "%s: CUDA step: %s", label, err.msg);
                goto done;
            }
            decode_ms += hr_cuda_engine_last_step_ms(ge);
        }
        double t10, kl;
        compare_row(cl + (size_t)r * V, hr_cuda_engine_logits(ge, 0, r < N_PROMPT ? r : 0), V,
                    &t10, &kl);
        top10 = t10 > top10 ? t10 : top10;
        if (r < N_PROMPT)
            top10_pre = t10 > top10_pre ? t10 : top10_pre;
        kl_sum += kl;
        kl_max = kl > kl_max ? kl : kl_max;
        if (kl > MOE_FLIP_KL)
            n_flip++;
        else
            kl_calm += kl;
    }
    const double kl_mean = kl_sum / rows;
    const double kl_calm_mean = n_flip < rows ? kl_calm / (rows - n_flip) : 0.0;
    if (windowed)
        test_window_chunks(ge, &gs, prompt, gen, cl, wt, m->moe.n_expert != 0, label);

    /* GPU, its own greedy run. */
    hr_kv_seq_clear(&gs, hr_cuda_engine_kv_pool(ge));
    int32_t ggen[N_GEN];
    it = (struct hr_step_seq){.kv = &gs, .tokens = prompt, .n_tokens = N_PROMPT, .n_logits = 1};
    ok = hr_cuda_engine_step(ge, &st, &err) == HR_OK;
    ggen[0] = ok ? (int32_t)argmax(hr_cuda_engine_logits(ge, 0, 0), V) : -1;
    for (int i = 0; ok && i < N_GEN - 1; i++) {
        it = (struct hr_step_seq){.kv = &gs, .tokens = &ggen[i], .n_tokens = 1, .n_logits = 1};
        ok = hr_cuda_engine_step(ge, &st, &err) == HR_OK;
        ggen[i + 1] = ok ? (int32_t)argmax(hr_cuda_engine_logits(ge, 0, 0), V) : -1;
    }
    int same = 0;
    while (same < N_GEN && ggen[same] == gen[same])
        same++;

    const bool f32 = wt == HR_GGML_F32, half = wt == HR_GGML_F16 || wt == HR_GGML_BF16;
    printf("  data  %s: top10 max |dlogp| %.2e (prompt rows %.2e), KL mean %.2e max %.2e, "
           "greedy %d/%d same, prefill %d tok %.3f ms, decode %.3f ms/tok\n", label, top10,
           top10_pre, kl_mean, kl_max, same, N_GEN, N_PROMPT, prefill_ms, decode_ms / (N_GEN - 1));
    if (f32) {
        CT_CHECK(top10 <= 1e-3, "%s: top-10 log-probs within 1e-3 (%.2e)", label, top10);
        CT_CHECK(same == N_GEN, "%s: greedy %d tokens identical (%d)", label, N_GEN, same);
    } else if (half) {
        /* BF16 with an f16 cache: both engines round every activation to
         * bf16 (8 bits), so any perturbation flips roundings all along the
         * chain. The CPU alone, f32 cache against f16 cache on
         * qwen3-bf16.gguf, moves the top-10 by 1.63e-2; the tiled
         * attention's f16 Q and P move the GPU by 1.82e-2 (1e-2 fails).
         * The CPU's own spread is the tolerance there. */
        const double tol = wt == HR_GGML_BF16 && kv == HR_GGML_F16 ? 2.5e-2 : 1e-2;
        CT_CHECK(top10 <= tol, "%s: top-10 log-probs within %.1e (%.2e)", label, tol, top10);
    } else if (!m->moe.n_expert) {
        CT_CHECK(kl_mean < 1e-3, "%s: mean KL from the CPU below 1e-3 (%.2e)", label, kl_mean);
    } else {
        /* A MoE's top-k is a discrete choice: where two experts' router
         * probabilities nearly tie, the engines' different float orders
         * (the GPU's f16 tensor-core prefill above all) can pick different
         * experts for one token, and that row alone moves by KL ~0.1
         * (measured: one such row in some prompts, mean 1.2e-3 - 2.5e-3
         * then, 1.5e-4 otherwise). Such rows are counted and bounded; the
         * others are held to the type's 1e-3. */
        CT_CHECK(kl_calm_mean < 1e-3 && n_flip <= MOE_MAX_FLIPS,
                 "%s: mean KL from the CPU below 1e-3 (%.2e over %u rows; %u of %u rows past "
                 "%.0e, a routing near-tie decided differently, at most %d; mean of all %.2e)",
                 label, kl_calm_mean, rows - n_flip, n_flip, rows, MOE_FLIP_KL, MOE_MAX_FLIPS,
                 kl_mean);
    }
    hr_kv_seq_free(&gs, hr_cuda_engine_kv_pool(ge));
done:
    hr_kv_seq_free(&cs, hr_engine_kv_pool(ce));
    free(cl);
    hr_cuda_engine_free(ge);
    hr_engine_free(ce);
}

/* Runs `n` sequences' tokens in one step (all logits) on fresh sequences,
 * then one decode token each; copies every logit row out, in order. */
static int run_group(struct hr_cuda_engine *ge, uint32_t n, const uint32_t *lens,
                     int32_t toks[][32], float *out, struct hr_err *err)
{
    const uint32_t V = hr_cuda_engine_plan_dims(ge)->n_vocab;
    struct hr_kv_seq seqs[4];
    struct hr_step_seq its[4];
    memset(seqs, 0, sizeof(seqs));
    size_t row = 0;
    int ok = 1;
    for (uint32_t i = 0; i < n; i++) {
        hr_cuda_engine_seq_init(ge, &seqs[i], 128, err);
        its[i] = (struct hr_step_seq){.kv = &seqs[i], .tokens = toks[i], .n_tokens = lens[i],
                                      .n_logits = lens[i]};
    }
    struct hr_step st = {.seqs = its, .n_seqs = n};
    ok = hr_cuda_engine_step(ge, &st, err) == HR_OK;
    for (uint32_t i = 0; ok && i < n; i++)
        for (uint32_t j = 0; j < lens[i]; j++, row++)
            memcpy(out + row * V, hr_cuda_engine_logits(ge, i, j), sizeof(float) * V);
    for (uint32_t i = 0; ok && i < n; i++)
        its[i] = (struct hr_step_seq){.kv = &seqs[i], .tokens = &toks[i][lens[i]], .n_tokens = 1,
                                      .n_logits = 1};
    ok = ok && hr_cuda_engine_step(ge, &st, err) == HR_OK;
    for (uint32_t i = 0; ok && i < n; i++, row++)
        memcpy(out + row * V, hr_cuda_engine_logits(ge, i, 0), sizeof(float) * V);
    for (uint32_t i = 0; i < n; i++) {
        hr_state_release(hr_cuda_engine_state_pool(ge), &seqs[i]);
        hr_kv_seq_free(&seqs[i], hr_cuda_engine_kv_pool(ge));
    }
    return ok;
}

static void test_ragged(const struct hr_model *m, const char *label)
{
    struct hr_err err = {{0}};
    struct hr_cuda_config gc = gpu_cfg(HR_GGML_F16);
    struct hr_cuda_engine *ge = NULL;
    if (hr_cuda_engine_init(m, &gc, &ge, &err) != HR_OK) {
        CT_CHECK(0, "ragged: CUDA engine: %s", err.msg);
        return;
    }
    const uint32_t V = m->hp.n_vocab;
    int32_t toks[3][32];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 32; j++)
            toks[i][j] = (int32_t)urand(V);
    /* Every run on the GEMV path (4 + 3 + 1 = 8 rows), every run on the GEMM
     * path (20 + 12 + 9), and a group on the GEMM path whose members alone
     * are not all (20 + 9 + 3: the 3 run the GEMV alone). */
    const uint32_t sizes[3][3] = {{4, 3, 1}, {20, 12, 9}, {20, 9, 3}};
    for (int g = 0; g < 3; g++) {
        const uint32_t *lens = sizes[g];
        const uint32_t total = lens[0] + lens[1] + lens[2] + 3;
        float *all = malloc(sizeof(float) * V * total), *alone = malloc(sizeof(float) * V * total);
        int ok = run_group(ge, 3, lens, toks, all, &err);
        /* alone: each sequence by itself, rows re-ordered like the group's */
        size_t row = 0;
        for (uint32_t i = 0; ok && i < 3; i++) {
            float *tmp = malloc(sizeof(float) * V * (lens[i] + 1));
            ok = run_group(ge, 1, &lens[i], &toks[i], tmp, &err);
            memcpy(alone + row * V, tmp, sizeof(float) * V * lens[i]);
            memcpy(alone + (size_t)(lens[0] + lens[1] + lens[2] + i) * V, tmp + (size_t)lens[i] * V,
                   sizeof(float) * V);
            row += lens[i];
            free(tmp);
        }
        double worst = 0, kl_sum = 0, t10 = 0, t10_max = 0, kl = 0;
        for (size_t i = 0; ok && i < (size_t)V * total; i++) {
            double e = fabs(all[i] - alone[i]);
            worst = e > worst ? e : worst;
        }
        for (uint32_t r = 0; ok && r < total; r++) {
            compare_row(alone + (size_t)r * V, all + (size_t)r * V, V, &t10, &kl);
            kl_sum += kl;
            t10_max = t10 > t10_max ? t10 : t10_max;
        }
        if (!ok)
            CT_CHECK(0, "ragged: step failed: %s", err.msg);
        else if (g < 2)
            CT_CHECK(worst == 0.0, "%s: ragged == alone, %s path (%u+%u+%u tokens, then a "
                     "decode token each): bit-identical (max |diff| %.2e)", label,
                     g ? "GEMM" : "GEMV", lens[0], lens[1], lens[2], worst);
        else if (model_type(m) == HR_GGML_F32 && !m->moe.n_expert)
            CT_CHECK(worst <= 1e-4, "%s: ragged == alone across the GEMV/GEMM threshold "
                     "(%u+%u+%u tokens, then a decode token each): max |logit diff| %.2e <= "
                     "1e-4", label, lens[0], lens[1], lens[2], worst);
        else if (model_type(m) == HR_GGML_F32) /* each token's k experts and the router
                                                  add matmuls whose sums change order */
            CT_CHECK(t10_max <= 1e-3 && worst <= 1e-3, "%s: ragged == alone across the GEMV/GEMM "
                     "threshold (%u+%u+%u tokens, then a decode token each): max |logit diff| "
                     "%.2e, top-10 log-probs %.2e <= 1e-3 (F32's tolerance)", label, lens[0],
                     lens[1], lens[2], worst, t10_max);
        else /* the GEMM multiplies f16 tiles on tensor cores, the GEMV exact values */
            CT_CHECK(kl_sum / total < 1e-3, "%s: ragged == alone across the GEMV/GEMM "
                     "threshold (%u+%u+%u tokens, then a decode token each): mean KL %.2e < "
                     "1e-3, the type's tolerance (max |logit diff| %.2e)", label, lens[0],
                     lens[1], lens[2], kl_sum / total, worst);
        free(all), free(alone);
    }
    hr_cuda_engine_free(ge);
}

static void test_plan(const struct hr_model *m)
{
    struct hr_err err = {{0}};
    struct hr_cuda_config gc = gpu_cfg(HR_GGML_F16);
    struct hr_cuda_engine *ge = NULL;
    if (hr_cuda_engine_init(m, &gc, &ge, &err) != HR_OK) {
        CT_CHECK(0, "plan: CUDA engine: %s", err.msg);
        return;
    }
    const struct hr_cuda_mem *mem = hr_cuda_engine_mem(ge);
    printf("  data  device memory: context %.1f MiB, library %.1f MiB, "
           "weights %.2f MiB, state %.2f MiB, KV %.2f MiB, arena %.2f MiB (allocations took %.2f MiB), "
           "graph %.2f MiB, host pinned %.2f MiB; %s\n", mem->context_bytes / 1048576.0,
           mem->library_bytes / 1048576.0,
           mem->weights_bytes / 1048576.0, mem->state_bytes / 1048576.0, mem->kv_bytes / 1048576.0,
           mem->arena_bytes / 1048576.0, mem->alloc_delta_bytes / 1048576.0,
           mem->graph_bytes / 1048576.0, mem->host_pinned_bytes / 1048576.0, hr_cuda_engine_device_name(ge));
    const uint32_t V = m->hp.n_vocab;
    const uint64_t cap = hr_cuda_engine_arena_capacity(ge);
    uint8_t *host = malloc(cap);
    struct hr_kv_seq seqs[4];
    memset(seqs, 0, sizeof(seqs));
    for (int i = 0; i < 4; i++)
        hr_cuda_engine_seq_init(ge, &seqs[i], 256, &err);
    int32_t toks[4][24];
    size_t fr0 = 0, fr = 0, tot = 0;
    CT_CUDA(cudaMemGetInfo(&fr0, &tot));
    int plan_ok = 1, poison_ok = 1, steps = 0, free_ok = 1;
    uint64_t max_hw = 0;
    for (int s = 0; s < 40; s++) {
        struct hr_step_seq its[4];
        uint32_t n = 1 + urand(4);
        for (uint32_t i = 0; i < n; i++) {
            if (seqs[i].n_tokens > 200)
                hr_kv_seq_clear(&seqs[i], hr_cuda_engine_kv_pool(ge));
            uint32_t len = urand(3) == 0 ? 1 + urand(24) : 1 + urand(3);
            for (uint32_t j = 0; j < len; j++)
                toks[i][j] = (int32_t)urand(V);
            its[i] = (struct hr_step_seq){.kv = &seqs[i], .tokens = toks[i], .n_tokens = len,
                                          .n_logits = urand(len + 1)};
        }
        struct hr_step st = {.seqs = its, .n_seqs = n};
        struct hr_cuda_plan plan;
        hr_cuda_engine_plan(ge, &st, &plan);
        CT_CUDA(cudaMemset(hr_cuda_engine_arena_device(ge), 0xA5, cap));
        CT_CUDA(cudaDeviceSynchronize()); /* the engine's stream does not wait for the legacy one */
        if (hr_cuda_engine_step(ge, &st, &err) != HR_OK) {
            CT_CHECK(0, "plan: step %d: %s", s, err.msg);
            break;
        }
        steps++;
        uint64_t hw = hr_cuda_engine_arena_high_water(ge);
        max_hw = hw > max_hw ? hw : max_hw;
        if (hw != plan.arena_bytes) {
            plan_ok = 0;
            printf("        step %d: high water %llu, plan %llu\n", s, (unsigned long long)hw,
                   (unsigned long long)plan.arena_bytes);
        }
        CT_CUDA(cudaMemcpy(host, hr_cuda_engine_arena_device(ge), cap, cudaMemcpyDeviceToHost));
        for (uint64_t b = plan.arena_bytes; b < cap; b++)
            if (host[b] != 0xA5) {
                poison_ok = 0;
                printf("        step %d: byte %llu past the plan (%llu) was written\n", s,
                       (unsigned long long)b, (unsigned long long)plan.arena_bytes);
                break;
            }
        CT_CUDA(cudaMemGetInfo(&fr, &tot));
        if (fr != fr0)
            free_ok = 0;
    }
    CT_CHECK(steps == 40 && plan_ok, "plan: %d random ragged steps, arena high-water mark == "
             "plan byte for byte (largest %llu of %llu)", steps, (unsigned long long)max_hw,
             (unsigned long long)cap);
    CT_CHECK(poison_ok, "plan: no step wrote past its planned arena bytes (poison intact)");
    CT_CHECK(hr_cuda_engine_n_device_allocs(ge) == 0, "plan: no cudaMalloc during steps (%llu)",
             (unsigned long long)hr_cuda_engine_n_device_allocs(ge));
    CT_CHECK(free_ok, "plan: free device memory unchanged across steps (%zu then %zu)", fr0, fr);

    /* Errors: statuses, never a crash. */
    int32_t bad = (int32_t)V + 5;
    struct hr_step_seq bi = {.kv = &seqs[0], .tokens = &bad, .n_tokens = 1, .n_logits = 1};
    struct hr_step bs = {.seqs = &bi, .n_seqs = 1};
    enum hr_status rs = hr_cuda_engine_step(ge, &bs, &err);
    CT_CHECK(rs == HR_ERR_INVALID, "errors: a token outside the vocabulary is refused (%s: %s)",
             hr_status_str(rs), err.msg);
    struct hr_state_pool *sp = hr_cuda_engine_state_pool(ge);
    if (sp) {
        /* A hybrid model's sequence cannot continue without its state, and
         * a step needing more slots than are free is refused whole. */
        int32_t tok = 1;
        uint32_t at = 0;
        while (at < 4 && seqs[at].n_tokens == 0)
            at++;
        if (at < 4) {
            hr_state_release(sp, &seqs[at]);
            bi = (struct hr_step_seq){.kv = &seqs[at], .tokens = &tok, .n_tokens = 1, .n_logits = 1};
            rs = hr_cuda_engine_step(ge, &bs, &err);
            CT_CHECK(rs == HR_ERR_INVALID, "errors: a hybrid sequence continuing without its "
                     "recurrent state is refused (%s: %s)", hr_status_str(rs), err.msg);
        }
        const uint32_t n_slots = hr_state_n_slots(sp);
        struct hr_kv_seq *many = calloc(n_slots + 1, sizeof(*many));
        struct hr_step_seq *mi = calloc(n_slots + 1, sizeof(*mi));
        for (uint32_t i = 0; i <= n_slots; i++) {
            hr_cuda_engine_seq_init(ge, &many[i], 32, &err);
            mi[i] = (struct hr_step_seq){.kv = &many[i], .tokens = &tok, .n_tokens = 1, .n_logits = 1};
        }
        int dummy; /* holds a slot, so the step below fits max_step_seqs (= the slots) */
        hr_state_acquire(sp, &dummy);
        const uint32_t used = hr_state_n_used(sp), kv_free = hr_kv_n_free(hr_cuda_engine_kv_pool(ge));
        struct hr_step ms = {.seqs = mi, .n_seqs = n_slots - used + 1};
        rs = hr_cuda_engine_step(ge, &ms, &err);
        CT_CHECK(rs == HR_ERR_NOMEM && hr_state_n_used(sp) == used &&
                     hr_kv_n_free(hr_cuda_engine_kv_pool(ge)) == kv_free,
                 "errors: a step needing %u state slots with %u free is refused, nothing "
                 "taken (%s: %s)", n_slots - used + 1, n_slots - used, hr_status_str(rs), err.msg);
        hr_state_release(sp, &dummy);
        for (uint32_t i = 0; i <= n_slots; i++)
            hr_kv_seq_free(&many[i], hr_cuda_engine_kv_pool(ge));
        free(many), free(mi);
    }
    for (int i = 0; i < 4; i++)
        hr_kv_seq_free(&seqs[i], hr_cuda_engine_kv_pool(ge));
    free(host);
    hr_cuda_engine_free(ge);

    struct hr_cuda_config q = gpu_cfg(HR_GGML_Q8_0);
    rs = hr_cuda_engine_init(m, &q, &ge, &err);
    CT_CHECK(rs == HR_ERR_UNSUPPORTED && !ge, "errors: a q8_0 KV cache is refused at init (%s: %s)",
             hr_status_str(rs), err.msg);
    q = gpu_cfg(HR_GGML_F16);
    q.device = 99;
    rs = hr_cuda_engine_init(m, &q, &ge, &err);
    CT_CHECK(rs == HR_ERR_DEVICE && !ge, "errors: a missing device is refused (%s: %s)",
             hr_status_str(rs), err.msg);
}

int main(int argc, char **argv)
{
    ct_require_device("test-cuda-engine");
    if (argc < 2) {
        fprintf(stderr, "usage: test-cuda-engine MODEL.gguf ...\n");
        return 2;
    }
    double t0 = ct_now();
    for (int i = 1; i < argc; i++) {
        struct hr_model *m = NULL;
        struct hr_err err = {{0}};
        if (hr_model_open(argv[i], &m, &err) != HR_OK) {
            CT_CHECK(0, "%s: %s", argv[i], err.msg);
            continue;
        }
        test_model(argv[i], m, HR_GGML_F32);
        /* an f16 cache: F32 models, and the first model, F16 ones and
         * gpt-oss (their prompts run the tiled tensor-core attention; gpt-oss
         * with its window and sinks) */
        if (model_type(m) == HR_GGML_F32 || i == 1 || model_type(m) == HR_GGML_F16 ||
            m->arch == HR_ARCH_GPTOSS || m->dn.n_layers)
            test_model(argv[i], m, HR_GGML_F16);
        const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
        /* MoE models too: their grouping must not let a token's company in
         * the step change its result, and their buffers are planned */
        /* and hybrid models: their state slots are per sequence, their
         * buffers planned */
        if (i == 1 || model_type(m) == HR_GGML_F16 || m->moe.n_expert || m->dn.n_layers)
            test_ragged(m, base);
        if (i == 1 || m->moe.n_expert || m->dn.n_layers)
            test_plan(m);
        hr_model_close(m);
    }
    printf("test-cuda-engine: %.1f s\n", ct_now() - t0);
    return ct_finish("test-cuda-engine");
}
