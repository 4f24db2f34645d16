/*
 * ready.c - the readiness state machine and the memory-aware usage
 * fraction; see ready.h for the rules and why.
 */
#include "server/ready.h"

#include "base/log.h"

const char *hr_ready_reason_name(enum hr_ready_reason r)
{
    switch (r) {
    case HR_READY_OK: return "ready";
    case HR_READY_LOADING: return "loading";
    case HR_READY_DRAINING: return "draining";
    case HR_READY_MEMORY: return "memory";
    case HR_READY_QUEUE_FULL: return "queue_full";
    }
    return "?";
}

void hr_ready_init(struct hr_ready *r, double hold_s, double now)
{
    pthread_mutex_init(&r->mu, NULL);
    r->hold_s = hold_s >= 0 ? hold_s : HR_READY_DEFAULT_HOLD_S;
    r->reason = HR_READY_LOADING;
    r->since = now;
    r->n_changes = 0;
}

void hr_ready_free(struct hr_ready *r)
{
    pthread_mutex_destroy(&r->mu);
}

/* Blocks a new request could take from the pool and from memory. */
static double available_blocks(const struct hr_ready_input *in)
{
    const uint32_t used = in->kv_blocks_used < in->kv_blocks_total ? in->kv_blocks_used
                                                                   : in->kv_blocks_total;
    double avail = (double)(in->kv_blocks_total - used); /* free + evictable */
    if (in->governed && in->kv_block_bytes) {
        const double room = in->hard_bytes > in->current_bytes
                                ? (double)(in->hard_bytes - in->current_bytes)
                                : 0.0;
        const double funded = (double)in->kv_blocks_evictable + room / (double)in->kv_block_bytes;
        if (funded < avail)
            avail = funded;
    }
    return avail;
}

double hr_ready_kv_usage(const struct hr_ready_input *in)
{
    if (!in->kv_blocks_total)
        return 0.0;
    const double u = 1.0 - available_blocks(in) / (double)in->kv_blocks_total;
    return u < 0 ? 0.0 : u > 1 ? 1.0 : u;
}

unsigned hr_ready_percent(const struct hr_ready_input *in)
{
    double f = 1.0 - hr_ready_kv_usage(in);
    if (in->max_queue) {
        const double q = in->queued < in->max_queue ? (double)in->queued / in->max_queue : 1.0;
        f *= 1.0 - q;
    }
    const double p = f * 100.0;
    return p < 1 ? 1u : p > 100 ? 100u : (unsigned)p;
}

/* Headroom for a new request: what the governor can fund plus idle cache. */
static uint64_t headroom_bytes(const struct hr_ready_input *in)
{
    const uint64_t room = in->hard_bytes > in->current_bytes ? in->hard_bytes - in->current_bytes : 0;
    return room + (uint64_t)in->kv_blocks_evictable * in->kv_block_bytes;
}

/* The reason that holds now, entering thresholds (a ready server). */
static enum hr_ready_reason reason_to_enter(const struct hr_ready_input *in)
{
    if (in->loading)
        return HR_READY_LOADING;
    if (in->draining)
        return HR_READY_DRAINING;
    if (in->governed && in->level == HR_GOV_HARD && headroom_bytes(in) < in->min_request_bytes)
        return HR_READY_MEMORY;
    if (in->max_queue && in->queued >= in->max_queue)
        return HR_READY_QUEUE_FULL;
    return HR_READY_OK;
}

/* Whether a reason still holds with the leaving margin (a server not ready). */
static bool still_holds(const struct hr_ready_input *in, enum hr_ready_reason r)
{
    switch (r) {
    case HR_READY_OK: return false;
    case HR_READY_LOADING: return in->loading;
    case HR_READY_DRAINING: return true;
    case HR_READY_MEMORY:
        return in->governed && (in->level == HR_GOV_HARD ||
                                headroom_bytes(in) < 2 * in->min_request_bytes);
    case HR_READY_QUEUE_FULL: return in->max_queue && in->queued > in->max_queue / 2;
    }
    return false;
}

enum hr_ready_reason hr_ready_update(struct hr_ready *r, const struct hr_ready_input *in,
                                     double now)
{
    pthread_mutex_lock(&r->mu);
    const enum hr_ready_reason was = r->reason;
    enum hr_ready_reason next = reason_to_enter(in);
    /* Leaving: the reason in effect must have cleared with its margin, and
     * the state must have lasted the hold. (Draining never clears: the
     * server keeps its flag until it exits.) A loaded model is ready at
     * once: nothing flapped. */
    if (was != HR_READY_OK && next == HR_READY_OK &&
        (still_holds(in, was) || (was != HR_READY_LOADING && now - r->since < r->hold_s)))
        next = was;
    if (next != was) {
        const bool flip = (was == HR_READY_OK) != (next == HR_READY_OK);
        hr_log_info("ready", "%s -> %s after %.1f s (queued %u of %u, pressure %s)",
                    hr_ready_reason_name(was), hr_ready_reason_name(next), now - r->since,
                    in->queued, in->max_queue,
                    in->governed ? hr_gov_level_name(in->level) : "ungoverned");
        /* A new reason while not ready keeps the hold's clock running. */
        if (flip)
            r->since = now;
        r->reason = next;
        r->n_changes++;
    }
    pthread_mutex_unlock(&r->mu);
    return next;
}
