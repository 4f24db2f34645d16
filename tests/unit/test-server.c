/*
 * test-server.c - the HTTP server in-process, on 127.0.0.1 with a free port
 * and a generated model, driven over plain sockets. The real clients (the
 * openai and @anthropic-ai/sdk packages) test the protocol in tests/e2e/;
 * this program exists so that the server's threads (MHD's pool, the engine
 * thread's events, pings, shutdown) run under ThreadSanitizer and ASan.
 *
 * The tests share one server and run in order; the last one shuts it down
 * with SIGTERM while a stream is running. test_behind_a_balancer starts a
 * second one of its own (the agent's thread runs under the sanitizers too).
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "model-gen.h"
#include "server/server-impl.h"
#include "server/server.h"

static char g_model[64];
static struct hr_server *g_srv;
static unsigned g_port;

/* ---- a small HTTP client ---------------------------------------------------- */

struct reply {
    int status;
    char *body; /* malloc'd, NUL-terminated */
    size_t len;
};

static int connect_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        fail_msg("cannot connect to 127.0.0.1:%u", g_port);
    return fd;
}

static void send_request(int fd, const char *method, const char *path, const char *headers,
                         const char *body)
{
    char head[1024];
    const size_t n = body ? strlen(body) : 0;
    int h = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n",
                     method, path, n, headers ? headers : "");
    assert_true(write(fd, head, (size_t)h) == h);
    if (n)
        assert_true(write(fd, body, n) == (ssize_t)n);
}

/* Reads to the end of the connection. Chunked bodies are left as they are:
 * the tests look for strings inside them. */
static struct reply request(const char *method, const char *path, const char *headers,
                            const char *body)
{
    int fd = connect_server();
    send_request(fd, method, path, headers, body);
    struct reply r = {0};
    size_t cap = 4096;
    r.body = malloc(cap);
    for (;;) {
        if (r.len + 1024 > cap)
            r.body = realloc(r.body, cap *= 2);
        const ssize_t k = read(fd, r.body + r.len, cap - r.len - 1);
        if (k <= 0)
            break;
        r.len += (size_t)k;
    }
    close(fd);
    r.body[r.len] = '\0';
    sscanf(r.body, "HTTP/1.1 %d", &r.status);
    return r;
}

/* The JSON document after the headers of a non-chunked reply. */
static json_t *reply_json(const struct reply *r)
{
    const char *b = strstr(r->body, "\r\n\r\n");
    assert_non_null(b);
    json_error_t je;
    json_t *doc = json_loads(b + 4, 0, &je);
    if (!doc)
        fail_msg("reply is not JSON: %s", b + 4);
    return doc;
}

#define KEY "x-api-key: sesame\r\n"

/* A metric's value from /metrics as text into buf; false when absent. */
static bool metric_text(const char *name, char *buf, size_t cap)
{
    struct reply r = request("GET", "/metrics", KEY, NULL);
    assert_int_equal(r.status, 200);
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = strstr(r.body, key);
    if (p)
        snprintf(buf, cap, "%.*s", (int)strcspn(p + strlen(key), "\n"), p + strlen(key));
    free(r.body);
    return p != NULL;
}

static uint64_t metric(const char *name)
{
    char v[64];
    return metric_text(name, v, sizeof(v)) ? strtoull(v, NULL, 10) : UINT64_MAX;
}

/* A metric's value as a float (the seconds counters); -1 when absent. */
static double metric_f(const char *name)
{
    char v[64];
    return metric_text(name, v, sizeof(v)) ? strtod(v, NULL) : -1.0;
}

