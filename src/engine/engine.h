/*
 * engine.h - the CPU engine: one ragged batch of tokens in, next-token
 * logits out, with every byte of the step planned before it runs.
 *
 * A step takes tokens from several sequences at once, each with its own
 * positions and its own paged KV (struct hr_kv_seq). Tokens of one sequence
 * are consecutive in the step and continue where its KV ends. Logits are
 * computed only for the rows asked for: the last `n_logits` tokens of each
 * sequence (0 for a prefill chunk that is not the last, 1 for decoding,
 * n_tokens to score every position).
 *
 *   struct hr_engine *e;  hr_engine_init(model, &cfg, &e, &err);
 *   struct hr_kv_seq s;   hr_engine_seq_init(e, &s, max_tokens, &err);
 *   struct hr_step_seq item = {.kv = &s, .tokens = ids, .n_tokens = n, .n_logits = 1};
 *   struct hr_step step = {.seqs = &item, .n_seqs = 1};
 *   struct hr_plan plan;  hr_engine_plan(e, &step, &plan);      // exact bytes, before running
 *   hr_engine_step(e, &step, &err);                             // runs it
 *   const float *logits = hr_engine_logits(e, 0, 0);            // n_vocab floats
 *
 * Windowed KV. A model with both sliding-window and full-attention layers
 * (gpt-oss) gets a KV pool with a window (kv-cache.h, "Windowed KV"): each
 * kind of layer numbered from 0 in its own table, and after every step each
 * sequence's windowed blocks that no later query can reach go back to the
 * pool (hr_kv_seq_slide), so its KV is ceil(n / B) full blocks plus at most
 * ceil(window / B) + 1 windowed ones while decoding. A model whose layers
 * are all of one kind keeps one table, as before.
 *
 * Memory. The engine owns the KV pool (budget from the config) and one step
 * arena reserved for the largest step the config allows; a step uses the
 * first plan.arena_bytes of it, laid out by hr_plan_layout (plan.h). Nothing
 * is allocated during a step: KV blocks come from the pool, scratch from the
 * arena. The arena's high-water mark is kept for the plan test and metrics.
 *
 * Threads: one engine thread calls everything here; the engine's own worker
 * pool (n_threads - 1 workers) runs inside hr_engine_step.
 */
#ifndef HR_ENGINE_ENGINE_H
#define HR_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/kv-cache.h"
#include "engine/plan.h"
#include "model/model.h"

struct hr_engine_config {
    int n_threads;              /* 0: physical cores */
    enum hr_ggml_type kv_type;  /* cache type: HR_GGML_F16, F32 (= 0), Q8_0 or Q4_0 (kv-cache.h) */
    uint64_t kv_budget_bytes;   /* KV pool size */
    uint32_t kv_block_tokens;   /* 0: 32 */
    uint32_t max_step_tokens;   /* largest T a step may have (the arena is sized for it) */
    uint32_t max_step_logits;   /* largest L */
    uint32_t n_state_slots;     /* hybrid models: sequences that may hold recurrent state at
                                   once (0: max_step_logits); allocated at init */
    /* Sliding-window layers (gpt-oss) keep every position's K/V in the full
     * table instead of windowed blocks (kv-cache.h): the same logits, about
     * twice the KV. For comparisons (headroom run --no-kv-window). */
    bool kv_full_window;
};

struct hr_step_seq {
    struct hr_kv_seq *kv;  /* the step writes positions kv->n_tokens .. + n_tokens - 1 */
    const int32_t *tokens; /* n_tokens ids */
    uint32_t n_tokens;     /* >= 1 */
    uint32_t n_logits;     /* logits for the last n_logits tokens (0..n_tokens) */
};

struct hr_step {
    struct hr_step_seq *seqs;
    uint32_t n_seqs;
};

struct hr_engine;
struct hr_state_pool;

/* A hybrid model's step against its state slots (both engines' rule): a
 * sequence at position 0 needs a slot (its own, or a free one), one further
 * on the slot its earlier steps advanced. HR_ERR_INVALID for a sequence
 * continuing without its slot, HR_ERR_NOMEM when too few slots are free;
 * nothing changes. */
enum hr_status hr_step_state_check(const struct hr_state_pool *p, const struct hr_step *step,
                                   struct hr_err *err);

/* RoPE's constants for a model, as llama.cpp derives them (YaRN included:
 * ext_factor, attn_factor and the ramp's corr_dims, see engine.c); one
 * function for both engines, so the CPU and GPU tables cannot differ. */
