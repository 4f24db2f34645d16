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
 *                            { gate [T][n_ff], up [T][n_ff], the MoE buffers } (never live
 *                              together)
 *   MoE (only for a model with experts; TK = T x k, k = experts per token):
 *     moe_logits [T][n_expert]   router logits
 *     moe_sel    [T][k] i32      each token's experts, in top-k order
 *     moe_w      [T][k]          their weights
 *     moe_shg    [T]             the shared expert's sigmoid gate
 *     moe_off    [n_expert] u32  end of each expert's group of rows
 *     moe_row    [TK] i32        the grouped row of (token, slot)
 *     moe_tok    [TK] i32        the token of each grouped row
 *     moe_x      [TK][n_embd]    gathered inputs, grouped by expert; later the
 *                                experts' outputs
 *     moe_gu     [TK][2 n_ff_exp] gate | up of each row
 *     moe_h      [TK][n_ff_exp]  silu(gate) * up
 *     moe_act    bytes           per-expert activations: TK x the one-row size,
 *                                an upper bound for any split of TK rows into
 *                                groups, since act_bytes(m) <= m x act_bytes(1)
 *   All MoE sizes depend on T x k, never on which experts win, so the plan
 *   is exact however the router decides.
 *   Gated attention (qwen35: attn_gated), in the attention part of the union:
 *     qg       [T][2 q_dim]    Wq's output: per head its query, then its gate
 *     qgate    [T][q_dim]      the gates, split out
 *   Gated DeltaNet (hybrid models), a third member of the union:
 *     dn_qkv   [T][conv_dim]   the q | k | v projection, the conv's input
 *     dn_z     [T][value_dim]  the output gate
 *     dn_beta  [T][n_v_heads]  sigmoid(beta), per v head
 *     dn_g     [T][n_v_heads]  the log decay, per v head
 *     dn_conv  [T][conv_dim]   conv + SiLU (q and k then L2-normalised in place)
 *     dn_o     [T][value_dim]  the recurrence's output, then normed and gated
 *   The recurrent state itself is not in the arena: it persists across steps
 *   in the engine's state slots (engine/state-pool.h).
 *   attn_scr [nth][...]      per-thread attention scratch: O(rows x (32 + head_dim)),
 *                            rows <= 128 query rows; never T x KV length
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

#include <stdbool.h>
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
    /* Mixture of experts (n_expert = 0: none). n_ff above is then the dense
     * or shared-expert width of the gate/up buffers, 0 when there is none. */
    uint32_t n_expert, n_expert_used, n_ff_exp;
    enum hr_ggml_type types_exp_in[4]; /* expert gate/up (input width n_embd) */
    enum hr_ggml_type types_exp_ff[4]; /* expert down (input width n_ff_exp) */
    uint32_t n_types_exp_in, n_types_exp_ff;
    bool exp_up_own_act;               /* some layer's up experts differ in type from its gate */
    /* Hybrid models: gated attention and the Gated DeltaNet's widths
     * (dn_conv_dim = 0: no recurrent layers). */
    bool attn_gated;
    uint32_t dn_conv_dim, dn_value_dim, dn_n_v_heads;
    enum hr_ggml_type types_dn_out[4]; /* ssm_out (input width dn_value_dim) */
    uint32_t n_types_dn_out;
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
    uint64_t off_moe_logits, off_moe_sel, off_moe_w, off_moe_shg, off_moe_off, off_moe_row;
    uint64_t off_moe_tok, off_moe_x, off_moe_gu, off_moe_h, off_moe_act, moe_act_bytes;
    uint64_t off_qg, off_qgate;
    uint64_t off_dn_qkv, off_dn_z, off_dn_beta, off_dn_g, off_dn_conv, off_dn_o;
    uint64_t off_out_x, off_logits;
    uint64_t arena_bytes;   /* end of the last buffer, aligned */
    uint64_t kv_bytes;      /* new_blocks x block bytes */
    uint64_t total_bytes;   /* arena + kv: what the step adds to memory */
};

/* Fills `p` for `s`. Monotone: more tokens, logits or blocks never plan fewer bytes. */
void hr_plan_layout(const struct hr_plan_dims *d, const struct hr_step_shape *s, struct hr_plan *p);

#endif
