/*
 * sched.h - the scheduler: requests in, tokens out, continuous batching on
 * one engine thread.
 *
 * Callers (the HTTP server, `headroom run`) submit tokenized requests from
 * any thread and receive events through a callback. One engine thread owns
 * the engine - the CPU's or a GPU's, behind engine/backend.h's vtable
 * (config.device) - and runs steps back to back; every step carries one
 * token of each decoding request plus prefill chunks of the requests still
 * reading their prompt, up to a token budget (continuous batching: a new
 * request joins at the next step, a finished one leaves at once).
 *
 *   struct hr_sched *s;  hr_sched_init(&cfg, &s, &err);
 *   struct hr_sched_params p = hr_sched_params_defaults();
 *   p.prompt = ids; p.n_prompt = n; p.max_tokens = 64; p.on_event = fn; p.user = ctx;
 *   uint64_t id; struct hr_sched_refusal why;
 *   if (hr_sched_submit(s, &p, &id, &why, &err) == HR_OK) ... events arrive on the engine thread
 *   hr_sched_cancel(s, id);   // from any thread; takes effect at the next step boundary
 *   hr_sched_free(s);         // cancels what is left, joins the thread
 *
 * A request's life (the function or place behind each transition):
 *
 *              hr_sched_submit
 *                    |
 *                    v            start_queued (a running slot is free)
 *   +---------> [queued] ----------------------------+
 *   |               |                                v
 *   |               | queue timeout            [prefill] --- last prompt chunk --> [decode]
 *   |               v                                |  ^                            |
 *   |           refused (overloaded)                 |  |                            |
 *   |                                                |  +-- preempted: requeued -----+
 *   |   preempt_youngest (KV pool full):             |     at the head, resumes by
 *   +------------------ [preempted] <----------------+     recomputing prompt + output
 *
 *   [prefill] / [decode] --> done       finish: a stop token, a stop string,
 *                                        max_tokens, or the context is full
 *   any state            --> cancelled  hr_sched_cancel, seen at a step boundary
 *   any running state    --> failed     the engine returned an error (a bug or
 *                                        an impossible step), never for memory
 *
 * Events. Each request gets, in order: one STARTED when it first leaves the
 * queue (a server sends its response headers then, so a queue timeout can
 * still be an HTTP error), zero or more PROGRESS (a prefill chunk
 * done) and PREEMPTED (paused for memory; PROGRESS resumes), TOKEN events (one per generated token, with the text it completes),
 * then exactly one FINISHED - or, if it never started, one REFUSED instead
 * (queue timeout). A request refused at submit gets no event: the refusal is
 * returned. Callbacks run on the engine thread without the scheduler's lock
 * held, so they may call hr_sched_cancel; they must not block for long, since
 * every running request waits for them. Event pointers are valid only during
 * the callback.
 *
 * Memory: all per-request state (prompt copy, KV block table, sampler,
 * detokenizer, stop-string buffer) is allocated at submit, so a step
 * allocates nothing; KV blocks come from the engine's pool. When the pool
 * runs out mid-generation the youngest running request is preempted, never
 * aborted; a request whose own KV needs more than the whole pool ends with
 * finish reason `length`. With a memory governor (config.gov, src/mem/)
 * the same holds for the process ceiling: admission refuses a prompt that
 * cannot fit alone (with M, the longest that can), every prefill chunk is
 * the largest that fits under the hard watermark (DESIGN.md 4.6), and when
 * a step cannot fit or the ceiling falls the reclaim chain runs - free
 * pages back to the OS, then preempt the youngest - and what still does not
 * fit waits. No path ends a request because of memory except `length` for
 * one whose own KV outgrows the ceiling.
 *
 * Threads: every function may be called from any thread, except
 * hr_sched_free, which must not be called from an event callback.
 */
#ifndef HR_SCHED_SCHED_H
#define HR_SCHED_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/backend.h"
#include "mem/governor.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

