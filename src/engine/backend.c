/*
 * backend.c - the device choice and the CPU backend; see backend.h.
 *
 * The CPU backend is a thin adapter: every entry forwards to engine.c's
 * function of the same name, and the plan keeps only the bytes the
 * governor prices. The CUDA backend lives beside the CUDA engine
 * (cuda/cuda-backend.c) and is reached only when the build defines
 * HR_HAVE_CUDA, so a build without nvcc links nothing of CUDA.
 *
 * This file is its own library (hrbackend in CMakeLists.txt), above both
 * engines: the engine library stays free of CUDA and the CUDA library can
 * depend on the engine's KV books without a cycle.
 */
#include "engine/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/state-pool.h"
#include "kernels/matmul.h"

/* ---- the device's name ---------------------------------------------------- */

enum hr_status hr_device_parse(const char *text, struct hr_device *out, struct hr_err *err)
{
    memset(out, 0, sizeof(*out));
    if (!text || !strcmp(text, "auto")) {
        out->kind = HR_DEVICE_AUTO;
        return HR_OK;
    }
    if (!strcmp(text, "cpu")) {
        out->kind = HR_DEVICE_CPU;
        return HR_OK;
    }
    if (!strncmp(text, "cuda", 4) && (text[4] == '\0' || text[4] == ':')) {
        out->kind = HR_DEVICE_CUDA;
        if (text[4] == '\0') return HR_OK;
        const char *p = text + 5;
        int n = 0, digits = 0;
        for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++) n = n * 10 + (*p - '0');
        if (digits > 0 && *p == '\0' && n <= 255) {
            out->ordinal = n;
            return HR_OK;
        }
    }
    return hr_err_set(err, HR_ERR_INVALID,
                      "--device '%.40s': expected cpu, cuda, cuda:N (N a device number) or auto",
                      text);
}

bool hr_backend_has_cuda(void)
{
#ifdef HR_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

bool hr_device_tries_gpu(const struct hr_device *dev)
{
    if (dev->kind == HR_DEVICE_CUDA)
        return true;
    return dev->kind == HR_DEVICE_AUTO && hr_backend_has_cuda() && hr_cuda_backend_n_devices() > 0;
}

#ifndef HR_HAVE_CUDA
enum hr_status hr_cuda_backend_init(const struct hr_model *model, int ordinal,
                                    const struct hr_backend_config *cfg, struct hr_backend *b,
                                    struct hr_err *err)
{
    (void)model, (void)cfg, (void)b;
    return hr_err_set(err, HR_ERR_UNSUPPORTED,
                      "--device cuda:%d: this build has no CUDA engine (nvcc was not found "
                      "when it was configured)",
                      ordinal);
}

int hr_cuda_backend_n_devices(void)
{
    return 0;
}
#endif

/* ---- the CPU backend ------------------------------------------------------ */

static void cpu_free(void *ctx)
{
    hr_engine_free(ctx);
}
static struct hr_kv_pool *cpu_kv_pool(void *ctx)
{
    return hr_engine_kv_pool(ctx);
}

static enum hr_status cpu_seq_init(void *ctx, struct hr_kv_seq *seq, uint32_t max_tokens,
                                   struct hr_err *err)
{
    return hr_engine_seq_init(ctx, seq, max_tokens, err);
}

static void cpu_seq_free(void *ctx, struct hr_kv_seq *seq)
{
    hr_engine_seq_free(ctx, seq);
}

static struct hr_state_pool *cpu_state_pool(void *ctx)
{
    return hr_engine_state_pool(ctx);
}

static enum hr_status cpu_state_copy(void *ctx, int32_t slot, void *host, bool to_host,
                                     struct hr_err *err)
{
    (void)err;
    struct hr_state_pool *sp = hr_engine_state_pool(ctx);
    float *st = hr_state_slot(sp, slot);
    const uint64_t bytes = hr_state_slot_bytes(sp);
    if (to_host)
        memcpy(host, st, bytes);
    else
        memcpy(st, host, bytes);
    return HR_OK;
}

static void cpu_plan(const void *ctx, const struct hr_step *step, struct hr_backend_plan *out)
{
    struct hr_plan p;
    hr_engine_plan(ctx, step, &p);
    out->arena_bytes = p.arena_bytes;
    out->kv_bytes = p.kv_bytes;
    out->total_bytes = p.total_bytes;
}

static enum hr_status cpu_step(void *ctx, struct hr_step *step, struct hr_err *err)
{
    return hr_engine_step(ctx, step, err);
}

static const float *cpu_logits(const void *ctx, uint32_t seq, uint32_t j)
{
    return hr_engine_logits(ctx, seq, j);
}

static uint64_t cpu_high_water(const void *ctx)
{
    return hr_engine_arena_high_water(ctx);
}
static uint64_t cpu_capacity(const void *ctx)
{
    return hr_engine_arena_capacity(ctx);
}
static uint64_t cpu_release(void *ctx)
{
    return hr_engine_arena_release(ctx);
}

static void cpu_mem(const void *ctx, struct hr_backend_mem *mem)
{
    (void)ctx;
    memset(mem, 0, sizeof(*mem));
}

static bool cpu_device_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes)
{
    (void)ctx;
    *free_bytes = *total_bytes = 0;
    return false;
}

