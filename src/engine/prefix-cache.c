/*
 * prefix-cache.c - full KV blocks indexed by their token prefix; see
 * prefix-cache.h for the identity, reference and eviction rules.
 *
 * Layout: a fixed array of entries (their token ids in a parallel array of
 * n_entries x B int32), chained hashing into a power-of-two bucket array
 * (singly linked through entry.chain, NIL-terminated), free entries on a
 * stack threaded through the same link, the LRU list of evictable entries
 * doubly linked through entry.prev/next (head = least recent), and a map from
 * pool block id to the entry that indexes it. Everything is an index into a
 * preallocated array, so no call after init allocates.
 */
#include "engine/prefix-cache.h"

#include <stdlib.h>
#include <string.h>

#include "engine/state-pool.h"

#define NIL UINT32_MAX

enum entry_state { ENTRY_FREE, ENTRY_PINNED, ENTRY_EVICTABLE };

struct entry {
    uint64_t hash;          /* the chained hash h_i (compared under hash_mask) */
    uint64_t parent_hash;   /* h_i-1, so hr_pcache_check can recompute h_i */
    uint64_t serial;        /* unique, never reused; children store it */
    uint64_t parent_serial; /* 0: block 0 of a sequence (the root) */
    uint64_t walk;          /* the insert walk that last touched it */
    int32_t block;
    uint32_t parent_index; /* the parent's entry, valid while its serial matches */
    uint32_t chain;        /* next entry in the bucket (or on the free stack) */
    uint32_t prev, next;   /* LRU links, while evictable */
    int32_t snap;          /* its recurrent state snapshot's slot, or -1 */
    uint8_t state;
    uint8_t n_w;           /* windowed blocks it carries (windowed pools; prefix-cache.h) */
};

struct hr_pcache {
    struct hr_kv_pool *pool;
    uint32_t block_tokens;
    uint64_t seed;
    uint64_t hash_mask;
    struct entry *entries; /* [cap] */
    int32_t *tokens;       /* [cap][block_tokens] */
    uint32_t cap;
    uint32_t *buckets; /* [n_buckets] heads */
    uint32_t n_buckets;
    uint32_t *entry_of_block; /* [pool blocks] NIL or the entry */
    uint32_t n_pool_blocks;
    uint32_t free_head;
    uint32_t n_entries;
    uint32_t lru_head, lru_tail; /* evictable entries; head is least recent */
    uint32_t n_evictable;
    uint64_t next_serial;
    uint64_t walk;
    uint32_t last_entry, last_depth; /* where the last insert walk ended */
    /* Windowed pools: each entry's window ([cap][n_wmax] block ids, its
     * first n_w used) and the references the cache holds per pool block. */
    uint32_t window, n_wmax;
    int32_t *wblocks;
    uint32_t *wref;
    struct hr_pcache_stats stats;
    /* Recurrent state snapshots (hybrid models; NULL otherwise): slot i is
     * owned by entry snap_entry[i] (the owner pointer is the entry's
     * address) and was last used at snap_used[i], for LRU among them. */
    struct hr_state_pool *snaps;
    uint32_t *snap_entry;
    uint64_t *snap_used;
    uint64_t snap_clock;
};

/* ---- hashing ------------------------------------------------------------- */

/* xxhash64's primes and avalanche; the folding is xxhash64's round over
 * 64-bit lanes, each lane two token ids. Chaining starts from the parent's
 * hash, so position and history are part of every block's hash. */
#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull

static uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t avalanche(uint64_t h)
{
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

static uint64_t hash_block(uint64_t parent, const int32_t *t, uint32_t n)
{
    uint64_t h = parent ^ P4;
    uint32_t i = 0;
    for (; i + 2 <= n; i += 2) {
        uint64_t k = (uint64_t)(uint32_t)t[i] | (uint64_t)(uint32_t)t[i + 1] << 32;
        k *= P2;
        k = rotl64(k, 31);
        k *= P1;
        h ^= k;
        h = rotl64(h, 27) * P1 + P4;
    }
    if (i < n) {
        h ^= (uint64_t)(uint32_t)t[i] * P1;
        h = rotl64(h, 23) * P2 + P3;
    }
    return avalanche(h + n);
}

/* ---- the LRU list of evictable entries ----------------------------------- */

static void lru_unlink(struct hr_pcache *pc, uint32_t i)
{
    struct entry *e = &pc->entries[i];
    if (e->prev != NIL)
        pc->entries[e->prev].next = e->next;
    else
        pc->lru_head = e->next;
    if (e->next != NIL)
        pc->entries[e->next].prev = e->prev;
    else
        pc->lru_tail = e->prev;
    e->prev = e->next = NIL;
    pc->n_evictable--;
}

/* Links i just before `before` (towards the least recent end), or at the
 * most recent end when before is NIL. */
static void lru_link_before(struct hr_pcache *pc, uint32_t i, uint32_t before)
{
    struct entry *e = &pc->entries[i];
    e->prev = before == NIL ? pc->lru_tail : pc->entries[before].prev;
    e->next = before;
    if (e->prev != NIL)
        pc->entries[e->prev].next = i;
    else
        pc->lru_head = i;
    if (before != NIL)
        pc->entries[before].prev = i;
    else
        pc->lru_tail = i;
    pc->n_evictable++;
}

/*
 * Files entry i as pinned or evictable from its block's refcount. An
 * evictable entry is (re)placed as recently used, but never more recent than
 * its parent when it can help it, so that LRU evicts leaves first. `*anchor`
 * is the entry this walk placed last (NIL at the start of a walk): i goes
 * just before it, so a walk over blocks 0, 1, 2 leaves ... 2 1 0 at the
 * recent end. The first entry a walk places goes just before its parent if
 * the parent is in the list (a sequence releasing a block whose cached parent
 * is another sequence's block), else at the recent end. In an insert walk
 * every entry's parent was classified just before it, so the walk's entries
 * are contiguous at the recent end (lru_victim relies on it).
 */
static void classify(struct hr_pcache *pc, uint32_t i, uint32_t *anchor)
{
    struct entry *e = &pc->entries[i];
    bool evictable = hr_kv_refcount(pc->pool, e->block) == 1;
    if (e->state == ENTRY_EVICTABLE) lru_unlink(pc, i);
    if (evictable) {
        uint32_t before = *anchor, p = e->parent_index;
        if (before == NIL && p != NIL && pc->entries[p].state == ENTRY_EVICTABLE &&
            pc->entries[p].serial == e->parent_serial)
            before = p;
        lru_link_before(pc, i, before);
        *anchor = i;
        e->state = ENTRY_EVICTABLE;
    } else {
        e->state = ENTRY_PINNED;
    }
}

/* ---- the table ----------------------------------------------------------- */

static uint32_t bucket_of(const struct hr_pcache *pc, uint64_t hash)
{
    return (uint32_t)(hash & pc->hash_mask & (pc->n_buckets - 1));
}

static const int32_t *entry_tokens(const struct hr_pcache *pc, uint32_t i)
{
    return pc->tokens + (size_t)i * pc->block_tokens;
}

/* The entry whose key is (parent_serial, t), or NIL. */
static uint32_t find(const struct hr_pcache *pc, uint64_t hash, uint64_t parent_serial,
                     const int32_t *t)
{
    for (uint32_t i = pc->buckets[bucket_of(pc, hash)]; i != NIL; i = pc->entries[i].chain) {
        const struct entry *e = &pc->entries[i];
        if (((e->hash ^ hash) & pc->hash_mask) == 0 && e->parent_serial == parent_serial &&
            memcmp(entry_tokens(pc, i), t, pc->block_tokens * sizeof(int32_t)) == 0)
            return i;
    }
    return NIL;
}

/* Drops the references entry i holds on its window's blocks. */
static void drop_window(struct hr_pcache *pc, uint32_t i)
{
    struct entry *e = &pc->entries[i];
    const int32_t *w = pc->wblocks + (size_t)i * pc->n_wmax;
    for (uint32_t k = 0; k < e->n_w; k++) {
        pc->wref[w[k]]--;
        hr_kv_unref_block(pc->pool, w[k]);
    }
    e->n_w = 0;
}

/* Frees entry i's snapshot, if it has one (its pages go back to the OS). */
static void drop_snapshot(struct hr_pcache *pc, uint32_t i)
{
    struct entry *e = &pc->entries[i];
    if (e->snap < 0) return;
    hr_state_release(pc->snaps, e);
    pc->snap_entry[e->snap] = NIL;
    e->snap = -1;
    pc->stats.evicted_snapshots++;
}

/* Removes evictable entry i and drops its reference: the block may go back
 * to the pool. */
static void evict_entry(struct hr_pcache *pc, uint32_t i)
{
    struct entry *e = &pc->entries[i];
    uint32_t *link = &pc->buckets[bucket_of(pc, e->hash)];
    while (*link != i) {
        HR_ASSERT(*link != NIL);
        link = &pc->entries[*link].chain;
    }
    *link = e->chain;
    lru_unlink(pc, i);
    drop_snapshot(pc, i);
    pc->entry_of_block[e->block] = NIL;
    hr_kv_unref_block(pc->pool, e->block);
    drop_window(pc, i);
    e->state = ENTRY_FREE;
    e->block = -1;
    e->chain = pc->free_head;
    pc->free_head = i;
    pc->n_entries--;
    pc->stats.evicted_blocks++;
}

/*
 * The least recently used entry that can really be evicted, skipping (and
 * moving to pinned) entries that a caller referenced again behind the
 * cache's back. With `walk` != 0, stops at an entry that walk touched: the
 * walk's entries are the recent end of the list, so nothing older is left.
 */
static uint32_t lru_victim(struct hr_pcache *pc, uint64_t walk)
{
    while (pc->lru_head != NIL) {
        uint32_t i = pc->lru_head;
        struct entry *e = &pc->entries[i];
        if (walk && e->walk == walk) return NIL;
        if (hr_kv_refcount(pc->pool, e->block) == 1) return i;
        lru_unlink(pc, i);
        e->state = ENTRY_PINNED;
    }
    return NIL;
}

enum hr_status hr_pcache_init(struct hr_kv_pool *pool, uint64_t model_fingerprint,
                              uint32_t max_entries, struct hr_pcache **out, struct hr_err *err)
{
    return hr_pcache_init_snapshots(pool, model_fingerprint, max_entries, 0, 0, out, err);
}

enum hr_status hr_pcache_init_snapshots(struct hr_kv_pool *pool, uint64_t model_fingerprint,
                                        uint32_t max_entries, uint32_t n_snapshots,
                                        uint64_t snapshot_floats, struct hr_pcache **out,
                                        struct hr_err *err)
{
    *out = NULL;
    if (max_entries == 0) return hr_err_set(err, HR_ERR_INVALID, "prefix cache of 0 entries");
    uint32_t n_pool = hr_kv_n_blocks(pool);
    if (max_entries > n_pool) max_entries = n_pool;
    struct hr_pcache *pc = calloc(1, sizeof(*pc));
    if (!pc) return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the prefix cache");
    pc->pool = pool;
    pc->block_tokens = hr_kv_block_tokens(pool);
    pc->seed = avalanche(model_fingerprint ^ P1) ^ P3;
    pc->hash_mask = UINT64_MAX;
    pc->cap = max_entries;
    /* Load factor <= 1: expected chains are O(1) long. */
    pc->n_buckets = 1;
    while (pc->n_buckets < max_entries) pc->n_buckets <<= 1;
    pc->n_pool_blocks = n_pool;
    pc->window = hr_kv_window(pool);
    if (pc->window) {
        /* An entry at depth k carries blocks [first(k x B), k): fewer than
         * a decoding sequence holds at most. */
        pc->n_wmax = hr_kv_window_max_blocks(pool, 1);
        /* A window past 255 blocks (8K tokens) is carried by no entry, so
         * such a model gets no hits: the entries' memory would be large. */
        if (pc->n_wmax > UINT8_MAX)
            pc->n_wmax = 0;
        pc->wblocks = malloc(((size_t)max_entries * pc->n_wmax + 1) * sizeof(int32_t));
        pc->wref = calloc(n_pool, sizeof(*pc->wref));
        if (!pc->wblocks || !pc->wref) {
            hr_pcache_free(pc);
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a prefix cache of %u "
                              "entries", max_entries);
        }
    }
    pc->entries = calloc(max_entries, sizeof(*pc->entries));
    pc->tokens = malloc((size_t)max_entries * pc->block_tokens * sizeof(int32_t));
    pc->buckets = malloc((size_t)pc->n_buckets * sizeof(*pc->buckets));
    pc->entry_of_block = malloc((size_t)n_pool * sizeof(*pc->entry_of_block));
    if (!pc->entries || !pc->tokens || !pc->buckets || !pc->entry_of_block) {
        hr_pcache_free(pc);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a prefix cache of %u entries",
                          max_entries);
    }
    for (uint32_t i = 0; i < pc->n_buckets; i++) pc->buckets[i] = NIL;
    for (uint32_t i = 0; i < n_pool; i++) pc->entry_of_block[i] = NIL;
    if (n_snapshots && snapshot_floats) {
        enum hr_status st = hr_state_pool_init(n_snapshots, snapshot_floats, &pc->snaps, err);
        pc->snap_entry = calloc(n_snapshots, sizeof(*pc->snap_entry));
        pc->snap_used = calloc(n_snapshots, sizeof(*pc->snap_used));
        if (st != HR_OK || !pc->snap_entry || !pc->snap_used) {
            hr_pcache_free(pc);
            return st != HR_OK ? st
                               : hr_err_set(err, HR_ERR_NOMEM, "out of memory for %u snapshots",
                                            n_snapshots);
        }
        for (uint32_t j = 0; j < n_snapshots; j++) pc->snap_entry[j] = NIL;
    }
    for (uint32_t i = 0; i < max_entries; i++) {
        pc->entries[i] = (struct entry){.block = -1,
                                        .snap = -1,
                                        .parent_index = NIL,
                                        .prev = NIL,
                                        .next = NIL,
                                        .chain = i + 1 < max_entries ? i + 1 : NIL};
    }
    pc->free_head = 0;
    pc->lru_head = pc->lru_tail = NIL;
    pc->next_serial = 1;
    *out = pc;
    return HR_OK;
}

