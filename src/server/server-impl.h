/*
 * server-impl.h - what server.c (HTTP, lifecycle) and routes.c (handlers,
 * the model, generations) share. Not part of the server's public API.
 */
#ifndef HR_SERVER_SERVER_IMPL_H
#define HR_SERVER_SERVER_IMPL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/rand.h"
#include "chat/chat-parse.h"
#include "chat/chat-render.h"
#include "mem/governor.h"
#include "model/model.h"
#include "sched/sched.h"
#include "server/api.h"
#include "server/dashboard.h"
#include "server/metrics.h"
#include "server/ready.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

enum hr_server_state { HR_SERVER_LOADING, HR_SERVER_READY, HR_SERVER_STOPPING };

struct hr_gen;

/* Where a generation is, as its scheduler events tell (for the dashboard
 * and the progress log lines). */
enum hr_gen_phase { HR_GEN_QUEUED, HR_GEN_PREFILL, HR_GEN_DECODE, HR_GEN_PREEMPTED };

struct hr_server {
    struct hr_server_config cfg; /* the caller's strings, which outlive the server */
    uint64_t max_body;
    double ping_interval_s;
    int64_t created; /* unix seconds, for /v1/models */
    struct MHD_Daemon *mhd;
    unsigned port;
    _Atomic int state; /* enum hr_server_state */
    _Atomic uint64_t next_rid;

    /* The model: read-only once loaded (routes.c: hr_server_load). */
    struct hr_model *model;
    struct hr_tokenizer *tok;
    struct hr_chat_template *tmpl;
    enum hr_chat_format format; /* how this model writes tool calls */
    char *model_id;             /* the file's name without .gguf */
    uint32_t n_ctx;
    int32_t *script; /* --test-script's tokens, then end of turn */
    uint32_t n_script;
    struct hr_gov *gov;
    uint64_t memory_limit_bytes; /* --memory-limit parsed; 0: none (the dashboard names the ceiling's source) */

    /* The scheduler. sched_lock orders its users (submit and cancel from
     * MHD threads, stats for /metrics, /ready and the agent) against
     * publishing it at load and freeing it at shutdown, the only writers:
     * a read lock, so that a scrape never waits behind a submit. Events
     * never take it. */
    pthread_rwlock_t sched_lock;
    struct hr_sched *sched;

    struct hr_metrics metrics;
    struct hr_ready ready;       /* /ready, the agent, headroom_ready (ready.h) */
    uint64_t min_request_bytes;  /* hr_sched_min_request_bytes, fixed at load */
    unsigned overload_status;    /* Anthropic's OVERLOADED status: 529 or 503 */
    /* The HAProxy agent-check listener (agent.c); -1: none. */
    int agent_fd, agent_stop_pipe[2];
    pthread_t agent_thread;
    bool agent_started;
    struct hr_dash dash; /* the dashboard's rings and sampler (dashboard.h) */

    /* Live generations, for pings and for shutdown to wait on. Lock order:
     * gens_mu before a generation's mu. */
    pthread_mutex_t gens_mu;
    pthread_cond_t gens_cv, ping_cv;
    struct hr_gen *gens;
    unsigned n_gens;
    struct hr_rng rng; /* ids and seeds (gens_mu) */
    pthread_t ping_thread;
    bool ping_started, ping_stop;
};

/* libmicrohttpd's per-request state (its con_cls): one HTTP exchange. */
struct hr_exchange {
    struct hr_server *srv;
    struct MHD_Connection *conn;
    uint64_t rid; /* for request-id headers */
    char method[16];
    char path[256];
    enum hr_api_kind api; /* the error shape this path speaks */
    const struct hr_route *route;
    enum hr_metrics_route route_id;
    char *body;
    size_t n_body, cap_body;
    bool too_large;
    double t_arrival;
    unsigned status; /* what was sent, for metrics */
    const char *allow; /* a 405's Allow header */
    bool locked;       /* no valid key: only the dashboard's page answers (401, its key form) */
    double server_timing_ms; /* > 0: sent as Server-Timing (a snapshot's or a scrape's cost) */
    const char *server_timing_name; /* its metric name; NULL: "snapshot" */
    double server_cpu_ms;    /* ... and its thread CPU time */
    struct hr_gen *gen;
};

