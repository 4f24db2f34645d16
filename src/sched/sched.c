/*
 * sched.c - continuous batching on one engine thread; see sched.h.
 *
 * Ownership and locking. `mu` guards the queue, the running table and the
 * counters; submit and cancel take it briefly. A request's own fields
 * (tokens, KV table, sampler, detokenizer, held text) are touched only by
 * the engine thread once the request is queued, except `cancel`, an atomic
 * flag. The engine thread drops the lock while a step runs and while it
 * calls event callbacks, so callers are never blocked behind the model.
 *
 * A request keeps every token it has (prompt, then generated) in one array
 * sized at submit for its whole context; the KV table records how many of
 * them are already in the cache. "Pending" tokens are those not yet in the
 * cache: the prompt while prefilling, the last sampled token while decoding,
 * or prompt + output again after a preemption. A step therefore never asks
 * which phase a request is in, only how many of its tokens are pending.
 */
#include "sched/sched.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/state-pool.h"
#include "base/rand.h"
#include "base/sys.h"
#include "engine/backend.h"
#include "engine/prefix-cache.h"
#include "gguf/gguf.h"
#include "mem/counters.h"
#include "mem/decisions.h"
#include "mem/size.h"

enum state { ST_QUEUED, ST_RUNNING };

struct request {
    uint64_t id;
    enum state state;
    int32_t *tokens;     /* prompt + generated, capacity n_prompt + max_tokens */
    uint32_t n_prompt, n_tokens, max_tokens, n_generated;
    struct hr_kv_seq kv; /* capacity n_prompt + max_tokens */
    struct hr_sampler *smp;
    struct hr_detok *detok;
    int32_t *stop_ids;
    uint32_t n_stop_ids;
    char **stops;
    uint32_t n_stops;
    char *held; /* text not yet emitted because it may begin a stop string */
    size_t n_held, cap_held;
    bool ignore_eos;
    bool stopped_by_string; /* what follows the stop string is dropped */
    int32_t stop_index;     /* which stop string, or -1 */
    uint32_t n_cached;      /* prompt tokens the prefix cache served at its first start */
    int32_t *script;        /* test-only forced output (hr_sched_params.script) */
    uint32_t n_script;
    uint64_t bytes;         /* its own buffers: the requests memory category */
    void *parked;           /* its KV in host memory while preempted (hr_backend_kv_park) */
    uint32_t n_parked;      /* tokens in it */
    uint64_t parked_bytes;
    atomic_bool cancel;
    double queued_at;
    uint64_t started; /* start order, for "youngest" */
    hr_sched_event_fn fn;
    void *user;
    struct request *next; /* queue link */
};

struct hr_sched {
    struct hr_sched_config cfg;
    struct hr_backend *engine; /* the CPU or CUDA engine (engine/backend.h) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    bool stop;
    struct request *q_head, *q_tail; /* FIFO; preempted requests go to the head */
    uint32_t n_queued;
    struct request **running; /* cfg.parallel slots, packed */
    uint32_t n_running;
    uint64_t next_id, n_started;
    struct hr_sched_stats st;
    /* What hr_sched_stats returns: a copy published at every release of
     * `mu` (sched_unlock), under a mutex held only for the copy, so a
     * reader (/metrics, /ready, the dashboard) never waits for the engine
     * thread's critical sections, nor for a step. */
    pthread_mutex_t snap_mu;
    struct hr_sched_stats snap;
    bool sync_ready, thread_started, gov_sampling;
    atomic_bool squeezed;      /* the governor's sampler saw reclaim needed */
    uint64_t arena_committed;  /* the arena's largest high-water mark: resident pages */
    uint32_t n_step_prefill;   /* prefill tokens of the step being built */
    double wait_since;         /* when the running requests began to wait for memory; 0: not */
    bool device_waiting;       /* a lone request waits for device memory (logged once) */
    bool alone_below_min;      /* this step may give a lone request a chunk under chunk_min */
    _Atomic uint64_t request_bytes; /* of every live request and the sampler scratch: the
                                     * requests category */
    /* The vocabulary-sized candidate scratch every request's sampler
     * borrows (the engine thread samples one request at a time), so a
     * queued request holds its tokens, not 1.8 MB of scratch: four queued
     * requests' own scratch once took the room the running one needed and
     * its prefill waited forever (docs/memory.md). */
    struct hr_sampler_scratch *smp_scratch;
    uint64_t smp_scratch_bytes;
    _Atomic uint64_t device_used_peak; /* highest device use sampled (total - free) */
    /* engine-thread scratch, sized at init so the loop never allocates */
    struct hr_step_seq *items;       /* parallel */
    struct request **item_req;       /* parallel */
    struct request **done;           /* parallel: leave the running table this step */
    enum hr_sched_finish *done_why;
    const char **done_msg;
    struct request **out_q;          /* max_queue + parallel: leave the queue */
    struct request **preempted;      /* parallel: to be told, once the lock is dropped */
    uint32_t n_preempted;
    struct hr_pcache *pc; /* the prefix cache, or NULL; changed only under mu */
    struct request **started_now; /* started for the first time this iteration */
    uint32_t n_started_now;
    uint8_t *out_q_timeout;
};

const char *hr_sched_finish_name(enum hr_sched_finish f)
{
    switch (f) {
    case HR_SCHED_STOP: return "stop";
    case HR_SCHED_LENGTH: return "length";
    case HR_SCHED_CANCELLED: return "cancelled";
    case HR_SCHED_FAILED: return "failed";
    }
    return "?";
}

struct hr_sched_params hr_sched_params_defaults(void)
{
    return (struct hr_sched_params){.sampling = hr_sampler_defaults(),
                                    .max_tokens = 256,
                                    .detok_flags = HR_DETOK_PIECES};
}

/* The governor's counters, when there is one (the scheduler's own stats are
 * kept either way). */
static void count(struct hr_sched *s, size_t field_offset, uint64_t v)
{
    if (s->cfg.gov)
        hr_mem_counter_add((_Atomic uint64_t *)((char *)hr_gov_counters(s->cfg.gov) +
                                                 field_offset),
                           v);
}
#define COUNT(s, field, v) count((s), offsetof(struct hr_mem_counters, field), (v))

/* ---- requests ------------------------------------------------------------ */

/* ---- the prefix cache (engine thread, lock held) --------------------------- */

/* A request's KV leaves it: its full blocks stay in the prefix cache (a
 * later request with the same prefix, or this one resuming after a
 * preemption, shares them) and its references go through the cache, which
 * keeps its count of evictable blocks exact. Without a cache: cleared. */
static void cache_release(struct hr_sched *s, struct request *r)
{
    struct hr_kv_pool *pool = hr_backend_kv_pool(s->engine);
    /* Its recurrent state (hybrid models) goes too: a preempted request
     * recomputes from its tokens (prompt + output so far), which rebuilds
     * the state exactly, so it holds no slot while it waits. */
    hr_state_release(hr_backend_state_pool(s->engine), &r->kv);
    if (!s->pc) {
        hr_kv_seq_clear(&r->kv, pool);
        return;
    }
    hr_pcache_insert_seq(s->pc, r->tokens, &r->kv); /* and its window (windowed pools) */
    hr_pcache_release_seq(s->pc, &r->kv);
}

/* A request (re)starting with no KV takes the longest cached prefix of its
 * tokens (prompt, plus output after a preemption), leaving at least one
 * token to compute so the step has logits. A hybrid model's prefix ends on
 * a block with a state snapshot (prefix-cache.h), copied into a state slot
 * bound to the request now: the engine then continues it from there. With
 * no slot free (never while it has a running slot: the engine pool holds
 * one per concurrent request) it starts cold. */
static void cache_lookup(struct hr_sched *s, struct request *r)
{
    if (!s->pc || r->kv.n_blocks)
        return;
    const uint32_t bt = hr_kv_block_tokens(hr_backend_kv_pool(s->engine));
    uint32_t k = hr_pcache_lookup(s->pc, r->tokens, r->n_tokens, (r->n_tokens - 1) / bt,
                                  r->kv.blocks);
    if (k && hr_pcache_snapshot_slots(s->pc)) {
        struct hr_state_pool *sp = hr_backend_state_pool(s->engine);
        const float *snap = hr_pcache_snapshot(s->pc, r->kv.blocks[k - 1]);
        int32_t slot = snap ? hr_state_acquire(sp, &r->kv) : -1;
        struct hr_err cerr = {{0}};
        if (slot >= 0 && hr_backend_state_copy(s->engine, slot, (void *)snap, false, &cerr) != HR_OK) {
            hr_log_warn("sched", "request %llu: restoring a state snapshot failed (%s); it "
                        "starts cold", (unsigned long long)r->id, cerr.msg);
            hr_state_release(sp, &r->kv);
            slot = -1;
        }
        if (slot >= 0) {
            s->st.cache_restored_snapshots++;
        } else {
            hr_pcache_release_blocks(s->pc, r->kv.blocks, k);
            k = 0;
        }
    }
    r->kv.n_blocks = k;
    r->kv.n_tokens = k * bt;
    hr_pcache_restore_window(s->pc, &r->kv); /* windowed pools: the hit's window */
    if (!r->started)
        r->n_cached = r->kv.n_tokens < r->n_prompt ? r->kv.n_tokens : r->n_prompt;
}

/* Makes `free_blocks` free: first by growing a lazily mapped pool (a GPU's,
 * while the device has room), then by giving cached blocks nobody uses
 * back to the pool (and their pages to the OS); returns how many were
 * evicted. */
static uint32_t cache_make_room(struct hr_sched *s, uint32_t free_blocks)
{
    struct hr_kv_pool *pool = hr_backend_kv_pool(s->engine);
    const uint32_t have = hr_backend_kv_room(s->engine, free_blocks);
    if (!s->pc || have >= free_blocks)
        return 0;
    const uint32_t n = hr_pcache_evict(s->pc, free_blocks - have);
    if (n)
        hr_kv_pool_trim(pool);
    return n;
}

/* The governor's KV and cache accounts and the blocks-used gauge. */
static void account_kv(struct hr_sched *s)
{
    struct hr_kv_pool *pool = hr_backend_kv_pool(s->engine);
    const uint64_t bb = hr_kv_block_bytes(pool);
    /* windowed blocks only the cache holds are cache too (windowed pools) */
    const uint32_t cached = s->pc ? hr_pcache_n_evictable(s->pc) + hr_pcache_n_idle_wblocks(s->pc)
                                  : 0;
    const uint32_t used = hr_kv_n_used(pool);
    hr_mem_counter_set(&hr_gov_counters(s->cfg.gov)->kv_blocks_used, used - cached);
    hr_gov_set_account(s->cfg.gov, HR_GOV_KV, (uint64_t)(used - cached) * bb);
    /* Cached blocks nobody uses and the recurrent state snapshots: both
     * evictable, both the cache category. */
    hr_gov_set_account(s->cfg.gov, HR_GOV_CACHE,
                       (uint64_t)cached * bb + (s->pc ? (uint64_t)hr_pcache_n_snapshots(s->pc) *
                                                            hr_pcache_snapshot_bytes(s->pc)
                                                      : 0));
    /* Recurrent state (hybrid models): the slots bound to running requests,
     * each resident whole (zeroed when bound, its pages dropped when freed). */
    const struct hr_state_pool *sp = hr_backend_state_pool(s->engine);
    hr_gov_set_account(s->cfg.gov, HR_GOV_STATE,
                       (uint64_t)hr_state_n_used(sp) * hr_state_slot_bytes(sp));
}

