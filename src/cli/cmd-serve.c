/*
 * cmd-serve.c - `headroom serve`: flags (each also read from HEADROOM_<FLAG>
 * in the environment, the command line winning), then the server
 * (server/server.h) until SIGINT or SIGTERM.
 *
 * The flags are one table, so --help, the parser and the environment
 * cannot disagree about a flag's name.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/backend.h"
#include "engine/kv-cache.h"
#include "mem/probe.h"
#include "mem/size.h"
#include "server/server.h"

enum kind { STR, UINT, SECONDS, SIZE, ALIAS, FLAG };

struct opt {
    const char *name; /* without the dashes; HEADROOM_<NAME> with '-' as '_' */
    enum kind kind;
    const char *arg, *help;
};

static const struct opt g_opts[] = {
    {"model", STR, "FILE", "the GGUF model to serve (required)"},
    {"host", STR, "ADDR", "address to bind (default 127.0.0.1: this machine only)"},
    {"port", UINT, "N", "port (default 8080; 0 picks a free one and logs it)"},
    {"api-key", STR, "KEY", "require `Authorization: Bearer KEY` or `x-api-key: KEY`"},
    {"ctx", UINT, "N", "context of one request, prompt + output (default: the model's)"},
    {"threads", UINT, "N", "engine threads (default: physical cores)"},
    {"device", STR, "DEV",
     "cpu, cuda or cuda:N (default: cuda when this build has it, a GPU is\n"
     "                             present and it runs the model, else cpu)"},
    {"vram-limit", SIZE, "SIZE",
     "device-memory ceiling on a GPU, e.g. 20G (default: the device's total)"},
    {"parallel", UINT, "N", "requests generating at once (default 4)"},
    {"memory-limit", STR, "SIZE",
     "memory ceiling, e.g. 12G or 80% (default: RAM, cgroup and MemAvailable decide)"},
    {"memory-reserve", STR, "SIZE",
     "memory left to other processes: ceiling <= used + MemAvailable - SIZE (default RAM/32, "
     "256M..2G)"},
    {"max-queue", UINT, "N", "requests waiting for a slot before 529/503 (default 64)"},
    {"queue-timeout", SECONDS, "S", "longest wait for a slot, then 529/503 (default: none)"},
    {"queue-max-wait", SECONDS, "S",
     "behind a balancer: a request still queued after S is refused with\n"
     "                             529/503 before any byte of its response, streams too (their\n"
     "                             headers wait for the start), so the balancer can retry it\n"
     "                             elsewhere (default: none; streams start at once)"},
    {"overload-status", UINT, "N",
     "status of Anthropic's overload answer: 529 (default) or 503, which\n"
     "                             HAProxy's retry-on can retry (the body stays overloaded_error)"},
    {"agent-port", UINT, "N",
     "HAProxy agent-check port: each connection gets `ready up P%`, `drain`\n"
     "                             or `maint` (loading) and is closed (default: none)"},
    {"ready-hold", SECONDS, "S",
     "/ready stays 503 at least S once it turned (default 2)"},
    {"batch-tokens", UINT, "N", "tokens per engine step, decodes + prefill (default 512)"},
    {"cache-type", STR, "TYPE",
     "KV cache type: f16 (default), q8_0 or q4_0 (ggml's blocks, llama.cpp's -ctk/-ctv; "
     "53% / 28% of f16's bytes, so more requests fit; head dim a multiple of 32)"},
    {"no-governor", FLAG, "",
     "BENCHMARKS ONLY: memory is not governed: fixed --batch-tokens\n"
     "                             prefill chunks, no admission or pressure handling by memory\n"
     "                             (the context and the KV pool still limit requests);\n"
     "                             --memory-limit is ignored"},
    {"alias", ALIAS, "NAME", "another model name for /v1/models (repeatable)"},
    {"max-body", SIZE, "SIZE", "largest request body; larger gets 413 (default 32M)"},
    {"http-threads", UINT, "N", "HTTP polling threads (default 4)"},
    {"shutdown-timeout", SECONDS, "S",
     "on SIGTERM, how long running requests may finish before they are cancelled (default 10)"},
    {"no-prefix-cache", FLAG, "",
     "prefill every prompt in full (no reuse of earlier requests' KV)"},
    {"cache-limit", SIZE, "SIZE",
     "most KV memory the prefix cache keeps (default: whatever the memory governor allows)"},
    {"test-script", STR, "TEXT",
     "TESTS ONLY: every output is TEXT, then end of turn (the engine still runs)"},
};
#define N_OPTS (sizeof(g_opts) / sizeof(g_opts[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: headroom serve --model FILE [options]\n\n"
               "Serves the model over the Anthropic Messages API (/v1/messages) and the OpenAI\n"
               "Chat Completions and Completions APIs (/v1/chat/completions, /v1/completions).\n"
               "Every model name in a request is served by this model.\n\noptions:\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        char left[48];
        snprintf(left, sizeof(left), "--%s%s%s", g_opts[i].name, *g_opts[i].arg ? " " : "",
                 g_opts[i].arg);
        fprintf(f, "  %-26s %s\n", left, g_opts[i].help);
    }
    fprintf(f, "\nEach option can also come from the environment: --memory-limit 12G is\n"
               "HEADROOM_MEMORY_LIMIT=12G, --alias is HEADROOM_ALIAS=a,b. The command line wins.\n"
               "Clients: ANTHROPIC_BASE_URL=http://HOST:PORT, OPENAI_BASE_URL=http://HOST:PORT/v1.\n"
               "SIGINT/SIGTERM: stop accepting, let running requests finish, exit 0.\n"
               "Behind a balancer: GET /ready (200, or 503 with draining, memory or queue_full),\n"
               "/metrics with vLLM's names; docs/deploy.md has an HAProxy configuration.\n");
}

