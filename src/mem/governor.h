/*
 * governor.h - the memory governor: knows how much memory headroom uses and
 * may use, and sizes work so that a step never crosses the ceiling
 * (DESIGN.md section 4). It owns no memory; the scheduler (src/sched/) tells
 * it what is accounted, asks it how large a prefill chunk may be and whether
 * a request can ever fit, and registers the reclaim chain it runs.
 *
 * Accounting (4.1). The scheduler sets the bytes of each category it knows
 * exactly: weights (resident once: packed copies plus the file pages of the
 * rest), kv (blocks in use x block bytes), step (the committed arena), cache
 * (unreferenced prefix-cache blocks), requests (each live request's own
 * buffers, allocated and touched at submit). The probe
 * measures the process: RSS, or the cgroup's memory.current when a cgroup
 * limit binds. Then
 *     accounted = weights + kv + step + cache + requests
 *     residual  = measured - accounted          (0 when measured is lower)
 *     current   = max(accounted, measured)
 *
 * Ceiling (4.2).
 *     static  = min(--memory-limit, cgroup memory.max, MemTotal)  (unknown terms drop out)
 *     dynamic = current + MemAvailable - reserve                  (other processes shrink it)
 *     ceiling = min(static, dynamic)
 *     soft = 0.85 x ceiling, hard = 0.95 x ceiling                (configurable)
 * The reserve is memory we leave to everyone else (page cache, the shell,
 * the agent driving us). Its default is MemTotal / 32 clamped to [256 MiB,
 * 2 GiB]: 512 MiB on a 16 GiB machine. MemAvailable already excludes the
 * kernel's own watermarks, so this is headroom for other processes, not for
 * the kernel.
 *
 * Pressure levels, with hysteresis h = 2% of the ceiling:
 *
 *          current >= soft            current >= hard
 *     OK ------------------> SOFT -------------------> HARD
 *     OK <------------------ SOFT <------------------- HARD
 *          current < soft - h         current < hard - h
 *
 * Rising is immediate (OK may jump straight to HARD); falling needs the
 * current below the level's own threshold by h, so a value sitting on a
 * threshold does not flap. Every change is one log line (DESIGN 4.9):
 *     memory pressure ok -> soft (current 7.9 GiB, soft 7.6 GiB, hard 8.6 GiB, ceiling 9.0 GiB)
 * Levels are recomputed on every sample (hr_gov_sample, hr_gov_step_begin,
 * hr_gov_step_end).
 *
 * A step, as the engine thread drives it:
 *
 *     hr_gov_step_begin(g)                  samples: the "pre" measurement
 *     n = hr_gov_size_chunk(g, &req, plan, ctx)   per prefilling request
 *         (n == 0: run the reclaim chain, hr_gov_sample, size again; still 0: wait)
 *     ... run the step; update accounts with hr_gov_set_account ...
 *     hr_gov_step_end(g, n_prefill_tokens)  samples; feeds the residual tracker
 *
 * Chunk sizing (4.6) picks the largest n <= min(r, chunk_max) with
 *     current + placed + plan(n) + residual.predict(n) <= hard
 * by binary search (plan must be monotone in n), rounded down to a multiple
 * of 16 (when at least 16) unless n is the whole remainder r. A request's
 * final remainder may be shorter than chunk_min; any other chunk below
 * chunk_min is 0 ("does not fit"). A chunk smaller than asked logs one line (4.9):
 *     prefill chunk 2048 -> 640 tokens (request 12, kv_len 107712, headroom 1.20 GiB, planned 1.18
 * GiB) where headroom = hard - current - placed and planned = plan(n) + predict(n).
 *
 * Admission (4.7): need_alone(N) = weights + KV(N + 1) + plan(last chunk)
 * + the request's own buffers + residual floor, every term a resident
 * figure: weights and KV as accounted (the measured residual excludes what
 * is accounted, so nothing is counted twice), and the last chunk the
 * smallest step the request can end its prefill with, min(N, chunk_min)
 * tokens: the binding moment is the end of the prefill, with the whole
 * prompt's KV in memory. (The scheduler passes chunk_min 1: a request
 * alone runs chunks below chunk_min rather than wait.) It is compared with the hard watermark of the static
 * ceiling, not the ceiling itself: hard is the target chunk sizing uses, so
 * a request admitted alone can always be prefilled alone (a request that fit
 * under the ceiling but not under hard would wait forever), and the static
 * ceiling because a refusal is permanent (HTTP 400) while a squeeze by other
 * processes is not (the request waits in the queue instead). A prompt also
 * needs room for one generated token: N + 1 <= n_ctx.
 *
 * Threads. One mutex inside guards all state: the engine thread (steps,
 * chunk sizing, accounts) and the sampling thread (hr_gov_sample) may call
 * any function at any time. No callback runs under the mutex: chunk sizing
 * and admission copy what they need, unlock, then call plan and KV
 * callbacks, so a callback may even call the governor. The counters are
 * atomics (counters.h).
 */
