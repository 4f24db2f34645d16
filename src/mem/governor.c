/*
 * governor.c - accounting, ceiling, pressure, chunk sizing, admission and
 * the sampling thread; the model and its formulas are in governor.h.
 *
 * All state sits behind one mutex. The functions that call user callbacks
 * (chunk sizing, admission) copy what they need under the mutex and call
 * the callbacks after releasing it, so the engine's plan function can be as
 * slow as it likes without stalling the sampling thread, and no callback
 * can deadlock against us.
 */
#include "mem/governor.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "mem/decisions.h"
#include "mem/size.h"

#define GIB (1024ull * 1024 * 1024)
#define MIB (1024ull * 1024)

struct hr_gov {
    pthread_mutex_t lock;
    struct hr_gov_config cfg;
    struct hr_mem_probe probe;
    struct hr_gov_view view; /* the state after the last sample, accounts live */
    struct hr_mem_residual residual;
    struct hr_mem_counters counters;
    /* the step bracket */
    bool in_step;
    bool pre_measured;
    uint64_t measured_pre, accounted_pre;
    /* the sampling thread */
    bool sampler_running;
    bool sampler_stop;
    pthread_t sampler;
    pthread_cond_t sampler_cond; /* signalled by hr_gov_sampler_stop */
    uint32_t sampler_period_ms;
    hr_gov_sample_fn sampler_cb;
    void *sampler_ctx;
};

const char *hr_gov_level_name(enum hr_gov_level level)
{
    switch (level) {
    case HR_GOV_OK:
        return "ok";
    case HR_GOV_SOFT:
        return "soft";
    case HR_GOV_HARD:
        return "hard";
    }
    return "?";
}

void hr_gov_config_default(struct hr_gov_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->limit_bytes = 0;
    cfg->reserve_bytes = HR_GOV_RESERVE_AUTO;
    cfg->soft_frac = HR_GOV_DEFAULT_SOFT;
    cfg->hard_frac = HR_GOV_DEFAULT_HARD;
    cfg->hysteresis_frac = HR_GOV_DEFAULT_HYST;
    cfg->chunk_min_tokens = HR_GOV_DEFAULT_CHUNK_MIN;
    cfg->residual_static_bytes_per_token = 0;
}

/* ---- arithmetic that cannot wrap ---- */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* floor(x * f) for f in [0, 1], saturating; exact enough for watermarks. */
static uint64_t frac_of(uint64_t x, double f)
{
    double v = (double)x * f;
    if (!(v > 0)) return 0;
    if (v >= 18446744073709549568.0) return UINT64_MAX;
    return (uint64_t)v;
}

/* ---- the state update ---- */

static uint64_t reserve_for(const struct hr_gov_config *cfg, const struct hr_mem_sample *s)
{
    if (cfg->reserve_bytes != HR_GOV_RESERVE_AUTO) return cfg->reserve_bytes;
    if (!(s->known & HR_MEM_HAVE_TOTAL)) return 512 * MIB;
    uint64_t r = s->mem_total_bytes / 32;
    if (r < 256 * MIB) r = 256 * MIB;
    if (r > 2 * GIB) r = 2 * GIB;
    return r;
}

/*
 * The next level from the current one (the hysteresis diagram in
 * governor.h): rise at once to whatever the thresholds say; fall one level
 * at a time, each only once current is below that level's threshold by h.
 */
static enum hr_gov_level next_level(enum hr_gov_level level, uint64_t current, uint64_t soft,
                                    uint64_t hard, uint64_t hyst)
{
    enum hr_gov_level raw = current >= hard   ? HR_GOV_HARD
                            : current >= soft ? HR_GOV_SOFT
                                              : HR_GOV_OK;
    if (raw >= level) return raw;
    while (level > raw) {
        uint64_t threshold = level == HR_GOV_HARD ? hard : soft;
        if (threshold >= hyst && current < threshold - hyst)
            level = (enum hr_gov_level)(level - 1);
        else
            break;
    }
    return level;
}

/*
 * Recomputes everything derived from the sample and the accounts; logs a
 * level change. Called with the lock held.
 */