void hr_pcache_free(struct hr_pcache *pc)
{
    if (!pc) return;
    if (pc->entries) {
        for (uint32_t i = 0; i < pc->cap; i++)
            if (pc->entries[i].state != ENTRY_FREE) {
                hr_kv_unref_block(pc->pool, pc->entries[i].block);
                drop_window(pc, i);
            }
    }
    free(pc->wblocks);
    free(pc->wref);
    free(pc->entries);
    free(pc->tokens);
    free(pc->buckets);
    free(pc->entry_of_block);
    hr_state_pool_free(pc->snaps);
    free(pc->snap_entry);
    free(pc->snap_used);
    free(pc);
}

/* One step of a walk from block 0: hashes the next block's tokens into *h and
 * returns the entry whose key is (*parent, t), or NIL. */
static uint32_t walk_step(const struct hr_pcache *pc, uint64_t *h, uint64_t parent,
                          const int32_t *t)
{
    *h = hash_block(*h, t, pc->block_tokens);
    return find(pc, *h, parent, t);
}

/* The cached prefix of tokens[0..n), at most max_blocks: on a windowed
 * pool, only up to the deepest block whose entry carries its window (KV
 * without the window's blocks cannot be continued); with snapshots, only
 * up to the deepest block that has one (KV beyond the state cannot be
 * used). */