/* Whether the cache holds anything evictable: idle blocks or snapshots. */
static bool cache_reclaimable(const struct hr_sched *s)
{
    return s->pc && (hr_pcache_n_evictable(s->pc) || hr_pcache_n_snapshots(s->pc));
}

/* Frees at least `bytes` of cache when it holds that much: idle blocks
 * first, least recently used (a snapshot goes with its block), then the
 * snapshots left. Pages go back to the OS. Logs and records it; returns the
 * bytes freed. */
static uint64_t cache_reclaim(struct hr_sched *s, uint64_t bytes, const char *why)
{
    struct hr_kv_pool *pool = hr_backend_kv_pool(s->engine);
    const uint64_t bb = hr_kv_block_bytes(pool), sb = hr_pcache_snapshot_bytes(s->pc);
    const uint32_t snaps0 = hr_pcache_n_snapshots(s->pc);
    const uint32_t n_ev = hr_pcache_evict(s->pc, (uint32_t)(bytes / bb + 1));
    uint64_t freed = (uint64_t)n_ev * bb + (uint64_t)(snaps0 - hr_pcache_n_snapshots(s->pc)) * sb;
    if (freed < bytes && sb)
        freed += (uint64_t)hr_pcache_evict_snapshots(s->pc, (uint32_t)((bytes - freed) / sb + 1)) * sb;
    const uint32_t n_snap = snaps0 - hr_pcache_n_snapshots(s->pc);
    hr_kv_pool_trim(pool);
    hr_log_info("sched", "%s: %u prefix-cache blocks and %u state snapshots evicted (%.1f MiB)",
                why, n_ev, n_snap, (double)freed / 1048576.0);
    hr_decision_reclaim(n_ev + n_snap, freed);
    return freed;
}

/* Under soft pressure idle cache goes first: enough cached blocks nobody
 * uses (and snapshots) to bring the process back under the soft watermark. */
static void trim_cache_under_pressure(struct hr_sched *s)
{
    if (!cache_reclaimable(s))
        return;
    struct hr_gov_view v;
    hr_gov_get_view(s->cfg.gov, &v);
    if (v.level == HR_GOV_OK || v.current_bytes <= v.soft_bytes)
        return;
    if (cache_reclaim(s, v.current_bytes - v.soft_bytes, "soft pressure"))
        account_kv(s);
}

/* Blocks the step in s->items needs beyond what its sequences hold. */
static uint32_t step_new_blocks(const struct hr_sched *s, uint32_t n_items)
{
    const struct hr_step st = {.seqs = s->items, .n_seqs = n_items};
    return hr_backend_step_new_blocks(s->engine, &st);
}

/*
 * Hybrid models with the prefix cache: the positions where a request's
 * recurrent state is saved as a snapshot (prefix-cache.h), the last two
 * block boundaries of its prompt, b1 = the last and b0 = b1 - B. An agent's
 * next turn repeats this prompt and appends to it, but re-rendering the
 * history may change the prompt's last tokens (the generation prompt's
 * `<think>` block is rewritten as the answer's): b1 serves the next turn
 * when they survive, b0 when fewer than a block of tokens changed. A prefill
 * chunk never crosses a snapshot point, so the state at the point exists
 * after some step; the cost is at most two more prefill steps per prompt and
 * two state copies. Writes the points to pts (ascending) and returns how
 * many; 0 without snapshots.
 */
static uint32_t snapshot_points(const struct hr_sched *s, const struct request *r, uint32_t pts[2])
{
    if (!s->pc || !hr_pcache_snapshot_slots(s->pc))
        return 0;
    const uint32_t bt = hr_kv_block_tokens(hr_backend_kv_pool(s->engine));
    const uint32_t b1 = r->n_prompt / bt * bt;
    uint32_t n = 0;
    if (b1 >= 2 * bt)
        pts[n++] = b1 - bt;
    if (b1 >= bt)
        pts[n++] = b1;
    return n;
}

/* Tokens r may prefill before its next snapshot point: the chunk ends
 * there (UINT32_MAX: no point ahead). */
static uint32_t tokens_to_snapshot(const struct hr_sched *s, const struct request *r)
{
    uint32_t pts[2];
    const uint32_t n = snapshot_points(s, r, pts);
    for (uint32_t i = 0; i < n; i++)
        if (pts[i] > r->kv.n_tokens)
            return pts[i] - r->kv.n_tokens;
    return UINT32_MAX;
}

/* A snapshot's bytes from the engine's state slot (a GPU's: copied). */
struct snap_fill {
    struct hr_sched *s;
    int32_t slot;
};

static bool snap_fill_from_slot(void *ctx, float *dst)
{
    const struct snap_fill *c = ctx;
    struct hr_err err = {{0}};
    if (hr_backend_state_copy(c->s->engine, c->slot, dst, true, &err) == HR_OK)
        return true;
    hr_log_warn("sched", "saving a state snapshot failed: %s", err.msg);
    return false;
}

/* After a step: when r's KV now ends on a snapshot point, its blocks go into
 * the cache and its state is saved with the last one. Lock held. */
static void save_snapshot(struct hr_sched *s, struct request *r)
{
    uint32_t pts[2];
    const uint32_t n = snapshot_points(s, r, pts);
    for (uint32_t i = 0; i < n; i++) {
        if (pts[i] != r->kv.n_tokens)
            continue;
        struct hr_state_pool *sp = hr_backend_state_pool(s->engine);
        const int32_t slot = hr_state_find(sp, &r->kv);
        if (slot < 0)
            return;
        const uint32_t nb = pts[i] / hr_kv_block_tokens(hr_backend_kv_pool(s->engine));
        hr_pcache_insert(s->pc, r->tokens, nb, r->kv.blocks);
        struct snap_fill fc = {s, slot};
        hr_pcache_save_snapshot_fn(s->pc, r->tokens, nb, snap_fill_from_slot, &fc);
        return;
    }
}

/* Publishes the stats readers see (s->mu held): see hr_sched.snap. */
static void publish(struct hr_sched *s)
{
    struct hr_sched_stats o = s->st;
    o.running = s->n_running;
    o.queued = s->n_queued;
    o.kv_block_bytes = hr_kv_block_bytes(hr_backend_kv_pool(s->engine));
    if (hr_backend_info(s->engine)->kind == HR_DEVICE_CUDA) {
        struct hr_backend_mem m;
        hr_backend_mem(s->engine, &m);
        o.device_kv_mapped_bytes = m.kv_bytes;
        o.device_kv_reserved_bytes = hr_backend_info(s->engine)->kv_budget_bytes;
    }
    const struct hr_state_pool *sp = hr_backend_state_pool(s->engine);
    /* slots used: the engine thread's copy in s->st; these two are fixed */
    o.state_slots_total = hr_state_n_slots(sp);
    o.state_slot_bytes = hr_state_slot_bytes(sp);
    if (s->pc) {
        struct hr_pcache_stats ps;
        hr_pcache_stats(s->pc, &ps);
        o.cache_blocks = hr_pcache_n_entries(s->pc);
        o.cache_evictable_blocks = hr_pcache_n_evictable(s->pc);
        o.cache_lookup_tokens = ps.lookup_tokens;
        o.cache_hit_tokens = ps.hit_tokens;
        o.cache_evicted_blocks = ps.evicted_blocks;
        o.cache_snapshots = hr_pcache_n_snapshots(s->pc);
        o.cache_snapshot_slots = hr_pcache_snapshot_slots(s->pc);
        o.cache_snapshot_bytes = hr_pcache_snapshot_bytes(s->pc);
        o.cache_saved_snapshots = ps.saved_snapshots;
        o.cache_evicted_snapshots = ps.evicted_snapshots;
    }
    pthread_mutex_lock(&s->snap_mu);
    s->snap = o;
    pthread_mutex_unlock(&s->snap_mu);
}

/* cudaMemGetInfo through the backend (nothing on the CPU): the device's use
 * now, folded into the peak. Any thread: the engine thread after each step,
 * readers of the stats while idle. */
static void sample_device(struct hr_sched *s, uint64_t *free_bytes, uint64_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    if (hr_backend_info(s->engine)->kind != HR_DEVICE_CUDA ||
        !hr_backend_device_mem_info(s->engine, free_bytes, total_bytes))
        return;
    const uint64_t used = *total_bytes - *free_bytes;
    uint64_t peak = atomic_load(&s->device_used_peak);
    while (used > peak && !atomic_compare_exchange_weak(&s->device_used_peak, &peak, used))
        ;
}

const char *hr_sched_phase_name(enum hr_sched_phase p)
{
    static const char *const names[HR_SCHED_N_PHASES] = {"admit", "fit", "prepare", "bracket",
                                                         "device", "account"};
    return (unsigned)p < HR_SCHED_N_PHASES ? names[p] : "unknown";
}

/* Every release of s->mu publishes what changed under it. */
static void sched_unlock(struct hr_sched *s)
{
    publish(s);
    pthread_mutex_unlock(&s->mu);
}

/* Free KV pool memory back to a device another process left short
 * (engine thread, between steps; nothing on the CPU). Idle, the prefix
 * cache's blocks go first: they are the memory nobody is using, and only
 * whole free groups at the pool's top can be given back. */
static void give_back(struct hr_sched *s, bool idle)
{
    if (idle && s->pc && hr_backend_kv_short(s->engine)) {
        pthread_mutex_lock(&s->mu);
        const uint32_t n = hr_pcache_evict(s->pc, hr_pcache_n_evictable(s->pc));
        sched_unlock(s);
        if (n)
            hr_log_info("sched", "evicted %u cached KV blocks: the device is short of memory", n);
    }
    const uint64_t b = hr_backend_kv_give_back(s->engine);
    if (!b)
        return;
    pthread_mutex_lock(&s->mu);
    s->st.device_kv_given_back_bytes += b;
    sched_unlock(s);
    if (b)
        hr_log_info("sched", "gave %.1f MiB of free KV pool back to the device: another process "
                             "left it short",
                    (double)b / 1048576.0);
}

/* Drops a parked copy (resumed, failed to restore, or the request ended). */
static void unpark_drop(struct hr_sched *s, struct request *r)
{
    if (!r->parked)
        return;
    free(r->parked);
    r->parked = NULL;
    r->n_parked = 0;
    const uint64_t left = atomic_fetch_sub(&s->request_bytes, r->parked_bytes) - r->parked_bytes;
    if (s->cfg.gov)
        hr_gov_set_account(s->cfg.gov, HR_GOV_REQUESTS, left);
    r->parked_bytes = 0;
}

