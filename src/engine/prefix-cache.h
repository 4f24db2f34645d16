/*
 * prefix-cache.h - the prefix cache: full KV blocks remembered by the tokens
 * that produced them, so a request whose prompt starts with the same tokens
 * shares those blocks (by reference count) instead of recomputing them.
 *
 * Identity. Block i of a sequence holds positions [i*B, (i+1)*B), B =
 * hr_kv_block_tokens. Its KV depends on every token before it, so its key is
 * its whole prefix, summarized by a hash chain:
 *
 *    h_0   = seed(model_fingerprint)
 *    h_i+1 = mix(h_i, tokens[i*B .. (i+1)*B))        64-bit, xxhash64-style folding
 *
 * The same tokens at another position, or after a different earlier block,
 * hash differently. The hash only indexes the table: an entry also stores
 * its B token ids and the serial number of its parent entry (every entry gets
 * a new 64-bit serial when it is inserted; serials are never reused), and a
 * lookup compares both. By induction from block 0 (whose parent is the root),
 * a match is the exact token prefix, so a 64-bit collision can never return
 * wrong KV; it only costs a longer bucket chain. (Comparing the parent's
 * *hash* instead would leave a 2^-64 hole: two prefixes with one hash.)
 *
 *    tokens:  [ t0 .. t31 | t32 .. t63 | t64 .. t95 | t96 .. t99 ]
 *    blocks:  [  entry A  |  entry B   |  entry C   |  partial   ]  never cached
 *    chain:    root <- A  <-    B      <-     C
 *
 * Only full blocks. A partial last block would be written by the next request
 * that continues it (its remaining slots), so sharing it would need
 * copy-on-write: copy the block before the first write. We do not share it:
 * at most B-1 tokens per request are recomputed, and no block is ever written
 * while another sequence can read it.
 *
 * Sharing is exact: the kernels are batch invariant (architecture.md), so a
 * block's KV is the same bits however it was batched or chunked, and a
 * request served from the cache produces the tokens it produces cold.
 *
 * References. The cache holds exactly one reference (hr_kv_ref_block) on
 * every block it indexes, and indexes a block at most once. Each entry is
 * either
 *
 *    pinned     the block is also referenced by a sequence (refcount > 1)
 *    evictable  only the cache references it (refcount == 1); it sits in the
 *               LRU list, and hr_pcache_evict gives it back to the pool
 *
 *        hr_pcache_insert (a new block, still held by its sequence)
 *               |
 *               v
 *         +-----------+   hr_pcache_release_blocks / _seq (refcount falls to 1)
 *         |  pinned   | ----------------------------------------+
 *         +-----------+                                         v
 *               ^                                        +-------------+
 *               +--------------------------------------- |  evictable  |
 *                 hr_pcache_lookup (one reference        +-------------+
 *                 for the caller)                               |
 *                               hr_pcache_evict, or room for    v
 *                               an insert                block back to the pool
 *
 * The cache cannot see references a sequence drops with hr_kv_unref_block or
 * hr_kv_seq_clear, so a caller that shares cached blocks must release them
 * through hr_pcache_release_seq / hr_pcache_release_blocks: that keeps
 * hr_pcache_n_evictable exact and O(1). A block released behind the cache's
 * back stays pinned (not evictable) until hr_pcache_free. The other way is
 * safe: eviction re-reads the refcount of every candidate, and an entry that
 * turns out to be referenced again (a caller's own hr_kv_ref_block) is moved
 * to pinned instead of being evicted, so a referenced block is never evicted.
 *
 * LRU order, leaves first. Evicting a parent while its child stays cached
 * makes the child unreachable (lookups walk from block 0). So a chain that is
 * used is placed at the most-recent end in reverse: its first block most
 * recent, its last block least recent; and a block that becomes evictable
 * later than its parent goes just before the parent, not at the recent end.
 * Every use of a child walks through its parent, so a parent is normally more
 * recent than its children and LRU evicts leaves first. A child can still be
 * orphaned: its parent evicted while the child is pinned (the sequence that
 * holds the child computed the parent's tokens in a block of its own). An
 * orphan never matches again (its parent's serial is gone for good) and is
 * just wasted until LRU evicts it.
 *
 * Windowed pools (kv-cache.h, "Windowed KV"): a prefix of k blocks is only
 * worth reusing with the sliding-window layers' blocks of its window,
 * [hr_kv_window_first_block(k x B), k), and a sequence holds those only for
 * where it is now. So hr_pcache_insert_seq makes the entry at the
 * sequence's last full block carry that window (one reference per block,
 * dropped when the entry is evicted), hr_pcache_lookup and _peek stop at the
 * deepest entry on the walk that carries one, and hr_pcache_restore_window
 * puts that window in the sequence: a prefix is reused up
 * to where some sequence ended (a conversation's next turn continues it)
 * and not at arbitrary earlier blocks, whose windows are gone. Windowed
 * blocks are never indexed themselves; hr_pcache_n_idle_wblocks counts
 * those only the cache still holds.
 *
 * Recurrent state snapshots (hybrid models: qwen35, qwen35moe, qwen3next).
 * A Gated DeltaNet layer's state at position p depends on every token
 * before p, and the KV of the attention layers alone cannot resume a
 * sequence there. A cache made by hr_pcache_init_snapshots keeps, for some
 * entries, a copy of the whole recurrent state at the end of that entry's
 * block (hr_pcache_save_snapshot), and hands out only prefixes that end on
 * such an entry: peek and lookup stop at the deepest block with a snapshot,
 * and hr_pcache_snapshot gives the state to copy into the sequence's slot.
 *
 *    tokens:  [ block 0 | block 1 | block 2 | block 3 |partial]
 *    snaps:                  S1                  S3            a lookup takes
 *                                                              blocks 0..3 and S3
 *
 * Snapshots live in their own slot pool (engine/state-pool.h; a fixed
 * number of slots, allocated at init, resident only while bound). They are
 * always evictable, like idle blocks: a restore copies the state, so nothing
 * references a snapshot after the call. Saving into a full pool drops the
 * least recently used snapshot (a linear scan of the slots: a few per
 * concurrent request); evicting an entry drops its snapshot; and
 * hr_pcache_evict_snapshots drops them under memory pressure. Cost: the
 * model's state bytes per snapshot (hr_pcache_snapshot_bytes) and one copy
 * of them per save and per restore.
 *
 * Memory: everything is allocated by hr_pcache_init (entries, their token
 * ids, buckets, a block -> entry map); no call allocates afterwards, so the
 * scheduler loop may call any of them. Per entry: 64 bytes + 4*B for its
 * tokens (and 4 per windowed block it can carry), plus 4 bytes per bucket and
 * 4 bytes per pool block (8 with a window).
 *
 * Threads: all calls on the engine thread (the owner of the KV pool); not
 * thread-safe. The cache must be freed before its pool.
 *
 * Costs (B = block tokens, k = blocks walked): lookup, peek, insert O(k*B)
 * (one hash and one compare per block, expected O(1) bucket chains at load
 * <= 1); evict O(n) plus O(1) per entry found referenced again; release
 * O(blocks); counters O(1); hr_pcache_check O(entries*B + buckets + pool blocks).
 */
