/*
 * backend.h - the engine behind one interface: a vtable plus a context, as
 * ggml's backends are, so that the scheduler, the governor, the prefix
 * cache, the sampler and the server above it do not know which device runs
 * a step. The CPU engine (engine/engine.h) is one backend; the CUDA engine
 * (cuda/cuda-engine.h) another, present when the build found nvcc.
 *
 *   struct hr_device dev;        hr_device_parse("cuda:0", &dev, &err);
 *   struct hr_backend *b;        hr_backend_init(model, &dev, &cfg, &b, &err);
 *   struct hr_kv_seq s;          hr_backend_seq_init(b, &s, max_tokens, &err);
 *   struct hr_backend_plan plan; hr_backend_plan(b, &step, &plan);  // before running
 *   hr_backend_step(b, &step, &err);
 *   const float *logits = hr_backend_logits(b, 0, 0);             // host memory
 *   hr_backend_seq_free(b, &s);
 *   hr_backend_free(b);
 *
 * A step is the engines' struct hr_step: a ragged batch over paged KV whose
 * block tables come from the backend's hr_kv_pool. On the CPU the pool holds
 * the bytes; on a GPU it keeps the books and the bytes live on the device.
 * Either way the scheduler frees blocks with hr_kv_seq_free on that pool.
 *
 * The plan is each engine's own layout function (engine/plan.h,
 * cuda/cuda-plan.h) reduced to what the governor prices: the arena's end
 * and the new KV blocks' bytes. It is the same function that lays out the
 * step's arena, so "planned" and "used" cannot drift on either device.
 *
 * Device choice: "cpu", "cuda" (device 0), "cuda:N", or "auto" (default):
 * CUDA device 0 when the build has the CUDA engine, a device is present and
 * the engine supports the model (architecture, weight types, KV type);
 * else the CPU, and the reason is kept in hr_backend_info.fallback so the
 * start-up line can say why. An explicit "cuda" never falls back: its
 * failure is returned.
 *
 * Errors: a step's failure is returned as the engine's status. HR_ERR_DEVICE
 * from a GPU backend fails that step's requests; hr_backend_lost() then says
 * whether the device context is gone (every later step will fail too), which
 * is what /health reports.
 *
 * Threads: one thread (the scheduler's engine thread) calls everything but
 * hr_backend_info, hr_backend_lost and hr_backend_device_mem_info, which
 * any thread may call (the info is fixed at init; "lost" is an atomic flag;
 * cudaMemGetInfo is thread-safe and the backend selects its device on the
 * calling thread).
 */
#ifndef HR_ENGINE_BACKEND_H
#define HR_ENGINE_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/kv-cache.h"
#include "model/model.h"

enum hr_device_kind {
    HR_DEVICE_AUTO = 0, /* CUDA when it can run the model, else the CPU */
    HR_DEVICE_CPU,
    HR_DEVICE_CUDA,
};

struct hr_device {
    enum hr_device_kind kind;
    int ordinal; /* CUDA device number (HR_DEVICE_CUDA) */
};

/* Parses "auto", "cpu", "cuda" or "cuda:N" (N a device number, 0..255).
 * HR_ERR_INVALID names the text on anything else. */
enum hr_status hr_device_parse(const char *text, struct hr_device *out, struct hr_err *err);

/* Whether this build contains the CUDA engine. */
bool hr_backend_has_cuda(void);

/* Whether hr_backend_init on `dev` tries a GPU first (cuda, cuda:N; auto
 * with the CUDA engine built and a device present): the model is then
 * best opened for the device (hr_model_open_opts.device), whose weights
 * the host does not keep. */
bool hr_device_tries_gpu(const struct hr_device *dev);

