/*
 * bench-template.c - chat template rendering on a request the size coding
 * agents send.
 *
 *     bench-template SOURCE [--runs N]
 *
 * SOURCE holds the chat template: a GGUF (tokenizer.chat_template), a
 * Hugging Face tokenizer_config.json (chat_template) or a .jinja file;
 * bench/run.sh passes the Qwen 3 one. The request is built here with fixed
 * contents: a 6 KB system prompt, 25 tools whose JSON schemas nest objects
 * and arrays (Claude Code's tool list is of this size), and a multi-turn
 * exchange with tool calls and tool results, about 30 KB of JSON in all.
 * It is rendered N times (default 200) and the median is printed:
 *
 *   bench chat_render impl=headroom template=F request_bytes=B prompt_bytes=P tools=25
 *         messages=M runs=N median_ms=X min_ms=.. max_ms=..
 *   bench template_render impl=headroom ... (the Jinja render alone, context built once)
 *   bench template_init impl=headroom template=F ms=X (parse + probes)
 *
 * chat_render is the whole request path (message normalization, tool
 * conversion, JSON to template values, render); the target is under 5 ms.
 * Single-threaded.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/sys.h"
#include "chat/chat-render.h"
#include "gguf/gguf.h"
#include "bench.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* ---- the request ---- */

static const char *const g_words[] = {
    "the", "agent", "must", "read", "files", "before", "editing", "them", "and", "never",
    "guess", "paths;", "use", "tools", "for", "search,", "tests", "build", "commit",
    "changes", "only", "when", "asked.", "Keep", "answers", "short", "unless", "detail",
    "is", "requested."};

static json_t *schema_props(int tool, int depth)
{
    json_t *props = json_object();
    for (int p = 0; p < 4; p++) {
        char name[32];
        snprintf(name, sizeof(name), "param_%d_%d", tool, p);
        json_t *s = json_object();
        if (p == 2 && depth < 1) {
            json_object_set_new(s, "type", json_string("object"));
            json_object_set_new(s, "description", json_string("Nested options for the call."));
            json_object_set_new(s, "properties", schema_props(tool, depth + 1));
        } else if (p == 3) {
            json_object_set_new(s, "type", json_string("array"));
            json_object_set_new(s, "items", json_pack("{s:s,s:[s,s,s]}", "type", "string",
                                                      "enum", "low", "medium", "high"));
            json_object_set_new(s, "description", json_string("Which levels apply."));
        } else {
            json_object_set_new(s, "type", json_string(p == 1 ? "integer" : "string"));
            json_object_set_new(s, "description",
                                json_string("What the tool needs to know here."));
        }
        json_object_set_new(props, name, s);
    }
    return props;
}