struct hr_sched_config {
    const struct hr_model *model;       /* not owned; outlives the scheduler */
    const struct hr_tokenizer *tok;     /* not owned; NULL: no text or stop strings */
    int n_threads;                      /* engine workers; 0: physical cores */
    enum hr_ggml_type kv_type;          /* HR_GGML_F16, Q8_0 or Q4_0; 0 (F32) means F16 */
    uint64_t kv_budget_bytes;           /* the KV pool */
    bool kv_full_window;                /* no windowed KV (engine.h; comparisons only) */
    uint32_t n_ctx;                     /* longest prompt + output of one request; 0: the model's */
    uint32_t batch_tokens;              /* tokens per step (decodes + prefill); 0: 512 */
    uint32_t parallel;                  /* requests running at once; 0: 4 */
    uint32_t max_queue;                 /* waiting requests before refusing; 0: 64 */
    double queue_timeout_s;             /* longest wait in the queue; 0: none */
    /* The memory governor (not owned; NULL: none). With it, admission
     * refuses what cannot fit under the ceiling alone, prefill chunks are
     * sized to the headroom, and pressure preempts instead of failing. */
    struct hr_gov *gov;
    uint32_t chunk_min;                 /* smallest prefill chunk; 0: 64 */
    /* The prefix cache (engine/prefix-cache.h): finished and preempted
     * requests leave their full KV blocks behind, and a request whose
     * tokens start the same way shares them instead of recomputing. Cached
     * blocks nobody uses are the first memory taken back: before a step
     * needs blocks, in the reclaim chain before anyone is preempted, and
     * under soft pressure. */
    bool prefix_cache;
    uint64_t cache_limit_bytes;         /* most KV the cache indexes; 0: the whole pool */
    uint32_t gov_sample_ms;             /* background sampling period; 0: 100 */
    /* TESTS ONLY: admission checks the context and the pool, not memory, so
     * a test can run a prompt longer than the refusal's M and watch it wait
     * (stats.waiting_for_memory) - how the real maximum is bisected. */
    bool admit_beyond_memory;
    /* Which engine runs the steps (engine/backend.h): zero = auto (CUDA
     * when the build and the machine have it and it runs the model). */
    struct hr_device device;
    uint64_t device_limit_bytes;        /* --vram-limit; 0: the device's total */
    /* Parking (engine/backend.h): a preempted request's KV is copied to host
     * memory and restored when it resumes, instead of recomputed, when the
     * governor's hard watermark (if any) has room for the copy. 0: on a GPU
     * backend only (its pool is device memory; on the CPU a copy frees
     * nothing); 1: always (tests); -1: never. */
    int park_preempted;
};

enum hr_sched_event_kind {
    HR_SCHED_STARTED,  /* left the queue for the first time: the response may begin */
    HR_SCHED_PROGRESS, /* a prefill chunk ran: n_prefilled of n_prompt */
    HR_SCHED_TOKEN,    /* one generated token and the text it completes */
    HR_SCHED_PREEMPTED, /* paused: its KV was freed for memory; it will resume by
                         * recomputing, or from host memory where it was parked
                         * (a client keeps the stream alive meanwhile) */
    HR_SCHED_FINISHED, /* the last event of a started request */
    HR_SCHED_REFUSED,  /* the last event of a request that never started */
};

enum hr_sched_finish {
    HR_SCHED_STOP,      /* a stop token or stop string */
    HR_SCHED_LENGTH,    /* max_tokens, or the context or KV pool is full */
    HR_SCHED_CANCELLED, /* hr_sched_cancel or shutdown */
    HR_SCHED_FAILED,    /* the engine failed; the message says why */
};

enum hr_sched_refusal_reason {
    HR_SCHED_TOO_LONG,   /* can never fit: the prompt exceeds the context or memory */
    HR_SCHED_OVERLOADED, /* the queue is full or the wait timed out: retry later */
    HR_SCHED_NO_MEMORY,  /* the memory ceiling holds no prompt at all, not even 1 token:
                          * limit_bytes is the smallest ceiling that would (not the
                          * client's doing; M would be 0) */
};

struct hr_sched_refusal {
    enum hr_sched_refusal_reason reason;
    uint32_t n_prompt;        /* N: the prompt's tokens */
    uint32_t max_prompt;      /* M: the longest prompt that would fit (TOO_LONG) */
    uint64_t estimated_bytes; /* what the prompt alone would need */
    uint64_t limit_bytes;     /* what is available */
    char message[256];
};

