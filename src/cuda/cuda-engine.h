/*
 * cuda-engine.h - the forward pass of llama-family models on an NVIDIA GPU,
 * with every byte of device memory planned.
 *
 * The API mirrors engine/engine.h so that one backend vtable can put both
 * engines under the scheduler (next step of issue 17): the same struct
 * hr_step (ragged batches of sequences, logits only for the rows asked
 * for), the same paged block tables (struct hr_kv_seq, blocks taken from an
 * hr_kv_pool that here only keeps the books: the bytes live on the device),
 * a plan function that prices a step before it runs and lays out its arena.
 *
 *   struct hr_cuda_engine *e;  hr_cuda_engine_init(model, &cfg, &e, &err);
 *   struct hr_kv_seq s;        hr_cuda_engine_seq_init(e, &s, max_tokens, &err);
 *   struct hr_step_seq item = {.kv = &s, .tokens = ids, .n_tokens = n, .n_logits = 1};
 *   struct hr_step step = {.seqs = &item, .n_seqs = 1};
 *   struct hr_cuda_plan plan;  hr_cuda_engine_plan(e, &step, &plan);  // exact device bytes
 *   hr_cuda_engine_step(e, &step, &err);
 *   const float *logits = hr_cuda_engine_logits(e, 0, 0);          // host copy, n_vocab
 *
 * Device memory, every byte in a category (hr_cuda_engine_mem):
 *   context   what the device holds once our CUDA context exists (cudaMemGetInfo)
 *   library   the stream, events, our kernels' code and cuBLASLt's handle and
 *             chosen kernels (loaded at init; no workspace), measured
 *   graph     the decode steps' CUDA graph, instantiated at init, measured
 *   weights   ONE allocation: every tensor as stored in the GGUF (quantized stays
 *             quantized), 256-byte aligned, uploaded once at init
 *   kv        the pool's n_blocks x block bytes (f16 or f32): ONE allocation,
 *             or (kv_lazy) reserved address space mapped in groups of
 *             blocks between steps, as the device has room

 *   state     hybrid models (Gated DeltaNet layers): ONE allocation of
 *             max_step_seqs recurrent state slots (engine/state-pool.h keeps
 *             the books: which sequence holds which slot), made before the
 *             sizing under a ceiling, so the KV pool and arena take the rest
 *   arena     ONE allocation: the plan of the largest step the config allows;
 *             a step uses the first hr_cuda_plan.arena_bytes of it
 * All of it is allocated in hr_cuda_engine_init, but for a lazy pool's
 * groups, mapped by hr_cuda_engine_kv_ensure between steps; a step
 * allocates nothing on the device or the host (hr_cuda_engine_n_device_allocs counts our
 * cudaMalloc calls; the tests also watch cudaMemGetInfo across steps).
 * Host: pinned staging for the step's metadata and the logits (one copy in,
 * one copy out per step).
 *
 * Errors: never abort. Init failures return a status naming what failed
 * (no device, a tensor type or head size the kernels lack, out of device
 * memory with the bytes asked). A CUDA error inside a step returns
 * HR_ERR_DEVICE with the call and CUDA's message; the step's sequences must
 * then be freed (their KV is undefined). Errors that destroy the context
 * (illegal address, launch failure, ...) mark the engine lost: every later
 * step fails at once with HR_ERR_DEVICE ("the CUDA context is lost").
 *
 * Supported now: llama, qwen2, qwen3 (dense), qwen2moe, qwen3moe, llama with
 * experts (Mixtral), gpt-oss (sliding window, sinks, biases, YaRN), the
 * hybrid qwen35, qwen35moe and qwen3next (Gated DeltaNet layers with their
 * state in device slots, gated attention); every
 * weight type the CPU engine runs (F32 to IQ4_XS); KV cache f16 or f32;
 * head_dim a multiple of 32 up to 256. Prefill GEMMs on tensor cores
 * (cuBLASLt, f16/bf16), prefill attention tiled on tensor cores (f16 KV,
 * head_dim 64/128), decode steps of dense models as a CUDA graph. Not yet:
 * quantized KV, windowed KV tables (a windowed layer keeps every
 * position), split-KV decode attention.
 * A hybrid model's sequence holds a state slot from its first step (at
 * position 0, zeroed) until hr_state_release on hr_cuda_engine_state_pool;
 * the scheduler's prefix-cache snapshots go through
 * hr_cuda_engine_state_copy.
 *
 * Batch invariance: a token's logits do not depend on the other tokens of
 * its step bit for bit as long as the step stays on one side of the GEMV /
 * GEMM threshold (HR_CUDA_GEMV_MAX_ROWS rows); across it they differ by the
 * GEMM's f16 rounding (F32 weights: summation order only, within 1e-4).
 *
 * Threads: one thread calls everything here (it owns the CUDA stream).
 */
