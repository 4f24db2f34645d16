/*
 * reclaim.h - the reclaim chain: an ordered list of ways to give memory
 * back, tried cheapest first until enough is freed (DESIGN.md 4.8).
 *
 * The governor owns no memory itself, so the chain is made of callbacks the
 * scheduler registers at start-up, in this order:
 *   1. release free arena and KV pool pages to the OS (hr_kv_pool_trim);
 *   2. evict prefix-cache blocks nobody references, least recently used first;
 *   3. preempt the youngest running request (free its KV, requeue it at the
 *      head, resume it later by recomputation).
 * hr_mem_reclaim_run calls each stage with the bytes still wanted and stops
 * as soon as the target is met, so a trim that frees enough never evicts
 * and an eviction that frees enough never preempts. A stage may free more
 * or less than it is asked; it reports what it freed. A stage that can free
 * in several steps (several preemptions) loops inside its callback, where
 * it can also bound itself (the scheduler's starvation rule).
 *
 * Threads: register stages before the chain is shared. hr_mem_reclaim_run
 * holds no lock while it calls a stage, so a stage may call the governor;
 * the stages must be safe on the thread that runs the chain. Stages that
 * touch engine-thread state (KV, running requests) belong on the engine
 * thread: the governor's sampling thread should signal the engine thread
 * ("reclaim needed", see governor.h) rather than run such a chain itself.
 */
#ifndef HR_MEM_RECLAIM_H
#define HR_MEM_RECLAIM_H

#include <stdint.h>

#include "base/status.h"

#define HR_MEM_RECLAIM_MAX_STAGES 8

/* Frees memory, ideally at least want_bytes; returns the bytes it freed. */
typedef uint64_t (*hr_mem_reclaim_fn)(void *ctx, uint64_t want_bytes);

struct hr_mem_reclaim_stage {
    const char *name; /* for the log line: "trim", "evict", "preempt" (not copied) */
    hr_mem_reclaim_fn fn;
    void *ctx;
};

struct hr_mem_reclaim {
    struct hr_mem_reclaim_stage stages[HR_MEM_RECLAIM_MAX_STAGES];
    int n_stages;
};

/* What a run did, stage by stage, in chain order. */
struct hr_mem_reclaim_report {
    uint64_t want_bytes;
    uint64_t freed_bytes; /* the sum of the stages */
    uint64_t stage_freed_bytes[HR_MEM_RECLAIM_MAX_STAGES];
    int n_stages_run; /* stages called, from the first */
};

void hr_mem_reclaim_init(struct hr_mem_reclaim *chain);

/* Appends a stage (run after the ones before it). HR_ERR_LIMIT when full. */
enum hr_status hr_mem_reclaim_add(struct hr_mem_reclaim *chain, const char *name,
                                  hr_mem_reclaim_fn fn, void *ctx);

/*
 * Runs the stages in order until want_bytes are freed or the chain ends;
 * returns the bytes freed (possibly more than wanted, possibly less). Logs
 * one line when want_bytes > 0. report may be NULL.
 */
uint64_t hr_mem_reclaim_run(const struct hr_mem_reclaim *chain, uint64_t want_bytes,
                            struct hr_mem_reclaim_report *report);

#endif