/* ---- setup ------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    struct hr_gen_params p;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gen_shape("tiny", &p, &err), HR_OK);
    p.arch = "qwen3";
    p.type = HR_GGML_Q8_0;
    p.n_embd = 64;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 96;
    p.n_layer = 2;
    p.n_ctx = 512;
    snprintf(g_model, sizeof(g_model), "/tmp/hr-test-server-%d.gguf", (int)getpid());
    if (hr_gen_model(&p, g_model, &err) != HR_OK)
        fail_msg("%s", err.msg);
    static const char *const aliases[] = {"claude-test"};
    const struct hr_server_config cfg = {.model_path = g_model,
                                         .host = "127.0.0.1",
                                         .port = 0,
                                         .api_key = "sesame",
                                         .n_threads = 2,
                                         .n_ctx = 8192, /* long enough for a stream to outlast a check */
                                         .parallel = 3,
                                         .aliases = aliases,
                                         .n_aliases = 1,
                                         .max_body_bytes = 64 * 1024,
                                         .shutdown_timeout_s = 0.2,
                                         .ping_interval_s = 0.05};
    if (hr_server_start(&cfg, &g_srv, &err) != HR_OK)
        fail_msg("%s", err.msg);
    g_port = g_srv->port;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hr_server_free(g_srv);
    unlink(g_model);
    return 0;
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_routes_and_auth(void **state)
{
    (void)state;
    struct reply r = request("GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "{\"status\":\"ok\"}"));
    free(r.body);
    r = request("GET", "/v1/models", NULL, NULL); /* no key */
    assert_int_equal(r.status, 401);
    assert_non_null(strstr(r.body, "\"authentication_error\""));
    free(r.body);
    r = request("GET", "/v1/models", "Authorization: Bearer sesame\r\n", NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"claude-test\""));
    free(r.body);
    r = request("GET", "/v1/models", "x-api-key: sesamf\r\n", NULL);
    assert_int_equal(r.status, 401);
    free(r.body);
    r = request("GET", "/v2/nothing", KEY, NULL);
    assert_int_equal(r.status, 404);
    free(r.body);
    r = request("GET", "/v1/messages?beta=true", KEY "anthropic-version: 2023-06-01\r\n", NULL);
    assert_int_equal(r.status, 405);
    assert_non_null(strstr(r.body, "Allow: POST"));
    assert_non_null(strstr(r.body, "\"type\":\"error\""));
    free(r.body);
    char big[70 * 1024];
    memset(big, ' ', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    r = request("POST", "/v1/chat/completions", KEY, big);
    assert_int_equal(r.status, 413);
    free(r.body);
}

struct job {
    int index;
    bool stream;
    char content[2048];
    int status;
};

static const char *job_body(const struct job *j, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "{\"model\":\"any\",\"max_tokens\":12,\"temperature\":0,\"stream\":%s,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hello number %d\"}]}",
             j->stream ? "true" : "false", j->index);
    return buf;
}

static void *run_job(void *arg)
{
    struct job *j = arg;
    char body[512];
    struct reply r = request("POST", "/v1/chat/completions", KEY, job_body(j, body, sizeof(body)));
    j->status = r.status;
    if (j->stream) {
        /* The stream ends with [DONE]; its text is checked by the e2e tests. */
        snprintf(j->content, sizeof(j->content), "%s",
                 strstr(r.body, "data: [DONE]") ? "done" : "unfinished");
    } else if (r.status == 200) {
        json_t *doc = reply_json(&r);
        const char *c = json_string_value(
            json_object_get(json_object_get(json_array_get(json_object_get(doc, "choices"), 0),
                                            "message"),
                            "content"));
        snprintf(j->content, sizeof(j->content), "%s", c ? c : "");
        json_decref(doc);
    }
    free(r.body);
    return NULL;
}

/* More clients than slots, streams and documents mixed: everyone finishes,
 * and greedy documents equal what the same request gives alone. */
static void test_concurrent_equals_sequential(void **state)
{
    (void)state;
    enum { N = 8 };
    static struct job alone[N], together[N];
    for (int i = 0; i < N; i++) {
        alone[i] = (struct job){.index = i};
        run_job(&alone[i]);
        assert_int_equal(alone[i].status, 200);
    }
    pthread_t th[2 * N];
    static struct job streams[N];
    for (int i = 0; i < N; i++) {
        together[i] = (struct job){.index = i};
        streams[i] = (struct job){.index = i, .stream = true};
        pthread_create(&th[i], NULL, run_job, &together[i]);
        pthread_create(&th[N + i], NULL, run_job, &streams[i]);
    }
    for (int i = 0; i < 2 * N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        assert_int_equal(together[i].status, 200);
        assert_string_equal(together[i].content, alone[i].content);
        assert_int_equal(streams[i].status, 200);
        assert_string_equal(streams[i].content, "done");
    }
    /* the engine thread's time: in steps, and scheduling them (both ran) */
    assert_true(metric("headroom_engine_steps_total") > 0);
    assert_true(metric_f("headroom_engine_step_seconds_total") > 0.0);
    const double sched = metric_f("headroom_engine_schedule_seconds_total");
    assert_true(sched > 0.0);
    /* ... and by phase, which add up to it (each printed to a microsecond) */
    static const char *const phases[] = {"admit", "fit", "prepare", "bracket", "device",
                                         "account"};
    double sum = 0.0;
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        char name[96];
        snprintf(name, sizeof(name), "headroom_engine_schedule_phase_seconds_total{phase=\"%s\"}",
                 phases[i]);
        const double v = metric_f(name);
        assert_true(v >= 0.0);
        if (i < 2) /* every request was admitted, every step built */
            assert_true(v > 0.0);
        sum += v;
    }
    assert_true(fabs(sum - sched) < 1e-5);
}

/* The dashboard: its page answers without the key (401, the key form), its
 * assets and snapshot only with it; snapshots taken while streams run are
 * whole JSON with columns of one length, polls carry only what is new, and
 * the finished requests show up with their outcome. Under TSan this races
 * the sampler thread, the event callbacks and the snapshot's walk. */
