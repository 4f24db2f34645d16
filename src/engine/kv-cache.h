/*
 * kv-cache.h - the paged KV cache: fixed-size blocks from a pool with a byte
 * budget, refcounted so sequences (and later the prefix cache) can share
 * them.
 *
 * A block holds `block_tokens` (default 32, a multiple of 16) consecutive
 * token positions of one sequence, for every layer: per layer, K then V, in
 * the cache type (`--cache-type`): f16 by default, f32 for exactness tests,
 * or ggml's Q8_0 / Q4_0 blocks (llama.cpp's -ctk/-ctv). A sequence owns a
 * block table (struct hr_kv_seq) mapping position p to block
 * table[p / block_tokens], slot p % block_tokens.
 *
 *    pool (one mapping of n_blocks * block_bytes)
 *    +---------+---------+---------+---------+----
 *    | block 0 | block 1 | block 2 | block 3 | ...      free list + refcounts
 *    +---------+---------+---------+---------+----
 *      block = [L0 K | L0 V | L1 K | L1 V | ... ]
 *
 *   f16 / f32 (elements):
 *      K of a layer = per KV head, [head_dim][block_tokens]  (transposed)
 *      V of a layer = per KV head, [block_tokens][head_dim]
 *
 *   q8_0 / q4_0 (ggml blocks of 32 values along head_dim, per token):
 *      K of a layer = per KV head, [block_tokens][head_dim / 32] quant blocks
 *      V of a layer = per KV head, [block_tokens][head_dim / 32] quant blocks
 *        block_q8_0 (34 bytes): f16 d, int8 qs[32]          x = d * qs[i]
 *        block_q4_0 (18 bytes): f16 d, uint8 qs[16]          x = d * (nibble - 8),
 *                               low nibble of qs[i] = x[i], high = x[i + 16]
 *      so one token's K (or V) row of one head is exactly the ggml row
 *      llama.cpp's set_rows writes into its q8_0 / q4_0 cache.
 *
 * K is stored transposed in the float types so attention reads, for each
 * dimension d, the d-th component of 16 consecutive keys as one vector and
 * computes 16 scores with head_dim fused multiply-adds and no horizontal sums
 * (engine/attention.c). The quantized types keep ggml's row per token, as the
 * numbers must be llama.cpp's (a block's scale d covers 32 values of one
 * token's head): attention converts a 16-key tile of it into its own
 * transposed integer scratch (O(16 x head_dim) bytes) and takes integer dot
 * products with the query quantized to Q8_0, as ggml-cpu's flash attention
 * does. Quantized types need head_dim to be a multiple of 32 (hr_kv_pool_init
 * says so, naming both).
 *
 * Bytes per token = 2 x n_layer x n_head_kv x row bytes, where a head's row
 * is head_dim x 4 (f32), x 2 (f16), x 34/32 (q8_0) or x 18/32 (q4_0).
 *
 * Windowed KV (sliding-window layers, gpt-oss). A layer whose attention sees
 * only the last `window` positions never reads a key older than that, so
 * its K/V need not outlive the window. A pool made with a window has two
 * kinds of block in ONE pool (one free list, one budget, one count of used
 * blocks): a sequence's full table (`blocks`) holds the full-attention
 * layers' K/V, its windowed table (`wblocks`, indexed by position the same
 * way) the sliding-window layers'. The engine numbers the layers of each
 * kind from 0 and sets n_layer to the larger count, so either kind fits a
 * block (gpt-oss alternates them: half the layers each, no slot wasted).
 * As a sequence grows, hr_kv_seq_slide returns the windowed blocks no later
 * query can reach to the pool (their table entries become -1):
 *
 *    position  0        32       64       96       128      160  n=170
 *    blocks    [  0  ]  [  1  ]  [  2  ]  [  3  ]  [  4  ]  [  5 ..]   full layers: every block
 *    wblocks   [ -1  ]  [  6  ]  [  7  ]  [  8  ]  [  9  ]  [ 10 ..]   window 128: from block 1
 *
 * The rule (hr_kv_window_first_block): a sequence of n positions keeps the
 * windowed blocks a query at position floor(n / B) x B could read, i.e. from
 * the 32-aligned start of that query's window (attention visits keys in
 * aligned groups of HR_KV_WINDOW_ALIGN). Using the last block boundary
 * rather than n itself costs at most one block and means a prefix cut at
 * any full block it ends on still has its whole window (prefix-cache.h).
 * A sequence therefore holds ceil(n / B) full blocks plus at most
 * hr_kv_window_max_blocks(pool, T) windowed ones while a step of T tokens
 * runs (ceil(window / B) + 1 for decoding): hr_kv_blocks_for.
 *
 * Memory: the pool reserves address space for its budget up front
 * (MAP_NORESERVE) and pages are committed as blocks are first written, so
 * accounted KV memory is blocks in use x block bytes and nothing else.
 * hr_kv_pool_trim gives the pages of free blocks back to the OS (the first
 * step of the reclaim chain).
 *
 * Threads: the pool and sequences belong to the engine thread. Blocks are
 * written by the forward pass's workers, each to distinct slots.
 */
