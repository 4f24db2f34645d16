/*
 * server.h - `headroom serve`: one model behind the OpenAI and Anthropic
 * HTTP APIs.
 *
 * Threads. libmicrohttpd runs a small pool of polling threads that parse
 * requests, render templates, tokenize and submit to the scheduler
 * (sched.h); they never block on the engine. The scheduler's one engine
 * thread produces events; their callbacks (server.c) turn tokens into
 * response bytes and wake the connection. A ping thread keeps quiet
 * streams alive. The caller's thread runs hr_server_run, which waits for
 * SIGINT/SIGTERM and then shuts down in order.
 *
 * A generation's life, on the HTTP side (the function behind each step):
 *
 *   POST arrives --[on_request: body collected, auth, route]--> handler
 *      handler --[api parse, template, tokenize, hr_sched_submit]-->
 *         refused now ---------------------------> error response (400/413/529/503)
 *         streaming:  200 + message_start now (with queue_max_wait_s: once it
 *                     leaves the queue; a refusal there is then an HTTP error,
 *                     hr_respond_held_stream); the content reader sends bytes
 *                     as events add them and suspends the connection when it
 *                     has none (resumed by the next event or ping)
 *         otherwise:  the connection is suspended until FINISHED/REFUSED, then
 *                     the handler runs again and sends the whole document
 *   connection closes before the end --[on_completed]--> hr_sched_cancel:
 *                     the request ends at the next step and its KV is freed
 *
 * Shutdown (SIGTERM/SIGINT): stop accepting (MHD_quiesce_daemon); let running
 * requests finish for up to shutdown_timeout_s; cancel the rest (streams get
 * an error event, waiting requests a 503); wait until every connection has
 * its last byte; stop the daemon; exit 0.
 */
#ifndef HR_SERVER_SERVER_H
#define HR_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "gguf/ggml-types.h"

struct hr_server_config {
    const char *model_path;
    const char *host;        /* an address or name to bind; default 127.0.0.1 */
    unsigned port;           /* 0: any free port (the log line says which) */
    const char *api_key;     /* NULL: no authentication */
    uint32_t n_ctx;          /* longest prompt + output of one request; 0: the model's */
    int n_threads;           /* engine threads; 0: physical cores */
    unsigned http_threads;   /* libmicrohttpd's pool; 0: 4 */
    uint32_t parallel;       /* requests generating at once; 0: 4 */
    uint32_t max_queue;      /* waiting requests before 529/503; 0: 64 */
    double queue_timeout_s;  /* longest wait in the queue; 0: none */
    uint32_t batch_tokens;   /* tokens per engine step; 0: 512 */
    /* The KV cache type (engine/kv-cache.h): HR_GGML_F16, Q8_0 or Q4_0;
     * 0 (F32) is taken as F16, the default, as the scheduler does. */
    enum hr_ggml_type kv_type;
    const char *memory_limit; /* the governor's ceiling ("12G", "80%"); NULL: RAM and cgroup */
    bool has_memory_reserve;       /* false: the governor's default reserve */
    uint64_t memory_reserve_bytes; /* left to other processes: dynamic = current + MemAvailable - this */
    const char *const *aliases; /* more model names for /v1/models */
    size_t n_aliases;
    uint64_t max_body_bytes;   /* larger bodies get 413; 0: 32 MiB */
    double shutdown_timeout_s; /* how long running requests may finish; <0: default 10 */
    double ping_interval_s;    /* a ping after this much stream silence; 0: 5 */
    const char *test_script;   /* test only: every output is this text, then end of turn */
    bool no_prefix_cache;      /* every request prefills its whole prompt */
    /* Benchmarks only: no memory governor (the seed's "before": fixed
     * batch_tokens chunks, no admission by memory, no pressure handling);
     * memory_limit is then parsed but not enforced. */
    bool no_governor;
    uint64_t cache_limit_bytes; /* most KV the prefix cache keeps; 0: whatever memory allows */
    /* Behind a balancer (docs/deploy.md). */
    unsigned agent_port;      /* HAProxy agent-check port (agent.c); 0: none */
    double ready_hold_s;      /* /ready's minimum hold (ready.h); <0: default 2 */
    /* > 0: a request not started after this long in the queue is refused
     * (529/503 + Retry-After) before any byte of its response, streams
     * too: a stream's headers wait until it leaves the queue, so a
     * balancer can still send it elsewhere. 0: streams start at once. */
    double queue_max_wait_s;
    unsigned overload_status; /* Anthropic's overload status: 529 (0: default) or 503 */
    /* The engine's device (engine/backend.h): "cpu", "cuda", "cuda:N" or
     * NULL/"auto" (CUDA when present and able to run the model). */
    const char *device;
    uint64_t vram_limit_bytes; /* the device-memory ceiling; 0: the device's total */
};

struct hr_server;

/*
 * Binds the address, loads the model (health answers 503 meanwhile), and
 * starts serving. HR_ERR_IO when the address cannot be bound, the model's
 * errors otherwise; err says which.
 */
enum hr_status hr_server_start(const struct hr_server_config *cfg, struct hr_server **out,
                               struct hr_err *err);

/* Blocks until SIGINT or SIGTERM (which the caller must have blocked in
 * every thread, see hr_server_block_signals), then shuts down as above. */
void hr_server_wait(struct hr_server *srv);

/* Blocks SIGINT, SIGTERM (to be taken by hr_server_wait) and ignores
 * SIGPIPE, for the calling thread and every thread it starts later. Call
 * before hr_server_start. */
void hr_server_block_signals(void);

void hr_server_free(struct hr_server *srv); /* accepts NULL */

#endif
