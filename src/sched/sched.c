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

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/sys.h"
#include "engine/engine.h"

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
    atomic_bool cancel;
    double queued_at;
    uint64_t started; /* start order, for "youngest" */
    hr_sched_event_fn fn;
    void *user;
    struct request *next; /* queue link */
};

struct hr_sched {
    struct hr_sched_config cfg;
    struct hr_engine *engine;
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
    bool sync_ready, thread_started;
    /* engine-thread scratch, sized at init so the loop never allocates */
    struct hr_step_seq *items;       /* parallel */
    struct request **item_req;       /* parallel */
    struct request **done;           /* parallel: leave the running table this step */
    enum hr_sched_finish *done_why;
    const char **done_msg;
    struct request **out_q;          /* max_queue + parallel: leave the queue */
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

/* ---- requests ------------------------------------------------------------ */

static void request_free(struct hr_sched *s, struct request *r)
{
    if (!r)
        return;
    if (r->kv.blocks)
        hr_kv_seq_free(&r->kv, hr_engine_kv_pool(s->engine));
    hr_sampler_free(r->smp);
    hr_detok_free(r->detok);
    for (uint32_t i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->stops);
    free(r->stop_ids);
    free(r->held);
    free(r->tokens);
    free(r);
}

static uint32_t kv_blocks_for(const struct hr_sched *s, uint32_t n_tokens)
{
    const uint32_t bt = hr_kv_block_tokens(hr_engine_kv_pool(s->engine));
    return (n_tokens + bt - 1) / bt;
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
    atomic_init(&r->cancel, false);
    enum hr_status st = HR_ERR_NOMEM;
    r->tokens = malloc((size_t)cap * sizeof(int32_t));
    if (!r->tokens)
        goto fail;
    memcpy(r->tokens, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    if ((st = hr_engine_seq_init(s->engine, &r->kv, cap, err)) != HR_OK ||
        (st = hr_sampler_init(&p->sampling, hr_engine_model(s->engine)->hp.n_vocab, &r->smp,
                              err)) != HR_OK)
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
                best = at < best ? at : best;
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
    struct hr_sched_event ev = {.kind = HR_SCHED_FINISHED, .finish = f, .message = msg};
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

/* Moves queued requests to the running table while there is a slot. A
 * request starts when nothing runs (the head of the queue always fits
 * alone: admission checked it), or when the KV pool has room for its
 * pending tokens, so that a preempted request is not restarted only to be
 * preempted again. */
static void start_queued(struct hr_sched *s)
{
    struct hr_kv_pool *pool = hr_engine_kv_pool(s->engine);
    while (s->q_head && s->n_running < s->cfg.parallel) {
        struct request *r = s->q_head;
        if (s->n_running > 0 && kv_blocks_for(s, r->n_tokens + 1) > hr_kv_n_free(pool))
            break;
        queue_remove(s, r);
        r->state = ST_RUNNING;
        /* A preempted request keeps its original age: the youngest is
         * preempted first, so a request that waited longest is never the
         * one pushed out again, and nobody starves. */
        if (!r->started)
            r->started = ++s->n_started;
        s->running[s->n_running++] = r;
    }
}

/* Frees the youngest running request's KV and puts it back at the head of
 * the queue; it resumes by recomputing its prompt and output (the kernels
 * are batch invariant, so it continues exactly as it would have). */
static void preempt_youngest(struct hr_sched *s)
{
    struct request *y = s->running[0];
    for (uint32_t i = 1; i < s->n_running; i++)
        if (s->running[i]->started > y->started)
            y = s->running[i];
    hr_kv_seq_clear(&y->kv, hr_engine_kv_pool(s->engine));
    running_remove(s, y);
    queue_push(s, y, true);
    s->st.preempted++;
    hr_log_info("sched", "request %llu preempted: KV pool full (%u of %u blocks), resumes by recompute "
                "of %u tokens",
                (unsigned long long)y->id, hr_kv_n_used(hr_engine_kv_pool(s->engine)),
                hr_kv_n_blocks(hr_engine_kv_pool(s->engine)), y->n_tokens);
}

/* Fills s->items: one token of every request with one pending, then prefill
 * chunks in start order within the budget. Returns the number of items. */
static uint32_t build_step(struct hr_sched *s)
{
    uint32_t n = 0, budget = s->cfg.batch_tokens;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < s->n_running && budget > 0; i++) {
            struct request *r = s->running[i];
            const uint32_t pending = r->n_tokens - r->kv.n_tokens;
            if ((pass == 0) != (pending == 1) || pending == 0)
                continue;
            const uint32_t take = pending < budget ? pending : budget;
            s->items[n] = (struct hr_step_seq){.kv = &r->kv,
                                               .tokens = r->tokens + r->kv.n_tokens,
                                               .n_tokens = take,
                                               .n_logits = take == pending ? 1 : 0};
            s->item_req[n++] = r;
            budget -= take;
        }
    }
    return n;
}

static void *engine_main(void *arg)
{
    struct hr_sched *s = arg;
    struct request **done = s->done;
    enum hr_sched_finish *done_why = s->done_why;
    const char **done_msg = s->done_msg;
    struct hr_err err = {{0}};
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->q_head && s->n_running == 0) {
            pthread_cond_broadcast(&s->idle);
            pthread_cond_wait(&s->wake, &s->mu);
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
                if (!cancelled)
                    s->st.refused_overloaded++;
            }
        }
        start_queued(s);
        pthread_mutex_unlock(&s->mu);

        for (uint32_t i = 0; i < n_out; i++) {
            struct request *r = s->out_q[i];
            if (!s->out_q_timeout[i]) {
                finish(r, HR_SCHED_CANCELLED, NULL);
            } else {
                struct hr_sched_refusal why = {.reason = HR_SCHED_OVERLOADED,
                                               .n_prompt = r->n_prompt};
                snprintf(why.message, sizeof(why.message),
                         "waited %.0f s in the queue (--queue-timeout); retry later",
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
        uint32_t n_items = build_step(s);
        pthread_mutex_unlock(&s->mu);

        enum hr_status st = HR_OK;
        if (n_items) {
            struct hr_step step = {.seqs = s->items, .n_seqs = n_items};
            st = hr_engine_step(s->engine, &step, &err);
            while (st == HR_ERR_NOMEM) {
                /* The pool cannot hold this step. Preempt the youngest; a
                 * request that alone outgrows the pool ends with `length`. */
                pthread_mutex_lock(&s->mu);
                if (s->n_running > 1) {
                    preempt_youngest(s);
                } else if (s->n_running == 1) {
                    struct request *r = s->running[0];
                    running_remove(s, r);
                    done_why[n_done] = HR_SCHED_LENGTH;
                    done_msg[n_done] = NULL;
                    done[n_done++] = r;
                    hr_log_info("sched", "request %llu ends with length: its KV alone fills the pool "
                                "(%u blocks)",
                                (unsigned long long)r->id,
                                hr_kv_n_blocks(hr_engine_kv_pool(s->engine)));
                }
                n_items = build_step(s);
                pthread_mutex_unlock(&s->mu);
                if (!n_items) {
                    st = HR_OK;
                    break;
                }
                step = (struct hr_step){.seqs = s->items, .n_seqs = n_items};
                st = hr_engine_step(s->engine, &step, &err);
            }
        }
        if (st != HR_OK) {
            /* Not a memory condition: a malformed step is our bug. Every
             * request in it fails with the engine's message. */
            hr_log_error("sched", "step failed: %s", err.msg);
            pthread_mutex_lock(&s->mu);
            for (uint32_t i = 0; i < n_items; i++) {
                running_remove(s, s->item_req[i]);
                done_why[n_done] = HR_SCHED_FAILED;
                done_msg[n_done] = err.msg;
                done[n_done++] = s->item_req[i];
            }
            pthread_mutex_unlock(&s->mu);
            n_items = 0;
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
            }
            if (!it->n_logits)
                continue;
            const int32_t t = hr_sampler_sample(r->smp, hr_engine_logits(s->engine, i, 0));
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
                pthread_mutex_unlock(&s->mu);
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
        s->st.kv_blocks_used = hr_kv_n_used(hr_engine_kv_pool(s->engine));
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
    pthread_mutex_unlock(&s->mu);
    while (left) {
        struct request *r = left;
        left = r->next;
        finish(r, HR_SCHED_CANCELLED, "the server is shutting down");
        request_free(s, r);
    }
    return NULL;
}

/* ---- public --------------------------------------------------------------- */

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
    if (s->cfg.batch_tokens < s->cfg.parallel)
        s->cfg.batch_tokens = s->cfg.parallel; /* every decode fits in a step */
    struct hr_engine_config ec = {.n_threads = cfg->n_threads,
                                  .kv_type = cfg->kv_type ? cfg->kv_type : HR_GGML_F16,
                                  .kv_budget_bytes = cfg->kv_budget_bytes,
                                  .max_step_tokens = s->cfg.batch_tokens,
                                  .max_step_logits = s->cfg.parallel};
    enum hr_status st = hr_engine_init(cfg->model, &ec, &s->engine, err);
    if (st != HR_OK) {
        free(s);
        return st;
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
    if (!s->running || !s->items || !s->item_req || !s->done || !s->done_why || !s->done_msg ||
        !s->out_q || !s->out_q_timeout) {
        hr_sched_free(s);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    s->next_id = 1;
    s->st.kv_blocks_total = hr_kv_n_blocks(hr_engine_kv_pool(s->engine));
    s->sync_ready = true;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
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
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->wake);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->sync_ready) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->wake);
        pthread_cond_destroy(&s->idle);
    }
    hr_engine_free(s->engine);
    free(s->running);
    free(s->items);
    free(s->item_req);
    free(s->done);
    free(s->done_why);
    free(s->done_msg);
    free(s->out_q);
    free(s->out_q_timeout);
    free(s);
}