#ifndef HR_ENGINE_KV_CACHE_H
#define HR_ENGINE_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "gguf/ggml-types.h"

#define HR_KV_DEFAULT_BLOCK_TOKENS 32

struct hr_kv_config {
    uint32_t n_layer;
    uint32_t n_head_kv;
    uint32_t head_dim;
    uint32_t block_tokens;     /* 0: default */
    enum hr_ggml_type type;    /* HR_GGML_F16, F32, Q8_0 or Q4_0 */
    uint64_t budget_bytes;     /* the pool never holds more */
    /* Sliding window in tokens of the windowed block kind; 0: one kind only
     * (no windowed tables). With a window, n_layer is the layers of the
     * larger kind (see "Windowed KV" above). */
    uint32_t window;
};

/* Attention reads keys in aligned groups of this many positions
 * (attention.c's HR_ATTN_KEYS), so a window's first block is that of the
 * 32-aligned position at or below the window's first key. */
#define HR_KV_WINDOW_ALIGN 32

struct hr_kv_pool;

enum hr_status hr_kv_pool_init(const struct hr_kv_config *cfg, struct hr_kv_pool **out,
                               struct hr_err *err);
void hr_kv_pool_free(struct hr_kv_pool *pool);

uint64_t hr_kv_block_bytes(const struct hr_kv_pool *pool);
uint32_t hr_kv_block_tokens(const struct hr_kv_pool *pool);
uint32_t hr_kv_n_blocks(const struct hr_kv_pool *pool);      /* capacity */
uint32_t hr_kv_n_free(const struct hr_kv_pool *pool);
uint32_t hr_kv_n_used(const struct hr_kv_pool *pool);
/* The most blocks ever in use at once (the pool's high-water mark). */
uint32_t hr_kv_n_used_peak(const struct hr_kv_pool *pool);
enum hr_ggml_type hr_kv_type(const struct hr_kv_pool *pool);
/* The windowed kind's window in tokens; 0 when the pool has none. */
uint32_t hr_kv_window(const struct hr_kv_pool *pool);
/* Bytes of one KV head's K (or V) in one layer of one block: block_tokens rows. */
size_t hr_kv_head_bytes(const struct hr_kv_pool *pool);

/* Bytes a block needs for a model, without creating a pool (for planning);
 * the real bytes of the cache type (quant blocks included). 0 for a type or
 * head dim hr_kv_pool_init refuses. */
uint64_t hr_kv_block_bytes_for(const struct hr_kv_config *cfg);

/* Bytes of one token's K (or V) of one KV head: head_dim values of `type`;
 * 0 when `type` is not a cache type or head_dim does not fit its blocks. */
size_t hr_kv_row_bytes(enum hr_ggml_type type, uint32_t head_dim);

/*
 * Parses a cache type name as the CLI spells it: "f16", "f32", "q8_0" or
 * "q4_0" (llama.cpp's -ctk/-ctv names). HR_OK and *out set, or
 * HR_ERR_INVALID with a message listing the accepted names (the caller
 * prefixes the flag).
 */
enum hr_status hr_kv_type_parse(const char *name, enum hr_ggml_type *out, struct hr_err *err);
/* The CLI name of a cache type ("f16", ..., "q4_0"); "?" for another type. */
const char *hr_kv_type_name(enum hr_ggml_type type);

/*
 * Usable blocks. A pool whose bytes come and go in groups (the CUDA
 * engine's KV on virtual memory, mapped as it is needed and given back
 * when another process needs the device) hands out only blocks
 * [0, usable). Lowering it takes the free blocks at and above it out of
 * circulation (blocks in use there leave as they are freed); raising it
 * brings the free ones back. A new pool has usable == n_blocks;
 * hr_kv_n_free counts free usable blocks, hr_kv_n_used every block with
 * references wherever it lies.
 */
void hr_kv_pool_set_usable(struct hr_kv_pool *pool, uint32_t n);
uint32_t hr_kv_pool_usable(const struct hr_kv_pool *pool);
/* Blocks in use at or above `from`: what keeps the bytes from there up. */
uint32_t hr_kv_n_used_from(const struct hr_kv_pool *pool, uint32_t from);

/* Takes a free block with refcount 1; returns -1 when none is free. */
int32_t hr_kv_alloc_block(struct hr_kv_pool *pool);
void hr_kv_ref_block(struct hr_kv_pool *pool, int32_t block);
/* Drops one reference; the block is free again at zero. */
void hr_kv_unref_block(struct hr_kv_pool *pool, int32_t block);
uint32_t hr_kv_refcount(const struct hr_kv_pool *pool, int32_t block);

