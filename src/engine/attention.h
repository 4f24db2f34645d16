/*
 * attention.h - causal attention over the paged KV cache, flash style.
 *
 * One call handles a block of consecutive query tokens of one sequence and
 * the `group` query heads that share one KV head (GQA), so every K/V tile
 * loaded from the cache is used by all of those rows. Keys are streamed in
 * tiles of 16 with an online softmax: per row, a running maximum m, a
 * running sum l of exp(s - m) and a running output acc; when a tile raises
 * the maximum, l and acc are rescaled by exp(m_old - m_new). The
 * [heads x q_len x kv_len] score matrix never exists: scratch is
 * O(rows x (16 + head_dim)) per thread, independent of the KV length.
 *
 * Exactness: a row's result depends only on its own query and keys, never
 * on which other rows share the call (tiles past a row's position are
 * skipped, masked lanes contribute exact zeros), so ragged batches and
 * chunked prefill give bit-identical results to a sequence run alone.
 *
 * Cost per row: (pos + 1) x head_dim x 2 multiply-adds plus one exp per key;
 * AVX-512 when the build has it, plain C otherwise (same algorithm).
 */
#ifndef HR_ENGINE_ATTENTION_H
#define HR_ENGINE_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kv-cache.h"

#define HR_ATTN_TILE 16

struct hr_attn_ctx {
    struct hr_kv_pool *kv;
    const int32_t *blocks; /* the sequence's block table */
    uint32_t layer;
    uint32_t head_dim;
    uint32_t block_tokens;
    uint32_t group;        /* query heads per KV head */
    float scale;           /* 1 / sqrt(head_dim) */
};

/* Query tokens per call for a GQA group size (rows = tokens x group <= 64,
 * at least one token). */
uint32_t hr_attn_block_tokens(uint32_t group);

/* Scratch bytes one thread needs. */
size_t hr_attn_scratch_bytes(uint32_t head_dim, uint32_t group);

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

/* Where position `pos`, KV head `h`, dimension `d` lives, for writers. */
void hr_attn_store(struct hr_kv_pool *kv, const int32_t *blocks, uint32_t layer, uint32_t n_head_kv,
                   uint32_t head_dim, int32_t pos, const float *k, const float *v);

#endif
