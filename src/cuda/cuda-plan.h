/*
 * cuda-plan.h - the exact device-memory plan of one CUDA engine step.
 *
 * The CUDA twin of engine/plan.h: one pure function, hr_cuda_plan_layout,
 * returns the offset of every buffer a step uses in the device step arena and
 * the arena's total, and the runner (cuda-engine.c) takes every buffer it
 * touches from those offsets. "Planned" and "used" therefore cannot drift:
 * tests/cuda/test-cuda-engine.c checks on random ragged batches that the
 * arena's high-water mark equals plan.arena_bytes byte for byte and that
 * the bytes past it were not written.
 *
 *   arena (each buffer 256-byte aligned, in this order)
 *   -- meta: written on the host into pinned staging, sent with ONE copy --
 *   tokens   [T] i32          ids of the step's tokens
 *   pos      [T] i32          their positions
 *   seq_of   [T] i32          which sequence each token belongs to
 *   rows     [L] i32          token index of each logit row
 *   tab_off  [S] i32          where each sequence's block table starts in `tables`
 *   tables   [B] i32          the block tables of the step's sequences, concatenated
 *   seq_fa   [S] i32          1: the sequence's queries run the tiled attention
 *   tiles    [T/64 + S][2] i32  its query tiles: first token, rows (at most 64)
 *   seq_tok  [S][2] i32       hybrid models: each sequence's first token and count
 *   seq_slot [S] i32          hybrid models: its recurrent state slot
 *   ctr      [G n_head_kv + n_ff / 32] u32  the fused decode kernels'
 *            counters, staged as zeros every step (G = gemv_max_tokens):
 *            the attention's merge (hr_cuda_attn_args.ctr), then (int_gemv
 *            models) the SwiGLU's (hr_cuda_swiglu_q8)
 *   -- device-only --
 *   rope     [T][n_rot] f32   cos/sin pairs per token
 *   x        [T][n_embd] f32  the residual stream
 *   xn       [T][n_embd] f32  normed input of a block
 *   act      [A][max_in] f32  matmul input rounded to the weight's vec-dot format,
 *            A = max(T, L, X) (hr_cuda_plan_act_rows), X = a MoE's expert rows
 *            in a GEMV step, min(T, gemv_max_tokens) x n_expert_used (0 dense)
 *   actq     the integer GEMV's inputs, G = max(min(max(T, L), gemv_max_tokens), X)
 *            rows (models with such weights, int_gemv): int8 [G][max_in], then
 *            f32 scales [G][max_in / 32], then int16 sums [G][max_in / 16]
 *            (hr_cuda_actq_parts, hr_cuda_plan_actq_rows)
 *   -- only in steps that run a tensor-core GEMM (max(T, L) > gemv_max_tokens) --
 *   act16    [R][max_in] f16  the same input as 16-bit floats, R = max(T, L);
 *            in models with an integer GEMM (int_gemm) at least R rows of actq's
 *            layout (its Q8_0 or Q8_K inputs; hr_cuda_act16_bytes)
 *   wdq      [wdq_elems] f16  one weight matrix (or a slice of rows) dequantized
 *            to f16 for cuBLASLt; the largest layer matrix of a quantized type
 *            (an 8B Q4_K model: 14336 x 4096, 112 MiB); the output matrix goes
 *            through it in slices of rows. cuBLASLt runs with no workspace (an
 *            algorithm chosen at init without split-K: deterministic, and its
 *            result for a row does not depend on the other rows).
 *   work     union of  { q [T][q_dim], k [T][kv_dim], v [T][kv_dim], attn [T][q_dim],
 *                        gated attention (qwen35): qg [T][2 q_dim], qgate [T][q_dim],
 *                        attn_part [G][n_head][HR_CUDA_ATTN_SPLITS][head_dim + 2]
 *                        f32, G = min(T, gemv_max_tokens): the split attention's
 *                        runs (decode steps, T <= gemv_max_tokens) }
 *                      { gate [T][n_ff], up [T][n_ff], the MoE buffers below }
 *                      { the Gated DeltaNet's: dn_qkv [T][conv_dim] (the projection),
 *                        dn_z [T][value_dim], dn_beta, dn_g [T][n_v_heads],
 *                        dn_conv [T][conv_dim] (the conv's output, q | k | v),
 *                        dn_o [T][value_dim] }               (never live together)
 *   -- MoE models (n_expert > 0), after the FFN buffers, never live with attention's:
 *   moe_logits [T][n_expert] f32  the router's logits
 *   moe_sel  [T k] i32        each token's k experts (top-k order)
 *   moe_w    [T k] f32        their weights
 *   moe_row  [T k] i32        where each (token, slot) pair's row landed in the grouping
 *   moe_tok  [T k] i32        the token of each grouped row
 *   moe_rx   [T k] i32        the expert of each grouped row
 *   moe_off  [n_expert] i32   where each expert's rows end (copied to the host)
 *   moe_shg  [T] f32          the shared expert's gate
 *   moe_x    [T k][n_embd] f32  the grouped rows' inputs, then the experts' outputs
 *   moe_gu   [T k][2 n_ff_exp] f32  gate and up of every grouped row
 *   moe_h    [T k][n_ff_exp] f32  the activation, the down matmul's input
 *   out_x    [L][n_embd] f32  normed rows whose logits are wanted
 *   logits   [L][n_vocab] f32 only for the L rows asked for (copied back once)
 *
 * The recurrent state itself is not in the arena: it is the engine's state
 * pool (one slot per sequence, allocated at init, cuda-engine.h).
 *
 * T = tokens, L = logit rows, S = sequences, B = block-table entries of the
 * step's sequences after the step's new blocks. Nothing depends on the KV
 * length itself (attention streams the blocks with an online softmax), only
 * the tables' few bytes grow with it.
 *
 * Pure C, no CUDA: built on every machine, so the plan and the sizing under
 * a device ceiling (hr_cuda_plan_size) are unit-tested without a GPU.
 */