/* Start of layer `layer`'s K (or V) in `block`; head h starts h x hr_kv_head_bytes later. */
void *hr_kv_block_k(struct hr_kv_pool *pool, int32_t block, uint32_t layer);
void *hr_kv_block_v(struct hr_kv_pool *pool, int32_t block, uint32_t layer);

/* Returns the pages of free blocks to the OS; returns bytes released. */
uint64_t hr_kv_pool_trim(struct hr_kv_pool *pool);

/*
 * A sequence's block table. Its capacity is fixed at init (for the longest
 * context the sequence may reach), so growing during a step never allocates.
 */
struct hr_kv_seq {
    int32_t *blocks;   /* full layers: block of positions [i*B, (i+1)*B) */
    uint32_t n_blocks;
    uint32_t cap_blocks;
    uint32_t n_tokens; /* positions already written */
    /* Windowed layers (pools with a window; else unused): the same indexing,
     * entries [0, w_first) released (-1), [w_first, n_wblocks) held. The
     * table shares the allocation of `blocks` (cap_blocks entries each). */
    int32_t *wblocks;
    uint32_t n_wblocks;
    uint32_t w_first;
};

enum hr_status hr_kv_seq_init(struct hr_kv_seq *seq, uint32_t max_tokens, uint32_t block_tokens,
                              struct hr_err *err);
/* Releases the seq's blocks to the pool and its table; accepts a zeroed seq. */
void hr_kv_seq_free(struct hr_kv_seq *seq, struct hr_kv_pool *pool);
/* Drops all blocks (refcounts) but keeps the table, for reuse. */
void hr_kv_seq_clear(struct hr_kv_seq *seq, struct hr_kv_pool *pool);

/* Blocks a sequence of `n_tokens` positions needs beyond the `n_blocks` it has. */
uint32_t hr_kv_blocks_needed(uint32_t n_blocks, uint32_t n_tokens, uint32_t block_tokens);

/* The first windowed block a sequence of n_tokens positions keeps (see
 * "Windowed KV"): every block before it is out of every later query's
 * window. 0 for window 0. */
uint32_t hr_kv_window_first_block(uint32_t window, uint32_t n_tokens, uint32_t block_tokens);

/* Blocks of both kinds the pool must hand a sequence so that it can take
 * n_new more positions (what hr_kv_seq_reserve would allocate). Accepts a
 * zeroed seq (no tables). */
uint32_t hr_kv_seq_new_blocks(const struct hr_kv_seq *seq, const struct hr_kv_pool *pool,
                              uint32_t n_new);
/* Blocks of both kinds the sequence holds now. */
uint32_t hr_kv_seq_held_blocks(const struct hr_kv_seq *seq);

/* The most windowed blocks a sequence holds while a step of up to
 * step_tokens positions runs (after the slides of the steps before it);
 * 0 when the pool has no window. O(window / B + 64). */
uint32_t hr_kv_window_max_blocks(const struct hr_kv_pool *pool, uint32_t step_tokens);

/* The most blocks (both kinds) a sequence of n_tokens positions holds when
 * its steps take at most step_tokens positions: ceil(n / B), plus, with a
 * window, min(ceil(n / B), hr_kv_window_max_blocks(step_tokens)). Monotone
 * in both arguments. What admission and the scheduler price per sequence. */
uint32_t hr_kv_blocks_for(const struct hr_kv_pool *pool, uint32_t n_tokens, uint32_t step_tokens);
/* The same two from a pool's config, before the pool exists (budgets). */
uint32_t hr_kv_config_blocks_for(const struct hr_kv_config *cfg, uint32_t n_tokens,
                                 uint32_t step_tokens);
uint32_t hr_kv_config_window_blocks(const struct hr_kv_config *cfg, uint32_t step_tokens);

/* The longest sequence the whole pool holds under hr_kv_blocks_for(., ., step_tokens). */
uint64_t hr_kv_pool_max_tokens(const struct hr_kv_pool *pool, uint32_t step_tokens);

/* Makes room for `n_new` more positions: allocates the blocks (both tables
 * in a windowed pool); HR_ERR_NOMEM (and nothing allocated) when the pool
 * cannot, HR_ERR_LIMIT past capacity. */
enum hr_status hr_kv_seq_reserve(struct hr_kv_seq *seq, struct hr_kv_pool *pool, uint32_t n_new,
                                 struct hr_err *err);

/* Whether a sequence may continue at n_tokens: true without a window; with
 * one, its two tables cover the same positions and it holds the window's
 * blocks (a prefix-cache hit restores them, prefix-cache.h). Both engines
 * refuse a step otherwise. */
bool hr_kv_seq_window_held(const struct hr_kv_seq *seq, const struct hr_kv_pool *pool);

/* Returns to the pool the windowed blocks before
 * hr_kv_window_first_block(n_tokens) (their entries become -1); call after
 * n_tokens grows. Returns how many blocks were released (0 without a
 * window). The engine calls it after every step. */
uint32_t hr_kv_seq_slide(struct hr_kv_seq *seq, struct hr_kv_pool *pool);

#endif
