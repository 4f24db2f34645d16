/*
 * metrics.c - counters and histograms, and their Prometheus text form.
 */
#include "server/metrics.h"

#include <string.h>

static const char *const route_names[HR_ROUTE_COUNT] = {
    [HR_ROUTE_MESSAGES] = "/v1/messages",
    [HR_ROUTE_COUNT_TOKENS] = "/v1/messages/count_tokens",
    [HR_ROUTE_CHAT] = "/v1/chat/completions",
    [HR_ROUTE_COMPLETIONS] = "/v1/completions",
    [HR_ROUTE_MODELS] = "/v1/models",
    [HR_ROUTE_TOKENIZE] = "/tokenize",
    [HR_ROUTE_DETOKENIZE] = "/detokenize",
    [HR_ROUTE_HEALTH] = "/health",
    [HR_ROUTE_READY] = "/ready",
    [HR_ROUTE_METRICS] = "/metrics",
    [HR_ROUTE_ROOT] = "/",
    [HR_ROUTE_DASHBOARD] = "/dashboard",
    [HR_ROUTE_OTHER] = "other",
};

static const char *const class_names[HR_CLASS_COUNT] = {"2xx", "4xx", "5xx"};

const char *hr_metrics_route_name(enum hr_metrics_route r)
{
    return r < HR_ROUTE_COUNT ? route_names[r] : "other";
}

static void histogram_init(struct hr_histogram *h, const char *name, const char *help,
                           const double *bounds, size_t n)
{
    h->name = name;
    h->help = help;
    h->n_bounds = n < HR_METRICS_MAX_BUCKETS ? n : HR_METRICS_MAX_BUCKETS;
    memcpy(h->bounds, bounds, h->n_bounds * sizeof(double));
}

void hr_metrics_init(struct hr_metrics *m)
{
    memset(m, 0, sizeof(*m));
    /* Time to first token spans a cached turn (milliseconds) to a 32K
     * prefill on a CPU (minutes); generation speed, one to a few hundred
     * tokens per second. */
    static const double ttft[] = {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
    static const double tps[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
    histogram_init(&m->ttft, "headroom_time_to_first_token_seconds",
                   "Seconds from a request's arrival to its first generated token.", ttft,
                   sizeof(ttft) / sizeof(ttft[0]));
    histogram_init(&m->tokens_per_s, "headroom_generation_tokens_per_second",
                   "Generated tokens per second of each request, after its first token.", tps,
                   sizeof(tps) / sizeof(tps[0]));
}

void hr_metrics_count_request(struct hr_metrics *m, enum hr_metrics_route r, unsigned status)
{
    const enum hr_metrics_class c = status >= 500   ? HR_CLASS_5XX
                                    : status >= 400 ? HR_CLASS_4XX
                                                    : HR_CLASS_2XX;
    atomic_fetch_add_explicit(&m->requests[r < HR_ROUTE_COUNT ? r : HR_ROUTE_OTHER][c], 1,
                              memory_order_relaxed);
}

void hr_metrics_observe(struct hr_histogram *h, double v)
{
    size_t i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_micro, (uint64_t)(v > 0 ? v * 1e6 : 0), memory_order_relaxed);
}

static uint64_t get(const _Atomic uint64_t *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

static enum hr_status counter(struct hr_api_buf *out, const char *name, const char *help,
                              uint64_t v)
{
    return hr_api_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name,
                             name, (unsigned long long)v);
}

static enum hr_status histogram(struct hr_api_buf *out, const struct hr_histogram *h)
{
    enum hr_status st = hr_api_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", h->name,
                                          h->help, h->name);
    uint64_t cum = 0;
    for (size_t i = 0; st == HR_OK && i <= h->n_bounds; i++) {
        cum += get(&h->counts[i]);
        if (i < h->n_bounds)
            st = hr_api_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[i],
                                   (unsigned long long)cum);
        else
            st = hr_api_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", h->name,
                                   (unsigned long long)cum);
    }
    if (st == HR_OK)
        st = hr_api_buf_printf(out, "%s_sum %.6f\n%s_count %llu\n", h->name,
                               (double)get(&h->sum_micro) / 1e6, h->name,
                               (unsigned long long)cum);
    return st;
}

enum hr_status hr_metrics_format(const struct hr_metrics *m, struct hr_api_buf *out)
{
    enum hr_status st = hr_api_buf_printf(
        out, "# HELP headroom_requests_total HTTP requests answered, by route and status class.\n"
             "# TYPE headroom_requests_total counter\n");
    for (int r = 0; st == HR_OK && r < HR_ROUTE_COUNT; r++)
        for (int c = 0; st == HR_OK && c < HR_CLASS_COUNT; c++)
            st = hr_api_buf_printf(out, "headroom_requests_total{route=\"%s\",code=\"%s\"} %llu\n",
                                   route_names[r], class_names[c],
                                   (unsigned long long)get(&m->requests[r][c]));
    if (st == HR_OK)
        st = counter(out, "headroom_prompt_tokens_total",
                     "Prompt tokens of admitted generation requests.", get(&m->prompt_tokens));
    if (st == HR_OK)
        st = counter(out, "headroom_prompt_cached_tokens_total",
                     "Prompt tokens served from the prefix cache.", get(&m->cached_tokens));
    if (st == HR_OK)
        st = counter(out, "headroom_generated_tokens_total", "Tokens generated.",
                     get(&m->generated_tokens));
    if (st == HR_OK)
        st = counter(out, "headroom_requests_cancelled_by_client_total",
                     "Generations cancelled because the client closed the connection.",
                     get(&m->cancelled_by_client));
    if (st == HR_OK)
        st = counter(out, "headroom_streams_failed_total",
                     "Streams that ended with an error event after they began.",
                     get(&m->streams_failed));
    if (st == HR_OK)
        st = histogram(out, &m->ttft);
    if (st == HR_OK)
        st = histogram(out, &m->tokens_per_s);
    return st;
}