static void recompute(struct hr_gov *g)
{
    struct hr_gov_view *v = &g->view;
    const struct hr_mem_sample *s = &v->sample;

    v->accounted_bytes = 0;
    for (int i = 0; i < HR_GOV_N_CATEGORIES; i++)
        v->accounted_bytes = sat_add(v->accounted_bytes, v->account_bytes[i]);
    /* Inside a cgroup with a limit, the cgroup's count (which includes page
     * cache charged to us) is what the OOM killer looks at. */
    bool cgroup_binds =
        (s->known & HR_MEM_HAVE_CGROUP_MAX) && (s->known & HR_MEM_HAVE_CGROUP_CURRENT);
    if (cgroup_binds)
        v->measured_bytes = s->cgroup_current_bytes;
    else if (s->known & HR_MEM_HAVE_RSS)
        v->measured_bytes = s->rss_bytes;
    else
        v->measured_bytes = 0;
    v->residual_bytes =
        v->measured_bytes > v->accounted_bytes ? v->measured_bytes - v->accounted_bytes : 0;
    v->current_bytes =
        v->measured_bytes > v->accounted_bytes ? v->measured_bytes : v->accounted_bytes;
    if (v->current_bytes > v->peak_bytes) v->peak_bytes = v->current_bytes;

    uint64_t stat = UINT64_MAX;
    if (g->cfg.limit_bytes > 0) stat = g->cfg.limit_bytes;
    if (s->known & HR_MEM_HAVE_CGROUP_MAX) stat = min_u64(stat, s->cgroup_max_bytes);
    if (s->known & HR_MEM_HAVE_TOTAL) stat = min_u64(stat, s->mem_total_bytes);
    v->static_ceiling_bytes = stat;

    v->reserve_bytes = reserve_for(&g->cfg, s);
    uint64_t dyn = UINT64_MAX;
    if (s->known & HR_MEM_HAVE_AVAILABLE) {
        uint64_t room = sat_add(v->current_bytes, s->mem_available_bytes);
        dyn = room > v->reserve_bytes ? room - v->reserve_bytes : 0;
    }
    v->dynamic_ceiling_bytes = dyn;
    v->ceiling_bytes = min_u64(stat, dyn);
    v->soft_bytes = frac_of(v->ceiling_bytes, g->cfg.soft_frac);
    v->hard_bytes = frac_of(v->ceiling_bytes, g->cfg.hard_frac);
    uint64_t hyst = frac_of(v->ceiling_bytes, g->cfg.hysteresis_frac);

    enum hr_gov_level old = v->level;
    v->level = next_level(old, v->current_bytes, v->soft_bytes, v->hard_bytes, hyst);
    if (v->level != old) {
        char a[32], b[32], c[32], d[32];
        hr_log(v->level == HR_GOV_HARD ? HR_LOG_WARN : HR_LOG_INFO, "mem",
               "memory pressure %s -> %s (current %s, soft %s, hard %s, ceiling %s)",
               hr_gov_level_name(old), hr_gov_level_name(v->level),
               hr_mem_format_bytes(v->current_bytes, 1, a, sizeof(a)),
               hr_mem_format_bytes(v->soft_bytes, 1, b, sizeof(b)),
               hr_mem_format_bytes(v->hard_bytes, 1, c, sizeof(c)),
               hr_mem_format_bytes(v->ceiling_bytes, 1, d, sizeof(d)));
        hr_decision_pressure(old, v->level, v->current_bytes, v->soft_bytes, v->hard_bytes, v->ceiling_bytes);
        if (v->level == HR_GOV_SOFT)
            hr_mem_counter_add(&g->counters.pressure_to_soft_total, 1);
        else if (v->level == HR_GOV_HARD)
            hr_mem_counter_add(&g->counters.pressure_to_hard_total, 1);
    }
    uint64_t after = sat_add(v->current_bytes, v->need_bytes);
    v->reclaim_bytes = after > v->hard_bytes ? after - v->hard_bytes : 0;

    hr_mem_counter_set(&g->counters.memory_ceiling_bytes, v->ceiling_bytes);
    hr_mem_counter_set(&g->counters.memory_current_bytes, v->current_bytes);
    hr_mem_counter_set(&g->counters.memory_peak_bytes, v->peak_bytes);
    hr_mem_counter_set(&g->counters.memory_pressure_level, (uint64_t)v->level);
}

/* Samples the probe into the view and recomputes; lock held. */
static enum hr_status sample_locked(struct hr_gov *g)
{
    struct hr_mem_sample s;
    enum hr_status st = hr_mem_probe_sample(&g->probe, &s);
    if (st != HR_OK) return st;
    g->view.sample = s;
    recompute(g);
    return HR_OK;
}

