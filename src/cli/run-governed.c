/*
 * run-governed.c - `headroom run --memory-limit SIZE`: the prompt goes
 * through the scheduler with a memory governor, exactly as the server will
 * run it, so the seed scenario (a long prompt under a tight ceiling) can be
 * replayed from the command line. The governor logs every throttled prefill
 * chunk and pressure transition; the closing lines give the peak RSS next to
 * the ceiling and the governor's counters.
 */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys.h"
#include "cli/cli.h"
#include "engine/engine.h"
#include "engine/kv-cache.h"
#include "kernels/matmul.h"
#include "mem/counters.h"
#include "mem/governor.h"
#include "mem/probe.h"
#include "mem/size.h"
#include "sched/sched.h"

/* What the event callback collects (engine thread; read after wait_idle). */
struct collect {
    bool json;
    int32_t *tokens;
    uint32_t n_tokens, n_chunks;
    char *text;
    size_t n_text, cap_text;
    double t_start, t_first, t_end;
    bool finished, refused;
    enum hr_sched_finish finish;
    char message[200];
    struct hr_cli_progress progress; /* the prefill, on a terminal */
};

static void add_text(struct collect *c, const char *t, size_t n)
{
    if (!n)
        return;
    if (!c->json) {
        fwrite(t, 1, n, stdout);
        fflush(stdout);
        return;
    }
    if (c->n_text + n + 1 > c->cap_text) {
        size_t cap = (c->n_text + n + 1) * 2;
        char *p = realloc(c->text, cap);
        if (!p)
            return; /* the JSON text is then short; the tokens are still complete */
        c->text = p, c->cap_text = cap;
    }
    memcpy(c->text + c->n_text, t, n);
    c->n_text += n;
}

static void on_event(const struct hr_sched_event *ev, void *user)
{
    struct collect *c = user;
    switch (ev->kind) {
    case HR_SCHED_STARTED: break;
    case HR_SCHED_PROGRESS:
        c->n_chunks++;
        hr_cli_progress_update(&c->progress, ev->n_prefilled, ev->n_prompt);
        break;
    case HR_SCHED_PREEMPTED: break; /* alone it cannot be preempted; nothing to show */
    case HR_SCHED_TOKEN:
        if (!c->n_tokens) {
            c->t_first = hr_now_seconds();
            hr_cli_progress_end(&c->progress);
        }
        c->tokens[c->n_tokens++] = ev->token;
        add_text(c, ev->text, ev->text_len);
        break;
    case HR_SCHED_FINISHED:
        hr_cli_progress_end(&c->progress);
        add_text(c, ev->text, ev->text_len);
        c->finished = true;
        c->finish = ev->finish;
        if (ev->message)
            snprintf(c->message, sizeof(c->message), "%s", ev->message);
        c->t_end = hr_now_seconds();
        break;
    case HR_SCHED_REFUSED:
        c->refused = true;
        snprintf(c->message, sizeof(c->message), "%s", ev->message ? ev->message : "refused");
        c->t_end = hr_now_seconds();
        break;
    }
}

void hr_cli_report_limit(const char *memory_limit, uint64_t peak_rss_bytes)
{
    uint64_t limit = 0;
    struct hr_err err = {{0}};
    if (hr_mem_parse_size(memory_limit, hr_mem_ram_total_bytes(), &limit, &err) != HR_OK) {
        fprintf(stderr, "headroom run: --memory-limit: %s\n", err.msg);
        return;
    }
    char a[32], b[32];
    fprintf(stderr, "memory (no governor): peak RSS %s, limit %s: %s\n",
            hr_cli_fmt_bytes((double)peak_rss_bytes, a, sizeof(a)),
            hr_cli_fmt_bytes((double)limit, b, sizeof(b)),
            peak_rss_bytes > limit ? "ABOVE the limit" : "below the limit");
}

/* With --admit-beyond-memory: polls until the request ends, or until its
 * prefill has waited a whole second for memory that only the request's own
 * end could free (it runs alone under a static ceiling): that prompt cannot
 * complete here, which is what a test bisecting the real maximum needs to
 * know. Returns true (and says so on stderr) when stuck. */