static uint32_t usable_blocks(const struct hr_pcache *pc, const int32_t *tokens, uint32_t n,
                              uint32_t max_blocks)
{
    uint32_t bt = pc->block_tokens, k = 0, usable = 0, n_full = n / bt;
    if (n_full > max_blocks) n_full = max_blocks;
    uint64_t h = pc->seed, parent = 0;
    for (; k < n_full; k++) {
        uint32_t i = walk_step(pc, &h, parent, tokens + (size_t)k * bt);
        if (i == NIL) break;
        parent = pc->entries[i].serial;
        if ((!pc->window || pc->entries[i].n_w) && (!pc->snaps || pc->entries[i].snap >= 0))
            usable = k + 1;
    }
    return usable;
}

uint32_t hr_pcache_peek(const struct hr_pcache *pc, const int32_t *tokens, uint32_t n)
{
    return usable_blocks(pc, tokens, n, UINT32_MAX);
}

uint32_t hr_pcache_lookup(struct hr_pcache *pc, const int32_t *tokens, uint32_t n,
                          uint32_t max_blocks, int32_t *blocks_out)
{
    uint32_t bt = pc->block_tokens, n_full = usable_blocks(pc, tokens, n, max_blocks), k = 0;
    uint64_t h = pc->seed, parent = 0;
    for (; k < n_full; k++) {
        uint32_t i = walk_step(pc, &h, parent, tokens + (size_t)k * bt);
        HR_ASSERT(i != NIL); /* usable_blocks walked it */
        struct entry *e = &pc->entries[i];
        hr_kv_ref_block(pc->pool, e->block);
        /* Now held by the caller: pinned, out of the LRU list until released. */
        if (e->state == ENTRY_EVICTABLE) lru_unlink(pc, i);
        e->state = ENTRY_PINNED;
        blocks_out[k] = e->block;
        parent = e->serial;
    }
    pc->stats.lookup_tokens += n;
    pc->stats.hit_tokens += (uint64_t)k * bt;
    return k;
}

