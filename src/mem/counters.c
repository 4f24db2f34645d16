/*
 * counters.c - the exported counters and their Prometheus text; see
 * counters.h. The metric table below is the single place a name, its type
 * and its help text are written.
 */
#include "mem/counters.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void hr_mem_counter_max(_Atomic uint64_t *c, uint64_t v)
{
    uint64_t old = atomic_load_explicit(c, memory_order_relaxed);
    while (v > old && !atomic_compare_exchange_weak_explicit(c, &old, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

void hr_mem_counters_init(struct hr_mem_counters *c)
{
    _Atomic uint64_t *fields[] = {&c->memory_ceiling_bytes,
                                  &c->memory_current_bytes,
                                  &c->memory_peak_bytes,
                                  &c->memory_pressure_level,
                                  &c->pressure_to_soft_total,
                                  &c->pressure_to_hard_total,
                                  &c->step_plan_error_bytes_max,
                                  &c->prefill_chunks_total,
                                  &c->prefill_chunks_throttled_total,
                                  &c->requests_admitted_total,
                                  &c->requests_refused_too_long_total,
                                  &c->requests_refused_overloaded_total,
                                  &c->requests_preempted_total,
                                  &c->requests_aborted_for_memory_total,
                                  &c->kv_blocks_used,
                                  &c->kv_blocks_total};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) atomic_init(fields[i], 0);
}

/* An snprintf that appends at *len and keeps counting once buf is full. */
struct out {
    char *buf;
    size_t cap, len;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *dst = o->len < o->cap ? o->buf + o->len : NULL;
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

/*
 * The metric families in export order. A family has one sample, or two
 * labelled ones; `offset` locates a sample's field in the struct.
 */
#define F(field) offsetof(struct hr_mem_counters, field)
static const struct {
    const char *name, *type, *help;
    struct {
        const char *labels;
        size_t offset;
    } s[2];
} g_families[] = {
    {"headroom_memory_ceiling_bytes",
     "gauge",
     "Memory ceiling: the least of --memory-limit, the cgroup limit, RAM and what is available.",
     {{"", F(memory_ceiling_bytes)}}},
    {"headroom_memory_current_bytes",
     "gauge",
     "Memory in use: the larger of accounted and measured bytes.",
     {{"", F(memory_current_bytes)}}},
    {"headroom_memory_peak_bytes",
     "gauge",
     "Largest memory_current_bytes seen.",
     {{"", F(memory_peak_bytes)}}},
    {"headroom_memory_pressure_level",
     "gauge",
     "Memory pressure: 0 ok, 1 soft, 2 hard.",
     {{"", F(memory_pressure_level)}}},
    {"headroom_memory_pressure_transitions_total",
     "counter",
     "Transitions into a memory pressure level.",
     {{"{to=\"soft\"}", F(pressure_to_soft_total)}, {"{to=\"hard\"}", F(pressure_to_hard_total)}}},
    {"headroom_step_plan_error_bytes_max",
     "gauge",
     "Largest difference between a step's planned and used bytes.",
     {{"", F(step_plan_error_bytes_max)}}},
    {"headroom_prefill_chunks_total",
     "counter",
     "Prefill chunks run.",
     {{"", F(prefill_chunks_total)}}},
    {"headroom_prefill_chunks_throttled_total",
     "counter",
     "Prefill chunks made smaller than requested to stay under the hard watermark.",
     {{"", F(prefill_chunks_throttled_total)}}},
    {"headroom_requests_admitted_total",
     "counter",
     "Requests admitted.",
     {{"", F(requests_admitted_total)}}},
    {"headroom_requests_refused_total",
     "counter",
     "Requests refused: too long to ever fit, or the queue was full or timed out.",
     {{"{reason=\"too_long\"}", F(requests_refused_too_long_total)},
      {"{reason=\"overloaded\"}", F(requests_refused_overloaded_total)}}},
    {"headroom_requests_preempted_total",
     "counter",
     "Running requests preempted to free memory (resumed later).",
     {{"", F(requests_preempted_total)}}},
    {"headroom_requests_aborted_for_memory_total",
     "counter",
     "Started requests aborted for memory; headroom's promise is that this stays 0.",
     {{"", F(requests_aborted_for_memory_total)}}},
    {"headroom_kv_blocks_used", "gauge", "KV cache blocks in use.", {{"", F(kv_blocks_used)}}},
    {"headroom_kv_blocks_total",
     "gauge",
     "KV cache blocks in the pool.",
     {{"", F(kv_blocks_total)}}},
};
#undef F

size_t hr_mem_counters_format(const struct hr_mem_counters *c, char *buf, size_t cap)
{
    struct out o = {.buf = buf, .cap = buf ? cap : 0, .len = 0};
    if (o.cap > 0) buf[0] = 0;
    for (size_t i = 0; i < sizeof(g_families) / sizeof(g_families[0]); i++) {
        put(&o, "# HELP %s %s\n# TYPE %s %s\n", g_families[i].name, g_families[i].help,
            g_families[i].name, g_families[i].type);
        for (int k = 0; k < 2 && g_families[i].s[k].labels; k++) {
            const _Atomic uint64_t *v =
                (const _Atomic uint64_t *)((const char *)c + g_families[i].s[k].offset);
            put(&o, "%s%s %llu\n", g_families[i].name, g_families[i].s[k].labels,
                (unsigned long long)hr_mem_counter_get(v));
        }
    }
    return o.len;
}