struct hr_rope {
    float theta_scale;     /* powf(rope_base, -2 / n_rot) */
    float freq_scale;      /* 1 / linear or YaRN factor */
    float ext_factor;      /* YaRN: extrapolation mix (0: plain RoPE) */
    float attn_factor;     /* YaRN: magnitude scale of cos/sin (before the mscale) */
    float corr_dims[2];    /* YaRN: the ramp's start and end dimension pairs */
};
void hr_rope_init(const struct hr_model *m, struct hr_rope *r);

/* The KV pool's shape for `model` (layers per block, heads, head dim, type,
 * block tokens, window; budget 0), as hr_engine_init makes it: with both
 * sliding-window and full layers and !full_window, a windowed pool whose
 * blocks hold the larger kind's layers. For budgets sized before an engine
 * exists (hr_kv_config_blocks_for x hr_kv_block_bytes_for). */
void hr_engine_kv_config(const struct hr_model *model, enum hr_ggml_type kv_type,
                         uint32_t block_tokens, bool full_window, struct hr_kv_config *out);

/* Each layer's place in a KV block of its kind (slot[n_layer]; 0 for
 * layers without KV): the attention layers numbered in order, or, in a
 * windowed pool, the sliding-window and full layers each from 0. */
void hr_engine_kv_slots(const struct hr_model *model, bool windowed, uint32_t *slot);

enum hr_status hr_engine_init(const struct hr_model *model, const struct hr_engine_config *cfg,
                              struct hr_engine **out, struct hr_err *err);
void hr_engine_free(struct hr_engine *e);

const struct hr_model *hr_engine_model(const struct hr_engine *e);
struct hr_kv_pool *hr_engine_kv_pool(struct hr_engine *e);
const struct hr_plan_dims *hr_engine_plan_dims(const struct hr_engine *e);
int hr_engine_n_threads(const struct hr_engine *e);

/* A block table able to hold max_tokens positions of this engine's KV. */
enum hr_status hr_engine_seq_init(struct hr_engine *e, struct hr_kv_seq *seq, uint32_t max_tokens,
                                  struct hr_err *err);

/* Frees the sequence's KV table and blocks and gives back its recurrent
 * state slot (hybrid models). Use this, not hr_kv_seq_free, for sequences
 * that ran on a hybrid model, or the slot stays bound. */
void hr_engine_seq_free(struct hr_engine *e, struct hr_kv_seq *seq);

/* The recurrent state pool (engine/state-pool.h; empty for a model without
 * recurrent layers) and its bytes: the `state` memory category. */
struct hr_state_pool *hr_engine_state_pool(struct hr_engine *e);
uint64_t hr_engine_state_bytes(const struct hr_engine *e);

/* The shape of a step (tokens, logits, new KV blocks) and its exact plan. */
void hr_engine_step_shape(const struct hr_engine *e, const struct hr_step *step,
                          struct hr_step_shape *shape);
void hr_engine_plan(const struct hr_engine *e, const struct hr_step *step, struct hr_plan *plan);

/*
 * Runs the step: reserves the KV blocks, lays out the arena, computes.
 * Errors (before anything runs): HR_ERR_INVALID for a malformed step,
 * HR_ERR_LIMIT when it exceeds the configured maxima or a sequence's table,
 * HR_ERR_NOMEM when the KV pool lacks blocks or (hybrid models) a sequence
 * starting at position 0 finds no free state slot. HR_ERR_INVALID also when
 * a hybrid model's sequence continues past position 0 without the state its
 * earlier steps left (e.g. KV taken from a prefix cache: the state at the
 * end of those tokens is not there). On error no KV or state is changed.
 *
 * Recurrent state (hybrid models): a sequence's slot is bound by its first
 * step at position 0 and zeroed there (also when the same sequence starts
 * over at 0, as a preempted request recomputing does); each step advances
 * it; hr_engine_seq_free gives it back.
 */
enum hr_status hr_engine_step(struct hr_engine *e, struct hr_step *step, struct hr_err *err);

/* After a step: logits of sequence `seq`'s j-th logit row (0 .. n_logits-1),
 * n_vocab floats, valid until the next step. */
const float *hr_engine_logits(const struct hr_engine *e, uint32_t seq, uint32_t j);

/* Highest arena byte the last step used, and the arena's reserved capacity. */
uint64_t hr_engine_arena_high_water(const struct hr_engine *e);
uint64_t hr_engine_arena_capacity(const struct hr_engine *e);
void *hr_engine_arena_base(struct hr_engine *e);

/* Returns the arena's pages to the OS (between steps only: the engine
 * thread, no step running); the next step touches what it needs again.
 * Returns the bytes of address range released (an upper bound on resident
 * bytes freed); 0 on failure. The reclaim chain's first stage. */
uint64_t hr_engine_arena_release(struct hr_engine *e);

#endif