static bool measured_known(const struct hr_gov *g)
{
    return (g->view.sample.known & (HR_MEM_HAVE_RSS | HR_MEM_HAVE_CGROUP_CURRENT)) != 0;
}

/* ---- lifetime ---- */

enum hr_status hr_gov_init(const struct hr_gov_config *cfg, struct hr_mem_probe probe,
                           struct hr_gov **out, struct hr_err *err)
{
    *out = NULL;
    struct hr_gov_config c;
    if (cfg)
        c = *cfg;
    else
        hr_gov_config_default(&c);
    const char *bad = NULL;
    if (!(c.hard_frac > 0 && c.hard_frac <= 1))
        bad = "the hard watermark must be a fraction of the ceiling in (0, 1]";
    else if (!(c.soft_frac > 0 && c.soft_frac <= c.hard_frac))
        bad = "the soft watermark must be a fraction in (0, hard]";
    else if (!(c.hysteresis_frac >= 0 && c.hysteresis_frac < c.soft_frac))
        bad = "the hysteresis must be a fraction in [0, soft)";
    if (bad) {
        hr_mem_probe_free(&probe);
        return hr_err_set(err, HR_ERR_INVALID,
                          "memory governor: %s (soft %g, hard %g, hysteresis %g)", bad, c.soft_frac,
                          c.hard_frac, c.hysteresis_frac);
    }
    struct hr_gov *g = calloc(1, sizeof(*g));
    if (!g) {
        hr_mem_probe_free(&probe);
        return hr_err_set(err, HR_ERR_NOMEM, "memory governor: out of memory");
    }
    g->cfg = c;
    g->probe = probe;
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->sampler_cond, &ca);
    pthread_condattr_destroy(&ca);
    hr_mem_counters_init(&g->counters);
    hr_mem_residual_init(&g->residual, c.chunk_min_tokens, c.residual_static_bytes_per_token);

    enum hr_status st = sample_locked(g);
    if (st != HR_OK) {
        hr_gov_free(g);
        return hr_err_set(err, st, "memory governor: the memory probe failed");
    }
    const struct hr_gov_view *v = &g->view;
    char a[32], b[32], cg[32], d[32], e[32], f[32];
    hr_log_info("mem", "memory ceiling %s (limit %s, cgroup %s, RAM %s, available %s, reserve %s)",
                v->ceiling_bytes == UINT64_MAX
                    ? "none"
                    : hr_mem_format_bytes(v->ceiling_bytes, 1, a, sizeof(a)),
                c.limit_bytes ? hr_mem_format_bytes(c.limit_bytes, 1, b, sizeof(b)) : "none",
                (v->sample.known & HR_MEM_HAVE_CGROUP_MAX)
                    ? hr_mem_format_bytes(v->sample.cgroup_max_bytes, 1, cg, sizeof(cg))
                    : "none",
                (v->sample.known & HR_MEM_HAVE_TOTAL)
                    ? hr_mem_format_bytes(v->sample.mem_total_bytes, 1, d, sizeof(d))
                    : "unknown",
                (v->sample.known & HR_MEM_HAVE_AVAILABLE)
                    ? hr_mem_format_bytes(v->sample.mem_available_bytes, 1, e, sizeof(e))
                    : "unknown",
                hr_mem_format_bytes(v->reserve_bytes, 1, f, sizeof(f)));
    *out = g;
    return HR_OK;
}