#ifndef HR_ENGINE_PREFIX_CACHE_H
#define HR_ENGINE_PREFIX_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/kv-cache.h"

struct hr_pcache;

/*
 * Makes a cache over `pool` for `max_entries` blocks (clamped to the pool's
 * capacity: an entry indexes a distinct block). `model_fingerprint` must
 * change whenever anything that changes the KV changes: the weights, the KV
 * type, RoPE settings. The cache borrows the pool, which must outlive it.
 * Returns HR_ERR_INVALID for max_entries == 0, HR_ERR_NOMEM when the tables
 * cannot be allocated; *out is NULL on failure.
 */
enum hr_status hr_pcache_init(struct hr_kv_pool *pool, uint64_t model_fingerprint,
                              uint32_t max_entries, struct hr_pcache **out, struct hr_err *err);
/*
 * hr_pcache_init for a hybrid model: also a pool of `n_snapshots` state
 * snapshots of `snapshot_floats` floats each (the model's whole recurrent
 * state of one sequence). With n_snapshots or snapshot_floats 0 it is
 * hr_pcache_init. Errors as hr_pcache_init's.
 */
enum hr_status hr_pcache_init_snapshots(struct hr_kv_pool *pool, uint64_t model_fingerprint,
                                        uint32_t max_entries, uint32_t n_snapshots,
                                        uint64_t snapshot_floats, struct hr_pcache **out,
                                        struct hr_err *err);