uint32_t hr_pcache_insert(struct hr_pcache *pc, const int32_t *tokens, uint32_t n_full_blocks,
                          const int32_t *blocks)
{
    uint32_t bt = pc->block_tokens, added = 0, anchor = NIL;
    uint64_t h = pc->seed, parent = 0, walk = ++pc->walk;
    uint32_t parent_index = NIL;
    for (uint32_t k = 0; k < n_full_blocks; k++) {
        const int32_t *t = tokens + (size_t)k * bt;
        int32_t b = blocks[k];
        HR_ASSERT(b >= 0 && (uint32_t)b < pc->n_pool_blocks);
        uint64_t ph = h;
        uint32_t i = walk_step(pc, &h, parent, t);
        if (i == NIL) {
            if (pc->entry_of_block[b] != NIL)
                break; /* this block id already holds another prefix: a caller bug */
            if (pc->free_head == NIL) {
                uint32_t v = lru_victim(pc, walk);
                if (v == NIL) break; /* everything is referenced: stop, never fail */
                evict_entry(pc, v);
            }
            i = pc->free_head;
            struct entry *e = &pc->entries[i];
            pc->free_head = e->chain;
            *e = (struct entry){.hash = h,
                                .parent_hash = ph,
                                .serial = pc->next_serial++,
                                .parent_serial = parent,
                                .block = b,
                                .parent_index = parent_index,
                                .prev = NIL,
                                .next = NIL,
                                .snap = -1,
                                .state = ENTRY_PINNED};
            memcpy(pc->tokens + (size_t)i * bt, t, bt * sizeof(int32_t));
            uint32_t *head = &pc->buckets[bucket_of(pc, h)];
            e->chain = *head;
            *head = i;
            pc->entry_of_block[b] = i;
            hr_kv_ref_block(pc->pool, b);
            pc->n_entries++;
            pc->stats.inserted_blocks++;
            added++;
        }
        /* New or touched: recently used (pinned while the sequence holds it). */
        pc->entries[i].walk = walk;
        classify(pc, i, &anchor);
        parent = pc->entries[i].serial;
        parent_index = i;
        pc->last_entry = i;
        pc->last_depth = k + 1;
    }
    return added;
}

uint32_t hr_pcache_insert_seq(struct hr_pcache *pc, const int32_t *tokens,
                              const struct hr_kv_seq *seq)
{
    const uint32_t bt = pc->block_tokens, n_full = seq->n_tokens / bt;
    pc->last_depth = 0;
    const uint32_t added = hr_pcache_insert(pc, tokens, n_full, seq->blocks);
    if (!pc->window || n_full == 0 || pc->last_depth != n_full) return added;
    /* The window of the prefix's end, if the sequence still holds it all
     * (hr_kv_seq_slide keeps the last block boundary's window) and the
     * entry has none yet (another sequence's would be the same bits). */
    struct entry *e = &pc->entries[pc->last_entry];
    const uint32_t first = hr_kv_window_first_block(pc->window, n_full * bt, bt);
    if (e->n_w || seq->w_first > first || seq->n_wblocks < n_full || n_full - first > pc->n_wmax)
        return added;
    int32_t *w = pc->wblocks + (size_t)pc->last_entry * pc->n_wmax;
    for (uint32_t b = first; b < n_full; b++) {
        w[e->n_w++] = seq->wblocks[b];
        hr_kv_ref_block(pc->pool, seq->wblocks[b]);
        pc->wref[seq->wblocks[b]]++;
    }
    return added;
}