void hr_gov_free(struct hr_gov *g)
{
    if (!g) return;
    hr_gov_sampler_stop(g);
    hr_mem_probe_free(&g->probe);
    pthread_cond_destroy(&g->sampler_cond);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

/* ---- accounts and samples ---- */

void hr_gov_set_account(struct hr_gov *g, enum hr_gov_category cat, uint64_t bytes)
{
    if ((int)cat < 0 || cat >= HR_GOV_N_CATEGORIES) return;
    pthread_mutex_lock(&g->lock);
    g->view.account_bytes[cat] = bytes;
    recompute(g);
    pthread_mutex_unlock(&g->lock);
}

void hr_gov_set_need(struct hr_gov *g, uint64_t bytes)
{
    pthread_mutex_lock(&g->lock);
    g->view.need_bytes = bytes;
    recompute(g);
    pthread_mutex_unlock(&g->lock);
}

enum hr_status hr_gov_sample(struct hr_gov *g, struct hr_gov_view *view)
{
    pthread_mutex_lock(&g->lock);
    enum hr_status st = sample_locked(g);
    if (view) *view = g->view;
    pthread_mutex_unlock(&g->lock);
    return st;
}

void hr_gov_get_view(struct hr_gov *g, struct hr_gov_view *view)
{
    pthread_mutex_lock(&g->lock);
    *view = g->view;
    pthread_mutex_unlock(&g->lock);
}

enum hr_status hr_gov_step_begin(struct hr_gov *g)
{
    pthread_mutex_lock(&g->lock);
    enum hr_status st = sample_locked(g);
    g->in_step = true;
    g->pre_measured = st == HR_OK && measured_known(g);
    g->measured_pre = g->view.measured_bytes;
    g->accounted_pre = g->view.accounted_bytes;
    pthread_mutex_unlock(&g->lock);
    return st;
}

enum hr_status hr_gov_step_end(struct hr_gov *g, uint32_t n_prefill_tokens, int64_t *delta_bytes)
{
    pthread_mutex_lock(&g->lock);
    enum hr_status st = sample_locked(g);
    int64_t d = 0;
    if (st == HR_OK && g->in_step && g->pre_measured && measured_known(g)) {
        /* d = (measured_post - measured_pre) - (accounted_post - accounted_pre),
         * computed in signed 64 bits: every term is a memory size far below 2^62. */
        int64_t dm = (int64_t)g->view.measured_bytes - (int64_t)g->measured_pre;
        int64_t da = (int64_t)g->view.accounted_bytes - (int64_t)g->accounted_pre;
        d = dm - da;
        hr_mem_residual_observe(&g->residual, n_prefill_tokens, d);
    }
    g->in_step = false;
    pthread_mutex_unlock(&g->lock);
    if (delta_bytes) *delta_bytes = d;
    return st;
}

void hr_gov_note_plan(struct hr_gov *g, uint64_t planned_bytes, uint64_t used_bytes)
{
    uint64_t err =
        planned_bytes > used_bytes ? planned_bytes - used_bytes : used_bytes - planned_bytes;
    hr_mem_counter_max(&g->counters.step_plan_error_bytes_max, err);
}

uint64_t hr_gov_residual_predict(struct hr_gov *g, uint32_t n_tokens)
{
    pthread_mutex_lock(&g->lock);
    uint64_t p = hr_mem_residual_predict(&g->residual, n_tokens);
    pthread_mutex_unlock(&g->lock);
    return p;
}

void hr_gov_residual_get(struct hr_gov *g, struct hr_mem_residual *out)
{
    pthread_mutex_lock(&g->lock);
    *out = g->residual;
    pthread_mutex_unlock(&g->lock);
}

void hr_gov_residual_reset(struct hr_gov *g)
{
    pthread_mutex_lock(&g->lock);
    hr_mem_residual_reset(&g->residual);
    pthread_mutex_unlock(&g->lock);
}

struct hr_mem_counters *hr_gov_counters(struct hr_gov *g)
{
    return &g->counters;
}

/* ---- chunk sizing ---- */

/* current + placed + plan(n) + predict(n), saturating. */
static uint64_t chunk_cost(uint64_t base, const struct hr_mem_residual *res, hr_gov_plan_fn plan,
                           void *ctx, uint32_t n, uint64_t *planned)
{
    uint64_t p = sat_add(plan(ctx, n), hr_mem_residual_predict(res, n));
    if (planned) *planned = p;
    return sat_add(base, p);
}

uint32_t hr_gov_size_chunk(struct hr_gov *g, const struct hr_gov_chunk_req *req,
                           hr_gov_plan_fn plan, void *ctx)
{
    pthread_mutex_lock(&g->lock);
    struct hr_mem_residual res = g->residual;
    uint64_t base = sat_add(g->view.current_bytes, req->placed_bytes);
    uint64_t target = g->view.hard_bytes;
    pthread_mutex_unlock(&g->lock);

    uint32_t want = req->tokens_left < req->chunk_max ? req->tokens_left : req->chunk_max;
    if (want == 0 || !plan) return 0;
    /* Largest n in [0, want] with cost(n) <= target; plan is monotone, and so
     * is predict, so cost is too. lo always fits (or is 0), hi + 1 never does. */
    uint32_t n = 0;
    if (chunk_cost(base, &res, plan, ctx, want, NULL) <= target) {
        n = want;
    } else {
        uint32_t lo = 0, hi = want - 1;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo + 1) / 2;
            if (chunk_cost(base, &res, plan, ctx, mid, NULL) <= target)
                lo = mid;
            else
                hi = mid - 1;
        }
        n = lo;
    }
    /* The final remainder runs whole; any other chunk is a multiple of 16 and
     * at least chunk_min (a tail shorter than chunk_min is a final remainder). */
    if (n != req->tokens_left) {
        if (n >= 16) n &= ~15u;
        if (n < req->chunk_min) n = 0;
    }
    if (n == 0) return 0;

    hr_mem_counter_add(&g->counters.prefill_chunks_total, 1);
    /* A chunk_max that is not a multiple of 16 is rounded like any chunk; that
     * is not a throttle. */
    uint32_t unthrottled = want == req->tokens_left ? want : want & ~15u;
    if (n < unthrottled) {
        hr_mem_counter_add(&g->counters.prefill_chunks_throttled_total, 1);
        uint64_t planned = 0;
        chunk_cost(base, &res, plan, ctx, n, &planned);
        uint64_t headroom = target > base ? target - base : 0;
        char a[32], b[32];
        hr_log_info("mem",
                    "prefill chunk %u -> %u tokens (request %llu, kv_len %llu, headroom %s, "
                    "planned %s)",
                    want, n, (unsigned long long)req->request_id, (unsigned long long)req->kv_len,
                    hr_mem_format_bytes(headroom, 2, a, sizeof(a)),
                    hr_mem_format_bytes(planned, 2, b, sizeof(b)));
        hr_decision_chunk(req->request_id, want, n, req->kv_len, headroom, planned);
    }
    return n;
}