/* Drops the cache's reference on every indexed block and frees the cache; accepts NULL. */
void hr_pcache_free(struct hr_pcache *pc);

/*
 * The longest cached prefix of tokens[0..n): walks full blocks from block 0
 * while each block's key is cached, at most `max_blocks`. Writes the block
 * ids to blocks_out (room for max_blocks), takes one reference on each for
 * the caller (who puts them in its hr_kv_seq and gives them back with
 * hr_pcache_release_seq), marks them recently used (pinned while held) and
 * returns the count. A prompt of exactly k full blocks still needs its last
 * token computed for logits: pass max_blocks = (n - 1) / B to keep one.
 * With snapshots the count ends at the deepest block that has one.
 */
uint32_t hr_pcache_lookup(struct hr_pcache *pc, const int32_t *tokens, uint32_t n,
                          uint32_t max_blocks, int32_t *blocks_out);
/* (On a windowed pool the count ends at the deepest block whose entry
 * carries its window; hr_pcache_restore_window then gives the window.) */

/*
 * After hr_pcache_lookup put its k blocks in seq (seq->n_blocks = k,
 * seq->n_tokens = k x B, no windowed blocks yet): on a windowed pool, fills
 * seq's windowed table with the hit's window, one reference per block
 * (entries before it -1), released with the rest by hr_pcache_release_seq.
 * Nothing on a pool without a window.
 */
void hr_pcache_restore_window(struct hr_pcache *pc, struct hr_kv_seq *seq);

/* hr_pcache_lookup's count without references or LRU changes (admission pricing, usage);
 * with snapshots, up to the deepest block that has one. */
uint32_t hr_pcache_peek(const struct hr_pcache *pc, const int32_t *tokens, uint32_t n);

/*
 * After a sequence wrote positions [0, n_full_blocks*B) into blocks[0..n_full_blocks)
 * (which it still holds), indexes each block not yet cached; the cache takes
 * a reference on each new one. A key already cached is touched, whether
 * under the same block id or another (then this block is not indexed; its
 * children chain from the cached one, whose KV is the same). When the table
 * is full, LRU evictable entries are evicted to make room (never one touched
 * by this call, which would orphan what follows); when none is evictable,
 * insertion stops there. Never fails. Returns how many blocks were added.
 * A block id already indexed under another key (a caller bug) stops it too.
 */
uint32_t hr_pcache_insert(struct hr_pcache *pc, const int32_t *tokens, uint32_t n_full_blocks,
                          const int32_t *blocks);

/* hr_pcache_insert of a sequence's full blocks (seq->n_tokens / B of
 * them), and in a windowed pool the window of the last one, carried by its
 * entry when the sequence still holds it and the entry has none. */
uint32_t hr_pcache_insert_seq(struct hr_pcache *pc, const int32_t *tokens,
                              const struct hr_kv_seq *seq);

/*
 * Evicts up to n evictable blocks, least recently used first, dropping the
 * cache's reference (the pool gets each block back). Entries referenced by a
 * sequence are never evicted. Returns how many were evicted.
 */
uint32_t hr_pcache_evict(struct hr_pcache *pc, uint32_t n);

/*
 * Drops one reference on each of blocks[0..n), as hr_kv_unref_block does,
 * and makes each cached block whose only holder is now the cache evictable
 * (the first block most recent, so leaves go first).
 */
void hr_pcache_release_blocks(struct hr_pcache *pc, const int32_t *blocks, uint32_t n);
/* hr_kv_seq_clear through the cache: releases seq's blocks (both tables) and
 * empties it (tables kept). */