static bool cpu_lost(const void *ctx)
{
    (void)ctx;
    return false;
}

/* A CPU block is contiguous: its first layer's K starts it. */
static enum hr_status cpu_kv_copy(void *ctx, const int32_t *blocks, uint32_t n, void *host,
                                  bool to_host, struct hr_err *err)
{
    (void)err;
    struct hr_kv_pool *pool = hr_engine_kv_pool(ctx);
    const uint64_t bb = hr_kv_block_bytes(pool);
    uint8_t *h = host;
    for (uint32_t i = 0; i < n; i++, h += bb) {
        uint8_t *blk = hr_kv_block_k(pool, blocks[i], 0);
        if (to_host)
            memcpy(h, blk, bb);
        else
            memcpy(blk, h, bb);
    }
    return HR_OK;
}

static const struct hr_backend_ops cpu_ops = {
    .free = cpu_free,
    .kv_pool = cpu_kv_pool,
    .seq_init = cpu_seq_init,
    .seq_free = cpu_seq_free,
    .state_pool = cpu_state_pool,
    .state_copy = cpu_state_copy,
    .plan = cpu_plan,
    .step = cpu_step,
    .logits = cpu_logits,
    .arena_high_water = cpu_high_water,
    .arena_capacity = cpu_capacity,
    .arena_release = cpu_release,
    .mem = cpu_mem,
    .device_mem_info = cpu_device_mem_info,
    .lost = cpu_lost,
    .kv_copy = cpu_kv_copy,
};