static json_t *make_request(json_t **tools_out)
{
    /* System prompt: ~10 KB of words. */
    size_t cap = 9000, n = 0;
    char *sys = malloc(cap);
    for (int i = 0; n < 6000; i++) {
        const char *w = g_words[i % (sizeof(g_words) / sizeof(g_words[0]))];
        n += (size_t)snprintf(sys + n, cap - n, "%s%s", w, i % 17 == 16 ? "\n" : " ");
    }
    json_t *tools = json_array();
    for (int t = 0; t < 25; t++) {
        char name[32], desc[160];
        snprintf(name, sizeof(name), "tool_%02d", t);
        snprintf(desc, sizeof(desc),
                 "Tool number %d: does one thing well and reports what it did, or why not.", t);
        json_t *params = json_object();
        json_object_set_new(params, "type", json_string("object"));
        json_object_set_new(params, "properties", schema_props(t, 0));
        json_object_set_new(params, "required", json_pack("[s]", "param_0"));
        json_array_append_new(tools, json_pack("{s:s,s:{s:s,s:s,s:o}}", "type", "function",
                                               "function", "name", name, "description", desc,
                                               "parameters", params));
    }
    json_t *msgs = json_array();
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", sys));
    free(sys);
    for (int turn = 0; turn < 5; turn++) {
        char text[400], args[200], result[600], id[32];
        snprintf(text, sizeof(text),
                 "Step %d: please look at src/module_%d.c and fix the failing test in "
                 "tests/test_%d.c; keep the public API unchanged.",
                 turn, turn, turn);
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", text));
        snprintf(id, sizeof(id), "call_%d", turn);
        snprintf(args, sizeof(args), "{\"param_%d_0\": \"src/module_%d.c\", \"param_%d_1\": %d}",
                 turn, turn, turn, 40 + turn);
        char fname[32];
        snprintf(fname, sizeof(fname), "tool_%02d", turn);
        json_array_append_new(
            msgs, json_pack("{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]}", "role", "assistant", "content",
                            "Let me read the file first.", "tool_calls", "id", id, "type",
                            "function", "function", "name", fname, "arguments", args));
        n = 0;
        for (int l = 0; l < 12; l++)
            n += (size_t)snprintf(result + n, sizeof(result) - n, "%4d  int f_%d(void);\n",
                                  l + 1, l);
        json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id",
                                              id, "content", result));
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content",
                                              "Fixed: the loop bound was off by one."));
    }
    *tools_out = tools;
    return msgs;
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench-template SOURCE [--runs N]\n"
                        "  SOURCE: a GGUF, a tokenizer_config.json or a .jinja file\n");
        return 2;
    }
    const char *src_path = argv[1];
    int runs = 200;
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
    if (runs < 1)
        runs = 1;

    struct hr_err err = {{0}};
    struct hr_chat_template *ct = NULL;
    double t0 = hr_now_seconds();
    enum hr_status st;
    if (ends_with(src_path, ".gguf")) {
        struct hr_gguf *g;
        if ((st = hr_gguf_open(src_path, &g, &err)) == HR_OK) {
            t0 = hr_now_seconds();
            st = hr_chat_template_init_from_gguf(g, NULL, &ct, &err);
            hr_gguf_close(g);
        }
    } else {
        size_t len;
        char *text = hr_read_file(src_path, &len);
        if (!text) {
            fprintf(stderr, "bench-template: cannot read %s\n", src_path);
            return 1;
        }
        json_t *cfg = ends_with(src_path, ".json") ? json_loads(text, 0, NULL) : NULL;
        const char *tmpl = cfg ? json_string_value(json_object_get(cfg, "chat_template")) : text;
        if (!tmpl) {
            fprintf(stderr, "bench-template: %s has no string chat_template\n", src_path);
            return 1;
        }
        t0 = hr_now_seconds();
        st = hr_chat_template_init(tmpl, "<s>", "</s>", &ct, &err);
        json_decref(cfg);
        free(text);
    }
    double init_ms = (hr_now_seconds() - t0) * 1e3;
    if (st != HR_OK) {
        fprintf(stderr, "bench-template: %s: %s\n", src_path, err.msg);
        return 1;
    }

    json_t *tools, *msgs = make_request(&tools);
    json_t *whole = json_pack("{s:O,s:O}", "messages", msgs, "tools", tools);
    char *req_text = json_dumps(whole, JSON_COMPACT);
    size_t req_bytes = strlen(req_text);
    free(req_text);
    json_decref(whole);
    struct hr_chat_request req = {.messages = msgs, .tools = tools, .add_generation_prompt = true};

    double *ms = malloc(sizeof(double) * (size_t)runs);
    size_t prompt_bytes = 0;
    for (int pass = 0; pass < 2; pass++) {
        json_t *ctx = NULL;
        if (pass == 1 && hr_chat_build_context(ct, &req, &ctx, &err) != HR_OK) {
            fprintf(stderr, "bench-template: %s\n", err.msg);
            return 1;
        }
        for (int r = -3; r < runs; r++) { /* three warm-up runs */
            char *out;
            size_t n;
            double a = hr_now_seconds();
            st = pass == 0 ? hr_chat_render(ct, &req, &out, &n, &err)
                           : hr_chat_render_context(ct, ctx, &out, &n, &err);
            double b = hr_now_seconds();
            if (st != HR_OK) {
                fprintf(stderr, "bench-template: %s\n", err.msg);
                return 1;
            }
            prompt_bytes = n;
            free(out);
            if (r >= 0)
                ms[r] = (b - a) * 1e3;
        }
        json_decref(ctx);
        bench_sort(ms, (size_t)runs);
        printf("bench %s impl=headroom template=%s request_bytes=%zu prompt_bytes=%zu tools=%zu "
               "messages=%zu runs=%d median_ms=%.3f min_ms=%.3f max_ms=%.3f\n",
               pass == 0 ? "chat_render" : "template_render", src_path, req_bytes, prompt_bytes,
               json_array_size(tools), json_array_size(msgs), runs, ms[runs / 2], ms[0],
               ms[runs - 1]);
    }
    printf("bench template_init impl=headroom template=%s ms=%.2f\n", src_path, init_ms);
    free(ms);
    json_decref(msgs);
    json_decref(tools);
    hr_chat_template_free(ct);
    return 0;
}