void hr_pcache_restore_window(struct hr_pcache *pc, struct hr_kv_seq *seq)
{
    if (!pc->window) return;
    HR_ASSERT(seq->n_wblocks == 0 && seq->n_tokens == seq->n_blocks * pc->block_tokens);
    const uint32_t j = seq->n_blocks;
    seq->w_first = hr_kv_window_first_block(pc->window, j * pc->block_tokens, pc->block_tokens);
    for (uint32_t b = 0; b < seq->w_first; b++) seq->wblocks[b] = -1;
    seq->n_wblocks = j;
    if (j == 0) return;
    /* The last block's entry carries the window (usable_blocks ended there). */
    const uint32_t last = pc->entry_of_block[seq->blocks[j - 1]];
    HR_ASSERT(last != NIL && pc->entries[last].n_w == j - seq->w_first);
    const int32_t *w = pc->wblocks + (size_t)last * pc->n_wmax;
    for (uint32_t b = seq->w_first; b < j; b++) {
        hr_kv_ref_block(pc->pool, w[b - seq->w_first]);
        seq->wblocks[b] = w[b - seq->w_first];
    }
}

uint32_t hr_pcache_evict(struct hr_pcache *pc, uint32_t n)
{
    uint32_t done = 0;
    while (done < n) {
        uint32_t v = lru_victim(pc, 0);
        if (v == NIL) break;
        evict_entry(pc, v);
        done++;
    }
    return done;
}

void hr_pcache_release_blocks(struct hr_pcache *pc, const int32_t *blocks, uint32_t n)
{
    uint32_t anchor = NIL;
    for (uint32_t k = 0; k < n; k++) {
        int32_t b = blocks[k];
        hr_kv_unref_block(pc->pool, b);
        uint32_t i = pc->entry_of_block[b];
        if (i != NIL && hr_kv_refcount(pc->pool, b) == 1) classify(pc, i, &anchor);
    }
}

void hr_pcache_release_seq(struct hr_pcache *pc, struct hr_kv_seq *seq)
{
    hr_pcache_release_blocks(pc, seq->blocks, seq->n_blocks);
    /* Windowed blocks are not indexed (entries carry them): plain drops. */
    for (uint32_t b = seq->w_first; b < seq->n_wblocks; b++)
        hr_kv_unref_block(pc->pool, seq->wblocks[b]);
    seq->n_blocks = seq->n_wblocks = seq->w_first = 0;
    seq->n_tokens = 0;
}

uint32_t hr_pcache_n_idle_wblocks(const struct hr_pcache *pc)
{
    uint32_t n = 0;
    for (uint32_t b = 0; pc->window && b < pc->n_pool_blocks; b++)
        n += pc->wref[b] && hr_kv_refcount(pc->pool, (int32_t)b) == pc->wref[b];
    return n;
}

uint32_t hr_pcache_n_entries(const struct hr_pcache *pc)
{
    return pc->n_entries;
}

uint32_t hr_pcache_n_evictable(const struct hr_pcache *pc)
{
    return pc->n_evictable;
}

bool hr_pcache_has_block(const struct hr_pcache *pc, int32_t block)
{
    return block >= 0 && (uint32_t)block < pc->n_pool_blocks && pc->entry_of_block[block] != NIL;
}

void hr_pcache_stats(const struct hr_pcache *pc, struct hr_pcache_stats *out)
{
    *out = pc->stats;
}

/* ---- recurrent state snapshots -------------------------------------------- */

/* The snapshot slot used least recently, or -1 when none is bound. O(slots). */
static int32_t lru_snapshot(const struct hr_pcache *pc)
{
    int32_t best = -1;
    for (uint32_t j = 0; j < hr_state_n_slots(pc->snaps); j++)
        if (pc->snap_entry[j] != NIL && (best < 0 || pc->snap_used[j] < pc->snap_used[best]))
            best = (int32_t)j;
    return best;
}