static void request_free(struct hr_sched *s, struct request *r)
{
    if (!r)
        return;
    unpark_drop(s, r);
    if (s->pc && r->kv.n_blocks) {
        pthread_mutex_lock(&s->mu);
        cache_release(s, r);
        sched_unlock(s);
    }
    if (r->kv.blocks)
        hr_backend_seq_free(s->engine, &r->kv); /* and its recurrent state slot */
    if (r->bytes) {
        const uint64_t left = atomic_fetch_sub(&s->request_bytes, r->bytes) - r->bytes;
        if (s->cfg.gov)
            hr_gov_set_account(s->cfg.gov, HR_GOV_REQUESTS, left);
    }
    hr_sampler_free(r->smp);
    hr_detok_free(r->detok);
    for (uint32_t i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->stops);
    free(r->stop_ids);
    free(r->script);
    free(r->held);
    free(r->tokens);
    free(r);
}

/* The most KV blocks a request of n_tokens holds, its prefill going down to
 * 1-token chunks as admission assumes: sliding-window layers count only
 * their window (kv-cache.h, hr_kv_blocks_for). */
static uint32_t kv_blocks_for(const struct hr_sched *s, uint32_t n_tokens)
{
    return hr_kv_blocks_for(hr_backend_kv_pool(s->engine), n_tokens, 1);
}

/* What request_new allocates for a request of n_prompt + max_tokens tokens
 * (the tokens, the block table, the sampler's scratch, the held text): the
 * requests category, and the request's own term in admission. The few
 * small pieces (stop strings, detokenizer state) are left to the residual. */
static uint64_t request_bytes(const struct hr_sched *s, const struct hr_sampler_params *sp,
                              uint32_t n_prompt, uint32_t max_tokens)
{
    const uint64_t cap = (uint64_t)n_prompt + max_tokens;
    return sizeof(struct request) + cap * sizeof(int32_t) +
           2 * (cap / hr_kv_block_tokens(hr_backend_kv_pool(s->engine)) + 1) * sizeof(int32_t) +
           hr_sampler_shared_bytes(sp, hr_backend_model(s->engine)->hp.n_vocab) +
           (s->cfg.tok ? 4096 : 0);
}

/* Builds everything a request will need, so that the engine thread never
 * allocates for it. */
static enum hr_status request_new(struct hr_sched *s, const struct hr_sched_params *p,
                                  struct request **out, struct hr_err *err)
{
    struct request *r = calloc(1, sizeof(*r));
    if (!r)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a request");
    const uint32_t cap = p->n_prompt + p->max_tokens;
    r->n_prompt = r->n_tokens = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->ignore_eos = p->ignore_eos;
    r->fn = p->on_event;
    r->user = p->user;
    r->stop_index = -1;
    atomic_init(&r->cancel, false);
    enum hr_status st = HR_ERR_NOMEM;
    if (p->n_script) {
        if (!(r->script = malloc((size_t)p->n_script * sizeof(int32_t))))
            goto fail;
        memcpy(r->script, p->script, (size_t)p->n_script * sizeof(int32_t));
        r->n_script = p->n_script;
    }
    r->tokens = malloc((size_t)cap * sizeof(int32_t));
    if (!r->tokens)
        goto fail;
    memcpy(r->tokens, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    if ((st = hr_backend_seq_init(s->engine, &r->kv, cap, err)) != HR_OK ||
        (st = hr_sampler_init_shared(&p->sampling, hr_backend_model(s->engine)->hp.n_vocab,
                                     s->smp_scratch, &r->smp, err)) != HR_OK)
        goto fail;
    for (uint32_t i = 0; i < p->n_prompt; i++)
        hr_sampler_accept(r->smp, p->prompt[i]);
    st = HR_ERR_NOMEM;
    if (p->n_stop_tokens) {
        if (!(r->stop_ids = malloc(p->n_stop_tokens * sizeof(int32_t))))
            goto fail;
        memcpy(r->stop_ids, p->stop_tokens, p->n_stop_tokens * sizeof(int32_t));
        r->n_stop_ids = p->n_stop_tokens;
    }
    size_t longest = 0;
    if (p->n_stop_strings) {
        if (!(r->stops = calloc(p->n_stop_strings, sizeof(char *))))
            goto fail;
        for (uint32_t i = 0; i < p->n_stop_strings; i++) {
            const char *t = p->stop_strings[i] ? p->stop_strings[i] : "";
            if (!*t)
                continue; /* an empty stop string would stop at once: ignore it */
            if (!(r->stops[r->n_stops] = strdup(t)))
                goto fail;
            r->n_stops++;
            longest = strlen(t) > longest ? strlen(t) : longest;
        }
    }
    if (s->cfg.tok) {
        if ((st = hr_detok_init(s->cfg.tok, p->detok_flags, &r->detok, err)) != HR_OK)
            goto fail;
        /* Held text never exceeds the longest stop string plus one piece; a
         * piece is bounded by the vocabulary, 4 KiB is far above any. */
        r->cap_held = longest + 4096;
        st = HR_ERR_NOMEM;
        if (!(r->held = malloc(r->cap_held)))
            goto fail;
    }
    r->bytes = request_bytes(s, &p->sampling, p->n_prompt, p->max_tokens);
    const uint64_t live = atomic_fetch_add(&s->request_bytes, r->bytes) + r->bytes;
    if (s->cfg.gov)
        hr_gov_set_account(s->cfg.gov, HR_GOV_REQUESTS, live);
    *out = r;
    return HR_OK;
fail:
    if (st == HR_ERR_NOMEM)
        hr_err_set(err, HR_ERR_NOMEM, "out of memory for a request");
    request_free(s, r);
    return st;
}

/* ---- text and stop conditions (engine thread) ----------------------------- */

/* Length of the longest suffix of held[0..n) that is a proper prefix of a
 * stop string: those bytes must wait for the next token. */
static size_t stop_prefix_tail(const struct request *r)
{
    size_t keep = 0;
    for (uint32_t i = 0; i < r->n_stops; i++) {
        const size_t ls = strlen(r->stops[i]);
        for (size_t k = ls - 1 < r->n_held ? ls - 1 : r->n_held; k > keep; k--)
            if (memcmp(r->held + r->n_held - k, r->stops[i], k) == 0) {
                keep = k;
                break;
            }
    }
    return keep;
}

/*
 * Appends a token's text and decides what may be emitted. Returns true when a
 * stop string completed: then *emit_len bytes before it are emitted and the
 * rest is dropped. Otherwise emits all but a possible stop-string prefix.
 * The emitted bytes are at r->held and must be consumed before the next call.
 */
static bool text_push(struct request *r, const char *t, size_t n, size_t *emit_len)
{
    if (r->n_held + n > r->cap_held) /* cannot happen with pieces < 4 KiB; keep the tail */
        n = r->cap_held - r->n_held;
    memcpy(r->held + r->n_held, t, n);
    r->n_held += n;
    size_t best = SIZE_MAX;
    for (uint32_t i = 0; i < r->n_stops; i++) {
        const size_t ls = strlen(r->stops[i]);
        for (size_t at = 0; at + ls <= r->n_held; at++)
            if (memcmp(r->held + at, r->stops[i], ls) == 0) {
                if (at < best)
                    best = at, r->stop_index = (int32_t)i;
                break;
            }
    }
    if (best != SIZE_MAX) {
        *emit_len = best;
        return true;
    }
    *emit_len = r->n_held - stop_prefix_tail(r);
    return false;
}

static void text_consume(struct request *r, size_t n)
{
    memmove(r->held, r->held + n, r->n_held - n);
    r->n_held -= n;
}

static bool is_stop_token(const struct hr_sched *s, const struct request *r, int32_t t)
{
    if (!r->ignore_eos && s->cfg.tok && hr_tokenizer_is_eog(s->cfg.tok, t))
        return true;
    for (uint32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == t)
            return true;
    return false;
}

/* ---- events --------------------------------------------------------------- */

static void emit(const struct request *r, struct hr_sched_event *ev)
{
    ev->id = r->id;
    ev->n_prompt = r->n_prompt;
    ev->n_generated = r->n_generated;
    r->fn(ev, r->user);
}

/* Sends the last event of a started request (engine thread, lock not held).
 * The held text goes with it, unless a stop string ended the request. */
static void finish(struct request *r, enum hr_sched_finish f, const char *msg)
{
    struct hr_sched_event ev = {.kind = HR_SCHED_FINISHED, .finish = f, .message = msg,
                                .stop_index = r->stopped_by_string ? r->stop_index : -1};
    if (r->detok && !r->stopped_by_string) {
        const char *t;
        size_t n;
        if (hr_detok_finish(r->detok, &t, &n, NULL) == HR_OK && n) {
            size_t e;
            (void)text_push(r, t, n, &e);
        }
        ev.text = r->held;
        ev.text_len = r->n_held;
    }
    emit(r, &ev);
}

/* ---- queue (lock held) ---------------------------------------------------- */

static void queue_push(struct hr_sched *s, struct request *r, bool at_head)
{
    r->state = ST_QUEUED;
    if (at_head) {
        r->next = s->q_head;
        s->q_head = r;
        if (!s->q_tail)
            s->q_tail = r;
    } else {
        r->next = NULL;
        if (s->q_tail)
            s->q_tail->next = r;
        else
            s->q_head = r;
        s->q_tail = r;
    }
    s->n_queued++;
}

static void queue_remove(struct hr_sched *s, struct request *r)
{
    struct request **pp = &s->q_head, *prev = NULL;
    while (*pp && *pp != r)
        prev = *pp, pp = &(*pp)->next;
    if (!*pp)
        return;
    *pp = r->next;
    if (s->q_tail == r)
        s->q_tail = prev;
    r->next = NULL;
    s->n_queued--;
}

static void running_remove(struct hr_sched *s, struct request *r)
{
    for (uint32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == r) {
            memmove(&s->running[i], &s->running[i + 1],
                    (s->n_running - i - 1) * sizeof(s->running[0]));
            s->n_running--;
            return;
        }
}

/* ---- the engine thread ---------------------------------------------------- */

static uint64_t step_cost(struct hr_sched *s, uint32_t n);

/*
 * With a governor: the bytes the first step after starting r adds beyond
 * what is held now - the running requests' decode tokens and r's first
 * chunk (chunk_min tokens, or fewer when that is all it has), planned as
 * build_step would lay them out: the arena past its resident part and the
 * new KV blocks. Lock held; uses s->items as scratch (build_step rebuilds
 * them). Without it a restart checks only its KV and state; when the
 * step's arena then does not fit, fit_step preempts it again and the next
 * iteration restarts it: a loop that runs no step (reported under
 * --memory-limit with 4 requests; see memory.md).
 */
static uint64_t start_cost(struct hr_sched *s, struct request *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_running; i++) {
        struct request *o = s->running[i];
        if (o->n_tokens - o->kv.n_tokens == 1)
            s->items[n++] = (struct hr_step_seq){.kv = &o->kv,
                                                 .tokens = o->tokens + o->kv.n_tokens,
                                                 .n_tokens = 1,
                                                 .n_logits = 1};
    }
    const uint32_t first = r->n_tokens < s->cfg.chunk_min ? r->n_tokens : s->cfg.chunk_min;
    s->items[n++] = (struct hr_step_seq){.kv = &r->kv,
                                         .tokens = r->tokens,
                                         .n_tokens = first ? first : 1,
                                         .n_logits = 1};
    return step_cost(s, n);
}

