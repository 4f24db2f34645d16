/*
 * server.c - the HTTP side of `headroom serve`: libmicrohttpd, routing,
 * authentication, and the bridge between the scheduler's events and a
 * connection's bytes. The routes' handlers are in routes.c; the two APIs'
 * JSON in api-*.c.
 *
 * The bridge. A generation (struct hr_gen, server-impl.h) is shared by
 * three owners, counted in `refs`: the exchange (MHD's per-request state,
 * released when the connection's request completes), the streaming
 * response (released when MHD destroys it), and the scheduler (released by
 * the request's last event). Its mutex guards the pending bytes and the
 * `suspended` flag. libmicrohttpd allows MHD_resume_connection only on a
 * suspended connection and never closes one while it is suspended, so the
 * rule is: whoever suspends sets `suspended` under the mutex, whoever
 * resumes clears it under the same mutex. A suspended connection is
 * therefore always alive when an event wants to wake it.
 */
#include <arpa/inet.h>
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sys.h"
#include "server/server-impl.h"

#define DEFAULT_MAX_BODY ((uint64_t)32 << 20)

/* ---- generations ------------------------------------------------------------ */

void hr_gen_wake(struct hr_gen *g)
{
    if (g->suspended && g->conn) {
        g->suspended = false;
        MHD_resume_connection(g->conn);
    }
}

void hr_gen_release(struct hr_gen *g)
{
    pthread_mutex_lock(&g->mu);
    const int left = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (left > 0)
        return;
    struct hr_server *srv = g->srv;
    pthread_mutex_lock(&srv->gens_mu);
    if (g->prev)
        g->prev->next = g->next;
    else
        srv->gens = g->next;
    if (g->next)
        g->next->prev = g->prev;
    srv->n_gens--;
    pthread_cond_broadcast(&srv->gens_cv);
    pthread_mutex_unlock(&srv->gens_mu);
    hr_gen_free(g);
}

/* The connection's side is gone (its request completed or the client left).
 * A generation still running is cancelled: it ends at the next step and its
 * KV is freed. */
static void gen_detach(struct hr_gen *g, bool client_left)
{
    pthread_mutex_lock(&g->mu);
    g->conn = NULL;
    const bool running = g->submitted && !g->done && !g->client_gone;
    if (running && client_left)
        g->client_gone = true; /* the last event logs it, with its counts */
    pthread_mutex_unlock(&g->mu);
    if (running) {
        struct hr_server *srv = g->srv;
        pthread_rwlock_rdlock(&srv->sched_lock);
        if (srv->sched)
            hr_sched_cancel(srv->sched, g->id);
        pthread_rwlock_unlock(&srv->sched_lock);
        if (client_left)
            atomic_fetch_add(&srv->metrics.cancelled_by_client, 1);
    }
    hr_gen_release(g);
}

/* libmicrohttpd asks for the next bytes of a stream. With none pending the
 * connection is suspended until an event or a ping adds some. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct hr_gen *g = cls;
    pthread_mutex_lock(&g->mu);
    const size_t avail = g->out.len - g->out_off;
    if (avail) {
        const size_t n = avail < max ? avail : max;
        memcpy(buf, g->out.data + g->out_off, n);
        g->out_off += n;
        if (g->out_off == g->out.len) {
            g->out_off = 0;
            hr_api_buf_reset(&g->out);
        }
        pthread_mutex_unlock(&g->mu);
        return (ssize_t)n;
    }
    if (g->done) {
        pthread_mutex_unlock(&g->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    g->suspended = true;
    MHD_suspend_connection(g->conn);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static void stream_free(void *cls)
{
    hr_gen_release(cls);
}

/* ---- responses ---------------------------------------------------------------- */

/* Counts a request when its response is queued, before any byte of it can
 * reach the client: a client that reads /metrics right after a response
 * then always sees that response counted. */