#ifndef HR_CUDA_CUDA_ENGINE_H
#define HR_CUDA_CUDA_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "cuda/cuda-plan.h"
#include "engine/engine.h"
#include "engine/kv-cache.h"
#include "engine/state-pool.h"
#include "model/model.h"

struct hr_cuda_config {
    int device;                /* CUDA device ordinal */
    enum hr_ggml_type kv_type; /* HR_GGML_F16 or HR_GGML_F32 */
    uint64_t kv_budget_bytes;  /* device KV pool */
    uint32_t kv_block_tokens;  /* 0: 32 */
    uint32_t max_step_tokens;  /* 0: 512 */
    uint32_t max_step_logits;  /* 0: max_step_tokens */
    uint32_t max_step_seqs;    /* 0: 64 */
    uint32_t max_seq_tokens;   /* longest sequence (sizes the staged block tables); 0: 4096 */
    /* The device-memory ceiling (0: none). After the context, the library
     * and the weights are on the device, what the device then holds is
     * measured (cudaMemGetInfo, every process's bytes) and the KV pool and
     * the arena take the rest: kv_budget_bytes is cut to what the largest
     * step leaves, and when that would not hold one max_seq_tokens
     * sequence, max_step_tokens is halved (down to 64) first. Init fails
     * with HR_ERR_LIMIT naming the bytes when nothing fits. The sizes
     * chosen are in hr_cuda_engine_config(). */
    uint64_t device_limit_bytes;
    /* The KV pool on CUDA virtual memory: kv_budget_bytes of address space
     * reserved at init, physical memory mapped a group of blocks at a time
     * as hr_cuda_engine_kv_ensure asks (between steps) and given back by
     * hr_cuda_engine_kv_give_back when another process leaves the device
     * short. false: ONE allocation of the whole pool at init. */
    bool kv_lazy;
    /* Sliding-window layers keep full-context KV (hr_engine_config's
     * kv_full_window; comparisons only). */
    bool kv_full_window;
};

/* The device's free memory a lazy KV pool leaves to others: it maps a
 * group only while this much stays free after it, and gives trailing free
 * groups back while less is free. */
#define HR_CUDA_KV_LOW_WATER (64ull << 20)

/* The fewest blocks a lazy pool maps at once (a group; more where one
 * granule holds more blocks): mapping is a few driver calls and a sync
 * between steps, so a group per block would cost a large model's serving
 * a mapping every block_tokens tokens of every stream. */
#define HR_CUDA_KV_GROUP_BLOCKS 16u

/* The driver rounds each allocation up to this (2 MiB pages). */
#define HR_CUDA_ALLOC_GRANULE (2ull << 20)

/* Device bytes by category (see the header comment), measured at init. */
struct hr_cuda_mem {
    uint64_t device_total;     /* cudaMemGetInfo total */
    uint64_t context_bytes;    /* in use once the context exists, before anything of ours */
    uint64_t library_bytes;    /* stream, events, kernel code (measured delta) */
    uint64_t state_bytes;      /* the recurrent state slots (hybrid models; else 0) */
    uint64_t weights_bytes, kv_bytes, arena_bytes; /* our three allocations (requested);
                                                    * kv_bytes: mapped now (kv_lazy) */
    uint64_t kv_reserved_bytes; /* the pool's capacity (n_blocks x block bytes) */
    uint64_t alloc_delta_bytes;    /* what the three allocations took from free memory */
    uint64_t graph_bytes;      /* what instantiating the decode graph took (measured) */
    uint64_t free_after_init;  /* cudaMemGetInfo free at the end of init */
    uint64_t host_pinned_bytes;    /* staging + logits, in host RAM */
};

struct hr_cuda_engine;

/* Fills the zero fields of cfg with the defaults named above. */
void hr_cuda_config_defaults(struct hr_cuda_config *cfg);
/* The plan's dimensions for `m` under cfg (defaults applied), and the plan
 * of the largest step cfg allows: what init allocates as the arena. Pure:
 * the backend sizes the arena and the pool under a device limit with them
 * before anything is allocated. */
void hr_cuda_engine_dims(const struct hr_model *m, const struct hr_cuda_config *cfg,
                         struct hr_cuda_plan_dims *d);
void hr_cuda_engine_max_plan(const struct hr_cuda_plan_dims *d, const struct hr_cuda_config *cfg,
                             struct hr_cuda_plan *p);

enum hr_status hr_cuda_engine_init(const struct hr_model *model, const struct hr_cuda_config *cfg,
                                   struct hr_cuda_engine **out, struct hr_err *err);
