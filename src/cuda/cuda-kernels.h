/*
 * cuda-kernels.h - the CUDA engine's kernels, callable from C.
 *
 * Each function launches one kernel (or a few) on `stream` and returns
 * cudaGetLastError(): launch errors are reported here, errors inside a
 * kernel surface at the engine's next synchronization. None of them
 * allocates: every buffer is a view the caller (cuda-engine.c) took from the
 * planned step arena, the weights or the KV pool.
 *
 * Shapes follow engine.c: activations are row-major [rows][width] f32; a
 * weight is `n` rows of `k` elements in its GGUF type (row_bytes apart),
 * read as stored - quantized weights stay quantized in VRAM and are
 * dequantized in registers (GEMV) or into shared memory (GEMM).
 *
 * Numerics follow the CPU engine (and so llama.cpp's CPU backend) where it
 * is cheap to: RMSNorm sums squares in double; the RoPE table is built by
 * the same multiply chain; dequantization uses the same expression order
 * (bit-identical to kernels/quant.c, tested); matmul inputs are first
 * rounded to the weight's vec-dot format (hr_cuda_act_round: f16 for F16,
 * bf16 for BF16, Q8_0 for Q8_0/Q4_0, Q8_K for the K-quants), the values
 * ggml-cpu multiplies by; only the order of float sums differs.
 *
 * Device KV layout (differs inside a block from the CPU pool's, same bytes):
 *   block = [layer][K, V][kv head][slot][head_dim] in f16 or f32, so a key
 *   or value row of one token is head_dim contiguous elements.
 *
 * Threads: call from the engine thread that owns `stream`.
 */
#ifndef HR_CUDA_CUDA_KERNELS_H
#define HR_CUDA_CUDA_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The weight types the kernels take: ggml's type ids (gguf/ggml-types.h,
 * which C++ cannot include under -Wshadow; cuda-engine.c asserts they are
 * equal). `type` arguments below are these ids. */
#define HR_CUDA_T_F32 0
#define HR_CUDA_T_F16 1
#define HR_CUDA_T_Q4_0 2
#define HR_CUDA_T_Q4_1 3
#define HR_CUDA_T_Q5_0 6
#define HR_CUDA_T_Q5_1 7
#define HR_CUDA_T_Q8_0 8
#define HR_CUDA_T_Q2_K 10
#define HR_CUDA_T_Q3_K 11
#define HR_CUDA_T_Q4_K 12
#define HR_CUDA_T_Q5_K 13
#define HR_CUDA_T_Q6_K 14
#define HR_CUDA_T_IQ4_NL 20
#define HR_CUDA_T_IQ4_XS 23
#define HR_CUDA_T_BF16 30
#define HR_CUDA_T_MXFP4 39

/* The rounding a matmul input gets before the product (the vec-dot type). */
enum hr_cuda_act { HR_CUDA_ACT_F32, HR_CUDA_ACT_F16, HR_CUDA_ACT_BF16, HR_CUDA_ACT_Q8_0,
                   HR_CUDA_ACT_Q8_K };

/* Largest head_dim the attention and Q/K kernels take (a multiple of 32). */
#define HR_CUDA_MAX_HEAD_DIM 256
/* Largest number of rows the GEMV kernel multiplies at once. */
#define HR_CUDA_GEMV_MAX_ROWS 8

/* Where the paged KV lives and how a step's tokens find their blocks. */
struct hr_cuda_kv_view {
    uint8_t *pool;          /* device pool: n_blocks x block_bytes */
    uint64_t block_bytes;
    uint32_t block_tokens, n_head_kv, head_dim, layer;
    int f16;                /* element type: f16 (1) or f32 (0) */
    const int32_t *pos;     /* [T] */
    const int32_t *seq_of;  /* [T] */
    const int32_t *tab_off; /* [S] */
    const int32_t *tables;  /* concatenated block tables */
};