/* Moves queued requests to the running table while there is a slot. A
 * request starts when nothing runs (the head of the queue always fits
 * alone: admission checked it), or when the KV pool, and with a governor
 * the hard watermark, have room for its pending tokens' KV, its recurrent
 * state slot (hybrid models) and the first step it joins (start_cost), so
 * that a preempted request is not restarted only to be preempted again. */
static void start_queued(struct hr_sched *s)
{
    struct hr_kv_pool *pool = hr_backend_kv_pool(s->engine);
    while (s->q_head && s->n_running < s->cfg.parallel) {
        struct request *r = s->q_head;
        if (s->n_running > 0) {
            uint32_t need = kv_blocks_for(s, r->n_tokens + 1);
            if (s->pc) { /* cached blocks it will share */
                const uint32_t hit = hr_pcache_peek(s->pc, r->tokens, r->n_tokens);
                need -= hit < need ? hit : need;
            }
            /* Free blocks, growing a GPU's pool while the device has room
             * (another process may have taken it: the request waits);
             * cached blocks nobody uses */
            uint32_t have = hr_backend_kv_room(s->engine, need);
            if (s->pc)
                have += hr_pcache_n_evictable(s->pc);
            if (need > have)
                break;
            /* The same for memory: restarted under a squeeze without room
             * for its KV, a preempted request would get no chunk and be
             * preempted again on the governor's next sample, hundreds of
             * times a second (511 preemptions in 4.5 s in the first
             * tests/e2e/squeeze.test.mjs run). It waits for the room. */
            if (s->cfg.gov) {
                struct hr_gov_view v;
                hr_gov_get_view(s->cfg.gov, &v);
                const uint64_t state = hr_state_slot_bytes(hr_backend_state_pool(s->engine));
                if (v.current_bytes + (uint64_t)need * hr_kv_block_bytes(pool) + state +
                        start_cost(s, r) > v.hard_bytes)
                    break;
            }
        }
        queue_remove(s, r);
        if (r->parked) {
            /* Resume from host memory: blocks for the parked tokens (cached
             * ones nobody uses give way), then the copy back; if either
             * fails it recomputes, as without parking. */
            struct hr_err perr = {{0}};
            cache_make_room(s, kv_blocks_for(s, r->n_parked));
            enum hr_status ust =
                hr_backend_kv_unpark(s->engine, &r->kv, r->n_parked, r->parked, &perr);
            /* A hybrid model's recurrent state follows the KV in the copy. */
            struct hr_state_pool *sp = hr_backend_state_pool(s->engine);
            if (ust == HR_OK && hr_state_n_slots(sp)) {
                const uint64_t kv_bytes = r->parked_bytes - hr_state_slot_bytes(sp);
                const int32_t slot = hr_state_acquire(sp, &r->kv);
                ust = slot < 0 ? hr_err_set(&perr, HR_ERR_NOMEM, "no recurrent state slot free")
                               : hr_backend_state_copy(s->engine, slot,
                                                       (uint8_t *)r->parked + kv_bytes, false,
                                                       &perr);
                if (ust != HR_OK) {
                    hr_state_release(sp, &r->kv);
                    hr_kv_seq_clear(&r->kv, pool);
                }
            }
            if (ust != HR_OK)
                hr_log_warn("sched", "request %llu: its parked KV cannot be restored (%s); it "
                            "recomputes", (unsigned long long)r->id, perr.msg);
            unpark_drop(s, r);
        }
        cache_lookup(s, r);
        r->state = ST_RUNNING;
        /* A preempted request keeps its original age: the youngest is
         * preempted first, so a request that waited longest is never the
         * one pushed out again, and nobody starves. */
        if (!r->started) {
            r->started = ++s->n_started;
            s->started_now[s->n_started_now++] = r;
        }
        s->running[s->n_running++] = r;
    }
}

/* Parks r's KV in host memory (see hr_sched_config.park_preempted) and
 * releases its blocks; a hybrid model's recurrent state goes after the KV
 * in the same buffer and its slot is released. False (nothing changed) when
 * parking is off, the host lacks the memory or a copy failed. */
static bool park(struct hr_sched *s, struct request *r)
{
    const bool on = s->cfg.park_preempted > 0 ||
                    (s->cfg.park_preempted == 0 &&
                     hr_backend_info(s->engine)->kind != HR_DEVICE_CPU);
    /* A windowed pool's windowed blocks are not parked: such a request
     * recomputes (the prefix cache keeps its prefix and window). */
    if (!on || r->kv.n_blocks == 0 || hr_kv_window(hr_backend_kv_pool(s->engine)))
        return false;
    struct hr_state_pool *sp = hr_backend_state_pool(s->engine);
    const int32_t slot = hr_state_n_slots(sp) ? hr_state_find(sp, &r->kv) : -1;
    if (hr_state_n_slots(sp) && slot < 0)
        return false; /* a hybrid sequence without its state: nothing to resume from */
    const uint64_t kv_bytes = hr_backend_kv_park_bytes(s->engine, &r->kv);
    const uint64_t bytes = kv_bytes + (slot >= 0 ? hr_state_slot_bytes(sp) : 0);
    if (s->cfg.gov) {
        struct hr_gov_view v;
        hr_gov_get_view(s->cfg.gov, &v);
        if (v.current_bytes + bytes > v.hard_bytes)
            return false;
    }
    void *buf = malloc(bytes);
    struct hr_err err = {{0}};
    uint32_t n = 0;
    if (!buf)
        return false;
    if (slot >= 0 &&
        hr_backend_state_copy(s->engine, slot, (uint8_t *)buf + kv_bytes, true, &err) != HR_OK) {
        hr_log_warn("sched", "request %llu: parking its recurrent state failed (%s); it will "
                    "recompute", (unsigned long long)r->id, err.msg);
        free(buf);
        return false;
    }
    if (hr_backend_kv_park(s->engine, &r->kv, buf, &n, &err) != HR_OK) {
        hr_log_warn("sched", "request %llu: parking failed (%s); it will recompute",
                    (unsigned long long)r->id, err.msg);
        free(buf);
        return false;
    }
    if (slot >= 0)
        hr_state_release(sp, &r->kv);
    r->parked = buf;
    r->n_parked = n;
    r->parked_bytes = bytes;
    const uint64_t now = atomic_fetch_add(&s->request_bytes, bytes) + bytes;
    if (s->cfg.gov)
        hr_gov_set_account(s->cfg.gov, HR_GOV_REQUESTS, now);
    s->st.parked++;
    s->st.parked_tokens += n;
    return true;
}

/* Frees the youngest running request's KV and puts it back at the head of
 * the queue; it resumes from host memory where it was parked, or by
 * recomputing its prompt and output (the kernels are batch invariant, so it
 * continues exactly as it would have). */
static void preempt_youngest(struct hr_sched *s, const char *why)
{
    struct request *y = s->running[0];
    for (uint32_t i = 1; i < s->n_running; i++)
        if (s->running[i]->started > y->started)
            y = s->running[i];
    if (!park(s, y))
        cache_release(s, y); /* its blocks stay cached: it may resume from them */
    running_remove(s, y);
    queue_push(s, y, true);
    if (s->n_preempted < s->cfg.parallel)
        s->preempted[s->n_preempted++] = y;
    s->st.preempted++;
    COUNT(s, requests_preempted_total, 1);
    if (y->parked)
        hr_log_info("sched", "request %llu preempted: %s (%u of %u KV blocks used), %u tokens "
                    "parked in host memory (%.1f MiB)",
                    (unsigned long long)y->id, why, hr_kv_n_used(hr_backend_kv_pool(s->engine)),
                    hr_kv_n_blocks(hr_backend_kv_pool(s->engine)), y->n_parked,
                    (double)y->parked_bytes / 1048576.0);
    else
        hr_log_info("sched", "request %llu preempted: %s (%u of %u KV blocks used), resumes by "
                    "recompute of %u tokens",
                    (unsigned long long)y->id, why, hr_kv_n_used(hr_backend_kv_pool(s->engine)),
                    hr_kv_n_blocks(hr_backend_kv_pool(s->engine)), y->n_tokens);
    hr_decision_preempt(y->id, hr_kv_n_used(hr_backend_kv_pool(s->engine)), hr_kv_n_blocks(hr_backend_kv_pool(s->engine)), y->n_tokens);
}

/* Bytes a candidate step (the first n items) adds to what the process
 * holds: the arena beyond its already resident part, and new KV blocks. */
static uint64_t step_cost(struct hr_sched *s, uint32_t n)
{
    struct hr_backend_plan p;
    struct hr_step st = {.seqs = s->items, .n_seqs = n};
    hr_backend_plan(s->engine, &st, &p);
    return (p.arena_bytes > s->arena_committed ? p.arena_bytes - s->arena_committed : 0) +
           p.kv_bytes;
}

struct chunk_ctx {
    struct hr_sched *s;
    struct request *r;
    uint32_t slot;
    uint64_t placed;
};

/* hr_gov_plan_fn: what a chunk of n tokens of c->r adds to the step. */
static uint64_t chunk_plan(void *ctx, uint32_t n)
{
    struct chunk_ctx *c = ctx;
    struct request *r = c->r;
    const uint32_t pending = r->n_tokens - r->kv.n_tokens;
    c->s->items[c->slot] = (struct hr_step_seq){.kv = &r->kv,
                                                .tokens = r->tokens + r->kv.n_tokens,
                                                .n_tokens = n,
                                                .n_logits = n == pending ? 1 : 0};
    const uint64_t cost = step_cost(c->s, c->slot + 1);
    return cost > c->placed ? cost - c->placed : 0;
}

/* Fills s->items: one token of every request with one pending, then prefill
 * chunks in start order within the budget - each, with a governor, the
 * largest that fits under the hard watermark (0 tokens: it waits). Returns
 * the number of items. Lock held. */