enum hr_status hr_backend_wrap_cpu(struct hr_engine *e, struct hr_backend **out, struct hr_err *err)
{
    *out = NULL;
    struct hr_backend *b = calloc(1, sizeof(*b));
    if (!b) {
        hr_engine_free(e);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    b->ops = &cpu_ops;
    b->ctx = e;
    b->model = hr_engine_model(e);
    atomic_init(&b->lost, false);
    b->info.kind = HR_DEVICE_CPU;
    snprintf(b->info.name, sizeof(b->info.name), "cpu");
    b->info.n_threads = hr_engine_n_threads(e);
    snprintf(b->info.description, sizeof(b->info.description), "CPU, %s kernels, %d threads",
             hr_kernels_isa(), b->info.n_threads);
    b->info.kv_budget_bytes =
        (uint64_t)hr_kv_n_blocks(hr_engine_kv_pool(e)) * hr_kv_block_bytes(hr_engine_kv_pool(e));
    *out = b;
    return HR_OK;
}

static enum hr_status cpu_init(const struct hr_model *model, const struct hr_backend_config *cfg,
                               struct hr_backend **out, struct hr_err *err)
{
    const struct hr_engine_config ec = {.n_threads = cfg->n_threads,
                                        .kv_type = cfg->kv_type,
                                        .kv_budget_bytes = cfg->kv_budget_bytes,
                                        .kv_block_tokens = cfg->kv_block_tokens,
                                        .max_step_tokens = cfg->max_step_tokens,
                                        .max_step_logits = cfg->max_step_logits,
                                        .kv_full_window = cfg->kv_full_window};
    struct hr_engine *e = NULL;
    enum hr_status st = hr_engine_init(model, &ec, &e, err);
    if (st != HR_OK) return st;
    st = hr_backend_wrap_cpu(e, out, err);
    if (st == HR_OK) (*out)->info.max_step_tokens = cfg->max_step_tokens;
    return st;
}

/* ---- choosing ------------------------------------------------------------- */

/* The CPU backend on `model`. A model opened for a device gets the CPU's
 * layout first (auto's fallback when the GPU cannot take it): no engine has
 * read it yet, so this is still its opening; the const is the engines'
 * promise not to change it once they run. */
static enum hr_status cpu_take(const struct hr_model *model, const struct hr_backend_config *cfg,
                               struct hr_backend **out, struct hr_err *err)
{
    if (model->for_device) {
        hr_log_info("backend", "the model was opened for a GPU; packing it for the CPU");
        hr_model_open_for_cpu((struct hr_model *)model);
    }
    return cpu_init(model, cfg, out, err);
}

enum hr_status hr_backend_init(const struct hr_model *model, const struct hr_device *dev,
                               const struct hr_backend_config *cfg, struct hr_backend **out,
                               struct hr_err *err)
{
    *out = NULL;
    if (dev->kind == HR_DEVICE_CPU) return cpu_take(model, cfg, out, err);