static void test_dashboard(void **state)
{
    (void)state;
    struct reply r = request("GET", "/", NULL, NULL);
    assert_int_equal(r.status, 401);
    assert_non_null(strstr(r.body, "id=\"lock\""));
    assert_non_null(strstr(r.body, "text/html"));
    free(r.body);
    r = request("GET", "/dashboard/snapshot", NULL, NULL);
    assert_int_equal(r.status, 401);
    free(r.body);
    r = request("GET", "/dashboard/app.js", NULL, NULL);
    assert_int_equal(r.status, 401);
    free(r.body);
    r = request("GET", "/dashboard/app.js", KEY, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "headroomDashboard"));
    free(r.body);

    enum { N = 4 };
    static struct job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (struct job){.index = 100 + i, .stream = true};
        pthread_create(&th[i], NULL, run_job, &jobs[i]);
    }
    uint64_t h = 0, d = 0, samples = 0;
    for (int poll = 0; poll < 12; poll++) {
        char path[96];
        snprintf(path, sizeof(path), "/dashboard/snapshot?h=%llu&d=%llu%s", (unsigned long long)h,
                 (unsigned long long)d, poll == 0 ? "&info=1" : "");
        r = request("GET", path, KEY, NULL);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "Server-Timing: snapshot;dur="));
        json_t *doc = reply_json(&r);
        free(r.body);
        const json_t *hist = json_object_get(doc, "history"), *mem = json_object_get(doc, "memory");
        assert_true(json_integer_value(json_object_get(mem, "ceiling")) > 0);
        assert_true(json_integer_value(json_object_get(mem, "current")) > 0);
        const size_t n = (size_t)json_integer_value(json_object_get(hist, "n"));
        assert_int_equal(json_array_size(json_object_get(hist, "t")), n);
        assert_int_equal(json_array_size(json_object_get(hist, "measured")), n);
        const json_t *cats = json_object_get(hist, "categories");
        assert_int_equal(json_array_size(cats), json_array_size(json_object_get(doc, "category_names")));
        for (size_t c = 0; c < json_array_size(cats); c++)
            assert_int_equal(json_array_size(json_array_get(cats, c)), n);
        if (poll == 0) {
            assert_string_equal(json_string_value(json_object_get(json_object_get(doc, "info"), "arch")),
                                "qwen3");
        } else {
            assert_null(json_object_get(doc, "info"));
            assert_true(n <= 4); /* only what is new since the last poll */
        }
        samples += n;
        h = (uint64_t)json_integer_value(json_object_get(hist, "last_seq"));
        d = (uint64_t)json_integer_value(json_object_get(json_object_get(doc, "decisions"), "last_seq"));
        assert_true(json_is_array(json_object_get(doc, "requests")));
        json_decref(doc);
        usleep(60 * 1000);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        assert_string_equal(jobs[i].content, "done");
    }
    assert_true(samples >= 2); /* 12 polls over 0.7 s or more: the sampler runs every 250 ms */
    r = request("GET", "/dashboard/snapshot?h=1000000&d=1000000", KEY, NULL);
    json_t *doc = reply_json(&r);
    free(r.body);
    const json_t *fin = json_object_get(doc, "finished");
    size_t ours = 0;
    for (size_t i = 0; i < json_array_size(fin); i++) {
        const char *o = json_string_value(json_object_get(json_array_get(fin, i), "outcome"));
        if (!strcmp(o, "max tokens") || !strcmp(o, "end of turn"))
            ours++;
    }
    assert_true(ours >= N);
    json_decref(doc);
}

/* A client that goes away mid-stream: its request is cancelled and its KV
 * blocks return to the pool. */
static void test_disconnect_frees_kv(void **state)
{
    (void)state;
    int fd = connect_server();
    send_request(fd, "POST", "/v1/messages", KEY,
                 "{\"model\":\"m\",\"max_tokens\":8000,\"temperature\":0,\"stream\":true,\"messages\":"
                 "[{\"role\":\"user\",\"content\":\"tell me a long story\"}]}");
    char buf[4096];
    size_t got = 0;
    while (got < 1500) { /* message_start and a few deltas */
        const ssize_t k = read(fd, buf, sizeof(buf));
        assert_true(k > 0);
        got += (size_t)k;
    }
    assert_true(metric("headroom_kv_blocks_used") > 0);
    close(fd);
    uint64_t used = UINT64_MAX;
    for (int i = 0; i < 200 && used; i++) {
        usleep(20 * 1000);
        used = metric("headroom_kv_blocks_used");
    }
    assert_int_equal(used, 0);
    assert_int_equal(metric("headroom_requests_cancelled_by_client_total"), 1);
    assert_int_equal(metric("headroom_requests_running"), 0);
}

