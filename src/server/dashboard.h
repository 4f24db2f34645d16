/*
 * dashboard.h - the live dashboard of `headroom serve`: the page at `/`
 * (and `/dashboard`), its assets, and the JSON snapshot it polls at
 * `/dashboard/snapshot` four times a second.
 *
 * What the page shows comes from four places, none of which waits for an
 * engine step:
 *   - memory: a ring of samples (every HR_DASH_PERIOD_MS, the last
 *     HR_DASH_HISTORY of them: five minutes) taken by this module's own
 *     thread from what /metrics reads - the governor's view (categories,
 *     measured, soft, hard) and its counters (current, ceiling, level) -
 *     plus the scheduler's stats;
 *   - decisions: the process's ring in mem/decisions.h (pressure changes,
 *     throttled chunks, preemptions, reclaims), to which the server adds
 *     resumes and refusals as its events reveal them;
 *   - requests: the server's live generations (struct hr_gen), each with
 *     the phase its events put it in, walked under the list lock;
 *   - finished requests: a small ring written at a generation's last event.
 * A snapshot asks for what came after the sample and decision numbers it
 * already has (?h=N&d=M), so a poll carries only what is new (a few hundred
 * bytes); the first poll (h=0) gets the whole history.
 *
 * Memory: the history ring (about 120 KiB) and the model's description are
 * allocated once, at hr_dash_start; a snapshot's text is a per-call buffer
 * of the HTTP thread (request lifetime). Nothing here is on the engine's
 * path.
 *
 * Threads: hr_dash_start, hr_dash_stop and hr_dash_free from the thread
 * that starts and frees the server (a snapshot before the server is ready
 * reads nothing of what start sets up: the state says it is loading); the note_* functions from any thread (the engine
 * thread's event callbacks, MHD's threads); hr_dash_snapshot from MHD's
 * threads. One mutex guards the rings; it is never held while another lock
 * is taken, except that the snapshot takes the server's list lock (and a
 * generation's mutex inside it) after dropping its own.
 */
#ifndef HR_SERVER_DASHBOARD_H
#define HR_SERVER_DASHBOARD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "mem/governor.h"
#include "server/api.h"
#include "server/metrics.h"

#define HR_DASH_PERIOD_MS 250u
#define HR_DASH_HISTORY   1200u /* five minutes of samples */
#define HR_DASH_FINISHED  64u   /* finished requests kept for the page */

struct hr_server;

/* One memory sample of the timeline. */
struct hr_dash_sample {
    uint64_t seq; /* 1, 2, ...: entry seq s lives at hist[(s - 1) % HR_DASH_HISTORY] */
    double t;     /* hr_now_seconds() */
    uint64_t account_bytes[HR_GOV_N_CATEGORIES];
    uint64_t measured_bytes, current_bytes, ceiling_bytes, soft_bytes, hard_bytes;
    uint8_t level; /* enum hr_gov_level */
    uint32_t running, queued;
};

/* A request that ended (or was refused), as the page lists it. */
struct hr_dash_finished {
    uint64_t id, rid; /* the scheduler's id (0 if never submitted), the exchange's */
    enum hr_metrics_route route;
    char model[64];
    uint32_t n_prompt, n_cached, n_generated, n_preempts;
    double t_arrival, t_end, ttft_s, tokens_per_s;
    char outcome[176]; /* "end of turn", "max tokens", "refused: prompt is too long: ..." */
};

struct hr_dash {
    pthread_mutex_t mu;
    struct hr_dash_sample *hist; /* HR_DASH_HISTORY entries */
    uint64_t hist_last;          /* newest seq, 0: none */
    struct hr_dash_finished fin[HR_DASH_FINISHED];
    uint64_t fin_last;
    char *info_json; /* the model and the machine, one JSON object, built at start */
    /* the sampling thread */
    pthread_t thread;
    pthread_cond_t cv;
    bool started, stop;
    /* what snapshots cost (server side, building the JSON), for the page and the tests */
    _Atomic uint64_t n_snapshots, snapshot_ns_total, snapshot_ns_max;
};

/* Allocates the rings, describes the loaded model and starts the sampling
 * thread. Call after hr_server_load. HR_ERR_NOMEM. */
enum hr_status hr_dash_start(struct hr_server *srv, struct hr_err *err);
/* Stops the sampling thread (before the governor and the scheduler go);
 * snapshots still answer. Safe if start failed or never ran. */
void hr_dash_stop(struct hr_dash *d);
/* Frees what start allocated, once no HTTP thread can ask for a snapshot
 * (after the daemon stopped). Safe if start failed or never ran. */
void hr_dash_free(struct hr_dash *d);

/* A request ended: its row for the finished list. */
void hr_dash_note_finished(struct hr_dash *d, const struct hr_dash_finished *f);

/*
 * The snapshot JSON (see the top of this file) into out: samples after
 * after_hist, decisions after after_dec, live and finished requests, and
 * the model's description when with_info. Only HR_ERR_NOMEM fails.
 */
enum hr_status hr_dash_snapshot(struct hr_server *srv, uint64_t after_hist, uint64_t after_dec,
                                bool with_info, struct hr_api_buf *out);

/* The embedded assets (generated at build time from src/server/assets/). */
struct hr_dash_asset {
    const char *path;         /* "/dashboard/app.js" */
    const char *content_type; /* "text/javascript; charset=utf-8" */
    const unsigned char *data;
    unsigned long size;
};
/* The asset at path, or NULL. The page itself is path "/dashboard". */
const struct hr_dash_asset *hr_dash_asset_find(const char *path);

#endif