struct values {
    const char *v[N_OPTS];
    const char *aliases[64];
    size_t n_aliases;
    char *alias_env; /* HEADROOM_ALIAS, split in place */
};

static int set_value(struct values *vals, size_t i, const char *v, bool from_env)
{
    if (g_opts[i].kind != ALIAS) {
        vals->v[i] = v;
        return 0;
    }
    if (!from_env) {
        if (vals->n_aliases == sizeof(vals->aliases) / sizeof(vals->aliases[0])) {
            fprintf(stderr, "headroom serve: at most 64 --alias names\n");
            return 2;
        }
        vals->aliases[vals->n_aliases++] = v;
        return 0;
    }
    if (!(vals->alias_env = strdup(v)))
        return 1;
    for (char *save = NULL, *t = strtok_r(vals->alias_env, ",", &save); t;
         t = strtok_r(NULL, ",", &save))
        if (*t && vals->n_aliases < sizeof(vals->aliases) / sizeof(vals->aliases[0]))
            vals->aliases[vals->n_aliases++] = t;
    return 0;
}

static bool parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    if (!s || !isdigit((unsigned char)*s))
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

static bool parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    if (!s || !*s)
        return false;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= 0) || v > 1e9)
        return false;
    *out = v;
    return true;
}

int hr_cmd_serve(int argc, char **argv)
{
    struct values vals = {0};
    int rc = 0;
    /* The environment first, so the command line overrides it. */
    for (size_t i = 0; i < N_OPTS && !rc; i++) {
        char env[64] = "HEADROOM_";
        size_t k = strlen(env);
        for (const char *p = g_opts[i].name; *p && k < sizeof(env) - 1; p++)
            env[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        env[k] = '\0';
        const char *v = getenv(env);
        if (v && *v)
            rc = set_value(&vals, i, v, true);
    }
    for (int a = 0; a < argc && !rc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            free(vals.alias_env);
            return 0;
        }
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "headroom serve: unexpected argument '%s'\n", arg);
            rc = 2;
            break;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        const size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        size_t i = 0;
        while (i < N_OPTS && !(strlen(g_opts[i].name) == nlen &&
                               memcmp(g_opts[i].name, name, nlen) == 0))
            i++;
        if (i == N_OPTS) {
            fprintf(stderr, "headroom serve: unknown option '%s' (see --help)\n", arg);
            rc = 2;
            break;
        }
        if (g_opts[i].kind == FLAG) {
            if (eq) {
                fprintf(stderr, "headroom serve: --%s takes no value\n", g_opts[i].name);
                rc = 2;
                break;
            }
            vals.v[i] = "1";
            continue;
        }
        const char *v = eq ? eq + 1 : (a + 1 < argc ? argv[++a] : NULL);
        if (!v) {
            fprintf(stderr, "headroom serve: --%s needs a value (%s)\n", g_opts[i].name,
                    g_opts[i].arg);
            rc = 2;
            break;
        }
        rc = set_value(&vals, i, v, false);
    }

    struct hr_server_config cfg = {.port = 8080, .shutdown_timeout_s = -1, .ready_hold_s = -1,
                                   .kv_type = HR_GGML_F16};
    for (size_t i = 0; i < N_OPTS && !rc; i++) {
        const char *v = vals.v[i];
        if (!v)
            continue;
        const char *n = g_opts[i].name;
        uint32_t u = 0;
        double sec = 0;
        uint64_t bytes = 0;
        struct hr_err err = {{0}};
        bool ok = true;
        switch (g_opts[i].kind) {
        case UINT: ok = parse_u32(v, &u); break;
        case SECONDS: ok = parse_seconds(v, &sec); break;
        case SIZE:
            if (hr_mem_parse_size(v, 0, &bytes, &err) != HR_OK || !bytes) {
                fprintf(stderr, "headroom serve: --%s: %s\n", n,
                        err.msg[0] ? err.msg : "must be above zero");
                rc = 2;
                continue;
            }
            break;
        default: break;
        }
        if (!ok) {
            fprintf(stderr, "headroom serve: --%s: '%s' is not a valid %s\n", n, v,
                    g_opts[i].kind == UINT ? "count" : "number of seconds");
            rc = 2;
            continue;
        }
        if (!strcmp(n, "model"))
            cfg.model_path = v;
        else if (!strcmp(n, "host"))
            cfg.host = v;
        else if (!strcmp(n, "port")) {
            if (u > 65535) {
                fprintf(stderr, "headroom serve: --port %u is above 65535\n", u);
                rc = 2;
            }
            cfg.port = u;
        } else if (!strcmp(n, "api-key"))
            cfg.api_key = v;
        else if (!strcmp(n, "ctx"))
            cfg.n_ctx = u;
        else if (!strcmp(n, "threads"))
            cfg.n_threads = (int)u;
        else if (!strcmp(n, "device")) {
            struct hr_device d;
            if (hr_device_parse(v, &d, &err) != HR_OK) {
                fprintf(stderr, "headroom serve: %s\n", err.msg);
                rc = 2;
            }
            cfg.device = v;
        } else if (!strcmp(n, "vram-limit"))
            cfg.vram_limit_bytes = bytes;
        else if (!strcmp(n, "parallel"))
            cfg.parallel = u;
        else if (!strcmp(n, "memory-limit"))
            cfg.memory_limit = v;
        else if (!strcmp(n, "memory-reserve")) {
            /* 0 is a valid reserve (take everything MemAvailable says), so
             * this is not a SIZE, which must be above zero. */
            struct hr_err e = {{0}};
            if (hr_mem_parse_size(v, hr_mem_ram_total_bytes(), &cfg.memory_reserve_bytes, &e) !=
                HR_OK) {
                fprintf(stderr, "headroom serve: --memory-reserve: %s\n", e.msg);
                rc = 2;
            }
            cfg.has_memory_reserve = true;
        }
        else if (!strcmp(n, "max-queue"))
            cfg.max_queue = u;
        else if (!strcmp(n, "queue-timeout"))
            cfg.queue_timeout_s = sec;
        else if (!strcmp(n, "queue-max-wait"))
            cfg.queue_max_wait_s = sec;
        else if (!strcmp(n, "overload-status")) {
            if (u != 503 && u != 529) {
                fprintf(stderr, "headroom serve: --overload-status %u: must be 503 or 529\n", u);
                rc = 2;
            }
            cfg.overload_status = u;
        } else if (!strcmp(n, "agent-port")) {
            if (u == 0 || u > 65535) {
                fprintf(stderr, "headroom serve: --agent-port %u: must be 1..65535\n", u);
                rc = 2;
            }
            cfg.agent_port = u;
        } else if (!strcmp(n, "ready-hold"))
            cfg.ready_hold_s = sec;
        else if (!strcmp(n, "batch-tokens"))
            cfg.batch_tokens = u;
        else if (!strcmp(n, "cache-type")) {
            /* f32 is for headroom run's exactness tests; the server keeps
             * the types worth serving from. */
            if (hr_kv_type_parse(v, &cfg.kv_type, &err) != HR_OK || cfg.kv_type == HR_GGML_F32) {
                fprintf(stderr, "headroom serve: --cache-type: '%s' is not a cache type (f16, "
                                "q8_0 or q4_0)\n", v);
                rc = 2;
            }
        }
        else if (!strcmp(n, "max-body"))
            cfg.max_body_bytes = bytes;
        else if (!strcmp(n, "http-threads"))
            cfg.http_threads = u;
        else if (!strcmp(n, "shutdown-timeout"))
            cfg.shutdown_timeout_s = sec;
        else if (!strcmp(n, "test-script"))
            cfg.test_script = v;
        else if (!strcmp(n, "no-prefix-cache"))
            cfg.no_prefix_cache = strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0;
        else if (!strcmp(n, "no-governor"))
            cfg.no_governor = strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0;
        else if (!strcmp(n, "cache-limit"))
            cfg.cache_limit_bytes = bytes;
    }
    if (!rc && !cfg.model_path) {
        fprintf(stderr, "headroom serve: --model FILE is required (or HEADROOM_MODEL)\n\n");
        usage(stderr);
        rc = 2;
    }
    if (rc) {
        free(vals.alias_env);
        return rc;
    }
    cfg.aliases = vals.aliases;
    cfg.n_aliases = vals.n_aliases;

    hr_server_block_signals();
    struct hr_server *srv = NULL;
    struct hr_err err = {{0}};
    if (hr_server_start(&cfg, &srv, &err) != HR_OK) {
        fprintf(stderr, "headroom serve: %s\n", err.msg);
        free(vals.alias_env);
        return 1;
    }
    hr_server_wait(srv);
    hr_server_free(srv);
    free(vals.alias_env);
    return 0;
}