/* x[t] = row tokens[t] of the embedding matrix, dequantized. */
cudaError_t hr_cuda_embed(int type, const void *w, uint64_t row_bytes, uint32_t k,
                          const int32_t *tokens, uint32_t n_tokens, float *x, cudaStream_t s);

/* RoPE's constants: engine.h's struct hr_rope, field for field (C++ cannot
 * include engine.h; cuda-engine.c asserts the layouts agree). */
struct hr_cuda_rope {
    float theta_scale, freq_scale, ext_factor, attn_factor, corr_dims[2];
};

/* rope[t] = n_rot/2 (cos, sin) pairs for position pos[t]: engine/rope-row.h's
 * hr_rope_row, the CPU engine's formula (its device cosf/sinf/logf). */
cudaError_t hr_cuda_rope_table(const int32_t *pos, uint32_t n_tokens, uint32_t n_rot,
                               const struct hr_cuda_rope *r, const float *freqs, float *rope,
                               cudaStream_t s);

/* For r < n_rows, with src = rows ? rows[r] : r: if `add`, x[src] += add[src]
 * first (the residual); then y[r] = rmsnorm(x[src]) * w. Rows are n floats. */
cudaError_t hr_cuda_rms_norm(float *x, const float *add, const int32_t *rows, uint32_t n_rows,
                             uint32_t n, const float *w, float eps, float *y, cudaStream_t s);

/* out = x rounded to `act` (m rows of k; k a multiple of 256 for Q8_K, 32
 * for Q8_0). */
cudaError_t hr_cuda_act_round(enum hr_cuda_act act, const float *x, uint32_t m, uint32_t k,
                              float *out, cudaStream_t s);

/* The same rounding, stored as 16-bit floats for the tensor-core GEMM: f16,
 * or bf16 when `bf16` (act is not HR_CUDA_ACT_F32). */
cudaError_t hr_cuda_act_round_half(enum hr_cuda_act act, const float *x, uint32_t m, uint32_t k,
                                   void *out, int bf16, cudaStream_t s);

/* out[r][i] = weight row0 + r, element i, dequantized (as hr_cuda_dequant_rows)
 * and rounded to f16, or bf16 when `bf16` (r < n_rows; out 16-byte aligned). */
cudaError_t hr_cuda_dequant_half(int type, const void *w, uint64_t row_bytes, uint32_t k,
                                 uint32_t row0, uint32_t n_rows, void *out, int bf16,
                                 cudaStream_t s);

/* y[t][j] (+)= sum_i x[t][i] w[j][i] (+ bias[j]) for t < m <= HR_CUDA_GEMV_MAX_ROWS,
 * j < n; accumulate adds to y (the residual). One warp per weight row. */
cudaError_t hr_cuda_gemv(int type, const void *w, uint64_t row_bytes, uint32_t k, uint32_t n,
                         const float *x, uint32_t m, float *y, uint32_t ldy, const float *bias,
                         int accumulate, cudaStream_t s);

/* Up to three matrices of one type and row length on the same inputs
 * (Q, K and V; gate and up) as ONE GEMV launch: row jg of the launch is
 * row jg - end[p-1] of part p (end: cumulative rows; n = end[n_parts-1],
 * the unused ends equal to n). Each row is computed exactly as by
 * hr_cuda_gemv of its matrix alone: fusing changes launches, not results. */
#define HR_CUDA_GEMV_PARTS 3
typedef struct hr_cuda_gemv_out {
    const uint8_t *w[HR_CUDA_GEMV_PARTS];
    float *y[HR_CUDA_GEMV_PARTS];
    const float *bias[HR_CUDA_GEMV_PARTS];
    uint32_t ldy[HR_CUDA_GEMV_PARTS];
    uint32_t end[HR_CUDA_GEMV_PARTS];
    uint32_t n, n_parts;
    /* Expert rows (a MoE's decode): input row r (r < m) multiplies expert
     * rx[r]'s matrix (each part's w + rx[r] x mat_bytes) into row r of each
     * part's y, as a GEMV of that matrix on that row alone would; NULL:
     * every row multiplies the same matrices. */
    const int32_t *rx;
    uint64_t mat_bytes;
} hr_cuda_gemv_out;

