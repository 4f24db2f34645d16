/*
 * decisions.c - the process's ring of recent memory decisions (see
 * decisions.h). Static storage and a statically initialized mutex: nothing
 * to set up, nothing allocated, usable from the first governor sample on.
 */
#include "mem/decisions.h"

#include <pthread.h>
#include <string.h>

#include "base/sys.h"

static pthread_mutex_t ring_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hr_decision ring[HR_DECISIONS_CAP];
static uint64_t ring_last; /* the newest seq; entry seq s lives at ring[(s - 1) % CAP] */

const char *hr_decision_kind_name(enum hr_decision_kind k)
{
    static const char *const names[HR_DECISION_N_KINDS] = {
        "pressure", "chunk", "preempt", "resume", "refuse", "reclaim",
    };
    return (unsigned)k < HR_DECISION_N_KINDS ? names[k] : "?";
}

void hr_decision_record(const struct hr_decision *d)
{
    const double t = hr_now_seconds();
    pthread_mutex_lock(&ring_mu);
    const uint64_t seq = ++ring_last;
    struct hr_decision *e = &ring[(seq - 1) % HR_DECISIONS_CAP];
    *e = *d;
    e->seq = seq;
    e->t = t;
    pthread_mutex_unlock(&ring_mu);
}

void hr_decision_pressure(int from, int to, uint64_t current_bytes, uint64_t soft_bytes,
                          uint64_t hard_bytes, uint64_t ceiling_bytes)
{
    struct hr_decision d = {.kind = HR_DECISION_PRESSURE};
    d.u.pressure.from = from;
    d.u.pressure.to = to;
    d.u.pressure.current_bytes = current_bytes;
    d.u.pressure.soft_bytes = soft_bytes;
    d.u.pressure.hard_bytes = hard_bytes;
    d.u.pressure.ceiling_bytes = ceiling_bytes;
    hr_decision_record(&d);
}

void hr_decision_chunk(uint64_t request_id, uint32_t asked_tokens, uint32_t chosen_tokens,
                       uint64_t kv_len, uint64_t headroom_bytes, uint64_t planned_bytes)
{
    struct hr_decision d = {.kind = HR_DECISION_CHUNK, .request_id = request_id};
    d.u.chunk.asked_tokens = asked_tokens;
    d.u.chunk.chosen_tokens = chosen_tokens;
    d.u.chunk.kv_len = kv_len;
    d.u.chunk.headroom_bytes = headroom_bytes;
    d.u.chunk.planned_bytes = planned_bytes;
    hr_decision_record(&d);
}

void hr_decision_preempt(uint64_t request_id, uint32_t kv_blocks_used, uint32_t kv_blocks_total,
                         uint32_t recompute_tokens)
{
    struct hr_decision d = {.kind = HR_DECISION_PREEMPT, .request_id = request_id};
    d.u.preempt.kv_blocks_used = kv_blocks_used;
    d.u.preempt.kv_blocks_total = kv_blocks_total;
    d.u.preempt.recompute_tokens = recompute_tokens;
    hr_decision_record(&d);
}

void hr_decision_reclaim(uint32_t blocks, uint64_t bytes)
{
    struct hr_decision d = {.kind = HR_DECISION_RECLAIM};
    d.u.reclaim.blocks = blocks;
    d.u.reclaim.bytes = bytes;
    hr_decision_record(&d);
}

size_t hr_decisions_read(uint64_t after_seq, struct hr_decision *out, size_t cap,
                         uint64_t *last_seq)
{
    pthread_mutex_lock(&ring_mu);
    const uint64_t last = ring_last;
    /* The oldest entry still in the ring. */
    const uint64_t oldest = last > HR_DECISIONS_CAP ? last - HR_DECISIONS_CAP + 1 : 1;
    uint64_t s = after_seq + 1 > oldest ? after_seq + 1 : oldest;
    size_t n = 0;
    for (; s <= last && n < cap; s++)
        out[n++] = ring[(s - 1) % HR_DECISIONS_CAP];
    pthread_mutex_unlock(&ring_mu);
    if (last_seq)
        *last_seq = last;
    return n;
}