static uint32_t build_step(struct hr_sched *s)
{
    uint32_t n = 0, budget = s->cfg.batch_tokens;
    s->n_step_prefill = 0;
    for (uint32_t i = 0; i < s->n_running && budget > 0; i++) {
        struct request *r = s->running[i];
        if (r->n_tokens - r->kv.n_tokens != 1)
            continue;
        s->items[n] = (struct hr_step_seq){.kv = &r->kv, .tokens = r->tokens + r->kv.n_tokens,
                                           .n_tokens = 1, .n_logits = 1};
        s->item_req[n++] = r;
        budget--;
    }
    uint64_t placed = s->cfg.gov ? step_cost(s, n) : 0;
    for (uint32_t i = 0; i < s->n_running && budget > 0; i++) {
        struct request *r = s->running[i];
        const uint32_t pending = r->n_tokens - r->kv.n_tokens;
        if (pending <= 1)
            continue;
        /* Up to the next snapshot point (hybrid models): the governor sees
         * that segment as the rest of the prompt, so it may run whole. */
        const uint32_t seg = tokens_to_snapshot(s, r) < pending ? tokens_to_snapshot(s, r) : pending;
        uint32_t take = seg < budget ? seg : budget;
        if (s->cfg.gov) {
            struct hr_gov_chunk_req q = {.request_id = r->id,
                                         .tokens_left = seg,
                                         .kv_len = r->kv.n_tokens,
                                         .chunk_min = s->alone_below_min && s->n_running == 1
                                                          ? 1
                                                          : s->cfg.chunk_min,
                                         .chunk_max = take,
                                         .placed_bytes = placed};
            struct chunk_ctx c = {.s = s, .r = r, .slot = n, .placed = placed};
            take = hr_gov_size_chunk(s->cfg.gov, &q, chunk_plan, &c);
            if (take == 0)
                continue; /* waits for headroom */
        }
        s->items[n] = (struct hr_step_seq){.kv = &r->kv,
                                           .tokens = r->tokens + r->kv.n_tokens,
                                           .n_tokens = take,
                                           .n_logits = take == pending ? 1 : 0};
        s->item_req[n++] = r;
        budget -= take;
        s->n_step_prefill += take;
        if (s->cfg.gov)
            placed = step_cost(s, n);
    }
    return n;
}

/*
 * With a governor: before a step, make sure what it adds fits under the hard
 * watermark, running the reclaim chain if not (DESIGN.md 4.8): (1) free KV
 * pages back to the OS, (2) evict prefix-cache blocks nobody uses, (3)
 * preempt the youngest request. A lone request whose next token needs KV
 * that does not fit ends with `length` (returned in *lone). Returns the
 * number of items of a step that fits, 0 when everything waits. Lock held.
 */
static uint32_t fit_step(struct hr_sched *s, struct request **lone)
{
    *lone = NULL;
    bool released = false;
    s->alone_below_min = false;
    for (;;) {
        uint32_t n = build_step(s);
        if (!s->cfg.gov)
            return n;
        struct hr_gov_view v;
        hr_gov_get_view(s->cfg.gov, &v);
        const uint64_t cost = n ? step_cost(s, n) : 0;
        const bool squeezed = atomic_exchange(&s->squeezed, false) && v.reclaim_bytes > 0;
        if (n && v.current_bytes + cost <= v.hard_bytes && !squeezed)
            return n;
        if (!n && !squeezed && s->n_step_prefill == 0 && s->n_running == 0)
            return 0;
        /* (1) pages of free KV blocks, and the arena's (resident since a
         * larger step; the step about to run touches only what it needs) */
        if (!released) {
            released = true;
            uint64_t freed = hr_kv_pool_trim(hr_backend_kv_pool(s->engine));
            if (s->arena_committed && hr_backend_arena_release(s->engine)) {
                freed += s->arena_committed;
                s->arena_committed = 0;
                hr_gov_set_account(s->cfg.gov, HR_GOV_STEP, 0);
            }
            if (freed) {
                hr_gov_sample(s->cfg.gov, NULL);
                continue; /* rebuild: chunks are sized against what is left now */
            }
        }
        /* (2) cached blocks nobody uses, enough to bring the step under
         * the hard watermark (or what the sampler asked for) */
        if (cache_reclaimable(s)) {
            const uint64_t over = v.current_bytes + cost > v.hard_bytes
                                      ? v.current_bytes + cost - v.hard_bytes
                                      : v.reclaim_bytes;
            cache_reclaim(s, over, "reclaim");
            account_kv(s);
            hr_gov_sample(s->cfg.gov, NULL);
            continue;
        }
        /* (3) the youngest, if another request remains */
        if (s->n_running > 1) {
            preempt_youngest(s, squeezed ? "memory: the ceiling fell below what we hold"
                                         : "memory: the step does not fit under the hard watermark");
            continue;
        }
        if (n == 0 && !s->alone_below_min && !squeezed) {
            /* (4) one request, and no chunk of chunk_min fits under the
             * static ceiling: smaller chunks, down to one token, rather than
             * a wait that nothing but its own end could finish. This is
             * what admission's M assumes (the prefill's last step is one
             * token with the whole prompt's KV). */
            s->alone_below_min = true;
            continue;
        }
        if (n == 0)
            return 0; /* one request, no chunk fits: it waits for headroom */
        /* One request and its step does not fit: a chunk would have been
         * sized to fit, so this is a decode needing a new KV block. */
        struct hr_backend_plan p;
        struct hr_step st = {.seqs = s->items, .n_seqs = n};
        hr_backend_plan(s->engine, &st, &p);
        if (p.kv_bytes > 0 && s->n_running == 1) {
            /* Under the static ceiling it would fit: the dynamic ceiling fell
             * (another process grew). That passes; pause, do not end it. */
            const double hard_frac =
                v.ceiling_bytes ? (double)v.hard_bytes / (double)v.ceiling_bytes : 1.0;
            const double static_hard = v.static_ceiling_bytes == UINT64_MAX
                                           ? 1e300
                                           : (double)v.static_ceiling_bytes * hard_frac;
            if ((double)(v.current_bytes + cost) <= static_hard)
                return 0;
            *lone = s->running[0];
            running_remove(s, *lone);
            hr_log_info("sched", "request %llu ends with length: its KV alone reaches the memory "
                                 "ceiling (%u tokens)",
                        (unsigned long long)(*lone)->id, (*lone)->n_tokens);
            return 0;
        }
        return n; /* adds no memory: run it */
    }
}

/* One log line when the running requests begin to wait for memory and one
 * when they go on (DESIGN 4.9: per event, not per step), and the stats
 * gauge. Engine thread, lock not held. */
static void note_memory_wait(struct hr_sched *s, bool waiting)
{
    if (!s->cfg.gov || waiting == (s->wait_since > 0))
        return;
    struct hr_gov_view v;
    hr_gov_get_view(s->cfg.gov, &v);
    char a[32], b[32];
    pthread_mutex_lock(&s->mu);
    const uint32_t n = s->n_running;
    s->st.waiting_for_memory = waiting ? n : 0;
    if (waiting)
        s->st.memory_waits++;
    sched_unlock(s);
    if (waiting) {
        s->wait_since = hr_now_seconds();
        hr_log_info("sched", "prefill waits for memory: no chunk fits (%u running, current %s, "
                             "hard %s)",
                    n, hr_mem_format_bytes(v.current_bytes, 1, a, sizeof(a)),
                    hr_mem_format_bytes(v.hard_bytes, 1, b, sizeof(b)));
    } else {
        hr_log_info("sched", "the wait for memory ended after %.1f s",
                    hr_now_seconds() - s->wait_since);
        s->wait_since = 0;
    }
}

/* Waits on s->wake (a new request, a cancellation, the governor's sampler)
 * for at most ms milliseconds; s->mu held. 0 when woken. */
static int wake_wait(struct hr_sched *s, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return pthread_cond_timedwait(&s->wake, &s->mu, &ts);
}