cudaError_t hr_cuda_gemv_parts(int type, uint64_t row_bytes, uint32_t k,
                               const hr_cuda_gemv_out *o, const float *x, uint32_t m,
                               int accumulate, cudaStream_t s);

/* Activations quantized for the integer GEMV: int8 values, row t at q + t k;
 * Q8_K: one f32 scale per 256 (d + t k / 256) and int16 sums of the values
 * per 16 (s + t k / 16); Q8_0: one scale per 32 (d + t k / 32), no sums. */
struct hr_cuda_q8_act {
    int8_t *q;
    float *d;
    int16_t *s;
};

/* The next matmul's inputs prepared by the norm itself (a launch less a
 * layer and norm): y's rows also rounded to f16 into act (as
 * hr_cuda_act_round with HR_CUDA_ACT_F16), or quantized to Q8_0 or Q8_K
 * into q (as hr_cuda_quant_act, Q8_K needing n % 256 == 0), bit for bit. */
enum { HR_CUDA_NORM_PREP_NONE, HR_CUDA_NORM_PREP_F16, HR_CUDA_NORM_PREP_Q8_0, HR_CUDA_NORM_PREP_Q8_K };
typedef struct hr_cuda_norm_prep {
    int kind;
    float *act;                /* F16: n_rows x n f32 values */
    struct hr_cuda_q8_act q;   /* Q8_0: q and d (n % 32 == 0); Q8_K: q, d and s */
} hr_cuda_norm_prep;

/* hr_cuda_rms_norm (no add, all rows) with the prepared inputs too. */
cudaError_t hr_cuda_rms_norm_prep(float *x, uint32_t n_rows, uint32_t n, const float *w, float eps,
                                  float *y, const hr_cuda_norm_prep *pr, cudaStream_t s);

/* Whether weights of `type` whose inputs round to `act` have an integer
 * GEMV (Q4_K x Q8_K, Q8_0 x Q8_0; HR_CUDA_GEMV=float or generic turns it
 * off). */
int hr_cuda_gemv_int_type(int type, enum hr_cuda_act act);

/* a = x quantized to `act` (Q8_K: k % 256 == 0; Q8_0: k % 32 == 0), m rows. */
cudaError_t hr_cuda_quant_act(enum hr_cuda_act act, const float *x, uint32_t m, uint32_t k,
                              const struct hr_cuda_q8_act *a, cudaStream_t s);

/* hr_cuda_gemv on quantized inputs, integer dot products (dp4a); one warp
 * per weight row. Q4_K rows 16-byte aligned, Q8_0 rows 2-byte aligned. */
cudaError_t hr_cuda_gemv_int(int type, const void *w, uint64_t row_bytes, uint32_t k, uint32_t n,
                             const struct hr_cuda_q8_act *a, uint32_t m, float *y, uint32_t ldy,
                             const float *bias, int accumulate, cudaStream_t s);
/* The same over parts (hr_cuda_gemv_out). */
cudaError_t hr_cuda_gemv_int_parts(int type, uint64_t row_bytes, uint32_t k,
                                   const hr_cuda_gemv_out *o, const struct hr_cuda_q8_act *a,
                                   uint32_t m, int accumulate, cudaStream_t s);

/* The SwiGLU after a gate/up GEMV done inside it (hr_cuda_gemv_normed):
 * down's inputs go to q (Q8_K for Q4_K gate/up, Q8_0 for Q8_0); ctr holds a
 * counter per 256 (Q8_K) or 32 (Q8_0) of the F rows, each a multiple of
 * that when the launch starts (zero them once: every launch adds as many
 * to each). */