bool hr_pcache_save_snapshot_fn(struct hr_pcache *pc, const int32_t *tokens, uint32_t n_blocks,
                                bool (*fill)(void *ctx, float *dst), void *ctx)
{
    if (!pc->snaps || n_blocks == 0) return false;
    uint32_t bt = pc->block_tokens, i = NIL;
    uint64_t h = pc->seed, parent = 0;
    for (uint32_t k = 0; k < n_blocks; k++) {
        i = walk_step(pc, &h, parent, tokens + (size_t)k * bt);
        if (i == NIL) return false; /* not (all) cached: nothing to hang it on */
        parent = pc->entries[i].serial;
    }
    struct entry *e = &pc->entries[i];
    if (e->snap < 0) {
        int32_t slot = hr_state_acquire(pc->snaps, e);
        if (slot < 0) { /* all slots hold snapshots: the least recently used gives way */
            const int32_t victim = lru_snapshot(pc);
            HR_ASSERT(victim >= 0);
            drop_snapshot(pc, pc->snap_entry[victim]);
            slot = hr_state_acquire(pc->snaps, e);
            HR_ASSERT(slot >= 0);
        }
        if (!fill(ctx, hr_state_slot(pc->snaps, slot))) { /* nothing refers to it yet */
            hr_state_release(pc->snaps, e);
            return false;
        }
        e->snap = slot;
        pc->snap_entry[slot] = i;
        pc->stats.saved_snapshots++;
    }
    /* A state already saved for these tokens is the same bits (the kernels
     * are batch and chunk invariant): it is only marked used. */
    pc->snap_used[e->snap] = ++pc->snap_clock;
    return true;
}

struct fill_copy {
    const float *src;
    uint64_t bytes;
};

static bool fill_from(void *ctx, float *dst)
{
    const struct fill_copy *c = ctx;
    memcpy(dst, c->src, c->bytes);
    return true;
}

bool hr_pcache_save_snapshot(struct hr_pcache *pc, const int32_t *tokens, uint32_t n_blocks,
                             const float *state)
{
    struct fill_copy c = {state, pc->snaps ? hr_state_slot_bytes(pc->snaps) : 0};
    return hr_pcache_save_snapshot_fn(pc, tokens, n_blocks, fill_from, &c);
}

const float *hr_pcache_snapshot(struct hr_pcache *pc, int32_t block)
{
    if (!pc->snaps || block < 0 || (uint32_t)block >= pc->n_pool_blocks) return NULL;
    const uint32_t i = pc->entry_of_block[block];
    if (i == NIL || pc->entries[i].snap < 0) return NULL;
    const int32_t slot = pc->entries[i].snap;
    pc->snap_used[slot] = ++pc->snap_clock;
    return hr_state_slot(pc->snaps, slot);
}

uint32_t hr_pcache_evict_snapshots(struct hr_pcache *pc, uint32_t n)
{
    uint32_t done = 0;
    for (; done < n; done++) {
        const int32_t victim = pc->snaps ? lru_snapshot(pc) : -1;
        if (victim < 0) break;
        drop_snapshot(pc, pc->snap_entry[victim]);
    }
    return done;
}

uint32_t hr_pcache_n_snapshots(const struct hr_pcache *pc)
{
    return hr_state_n_used(pc->snaps);
}
uint32_t hr_pcache_snapshot_slots(const struct hr_pcache *pc)
{
    return hr_state_n_slots(pc->snaps);
}
uint64_t hr_pcache_snapshot_bytes(const struct hr_pcache *pc)
{
    return hr_state_slot_bytes(pc->snaps);
}

void hr_pcache_test_set_hash_bits(struct hr_pcache *pc, unsigned bits)
{
    HR_ASSERT(pc->n_entries == 0 && bits <= 64);
    pc->hash_mask = bits >= 64 ? UINT64_MAX : (1ull << bits) - 1;
}