/* ---- admission ---- */

uint64_t hr_gov_need_alone(const struct hr_gov_admit_req *req, uint32_t n_prompt)
{
    uint32_t last = n_prompt < req->chunk_min ? n_prompt : req->chunk_min;
    uint32_t kv_tokens = n_prompt == UINT32_MAX ? n_prompt : n_prompt + 1;
    uint64_t need = req->weights_bytes;
    need = sat_add(need, req->kv_bytes ? req->kv_bytes(req->ctx, kv_tokens) : 0);
    need = sat_add(need, req->plan_bytes ? req->plan_bytes(req->ctx, last) : 0);
    need = sat_add(need, req->request_bytes);
    need = sat_add(need, req->residual_floor_bytes == HR_GOV_RESIDUAL_FLOOR_AUTO
                             ? 0
                             : req->residual_floor_bytes);
    return need;
}

void hr_gov_admit_compute(const struct hr_gov_admit_req *req, uint64_t limit_bytes,
                          struct hr_gov_admit_result *out)
{
    memset(out, 0, sizeof(*out));
    out->n_prompt = req->n_prompt;
    out->limit_bytes = limit_bytes;
    out->estimated_bytes = hr_gov_need_alone(req, req->n_prompt);
    out->need_one_bytes = hr_gov_need_alone(req, 1);
    out->min_ceiling_bytes = out->need_one_bytes;
    /* M: the longest prompt L with L + 1 <= n_ctx and need_alone(L) <= limit.
     * need_alone is monotone in L (KV and the last chunk's plan only grow). */
    uint32_t max_ctx = req->n_ctx > 0 ? req->n_ctx - 1 : 0;
    uint32_t m = 0;
    if (max_ctx >= 1 && hr_gov_need_alone(req, 1) <= limit_bytes) {
        uint32_t lo = 1, hi = max_ctx;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo + 1) / 2;
            if (hr_gov_need_alone(req, mid) <= limit_bytes)
                lo = mid;
            else
                hi = mid - 1;
        }
        m = lo;
    }
    out->max_prompt = m;
    if (req->n_prompt > max_ctx)
        out->verdict = HR_GOV_REFUSE_CONTEXT;
    else if (out->estimated_bytes > limit_bytes)
        out->verdict = HR_GOV_REFUSE_MEMORY;
    else
        out->verdict = HR_GOV_ADMIT;
}