    char why[256] = "";
    if (dev->kind == HR_DEVICE_AUTO && !hr_backend_has_cuda())
        return cpu_take(model, cfg, out, err);
    if (dev->kind == HR_DEVICE_AUTO && hr_cuda_backend_n_devices() == 0) {
        enum hr_status st = cpu_take(model, cfg, out, err);
        if (st == HR_OK)
            snprintf((*out)->info.fallback, sizeof((*out)->info.fallback),
                     "no CUDA device is present");
        return st;
    }
    struct hr_backend *b = calloc(1, sizeof(*b));
    if (!b) return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    b->model = model;
    atomic_init(&b->lost, false);
    struct hr_err cerr = {0};
    const int ordinal = dev->kind == HR_DEVICE_CUDA ? dev->ordinal : 0;
    enum hr_status st = hr_cuda_backend_init(model, ordinal, cfg, b, &cerr);
    if (st == HR_OK) {
        *out = b;
        return HR_OK;
    }
    free(b);
    if (dev->kind == HR_DEVICE_CUDA) {
        if (err) *err = cerr;
        return st;
    }
    /* auto: the GPU cannot take this model (its architecture, a weight or
     * KV type, or it does not fit); the CPU can, and the reason is kept. */
    snprintf(why, sizeof(why), "cuda:0: %.240s", cerr.msg);
    st = cpu_take(model, cfg, out, err);
    if (st == HR_OK) snprintf((*out)->info.fallback, sizeof((*out)->info.fallback), "%s", why);
    return st;
}

void hr_backend_free(struct hr_backend *b)
{
    if (!b) return;
    b->ops->free(b->ctx);
    free(b);
}

uint32_t hr_backend_step_new_blocks(struct hr_backend *b, const struct hr_step *step)
{
    struct hr_kv_pool *pool = hr_backend_kv_pool(b);
    uint32_t need = 0;
    for (uint32_t i = 0; i < step->n_seqs; i++)
        need += hr_kv_seq_new_blocks(step->seqs[i].kv, pool, step->seqs[i].n_tokens);
    return need;
}

uint32_t hr_backend_kv_room(struct hr_backend *b, uint32_t n_free)
{
    if (b->ops->kv_ensure)
        return b->ops->kv_ensure(b->ctx, n_free);
    return hr_kv_n_free(hr_backend_kv_pool(b));
}

bool hr_backend_kv_squeezed(struct hr_backend *b, uint32_t n)
{
    struct hr_kv_pool *pool = hr_backend_kv_pool(b);
    return b->ops->kv_ensure && hr_kv_n_used(pool) + (uint64_t)n <= hr_kv_n_blocks(pool) &&
           hr_backend_kv_room(b, n) < n;
}

uint64_t hr_backend_kv_give_back(struct hr_backend *b)
{
    return b->ops->kv_give_back ? b->ops->kv_give_back(b->ctx) : 0;
}

bool hr_backend_kv_short(struct hr_backend *b)
{
    return b->ops->kv_short && b->ops->kv_short(b->ctx);
}

enum hr_status hr_backend_step(struct hr_backend *b, struct hr_step *step, struct hr_err *err)
{
    if (b->ops->kv_ensure) {
        const uint32_t need = hr_backend_step_new_blocks(b, step);
        if (need)
            b->ops->kv_ensure(b->ctx, need);
    }
    enum hr_status st = b->ops->step(b->ctx, step, err);
    if (st == HR_ERR_DEVICE && b->ops->lost(b->ctx)) atomic_store(&b->lost, true);
    return st;
}

/* ---- parking ---------------------------------------------------------------- */

uint64_t hr_backend_kv_park_bytes(struct hr_backend *b, const struct hr_kv_seq *seq)
{
    return (uint64_t)seq->n_blocks * hr_kv_block_bytes(hr_backend_kv_pool(b));
}

enum hr_status hr_backend_kv_park(struct hr_backend *b, struct hr_kv_seq *seq, void *host,
                                  uint32_t *n_tokens, struct hr_err *err)
{
    *n_tokens = 0;
    /* A windowed pool's sliding-window blocks are not copied: such a
     * sequence recomputes instead (the scheduler does not park it). */
    if (hr_kv_window(hr_backend_kv_pool(b)))
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "parking a sequence with windowed KV blocks");
    enum hr_status st = b->ops->kv_copy(b->ctx, seq->blocks, seq->n_blocks, host, true, err);
    if (st != HR_OK) {
        if (st == HR_ERR_DEVICE && b->ops->lost(b->ctx)) atomic_store(&b->lost, true);
        return st;
    }
    *n_tokens = seq->n_tokens;
    hr_kv_seq_clear(seq, hr_backend_kv_pool(b));
    return HR_OK;
}

enum hr_status hr_backend_kv_unpark(struct hr_backend *b, struct hr_kv_seq *seq, uint32_t n_tokens,
                                    const void *host, struct hr_err *err)
{
    if (seq->n_blocks || seq->n_tokens)
        return hr_err_set(err, HR_ERR_INVALID,
                          "unpark needs an empty sequence (it holds %u "
                          "tokens in %u blocks)",
                          seq->n_tokens, seq->n_blocks);
    struct hr_kv_pool *pool = hr_backend_kv_pool(b);
    hr_backend_kv_room(b, hr_kv_seq_new_blocks(seq, pool, n_tokens));
    enum hr_status st = hr_kv_seq_reserve(seq, pool, n_tokens, err);
    if (st != HR_OK) return st;
    st = b->ops->kv_copy(b->ctx, seq->blocks, seq->n_blocks, (void *)host, false, err);
    if (st != HR_OK) {
        if (st == HR_ERR_DEVICE && b->ops->lost(b->ctx)) atomic_store(&b->lost, true);
        hr_kv_seq_clear(seq, pool);
        return st;
    }
    seq->n_tokens = n_tokens;
    return HR_OK;
}