static void *engine_main(void *arg)
{
    struct hr_sched *s = arg;
    struct request **done = s->done;
    enum hr_sched_finish *done_why = s->done_why;
    const char **done_msg = s->done_msg;
    struct hr_err err = {{0}};
    /* time in steps and in scheduling them by phase, not yet in s->st */
    double t_step = 0.0, t_phase[HR_SCHED_N_PHASES] = {0}, t0;
#define SCHED_TIME(phase, seconds) (t_phase[HR_SCHED_PHASE_##phase] += (seconds))
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->q_head && s->n_running == 0) {
            pthread_cond_broadcast(&s->idle);
            publish(s);
            if (hr_backend_info(s->engine)->kind != HR_DEVICE_CUDA) {
                pthread_cond_wait(&s->wake, &s->mu);
                continue;
            }
            /* A GPU: its KV pool gives memory back to another process
             * that grew while we idle (sampled twice a second). */
            if (wake_wait(s, 500) != 0) {
                pthread_mutex_unlock(&s->mu); /* the pool is the engine thread's */
                give_back(s, true);
                pthread_mutex_lock(&s->mu);
            }
        }
        if (s->stop)
            break;
        /* Queued requests that were cancelled or waited too long leave now. */
        uint32_t n_out = 0;
        const double now = hr_now_seconds();
        for (struct request *r = s->q_head, *nx; r; r = nx) {
            nx = r->next;
            const bool cancelled = atomic_load(&r->cancel);
            const bool timed_out =
                s->cfg.queue_timeout_s > 0 && now - r->queued_at > s->cfg.queue_timeout_s;
            if (cancelled || timed_out) {
                queue_remove(s, r);
                s->out_q_timeout[n_out] = !cancelled;
                s->out_q[n_out++] = r;
                if (!cancelled) {
                    s->st.refused_overloaded++;
                    COUNT(s, requests_refused_overloaded_total, 1);
                }
            }
        }
        t0 = hr_now_seconds();
        start_queued(s);
        SCHED_TIME(ADMIT, hr_now_seconds() - t0);
        const uint32_t n_new = s->n_started_now;
        s->n_started_now = 0;
        sched_unlock(s);
        for (uint32_t i = 0; i < n_new; i++) {
            struct hr_sched_event ev = {.kind = HR_SCHED_STARTED,
                                        .n_cached = s->started_now[i]->n_cached};
            emit(s->started_now[i], &ev);
        }

        for (uint32_t i = 0; i < n_out; i++) {
            struct request *r = s->out_q[i];
            if (!s->out_q_timeout[i]) {
                finish(r, HR_SCHED_CANCELLED, NULL);
            } else {
                struct hr_sched_refusal why = {.reason = HR_SCHED_OVERLOADED,
                                               .n_prompt = r->n_prompt};
                snprintf(why.message, sizeof(why.message),
                         "waited %.0f s in the queue (--queue-timeout, --queue-max-wait); retry later",
                         s->cfg.queue_timeout_s);
                struct hr_sched_event ev = {.kind = HR_SCHED_REFUSED, .refusal = &why,
                                            .message = why.message};
                emit(r, &ev);
            }
            request_free(s, r);
        }

        /* The engine thread alone changes the running table's requests, so
         * it may read them without the lock; the table itself changes under
         * the lock below. */
        uint32_t n_done = 0;
        pthread_mutex_lock(&s->mu);
        for (uint32_t i = 0; i < s->n_running;) {
            struct request *r = s->running[i];
            if (atomic_load(&r->cancel)) {
                running_remove(s, r);
                done_why[n_done] = HR_SCHED_CANCELLED;
                done_msg[n_done] = NULL;
                done[n_done++] = r;
            } else {
                i++;
            }
        }
        struct request *lone = NULL;
        t0 = hr_now_seconds();
        uint32_t n_items = fit_step(s, &lone);
        SCHED_TIME(FIT, hr_now_seconds() - t0);
        if (lone) {
            done_why[n_done] = HR_SCHED_LENGTH;
            done_msg[n_done] = NULL;
            done[n_done++] = lone;
        }
        const bool wait_memory = n_items == 0 && !lone && s->n_running > 0 && n_done == 0;
        sched_unlock(s);

        note_memory_wait(s, wait_memory);
        if (wait_memory) {
            /* Running requests, but nothing fits: wait for headroom (the
             * governor's sampler, a cancellation or a new request wakes us). */
            pthread_mutex_lock(&s->mu);
            wake_wait(s, 20);
            sched_unlock(s);
            if (s->cfg.gov)
                hr_gov_sample(s->cfg.gov, NULL);
        }

        enum hr_status st = HR_OK;
        bool device_wait = false;
        struct hr_backend_plan planned = {0};
        bool bracket = false;
        if (n_items) {
            struct hr_step step = {.seqs = s->items, .n_seqs = n_items};
            /* The bracket samples /proc twice (~1 ms); the residual tracker
             * learns only from prefill chunks, so decode-only steps skip it
             * and rely on the periodic sampler. */
            bracket = s->cfg.gov && s->n_step_prefill > 0;
            t0 = hr_now_seconds();
            if (s->cfg.gov)
                hr_backend_plan(s->engine, &step, &planned);
            if (s->pc) { /* the pool's free blocks first, then cached ones nobody uses */
                pthread_mutex_lock(&s->mu);
                cache_make_room(s, step_new_blocks(s, n_items));
                sched_unlock(s);
            }
            double t1 = hr_now_seconds();
            SCHED_TIME(PREPARE, t1 - t0);
            if (bracket) {
                hr_gov_step_begin(s->cfg.gov);
                t0 = t1, t1 = hr_now_seconds();
                SCHED_TIME(BRACKET, t1 - t0);
            }
            st = hr_backend_step(s->engine, &step, &err);
            while (st == HR_ERR_NOMEM) {
                /* The pool cannot hold this step. Preempt the youngest; a
                 * request that alone outgrows the pool ends with `length`.
                 * On a GPU whose pool could hold it but the device cannot
                 * now (another process took the room), a lone request
                 * waits instead: the room may come back. */
                pthread_mutex_lock(&s->mu);
                const uint32_t need = step_new_blocks(s, n_items);
                const bool device_short = hr_backend_kv_squeezed(s->engine, need);
                if (hr_kv_n_free(hr_backend_kv_pool(s->engine)) >= need ||
                    cache_make_room(s, need)) {
                    /* the device backed the pool's growth after all, or cached
                     * blocks were evicted: retry before preempting anyone */
                } else if (s->n_running > 1) {
                    preempt_youngest(s, device_short ? "device memory: another process holds "
                                                       "the room the KV pool would grow into"
                                                     : "KV pool full");
                } else if (s->n_running == 1 && device_short) {
                    sched_unlock(s);
                    device_wait = true;
                    st = HR_OK;
                    n_items = 0;
                    break;
                } else if (s->n_running == 1) {
                    struct request *r = s->running[0];
                    running_remove(s, r);
                    done_why[n_done] = HR_SCHED_LENGTH;
                    done_msg[n_done] = NULL;
                    done[n_done++] = r;
                    hr_log_info("sched", "request %llu ends with length: its KV alone fills the pool "
                                "(%u blocks)",
                                (unsigned long long)r->id,
                                hr_kv_n_blocks(hr_backend_kv_pool(s->engine)));
                }
                n_items = build_step(s);
                sched_unlock(s);
                if (!n_items) {
                    st = HR_OK;
                    break;
                }
                step = (struct hr_step){.seqs = s->items, .n_seqs = n_items};
                st = hr_backend_step(s->engine, &step, &err);
            }
            t_step += hr_now_seconds() - t1; /* with a retry's preempting, rare */
        }
        if (st != HR_OK) {
            /* Not a memory condition: a malformed step is our bug. Every
             * request in it fails with the engine's message. */
            hr_log_error("sched", "step failed: %s", err.msg);
            pthread_mutex_lock(&s->mu);
            /* The device ran out of memory although every byte was planned:
             * a bug, counted where the promise is proved. */
            if (st == HR_ERR_DEVICE && strstr(err.msg, "out of memory")) {
                s->st.aborted_for_memory += n_items;
                if (s->cfg.gov)
                    hr_mem_counter_add(&hr_gov_counters(s->cfg.gov)->requests_aborted_for_memory_total,
                                       n_items);
            }
            for (uint32_t i = 0; i < n_items; i++) {
                running_remove(s, s->item_req[i]);
                done_why[n_done] = HR_SCHED_FAILED;
                done_msg[n_done] = err.msg;
                done[n_done++] = s->item_req[i];
            }
            sched_unlock(s);
            n_items = 0;
        }

        if (n_items) {
            uint64_t dfree, dtotal;
            t0 = hr_now_seconds();
            sample_device(s, &dfree, &dtotal);
            give_back(s, false);
            SCHED_TIME(DEVICE, hr_now_seconds() - t0);
        }
        if (device_wait != s->device_waiting) {
            s->device_waiting = device_wait;
            if (device_wait)
                hr_log_info("sched", "a request waits for device memory: another process holds "
                                     "the room its KV would grow into");
            else
                hr_log_info("sched", "the wait for device memory ended");
        }
        if (device_wait) {
            pthread_mutex_lock(&s->mu);
            wake_wait(s, 20);
            sched_unlock(s);
        }

        /* Requests preempted while building or retrying this step. Only this
         * thread frees requests, so the queued ones are still there. */
        pthread_mutex_lock(&s->mu);
        const uint32_t n_pre = s->n_preempted;
        s->n_preempted = 0;
        s->st.step_seconds += t_step;
        for (int p = 0; p < HR_SCHED_N_PHASES; p++) {
            s->st.schedule_seconds += t_phase[p];
            s->st.phase_seconds[p] += t_phase[p], t_phase[p] = 0.0;
        }
        t_step = 0.0;
        sched_unlock(s);
        for (uint32_t i = 0; i < n_pre; i++) {
            struct hr_sched_event ev = {.kind = HR_SCHED_PREEMPTED};
            emit(s->preempted[i], &ev);
        }

        if (s->cfg.gov && n_items) {
            t0 = hr_now_seconds();
            const uint64_t high = hr_backend_arena_high_water(s->engine);
            if (high > s->arena_committed)
                s->arena_committed = high;
            account_kv(s);
            hr_gov_set_account(s->cfg.gov, HR_GOV_STEP, s->arena_committed);
            hr_gov_note_plan(s->cfg.gov, planned.arena_bytes, high);
            SCHED_TIME(ACCOUNT, hr_now_seconds() - t0); /* published with the next step's */
            if (bracket) {
                t0 = hr_now_seconds();
                hr_gov_step_end(s->cfg.gov, s->n_step_prefill, NULL);
                SCHED_TIME(BRACKET, hr_now_seconds() - t0);
            }
        }

        /* Results: progress for unfinished chunks, a sampled token otherwise. */
        uint64_t n_prefilled = 0, n_gen = 0, n_chunks = 0;
        for (uint32_t i = 0; i < n_items; i++) {
            struct request *r = s->item_req[i];
            const struct hr_step_seq *it = &s->items[i];
            const uint32_t before = r->kv.n_tokens - it->n_tokens;
            /* Anything but one fresh generated token is prefill: prompt
             * chunks, and prompt + output recomputed after a preemption. */
            if (it->n_tokens > 1 || before < r->n_prompt || before + 1 < r->n_tokens) {
                n_prefilled += it->n_tokens;
                n_chunks++;
                struct hr_sched_event ev = {.kind = HR_SCHED_PROGRESS,
                                            .n_prefilled = r->kv.n_tokens};
                emit(r, &ev);
                if (s->pc && hr_pcache_snapshot_slots(s->pc)) {
                    pthread_mutex_lock(&s->mu);
                    save_snapshot(s, r);
                    sched_unlock(s);
                }
                if (s->pc && it->n_logits) {
                    /* The prompt is in: others with this prefix may share it now. */
                    pthread_mutex_lock(&s->mu);
                    hr_pcache_insert_seq(s->pc, r->tokens, &r->kv);
                    sched_unlock(s);
                }
            }
            if (!it->n_logits)
                continue;
            const int32_t t = r->n_generated < r->n_script
                                  ? r->script[r->n_generated]
                                  : hr_sampler_sample(r->smp, hr_backend_logits(s->engine, i, 0));
            hr_sampler_accept(r->smp, t);
            r->tokens[r->n_tokens++] = t;
            r->n_generated++;
            n_gen++;
            bool stop = is_stop_token(s, r, t), stop_str = false;
            struct hr_sched_event ev = {.kind = HR_SCHED_TOKEN, .token = t};
            size_t emit_len = 0;
            if (r->detok && !stop) {
                const char *txt;
                size_t len;
                if (hr_detok_push(r->detok, t, &txt, &len, NULL) == HR_OK)
                    stop_str = text_push(r, txt, len, &emit_len);
                ev.text = r->held;
                ev.text_len = emit_len;
            }
            emit(r, &ev);
            if (r->detok && !stop)
                text_consume(r, stop_str ? r->n_held : emit_len);
            r->stopped_by_string = stop_str;
            enum hr_sched_finish why = HR_SCHED_STOP;
            bool end = stop || stop_str;
            if (!end && r->n_generated >= r->max_tokens)
                end = true, why = HR_SCHED_LENGTH;
            if (end) {
                pthread_mutex_lock(&s->mu);
                running_remove(s, r);
                sched_unlock(s);
                done_why[n_done] = why;
                done_msg[n_done] = NULL;
                done[n_done++] = r;
            }
        }
        for (uint32_t i = 0; i < n_done; i++) {
            finish(done[i], done_why[i], done_msg[i]);
            request_free(s, done[i]);
        }
        pthread_mutex_lock(&s->mu);
        if (n_items)
            s->st.steps++;
        s->st.tokens_prefilled += n_prefilled;
        /* The pool changes only on this thread; readers see this copy. */
        s->st.kv_blocks_used = hr_kv_n_used(hr_backend_kv_pool(s->engine)) -
                               (s->pc ? hr_pcache_n_evictable(s->pc) +
                                            hr_pcache_n_idle_wblocks(s->pc)
                                      : 0);
        s->st.state_slots_used = hr_state_n_used(hr_backend_state_pool(s->engine));
        if (s->cfg.gov) {
            /* Finished and cancelled requests freed their blocks after the
             * step's accounting: the gauge and the accounts follow now.
             * Cached blocks nobody uses are the cache category, the rest KV. */
            account_kv(s);
            trim_cache_under_pressure(s);
        }
        s->st.tokens_generated += n_gen;
        s->st.prefill_chunks += n_chunks;
    }
    /* Shutdown: everything left ends now. */
    struct request *left = NULL;
    while (s->n_running) {
        struct request *r = s->running[--s->n_running];
        r->next = left;
        left = r;
    }
    while (s->q_head) {
        struct request *r = s->q_head;
        queue_remove(s, r);
        r->next = left;
        left = r;
    }
    pthread_cond_broadcast(&s->idle);
    sched_unlock(s);
    while (left) {
        struct request *r = left;
        left = r->next;
        finish(r, HR_SCHED_CANCELLED, "the server is shutting down");
        request_free(s, r);
    }
    return NULL;
}