void hr_gov_admit(struct hr_gov *g, const struct hr_gov_admit_req *req,
                  struct hr_gov_admit_result *out)
{
    pthread_mutex_lock(&g->lock);
    uint64_t limit = frac_of(g->view.static_ceiling_bytes, g->cfg.hard_frac);
    uint64_t residual = g->view.residual_bytes;
    pthread_mutex_unlock(&g->lock);
    /* The residual admission reads was sampled before the request existed;
     * while it runs, RSS sits 0.1-0.35 MiB off that (heap and stack pages,
     * measured in tests/cli/memory-truth.sh), and a prompt admitted into
     * that gap would wait forever for its last token. Admission keeps that
     * much below the hard watermark (admit_margin_bytes); chunk sizing
     * does not. */
    limit = limit > g->cfg.admit_margin_bytes ? limit - g->cfg.admit_margin_bytes : 0;
    struct hr_gov_admit_req r = *req;
    if (r.residual_floor_bytes == HR_GOV_RESIDUAL_FLOOR_AUTO) r.residual_floor_bytes = residual;
    hr_gov_admit_compute(&r, limit, out);
    /* The limit is the hard watermark of the ceiling less the margin: the
     * ceiling whose limit holds one token, rounded up to a whole MiB, so
     * that the figure printed is one to pass (without the margin it was
     * short by up to 0.5 MiB whenever the rounding gave less than that).
     * The figure is read here and passed to another process, whose own
     * residual differs from this one's: 1-token needs of 30.3 to 31.8 MiB
     * across 12 starts of one model (which file pages fault-around maps,
     * heap left by loading), and a CI run refused the 33 MiB one start
     * named. HR_GOV_MIN_CEILING_SLACK_BYTES covers that spread. */
    const double one = (double)out->need_one_bytes + (double)g->cfg.admit_margin_bytes +
                       (double)HR_GOV_MIN_CEILING_SLACK_BYTES;
    const double c = ceil(one / g->cfg.hard_frac / (double)MIB);
    out->min_ceiling_bytes = c * (double)MIB >= 18446744073709549568.0 ? UINT64_MAX
                                                                     : (uint64_t)c * MIB;
}

/* ---- the sampling thread ---- */

static void *sampler_main(void *arg)
{
    struct hr_gov *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->sampler_stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)g->sampler_period_ms * 1000000ull;
        until.tv_sec += (time_t)(ns / 1000000000ull);
        until.tv_nsec = (long)(ns % 1000000000ull);
        int rc = 0;
        while (!g->sampler_stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&g->sampler_cond, &g->lock, &until);
        if (g->sampler_stop) break;
        sample_locked(g);
        struct hr_gov_view v = g->view;
        hr_gov_sample_fn cb = g->sampler_cb;
        void *ctx = g->sampler_ctx;
        /* The callback runs unlocked: it may call back into the governor. */
        pthread_mutex_unlock(&g->lock);
        if (cb) cb(ctx, &v);
        pthread_mutex_lock(&g->lock);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

enum hr_status hr_gov_sampler_start(struct hr_gov *g, uint32_t period_ms, hr_gov_sample_fn cb,
                                    void *ctx, struct hr_err *err)
{
    if (period_ms == 0)
        return hr_err_set(err, HR_ERR_INVALID, "memory sampler: the period must be at least 1 ms");
    pthread_mutex_lock(&g->lock);
    if (g->sampler_running) {
        pthread_mutex_unlock(&g->lock);
        return hr_err_set(err, HR_ERR_INVALID, "memory sampler: already running");
    }
    g->sampler_stop = false;
    g->sampler_period_ms = period_ms;
    g->sampler_cb = cb;
    g->sampler_ctx = ctx;
    int rc = pthread_create(&g->sampler, NULL, sampler_main, g);
    if (rc != 0) {
        pthread_mutex_unlock(&g->lock);
        return hr_err_set(err, HR_ERR_NOMEM, "memory sampler: cannot start a thread: %s",
                          strerror(rc));
    }
    g->sampler_running = true;
    pthread_mutex_unlock(&g->lock);
    return HR_OK;
}

void hr_gov_sampler_stop(struct hr_gov *g)
{
    pthread_mutex_lock(&g->lock);
    if (!g->sampler_running) {
        pthread_mutex_unlock(&g->lock);
        return;
    }
    g->sampler_stop = true;
    pthread_cond_broadcast(&g->sampler_cond);
    pthread_t t = g->sampler;
    g->sampler_running = false;
    pthread_mutex_unlock(&g->lock);
    pthread_join(t, NULL);
}