static void answered(struct hr_exchange *ex, unsigned status)
{
    ex->status = status;
    hr_metrics_count_request(&ex->srv->metrics, ex->route_id, status);
}

static void add_common_headers(struct hr_exchange *ex, struct MHD_Response *r)
{
    char id[32];
    snprintf(id, sizeof(id), "req_%llu", (unsigned long long)ex->rid);
    MHD_add_response_header(r, ex->api == HR_API_ANTHROPIC ? "request-id" : "x-request-id", id);
}

enum MHD_Result hr_respond(struct hr_exchange *ex, unsigned status, const char *content_type,
                           const char *body, size_t len, unsigned retry_after_s)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (content_type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (retry_after_s) {
        char v[16];
        snprintf(v, sizeof(v), "%u", retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (ex->allow && status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, ex->allow);
    if (ex->server_timing_ms > 0) {
        char v[80];
        snprintf(v, sizeof(v), "%s;dur=%.3f, cpu;dur=%.3f",
                 ex->server_timing_name ? ex->server_timing_name : "snapshot",
                 ex->server_timing_ms, ex->server_cpu_ms);
        MHD_add_response_header(r, "Server-Timing", v);
    }
    add_common_headers(ex, r);
    answered(ex, status);
    const enum MHD_Result ret = MHD_queue_response(ex->conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result hr_respond_json(struct hr_exchange *ex, unsigned status, json_t *doc)
{
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!text) {
        struct hr_api_error e = {.cls = HR_API_ERR_INTERNAL};
        snprintf(e.message, sizeof(e.message), "out of memory");
        return hr_respond_error(ex, &e);
    }
    const enum MHD_Result r = hr_respond(ex, status, "application/json", text, strlen(text), 0);
    free(text);
    return r;
}

enum MHD_Result hr_respond_error(struct hr_exchange *ex, const struct hr_api_error *e)
{
    struct hr_api_buf b = {0};
    const unsigned status = hr_api_error_status_for(ex->api, e->cls, ex->srv->overload_status);
    if (hr_api_error_body(ex->api, e, &b) != HR_OK) {
        hr_api_buf_free(&b);
        return MHD_NO;
    }
    if (e->cls != HR_API_ERR_NOT_FOUND && e->cls != HR_API_ERR_AUTH)
        hr_log_info("server", "request %llu %s %s -> %u: %s", (unsigned long long)ex->rid,
                    ex->method, ex->path, status, e->message);
    const enum MHD_Result r =
        hr_respond(ex, status, "application/json", b.data, b.len, e->retry_after_s);
    hr_api_buf_free(&b);
    return r;
}

enum MHD_Result hr_respond_stream(struct hr_exchange *ex, struct hr_gen *g)
{
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, g, stream_free);
    if (!r) {
        hr_gen_release(g); /* the response's reference */
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    add_common_headers(ex, r);
    answered(ex, 200);
    const enum MHD_Result ret = MHD_queue_response(ex->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* A non-streaming generation: its document (or error) if the last event
 * came, else the connection is suspended until it does; the handler then
 * runs again and lands here once more. */
enum MHD_Result hr_respond_document(struct hr_exchange *ex)
{
    struct hr_gen *g = ex->gen;
    pthread_mutex_lock(&g->mu);
    if (!g->done) {
        g->suspended = true;
        MHD_suspend_connection(ex->conn);
        pthread_mutex_unlock(&g->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&g->mu);
    if (g->failed)
        return hr_respond_error(ex, &g->error);
    return hr_respond(ex, 200, "application/json", g->out.data ? g->out.data : "", g->out.len, 0);
}

enum MHD_Result hr_respond_held_stream(struct hr_exchange *ex)
{
    struct hr_gen *g = ex->gen;
    pthread_mutex_lock(&g->mu);
    if (!g->started && !g->done) {
        g->suspended = true;
        MHD_suspend_connection(ex->conn);
        pthread_mutex_unlock(&g->mu);
        return MHD_YES;
    }
    const bool refused = g->failed; /* refused or cancelled in the queue: no stream */
    g->hold_headers = false;
    pthread_mutex_unlock(&g->mu);
    if (refused) {
        hr_gen_release(g); /* the stream response that never was */
        return hr_respond_error(ex, &g->error);
    }
    return hr_respond_stream(ex, g);
}

/* ---- routing and authentication --------------------------------------------- */

/* Which API's error shape a path speaks: Anthropic's for /v1/messages and
 * for any request carrying anthropic-version, OpenAI's otherwise. */
static enum hr_api_kind api_of(struct MHD_Connection *c, const char *path)
{
    if (strncmp(path, "/v1/messages", 12) == 0 ||
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "anthropic-version"))
        return HR_API_ANTHROPIC;
    if (strcmp(path, "/v1/completions") == 0)
        return HR_API_OPENAI_COMPLETION;
    return HR_API_OPENAI_CHAT;
}

/* Equal strings, in time that depends only on the lengths. */
static bool secret_equal(const char *a, size_t na, const char *b, size_t nb)
{
    unsigned char diff = na != nb;
    const size_t n = na > nb ? na : nb;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)((i < na ? a[i] : 0) ^ (i < nb ? b[i] : 0));
    return diff == 0;
}

static bool authorized(struct hr_server *srv, struct MHD_Connection *c)
{
    const char *key = srv->cfg.api_key;
    if (!key || !*key)
        return true;
    const size_t nk = strlen(key);
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (x && secret_equal(x, strlen(x), key, nk))
        return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (a && strncasecmp(a, "Bearer ", 7) == 0) {
        a += 7;
        while (*a == ' ')
            a++;
        if (secret_equal(a, strlen(a), key, nk))
            return true;
    }
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct hr_server *srv = cls;
    struct hr_exchange *ex = *con_cls;
    if (!ex) {
        /* Headers are in: classify, check the key and the declared size. */
        if (!(ex = calloc(1, sizeof(*ex))))
            return MHD_NO;
        *con_cls = ex;
        ex->srv = srv;
        ex->conn = c;
        ex->t_arrival = hr_now_seconds();
        ex->rid = atomic_fetch_add(&srv->next_rid, 1);
        snprintf(ex->method, sizeof(ex->method), "%s", method);
        const char *q = strchr(url, '?');
        snprintf(ex->path, sizeof(ex->path), "%.*s", (int)(q ? (size_t)(q - url) : strlen(url)),
                 url);
        ex->api = api_of(c, ex->path);
        ex->route = hr_route_find(ex->path, &ex->route_id);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > srv->max_body)
            ex->too_large = true;
        return MHD_YES;
    }
    ex->conn = c;
    if (*upload_data_size) {
        /* Body bytes: keep them up to the limit; beyond it, read and drop
         * the rest so the client gets a clean 413 instead of a reset. */
        const size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (ex->too_large || ex->n_body + n > srv->max_body) {
            ex->too_large = true;
            return MHD_YES;
        }
        if (ex->n_body + n + 1 > ex->cap_body) {
            size_t cap = ex->cap_body ? ex->cap_body : 4096;
            while (cap < ex->n_body + n + 1)
                cap *= 2;
            char *p = realloc(ex->body, cap);
            if (!p)
                return MHD_NO;
            ex->body = p, ex->cap_body = cap;
        }
        memcpy(ex->body + ex->n_body, upload_data, n);
        ex->n_body += n;
        ex->body[ex->n_body] = '\0';
        return MHD_YES;
    }
    if (ex->gen)
        return ex->gen->stream ? hr_respond_held_stream(ex) : hr_respond_document(ex);

    struct hr_api_error e = {0};
    if (ex->too_large) {
        e.cls = HR_API_ERR_TOO_LARGE;
        snprintf(e.message, sizeof(e.message),
                 "request body is larger than the server's limit of %llu bytes (--max-body)",
                 (unsigned long long)srv->max_body);
        return hr_respond_error(ex, &e);
    }
    /* Probes are unauthenticated: liveness (/health) and readiness (/ready). */
    if (ex->route_id != HR_ROUTE_HEALTH && ex->route_id != HR_ROUTE_READY &&
        !authorized(srv, c)) {
        /* A browser cannot send a header when it opens a page, so the
         * dashboard's page answers anyway, as a form asking for the key
         * (401); its script then sends the key with every request it makes.
         * Its assets and data answer only with the key. */
        if (hr_route_answers_locked(ex->route) && strcmp(ex->method, "POST") != 0) {
            ex->locked = true;
            return hr_route_dispatch(ex);
        }
        e.cls = HR_API_ERR_AUTH;
        snprintf(e.message, sizeof(e.message), "invalid x-api-key or Authorization bearer token");
        return hr_respond_error(ex, &e);
    }
    return hr_route_dispatch(ex);
}

/* Called once per request when its response is done or the connection
 * broke: counts it and lets go of the generation. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    struct hr_server *srv = cls;
    struct hr_exchange *ex = *con_cls;
    if (!ex)
        return;
    *con_cls = NULL;
    if (!ex->status) /* never answered: the client left first */
        hr_metrics_count_request(&srv->metrics, ex->route_id, 499);
    if (ex->gen)
        gen_detach(ex->gen, toe != MHD_REQUEST_TERMINATED_COMPLETED_OK &&
                                toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN);
    free(ex->body);
    free(ex);
}

/* ---- pings and departures ------------------------------------------------------ */

/* Whether the client closed a suspended connection. libmicrohttpd does not
 * poll a suspended connection, so it would notice only at the next write;
 * a peek sees the FIN (0) or the reset (an error) now. The connection
 * cannot be closed while it is suspended, so its socket is ours to peek. */
static bool client_closed(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    char b;
    const ssize_t k = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Once a second: streams that have been quiet (waiting in the queue, a long
 * prefill, a pause for memory) get a ping, so clients and proxies keep
 * them open; requests whose client left (streaming or not) are cancelled,
 * so a dead client neither holds KV nor a place in the queue. */
static void *ping_main(void *arg)
{
    struct hr_server *srv = arg;
    enum { MAX_GONE = 64 };
    uint64_t gone[MAX_GONE];
    pthread_mutex_lock(&srv->gens_mu);
    while (!srv->ping_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&srv->ping_cv, &srv->gens_mu, &ts);
        const double now = hr_now_seconds();
        unsigned n_gone = 0;
        for (struct hr_gen *g = srv->gens; g; g = g->next) {
            pthread_mutex_lock(&g->mu);
            if (g->submitted && !g->done && !g->client_gone && g->suspended && g->conn &&
                n_gone < MAX_GONE && client_closed(g->conn)) {
                g->client_gone = true;
                gone[n_gone++] = g->id;
            } else if (g->stream && g->w && !g->done && !g->hold_headers &&
                       now - g->t_last_write >= srv->ping_interval_s) {
                if (hr_api_writer_ping(g->w, &g->out) == HR_OK) {
                    g->t_last_write = now;
                    hr_gen_wake(g);
                }
            }
            pthread_mutex_unlock(&g->mu);
        }
        if (!n_gone)
            continue;
        /* Cancel outside the list lock: the events that follow take a
         * request's mutex, never the list's, but keep the locks apart. */
        pthread_mutex_unlock(&srv->gens_mu);
        pthread_rwlock_rdlock(&srv->sched_lock);
        for (unsigned i = 0; i < n_gone && srv->sched; i++)
            hr_sched_cancel(srv->sched, gone[i]);
        pthread_rwlock_unlock(&srv->sched_lock);
        atomic_fetch_add(&srv->metrics.cancelled_by_client, n_gone);
        pthread_mutex_lock(&srv->gens_mu);
    }
    pthread_mutex_unlock(&srv->gens_mu);
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------- */

void hr_server_block_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == ' '))
        line[--n] = '\0';
    /* A client closing mid-response is routine here (the server logs the
     * cancellation itself); anything else from libmicrohttpd is worth a warning. */
    if (strstr(line, "Failed to send") || strstr(line, "closed by remote peer"))
        hr_log_debug("http", "%s", line);
    else
        hr_log_warn("http", "%s", line);
}