/* What a backend is sizing for; both engines take the same numbers. */
struct hr_backend_config {
    int n_threads;             /* CPU workers; 0: physical cores (CPU backend) */
    enum hr_ggml_type kv_type; /* HR_GGML_F16, F32, Q8_0 or Q4_0 (the CPU); F16 or F32 (CUDA) */
    uint64_t kv_budget_bytes;  /* the KV pool */
    uint32_t kv_block_tokens;  /* 0: 32 */
    uint32_t max_step_tokens;  /* largest T a step may have (sizes the arena) */
    uint32_t max_step_logits;  /* largest L */
    uint32_t max_step_seqs;    /* largest S; 0: 64 (CUDA; the CPU ignores it) */
    uint32_t max_seq_tokens;   /* longest sequence (a GPU stages its block tables); 0: 4096 */
    /* The device-memory ceiling (GPU backends): 0 = the device's total.
     * The KV pool and the arena are sized at init so that the context,
     * the weights, the pool and the arena stay below it: the pool is cut
     * first, then the arena's step size, and init fails naming the bytes
     * when even the weights do not fit. */
    uint64_t device_limit_bytes;
    /* Sliding-window layers keep all their KV (engine.h, kv_full_window). */
    bool kv_full_window;
};

/* Device memory by category (all zero on the CPU, whose bytes the host
 * governor accounts). */
struct hr_backend_mem {
    uint64_t device_total;  /* the device's memory */
    uint64_t context_bytes; /* in use when our context existed, before anything of ours */
    uint64_t library_bytes; /* stream, events, kernel code */
    uint64_t weights_bytes, kv_bytes, arena_bytes;
    uint64_t state_bytes;       /* the recurrent state slots (hybrid models) */
    uint64_t host_pinned_bytes; /* pinned host staging (host RAM) */
};

struct hr_backend_info {
    enum hr_device_kind kind; /* HR_DEVICE_CPU or HR_DEVICE_CUDA: what runs */
    int ordinal;
    char name[16];            /* "cpu", "cuda:0": the --device spelling */
    char description[320];    /* "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB" or the CPU's ISA */
    char fallback[256];       /* why "auto" chose the CPU; "" otherwise */
    int n_threads;            /* the CPU engine's workers (CPU backend) */
    uint32_t max_step_tokens; /* what init sized the arena for (the limit may cut it) */
    uint64_t kv_budget_bytes; /* the pool init made */
};

/* The plan's part the governor prices; see engine/plan.h for the layout. */
struct hr_backend_plan {
    uint64_t arena_bytes; /* end of the step's last arena buffer */
    uint64_t kv_bytes;    /* the step's new KV blocks */
    uint64_t total_bytes; /* arena + kv */
};

/* The vtable: one per engine. `ctx` is the engine. Backends implement every
 * entry (arena_release may return 0 where the arena is device memory). */
struct hr_backend_ops {
    void (*free)(void *ctx);
    struct hr_kv_pool *(*kv_pool)(void *ctx);
    enum hr_status (*seq_init)(void *ctx, struct hr_kv_seq *seq, uint32_t max_tokens,
                               struct hr_err *err);
    /* Frees the sequence's blocks and any recurrent state slot it holds. */
    void (*seq_free)(void *ctx, struct hr_kv_seq *seq);
    /* The recurrent state slots (hybrid models), or NULL where the backend
     * keeps none (engine/state-pool.h reads NULL as an empty pool). */
    struct hr_state_pool *(*state_pool)(void *ctx);
    /* Copies state slot `slot` (hr_state_slot_bytes) into `host`, or back
     * from it (to_host false). Between steps only. */
    enum hr_status (*state_copy)(void *ctx, int32_t slot, void *host, bool to_host,
                                 struct hr_err *err);
    void (*plan)(const void *ctx, const struct hr_step *step, struct hr_backend_plan *plan);
    enum hr_status (*step)(void *ctx, struct hr_step *step, struct hr_err *err);
    const float *(*logits)(const void *ctx, uint32_t seq, uint32_t j);
    uint64_t (*arena_high_water)(const void *ctx);
    uint64_t (*arena_capacity)(const void *ctx);
    uint64_t (*arena_release)(void *ctx);
    void (*mem)(const void *ctx, struct hr_backend_mem *mem);
    /* The device's free and total bytes now (cudaMemGetInfo); false when
     * the backend has no device memory or the query failed. */
    bool (*device_mem_info)(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes);
    bool (*lost)(const void *ctx);
    /* Copies blocks[0..n) of the pool (block_bytes each, in that order)
     * into `host`, or back from it (to_host false). Between steps only. */
    enum hr_status (*kv_copy)(void *ctx, const int32_t *blocks, uint32_t n, void *host,
                              bool to_host, struct hr_err *err);
    /* A pool whose device bytes are mapped as needed (the CUDA engine's):
     * grows toward n_free free blocks while the device has room; returns
     * the free blocks now. NULL: the pool is whole (the CPU's). */
    uint32_t (*kv_ensure)(void *ctx, uint32_t n_free);
    /* Gives free pool bytes back while the device is short (another
     * process grew); returns the bytes. NULL: nothing to give. */
    uint64_t (*kv_give_back)(void *ctx);
    /* Whether the device is short now (another process left less than the
     * pool's low-water mark free). NULL: never. */
    bool (*kv_short)(void *ctx);
};