#ifndef HR_MEM_GOVERNOR_H
#define HR_MEM_GOVERNOR_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "mem/counters.h"
#include "mem/probe.h"
#include "mem/residual.h"

enum hr_gov_level { HR_GOV_OK = 0, HR_GOV_SOFT = 1, HR_GOV_HARD = 2 };

/* "ok", "soft", "hard". */
const char *hr_gov_level_name(enum hr_gov_level level);

enum hr_gov_category {
    HR_GOV_WEIGHTS = 0,
    HR_GOV_KV = 1,
    HR_GOV_STEP = 2,
    HR_GOV_CACHE = 3,
    HR_GOV_REQUESTS = 4, /* live requests' own buffers: tokens, sampler scratch, block table */
    HR_GOV_STATE = 5,    /* hybrid models' recurrent state slots in use (engine/state-pool.h) */
    HR_GOV_N_CATEGORIES = 6,
};

#define HR_GOV_RESERVE_AUTO      UINT64_MAX /* reserve_bytes: the default described above */
#define HR_GOV_DEFAULT_SOFT      0.85
#define HR_GOV_DEFAULT_HARD      0.95
#define HR_GOV_DEFAULT_HYST      0.02
#define HR_GOV_DEFAULT_CHUNK_MIN 64u

struct hr_gov_config {
    uint64_t limit_bytes;                   /* --memory-limit; 0 = none */
    uint64_t reserve_bytes;                 /* HR_GOV_RESERVE_AUTO or bytes (0 allowed) */
    double soft_frac;                       /* of the ceiling, in (0, hard_frac] */
    double hard_frac;                       /* of the ceiling, in (0, 1] */
    double hysteresis_frac;                 /* of the ceiling, in [0, soft_frac) */
    uint32_t chunk_min_tokens;              /* the residual tracker's rate gate */
    double residual_static_bytes_per_token; /* the tracker's static(n) per token */
    /* Kept below the hard watermark by admission only: the real probe's
     * noise between admission's sample and the run (HR_GOV_ADMIT_NOISE_BYTES
     * for a process probe; 0, the default, for a scripted one). */
    uint64_t admit_margin_bytes;
};

/* The defaults: no limit, auto reserve, 0.85 / 0.95 / 0.02, chunk_min 64, static 0. */
void hr_gov_config_default(struct hr_gov_config *cfg);

/* Everything the governor knows after its last sample, copied out. */
struct hr_gov_view {
    struct hr_mem_sample sample; /* the probe's raw sample */
    uint64_t account_bytes[HR_GOV_N_CATEGORIES];
    uint64_t accounted_bytes;
    uint64_t measured_bytes;       /* cgroup memory.current if a limit binds, else RSS; 0 unknown */
    uint64_t residual_bytes;       /* measured - accounted, or 0 */
    uint64_t current_bytes;        /* max(accounted, measured) */
    uint64_t peak_bytes;           /* the largest current seen */
    uint64_t reserve_bytes;        /* the reserve in effect */
    uint64_t static_ceiling_bytes; /* UINT64_MAX when nothing bounds it */
    uint64_t dynamic_ceiling_bytes; /* UINT64_MAX when MemAvailable is unknown */
    uint64_t ceiling_bytes;
    uint64_t soft_bytes, hard_bytes;
    enum hr_gov_level level;
    uint64_t need_bytes;    /* what the scheduler said the next step adds (hr_gov_set_need) */
    uint64_t reclaim_bytes; /* current + need - hard when positive: "reclaim needed" */
};