struct hr_sched_event {
    enum hr_sched_event_kind kind;
    uint64_t id;
    int32_t token;          /* TOKEN */
    const char *text;       /* TOKEN: text this token completes (stop strings held back); */
    size_t text_len;        /* FINISHED: text still held at the end */
    uint32_t n_prefilled;   /* PROGRESS */
    uint32_t n_prompt;      /* all kinds */
    uint32_t n_generated;   /* all kinds */
    enum hr_sched_finish finish;            /* FINISHED */
    const char *message;                    /* FINISHED (FAILED), REFUSED */
    const struct hr_sched_refusal *refusal; /* REFUSED */
    int32_t stop_index;                     /* FINISHED: the stop string that ended it, or -1 */
    uint32_t n_cached;                      /* STARTED: prompt tokens served by the prefix cache */
};

typedef void (*hr_sched_event_fn)(const struct hr_sched_event *ev, void *user);

struct hr_sched_params {
    const int32_t *prompt;          /* copied at submit */
    uint32_t n_prompt;              /* >= 1 */
    uint32_t max_tokens;            /* clamped to what the context allows */
    struct hr_sampler_params sampling;
    bool ignore_eos;                /* do not stop at the model's end-of-generation tokens */
    const int32_t *stop_tokens;     /* more stop ids; copied */
    uint32_t n_stop_tokens;
    const char *const *stop_strings; /* copied; matched in the detokenized text */
    uint32_t n_stop_strings;
    unsigned detok_flags;           /* HR_DETOK_* for the text of TOKEN events */
    /* Test only: the first n_script generated tokens are these instead of
     * sampled ones (the engine still runs every step); copied. */
    const int32_t *script;
    uint32_t n_script;
    hr_sched_event_fn on_event;     /* required */
    void *user;
};

struct hr_sched_params hr_sched_params_defaults(void);

/* Where the engine thread's scheduling time goes (hr_sched_stats.phase_seconds;
 * /metrics' headroom_engine_schedule_phase_seconds_total{phase=...}). */
enum hr_sched_phase {
    HR_SCHED_PHASE_ADMIT,   /* starting queued requests: admission, their first plans */
    HR_SCHED_PHASE_FIT,     /* building the step: chunk sizing, the reclaim chain */
    HR_SCHED_PHASE_PREPARE, /* the step's plan (with a governor), room in the prefix cache */
    HR_SCHED_PHASE_BRACKET, /* the governor's memory samples around a prefill step */
    HR_SCHED_PHASE_DEVICE,  /* a GPU's free memory after the step, KV given back */
    HR_SCHED_PHASE_ACCOUNT, /* the governor's accounts after the step */
    HR_SCHED_N_PHASES
};

/* The phase's name in /metrics and logs. */
const char *hr_sched_phase_name(enum hr_sched_phase p);

