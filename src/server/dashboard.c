/*
 * dashboard.c - the dashboard's memory timeline, finished-request ring and
 * snapshot JSON (see dashboard.h). The page and its script are assets
 * (src/server/assets/), compiled in by the build; routes.c serves them.
 *
 * The JSON is written as text with printf-style appends, not built as a
 * jansson tree: a poll is a few hundred bytes, written by one function, and
 * a tree would only add allocations to a call that must stay well under a
 * millisecond (tests/e2e/dashboard.test.mjs measures it under load).
 * Series are columnar ("t": [...], "measured": [...]) because that is the
 * shape the chart library draws from.
 */
#include "server/dashboard.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys.h"
#include "engine/kv-cache.h"
#include "engine/threadpool.h"
#include "gguf/ggml-types.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "mem/decisions.h"
#include "server/api-json.h"
#include "server/server-impl.h"

/* The page names the categories from this list, so a category added to the
 * governor must be named here too: the assertion makes that a build error
 * rather than a silently missing series. */
static const char *const category_names[] = {"weights", "kv", "step", "cache", "requests",
                                             "state"};
_Static_assert(sizeof(category_names) / sizeof(category_names[0]) == HR_GOV_N_CATEGORIES,
               "name every memory category for the dashboard");

static const char *const phase_names[] = {"queued", "prefill", "decode", "preempted"};

/* ---- the sampling thread ---------------------------------------------------------- */

static void take_sample(struct hr_server *srv)
{
    struct hr_dash *d = &srv->dash;
    if (atomic_load(&srv->state) == HR_SERVER_LOADING || !srv->gov)
        return; /* also while stopping: the page shows the shutdown */
    struct hr_gov_view v;
    hr_gov_get_view(srv->gov, &v);
    const struct hr_mem_counters *c = hr_gov_counters(srv->gov);
    struct hr_sched_stats s;
    hr_server_sched_stats(srv, &s);

    struct hr_dash_sample x = {
        .t = hr_now_seconds(),
        .measured_bytes = v.measured_bytes,
        /* current and ceiling as /metrics exports them: the page and a
         * scrape taken at the same moment show the same numbers */
        .current_bytes = hr_mem_counter_get(&c->memory_current_bytes),
        .ceiling_bytes = hr_mem_counter_get(&c->memory_ceiling_bytes),
        .soft_bytes = v.soft_bytes,
        .hard_bytes = v.hard_bytes,
        .level = (uint8_t)hr_mem_counter_get(&c->memory_pressure_level),
        .running = s.running,
        .queued = s.queued,
    };
    memcpy(x.account_bytes, v.account_bytes, sizeof(x.account_bytes));
    pthread_mutex_lock(&d->mu);
    x.seq = ++d->hist_last;
    d->hist[(x.seq - 1) % HR_DASH_HISTORY] = x;
    pthread_mutex_unlock(&d->mu);
}