/* ---- public --------------------------------------------------------------- */

static bool fits_alone(const struct hr_sched *s, uint32_t n_prompt, uint32_t max_tokens,
                       const struct hr_sampler_params *sampling, struct hr_sched_refusal *why);

/*
 * One 1-token step before the governor's first sample, then everything it
 * took given back (its KV block, the arena's pages). What it leaves is what
 * every step leaves for good - the workers' stack pages, lazily bound
 * library state - so the residual that admission reads is already the
 * steady state's: measured after start alone it was about 0.25 MiB low, and
 * a prompt of exactly M tokens could then wait forever for its last chunk.
 */
static void warm_up(struct hr_sched *s)
{
    struct hr_kv_pool *pool = hr_backend_kv_pool(s->engine);
    struct hr_kv_seq seq = {0};
    struct hr_err err = {{0}};
    const int32_t tok = 0;
    if (hr_backend_seq_init(s->engine, &seq, 1, &err) != HR_OK)
        return;
    struct hr_step_seq it = {.kv = &seq, .tokens = &tok, .n_tokens = 1, .n_logits = 1};
    struct hr_step step = {.seqs = &it, .n_seqs = 1};
    (void)hr_backend_step(s->engine, &step, &err);
    hr_backend_seq_free(s->engine, &seq); /* and the state slot it bound (hybrid models) */
    hr_kv_pool_trim(pool);
    hr_backend_arena_release(s->engine);
}

/* The governor's sampling thread: when the ceiling fell under what we hold
 * (another process grew), wake the engine thread to run the reclaim chain. */
static void on_gov_sample(void *ctx, const struct hr_gov_view *view)
{
    struct hr_sched *s = ctx;
    if (view->reclaim_bytes == 0)
        return;
    atomic_store(&s->squeezed, true);
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->wake);
    sched_unlock(s);
}

/* Admission callbacks: KV of L tokens, and the arena of a lone n-token chunk. */
static uint64_t admit_kv(void *ctx, uint32_t n_tokens)
{
    const struct hr_sched *s = ctx;
    return (uint64_t)kv_blocks_for(s, n_tokens) * hr_kv_block_bytes(hr_backend_kv_pool(s->engine));
}

static uint64_t admit_plan(void *ctx, uint32_t n_tokens)
{
    const struct hr_sched *s = ctx;
    struct hr_kv_seq empty = {0};
    struct hr_step_seq it = {.kv = &empty, .n_tokens = n_tokens, .n_logits = 1};
    struct hr_step st = {.seqs = &it, .n_seqs = 1};
    struct hr_backend_plan p;
    hr_backend_plan(s->engine, &st, &p);
    return p.arena_bytes;
}

enum hr_status hr_sched_init(const struct hr_sched_config *cfg, struct hr_sched **out,
                             struct hr_err *err)
{
    *out = NULL;
    if (!cfg->model)
        return hr_err_set(err, HR_ERR_INVALID, "scheduler: no model");
    struct hr_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    const struct hr_hparams *hp = &cfg->model->hp;
    if (!s->cfg.n_ctx)
        s->cfg.n_ctx = hp->n_ctx_train ? hp->n_ctx_train : 4096;
    if (!s->cfg.batch_tokens)
        s->cfg.batch_tokens = 512;
    if (!s->cfg.parallel)
        s->cfg.parallel = 4;
    if (!s->cfg.max_queue)
        s->cfg.max_queue = 64;
    if (!s->cfg.chunk_min)
        s->cfg.chunk_min = HR_GOV_DEFAULT_CHUNK_MIN;
    if (!s->cfg.gov_sample_ms)
        s->cfg.gov_sample_ms = 100;
    if (s->cfg.batch_tokens < s->cfg.parallel)
        s->cfg.batch_tokens = s->cfg.parallel; /* every decode fits in a step */
    if (s->cfg.chunk_min > s->cfg.batch_tokens)
        s->cfg.chunk_min = s->cfg.batch_tokens; /* else no chunk is ever large enough */
    struct hr_backend_config ec = {.n_threads = cfg->n_threads,
                                   .kv_type = cfg->kv_type ? cfg->kv_type : HR_GGML_F16,
                                   .kv_budget_bytes = cfg->kv_budget_bytes,
                                   .max_step_tokens = s->cfg.batch_tokens,
                                   .max_step_logits = s->cfg.parallel,
                                   .max_step_seqs = s->cfg.parallel,
                                   .max_seq_tokens = s->cfg.n_ctx,
                                   .device_limit_bytes = cfg->device_limit_bytes,
                                   .kv_full_window = cfg->kv_full_window};
    enum hr_status st = hr_backend_init(cfg->model, &cfg->device, &ec, &s->engine, err);
    if (st != HR_OK) {
        free(s);
        return st;
    }
    /* A device ceiling may have cut the step the arena holds: prefill
     * chunks follow what the backend was sized for. */
    const uint32_t got = hr_backend_info(s->engine)->max_step_tokens;
    if (got && got < s->cfg.batch_tokens) {
        hr_log_info("sched", "steps of %u tokens (asked %u): the device ceiling sized the arena",
                    got, s->cfg.batch_tokens);
        s->cfg.batch_tokens = got;
        if (s->cfg.chunk_min > got)
            s->cfg.chunk_min = got;
    }
    const size_t par = s->cfg.parallel, nq = (size_t)s->cfg.max_queue + par;
    s->running = calloc(par, sizeof(*s->running));
    s->items = calloc(par, sizeof(*s->items));
    s->item_req = calloc(par, sizeof(*s->item_req));
    s->done = calloc(par, sizeof(*s->done));
    s->done_why = calloc(par, sizeof(*s->done_why));
    s->done_msg = calloc(par, sizeof(*s->done_msg));
    s->out_q = calloc(nq, sizeof(*s->out_q));
    s->out_q_timeout = calloc(nq, 1);
    s->preempted = calloc(par, sizeof(*s->preempted));
    s->started_now = calloc(par, sizeof(*s->started_now));
    if (!s->preempted || !s->started_now || !s->running || !s->items || !s->item_req || !s->done || !s->done_why || !s->done_msg ||
        !s->out_q || !s->out_q_timeout) {
        hr_sched_free(s);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    {
        const uint32_t n_vocab = hr_backend_model(s->engine)->hp.n_vocab;
        enum hr_status sst = hr_sampler_scratch_new(n_vocab, &s->smp_scratch, err);
        if (sst != HR_OK) {
            hr_sched_free(s);
            return sst;
        }
        s->smp_scratch_bytes = hr_sampler_scratch_bytes(n_vocab);
    }
    s->next_id = 1;
    s->st.kv_blocks_total = hr_kv_n_blocks(hr_backend_kv_pool(s->engine));
    /* A hybrid model's cached KV is useless without the recurrent state at
     * the end of the cached tokens: its cache keeps state snapshots
     * (prefix-cache.h), 2 per concurrent request (its prompt's last two
     * block boundaries, snapshot_points) plus 2 for the agent whose next
     * turn comes after its request ended. Their slots are reserved address
     * space, resident only while they hold a snapshot, and count in the
     * cache category; --cache-limit caps the snapshots first and the KV
     * blocks with what is left. A backend that keeps no state pool (NULL)
     * gets no cache for such a model: a KV-only hit would compute wrong
     * tokens. */
    const struct hr_state_pool *state_pool = hr_backend_state_pool(s->engine);
    const bool hybrid = cfg->model->dn.n_layers > 0;
    const uint64_t snap_bytes = hybrid ? hr_state_slot_bytes(state_pool) : 0;
    if (cfg->prefix_cache && hybrid && !snap_bytes)
        hr_log_info("sched", "prefix cache off: %s has recurrent (Gated DeltaNet) layers and this "
                    "backend keeps no state snapshots", hr_arch_name(cfg->model->arch));
    if (cfg->prefix_cache && (!hybrid || snap_bytes)) {
        struct hr_kv_pool *pool = hr_backend_kv_pool(s->engine);
        const uint64_t bb = hr_kv_block_bytes(pool);
        uint64_t n_snaps = hybrid ? 2ull * par + 2 : 0;
        if (hybrid && cfg->cache_limit_bytes && cfg->cache_limit_bytes / snap_bytes < n_snaps)
            n_snaps = cfg->cache_limit_bytes / snap_bytes;
        uint64_t entries = cfg->cache_limit_bytes
                               ? (cfg->cache_limit_bytes - n_snaps * snap_bytes) / bb
                               : hr_kv_n_blocks(pool);
        if (entries > hr_kv_n_blocks(pool))
            entries = hr_kv_n_blocks(pool);
        if (hybrid && !n_snaps)
            entries = 0; /* no room for one snapshot: a cache it could never hit */
        /* The KV of a block depends on the weights, the architecture and
         * the cache type; one process serves one model, so these suffice
         * to keep two schedulers' caches apart in tests. */
        const struct hr_hparams *mh = &cfg->model->hp;
        char fp[160];
        snprintf(fp, sizeof(fp), "%s/%u/%u/%u/%llu/%d", hr_arch_name(cfg->model->arch), mh->n_layer,
                 mh->n_embd, mh->n_vocab, (unsigned long long)cfg->model->weight_bytes,
                 (int)ec.kv_type);
        st = entries ? hr_pcache_init_snapshots(pool, hr_hash_str(fp), (uint32_t)entries,
                                                (uint32_t)n_snaps, snap_bytes / sizeof(float),
                                                &s->pc, err)
                     : HR_OK;
        if (st == HR_OK && n_snaps && entries)
            hr_log_info("sched", "prefix cache: %llu recurrent state snapshots of %.1f MiB each "
                        "(resident only while held, in the cache category)",
                        (unsigned long long)n_snaps, (double)snap_bytes / 1048576.0);
        if (st != HR_OK) {
            hr_sched_free(s);
            return st;
        }
    }
    atomic_init(&s->squeezed, false);
    atomic_init(&s->request_bytes, s->smp_scratch_bytes);
    atomic_init(&s->device_used_peak, 0);
    s->sync_ready = true;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->snap_mu, NULL);
    publish(s); /* the pool's size, before any reader asks */
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (s->cfg.gov) {
        warm_up(s);
        malloc_trim(0);
        hr_gov_set_account(s->cfg.gov, HR_GOV_WEIGHTS, hr_backend_host_weight_bytes(s->engine));
        hr_gov_set_account(s->cfg.gov, HR_GOV_REQUESTS, s->smp_scratch_bytes);
        hr_gov_sample(s->cfg.gov, NULL);
        hr_mem_counter_set(&hr_gov_counters(s->cfg.gov)->kv_blocks_total, s->st.kv_blocks_total);
        st = hr_gov_sampler_start(s->cfg.gov, s->cfg.gov_sample_ms, on_gov_sample, s, err);
        if (st != HR_OK) {
            hr_sched_free(s);
            return st;
        }
        s->gov_sampling = true;
        /* A ceiling that holds not even a 1-token request refuses to start,
         * naming the smallest one that would. */
        struct hr_sched_refusal why;
        const struct hr_sampler_params sp = hr_sampler_defaults();
        if (!fits_alone(s, 1, 1, &sp, &why) && why.reason == HR_SCHED_NO_MEMORY) {
            st = hr_err_set(err, HR_ERR_LIMIT, "%s", why.message);
            hr_sched_free(s);
            return st;
        }
    }
    if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
        hr_sched_free(s);
        return hr_err_set(err, HR_ERR_NOMEM, "cannot start the engine thread");
    }
    s->thread_started = true;
    *out = s;
    return HR_OK;
}

