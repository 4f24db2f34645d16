/*
 * threadpool.c - spin-then-futex worker pool; see threadpool.h.
 *
 * Dispatch: the caller publishes (fn, ctx) and bumps `generation`; workers
 * waiting for a new generation pick it up, run fn, and bump `n_done`. The
 * caller runs its own share as thread 0, then waits for n_done == nth - 1.
 *
 * Barrier: a sense-reversing counter. Each arriving thread increments
 * `barrier_count`; the last one resets it and flips `barrier_phase`; the
 * others wait on the phase. Kernels between barriers are microseconds to
 * milliseconds long, so waiters spin with a pause first; past SPIN_YIELD
 * iterations they also yield the core, because on a machine with more
 * runnable threads than cores the thread they wait for may be queued behind
 * them (measured: pure spinning made decode 50x slower under a load of 2 on
 * 2 cores).
 */
#include "engine/threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spin iterations before sleeping: roughly 50-100 us. */
#define SPIN_LIMIT 20000
/* Spin iterations in a barrier before yielding the core between checks. */
#define SPIN_YIELD 2000

static inline void wait_step(int *spins)
{
    if (++*spins < SPIN_YIELD)
        cpu_relax();
    else
        sched_yield();
}

struct worker {
    struct hr_pool *pool;
    int ith;
    pthread_t thread;
};

struct hr_pool {
    int nth;
    struct worker *workers; /* nth - 1 of them; the caller is thread 0 */
    hr_pool_fn fn;
    void *ctx;
    _Atomic unsigned generation; /* bumped per run; futex word */
    _Atomic int n_done;
    _Atomic int n_started;
    _Atomic int stop;
    _Atomic int barrier_count;
    _Atomic unsigned barrier_phase;
};

static void futex_wait(_Atomic unsigned *addr, unsigned val)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic unsigned *addr)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct hr_pool *p = w->pool;
    unsigned seen = 0;
    atomic_fetch_add_explicit(&p->n_started, 1, memory_order_release);
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (++spins < SPIN_LIMIT)
                cpu_relax();
            else
                futex_wait(&p->generation, seen);
        }
        seen = gen;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        p->fn(p->ctx, w->ith, p->nth);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
    }
}

enum hr_status hr_pool_init(int n_threads, struct hr_pool **out, struct hr_err *err)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return hr_err_set(err, HR_ERR_RANGE, "thread count %d is not in 1..1024", n_threads);
    struct hr_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the thread pool");
    p->nth = n_threads;
    p->workers = calloc((size_t)n_threads, sizeof(*p->workers));
    if (!p->workers) {
        free(p);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker *w = &p->workers[i];
        w->pool = p;
        w->ith = i;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            p->nth = i; /* free() joins the ones that started */
            hr_pool_free(p);
            return hr_err_set(err, HR_ERR_NOMEM, "cannot start worker thread %d: %s", i,
                              strerror(rc));
        }
    }
    /* Wait until every worker runs: thread start-up (stack, TLS, sanitizer
     * bookkeeping) then happens here, not inside the first step, which must
     * not allocate. */
    while (atomic_load_explicit(&p->n_started, memory_order_acquire) != n_threads - 1)
        sched_yield();
    *out = p;
    return HR_OK;
}

void hr_pool_free(struct hr_pool *p)
{
    if (!p)
        return;
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_acq_rel);
    futex_wake_all(&p->generation);
    for (int i = 1; i < p->nth; i++)
        pthread_join(p->workers[i].thread, NULL);
    free(p->workers);
    free(p);
}

int hr_pool_size(const struct hr_pool *p)
{
    return p->nth;
}

void hr_pool_run(struct hr_pool *p, hr_pool_fn fn, void *ctx)
{
    if (p->nth == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    futex_wake_all(&p->generation);
    fn(ctx, 0, p->nth);
    int spins = 0;
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) != p->nth - 1)
        wait_step(&spins);
}

void hr_pool_barrier(struct hr_pool *p)
{
    if (p->nth == 1)
        return;
    unsigned phase = atomic_load_explicit(&p->barrier_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->barrier_count, 1, memory_order_acq_rel) == p->nth - 1) {
        atomic_store_explicit(&p->barrier_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->barrier_phase, 1, memory_order_release);
        return;
    }
    int spins = 0;
    while (atomic_load_explicit(&p->barrier_phase, memory_order_acquire) == phase)
        wait_step(&spins);
}

int hr_physical_cores(void)
{
    /* Count distinct (physical id, core id) pairs; fall back to online CPUs. */
    FILE *f = fopen("/proc/cpuinfo", "r");
    int n = 0;
    if (f) {
        char line[256];
        int phys = 0, seen[4096][2], n_seen = 0;
        while (fgets(line, sizeof(line), f)) {
            int v;
            if (sscanf(line, "physical id : %d", &v) == 1)
                phys = v;
            else if (sscanf(line, "core id : %d", &v) == 1) {
                int dup = 0;
                for (int i = 0; i < n_seen; i++)
                    if (seen[i][0] == phys && seen[i][1] == v)
                        dup = 1;
                if (!dup && n_seen < 4096) {
                    seen[n_seen][0] = phys;
                    seen[n_seen][1] = v;
                    n_seen++;
                }
            }
        }
        fclose(f);
        n = n_seen;
    }
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return n;
}
