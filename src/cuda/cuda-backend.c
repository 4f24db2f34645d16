/*
 * cuda-backend.c - the CUDA engine behind engine/backend.h's vtable, and
 * the device-memory sizing under a ceiling.
 *
 * Sizing. The CUDA engine allocates weights and the step arena at init (ONE
 * allocation each) and reserves the KV pool's address space there, so the
 * static device ceiling (min(--vram-limit, the device's total)) is kept by
 * choosing those sizes:
 * hr_cuda_engine_init measures what the device holds once the context, the
 * kernels and the weights are there, and gives the KV pool and the arena
 * the rest (the pool cut first, then the step halved; see cuda-engine.h).
 * The scheduler learns the step size it got (hr_backend_info's
 * max_step_tokens) and chunks prefill to it: that is how the seed's
 * 32,768-token prompt runs under a limit a fixed 2048-token chunk would
 * cross. The device's use after init is checked against the ceiling here.
 *
 * The dynamic ceiling. The pool's memory is mapped as blocks are needed
 * (kv_lazy: hr_cuda_engine_kv_ensure, between steps) and only while the
 * device has room, so another process taking VRAM shrinks what the pool
 * can grow into; kv_give_back unmaps free groups while the device is short
 * (docs/memory.md, "The dynamic device ceiling").
 *
 * Threads: the CUDA runtime's current device is per thread and the
 * scheduler's engine thread is not the thread that ran init, so every entry
 * that touches the device first selects it (cudaSetDevice is cheap when it
 * is already current).
 */
#include "engine/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/log.h"
#include "cuda/cuda-engine.h"

struct cuda_backend {
    struct hr_cuda_engine *e;
    int ordinal;
};

static void select_device(const struct cuda_backend *c)
{
    (void)cudaSetDevice(c->ordinal);
}

static void cb_free(void *ctx)
{
    struct cuda_backend *c = ctx;
    if (!c) return;
    select_device(c);
    hr_cuda_engine_free(c->e);
    free(c);
}

static struct hr_kv_pool *cb_kv_pool(void *ctx)
{
    struct cuda_backend *c = ctx;
    return hr_cuda_engine_kv_pool(c->e);
}

/* A sequence is its blocks and, in hybrid models, its state slot. */
static void cb_seq_free(void *ctx, struct hr_kv_seq *seq)
{
    struct cuda_backend *c = ctx;
    hr_state_release(hr_cuda_engine_state_pool(c->e), seq);
    hr_kv_seq_free(seq, cb_kv_pool(ctx));
}

static struct hr_state_pool *cb_state_pool(void *ctx)
{
    struct cuda_backend *c = ctx;
    return hr_cuda_engine_state_pool(c->e);
}

static enum hr_status cb_state_copy(void *ctx, int32_t slot, void *host, bool to_host,
                                    struct hr_err *err)
{
    struct cuda_backend *c = ctx;
    select_device(c);
    return hr_cuda_engine_state_copy(c->e, slot, host, to_host, err);
}

static enum hr_status cb_seq_init(void *ctx, struct hr_kv_seq *seq, uint32_t max_tokens,
                                  struct hr_err *err)
{
    struct cuda_backend *c = ctx;
    return hr_cuda_engine_seq_init(c->e, seq, max_tokens, err);
}

static void cb_plan(const void *ctx, const struct hr_step *step, struct hr_backend_plan *out)
{
    const struct cuda_backend *c = ctx;
    struct hr_cuda_plan p;
    hr_cuda_engine_plan(c->e, step, &p);
    out->arena_bytes = p.arena_bytes;
    out->kv_bytes = p.kv_bytes;
    out->total_bytes = p.total_bytes;
}

static enum hr_status cb_step(void *ctx, struct hr_step *step, struct hr_err *err)
{
    struct cuda_backend *c = ctx;
    select_device(c);
    return hr_cuda_engine_step(c->e, step, err);
}

static const float *cb_logits(const void *ctx, uint32_t seq, uint32_t j)
{
    const struct cuda_backend *c = ctx;
    return hr_cuda_engine_logits(c->e, seq, j);
}

static uint64_t cb_high_water(const void *ctx)
{
    const struct cuda_backend *c = ctx;
    return hr_cuda_engine_arena_high_water(c->e);
}

static uint64_t cb_capacity(const void *ctx)
{
    const struct cuda_backend *c = ctx;
    return hr_cuda_engine_arena_capacity(c->e);
}

/* The device arena is one allocation made at init and kept: nothing of it
 * goes back to the host's memory, so the reclaim chain gets nothing here. */
static uint64_t cb_release(void *ctx)
{
    (void)ctx;
    return 0;
}

static void cb_mem(const void *ctx, struct hr_backend_mem *mem)
{
    const struct cuda_backend *c = ctx;
    const struct hr_cuda_mem *m = hr_cuda_engine_mem(c->e);
    mem->device_total = m->device_total;
    mem->context_bytes = m->context_bytes;
    mem->library_bytes = m->library_bytes;
    mem->weights_bytes = m->weights_bytes;
    mem->kv_bytes = m->kv_bytes;
    mem->arena_bytes = m->arena_bytes;
    mem->state_bytes = m->state_bytes;
    mem->host_pinned_bytes = m->host_pinned_bytes;
}

static bool cb_device_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes)
{
    struct cuda_backend *c = ctx;
    size_t fr = 0, tot = 0;
    select_device(c);
    if (hr_cuda_engine_lost(c->e) || cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        *free_bytes = *total_bytes = 0;
        return false;
    }
    *free_bytes = fr;
    *total_bytes = tot;
    return true;
}