static void *sampler_main(void *arg)
{
    struct hr_server *srv = arg;
    struct hr_dash *d = &srv->dash;
    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        pthread_mutex_unlock(&d->mu);
        take_sample(srv);
        pthread_mutex_lock(&d->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)HR_DASH_PERIOD_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        if (!d->stop)
            pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- the model and the machine, once ----------------------------------------------- */

static enum hr_status describe_model(struct hr_server *srv, struct hr_api_buf *b)
{
    const struct hr_model *m = srv->model;
    const struct hr_hparams *hp = &m->hp;
    /* Parameters and weight types over every tensor of the file. */
    uint64_t n_params = 0, type_tensors[HR_GGML_TYPE_COUNT] = {0}, type_bytes[HR_GGML_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < hr_gguf_n_tensors(m->gguf); i++) {
        const struct hr_gguf_tensor *t = hr_gguf_tensor_at(m->gguf, i);
        n_params += t->n_elems;
        if ((unsigned)t->type < HR_GGML_TYPE_COUNT) {
            type_tensors[t->type]++;
            type_bytes[t->type] += t->n_bytes;
        }
    }
    struct hr_sched_stats s;
    hr_server_sched_stats(srv, &s);
    struct hr_api_json j = {.b = b};
    hr_api_json_lit(&j, "{\"model\":");
    hr_api_json_cstr(&j, srv->model_id);
    hr_api_json_lit(&j, ",\"file\":");
    hr_api_json_cstr(&j, srv->cfg.model_path);
    hr_api_json_lit(&j, ",\"arch\":");
    hr_api_json_cstr(&j, hr_arch_name(m->arch));
    hr_api_json_lit(&j, ",\"types\":[");
    bool first = true;
    for (unsigned t = 0; t < HR_GGML_TYPE_COUNT; t++) {
        if (!type_tensors[t])
            continue;
        hr_api_json_lit(&j, first ? "{\"type\":" : ",{\"type\":");
        first = false;
        hr_api_json_cstr(&j, hr_ggml_type_name(t) ? hr_ggml_type_name(t) : "?");
        hr_api_json_lit(&j, ",\"tensors\":");
        hr_api_json_u64(&j, type_tensors[t]);
        hr_api_json_lit(&j, ",\"bytes\":");
        hr_api_json_u64(&j, type_bytes[t]);
        hr_api_json_lit(&j, "}");
    }
    hr_api_json_lit(&j, "]");
    if (j.st != HR_OK)
        return j.st;
    return hr_api_buf_printf(
        b,
        ",\"params\":%" PRIu64 ",\"weights_bytes\":%" PRIu64 ",\"packed_bytes\":%" PRIu64
        ",\"file_bytes\":%" PRIu64 ",\"n_ctx\":%u,\"n_ctx_train\":%u,\"n_layer\":%u,\"n_embd\":%u"
        ",\"n_head\":%u,\"n_head_kv\":%u,\"n_vocab\":%u,\"kv_block_tokens\":%u"
        ",\"kv_block_bytes\":%" PRIu64 ",\"kv_blocks_total\":%u,\"kv_type\":\"F16\""
        ",\"backend\":\"cpu\",\"isa\":\"%s\",\"threads\":%d,\"parallel\":%u,\"batch_tokens\":%u"
        ",\"prefix_cache\":%s,\"memory_limit_bytes\":%" PRIu64 "}",
        n_params, m->weight_bytes, m->packed_bytes, m->file_bytes, srv->n_ctx, hp->n_ctx_train,
        hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->n_vocab,
        (unsigned)HR_KV_DEFAULT_BLOCK_TOKENS, s.kv_block_bytes, s.kv_blocks_total,
        hr_kernels_isa(), srv->cfg.n_threads > 0 ? srv->cfg.n_threads : hr_physical_cores(),
        srv->cfg.parallel ? srv->cfg.parallel : 4, srv->cfg.batch_tokens ? srv->cfg.batch_tokens : 512,
        srv->cfg.no_prefix_cache ? "false" : "true", srv->memory_limit_bytes);
}

enum hr_status hr_dash_start(struct hr_server *srv, struct hr_err *err)
{
    struct hr_dash *d = &srv->dash;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    struct hr_api_buf b = {0};
    if (!(d->hist = calloc(HR_DASH_HISTORY, sizeof(*d->hist))) ||
        describe_model(srv, &b) != HR_OK) {
        hr_api_buf_free(&b);
        return hr_err_set(err, HR_ERR_NOMEM, "dashboard: out of memory");
    }
    d->info_json = b.data; /* the buffer's malloc'd text, now ours */
    if (pthread_create(&d->thread, NULL, sampler_main, srv) != 0)
        return hr_err_set(err, HR_ERR_NOMEM, "dashboard: cannot start the sampling thread");
    d->started = true;
    return HR_OK;
}

void hr_dash_stop(struct hr_dash *d)
{
    if (d->started) {
        pthread_mutex_lock(&d->mu);
        d->stop = true;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
        d->started = false;
    }
}

void hr_dash_free(struct hr_dash *d)
{
    hr_dash_stop(d);
    if (d->hist) { /* initialized: start ran */
        free(d->hist);
        free(d->info_json);
        d->hist = NULL;
        d->info_json = NULL;
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
    }
}

void hr_dash_note_finished(struct hr_dash *d, const struct hr_dash_finished *f)
{
    if (!d->hist)
        return; /* not started (a failed load): nothing shows it */
    pthread_mutex_lock(&d->mu);
    d->fin[d->fin_last++ % HR_DASH_FINISHED] = *f;
    pthread_mutex_unlock(&d->mu);
}

/* ---- the snapshot ------------------------------------------------------------------ */

/* Appends with a sticky status, like struct hr_api_json. */
#define P(...)                                                                                     \
    do {                                                                                           \
        if (st == HR_OK)                                                                           \
            st = hr_api_buf_printf(out, __VA_ARGS__);                                              \
    } while (0)

static const char *ceiling_source(const struct hr_gov_view *v, uint64_t limit_bytes)
{
    if (v->ceiling_bytes == UINT64_MAX)
        return "none";
    if (v->dynamic_ceiling_bytes < v->static_ceiling_bytes &&
        v->ceiling_bytes == v->dynamic_ceiling_bytes)
        return "available memory (MemAvailable - reserve)";
    if (limit_bytes && v->static_ceiling_bytes == limit_bytes)
        return "--memory-limit";
    if ((v->sample.known & HR_MEM_HAVE_CGROUP_MAX) &&
        v->static_ceiling_bytes == v->sample.cgroup_max_bytes)
        return "cgroup memory.max";
    return "RAM (MemTotal)";
}

static enum hr_status write_history(struct hr_dash *d, uint64_t after, struct hr_api_buf *out)
{
    enum hr_status st = HR_OK;
    /* Copy under the lock (at most the whole ring, ~120 KiB, only on a first
     * poll), write without it. */
    enum { BATCH = 64 };
    struct hr_dash_sample batch[BATCH];
    pthread_mutex_lock(&d->mu);
    const uint64_t last = d->hist_last;
    pthread_mutex_unlock(&d->mu);
    const uint64_t oldest = last > HR_DASH_HISTORY ? last - HR_DASH_HISTORY + 1 : 1;
    uint64_t from = after + 1 > oldest ? after + 1 : oldest;
    /* Columnar arrays need one pass per column, so gather the rows first.
     * Rows newer than `last` are left for the next poll. */
    const uint64_t n = last >= from ? last - from + 1 : 0;
    struct hr_dash_sample *rows = n > BATCH ? malloc(n * sizeof(*rows)) : batch;
    if (!rows)
        return HR_ERR_NOMEM;
    pthread_mutex_lock(&d->mu);
    uint64_t k = 0;
    /* A sample may have overwritten the oldest rows meanwhile: keep what is still there. */
    const uint64_t now_oldest = d->hist_last > HR_DASH_HISTORY ? d->hist_last - HR_DASH_HISTORY + 1 : 1;
    for (uint64_t sq = from > now_oldest ? from : now_oldest; sq <= last; sq++)
        rows[k++] = d->hist[(sq - 1) % HR_DASH_HISTORY];
    pthread_mutex_unlock(&d->mu);

    P("\"history\":{\"last_seq\":%" PRIu64 ",\"n\":%" PRIu64, k ? rows[k - 1].seq : after, k);
#define COLUMN(name, fmt, expr)                                                                    \
    do {                                                                                           \
        P(",\"" name "\":[");                                                                      \
        for (uint64_t i = 0; i < k; i++)                                                           \
            P(i ? "," fmt : fmt, expr);                                                            \
        P("]");                                                                                    \
    } while (0)
    COLUMN("t", "%.3f", rows[i].t);
    COLUMN("level", "%u", (unsigned)rows[i].level);
    COLUMN("measured", "%" PRIu64, rows[i].measured_bytes);
    COLUMN("current", "%" PRIu64, rows[i].current_bytes);
    COLUMN("ceiling", "%" PRIu64, rows[i].ceiling_bytes);
    COLUMN("soft", "%" PRIu64, rows[i].soft_bytes);
    COLUMN("hard", "%" PRIu64, rows[i].hard_bytes);
    COLUMN("running", "%u", rows[i].running);
    COLUMN("queued", "%u", rows[i].queued);
    P(",\"categories\":[");
    for (int c = 0; c < HR_GOV_N_CATEGORIES; c++) {
        P(c ? ",[" : "[");
        for (uint64_t i = 0; i < k; i++)
            P(i ? ",%" PRIu64 : "%" PRIu64, rows[i].account_bytes[c]);
        P("]");
    }
    P("]}");
#undef COLUMN
    if (rows != batch)
        free(rows);
    return st;
}

static enum hr_status write_decisions(uint64_t after, struct hr_api_buf *out)
{
    enum hr_status st = HR_OK;
    enum { MAX = 128 }; /* per poll; the rest comes with the next one */
    struct hr_decision *ds = malloc(MAX * sizeof(*ds));
    if (!ds)
        return HR_ERR_NOMEM;
    uint64_t last = 0;
    const size_t n = hr_decisions_read(after, ds, MAX, &last);
    P("\"decisions\":{\"last_seq\":%" PRIu64 ",\"items\":[", n ? ds[n - 1].seq : last);
    for (size_t i = 0; i < n; i++) {
        const struct hr_decision *x = &ds[i];
        P("%s{\"seq\":%" PRIu64 ",\"t\":%.3f,\"kind\":\"%s\",\"request\":%" PRIu64, i ? "," : "",
          x->seq, x->t, hr_decision_kind_name(x->kind), x->request_id);
        switch (x->kind) {
        case HR_DECISION_PRESSURE:
            P(",\"from\":\"%s\",\"to\":\"%s\",\"current\":%" PRIu64 ",\"soft\":%" PRIu64
              ",\"hard\":%" PRIu64 ",\"ceiling\":%" PRIu64 "}",
              hr_gov_level_name((enum hr_gov_level)x->u.pressure.from),
              hr_gov_level_name((enum hr_gov_level)x->u.pressure.to), x->u.pressure.current_bytes,
              x->u.pressure.soft_bytes, x->u.pressure.hard_bytes, x->u.pressure.ceiling_bytes);
            break;
        case HR_DECISION_CHUNK:
            P(",\"asked\":%u,\"chosen\":%u,\"kv_len\":%" PRIu64 ",\"headroom\":%" PRIu64
              ",\"planned\":%" PRIu64 "}",
              x->u.chunk.asked_tokens, x->u.chunk.chosen_tokens, x->u.chunk.kv_len,
              x->u.chunk.headroom_bytes, x->u.chunk.planned_bytes);
            break;
        case HR_DECISION_PREEMPT:
            P(",\"kv_used\":%u,\"kv_total\":%u,\"recompute\":%u}", x->u.preempt.kv_blocks_used,
              x->u.preempt.kv_blocks_total, x->u.preempt.recompute_tokens);
            break;
        case HR_DECISION_RESUME: P(",\"paused_s\":%.2f}", x->u.resume.paused_s); break;
        case HR_DECISION_REFUSE: {
            P(",\"n\":%u,\"m\":%u,\"estimated\":%" PRIu64 ",\"limit\":%" PRIu64 ",\"why\":",
              x->u.refuse.n_prompt, x->u.refuse.max_prompt, x->u.refuse.estimated_bytes,
              x->u.refuse.limit_bytes);
            struct hr_api_json j = {.b = out, .st = st};
            hr_api_json_cstr(&j, x->u.refuse.why);
            st = j.st;
            P("}");
            break;
        }
        case HR_DECISION_RECLAIM:
            P(",\"blocks\":%u,\"bytes\":%" PRIu64 "}", x->u.reclaim.blocks, x->u.reclaim.bytes);
            break;
        default: P("}"); break;
        }
    }
    P("]}");
    free(ds);
    return st;
}

static enum hr_status write_requests(struct hr_server *srv, double now, struct hr_api_buf *out)
{
    enum hr_status st = HR_OK;
    P("\"requests\":[");
    bool first = true;
    pthread_mutex_lock(&srv->gens_mu);
    for (struct hr_gen *g = srv->gens; g && st == HR_OK; g = g->next) {
        pthread_mutex_lock(&g->mu);
        if (g->submitted && !g->done) {
            const double decode_s = g->t_first > 0 ? now - g->t_first : 0;
            const double tps = g->n_generated > 1 && decode_s > 0 ? (g->n_generated - 1) / decode_s : 0;
            P("%s{\"id\":%" PRIu64 ",\"rid\":%" PRIu64 ",\"api\":\"%s\",\"stream\":%s,\"state\":\"%s\""
              ",\"n_prompt\":%u,\"n_prefilled\":%u,\"chunk\":%u,\"n_cached\":%u,\"n_generated\":%u"
              ",\"tokens_per_s\":%.2f,\"age_s\":%.2f,\"preempts\":%u,\"model\":",
              first ? "" : ",", g->id, g->rid, hr_metrics_route_name(g->route),
              g->stream ? "true" : "false", phase_names[g->phase], g->n_prompt, g->n_prefilled,
              g->last_chunk, g->n_cached, g->n_generated, tps, now - g->t_arrival, g->n_preempts);
            struct hr_api_json j = {.b = out, .st = st};
            hr_api_json_cstr(&j, g->req.model ? g->req.model : srv->model_id);
            st = j.st;
            P("}");
            first = false;
        }
        pthread_mutex_unlock(&g->mu);
    }
    pthread_mutex_unlock(&srv->gens_mu);
    P("]");
    return st;
}

static enum hr_status write_finished(struct hr_dash *d, double now, struct hr_api_buf *out)
{
    enum hr_status st = HR_OK;
    struct hr_dash_finished *f = malloc(HR_DASH_FINISHED * sizeof(*f));
    if (!f)
        return HR_ERR_NOMEM;
    pthread_mutex_lock(&d->mu);
    const uint64_t last = d->fin_last;
    const uint64_t n = last < HR_DASH_FINISHED ? last : HR_DASH_FINISHED;
    for (uint64_t i = 0; i < n; i++) /* newest first */
        f[i] = d->fin[(last - 1 - i) % HR_DASH_FINISHED];
    pthread_mutex_unlock(&d->mu);
    P("\"finished\":[");
    for (uint64_t i = 0; i < n && st == HR_OK; i++) {
        P("%s{\"id\":%" PRIu64 ",\"rid\":%" PRIu64 ",\"api\":\"%s\",\"n_prompt\":%u,\"n_cached\":%u"
          ",\"n_generated\":%u,\"preempts\":%u,\"ttft_s\":%.3f,\"tokens_per_s\":%.2f"
          ",\"duration_s\":%.2f,\"ago_s\":%.1f,\"model\":",
          i ? "," : "", f[i].id, f[i].rid, hr_metrics_route_name(f[i].route), f[i].n_prompt,
          f[i].n_cached, f[i].n_generated, f[i].n_preempts, f[i].ttft_s, f[i].tokens_per_s,
          f[i].t_end - f[i].t_arrival, now - f[i].t_end);
        struct hr_api_json j = {.b = out, .st = st};
        hr_api_json_cstr(&j, f[i].model);
        hr_api_json_lit(&j, ",\"outcome\":");
        hr_api_json_cstr(&j, f[i].outcome);
        st = j.st;
        P("}");
    }
    P("]");
    free(f);
    return st;
}

enum hr_status hr_dash_snapshot(struct hr_server *srv, uint64_t after_hist, uint64_t after_dec,
                                bool with_info, struct hr_api_buf *out)
{
    struct hr_dash *d = &srv->dash;
    enum hr_status st = HR_OK;
    const double now = hr_now_seconds();
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    const int state = atomic_load(&srv->state);
    P("{\"now\":%.3f,\"wall\":%.3f,\"period_ms\":%u,\"state\":\"%s\",\"category_names\":[", now,
      (double)wall.tv_sec + wall.tv_nsec / 1e9, HR_DASH_PERIOD_MS,
      state == HR_SERVER_READY ? "ready" : state == HR_SERVER_LOADING ? "loading" : "stopping");
    for (int c = 0; c < HR_GOV_N_CATEGORIES; c++)
        P(c ? ",\"%s\"" : "\"%s\"", category_names[c]);
    P("]");
    /* Until the server is ready, start has not run (or is running on the
     * loading thread): nothing below may be read yet. READY is stored
     * after start, so seeing it orders everything start wrote before. */
    if (state == HR_SERVER_LOADING || !d->hist || !srv->gov) {
        P("}");
        return st;
    }

    /* The live memory: the governor's view and the counters /metrics exports. */
    struct hr_gov_view v;
    hr_gov_get_view(srv->gov, &v);
    const struct hr_mem_counters *c = hr_gov_counters(srv->gov);
    struct hr_sched_stats s;
    hr_server_sched_stats(srv, &s);
    P(",\"memory\":{\"current\":%" PRIu64 ",\"ceiling\":%" PRIu64 ",\"peak\":%" PRIu64
      ",\"level\":\"%s\",\"measured\":%" PRIu64 ",\"accounted\":%" PRIu64 ",\"residual\":%" PRIu64
      ",\"soft\":%" PRIu64 ",\"hard\":%" PRIu64 ",\"static_ceiling\":%" PRIu64
      ",\"dynamic_ceiling\":%" PRIu64 ",\"reserve\":%" PRIu64 ",\"ceiling_source\":\"%s\""
      ",\"categories\":[",
      hr_mem_counter_get(&c->memory_current_bytes), hr_mem_counter_get(&c->memory_ceiling_bytes),
      hr_mem_counter_get(&c->memory_peak_bytes),
      hr_gov_level_name((enum hr_gov_level)hr_mem_counter_get(&c->memory_pressure_level)),
      v.measured_bytes, v.accounted_bytes, v.residual_bytes, v.soft_bytes, v.hard_bytes,
      v.static_ceiling_bytes == UINT64_MAX ? 0 : v.static_ceiling_bytes,
      v.dynamic_ceiling_bytes == UINT64_MAX ? 0 : v.dynamic_ceiling_bytes, v.reserve_bytes,
      ceiling_source(&v, srv->memory_limit_bytes));
    for (int k = 0; k < HR_GOV_N_CATEGORIES; k++)
        P(k ? ",%" PRIu64 : "%" PRIu64, v.account_bytes[k]);
    P("]}");
    P(",\"counters\":{\"prefill_chunks\":%" PRIu64 ",\"throttled\":%" PRIu64
      ",\"preempted\":%" PRIu64 ",\"refused_too_long\":%" PRIu64 ",\"refused_overloaded\":%" PRIu64
      ",\"aborted_for_memory\":%" PRIu64 ",\"to_soft\":%" PRIu64 ",\"to_hard\":%" PRIu64 "}",
      hr_mem_counter_get(&c->prefill_chunks_total),
      hr_mem_counter_get(&c->prefill_chunks_throttled_total),
      hr_mem_counter_get(&c->requests_preempted_total),
      hr_mem_counter_get(&c->requests_refused_too_long_total),
      hr_mem_counter_get(&c->requests_refused_overloaded_total),
      hr_mem_counter_get(&c->requests_aborted_for_memory_total),
      hr_mem_counter_get(&c->pressure_to_soft_total), hr_mem_counter_get(&c->pressure_to_hard_total));
    P(",\"sched\":{\"running\":%u,\"queued\":%u,\"kv_blocks_used\":%u,\"kv_blocks_total\":%u"
      ",\"kv_block_bytes\":%" PRIu64 ",\"cache_blocks\":%u,\"steps\":%" PRIu64 "}",
      s.running, s.queued, s.kv_blocks_used, s.kv_blocks_total, s.kv_block_bytes, s.cache_blocks,
      s.steps);
    const uint64_t calls = atomic_load(&d->n_snapshots);
    P(",\"cost\":{\"calls\":%" PRIu64 ",\"mean_us\":%.1f,\"max_us\":%.1f},", calls,
      calls ? atomic_load(&d->snapshot_ns_total) / 1e3 / (double)calls : 0.0,
      atomic_load(&d->snapshot_ns_max) / 1e3);
    if (st == HR_OK)
        st = write_history(d, after_hist, out);
    P(",");
    if (st == HR_OK)
        st = write_decisions(after_dec, out);
    P(",");
    if (st == HR_OK)
        st = write_requests(srv, now, out);
    P(",");
    if (st == HR_OK)
        st = write_finished(d, now, out);
    if (with_info && d->info_json)
        P(",\"info\":%s", d->info_json);
    P("}");
    return st;
}