static enum hr_status bind_addr(const char *host, unsigned port, struct sockaddr_storage *ss,
                                bool *v6, struct hr_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%u", port);
    const int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0 || !res)
        return hr_err_set(err, HR_ERR_INVALID, "--host %s: %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return HR_OK;
}

enum hr_status hr_server_start(const struct hr_server_config *cfg, struct hr_server **out,
                               struct hr_err *err)
{
#ifdef __GLIBC__
    /* Per-request buffers of vocabulary size (the sampler's ~2 MB for a
     * 150K vocabulary) are allocated at submit and freed at the end. glibc
     * raises its mmap threshold after such frees and then keeps the memory
     * in its heap, so RSS would settle at the largest number of requests
     * ever queued at once. A fixed threshold keeps them mmap'd: freed
     * memory goes back to the OS with the request. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
    struct hr_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    srv->cfg = *cfg;
    if (!srv->cfg.host)
        srv->cfg.host = "127.0.0.1";
    srv->max_body = cfg->max_body_bytes ? cfg->max_body_bytes : DEFAULT_MAX_BODY;
    srv->ping_interval_s = cfg->ping_interval_s > 0 ? cfg->ping_interval_s : 5.0;
    srv->created = (int64_t)time(NULL);
    atomic_init(&srv->state, HR_SERVER_LOADING);
    atomic_init(&srv->next_rid, 1);
    pthread_mutex_init(&srv->gens_mu, NULL);
    pthread_rwlock_init(&srv->sched_lock, NULL);
    pthread_cond_init(&srv->gens_cv, NULL);
    pthread_cond_init(&srv->ping_cv, NULL);
    hr_metrics_init(&srv->metrics);
    hr_ready_init(&srv->ready, cfg->ready_hold_s, hr_now_seconds());
    srv->overload_status = cfg->overload_status ? cfg->overload_status : 529;
    srv->agent_fd = -1;
    srv->agent_stop_pipe[0] = srv->agent_stop_pipe[1] = -1;
    hr_rng_seed(&srv->rng, (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));

    struct sockaddr_storage ss;
    bool v6 = false;
    enum hr_status st = bind_addr(srv->cfg.host, cfg->port, &ss, &v6, err);
    if (st != HR_OK) {
        hr_server_free(srv);
        return st;
    }
    const unsigned pool = cfg->http_threads ? cfg->http_threads : 4;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (v6)
        flags |= MHD_USE_IPv6;
    srv->mhd = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE,
        pool, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)600, MHD_OPTION_END);
    if (!srv->mhd) {
        st = hr_err_set(err, HR_ERR_IO, "cannot listen on %s:%u: %s", srv->cfg.host, cfg->port,
                        strerror(errno ? errno : EADDRINUSE));
        hr_server_free(srv);
        return st;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : cfg->port;
    hr_log_info("server", "bound %s:%u; loading %s", srv->cfg.host, srv->port, cfg->model_path);
    if (cfg->agent_port && (st = hr_agent_start(srv, err)) != HR_OK) {
        hr_server_free(srv);
        return st;
    }

    if ((st = hr_server_load(srv, err)) != HR_OK || (st = hr_dash_start(srv, err)) != HR_OK) {
        hr_server_free(srv);
        return st;
    }
    if (pthread_create(&srv->ping_thread, NULL, ping_main, srv) != 0) {
        hr_server_free(srv);
        return hr_err_set(err, HR_ERR_NOMEM, "cannot start the ping thread");
    }
    srv->ping_started = true;
    atomic_store(&srv->state, HR_SERVER_READY);
    const char *h = srv->cfg.host;
    const bool bracket = strchr(h, ':') != NULL;
    hr_log_info("server", "listening on http://%s%s%s:%u", bracket ? "[" : "", h,
                bracket ? "]" : "", srv->port);
    hr_log_info("server",
                "Anthropic: ANTHROPIC_BASE_URL=http://%s%s%s:%u   OpenAI: "
                "OPENAI_BASE_URL=http://%s%s%s:%u/v1",
                bracket ? "[" : "", h, bracket ? "]" : "", srv->port, bracket ? "[" : "", h,
                bracket ? "]" : "", srv->port);
    *out = srv;
    return HR_OK;
}

void hr_server_wait(struct hr_server *srv)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    hr_log_info("server", "%s: shutting down (no new connections)",
                sig == SIGINT ? "SIGINT" : "SIGTERM");
    atomic_store(&srv->state, HR_SERVER_STOPPING);
    (void)hr_server_ready(srv, NULL); /* logs the change now, not at the next probe */
    const MHD_socket lsock = MHD_quiesce_daemon(srv->mhd);
    if (lsock != MHD_INVALID_SOCKET)
        close(lsock);

