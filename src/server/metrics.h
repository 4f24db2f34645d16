/*
 * metrics.h - the server's own Prometheus metrics: request and token
 * counters and two histograms (time to first token, generation speed).
 * The memory governor's counters (mem/counters.h) and the scheduler's
 * gauges are appended by the /metrics route; this module owns only what
 * the HTTP layer observes.
 *
 * Every update is a relaxed atomic add, so any thread (MHD's pool, the
 * engine thread's event callbacks) may record without a lock; a scrape may
 * see one histogram's _count a step ahead of its _sum, which Prometheus
 * tolerates. No allocation after init: the struct is fixed-size.
 */
#ifndef HR_SERVER_METRICS_H
#define HR_SERVER_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api.h"

#define HR_METRICS_MAX_BUCKETS 16

struct hr_histogram {
    const char *name, *help;
    double bounds[HR_METRICS_MAX_BUCKETS]; /* upper bounds, ascending */
    size_t n_bounds;
    _Atomic uint64_t counts[HR_METRICS_MAX_BUCKETS + 1]; /* last: +Inf */
    _Atomic uint64_t sum_micro;                          /* sum x 1e6, as an integer */
};

/* Routes, for the requests counter's label. */
enum hr_metrics_route {
    HR_ROUTE_MESSAGES,
    HR_ROUTE_COUNT_TOKENS,
    HR_ROUTE_CHAT,
    HR_ROUTE_COMPLETIONS,
    HR_ROUTE_MODELS,
    HR_ROUTE_TOKENIZE,
    HR_ROUTE_DETOKENIZE,
    HR_ROUTE_HEALTH,
    HR_ROUTE_READY,
    HR_ROUTE_METRICS,
    HR_ROUTE_ROOT,
    HR_ROUTE_DASHBOARD, /* /dashboard and its assets and snapshot */
    HR_ROUTE_OTHER,
    HR_ROUTE_COUNT,
};

/* Response classes, for the requests counter's second label. */
enum hr_metrics_class { HR_CLASS_2XX, HR_CLASS_4XX, HR_CLASS_5XX, HR_CLASS_COUNT };

struct hr_metrics {
    _Atomic uint64_t requests[HR_ROUTE_COUNT][HR_CLASS_COUNT];
    _Atomic uint64_t prompt_tokens, cached_tokens, generated_tokens;
    _Atomic uint64_t cancelled_by_client; /* the connection closed before the end */
    _Atomic uint64_t streams_failed;      /* an error event after the stream began */
    struct hr_histogram ttft, tokens_per_s;
};

void hr_metrics_init(struct hr_metrics *m);

const char *hr_metrics_route_name(enum hr_metrics_route r);

/* Counts one finished HTTP exchange by its status. */
void hr_metrics_count_request(struct hr_metrics *m, enum hr_metrics_route r, unsigned status);
void hr_metrics_observe(struct hr_histogram *h, double v);

/* Appends the Prometheus text (HELP/TYPE lines, histograms with _bucket,
 * _sum, _count) of every metric here. Only HR_ERR_NOMEM fails. */
enum hr_status hr_metrics_format(const struct hr_metrics *m, struct hr_api_buf *out);

#endif