/* Refusal math without a memory governor: the context and the KV pool. M is
 * the longest prompt that still leaves room for one generated token. */
static bool fits_alone(const struct hr_sched *s, uint32_t n_prompt, struct hr_sched_refusal *why)
{
    const struct hr_kv_pool *pool = hr_engine_kv_pool(s->engine);
    const uint32_t bt = hr_kv_block_tokens(pool);
    const uint64_t pool_tokens = (uint64_t)hr_kv_n_blocks(pool) * bt;
    uint64_t m = s->cfg.n_ctx - 1;
    if (pool_tokens - 1 < m)
        m = pool_tokens - 1;
    if (n_prompt <= m)
        return true;
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
    const uint32_t n_vocab = hr_engine_model(s->engine)->hp.n_vocab;
    for (uint32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= n_vocab)
            return hr_err_set(err, HR_ERR_INVALID, "prompt token %u is %d, outside the vocabulary (%u)",
                              i, p->prompt[i], n_vocab);
    if (!fits_alone(s, p->n_prompt, why)) {
        pthread_mutex_lock(&s->mu);
        s->st.refused_too_long++;
        pthread_mutex_unlock(&s->mu);
        return hr_err_set(err, HR_ERR_LIMIT, "%s", why->message);
    }
    struct hr_sched_params q = *p;
    const uint32_t room = s->cfg.n_ctx - p->n_prompt;
    if (q.max_tokens == 0 || q.max_tokens > room)
        q.max_tokens = room; /* clamped, not an error */
    struct request *r = NULL;
    enum hr_status st = request_new(s, &q, &r, err);
    if (st != HR_OK)
        return st;
    pthread_mutex_lock(&s->mu);
    if (s->n_queued >= s->cfg.max_queue) {
        s->st.refused_overloaded++;
        pthread_mutex_unlock(&s->mu);
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
    *id = r->id;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
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
    pthread_mutex_unlock(&s->mu);
    return st;
}

void hr_sched_stats(struct hr_sched *s, struct hr_sched_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->running = s->n_running;
    out->queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
}

void hr_sched_wait_idle(struct hr_sched *s)
{
    pthread_mutex_lock(&s->mu);
    while (!s->stop && (s->q_head || s->n_running))
        pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}