void hr_pcache_release_seq(struct hr_pcache *pc, struct hr_kv_seq *seq);

/*
 * Snapshots (a cache from hr_pcache_init_snapshots; otherwise these do
 * nothing and return false, NULL or 0). hr_pcache_save_snapshot copies
 * `state` (snapshot_floats floats: the recurrent state after exactly
 * n_blocks*B tokens of `tokens`) for the entry of block n_blocks-1, which
 * must be cached (insert first); false when it is not. A full snapshot pool
 * gives up its least recently used snapshot. Allocates nothing.
 */
bool hr_pcache_save_snapshot(struct hr_pcache *pc, const int32_t *tokens, uint32_t n_blocks,
                             const float *state);
/* The same, with the state written into the snapshot by fill(ctx, dst)
 * (a device's copy to host): when fill returns false the snapshot is not
 * kept and the call returns false. */
bool hr_pcache_save_snapshot_fn(struct hr_pcache *pc, const int32_t *tokens, uint32_t n_blocks,
                                bool (*fill)(void *ctx, float *dst), void *ctx);
/* The snapshot of the entry that indexes `block` (e.g. the last block a
 * lookup returned), marked recently used; NULL when it has none. Valid until
 * the next call that saves or evicts. */
const float *hr_pcache_snapshot(struct hr_pcache *pc, int32_t block);
/* Drops up to n snapshots, least recently used first (their blocks stay
 * cached); returns how many. */
uint32_t hr_pcache_evict_snapshots(struct hr_pcache *pc, uint32_t n);
/* Snapshots held, the pool's slots, and the bytes of one (the `cache`
 * category holds n_snapshots x snapshot_bytes). O(1). */
uint32_t hr_pcache_n_snapshots(const struct hr_pcache *pc);
uint32_t hr_pcache_snapshot_slots(const struct hr_pcache *pc);
uint64_t hr_pcache_snapshot_bytes(const struct hr_pcache *pc);

uint32_t hr_pcache_n_entries(const struct hr_pcache *pc);
/* Entries only the cache references: the blocks hr_pcache_evict can return. O(1). */
uint32_t hr_pcache_n_evictable(const struct hr_pcache *pc);
/* Windowed blocks whose only references are entries' windows: cache memory,
 * not a sequence's KV. O(pool blocks); 0 without a window. */
uint32_t hr_pcache_n_idle_wblocks(const struct hr_pcache *pc);
/* Whether `block` is indexed. O(1). */
bool hr_pcache_has_block(const struct hr_pcache *pc, int32_t block);

struct hr_pcache_stats {
    uint64_t lookup_tokens;     /* tokens passed to hr_pcache_lookup */
    uint64_t hit_tokens;        /* tokens it found cached (blocks x B) */
    uint64_t evicted_blocks;    /* by hr_pcache_evict and by inserts making room */
    uint64_t inserted_blocks;   /* new entries */
    uint64_t saved_snapshots;   /* recurrent state snapshots saved */
    uint64_t evicted_snapshots; /* dropped: evicted with their block, or to make room */
};
void hr_pcache_stats(const struct hr_pcache *pc, struct hr_pcache_stats *out);

/*
 * Checks every internal invariant (lists, counts, bucket chains, the block
 * map, hashes, serials, and the pinned/evictable split against the pool's
 * refcounts, which also fails when a caller took or dropped references on
 * cached blocks behind the cache's back). HR_OK, or HR_ERR_INVALID naming
 * the first broken one. O(entries*B + buckets + pool blocks): tests and
 * debugging only.
 */
enum hr_status hr_pcache_check(const struct hr_pcache *pc, struct hr_err *err);

/*
 * Tests only: compares and indexes by the low `bits` bits (0..64) of every
 * hash, so that unrelated blocks collide and the token and parent comparisons are
 * exercised (0: every block has the same hash). Call on an empty cache.
 */
void hr_pcache_test_set_hash_bits(struct hr_pcache *pc, unsigned bits);

#endif