#ifndef HR_CUDA_CUDA_PLAN_H
#define HR_CUDA_CUDA_PLAN_H

#include <stdint.h>

#define HR_CUDA_ARENA_ALIGN 256
/* Query rows per tile of the tiled (flash) attention. */
#define HR_CUDA_FA_TILE 64

/* The most runs a decode token's keys are split into (attn_part). */
#define HR_CUDA_ATTN_SPLITS 64

struct hr_cuda_plan_dims {
    uint32_t n_embd, n_head, n_head_kv, head_dim, n_rot, n_vocab;
    uint32_t n_ff;                /* the widest dense FFN (a MoE's shared expert) */
    uint32_t n_expert, n_expert_used, n_ff_exp; /* MoE (n_expert 0: dense) */
    uint32_t attn_gated;          /* 1: Wq also yields a gate per head (qwen35) */
    uint32_t dn_conv_dim, dn_value_dim, dn_n_v_heads; /* Gated DeltaNet (0: none) */
    uint32_t gemv_max_tokens;     /* steps of up to this many rows use the GEMV kernels */
    uint32_t tc_gemm;             /* 1: larger steps multiply on tensor cores (act16, wdq) */
    uint32_t int_gemv;            /* 1: some matrix has an integer GEMV (actq) */
    uint32_t int_gemm;            /* 1: some matrix has an integer GEMM (inputs in act16) */
    uint64_t wdq_elems;           /* f16 elements of the dequantized-weight scratch */
    uint64_t kv_block_bytes;
    uint32_t kv_window;           /* a windowed pool's window (kv-cache.h): the windowed
                                     block tables are staged too (wtables); 0: none */
};

struct hr_cuda_step_shape {
    uint32_t n_tokens;     /* T */
    uint32_t n_logits;     /* L */
    uint32_t n_seqs;       /* S */
    uint32_t n_table;      /* B: block-table entries after the step */
    uint32_t new_blocks;   /* KV blocks the step takes from the pool */
};

