/*
 * attention.h - causal attention over the paged KV cache as a tiled GEMM.
 *
 * One call handles a query tile: a block of consecutive query tokens of one
 * sequence times the `group` query heads that share one KV head (GQA), up to
 * 64 rows. Keys are streamed in KV blocks of 32 (aligned to absolute
 * positions), each loaded once and used by every row of the tile:
 * S = Q K^T and acc += P V are register-blocked micro-kernels (6 rows x 32
 * keys, 4 rows x 64 dims of accumulators), with an online softmax between
 * them: per row, a running maximum m, a running sum l of exp(s - m) and a
 * running output acc; when a block raises the maximum, l and acc are
 * rescaled by exp(m_old - m_new). The [heads x q_len x kv_len] score matrix
 * never exists: scratch is O(rows x (32 + head_dim)) per thread, independent
 * of the KV length (hr_attn_scratch_bytes, part of the plan). Blocks wholly
 * after a row (causal) or wholly behind its window are skipped.
 *
 * Exactness: a row's result depends only on its own query, position and
 * keys, never on which other rows share the call: the blocks it visits are
 * fixed by its position, and inside a block its arithmetic is the same
 * sequence of operations whatever rows are blocked with it (masked keys
 * carry p = 0 exactly; V rows past the sequence are zeroed), so ragged
 * batches and chunked prefill give bit-identical results to a sequence run
 * alone. The thread split (hr_attn_cost) therefore cannot change results.
 *
 * Quantized caches (Q8_0, Q4_0) follow ggml-cpu's flash attention: each
 * query row is quantized to Q8_0 once per call, scores are integer block dot
 * products scaled by the two block scales, and V rows are dequantized to f32
 * a tile at a time (exact), never the whole cache (attention.c draws the
 * tile layout). hr_attn_score_ref is the plain C reference of one score.
 *
 * Rotation: like llama.cpp (llama-kv-cache.cpp, attn_rot_k / attn_rot_v,
 * default on; LLAMA_ATTN_ROT_DISABLE turns it off there), a quantized cache
 * stores K and V multiplied by an orthonormal Walsh-Hadamard matrix H, and Q
 * is multiplied by the same H as K, so q.k is unchanged while an outlier
 * dimension is spread over the whole chunk before it is quantized; the
 * attention output comes back with one more H (H x H = I). K uses chunks of
 * the largest power of two >= 64 dividing head_dim, V chunks of 64; no
 * rotation when head_dim is not a multiple of 64. The engine applies it
 * (engine.c) with hr_attn_rotate, which computes exactly what ggml-cpu's
 * fwht does (scale by 1/sqrt(n) first, then the butterflies in stage order),
 * so both engines quantize the same numbers.
 *
 * Cost per row: (pos + 1) x head_dim x 2 multiply-adds plus one exp per key;
 * f32 FMAs on K and V converted from f16 once per block (exact), i.e. more
 * precise than ggml-cpu's f16 accumulation. AVX-512 when the build has it
 * (VNNI for the quantized scores), plain C otherwise (same algorithm, same
 * results for the quantized scores).
 */
#ifndef HR_ENGINE_ATTENTION_H
#define HR_ENGINE_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kv-cache.h"
#include "gguf/ggml-types.h"

#define HR_ATTN_TILE 16 /* keys per load (half a KV block); block_tokens % 16 == 0 */

struct hr_attn_ctx {
    struct hr_kv_pool *kv;
    const int32_t *blocks; /* the sequence's block table */
    uint32_t layer;
    uint32_t head_dim;
    uint32_t block_tokens;
    uint32_t group;        /* query heads per KV head */
    float scale;           /* 1 / sqrt(head_dim) */
    /* 0: full causal. Else a sliding window (llama.cpp's
     * LLAMA_SWA_TYPE_STANDARD): the query at position p sees keys
     * max(0, p - window + 1) .. p, i.e. key p0 is masked iff p - p0 >= window. */
    uint32_t window;
    /* NULL, or the layer's n_head sink logits (attention sinks, gpt-oss),
     * indexed by the global query head kv_head x group + g: each row's
     * softmax denominator gains exp(sink - m); the sink carries no value.
     * Borrowed; must outlive the call. */
    const float *sinks;
};

/* Query tokens per call for a GQA group size: rows = tokens x group <= 128
 * (at least one token, at most 32). Each call streams its KV head's blocks
 * once, so more rows a call read the KV fewer times (measurements at the
 * definition). */
uint32_t hr_attn_block_tokens(uint32_t group);

/* The work of one hr_attention call, in arbitrary units proportional to its
 * multiply-adds (rows x keys visited, plus a fixed part): the engine splits
 * calls over threads by this, since causal tiles late in a sequence cost
 * far more than early ones. */
uint64_t hr_attn_cost(const struct hr_attn_ctx *c, int32_t pos0, uint32_t nq);

/* Scratch bytes one thread needs for a cache of `kv_type`. */
size_t hr_attn_scratch_bytes(enum hr_ggml_type kv_type, uint32_t head_dim, uint32_t group);

/* The plain C reference of one quantized score (before the 1/sqrt(head_dim)
 * scale): `q` (head_dim floats) quantized to Q8_0 as ggml-cpu's from_float
 * does, then per 32-block the exact integer dot with `k_row` (one token's
 * Q8_0 or Q4_0 K row of one head), summed in block order as
 * fmaf(sumi, d_k x d_q, sum). hr_attention computes every quantized score
 * with exactly this expression. */
float hr_attn_score_ref(enum hr_ggml_type kv_type, const void *k_row, const float *q,
                        uint32_t head_dim);

/*
 * Attention for query tokens at positions pos0 .. pos0 + nq - 1 (nq <=
 * hr_attn_block_tokens(group)) of the sequence in `c`, for query heads
 * kv_head*group .. +group-1. Query head h of token t is read at
 * q + t*q_stride + h*head_dim (h counted from the group's first head) and its
 * output written at the same place in `out`. Keys 0 .. pos must already be in
 * the cache for every row.
 */
void hr_attention(const struct hr_attn_ctx *c, uint32_t kv_head, const float *q, size_t q_stride,
                  int32_t pos0, uint32_t nq, float *out, size_t out_stride, void *scratch);

/* Chunk size of the K (and Q) rotation, or of the V rotation, for a cache
 * of `kv_type` and `head_dim`; 0 means none (float caches, head_dim not a
 * multiple of 64). */
uint32_t hr_attn_rot_k_dim(enum hr_ggml_type kv_type, uint32_t head_dim);
uint32_t hr_attn_rot_v_dim(enum hr_ggml_type kv_type, uint32_t head_dim);

/* x = H x in place for n floats (a power of two): the normalized
 * Walsh-Hadamard transform, ggml-cpu's fwht arithmetic. n log2 n adds. */
void hr_attn_rotate(float *x, uint32_t n);

/* Where position `pos`, KV head `h`, dimension `d` lives, for writers. */
void hr_attn_store(struct hr_kv_pool *kv, const int32_t *blocks, uint32_t layer, uint32_t n_head_kv,
                   uint32_t head_dim, int32_t pos, const float *k, const float *v);

#endif