void hr_sched_free(struct hr_sched *s)
{
    if (!s)
        return;
    if (s->gov_sampling)
        hr_gov_sampler_stop(s->cfg.gov);
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->wake);
        sched_unlock(s);
        pthread_join(s->thread, NULL);
    }
    if (s->sync_ready) {
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->snap_mu);
        pthread_cond_destroy(&s->wake);
        pthread_cond_destroy(&s->idle);
    }
    hr_pcache_free(s->pc); /* before the pool it refers to */
    hr_backend_free(s->engine);
    free(s->running);
    free(s->items);
    free(s->item_req);
    free(s->done);
    free(s->done_why);
    free(s->done_msg);
    free(s->out_q);
    free(s->out_q_timeout);
    free(s->preempted);
    free(s->started_now);
    hr_sampler_scratch_free(s->smp_scratch);
    free(s);
}

/* Refusal math without a memory governor: the context and the KV pool. M is
 * the longest prompt that still leaves room for one generated token. */
static bool fits_alone(const struct hr_sched *s, uint32_t n_prompt, uint32_t max_tokens,
                       const struct hr_sampler_params *sampling, struct hr_sched_refusal *why)
{
    /* A prompt's cached blocks are in memory whether it shares them or
     * not, so the memory check counts its whole KV either way; what the
     * cache saves is prefill (start_queued counts only the blocks a request
     * does not share). */
    const struct hr_kv_pool *pool = hr_backend_kv_pool(s->engine);
    const uint64_t pool_tokens = hr_kv_pool_max_tokens(pool, 1);
    uint64_t m = s->cfg.n_ctx - 1;
    if (pool_tokens - 1 < m)
        m = pool_tokens - 1;
    struct hr_gov_admit_result res = {.verdict = HR_GOV_ADMIT};
    bool by_memory = false;
    if (s->cfg.gov && !s->cfg.admit_beyond_memory) {
        const struct hr_gov_admit_req q = {
            .n_prompt = n_prompt,
            .n_ctx = s->cfg.n_ctx,
            .chunk_min = 1, /* alone, the prefill may end with a 1-token chunk (fit_step) */
            .weights_bytes = hr_backend_host_weight_bytes(s->engine),
            /* plus the recurrent state slot it will hold while it runs
             * (hybrid models; 0 otherwise): fixed, whatever the length */
            .request_bytes = request_bytes(s, sampling, n_prompt, max_tokens) +
                             s->smp_scratch_bytes + /* held already, counted once */
                             hr_state_slot_bytes(hr_backend_state_pool(s->engine)),
            .residual_floor_bytes = HR_GOV_RESIDUAL_FLOOR_AUTO,
            .kv_bytes = admit_kv,
            .plan_bytes = admit_plan,
            .ctx = (void *)s,
        };
        hr_gov_admit(s->cfg.gov, &q, &res);
        if (res.max_prompt < m) {
            m = res.max_prompt;
            by_memory = true; /* memory, not the context, sets M */
        }
    }
    if (n_prompt <= m && res.verdict == HR_GOV_ADMIT)
        return true;
    if (by_memory && m == 0) {
        /* Not the prompt's fault: nothing fits, so "> 0 maximum" would send
         * an agent compacting for nothing. Say what would run. */
        char a[32], b[32], c[32];
        *why = (struct hr_sched_refusal){.reason = HR_SCHED_NO_MEMORY,
                                         .n_prompt = n_prompt,
                                         .estimated_bytes = res.need_one_bytes,
                                         .limit_bytes = res.min_ceiling_bytes};
        snprintf(why->message, sizeof(why->message),
                 "the memory ceiling holds no prompt at all: even 1 token needs about %s and the "
                 "limit allows %s; the smallest --memory-limit that runs it is %s",
                 hr_mem_format_bytes(res.need_one_bytes, 1, a, sizeof(a)),
                 hr_mem_format_bytes(res.limit_bytes, 1, b, sizeof(b)),
                 hr_mem_format_bytes(res.min_ceiling_bytes, 1, c, sizeof(c)));
        return false;
    }
    if (res.verdict == HR_GOV_REFUSE_MEMORY || by_memory) {
        *why = (struct hr_sched_refusal){.reason = HR_SCHED_TOO_LONG,
                                         .n_prompt = n_prompt,
                                         .max_prompt = (uint32_t)m,
                                         .estimated_bytes = res.estimated_bytes,
                                         .limit_bytes = res.limit_bytes};
        snprintf(why->message, sizeof(why->message),
                 "prompt is too long: %u tokens > %u maximum (memory)", n_prompt, (uint32_t)m);
        return false;
    }
    *why = (struct hr_sched_refusal){
        .reason = HR_SCHED_TOO_LONG,
        .n_prompt = n_prompt,
        .max_prompt = (uint32_t)m,
        .estimated_bytes = (uint64_t)kv_blocks_for(s, n_prompt + 1) * hr_kv_block_bytes(pool),
        .limit_bytes = (uint64_t)hr_kv_n_blocks(pool) * hr_kv_block_bytes(pool),
    };
    snprintf(why->message, sizeof(why->message), "prompt is too long: %u tokens > %u maximum",
             n_prompt, (uint32_t)m);
    return false;
}

enum hr_status hr_sched_submit(struct hr_sched *s, const struct hr_sched_params *p, uint64_t *id,
                               struct hr_sched_refusal *why, struct hr_err *err)
{
    if (!p->prompt || p->n_prompt == 0)
        return hr_err_set(err, HR_ERR_INVALID, "the prompt is empty");
    if (!p->on_event)
        return hr_err_set(err, HR_ERR_INVALID, "no event callback");
    const uint32_t n_vocab = hr_backend_model(s->engine)->hp.n_vocab;
    for (uint32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= n_vocab)
            return hr_err_set(err, HR_ERR_INVALID, "prompt token %u is %d, outside the vocabulary (%u)",
                              i, p->prompt[i], n_vocab);
    const uint32_t room = p->n_prompt < s->cfg.n_ctx ? s->cfg.n_ctx - p->n_prompt : 0;
    if (!fits_alone(s, p->n_prompt, p->max_tokens == 0 || p->max_tokens > room ? room : p->max_tokens,
                    &p->sampling, why)) {
        pthread_mutex_lock(&s->mu);
        s->st.refused_too_long++;
        sched_unlock(s);
        COUNT(s, requests_refused_too_long_total, 1);
        return hr_err_set(err, HR_ERR_LIMIT, "%s", why->message);
    }
    struct hr_sched_params q = *p;
    if (q.max_tokens == 0 || q.max_tokens > room)
        q.max_tokens = room; /* clamped, not an error */
    struct request *r = NULL;
    enum hr_status st = request_new(s, &q, &r, err);
    if (st != HR_OK)
        return st;
    pthread_mutex_lock(&s->mu);
    if (s->n_queued >= s->cfg.max_queue) {
        s->st.refused_overloaded++;
        sched_unlock(s);
        COUNT(s, requests_refused_overloaded_total, 1);
        request_free(s, r);
        *why = (struct hr_sched_refusal){.reason = HR_SCHED_OVERLOADED, .n_prompt = p->n_prompt};
        snprintf(why->message, sizeof(why->message),
                 "%u requests are already waiting (--max-queue); retry later", s->cfg.max_queue);
        return hr_err_set(err, HR_ERR_LIMIT, "%s", why->message);
    }
    r->id = s->next_id++;
    r->queued_at = hr_now_seconds();
    queue_push(s, r, false);
    s->st.admitted++;
    COUNT(s, requests_admitted_total, 1);
    *id = r->id;
    pthread_cond_signal(&s->wake);
    sched_unlock(s);
    return HR_OK;
}

enum hr_status hr_sched_cancel(struct hr_sched *s, uint64_t id)
{
    enum hr_status st = HR_ERR_NOT_FOUND;
    pthread_mutex_lock(&s->mu);
    for (struct request *r = s->q_head; r; r = r->next)
        if (r->id == id) {
            atomic_store(&r->cancel, true);
            st = HR_OK;
        }
    for (uint32_t i = 0; i < s->n_running; i++)
        if (s->running[i]->id == id) {
            atomic_store(&s->running[i]->cancel, true);
            st = HR_OK;
        }
    if (st == HR_OK)
        pthread_cond_signal(&s->wake);
    sched_unlock(s);
    return st;
}

void hr_sched_stats(struct hr_sched *s, struct hr_sched_stats *out)
{
    pthread_mutex_lock(&s->snap_mu);
    *out = s->snap;
    pthread_mutex_unlock(&s->snap_mu);
    sample_device(s, &out->device_free_bytes, &out->device_total_bytes);
    out->device_used_peak_bytes = atomic_load(&s->device_used_peak);
    out->device_lost = hr_backend_lost(s->engine);
}

const struct hr_backend_info *hr_sched_backend_info(const struct hr_sched *s)
{
    return hr_backend_info(s->engine);
}

uint32_t hr_sched_cached_prefix(struct hr_sched *s, const int32_t *prompt, uint32_t n_prompt)
{
    if (!s->pc || n_prompt == 0)
        return 0;
    const uint32_t bt = hr_kv_block_tokens(hr_backend_kv_pool(s->engine));
    pthread_mutex_lock(&s->mu);
    uint32_t n = hr_pcache_peek(s->pc, prompt, n_prompt) * bt;
    sched_unlock(s);
    const uint32_t most = (n_prompt - 1) / bt * bt;
    return n < most ? n : most;
}

uint32_t hr_sched_admit_max_prompt(struct hr_sched *s)
{
    /* A prompt of the whole context never fits (one token must remain for
     * output), so fits_alone refuses it and says what M is. */
    struct hr_sched_refusal why = {0};
    const struct hr_sampler_params sp = hr_sampler_defaults();
    if (fits_alone(s, s->cfg.n_ctx, 1, &sp, &why))
        return s->cfg.n_ctx - 1;
    return why.reason == HR_SCHED_TOO_LONG ? why.max_prompt : 0;
}

uint64_t hr_sched_min_request_bytes(const struct hr_sched *s)
{
    return admit_kv((void *)s, s->cfg.chunk_min + 1) + admit_plan((void *)s, s->cfg.chunk_min);
}

void hr_sched_wait_idle(struct hr_sched *s)
{
    pthread_mutex_lock(&s->mu);
    while (!s->stop && (s->q_head || s->n_running))
        pthread_cond_wait(&s->idle, &s->mu);
    sched_unlock(s);
}