enum hr_status hr_pcache_check(const struct hr_pcache *pc, struct hr_err *err)
{
    uint32_t n_used = 0, n_lru = 0, n_chained = 0, n_free = 0;
    for (uint32_t i = 0; i < pc->cap; i++) {
        const struct entry *e = &pc->entries[i];
        if (e->state == ENTRY_FREE) continue;
        n_used++;
        if (e->block < 0 || (uint32_t)e->block >= pc->n_pool_blocks ||
            pc->entry_of_block[e->block] != i)
            return hr_err_set(err, HR_ERR_INVALID, "entry %u: block %d not mapped to it", i,
                              e->block);
        uint32_t rc = hr_kv_refcount(pc->pool, e->block);
        if (rc == 0 || (e->state == ENTRY_EVICTABLE) != (rc == 1))
            return hr_err_set(err, HR_ERR_INVALID, "entry %u: %s with refcount %u", i,
                              e->state == ENTRY_EVICTABLE ? "evictable" : "pinned", rc);
        if (e->n_w > pc->n_wmax)
            return hr_err_set(err, HR_ERR_INVALID, "entry %u: %u windowed blocks", i, e->n_w);
        for (uint32_t k = 0; k < e->n_w; k++) {
            const int32_t wb = pc->wblocks[(size_t)i * pc->n_wmax + k];
            if (wb < 0 || (uint32_t)wb >= pc->n_pool_blocks || pc->wref[wb] == 0 ||
                hr_kv_refcount(pc->pool, wb) < pc->wref[wb] || pc->entry_of_block[wb] != NIL)
                return hr_err_set(err, HR_ERR_INVALID, "entry %u: windowed block %d", i, wb);
        }
        if (e->serial == 0 || e->serial >= pc->next_serial || e->parent_serial >= e->serial)
            return hr_err_set(err, HR_ERR_INVALID, "entry %u: serial %llu, parent %llu", i,
                              (unsigned long long)e->serial, (unsigned long long)e->parent_serial);
    }
    if (n_used != pc->n_entries)
        return hr_err_set(err, HR_ERR_INVALID, "%u entries in use, count says %u", n_used,
                          pc->n_entries);
    for (uint32_t i = pc->free_head; i != NIL; i = pc->entries[i].chain) {
        if (pc->entries[i].state != ENTRY_FREE || ++n_free > pc->cap)
            return hr_err_set(err, HR_ERR_INVALID, "free stack holds entry %u in use", i);
    }
    if (n_free + n_used != pc->cap)
        return hr_err_set(err, HR_ERR_INVALID, "%u free + %u used entries of %u", n_free, n_used,
                          pc->cap);
    for (uint32_t b = 0; b < pc->n_buckets; b++) {
        for (uint32_t i = pc->buckets[b]; i != NIL; i = pc->entries[i].chain) {
            const struct entry *e = &pc->entries[i];
            if (e->state == ENTRY_FREE || bucket_of(pc, e->hash) != b || ++n_chained > n_used)
                return hr_err_set(err, HR_ERR_INVALID, "bucket %u: entry %u misplaced", b, i);
            if (hash_block(e->parent_hash, entry_tokens(pc, i), pc->block_tokens) != e->hash ||
                (e->parent_serial == 0 && e->parent_hash != pc->seed))
                return hr_err_set(err, HR_ERR_INVALID, "entry %u: hash is not its chain's", i);
        }
    }
    if (n_chained != n_used)
        return hr_err_set(err, HR_ERR_INVALID, "%u entries in buckets, %u in use", n_chained,
                          n_used);
    uint32_t prev = NIL;
    for (uint32_t i = pc->lru_head; i != NIL; i = pc->entries[i].next) {
        if (pc->entries[i].state != ENTRY_EVICTABLE || pc->entries[i].prev != prev ||
            ++n_lru > n_used)
            return hr_err_set(err, HR_ERR_INVALID, "LRU list broken at entry %u", i);
        prev = i;
    }
    if (prev != pc->lru_tail || n_lru != pc->n_evictable)
        return hr_err_set(err, HR_ERR_INVALID, "LRU list of %u entries, count says %u", n_lru,
                          pc->n_evictable);
    uint32_t n_snapped = 0;
    for (uint32_t i = 0; i < pc->cap; i++) {
        const struct entry *e = &pc->entries[i];
        if (e->snap < 0) continue;
        n_snapped++;
        if (e->state == ENTRY_FREE || !pc->snaps || pc->snap_entry[e->snap] != i ||
            hr_state_find(pc->snaps, e) != e->snap)
            return hr_err_set(err, HR_ERR_INVALID, "entry %u: snapshot slot %d not its own", i,
                              e->snap);
    }
    if (n_snapped != hr_state_n_used(pc->snaps))
        return hr_err_set(err, HR_ERR_INVALID, "%u entries with snapshots, %u slots bound",
                          n_snapped, hr_state_n_used(pc->snaps));
    uint32_t n_mapped = 0;
    for (uint32_t b = 0; b < pc->n_pool_blocks; b++) n_mapped += pc->entry_of_block[b] != NIL;
    if (n_mapped != n_used)
        return hr_err_set(err, HR_ERR_INVALID, "%u blocks mapped, %u entries", n_mapped, n_used);
    return HR_OK;
}