typedef struct hr_cuda_swiglu_q8 {
    struct hr_cuda_q8_act q;
    uint32_t *ctr;
} hr_cuda_swiglu_q8;

/* One input row of Q4_K or Q8_0 weights on x's RMSNorm (x: the k-wide
 * residual, w: the norm's weights), the norm done inside the GEMV (its
 * pipelined kernel): the results of hr_cuda_rms_norm_prep (Q8_K or Q8_0)
 * then hr_cuda_gemv_int_parts, bit for bit, less a launch; the normalized
 * floats are not written. Only where hr_cuda_gemv_normed_ok(type, k): the
 * type's pipelined kernel on (Q4_K's default; Q8_0 with HR_CUDA_Q80=pipe),
 * 2048 <= k <= 4096, k % 256 == 0. sw (NULL: none): o is gate/up, two
 * parts of F rows (F a multiple of the counters' group, no biases,
 * accumulate 0), and the kernel also does hr_cuda_swiglu_prep's work
 * into sw->q, bit for bit: the gate part's y gets silu(gate) x up, the up
 * part's y up, another launch less. */
int hr_cuda_gemv_normed_ok(int type, uint32_t k);
cudaError_t hr_cuda_gemv_normed(int type, uint64_t row_bytes, uint32_t k,
                                const hr_cuda_gemv_out *o, const float *x, const float *w,
                                float eps, const hr_cuda_swiglu_q8 *sw, int accumulate,
                                cudaStream_t s);

/* Whether weights of `type` whose inputs round to `act` have an integer
 * GEMM for m > HR_CUDA_GEMV_MAX_ROWS (Q8_0, Q4_0, Q5_0, IQ4_NL and MXFP4 on
 * Q8_0 inputs; which models use it: cuda-engine.c's int_gemm_model). */
int hr_cuda_gemm_int_type(int type, enum hr_cuda_act act);

/* y[t][j] (+)= sum_i x[t][i] w[j][i] (+ bias[j]) for any m, on inputs
 * quantized to Q8_0 (hr_cuda_quant_act): per block of 32 an exact integer
 * sum on the int8 tensor cores times the two scales, added in block order,
 * so a row's result does not depend on m. Rows 2-byte aligned (MXFP4: any). */
cudaError_t hr_cuda_gemm_int(int type, const void *w, uint64_t row_bytes, uint32_t k, uint32_t n,
                             const struct hr_cuda_q8_act *a, uint32_t m, float *y, uint32_t ldy,
                             const float *bias, int accumulate, cudaStream_t s);

/* The same for Q4_K on Q8_K inputs and m <= HR_CUDA_GEMM_SMALL_ROWS (decode
 * batches): the weights streamed once into MMA fragments, ggml's integer
 * super-block sums; a row's result does not depend on m (but differs from
 * hr_cuda_gemm_int's in rounding). k % 256 == 0, rows 16-byte aligned. */
#define HR_CUDA_GEMM_SMALL_ROWS 64
cudaError_t hr_cuda_gemm_q4k_small(const void *w, uint64_t row_bytes, uint32_t k, uint32_t n,
                                   const struct hr_cuda_q8_act *a, uint32_t m, float *y,
                                   uint32_t ldy, const float *bias, int accumulate,
                                   cudaStream_t s);

/* The same for m > HR_CUDA_GEMV_MAX_ROWS (prefill): tiled, weights decoded
 * a chunk at a time into shared memory, full f32; each output is one fmaf
 * chain over k in order, so it does not depend on m. */
cudaError_t hr_cuda_gemm(int type, const void *w, uint64_t row_bytes, uint32_t k, uint32_t n,
                         const float *x, uint32_t m, float *y, uint32_t ldy, const float *bias,
                         int accumulate, cudaStream_t s);

/* Loads every kernel's code now (lazy loading would load it at first use,
 * inside a step, taking device memory there). */
