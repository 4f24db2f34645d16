/*
 * threadpool.h - persistent worker threads for the engine's parallel loops.
 *
 * The engine splits every kernel by rows across a fixed set of threads. The
 * threads are created once (hr_pool_init) and live until hr_pool_free; a
 * step never creates a thread. hr_pool_run(pool, fn, ctx) runs fn(ctx, ith,
 * nth) on every thread, the caller being thread 0, and returns when all are
 * done. Inside fn, hr_pool_barrier() synchronizes all nth threads (used
 * between a matmul's activation-conversion and compute phases).
 *
 * Waiting: workers spin briefly on an atomic generation counter, then sleep
 * on a futex, so an idle server costs no CPU while back-to-back kernels
 * (hundreds per step) pay no wake-up latency.
 *
 * Threads: hr_pool_run must be called from one thread at a time (the engine
 * thread). No allocation after hr_pool_init.
 */
#ifndef HR_ENGINE_THREADPOOL_H
#define HR_ENGINE_THREADPOOL_H

#include "base/status.h"

struct hr_pool;

typedef void (*hr_pool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 (the caller counts as one). */
enum hr_status hr_pool_init(int n_threads, struct hr_pool **out, struct hr_err *err);
void hr_pool_free(struct hr_pool *pool);
int hr_pool_size(const struct hr_pool *pool);

/* Runs fn on all threads and waits for them. */
void hr_pool_run(struct hr_pool *pool, hr_pool_fn fn, void *ctx);

/* Inside fn: waits until all threads of the current run reach this point. */
void hr_pool_barrier(struct hr_pool *pool);

/* Physical cores of this machine (the default for --threads); at least 1. */
int hr_physical_cores(void);

#endif