    /* Running requests may finish; a second signal cuts the wait short. */
    const double grace = srv->cfg.shutdown_timeout_s >= 0 ? srv->cfg.shutdown_timeout_s : 10.0;
    const double until = hr_now_seconds() + grace;
    for (;;) {
        struct hr_sched_stats s;
        hr_sched_stats(srv->sched, &s);
        if (!s.running && !s.queued)
            break;
        if (hr_now_seconds() >= until) {
            hr_log_info("server", "cancelling %u running and %u waiting requests", s.running,
                        s.queued);
            break;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        sigset_t pending;
        nanosleep(&ts, NULL);
        if (sigpending(&pending) == 0 &&
            (sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM))) {
            sigwait(&set, &sig);
            hr_log_info("server", "second signal: cancelling now");
            break;
        }
    }
    /* Cancels what is left: every generation gets its last event, which
     * resumes its connection, so none stays suspended. */
    pthread_rwlock_wrlock(&srv->sched_lock);
    struct hr_sched *s = srv->sched;
    srv->sched = NULL;
    pthread_rwlock_unlock(&srv->sched_lock);
    hr_sched_free(s);

    /* Every connection sends its last bytes (bounded: a client that stops
     * reading does not hold the process). */
    pthread_mutex_lock(&srv->gens_mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    while (srv->n_gens && pthread_cond_timedwait(&srv->gens_cv, &srv->gens_mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&srv->gens_mu);
    hr_log_info("server", "stopped");
}

void hr_server_free(struct hr_server *srv)
{
    if (!srv)
        return;
    hr_dash_stop(&srv->dash); /* its thread reads the governor and the scheduler: first */
    hr_agent_stop(srv);       /* so does the agent's */
    if (srv->ping_started) {
        pthread_mutex_lock(&srv->gens_mu);
        srv->ping_stop = true;
        pthread_cond_broadcast(&srv->ping_cv);
        pthread_mutex_unlock(&srv->gens_mu);
        pthread_join(srv->ping_thread, NULL);
    }
    pthread_rwlock_wrlock(&srv->sched_lock);
    struct hr_sched *s = srv->sched;
    srv->sched = NULL;
    pthread_rwlock_unlock(&srv->sched_lock);
    hr_sched_free(s);
    if (srv->mhd)
        MHD_stop_daemon(srv->mhd);
    hr_dash_free(&srv->dash); /* no HTTP thread can ask for a snapshot now */
    hr_server_unload(srv);
    hr_ready_free(&srv->ready);
    pthread_mutex_destroy(&srv->gens_mu);
    pthread_rwlock_destroy(&srv->sched_lock);
    pthread_cond_destroy(&srv->gens_cv);
    pthread_cond_destroy(&srv->ping_cv);
    free(srv);
}