struct hr_gov;

/*
 * Creates a governor that samples `probe`, and takes ownership of the probe
 * (hr_gov_free frees it, also when init fails). Samples once and logs the
 * ceiling. HR_ERR_INVALID for fractions out of range, HR_ERR_NOMEM.
 */
enum hr_status hr_gov_init(const struct hr_gov_config *cfg, struct hr_mem_probe probe,
                           struct hr_gov **out, struct hr_err *err);
/* Stops the sampling thread if running, frees the probe. Accepts NULL. */
void hr_gov_free(struct hr_gov *g);

/* Sets the accounted bytes of one category (absolute, not a delta). */
void hr_gov_set_account(struct hr_gov *g, enum hr_gov_category cat, uint64_t bytes);
/* Declares what the next step will add (e.g. the running decodes' plan), for reclaim_bytes. */
void hr_gov_set_need(struct hr_gov *g, uint64_t bytes);

/* Samples the probe, recomputes ceiling, level and counters; copies the state to view (may be
 * NULL). */
enum hr_status hr_gov_sample(struct hr_gov *g, struct hr_gov_view *view);
/* Copies the state of the last sample (with accounts as set since) without sampling. */
void hr_gov_get_view(struct hr_gov *g, struct hr_gov_view *view);

/* The step bracket: begin samples the "pre" measurement; end samples again and
 * feeds d = delta measured - delta accounted with the step's prefill tokens to
 * the residual tracker. An end without a begin, or when nothing is measured,
 * feeds nothing. end returns d through delta_bytes (may be NULL). */
enum hr_status hr_gov_step_begin(struct hr_gov *g);
enum hr_status hr_gov_step_end(struct hr_gov *g, uint32_t n_prefill_tokens, int64_t *delta_bytes);

/* Records a step's planned and actually used bytes; keeps the largest difference
 * in the step_plan_error_bytes_max counter. */
void hr_gov_note_plan(struct hr_gov *g, uint64_t planned_bytes, uint64_t used_bytes);

/* The residual tracker: its prediction for n tokens, a copy of its state, a reset. */
uint64_t hr_gov_residual_predict(struct hr_gov *g, uint32_t n_tokens);
void hr_gov_residual_get(struct hr_gov *g, struct hr_mem_residual *out);
void hr_gov_residual_reset(struct hr_gov *g);

/* The counters (counters.h); the pointer is valid until hr_gov_free. */
struct hr_mem_counters *hr_gov_counters(struct hr_gov *g);

/* ---- chunk sizing (4.6) ---- */

/* Bytes a step needs for n prefill tokens of one request, beyond what is already
 * placed and beyond what current already holds. Must be monotone in n. Note that
 * current includes the committed arena (the step account) of earlier steps: an
 * arena that is reused costs only what it grows by, so a plan callback over a
 * retained arena returns max(0, arena(step + n) - committed) + new KV bytes. */
typedef uint64_t (*hr_gov_plan_fn)(void *ctx, uint32_t n_tokens);

struct hr_gov_chunk_req {
    uint64_t request_id;   /* for the log line */
    uint32_t tokens_left;  /* r: prompt tokens not yet prefilled */
    uint64_t kv_len;       /* tokens already in the request's KV (for the log line) */
    uint32_t chunk_min;    /* smallest chunk worth running (the final remainder excepted) */
    uint32_t chunk_max;    /* the largest chunk asked for */
    uint64_t placed_bytes; /* bytes this step already carries (decodes, other chunks) */
};

/*
 * The largest chunk that fits, 0 when nothing >= chunk_min (or the whole
 * remainder) fits. Counts prefill_chunks_total when it returns > 0 and
 * prefill_chunks_throttled_total (with the log line) when that is less than
 * min(r, chunk_max).
 */