struct hr_backend {
    const struct hr_backend_ops *ops;
    void *ctx;
    const struct hr_model *model;
    struct hr_backend_info info;
    atomic_bool lost; /* set by hr_backend_step when the device context is gone */
};

/*
 * Makes the backend `dev` names for `model` (not owned; outlives it). On
 * failure *out is NULL and err says which device and why (no device, an
 * architecture or type the engine lacks, out of device memory with the
 * bytes). Free with hr_backend_free.
 */
enum hr_status hr_backend_init(const struct hr_model *model, const struct hr_device *dev,
                               const struct hr_backend_config *cfg, struct hr_backend **out,
                               struct hr_err *err);
void hr_backend_free(struct hr_backend *b); /* accepts NULL */

/* Wraps an engine already made (the CPU backend over hr_engine_init's
 * result; tests). Takes ownership of `e` even on failure. */
enum hr_status hr_backend_wrap_cpu(struct hr_engine *e, struct hr_backend **out,
                                   struct hr_err *err);

static inline const struct hr_model *hr_backend_model(const struct hr_backend *b)
{
    return b->model;
}
static inline const struct hr_backend_info *hr_backend_info(const struct hr_backend *b)
{
    return &b->info;
}
/* The weights' bytes in host memory (the governor's `weights` account):
 * none once a GPU holds a model opened for it (each tensor's file pages
 * went as it was uploaded), else the model's weight_bytes. */
static inline uint64_t hr_backend_host_weight_bytes(const struct hr_backend *b)
{
    return b->info.kind == HR_DEVICE_CUDA && b->model->for_device ? 0 : b->model->weight_bytes;
}
static inline struct hr_kv_pool *hr_backend_kv_pool(struct hr_backend *b)
{
    return b->ops->kv_pool(b->ctx);
}
static inline enum hr_status hr_backend_seq_init(struct hr_backend *b, struct hr_kv_seq *seq,
                                                 uint32_t max_tokens, struct hr_err *err)
{
    return b->ops->seq_init(b->ctx, seq, max_tokens, err);
}
/* Frees a sequence made by hr_backend_seq_init: its KV blocks and any
 * recurrent state slot (use this, not hr_kv_seq_free, for hybrid models). */
static inline void hr_backend_seq_free(struct hr_backend *b, struct hr_kv_seq *seq)
{
    b->ops->seq_free(b->ctx, seq);
}
/* The recurrent state pool (the `state` memory category), or NULL. */
static inline struct hr_state_pool *hr_backend_state_pool(struct hr_backend *b)
{
    return b->ops->state_pool(b->ctx);
}
/* A state slot's bytes to or from host memory (prefix-cache snapshots):
 * the CPU's slots are host memory, a GPU's are copied. */
static inline enum hr_status hr_backend_state_copy(struct hr_backend *b, int32_t slot, void *host,
                                                   bool to_host, struct hr_err *err)
{
    return b->ops->state_copy(b->ctx, slot, host, to_host, err);
}
static inline void hr_backend_plan(const struct hr_backend *b, const struct hr_step *step,
                                   struct hr_backend_plan *plan)
{
    b->ops->plan(b->ctx, step, plan);
}
/* Runs the step (engine.h's contract), after growing a lazily mapped pool
 * to the blocks the step needs (hr_backend_kv_room). HR_ERR_NOMEM: the
 * pool cannot hold it (hr_backend_kv_squeezed tells whether the device,
 * not the pool's capacity, is short). HR_ERR_DEVICE: the step's sequences
 * must be freed; if hr_backend_lost() is now true, every later step fails. */