static bool cb_lost(const void *ctx)
{
    const struct cuda_backend *c = ctx;
    return hr_cuda_engine_lost(c->e);
}

static enum hr_status cb_kv_copy(void *ctx, const int32_t *blocks, uint32_t n, void *host,
                                 bool to_host, struct hr_err *err)
{
    struct cuda_backend *c = ctx;
    select_device(c);
    return hr_cuda_engine_kv_copy(c->e, blocks, n, host, to_host, err);
}

static uint32_t cb_kv_ensure(void *ctx, uint32_t n_free)
{
    struct cuda_backend *c = ctx;
    select_device(c);
    return hr_cuda_engine_kv_ensure(c->e, n_free);
}

static uint64_t cb_kv_give_back(void *ctx)
{
    struct cuda_backend *c = ctx;
    select_device(c);
    return hr_cuda_engine_kv_give_back(c->e);
}

static bool cb_kv_short(void *ctx)
{
    struct cuda_backend *c = ctx;
    select_device(c);
    return hr_cuda_engine_kv_short(c->e);
}

static const struct hr_backend_ops cuda_ops = {
    .free = cb_free,
    .kv_pool = cb_kv_pool,
    .seq_init = cb_seq_init,
    .seq_free = cb_seq_free,
    .state_pool = cb_state_pool,
    .state_copy = cb_state_copy,
    .plan = cb_plan,
    .step = cb_step,
    .logits = cb_logits,
    .arena_high_water = cb_high_water,
    .arena_capacity = cb_capacity,
    .arena_release = cb_release,
    .mem = cb_mem,
    .device_mem_info = cb_device_mem_info,
    .lost = cb_lost,
    .kv_copy = cb_kv_copy,
    .kv_ensure = cb_kv_ensure,
    .kv_give_back = cb_kv_give_back,
    .kv_short = cb_kv_short,
};

int hr_cuda_backend_n_devices(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

static double mib(uint64_t b)
{
    return (double)b / 1048576.0;
}

enum hr_status hr_cuda_backend_init(const struct hr_model *model, int ordinal,
                                    const struct hr_backend_config *cfg, struct hr_backend *b,
                                    struct hr_err *err)
{
    const int n_dev = hr_cuda_backend_n_devices();
    if (ordinal < 0 || ordinal >= n_dev)
        return hr_err_set(err, HR_ERR_DEVICE, "--device cuda:%d: %d CUDA device%s present", ordinal,
                          n_dev, n_dev == 1 ? " is" : "s are");
    struct hr_cuda_config cc = {.device = ordinal,
                                .kv_type = cfg->kv_type,
                                .kv_budget_bytes = cfg->kv_budget_bytes,
                                .kv_block_tokens = cfg->kv_block_tokens,
                                .max_step_tokens = cfg->max_step_tokens,
                                .max_step_logits = cfg->max_step_logits,
                                .max_step_seqs = cfg->max_step_seqs,
                                .max_seq_tokens = cfg->max_seq_tokens,
                                /* Without --vram-limit the ceiling is the device's
                                 * total: a pool asked for more than the device
                                 * holds is cut to fit rather than failing init. */
                                .device_limit_bytes = cfg->device_limit_bytes
                                                          ? cfg->device_limit_bytes
                                                          : UINT64_MAX,
                                .kv_lazy = true,
                                .kv_full_window = cfg->kv_full_window};
    enum hr_status st;
    struct cuda_backend *c = calloc(1, sizeof(*c));
    if (!c) return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    c->ordinal = ordinal;
    st = hr_cuda_engine_init(model, &cc, &c->e, err);
    if (st != HR_OK) {
        free(c);
        return st;
    }
    /* The sizing's check: what the device holds now against the ceiling
     * (another process growing meanwhile would show here too). */
    const struct hr_cuda_mem *mem = hr_cuda_engine_mem(c->e);
    const uint64_t used = mem->device_total - mem->free_after_init;
    const uint64_t limit = cfg->device_limit_bytes && cfg->device_limit_bytes < mem->device_total
                               ? cfg->device_limit_bytes
                               : mem->device_total;
    if (used > limit) {
        cb_free(c);
        return hr_err_set(err, HR_ERR_LIMIT,
                          "cuda:%d: init reached %.1f MiB of device memory, "
                          "past the ceiling of %.1f MiB",
                          ordinal, mib(used), mib(limit));
    }
    cc = *hr_cuda_engine_config(c->e);

    b->ops = &cuda_ops;
    b->ctx = c;
    b->info.kind = HR_DEVICE_CUDA;
    b->info.ordinal = ordinal;
    snprintf(b->info.name, sizeof(b->info.name), "cuda:%d", ordinal);
    snprintf(b->info.description, sizeof(b->info.description), "%s",
             hr_cuda_engine_device_name(c->e));
    b->info.max_step_tokens = cc.max_step_tokens;
    b->info.kv_budget_bytes = mem->kv_reserved_bytes;
    hr_log_info("cuda",
                "cuda:%d: %s; device ceiling %.1f MiB: context %.1f, library %.1f, "
                "weights %.1f, recurrent state %.1f, KV pool up to %.1f (mapped as it is "
                "needed: %.1f now), arena %.1f (steps of %u tokens) MiB",
                ordinal, b->info.description, mib(limit), mib(mem->context_bytes),
                mib(mem->library_bytes), mib(mem->weights_bytes), mib(mem->state_bytes),
                mib(mem->kv_reserved_bytes), mib(mem->kv_bytes), mib(mem->arena_bytes),
                cc.max_step_tokens);
    return HR_OK;
}