struct hr_cuda_plan {
    uint64_t off_tokens, off_pos, off_seq_of, off_rows, off_tab_off, off_tables, off_wtables;
    uint64_t off_seq_fa, off_tiles, off_seq_tok, off_seq_slot, off_ctr;
    uint64_t meta_bytes;   /* the staged prefix: one host-to-device copy */
    uint64_t off_rope, off_x, off_xn, off_act, off_actq, off_act16, off_wdq;
    uint64_t off_q, off_k, off_v, off_attn, off_qg, off_qgate, off_attn_part, off_gate, off_up;
    uint64_t off_dn_qkv, off_dn_z, off_dn_beta, off_dn_g, off_dn_conv, off_dn_o;
    uint64_t off_moe_logits, off_moe_sel, off_moe_w, off_moe_row, off_moe_tok, off_moe_rx;
    uint64_t off_moe_off, off_moe_shg, off_moe_x, off_moe_gu, off_moe_h;
    uint64_t off_out_x, off_logits;
    uint64_t arena_bytes;  /* end of the last buffer: the arena's high-water mark */
    uint64_t kv_bytes;     /* new_blocks x block bytes */
    uint64_t total_bytes;  /* arena + kv: what the step adds to device memory */
};

/* ctr's bytes, the same in every step (so the largest step's metadata
 * stays the largest): a counter per (token, KV head) of a GEMV step for
 * the attention's merge, then one per 32 FFN rows in models with an
 * integer GEMV (the fused SwiGLU, cuda-engine.c's swiglu_fused: Q8_0
 * blocks; Q8_K super-blocks take the first eighth). */
static inline uint64_t hr_cuda_plan_ctr_attn(const struct hr_cuda_plan_dims *d)
{
    return (uint64_t)d->gemv_max_tokens * d->n_head_kv;
}

static inline uint64_t hr_cuda_plan_ctr_bytes(const struct hr_cuda_plan_dims *d)
{
    return (hr_cuda_plan_ctr_attn(d) + (d->int_gemv ? (d->n_ff + 31) / 32 : 0)) * 4;
}

/* The widest input any matmul of the step reads: act's row length. */
static inline uint64_t hr_cuda_plan_max_in(const struct hr_cuda_plan_dims *d)
{
    uint64_t m = (uint64_t)d->n_head * d->head_dim;
    m = m > d->n_embd ? m : d->n_embd;
    m = m > d->n_ff ? m : d->n_ff;
    m = m > d->dn_value_dim ? m : d->dn_value_dim;
    return m > d->n_ff_exp ? m : d->n_ff_exp;
}

/* A MoE model's expert rows in a GEMV step of T tokens (its experts
 * multiply in one launch a row each: moe_ffn's decode path); 0 dense. */
static inline uint64_t hr_cuda_plan_expert_rows(const struct hr_cuda_plan_dims *d, uint64_t T)
{
    const uint64_t g = T < d->gemv_max_tokens ? T : d->gemv_max_tokens;
    return d->n_expert ? g * d->n_expert_used : 0;
}

/* act's rows: max(T, L) and the expert rows. */
static inline uint64_t hr_cuda_plan_act_rows(const struct hr_cuda_plan_dims *d, uint64_t T,
                                             uint64_t L)
{
    const uint64_t r = T > L ? T : L, x = hr_cuda_plan_expert_rows(d, T);
    return r > x ? r : x;
}

/* actq's rows: max(T, L) up to gemv_max_tokens, and the expert rows. */
static inline uint64_t hr_cuda_plan_actq_rows(const struct hr_cuda_plan_dims *d, uint64_t T,
                                              uint64_t L)
{
    const uint64_t r = T > L ? T : L, x = hr_cuda_plan_expert_rows(d, T);
    const uint64_t g = r < d->gemv_max_tokens ? r : d->gemv_max_tokens;
    return g > x ? g : x;
}

/* The actq buffer for `rows` rows of up to `max_in` values: the scales
 * start at *d_off, the sums at *s_off, and it ends at *bytes (0 rows: 0). */