cudaError_t hr_cuda_kernels_preload(void);

/* out[r][i] = weight row0 + r, element i, as f32 (r < n_rows). */
cudaError_t hr_cuda_dequant_rows(int type, const void *w, uint64_t row_bytes, uint32_t k,
                                 uint32_t row0, uint32_t n_rows, float *out, cudaStream_t s);

/* y[t][j] += bias[j]. */
cudaError_t hr_cuda_add_bias(float *y, uint32_t m, uint32_t n, uint32_t ldy, const float *bias,
                             cudaStream_t s);

/* After the Q/K/V matmuls, per token: biases, per-head Q/K RMSNorm (weights
 * may be NULL), RoPE (adjacent pairs or NeoX halves), then K and V into the
 * KV cache at the token's position. q keeps the rotated queries. */
struct hr_cuda_qkv_args {
    float *q, *k, *v;                       /* [T][q_dim], [T][kv_dim], [T][kv_dim] */
    const float *bq, *bk, *bv;              /* or NULL */
    const float *q_norm, *k_norm;           /* [head_dim] or NULL */
    const float *rope;                      /* [T][n_rot] */
    uint32_t n_tokens, n_head, n_rot;
    int neox;
    float eps;
    struct hr_cuda_kv_view kv;
};
cudaError_t hr_cuda_qkv_post(const struct hr_cuda_qkv_args *a, cudaStream_t s);

/* Causal attention of every token over its sequence's keys 0..pos, online
 * softmax over the paged KV (no score matrix), GQA by head / group. */
struct hr_cuda_attn_args {
    const float *q;   /* [T][n_head * head_dim] */
    float *out;       /* same shape */
    uint32_t n_tokens, n_head;
    float scale;
    struct hr_cuda_kv_view kv;
    /* The tiled attention (f16 KV, head_dim 64 or 128; see
     * hr_cuda_attention_tiled_ok): the sequences with seq_fa[s] set run as
     * n_tiles tiles of up to HR_CUDA_FA_TILE consecutive tokens of one
     * sequence (tiles[2i] first token, tiles[2i + 1] rows); the others one
     * warp per (token, head). NULL / 0: all one warp per (token, head). */
    const int32_t *seq_fa, *tiles;
    uint32_t n_tiles;
    /* gpt-oss: a sliding window (a token sees its last `window` positions;
     * 0: all) and per-head sinks (a logit in each row's softmax denominator
     * that weighs no value; NULL: none) */
    uint32_t window;
    const float *sinks;
    /* Split over keys (decode): each one-warp token's keys in up to n_split
     * runs (<= HR_CUDA_ATTN_SPLITS, cuda-plan.h), partial results in part
     * [T][n_head][n_split][head_dim + 2] f32, then merged. NULL: one run. */
    float *part;
    uint32_t n_split;
    /* 1: the one-warp tokens as a block per (token, KV head), its warps the
     * group's query heads sharing each K/V tile (group <= 8 and group x
     * head_dim <= 1024; else a warp per head); same results. 2: a block
     * per (token, KV head) on tensor cores, the group's heads as the rows
     * of the MMA tiles, Q and P as two f16 terms each (within ~1e-6 of
     * 1's results; f16 cache, head_dim 64 or 128, group <= 16; else as 1). */
    uint32_t gqa;
    /* The output also made into Wo's inputs (as hr_cuda_rms_norm_prep; by
     * the merge, so only with part set; kind NONE: not). */
    hr_cuda_norm_prep prep;
    /* Non-NULL: the merge (and prep) done by the attention kernel's last
     * block of each (token, KV head), no merge kernel: T x n_head_kv
     * counters, zero when the launch starts and left so (only where
     * hr_cuda_attention_merged_ok); the same results, bit for bit. */
    uint32_t *ctr;
    /* qkv.q non-NULL: hr_cuda_qkv_post's work (on qkv, q, k and v as the
     * Q/K/V GEMV left them) done by the attention kernel, no launch of its
     * own (only where hr_cuda_attention_qkv_ok, and only when no two of
     * the step's tokens share a sequence: a token's K and V are stored by
     * its own block); the same results; q is not written back. */
    struct hr_cuda_qkv_args qkv;
};

