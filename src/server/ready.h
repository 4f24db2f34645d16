/*
 * ready.h - readiness for a balancer: whether this server should get new
 * requests now, why not, and how much of it is free, in the forms routers
 * read (`/ready`, the HAProxy agent check, `vllm:kv_cache_usage_perc` and
 * `headroom_ready` in /metrics).
 *
 * headroom knows what no peer exports: how much memory it may still take.
 * A router that sees it sends traffic elsewhere *before* this server has to
 * queue, refuse or preempt. So the usage fraction is not "blocks in use /
 * blocks": it is
 *
 *     usage = 1 - available / total
 *     available = min(free + evictable,                   the KV pool's view
 *                     evictable + max(0, hard - current) / block_bytes)
 *                                                          the governor's view
 *
 * free: pool blocks nobody holds; evictable: prefix-cache blocks no request
 * uses (they are resident and the first memory given back, so a new
 * request can have them); hard - current: what the governor can still fund
 * under the hard watermark of the ceiling in effect (the dynamic one when
 * other processes squeeze us). Under a squeeze the second term falls while
 * the pool still has free blocks, and usage rises toward 1.
 *
 * The state machine (one per server), evaluated on every read (a probe, an
 * agent connection, a scrape) from a snapshot of the scheduler's stats and
 * the governor's view - never waiting for an engine step:
 *
 *                 enter: any reason holds (immediately)
 *     [ready] -----------------------------------------> [not ready: reason]
 *        ^                                                  |   |
 *        |   leave: no reason holds with its margin (below) |   | draining: never leaves
 *        +--------------------------------------------------+   |
 *            and the state has lasted hold_s                     v
 *
 * Reasons, in the order reported when several hold:
 *   loading    the model is not loaded yet
 *   draining   SIGTERM/SIGINT received (permanent)
 *   memory     enter: pressure is hard and the headroom (hard - current +
 *              evictable cache) is below what a minimal request needs;
 *              leave: pressure below hard and the headroom at least twice that
 *   queue_full enter: the queue holds max_queue requests (the next one would
 *              be refused); leave: at most half of max_queue wait
 * Entering is immediate, so a router learns at its next probe; leaving
 * needs the margin and the hold, so probes do not flap on a value sitting
 * at a threshold. A change of reason while not ready restarts nothing.
 *
 * Threads: hr_ready_update locks the state's own mutex for a few
 * comparisons; any thread may call it. hr_ready_kv_usage and
 * hr_ready_percent are pure. The caller (routes.c: hr_server_ready) builds
 * the input from hr_sched_stats' published copy and the governor's last
 * view, neither of which waits for the engine thread.
 */
#ifndef HR_SERVER_READY_H
#define HR_SERVER_READY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "mem/governor.h"

enum hr_ready_reason {
    HR_READY_OK = 0,
    HR_READY_LOADING,
    HR_READY_DRAINING,
    HR_READY_MEMORY,
    HR_READY_QUEUE_FULL,
};

/* "ready", "loading", "draining", "memory", "queue_full": the /ready body's status. */
const char *hr_ready_reason_name(enum hr_ready_reason r);

#define HR_READY_DEFAULT_HOLD_S 2.0

/* What one evaluation reads: a snapshot, copied by the caller. */
struct hr_ready_input {
    bool loading, draining;
    uint32_t queued, max_queue;
    /* the KV pool (hr_sched_stats): blocks held by requests, blocks the
     * prefix cache holds that no request uses, all blocks, their size */
    uint32_t kv_blocks_used, kv_blocks_evictable, kv_blocks_total;
    uint64_t kv_block_bytes;
    /* the governor's view; governed false: no governor, memory never binds */
    bool governed;
    enum hr_gov_level level;
    uint64_t current_bytes, hard_bytes;
    uint64_t min_request_bytes; /* what the smallest request adds (hr_sched_min_request_bytes) */
};

struct hr_ready {
    pthread_mutex_t mu;
    double hold_s;
    enum hr_ready_reason reason; /* HR_READY_OK: ready */
    double since;                /* when the current state began */
    uint64_t n_changes;          /* transitions, for tests and the log */
};

/* hold_s < 0: the default. Starts not ready (loading) at time `now`. */
void hr_ready_init(struct hr_ready *r, double hold_s, double now);
void hr_ready_free(struct hr_ready *r);

/*
 * Applies one snapshot at time `now` (seconds, monotonic) and returns the
 * reason in effect afterwards (HR_READY_OK: ready). Logs one line per
 * change of readiness.
 */
enum hr_ready_reason hr_ready_update(struct hr_ready *r, const struct hr_ready_input *in,
                                     double now);

/* The fraction described above, in [0, 1]; 0 when total is 0. */
double hr_ready_kv_usage(const struct hr_ready_input *in);

/* The admittable share for the HAProxy agent (`ready up P%`): 1 - usage,
 * scaled by the room left in the queue, as a percentage in [1, 100] (1,
 * not 0: a weight of 0 would drain a server that /ready calls ready). */
unsigned hr_ready_percent(const struct hr_ready_input *in);

#endif