static inline void hr_cuda_actq_parts(uint64_t rows, uint64_t max_in, uint64_t *d_off,
                                      uint64_t *s_off, uint64_t *bytes)
{
    const uint64_t a = HR_CUDA_ARENA_ALIGN - 1;
    *d_off = (rows * max_in + a) & ~a;
    *s_off = (*d_off + rows * ((max_in + 31) / 32) * 4 + a) & ~a;
    *bytes = rows ? *s_off + rows * ((max_in + 15) / 16) * 2 : 0;
}

/* act16's bytes in a step of R = max(T, L) rows that runs tensor-core GEMMs:
 * R rows of 16-bit inputs, or of the integer GEMM's quantized inputs
 * (actq's layout) where that is more. */
static inline uint64_t hr_cuda_act16_bytes(const struct hr_cuda_plan_dims *d, uint64_t rows)
{
    const uint64_t max_in = hr_cuda_plan_max_in(d);
    uint64_t d_off, s_off, q8 = 0;
    if (d->int_gemm)
        hr_cuda_actq_parts(rows, max_in, &d_off, &s_off, &q8);
    return rows * max_in * 2 > q8 ? rows * max_in * 2 : q8;
}

/* attn_part's bytes in a step of T tokens: min(T, gemv_max_tokens) rows
 * (only decode steps split, but the plan stays monotone in T). */
static inline uint64_t hr_cuda_attn_part_bytes(const struct hr_cuda_plan_dims *d, uint64_t T)
{
    const uint64_t rows = T < d->gemv_max_tokens ? T : d->gemv_max_tokens;
    return rows * d->n_head * HR_CUDA_ATTN_SPLITS * ((uint64_t)d->head_dim + 2) * sizeof(float);
}

/* Fills `p` for `s`. Monotone: more of anything never plans fewer bytes. */
void hr_cuda_plan_layout(const struct hr_cuda_plan_dims *d, const struct hr_cuda_step_shape *s,
                         struct hr_cuda_plan *p);

/* The limits an engine is sized for: its arena holds the largest step they
 * allow, its KV pool kv_budget_bytes. */
struct hr_cuda_sizing {
    uint32_t max_step_tokens, max_step_logits, max_step_seqs;
    uint32_t max_seq_tokens;  /* longest sequence: its block table is staged */
    uint32_t kv_block_tokens;
    uint64_t kv_budget_bytes; /* 0: whatever the room leaves */
};

#define HR_CUDA_MIN_STEP_TOKENS 64u

/* The KV bytes of one max_seq_tokens sequence in steps of max_step_tokens
 * (both kinds of block in a windowed pool): the least pool sizing allows. */
uint64_t hr_cuda_plan_kv_min(const struct hr_cuda_plan_dims *d, const struct hr_cuda_sizing *z);

/* The plan of the largest step `z` allows (what the engine allocates as
 * its arena): T = max_step_tokens, L = max_step_logits, S = max_step_seqs,
 * every sequence's table at max_seq_tokens. */
void hr_cuda_plan_max(const struct hr_cuda_plan_dims *d, const struct hr_cuda_sizing *z,
                      struct hr_cuda_plan *p);

/*
 * Sizes `z` to fit `room_bytes` of device memory (what a ceiling leaves
 * after the context, the library and the weights): the KV pool gets what it
 * asked for or what the largest step's arena leaves, whichever is less
 * (whole blocks); when that would not hold one max_seq_tokens sequence, the
 * step is halved (logit rows and sequences clamped to it) down to
 * HR_CUDA_MIN_STEP_TOKENS. Returns 0 and z sized, or -1 when nothing fits
 * (z then holds the smallest step tried). Pure: unit-tested without a GPU.
 * Afterwards arena (hr_cuda_plan_max) + kv_budget_bytes <= room_bytes.
 */
int hr_cuda_plan_size(const struct hr_cuda_plan_dims *d, struct hr_cuda_sizing *z,
                      uint64_t room_bytes);

#endif