/* Whether the tiled attention runs this head size and KV type. */
int hr_cuda_attention_tiled_ok(uint32_t head_dim, int kv_f16);
cudaError_t hr_cuda_attention(const struct hr_cuda_attn_args *a, cudaStream_t s);
/* Whether a's shape can merge its runs in the attention kernel (ctr): split
 * decode tokens only (part set, no tiles), on tensor cores (gqa 2, an f16
 * cache, head_dim 64 or 128, up to 16 heads a KV head), Q8_K inputs only
 * where a KV head's heads are whole super-blocks. */
int hr_cuda_attention_merged_ok(const struct hr_cuda_attn_args *a);
/* Whether a's shape can do qkv's work in the attention kernel: decode
 * tokens on tensor cores as above, qkv of a's shape. */
int hr_cuda_attention_qkv_ok(const struct hr_cuda_attn_args *a);

/* gate[i] = silu(gate[i]) * up[i]. */
cudaError_t hr_cuda_swiglu(float *gate, const float *up, uint64_t n, cudaStream_t s);
/* The same, with the down matmul's inputs made from the result (pr as for
 * hr_cuda_rms_norm_prep; gate rows of a multiple of 32 values). */
cudaError_t hr_cuda_swiglu_prep(float *gate, const float *up, uint64_t n,
                                const hr_cuda_norm_prep *pr, cudaStream_t s);

/* ---- mixture of experts (engine.c's moe_ffn, step by step) ----
 * The step's T k (token, slot) pairs are grouped by expert on the device;
 * the experts' matmuls run on the groups' rows (cuda-engine.c); then each
 * token's outputs are combined. */
#define HR_CUDA_MOE_MAX_EXPERTS 512

/* Per token: the router's logits (+ logit_b) to its k experts and weights,
 * as engine.c's moe_route: gating 1 softmax, 2 sigmoid, 3 a softmax over
 * the top k (hr_moe_gating's values); sel_b steers the selection only;
 * then norm_w (sum clamped at 2^-14) and w_scale. With shexp_gate, also
 * shg[t] = sigmoid(shexp_gate . xn[t]) (as silu(g) / g). */
struct hr_cuda_moe_route_args {
    const float *logits;                 /* [T][n_expert] */
    const float *logit_b, *sel_b;        /* [n_expert] or NULL */
    const float *shexp_gate, *xn;        /* [n_embd], [T][n_embd]; NULL: no gate */
    uint32_t n_tokens, n_expert, k, n_embd;
    int gating, norm_w;
    float w_scale;
    int32_t *sel;                        /* [T][k] */
    float *w, *shg;                      /* [T][k], [T] */
};
cudaError_t hr_cuda_moe_route(const struct hr_cuda_moe_route_args *a, cudaStream_t s);

/* Groups the T k pairs by expert, in pair order within a group: pair i's
 * row row[i]; row r's token tok[r] and expert rx[r]; expert x's rows end
 * at off[x] (n_expert <= HR_CUDA_MOE_MAX_EXPERTS). */
cudaError_t hr_cuda_moe_group(const int32_t *sel, uint32_t n_tokens, uint32_t k,
                              uint32_t n_expert, int32_t *row, int32_t *tok, int32_t *rx,
                              int32_t *off, cudaStream_t s);

/* out[r] = xn[tok[r]] (rows of n floats). */
cudaError_t hr_cuda_moe_gather(const float *xn, const int32_t *tok, uint32_t rows, uint32_t n,
                               float *out, cudaStream_t s);

