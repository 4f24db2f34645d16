/*
 * plan.h - the exact memory plan of one engine step.
 *
 * Everything the governor promises rests on this file: the bytes a step
 * will take are computed before it runs, by the same function the runner
 * uses to lay out its memory. hr_plan_layout returns both the offset of every
 * buffer in the step arena and the total, so "planned" and "used" cannot
 * drift apart. tests/unit/test-plan.c checks, on random ragged batches, that
 * the arena's high-water mark after a real step equals the plan byte for
 * byte and that no heap allocation happens inside the step.
 *
 * A step's memory = new KV blocks for its tokens + the arena:
 *
 *   arena (all f32 unless noted, each buffer 64-byte aligned, in this order)
 *   tokens   [T] i32          ids of the step's tokens
 *   pos      [T] i32          their positions
 *   seq_of   [T] i32          which sequence each token belongs to
 *   rope     [T][n_rot]       cos/sin pairs per token
 *   x        [T][n_embd]      the residual stream
 *   xn       [T][n_embd]      normed input of a block; also the output of Wo / Wdown
 *   act      bytes            matmul activations in the vec-dot format (the largest need)
 *   work     union of        { q [T][q_dim], k [T][kv_dim], v [T][kv_dim], attn [T][q_dim] }
 *                            { gate [T][n_ff], up [T][n_ff] }          (never live together)
 *   attn_scr [nth][...]      per-thread attention scratch: O(rows x (16 + head_dim)),
 *                            rows <= 64 query rows; never T x KV length
 *   out_x    [L][n_embd]     normed rows whose logits are wanted
 *   logits   [L][n_vocab]    only for the L rows asked for
 *
 * T = tokens in the step, L = rows of logits wanted, nth = threads.
 * Nothing depends on the KV length: attention streams the KV blocks.
 *
 * Pure functions; any thread may call them.
 */
#ifndef HR_ENGINE_PLAN_H
#define HR_ENGINE_PLAN_H

#include <stdint.h>

#include "gguf/ggml-types.h"

#define HR_ARENA_ALIGN 64

/* Model and engine facts the plan depends on (hr_engine fills it). */
struct hr_plan_dims {
    uint32_t n_embd, n_head, n_head_kv, head_dim, n_rot, n_ff, n_vocab;
    uint32_t n_threads;
    uint64_t attn_scratch_bytes;     /* per thread (engine/attention.h) */
    uint64_t kv_block_bytes;
    /* The weight types of the model's matrices, per input width, so the plan
     * can ask the kernels (hr_matmul_act_bytes) how much activation scratch a
     * matmul over T rows needs. At most 4 distinct types per width. */
    enum hr_ggml_type types_embd[4]; /* inputs of width n_embd: Wq, Wk, Wv, Wgate, Wup */
    enum hr_ggml_type type_out;      /* the output matrix (input width n_embd, L rows) */
    enum hr_ggml_type types_q[4];    /* Wo (input width q_dim) */
    enum hr_ggml_type types_ff[4];   /* Wdown (input width n_ff) */
    uint32_t n_types_embd, n_types_q, n_types_ff;
};

/* The shape of a candidate step: all a plan needs. */
struct hr_step_shape {
    uint32_t n_tokens;   /* T */
    uint32_t n_logits;   /* L */
    uint32_t new_blocks; /* KV blocks the step's tokens need beyond those already held */
};

struct hr_plan {
    uint64_t off_tokens, off_pos, off_seq_of, off_rope, off_x, off_xn, off_act, act_bytes;
    uint64_t off_q, off_k, off_v, off_attn, off_gate, off_up;
    uint64_t off_attn_scr, attn_scr_stride; /* per thread */
    uint64_t off_out_x, off_logits;
    uint64_t arena_bytes;   /* end of the last buffer, aligned */
    uint64_t kv_bytes;      /* new_blocks x block bytes */
    uint64_t total_bytes;   /* arena + kv: what the step adds to memory */
};

/* Fills `p` for `s`. Monotone: more tokens, logits or blocks never plan fewer bytes. */
void hr_plan_layout(const struct hr_plan_dims *d, const struct hr_step_shape *s, struct hr_plan *p);

#endif