/*
 * A generation: one request from submit to its last byte. See server.c
 * for who holds a reference; `mu` guards every field below it.
 */
struct hr_gen {
    struct hr_server *srv;
    struct hr_gen *prev, *next; /* srv->gens (gens_mu) */
    uint64_t id;                /* the scheduler's */
    uint64_t rid;               /* the exchange's: request-id headers and log lines */
    enum hr_metrics_route route;
    struct hr_api_request req;
    bool stream;
    double t_arrival;

    pthread_mutex_t mu;
    int refs;
    struct MHD_Connection *conn; /* NULL once the exchange is over */
    bool suspended;              /* the connection waits for us: resume it */
    bool submitted, done;        /* done: the last event came; no bytes after `out` */
    bool failed;                 /* non-streaming: send `error` instead of `out` */
    bool client_gone;            /* the ping thread saw the client close; cancelled */
    /* --queue-max-wait: a stream's headers wait for STARTED, so a refusal
     * in the queue is still an HTTP error; cleared when the stream begins */
    bool hold_headers;
    bool started;                /* STARTED came */
    struct hr_api_error error;
    struct hr_api_buf out; /* stream: bytes not yet sent; else the document */
    size_t out_off;
    struct hr_api_writer *w;
    struct hr_chat_parser *parser;
    double t_first, t_last_write;
    uint32_t n_prompt, n_generated, n_cached;
    /* the phase and the last chunk, for the dashboard and progress lines */
    enum hr_gen_phase phase;
    uint32_t n_prefilled, last_chunk, n_preempts;
    double t_started, t_paused, t_progress_log;
};

/* routes.c: the scheduler's stats under sched_lock (zeros while there is no
 * scheduler): what /metrics and the dashboard read, never waiting for a step. */
void hr_server_sched_stats(struct hr_server *srv, struct hr_sched_stats *out);
/* routes.c: a readiness snapshot (stats, the governor's view) applied to
 * srv->ready; returns the reason in effect and fills *in (may be NULL). */
enum hr_ready_reason hr_server_ready(struct hr_server *srv, struct hr_ready_input *in);

/* agent.c: the HAProxy agent-check listener on cfg.agent_port (bound at
 * start, before the model loads, so a balancer sees `maint` meanwhile). */
enum hr_status hr_agent_start(struct hr_server *srv, struct hr_err *err);
void hr_agent_stop(struct hr_server *srv); /* no-op when not started */
void hr_gen_free(struct hr_gen *g);    /* routes.c: frees what the gen owns */
void hr_gen_release(struct hr_gen *g); /* drops one reference; the last frees */
void hr_gen_wake(struct hr_gen *g);    /* g->mu held: resume a suspended connection */

/* Responses (server.c). Each queues a response on ex->conn and records the
 * status for metrics. */
enum MHD_Result hr_respond(struct hr_exchange *ex, unsigned status, const char *content_type,
                           const char *body, size_t len, unsigned retry_after_s);
enum MHD_Result hr_respond_json(struct hr_exchange *ex, unsigned status, json_t *doc); /* steals doc */
enum MHD_Result hr_respond_error(struct hr_exchange *ex, const struct hr_api_error *e);
/* ex->gen's whole document once it is done; until then the connection
 * waits suspended (the last event resumes it). */
enum MHD_Result hr_respond_document(struct hr_exchange *ex);
/* Queues g's streaming response; the response holds one reference of g. */
enum MHD_Result hr_respond_stream(struct hr_exchange *ex, struct hr_gen *g);
/* A stream whose headers wait (hold_headers): suspended until STARTED, then
 * hr_respond_stream; a refusal or cancellation first is an error response. */
enum MHD_Result hr_respond_held_stream(struct hr_exchange *ex);

/* routes.c */
const struct hr_route *hr_route_find(const char *path, enum hr_metrics_route *id);
enum MHD_Result hr_route_dispatch(struct hr_exchange *ex);
/* Whether a route answers a request without a valid key (the dashboard's
 * page: a form asking for the key, with status 401). */
bool hr_route_answers_locked(const struct hr_route *r);
enum hr_status hr_server_load(struct hr_server *srv, struct hr_err *err);
void hr_server_unload(struct hr_server *srv);

#endif