/* h[r][c] = act(gate, up) of grouped row r (gu = [rows][gate n_ff_exp | up
 * n_ff_exp]): silu(g) u, or with `oai` gpt-oss's clamped SwiGLU after the
 * expert's gate and up biases ([n_expert][n_ff_exp], or NULL). */
cudaError_t hr_cuda_moe_act(const float *gu, const int32_t *rx, uint32_t rows, uint32_t n_ff_exp,
                            const float *gate_b, const float *up_b, int oai, float *h,
                            cudaStream_t s);

/* x[t] += sum over slots j, in order, of (y[row[t][j]] + down_b[sel[t][j]]) w[t][j],
 * + shx[t] shg[t] (the shared expert; shg NULL: 1). */
struct hr_cuda_moe_combine_args {
    float *x;                            /* [T][n_embd] the residual */
    const float *y;                      /* [T k][n_embd] the experts' outputs, grouped */
    const float *down_b;                 /* [n_expert][n_embd] or NULL */
    const float *shx, *shg;              /* [T][n_embd], [T]; or NULL */
    const int32_t *row, *sel;
    const float *w;
    uint32_t n_tokens, k, n_embd;
};
cudaError_t hr_cuda_moe_combine(const struct hr_cuda_moe_combine_args *a, cudaStream_t s);

/* ---- Gated DeltaNet (engine/deltanet.h; engine.c's deltanet_mixer after
 * its projections) ----
 * The recurrent state lives in device slots, one per sequence: slot i at
 * state + i x slot_bytes holds, per recurrent layer, the conv's last K - 1
 * inputs of every channel then n_v_heads matrices of d x d (row j of a
 * head: S[j][0..d)), as the CPU's slots. */
#define HR_CUDA_DN_MAX_CONV 16
struct hr_cuda_dn_args {
    const int32_t *seq_tok;   /* [S][2]: each sequence's first token and count */
    const int32_t *seq_slot;  /* [S]: its state slot */
    uint8_t *state;           /* the slots */
    uint64_t slot_bytes;
    uint64_t layer_floats;    /* this layer's part of a slot starts here */
    uint64_t conv_floats;     /* the conv part of a layer (conv_dim x (K - 1)) */
    uint32_t n_seqs, n_tokens;
    uint32_t conv_dim, conv_kernel, n_k_heads, n_v_heads, head_dim, key_dim, value_dim;
    int k_blocked;            /* v head h reads k head h / (HV / HK), else h % HK */
};
/* One layer's buffers and weights: qkv [T][conv_dim] (the projection), conv
 * [T][conv_dim] (its output: q | k | v), z [T][value_dim], beta and g
 * [T][HV] (the projections of beta and alpha; or ba [T][2 HV], qwen3next's
 * fused one, then beta and g are written), o [T][value_dim]. */
struct hr_cuda_dn_layer {
    const float *qkv, *z, *ba;
    float *conv, *beta, *g, *o;
    const float *conv_w, *dt_bias, *a, *norm_w;
    float eps;
};
/* Gates, conv, L2 norms, the recurrence and the gated RMSNorm: o is then
 * ssm_out's input. */
cudaError_t hr_cuda_dn_mix(const struct hr_cuda_dn_args *a, const struct hr_cuda_dn_layer *L,
                           cudaStream_t s);
/* Whether the recurrence kernel runs this head size (32 x 1, 2, 3, 4, 6, 8). */
int hr_cuda_dn_head_ok(uint32_t head_dim);

/* Gated attention (qwen35): qg [T][n_head][query hd | gate hd] -> q and
 * gate [T][n_head hd]; then x *= sigmoid(gate) on the attention's output. */
cudaError_t hr_cuda_gate_split(const float *qg, float *q, float *gate, uint32_t n_tokens,
                               uint32_t n_head, uint32_t head_dim, cudaStream_t s);
cudaError_t hr_cuda_gate_mul(float *x, const float *gate, uint64_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