enum hr_status hr_backend_step(struct hr_backend *b, struct hr_step *step, struct hr_err *err);
static inline const float *hr_backend_logits(const struct hr_backend *b, uint32_t seq, uint32_t j)
{
    return b->ops->logits(b->ctx, seq, j);
}
static inline uint64_t hr_backend_arena_high_water(const struct hr_backend *b)
{
    return b->ops->arena_high_water(b->ctx);
}
static inline uint64_t hr_backend_arena_capacity(const struct hr_backend *b)
{
    return b->ops->arena_capacity(b->ctx);
}
static inline uint64_t hr_backend_arena_release(struct hr_backend *b)
{
    return b->ops->arena_release(b->ctx);
}
static inline void hr_backend_mem(const struct hr_backend *b, struct hr_backend_mem *mem)
{
    b->ops->mem(b->ctx, mem);
}
static inline bool hr_backend_device_mem_info(struct hr_backend *b, uint64_t *free_bytes,
                                              uint64_t *total_bytes)
{
    return b->ops->device_mem_info(b->ctx, free_bytes, total_bytes);
}
/*
 * The KV pool's room (engine thread, between steps). On a GPU the pool's
 * capacity is reserved at init under the static ceiling, but its memory is
 * mapped as blocks are needed and only while the device has room: another
 * process taking VRAM shrinks what the pool can grow to (the dynamic
 * ceiling), and the scheduler throttles, parks or waits instead of failing.
 *
 * hr_backend_kv_room: free blocks after trying to grow to n_free of them.
 * hr_backend_kv_squeezed: whether n more blocks would fit the pool's
 * capacity but not the device now (the dynamic ceiling, not the static).
 * hr_backend_kv_give_back: returns free pool bytes to a device that ran
 * short (trailing groups whose blocks are all free); 0 on the CPU.
 */
uint32_t hr_backend_kv_room(struct hr_backend *b, uint32_t n_free);
/* KV blocks `step` needs beyond what its sequences hold (both kinds). */
uint32_t hr_backend_step_new_blocks(struct hr_backend *b, const struct hr_step *step);
bool hr_backend_kv_squeezed(struct hr_backend *b, uint32_t n);
uint64_t hr_backend_kv_give_back(struct hr_backend *b);
/* Whether the device is short of memory now (false on the CPU). */
bool hr_backend_kv_short(struct hr_backend *b);

/* Any thread. */
static inline bool hr_backend_lost(struct hr_backend *b)
{
    return atomic_load(&b->lost);
}

/*
 * Parking: a sequence's KV copied out of the pool into host memory, so its
 * blocks can serve others, and back later instead of recomputing it (the
 * scheduler's preemption on a GPU: its pool is device memory, host RAM is
 * larger). Between steps only, on the engine thread.
 *
 * hr_backend_kv_park_bytes: the host bytes `seq` needs (blocks x block bytes).
 * hr_backend_kv_park: copies seq's blocks into `host` (that many bytes, the
 * caller's: pinned memory makes a GPU's copy faster), then releases the
 * blocks (hr_kv_seq_clear); seq keeps nothing but the table's capacity.
 * Returns the token count parked in *n_tokens. HR_ERR_UNSUPPORTED (nothing
 * changed) on a pool with windowed blocks (kv-cache.h): those recompute.
 * hr_backend_kv_unpark: seq empty; takes blocks for n_tokens positions
 * from the pool (HR_ERR_NOMEM and nothing taken when it cannot) and copies
 * `host` into them; afterwards seq continues exactly where it was parked.
 */
uint64_t hr_backend_kv_park_bytes(struct hr_backend *b, const struct hr_kv_seq *seq);
enum hr_status hr_backend_kv_park(struct hr_backend *b, struct hr_kv_seq *seq, void *host,
                                  uint32_t *n_tokens, struct hr_err *err);
enum hr_status hr_backend_kv_unpark(struct hr_backend *b, struct hr_kv_seq *seq, uint32_t n_tokens,
                                    const void *host, struct hr_err *err);

/* The CUDA backend's constructor (cuda/cuda-backend.c; only in builds with
 * the CUDA engine). Fills b->ops, ctx and info. */
enum hr_status hr_cuda_backend_init(const struct hr_model *model, int ordinal,
                                    const struct hr_backend_config *cfg, struct hr_backend *b,
                                    struct hr_err *err);
/* CUDA devices present (0 without the CUDA engine or a driver). */
int hr_cuda_backend_n_devices(void);

#endif
