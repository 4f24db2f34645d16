/*
 * counters.h - the memory and scheduling counters the server exports at
 * /metrics (issue 6 item 9; the names are fixed there).
 *
 * One struct of atomics, owned by the governor (hr_gov_counters returns
 * it). Who writes what:
 *   - the governor sets the memory gauges (ceiling, current, peak, pressure
 *     level) on every sample, counts pressure transitions and prefill
 *     chunks (total and throttled, in hr_gov_size_chunk), and keeps
 *     step_plan_error_bytes_max (hr_gov_note_plan);
 *   - the scheduler increments the request counters and sets the KV block
 *     gauges, with hr_mem_counter_add / hr_mem_counter_set.
 * Every field is an independent relaxed atomic: any thread may update or
 * read any of them without a lock. A reader (the /metrics handler) sees
 * each value whole, but not a snapshot across fields, which Prometheus does
 * not need.
 */
#ifndef HR_MEM_COUNTERS_H
#define HR_MEM_COUNTERS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct hr_mem_counters {
    /* gauges set by the governor */
    _Atomic uint64_t memory_ceiling_bytes;
    _Atomic uint64_t memory_current_bytes;
    _Atomic uint64_t memory_peak_bytes;
    _Atomic uint64_t memory_pressure_level; /* 0 ok, 1 soft, 2 hard */
    /* counters kept by the governor */
    _Atomic uint64_t pressure_to_soft_total;
    _Atomic uint64_t pressure_to_hard_total;
    _Atomic uint64_t step_plan_error_bytes_max; /* a gauge: the largest |used - planned| */
    _Atomic uint64_t prefill_chunks_total;
    _Atomic uint64_t prefill_chunks_throttled_total;
    /* counters the scheduler increments */
    _Atomic uint64_t requests_admitted_total;
    _Atomic uint64_t requests_refused_too_long_total;
    _Atomic uint64_t requests_refused_overloaded_total;
    _Atomic uint64_t requests_preempted_total;
    _Atomic uint64_t requests_aborted_for_memory_total; /* must stay 0 */
    /* gauges the scheduler sets */
    _Atomic uint64_t kv_blocks_used;
    _Atomic uint64_t kv_blocks_total;
};

static inline void hr_mem_counter_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static inline void hr_mem_counter_set(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, v, memory_order_relaxed);
}

static inline uint64_t hr_mem_counter_get(const _Atomic uint64_t *c)
{
    /* C11 atomic_load takes a non-const pointer in some libcs' prototypes. */
    return atomic_load_explicit((_Atomic uint64_t *)c, memory_order_relaxed);
}

/* Raises *c to v if v is larger (a max gauge). */
void hr_mem_counter_max(_Atomic uint64_t *c, uint64_t v);

/* Zeroes every field (before the counters are shared). */
void hr_mem_counters_init(struct hr_mem_counters *c);

/*
 * Writes the counters in the Prometheus text exposition format (a HELP and a
 * TYPE line per metric family, then its samples) into buf, NUL-terminated,
 * like snprintf: returns the length the whole text needs (excluding the NUL),
 * so a return >= cap means it was cut and a larger buffer (4096 bytes is
 * enough) should be used. buf may be NULL when cap is 0.
 */
size_t hr_mem_counters_format(const struct hr_mem_counters *c, char *buf, size_t cap);

#endif