void hr_cuda_engine_free(struct hr_cuda_engine *e);

/* The device's name and compute capability ("NVIDIA H200, sm_90, 132 SMs"). */
const char *hr_cuda_engine_device_name(const struct hr_cuda_engine *e);
const struct hr_cuda_mem *hr_cuda_engine_mem(const struct hr_cuda_engine *e);
struct hr_kv_pool *hr_cuda_engine_kv_pool(struct hr_cuda_engine *e);
const struct hr_cuda_plan_dims *hr_cuda_engine_plan_dims(const struct hr_cuda_engine *e);

/* Hybrid models: the state slots' books (NULL otherwise), and a slot's
 * bytes copied to or from host memory (between steps; waits). */
struct hr_state_pool *hr_cuda_engine_state_pool(struct hr_cuda_engine *e);
enum hr_status hr_cuda_engine_state_copy(struct hr_cuda_engine *e, int32_t slot, void *host,
                                         bool to_host, struct hr_err *err);

enum hr_status hr_cuda_engine_seq_init(struct hr_cuda_engine *e, struct hr_kv_seq *seq,
                                       uint32_t max_tokens, struct hr_err *err);

void hr_cuda_engine_step_shape(const struct hr_cuda_engine *e, const struct hr_step *step,
                               struct hr_cuda_step_shape *shape);
void hr_cuda_engine_plan(const struct hr_cuda_engine *e, const struct hr_step *step,
                         struct hr_cuda_plan *plan);

/*
 * Runs the step. Before anything runs: HR_ERR_INVALID for a malformed step,
 * HR_ERR_LIMIT past the configured maxima or a table, HR_ERR_NOMEM when the
 * KV pool lacks blocks (nothing changed). On the device: HR_ERR_DEVICE.
 */
enum hr_status hr_cuda_engine_step(struct hr_cuda_engine *e, struct hr_step *step,
                                   struct hr_err *err);

/* After a step: sequence seq's j-th logit row in host memory (n_vocab
 * floats), valid until the next step. */
const float *hr_cuda_engine_logits(const struct hr_cuda_engine *e, uint32_t seq, uint32_t j);

/* Highest arena byte the last step's buffers reached, and the capacity. */
uint64_t hr_cuda_engine_arena_high_water(const struct hr_cuda_engine *e);
uint64_t hr_cuda_engine_arena_capacity(const struct hr_cuda_engine *e);
/* The arena's device address (for tests that poison and inspect it). */
void *hr_cuda_engine_arena_device(struct hr_cuda_engine *e);
/* cudaMalloc calls the engine made since init ended (0 is the promise). */
uint64_t hr_cuda_engine_n_device_allocs(const struct hr_cuda_engine *e);

/* Milliseconds the last step took on the device (CUDA events around it). */
float hr_cuda_engine_last_step_ms(const struct hr_cuda_engine *e);

/* Copies KV blocks blocks[0..n) between the device pool and `host` (n x
 * block bytes, in that order; pinned memory is faster, pageable works):
 * to_host true = device to host. Between steps; waits for the copies.
 * HR_ERR_DEVICE on a CUDA error (a sticky one marks the engine lost). */
enum hr_status hr_cuda_engine_kv_copy(struct hr_cuda_engine *e, const int32_t *blocks, uint32_t n,
                                      void *host, bool to_host, struct hr_err *err);

/* A lazy pool (cfg.kv_lazy): maps groups of blocks until the pool has
 * n_free free blocks, the pool is all mapped, or the device lacks room
 * (HR_CUDA_KV_LOW_WATER must stay free after each group). Returns the free
 * blocks now. Between steps. Without kv_lazy: hr_kv_n_free. */
uint32_t hr_cuda_engine_kv_ensure(struct hr_cuda_engine *e, uint32_t n_free);
/* A lazy pool, when the device's free memory is under
 * HR_CUDA_KV_LOW_WATER (another process grew): unmaps trailing groups whose
 * blocks are all free until it is not. Returns the bytes given back.
 * Between steps. */
uint64_t hr_cuda_engine_kv_give_back(struct hr_cuda_engine *e);
/* Whether a lazy pool holds mapped memory while the device has less than
 * HR_CUDA_KV_LOW_WATER free (false otherwise, or without kv_lazy). */
bool hr_cuda_engine_kv_short(struct hr_cuda_engine *e);

/* Whether a sticky CUDA error destroyed the context (every step now fails). */
bool hr_cuda_engine_lost(const struct hr_cuda_engine *e);
/* The configuration init ran with (defaults applied). */
const struct hr_cuda_config *hr_cuda_engine_config(const struct hr_cuda_engine *e);

#endif