/* A free TCP port on 127.0.0.1 (bound, read, closed). */
static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t n = sizeof(a);
    assert_true(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                getsockname(fd, (struct sockaddr *)&a, &n) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* The one line an agent-check connection gets. */
static void agent_line(unsigned port, char *buf, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_true(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    size_t n = 0;
    for (ssize_t k; n < cap - 1 && (k = read(fd, buf + n, cap - 1 - n)) > 0;)
        n += (size_t)k;
    buf[n] = '\0';
    close(fd);
}

/* A second server, set up as docs/deploy.md puts one behind HAProxy:
 * /ready without the key, the agent's line, the vllm:* names, and a stream
 * refused in the queue (--queue-max-wait) before any byte of its response,
 * with Anthropic's overload body under --overload-status 503. */
static void test_behind_a_balancer(void **state)
{
    (void)state;
    const unsigned agent = free_port();
    const struct hr_server_config cfg = {.model_path = g_model,
                                         .host = "127.0.0.1",
                                         .api_key = "sesame",
                                         .n_threads = 1,
                                         .n_ctx = 8192,
                                         .parallel = 1,
                                         .max_queue = 4,
                                         .shutdown_timeout_s = 0.2,
                                         .agent_port = agent,
                                         .ready_hold_s = -1,
                                         .queue_max_wait_s = 0.3,
                                         .overload_status = 503};
    struct hr_server *b = NULL;
    struct hr_err err = {{0}};
    if (hr_server_start(&cfg, &b, &err) != HR_OK)
        fail_msg("%s", err.msg);
    const unsigned main_port = g_port;
    g_port = b->port;
    char line[64];
    agent_line(agent, line, sizeof(line));
    assert_string_equal(line, "ready up 100%\n");
    struct reply r = request("GET", "/ready", NULL, NULL); /* no key: a probe */
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "{\"status\":\"ready\"}"));
    free(r.body);
    r = request("GET", "/metrics", KEY, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\nvllm:kv_cache_usage_perc{model_name="));
    assert_non_null(strstr(r.body, "\nvllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\""));
    assert_non_null(strstr(r.body, "\nheadroom_ready 1\n"));
    free(r.body);
    assert_true(metric("headroom_admit_max_prompt_tokens") > 100);

    /* One long stream takes the only slot; a second waits with its headers
     * held and is refused after 0.3 s: a 503 with no SSE in it. */
    static const char *const body =
        "{\"model\":\"m\",\"max_tokens\":8000,\"temperature\":0,\"stream\":true,\"messages\":"
        "[{\"role\":\"user\",\"content\":\"a long story\"}]}";
    int fd = connect_server();
    send_request(fd, "POST", "/v1/messages", KEY, body);
    char buf[4096];
    assert_true(read(fd, buf, sizeof(buf)) > 0); /* it started: its headers came */
    r = request("POST", "/v1/messages", KEY, body);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "overloaded_error"));
    assert_non_null(strstr(r.body, "Retry-After: 2"));
    assert_null(strstr(r.body, "event:"));
    free(r.body);
    close(fd);
    g_port = main_port;
    hr_server_free(b);
}

static void *send_sigterm(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    kill(getpid(), SIGTERM);
    return NULL;
}

/* SIGTERM while a stream runs: the stream gets an error event and ends
 * cleanly, hr_server_wait returns. */
static void test_sigterm_during_stream(void **state)
{
    (void)state;
    int fd = connect_server();
    send_request(fd, "POST", "/v1/messages", KEY,
                 "{\"model\":\"m\",\"max_tokens\":8000,\"temperature\":0,\"stream\":true,\"messages\":"
                 "[{\"role\":\"user\",\"content\":\"again\"}]}");
    pthread_t t;
    pthread_create(&t, NULL, send_sigterm, NULL);
    hr_server_wait(g_srv);
    pthread_join(t, NULL);
    static char all[1 << 20];
    size_t n = 0;
    for (ssize_t k; n < sizeof(all) - 1 && (k = read(fd, all + n, sizeof(all) - 1 - n)) > 0;)
        n += (size_t)k;
    all[n] = '\0';
    close(fd);
    assert_non_null(strstr(all, "event: message_start"));
    assert_true(strstr(all, "event: error") || strstr(all, "event: message_stop"));
    assert_non_null(strstr(all, "\r\n0\r\n\r\n")); /* the chunked body's proper end */
}

int main(void)
{
    hr_server_block_signals();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes_and_auth),
        cmocka_unit_test(test_concurrent_equals_sequential),
        cmocka_unit_test(test_disconnect_frees_kv),
        cmocka_unit_test(test_dashboard),
        cmocka_unit_test(test_behind_a_balancer),
        cmocka_unit_test(test_sigterm_during_stream),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