uint32_t hr_gov_size_chunk(struct hr_gov *g, const struct hr_gov_chunk_req *req,
                           hr_gov_plan_fn plan, void *ctx);

/* ---- admission (4.7) ---- */

/* What admission keeps below the hard watermark for the measurement's
 * noise between its sample and the request's run (governor.c). */
#define HR_GOV_ADMIT_NOISE_BYTES (512ull * 1024)
/* What the smallest ceiling named in a refusal ("the smallest --memory-limit
 * that runs it is Z") adds for the start-to-start spread of a process's
 * residual (1.5 MiB measured; see hr_gov_admit). */
#define HR_GOV_MIN_CEILING_SLACK_BYTES (2ull * 1024 * 1024)
#define HR_GOV_RESIDUAL_FLOOR_AUTO UINT64_MAX /* hr_gov_admit: use the measured residual */

struct hr_gov_admit_req {
    uint32_t n_prompt;  /* N, after the prefix-cache lookup's tokenization */
    uint32_t n_ctx;     /* the model's context length */
    uint32_t chunk_min; /* the last chunk is min(N, chunk_min) tokens */
    uint64_t weights_bytes;
    uint64_t request_bytes; /* the request's own buffers (HR_GOV_REQUESTS once it exists) */
    uint64_t residual_floor_bytes; /* or HR_GOV_RESIDUAL_FLOOR_AUTO */
    /* KV bytes of L tokens (the caller subtracts prefix-cache blocks it will share). */
    uint64_t (*kv_bytes)(void *ctx, uint32_t n_tokens);
    /* The plan (arena) of a step of n prefill tokens alone. */
    uint64_t (*plan_bytes)(void *ctx, uint32_t n_tokens);
    void *ctx;
};

enum hr_gov_verdict {
    HR_GOV_ADMIT = 0,          /* fits alone: queue it */
    HR_GOV_REFUSE_CONTEXT = 1, /* N + 1 > n_ctx */
    HR_GOV_REFUSE_MEMORY = 2,  /* need_alone(N) > limit */
};

struct hr_gov_admit_result {
    enum hr_gov_verdict verdict;
    uint32_t n_prompt;        /* N */
    uint32_t max_prompt;      /* M: the longest prompt that fits both limits (0: none) */
    uint64_t estimated_bytes; /* need_alone(N) */
    uint64_t limit_bytes;     /* what it was compared with */
    /* need_alone(1), and the smallest ceiling whose limit holds it (for the
     * error when M is 0: nothing at all can run). */
    uint64_t need_one_bytes;
    uint64_t min_ceiling_bytes;
};

/* need_alone(n) for a request (saturating). */
uint64_t hr_gov_need_alone(const struct hr_gov_admit_req *req, uint32_t n_prompt);
/* The verdict against an explicit limit; residual_floor_bytes must not be AUTO. */
void hr_gov_admit_compute(const struct hr_gov_admit_req *req, uint64_t limit_bytes,
                          struct hr_gov_admit_result *out);
/* The verdict against the hard watermark of the static ceiling (see above). */
void hr_gov_admit(struct hr_gov *g, const struct hr_gov_admit_req *req,
                  struct hr_gov_admit_result *out);

/* ---- the sampling thread ---- */

/* Called after every periodic sample, on the sampling thread, without the
 * governor's lock. view->reclaim_bytes > 0 means the engine should reclaim. */
typedef void (*hr_gov_sample_fn)(void *ctx, const struct hr_gov_view *view);

/*
 * Starts a thread that calls hr_gov_sample every period_ms (>= 1) and then
 * cb (may be NULL). HR_ERR_INVALID if one is already running or period is 0.
 */
enum hr_status hr_gov_sampler_start(struct hr_gov *g, uint32_t period_ms, hr_gov_sample_fn cb,
                                    void *ctx, struct hr_err *err);
/* Stops and joins the thread; returns once no callback is running. No-op if none.
 * Start and stop from one owning thread (they are not meant to race each other). */
void hr_gov_sampler_stop(struct hr_gov *g);

#endif