struct hr_sched_stats {
    uint64_t steps, prefill_chunks, tokens_prefilled, tokens_generated;
    /* The engine thread's time, since start: in engine steps, and in
     * admitting, building, planning and governing them (admission, chunk
     * sizing, the step's plan, the governor's accounts and samples, the
     * device's samples); their ratio is what the planner and governor cost. */
    double step_seconds, schedule_seconds;
    /* schedule_seconds by phase (they add up to it): HR_SCHED_PHASE_* */
    double phase_seconds[HR_SCHED_N_PHASES];
    uint64_t admitted, refused_too_long, refused_overloaded, preempted;
    uint64_t parked, parked_tokens; /* preemptions parked in host memory; their tokens */
    uint64_t aborted_for_memory; /* only a device out-of-memory error (a planning bug) counts */
    uint32_t running, queued;
    /* Running requests that no step could fit at the last try: they wait
     * for headroom (0 once a step runs again). With one request under the
     * static ceiling, nothing but memory given back by the process's own
     * heap can end the wait: admission's M was too high. */
    uint32_t waiting_for_memory;
    uint64_t memory_waits; /* times a wait began */
    uint32_t kv_blocks_used, kv_blocks_total;
    uint64_t kv_block_bytes;
    /* recurrent state slots (hybrid models; zeros otherwise) */
    uint32_t state_slots_used, state_slots_total;
    uint64_t state_slot_bytes;
    /* the prefix cache (zeros without one) */
    uint32_t cache_blocks;           /* blocks it indexes */
    uint32_t cache_evictable_blocks; /* of which no request uses */
    uint64_t cache_lookup_tokens, cache_hit_tokens, cache_evicted_blocks;
    /* its recurrent state snapshots (hybrid models): held now, slots, bytes
     * of one; saved, dropped (evicted or replaced) and restored into a
     * starting request, since start */
    uint32_t cache_snapshots, cache_snapshot_slots;
    uint64_t cache_snapshot_bytes;
    uint64_t cache_saved_snapshots, cache_evicted_snapshots, cache_restored_snapshots;
    /* the device (zeros on the CPU): cudaMemGetInfo sampled by the engine
     * thread after every step and while idle; used = total - free, every
     * process's bytes */
    uint64_t device_total_bytes, device_free_bytes, device_used_peak_bytes;
    /* the KV pool's device memory mapped now (it grows as blocks are
     * needed, while the device has room) and its capacity; bytes given
     * back to a device another process left short, since start */
    uint64_t device_kv_mapped_bytes, device_kv_reserved_bytes, device_kv_given_back_bytes;
    bool device_lost; /* a CUDA error destroyed the context: every step fails */
};

struct hr_sched;

enum hr_status hr_sched_init(const struct hr_sched_config *cfg, struct hr_sched **out,
                             struct hr_err *err);
/* Cancels every request (each gets its FINISHED or REFUSED event), stops and
 * joins the engine thread, frees everything. Accepts NULL. */
void hr_sched_free(struct hr_sched *s);

/*
 * Admits or refuses a request before anything is sent to the client.
 * HR_OK: queued; *id identifies it in events and hr_sched_cancel.
 * HR_ERR_LIMIT: refused; *why says whether it is too long (N, M, bytes) or
 * the queue is full. HR_ERR_INVALID: bad parameters (err says which).
 */
enum hr_status hr_sched_submit(struct hr_sched *s, const struct hr_sched_params *p, uint64_t *id,
                               struct hr_sched_refusal *why, struct hr_err *err);

/* Asks to cancel; the request ends at the next step boundary with a
 * FINISHED(cancelled) or REFUSED event and its KV is freed. HR_ERR_NOT_FOUND
 * when the id is unknown or already finished. */
enum hr_status hr_sched_cancel(struct hr_sched *s, uint64_t id);

/* A copy of the stats as of the last release of the scheduler's lock (the
 * engine thread publishes one at every release, so it is never more than a
 * critical section old). Never waits for the engine thread or a step: the
 * copy is taken under a mutex held only for copies. */
void hr_sched_stats(struct hr_sched *s, struct hr_sched_stats *out);

/* How many leading tokens of a prompt the prefix cache holds right now
 * (whole blocks, never the last token): what a request would be served from
 * the cache if it started now. For a response that must report usage before
 * the request leaves the queue; the STARTED event has the real number. */
/* The backend the scheduler runs on (fixed at init; any thread). */
const struct hr_backend_info *hr_sched_backend_info(const struct hr_sched *s);

uint32_t hr_sched_cached_prefix(struct hr_sched *s, const int32_t *prompt, uint32_t n_prompt);

/* M as admission would answer it now: the longest prompt that fits the
 * context, the KV pool and (with a governor) the hard watermark of the
 * static ceiling alone, for a request with the largest buffers (a prompt of
 * the whole context). 0: nothing fits. Any thread; does not wait for a step. */
uint32_t hr_sched_admit_max_prompt(struct hr_sched *s);

/* What the smallest useful request adds to memory: the KV of a first chunk
 * of chunk_min tokens plus one, and that chunk's arena. Fixed at init; the
 * readiness check (server/ready.h) compares the headroom with it. */
uint64_t hr_sched_min_request_bytes(const struct hr_sched *s);

/* Blocks until no request is queued or running (tests, `headroom run`). */
void hr_sched_wait_idle(struct hr_sched *s);

const char *hr_sched_finish_name(enum hr_sched_finish f);

#endif