static bool wait_stuck(struct hr_sched *s)
{
    double since = 0;
    for (;;) {
        struct hr_sched_stats st;
        hr_sched_stats(s, &st);
        if (st.running == 0 && st.queued == 0)
            return false;
        const double now = hr_now_seconds();
        if (!st.waiting_for_memory)
            since = 0;
        else if (since == 0)
            since = now;
        else if (now - since >= 1.0) {
            fprintf(stderr, "headroom run: the prompt cannot complete under this ceiling: its "
                            "prefill waited 1 s for memory (%" PRIu64 " tokens prefilled)\n",
                    st.tokens_prefilled);
            return true;
        }
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000L}, NULL);
    }
}

int hr_cli_run_governed(const struct hr_cli_governed_run *g)
{
    struct hr_err err = {{0}};
    struct hr_gov_config gc;
    hr_gov_config_default(&gc);
    gc.admit_margin_bytes = HR_GOV_ADMIT_NOISE_BYTES; /* the real probe: see governor.h */
    if (hr_mem_parse_size(g->memory_limit, hr_mem_ram_total_bytes(), &gc.limit_bytes, &err) != HR_OK) {
        fprintf(stderr, "headroom run: --memory-limit: %s\n", err.msg);
        return 2;
    }
    if (g->soft_frac > 0)
        gc.soft_frac = g->soft_frac;
    if (g->hard_frac > 0)
        gc.hard_frac = g->hard_frac;
    if (gc.soft_frac > gc.hard_frac) {
        fprintf(stderr, "headroom run: --memory-soft %.2f is above --memory-hard %.2f\n",
                gc.soft_frac, gc.hard_frac);
        return 2;
    }
    struct hr_mem_probe probe;
    struct hr_gov *gov = NULL;
    if (hr_mem_probe_sys_init(NULL, &probe, &err) != HR_OK ||
        hr_gov_init(&gc, probe, &gov, &err) != HR_OK) {
        fprintf(stderr, "headroom run: %s\n", err.msg);
        return 1;
    }
    struct hr_kv_config kc;
    hr_engine_kv_config(g->model, g->kv_type, 0, g->kv_full_window, &kc);
    struct hr_sched_config sc = {
        .model = g->model,
        .tok = g->tok,
        .n_threads = g->threads,
        .kv_type = g->kv_type,
        /* reserved address space: pages are committed only as blocks fill */
        .kv_budget_bytes = (uint64_t)hr_kv_config_blocks_for(&kc, g->ctx + 1, g->batch) *
                           hr_kv_block_bytes_for(&kc),
        .n_ctx = g->ctx,
        .batch_tokens = g->batch,
        .parallel = 1,
        .max_queue = 1,
        .gov = gov,
        .admit_beyond_memory = g->admit_beyond_memory,
        .device = g->device,
        .device_limit_bytes = g->vram_limit_bytes,
        .kv_full_window = g->kv_full_window,
    };
    struct hr_sched *s = NULL;
    if (hr_sched_init(&sc, &s, &err) != HR_OK) {
        fprintf(stderr, "headroom run: %s\n", err.msg);
        hr_gov_free(gov);
        return 1;
    }
    struct collect c = {.json = g->json};
    hr_cli_progress_init(&c.progress, "prefill");
    c.tokens = malloc(((size_t)g->n_predict + 1) * sizeof(int32_t));
    struct hr_sched_params p = hr_sched_params_defaults();
    p.prompt = g->prompt;
    p.n_prompt = g->n_prompt;
    p.max_tokens = g->n_predict ? g->n_predict : 1;
    p.sampling = g->sampling;
    p.ignore_eos = g->ignore_eos;
    p.on_event = on_event;
    p.user = &c;
    uint64_t id;
    struct hr_sched_refusal why;
    int rc = 1;
    c.t_start = hr_now_seconds();
    if (!c.tokens) {
        fprintf(stderr, "headroom run: out of memory\n");
        goto done;
    }
    if (hr_sched_submit(s, &p, &id, &why, &err) != HR_OK) {
        char a[32], b[32];
        if (why.reason == HR_SCHED_TOO_LONG && why.estimated_bytes)
            fprintf(stderr,
                    "headroom run: %s: it needs about %s and the limit allows %s; raise "
                    "--memory-limit or shorten the prompt\n",
                    why.message, hr_cli_fmt_bytes((double)why.estimated_bytes, a, sizeof(a)),
                    hr_cli_fmt_bytes((double)why.limit_bytes, b, sizeof(b)));
        else
            fprintf(stderr, "headroom run: %s\n", err.msg);
        goto done;
    }
    if (g->admit_beyond_memory && wait_stuck(s)) {
        rc = 3;
        goto done;
    }
    hr_sched_wait_idle(s);
    if (!c.finished) {
        fprintf(stderr, "headroom run: %s\n", c.message);
        goto done;
    }
    const uint64_t rss = hr_peak_rss_bytes();
    struct hr_gov_view v;
    hr_gov_sample(gov, &v);
    const struct hr_mem_counters *mc = hr_gov_counters(gov);
    const double pp = c.t_first > c.t_start ? g->n_prompt / (c.t_first - c.t_start) : 0;
    const double tg = c.n_tokens > 1 && c.t_end > c.t_first
                          ? (c.n_tokens - 1) / (c.t_end - c.t_first)
                          : 0;
    const uint64_t chunks = hr_mem_counter_get(&mc->prefill_chunks_total),
                   throttled = hr_mem_counter_get(&mc->prefill_chunks_throttled_total),
                   to_soft = hr_mem_counter_get(&mc->pressure_to_soft_total),
                   to_hard = hr_mem_counter_get(&mc->pressure_to_hard_total),
                   aborted = hr_mem_counter_get(&mc->requests_aborted_for_memory_total);
    if (g->json) {
        json_t *toks = json_array(), *pt = json_array();
        for (uint32_t i = 0; i < g->n_prompt; i++)
            json_array_append_new(pt, json_integer(g->prompt[i]));
        for (uint32_t i = 0; i < c.n_tokens; i++)
            json_array_append_new(toks, json_integer(c.tokens[i]));
        json_t *out = json_pack(
            "{s:o,s:o,s:s%,s:s,s:{s:f,s:f,s:I},s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}}",
            "prompt_tokens", pt, "tokens", toks, "text", c.text ? c.text : "", c.n_text,
            "finish_reason", hr_sched_finish_name(c.finish), "timings",
            "prompt_tokens_per_second", pp, "generated_tokens_per_second", tg, "peak_rss_bytes",
            (json_int_t)rss, "memory", "ceiling_bytes", (json_int_t)v.ceiling_bytes,
            "peak_rss_bytes", (json_int_t)rss, "peak_current_bytes", (json_int_t)v.peak_bytes,
            "prefill_chunks", (json_int_t)c.n_chunks, "prefill_chunks_throttled",
            (json_int_t)throttled, "transitions_to_soft", (json_int_t)to_soft,
            "transitions_to_hard", (json_int_t)to_hard, "aborted_for_memory",
            (json_int_t)aborted);
        char *text = out ? json_dumps(out, JSON_COMPACT) : NULL;
        if (text)
            printf("%s\n", text);
        free(text);
        json_decref(out);
    } else {
        printf("\n");
    }
    fflush(stdout);
    char a[32], b[32];
    fprintf(stderr,
            "prompt %u tokens, %.1f tokens/s; generated %u tokens, %.1f tokens/s; finish %s; "
            "peak RSS %s (%s)\n",
            g->n_prompt, pp, c.n_tokens, tg, hr_sched_finish_name(c.finish),
            hr_cli_fmt_bytes((double)rss, a, sizeof(a)), hr_kernels_isa());
    fprintf(stderr,
            "memory (governor): peak RSS %s, ceiling %s: %s; %u prefill chunks (%" PRIu64
            " throttled of %" PRIu64 "), %" PRIu64 " -> soft, %" PRIu64
            " -> hard, %" PRIu64 " aborted\n",
            hr_cli_fmt_bytes((double)rss, a, sizeof(a)),
            hr_cli_fmt_bytes((double)v.ceiling_bytes, b, sizeof(b)),
            rss > v.ceiling_bytes ? "ABOVE the ceiling" : "below the ceiling", c.n_chunks,
            throttled, chunks, to_soft, to_hard, aborted);
    rc = 0;
done:
    hr_sched_free(s);
    hr_gov_free(gov);
    free(c.tokens);
    free(c.text);
    return rc;
}
