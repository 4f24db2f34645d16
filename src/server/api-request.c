/*
 * api-request.c - hr_api_parse: a request body of the Anthropic Messages,
 * OpenAI Chat Completions or OpenAI Completions API, validated field by
 * field and turned into one struct hr_api_request (see api.h).
 *
 * Both chat APIs end up as OpenAI chat-form messages, the form chat-render.h
 * gives a model's template (what transformers' apply_chat_template sees):
 *
 *   Anthropic                               OpenAI chat form
 *   system (string or text blocks)     ->   one leading {"role":"system"},
 *   + role "system" entries                 top-level text first
 *   user text blocks                   ->   {"role":"user","content":"a\nb"}
 *   user tool_result blocks            ->   {"role":"tool","tool_call_id",...},
 *                                           in block order with the text
 *   assistant text blocks              ->   "content" (null when it only calls)
 *   assistant thinking blocks          ->   "reasoning_content"
 *   assistant tool_use blocks          ->   "tool_calls" [{id, type:"function",
 *                                           function:{name, arguments:"{...}"}}]
 *   tools [{name, description,         ->   [{"type":"function","function":
 *          input_schema}]                    {name, description, parameters}}]
 *
 * Decisions where the APIs leave room, and why:
 *   - This engine is text-only. An image in a user or assistant turn is an
 *     error naming the block: dropping it silently would answer a different
 *     question than the one asked. An image inside a tool_result becomes a
 *     placeholder line instead, because agents (Claude Code's screenshot or
 *     Read tools) put them there without the user choosing to, and failing
 *     the whole conversation for an old tool output would be worse. A
 *     `document` with a text source (or text content blocks) is its text; a
 *     PDF or URL source is an error.
 *   - Anthropic text blocks of one message join with "\n" into a string
 *     (what most templates expect; Gemma-style templates lose nothing they
 *     could use). OpenAI text-part arrays stay arrays of {type, text}, as the
 *     client sent them; chat-render.h joins them for templates that want a
 *     string.
 *   - Separate system texts (the top-level `system`, then each role
 *     "system" message) join with "\n\n" into one leading system message,
 *     because most templates only honour a system message at index 0.
 *   - Anthropic server tools (a `type` other than "custom", e.g.
 *     "web_search_20250305") have no schema to show a model and nothing here
 *     runs them, so they are skipped; their records in assistant turns
 *     (server_tool_use, *_tool_result) are dropped likewise.
 *   - tool_reference blocks (Claude Code's tool search) become the line
 *     "Tool loaded: NAME": deferred tools are offered to the model from the
 *     start here (defer_loading is ignored), so the reference only needs to
 *     say which tool the search found.
 *   - tool_result's is_error is checked but not written: the text Claude
 *     Code sends already says it failed ("<tool_use_error>...").
 *   - Reasoning effort (templates that read `reasoning_effort`, gpt-oss's
 *     harmony): OpenAI's reasoning_effort, Anthropic's output_config.effort,
 *     or else its thinking budget, become one of low/medium/high in the
 *     template kwargs, unless chat_template_kwargs names it (see
 *     effort_level and anthropic_effort).
 *   - JSON null counts as absent for every optional field (some SDKs send
 *     `"temperature": null`).
 *   - Sampling follows the APIs' semantics, not llama.cpp's CLI: temperature
 *     1, no top-k, top-p or min-p unless asked. Penalties look at the last
 *     64 tokens when one is set (penalty_last_n 0 otherwise, so nothing is
 *     tracked for nothing). A request without a seed gets a random one.
 *   - Stop strings: at most 256 per request (beyond OpenAI's 4), each 1 to
 *     1024 bytes. max_tokens above 2^32-1 is clamped (the server caps it to
 *     the context anyway).
 *   - Strings may not contain U+0000 (jansson rejects "\u0000" without
 *     JSON_ALLOW_NUL, and we keep it that way): every string handed on is
 *     then a plain C string, safe for stop matching and templates.
 *
 * Errors name the dotted path of the field at fault ("messages.2.content.0.
 * text: expected a string"): HR_ERR_INVALID for bad JSON, missing fields
 * and unknown values, HR_ERR_TYPE for wrong types, HR_ERR_RANGE for numbers
 * and sizes out of range. Nothing here asserts on input; recursion is
 * bounded by jansson's parse depth (2048).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "server/api.h"

#define MAX_STOP       256
#define MAX_STOP_BYTES 1024
#define PATH_BYTES     160

/* ---- a growable string ---------------------------------------------------- */

struct text {
    char *s;
    size_t len, cap;
    bool any; /* something was added (possibly an empty string) */
};

static enum hr_status text_put(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) return HR_ERR_NOMEM;
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
    return HR_OK;
}

/* Appends `s`, preceded by `sep` when something came before. */
static enum hr_status text_add(struct text *t, const char *s, size_t n, const char *sep)
{
    if (t->any && text_put(t, sep, strlen(sep)) != HR_OK) return HR_ERR_NOMEM;
    t->any = true;
    return text_put(t, s, n);
}

static void text_free(struct text *t)
{
    free(t->s);
    *t = (struct text){0};
}

static json_t *text_json(const struct text *t)
{
    return json_stringn(t->s ? t->s : "", t->len);
}

/* ---- errors and JSON helpers ---------------------------------------------- */

static enum hr_status nomem(struct hr_err *err)
{
    return hr_err_set(err, HR_ERR_NOMEM, "out of memory parsing the request");
}

/*
 * Field paths for error messages: "parent.key" ("key" at the top level) and
 * "parent.N". They are made of our own key names and indexes, at most six
 * deep, so PATH_BYTES is plenty; a longer one would be cut, never overflow.
 * (Joined by hand: snprintf of a PATH_BYTES parent into PATH_BYTES trips
 * -Wformat-truncation at -O2.)
 */
static void path_join(char *out, const char *parent, const char *sep, const char *tail)
{
    const char *parts[3] = {parent, sep, tail};
    size_t k = 0;
    for (int p = 0; p < 3; p++)
        for (const char *c = parts[p]; *c && k + 1 < PATH_BYTES; c++) out[k++] = *c;
    out[k] = '\0';
}

static void path_key(char *out, const char *parent, const char *key)
{
    path_join(out, parent, *parent ? "." : "", key);
}

static void path_index(char *out, const char *parent, size_t i)
{
    char num[24];
    snprintf(num, sizeof(num), "%zu", i);
    path_join(out, parent, ".", num);
}

/* A member, or NULL when absent or JSON null. */
static json_t *member(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* Steals `v`; NOMEM when it is NULL or the insertion fails. */
static enum hr_status set_new(json_t *obj, const char *key, json_t *v, struct hr_err *err)
{
    if (!v || json_object_set_new(obj, key, v) != 0) return nomem(err);
    return HR_OK;
}

static enum hr_status append_new(json_t *arr, json_t *v, struct hr_err *err)
{
    if (!v || json_array_append_new(arr, v) != 0) return nomem(err);
    return HR_OK;
}

/*
 * A string member. Absent: HR_OK with *out NULL, or HR_ERR_INVALID when
 * `required`. Another type: HR_ERR_TYPE naming path.key.
 */
static enum hr_status get_string(const json_t *obj, const char *path, const char *key,
                                 bool required, const json_t **out, struct hr_err *err)
{
    char p[PATH_BYTES];
    const json_t *v = member(obj, key);
    *out = NULL;
    if (!v) {
        if (!required) return HR_OK;
        path_key(p, path, key);
        return hr_err_set(err, HR_ERR_INVALID, "%s: required", p);
    }
    if (!json_is_string(v)) {
        path_key(p, path, key);
        return hr_err_set(err, HR_ERR_TYPE, "%s: expected a string", p);
    }
    *out = v;
    return HR_OK;
}

static enum hr_status get_bool(const json_t *obj, const char *path, const char *key, bool *out,
                               struct hr_err *err)
{
    const json_t *v = member(obj, key);
    if (!v) return HR_OK;
    if (!json_is_boolean(v)) {
        char p[PATH_BYTES];
        path_key(p, path, key);
        return hr_err_set(err, HR_ERR_TYPE, "%s: expected a boolean", p);
    }
    *out = json_is_true(v);
    return HR_OK;
}

/* A number in [lo, hi] (`lo_open`: (lo, hi]); *out untouched when absent. */
static enum hr_status get_number(const json_t *obj, const char *key, double lo, double hi,
                                 bool lo_open, float *out, struct hr_err *err)
{
    const json_t *v = member(obj, key);
    if (!v) return HR_OK;
    if (!json_is_number(v)) return hr_err_set(err, HR_ERR_TYPE, "%s: expected a number", key);
    double x = json_number_value(v);
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return hr_err_set(err, HR_ERR_RANGE, "%s: must be %s %g and at most %g", key,
                          lo_open ? "greater than" : "at least", lo, hi);
    *out = (float)x;
    return HR_OK;
}

/* An integer (or a real with an integral value, as some clients send). */
static bool as_integer(const json_t *v, double *out)
{
    if (json_is_integer(v)) {
        *out = (double)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        if (x == floor(x)) {
            *out = x;
            return true;
        }
    }
    return false;
}

/* max_tokens-style: a positive integer, clamped to UINT32_MAX. */
static enum hr_status get_max_tokens(const json_t *v, const char *key, uint32_t *out,
                                     struct hr_err *err)
{
    double x;
    if (!as_integer(v, &x)) return hr_err_set(err, HR_ERR_TYPE, "%s: expected an integer", key);
    if (x < 1) return hr_err_set(err, HR_ERR_RANGE, "%s: must be a positive integer", key);
    *out = x > (double)UINT32_MAX ? UINT32_MAX : (uint32_t)x;
    return HR_OK;
}

/* ---- JSON text of tool-call arguments -------------------------------------- */

/*
 * Compact JSON of a value, as OpenAI's `function.arguments` string. Not
 * json_dumps: jansson prints reals with 17 significant digits (0.7 becomes
 * 0.69999999999999996), and this text goes back to the model as its own
 * earlier output, so reals are printed in the shortest form that reads back
 * to the same double (as Python's json and JavaScript do).
 */
static enum hr_status dump_value(const json_t *v, struct text *t)
{
    char num[40];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (text_put(t, "{", 1)) return HR_ERR_NOMEM;
        const char *k;
        size_t klen;
        json_t *x;
        bool first = true;
        void *tmp;
        json_object_keylen_foreach_safe((json_t *)v, tmp, k, klen, x)
        {
            json_t *key = json_stringn(k, klen);
            char *ks = key ? json_dumps(key, JSON_ENCODE_ANY) : NULL;
            json_decref(key);
            enum hr_status st = ks ? HR_OK : HR_ERR_NOMEM;
            if (st == HR_OK && !first) st = text_put(t, ",", 1);
            if (st == HR_OK) st = text_put(t, ks, strlen(ks));
            free(ks);
            if (st == HR_OK) st = text_put(t, ":", 1);
            if (st == HR_OK) st = dump_value(x, t);
            if (st != HR_OK) return st;
            first = false;
        }
        return text_put(t, "}", 1);
    }
    case JSON_ARRAY: {
        if (text_put(t, "[", 1)) return HR_ERR_NOMEM;
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if ((i && text_put(t, ",", 1)) || dump_value(x, t)) return HR_ERR_NOMEM;
        }
        return text_put(t, "]", 1);
    }
    case JSON_STRING: {
        char *s = json_dumps(v, JSON_ENCODE_ANY);
        if (!s) return HR_ERR_NOMEM;
        enum hr_status st = text_put(t, s, strlen(s));
        free(s);
        return st;
    }
    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return text_put(t, num, strlen(num));
    case JSON_REAL: {
        double x = json_real_value(v); /* finite: JSON has no inf or nan */
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(num, sizeof(num), "%.*g", prec, x);
            if (strtod(num, NULL) == x) break;
        }
        /* Keep it a real when read back ("1" -> "1.0"), as jansson does. */
        if (!strpbrk(num, ".eE")) strcat(num, ".0");
        return text_put(t, num, strlen(num));
    }
    case JSON_TRUE:
        return text_put(t, "true", 4);
    case JSON_FALSE:
        return text_put(t, "false", 5);
    case JSON_NULL:
        return text_put(t, "null", 4);
    }
    return HR_ERR_INVALID;
}

static json_t *arguments_string(const json_t *v)
{
    struct text t = {0};
    json_t *s = dump_value(v, &t) == HR_OK ? text_json(&t) : NULL;
    text_free(&t);
    return s;
}

/* ---- shared fields ----------------------------------------------------------- */

static uint64_t random_seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof(s), GRND_NONBLOCK) != (ssize_t)sizeof(s)) {
        /* No entropy yet (early boot): the clock is unpredictable enough for sampling. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&s;
    }
    return s;
}

/* `stop` / `stop_sequences`: a string (when `allow_string`) or an array of strings. */
static enum hr_status parse_stop(const json_t *body, const char *key, bool allow_string,
                                 struct hr_api_request *r, struct hr_err *err)
{
    const json_t *v = member(body, key);
    if (!v) return HR_OK;
    size_t n;
    if (json_is_string(v) && allow_string)
        n = 1;
    else if (json_is_array(v))
        n = json_array_size(v);
    else
        return hr_err_set(err, HR_ERR_TYPE, "%s: expected %s", key,
                          allow_string ? "a string or an array of strings" : "an array of strings");
    if (n > MAX_STOP)
        return hr_err_set(err, HR_ERR_RANGE, "%s: at most %d stop strings", key, MAX_STOP);
    if (n == 0) return HR_OK;
    r->stop = calloc(n, sizeof(*r->stop));
    if (!r->stop) return nomem(err);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        char p[PATH_BYTES];
        if (json_is_array(v))
            path_index(p, key, i);
        else
            path_key(p, "", key);
        if (!json_is_string(s)) return hr_err_set(err, HR_ERR_TYPE, "%s: expected a string", p);
        size_t len = json_string_length(s);
        if (len == 0 || len > MAX_STOP_BYTES)
            return hr_err_set(err, HR_ERR_RANGE, "%s: a stop string must be 1 to %d bytes", p,
                              MAX_STOP_BYTES);
        r->stop[i] = strdup(json_string_value(s));
        if (!r->stop[i]) return nomem(err);
        r->n_stop = (uint32_t)(i + 1);
    }
    return HR_OK;
}

/* The sampling defaults every API shares: its semantics, not llama.cpp's CLI. */
static struct hr_sampler_params api_sampling_defaults(void)
{
    struct hr_sampler_params s = hr_sampler_defaults();
    s.temperature = 1.0f;
    s.top_k = 0;
    s.top_p = 1.0f;
    s.min_p = 0.0f;
    s.repeat_penalty = 1.0f;
    s.presence_penalty = 0.0f;
    s.frequency_penalty = 0.0f;
    s.penalty_last_n = 0;
    s.seed = random_seed();
    return s;
}

static enum hr_status parse_top_k(const json_t *body, int32_t *out, struct hr_err *err)
{
    const json_t *v = member(body, "top_k");
    double x;
    if (!v) return HR_OK;
    if (!as_integer(v, &x)) return hr_err_set(err, HR_ERR_TYPE, "top_k: expected an integer");
    if (x < 0) return hr_err_set(err, HR_ERR_RANGE, "top_k: must be 0 (off) or more");
    *out = x > INT32_MAX ? INT32_MAX : (int32_t)x;
    return HR_OK;
}

/* OpenAI's sampling fields (both OpenAI kinds), with llama.cpp's top_k and min_p extensions. */
static enum hr_status parse_openai_sampling(const json_t *body, struct hr_api_request *r,
                                            struct hr_err *err)
{
    struct hr_sampler_params *s = &r->sampling;
    enum hr_status st;
    if ((st = get_number(body, "temperature", 0, 2, false, &s->temperature, err)) ||
        (st = get_number(body, "top_p", 0, 1, true, &s->top_p, err)) ||
        (st = get_number(body, "min_p", 0, 1, false, &s->min_p, err)) ||
        (st = get_number(body, "presence_penalty", -2, 2, false, &s->presence_penalty, err)) ||
        (st = get_number(body, "frequency_penalty", -2, 2, false, &s->frequency_penalty, err)) ||
        (st = parse_top_k(body, &s->top_k, err)))
        return st;
    if (s->presence_penalty != 0.0f || s->frequency_penalty != 0.0f) s->penalty_last_n = 64;
    const json_t *seed = member(body, "seed");
    if (seed) {
        if (!json_is_integer(seed))
            return hr_err_set(err, HR_ERR_TYPE, "seed: expected an integer");
        s->seed = (uint64_t)json_integer_value(seed);
    }
    const json_t *n = member(body, "n");
    double nv;
    if (n && !as_integer(n, &nv)) return hr_err_set(err, HR_ERR_TYPE, "n: expected an integer");
    if (n && nv != 1)
        return hr_err_set(err, HR_ERR_RANGE, "n: only 1 choice per request is supported");
    if ((st = get_bool(body, "", "stream", &r->stream, err))) return st;
    /* llama.cpp server's extension, for benchmarks and tests that need a
     * fixed length from a model that would stop */
    if ((st = get_bool(body, "", "ignore_eos", &r->ignore_eos, err))) return st;
    const json_t *so = member(body, "stream_options");
    if (so) {
        if (!json_is_object(so))
            return hr_err_set(err, HR_ERR_TYPE, "stream_options: expected an object");
        if ((st = get_bool(so, "stream_options", "include_usage", &r->include_usage, err)))
            return st;
    }
    return parse_stop(body, "stop", true, r, err);
}

static enum hr_status parse_model(const json_t *body, struct hr_api_request *r, struct hr_err *err)
{
    const json_t *m;
    enum hr_status st = get_string(body, "", "model", true, &m, err);
    if (st) return st;
    r->model = strdup(json_string_value(m));
    return r->model ? HR_OK : nomem(err);
}

/* Is `name` one of the (OpenAI-form) tools? */
static bool has_tool(const json_t *tools, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        const json_t *n = json_object_get(json_object_get(t, "function"), "name");
        if (json_is_string(n) && !strcmp(json_string_value(n), name)) return true;
    }
    return false;
}

/* After tools and tool_choice: the choice must fit the tools; "none" hides them. */
static enum hr_status settle_tools(struct hr_api_request *r, struct hr_err *err)
{
    if (r->tools && json_array_size(r->tools) == 0) {
        json_decref(r->tools);
        r->tools = NULL;
    }
    if (r->tool_choice == HR_API_TOOL_NAMED &&
        !(r->tools && has_tool(r->tools, r->tool_choice_name)))
        return hr_err_set(err, HR_ERR_INVALID, "tool_choice: no tool named \"%.100s\"",
                          r->tool_choice_name);
    if (r->tool_choice == HR_API_TOOL_REQUIRED && !r->tools)
        return hr_err_set(err, HR_ERR_INVALID,
                          "tool_choice: a tool call is required but no tools "
                          "were given");
    if (r->tool_choice == HR_API_TOOL_NONE && r->tools) {
        json_decref(r->tools);
        r->tools = NULL;
    }
    return HR_OK;
}

/* {"type":"function","function":{name, description?, parameters?}} */
static json_t *openai_tool(const json_t *name, const json_t *desc, const json_t *params)
{
    json_t *fn = json_object(), *tool = json_object();
    if (!fn || !tool) {
        json_decref(fn);
        json_decref(tool);
        return NULL;
    }
    /* `|` not `||`: every step runs, so the last one always takes fn. */
    int bad = json_object_set(fn, "name", (json_t *)name);
    if (desc) bad |= json_object_set(fn, "description", (json_t *)desc);
    if (params) bad |= json_object_set(fn, "parameters", (json_t *)params);
    bad |= json_object_set_new(tool, "type", json_string("function"));
    bad |= json_object_set_new(tool, "function", fn);
    if (bad) {
        json_decref(tool);
        return NULL;
    }
    return tool;
}

/* ---- Anthropic Messages --------------------------------------------------------- */

/* A block's "type" string; its path is "path.type". */
static enum hr_status block_type(const json_t *block, const char *path, const char **out,
                                 struct hr_err *err)
{
    if (!json_is_object(block))
        return hr_err_set(err, HR_ERR_TYPE, "%s: expected a content block object", path);
    const json_t *t;
    enum hr_status st = get_string(block, path, "type", true, &t, err);
    if (st) return st;
    *out = json_string_value(t);
    return HR_OK;
}

static enum hr_status unknown_block(const char *path, const char *type, const char *where,
                                    struct hr_err *err)
{
    return hr_err_set(err, HR_ERR_INVALID, "%s.type: unknown content block type \"%.64s\"%s", path,
                      type, where);
}

/* A `document` block with a text source (or text content blocks), as text. */
static enum hr_status document_text(const json_t *block, const char *path, struct text *t,
                                    const char *sep, struct hr_err *err)
{
    char sp[PATH_BYTES], p[PATH_BYTES];
    const json_t *src = member(block, "source"), *title, *stype;
    enum hr_status st;
    path_key(sp, path, "source");
    if (!json_is_object(src))
        return hr_err_set(err, src ? HR_ERR_TYPE : HR_ERR_INVALID, "%s: %s", sp,
                          src ? "expected an object" : "required");
    if ((st = get_string(block, path, "title", false, &title, err)) ||
        (st = get_string(src, sp, "type", true, &stype, err)))
        return st;
    struct text doc = {0};
    if (title && text_add(&doc, json_string_value(title), json_string_length(title), "")) goto oom;
    if (!strcmp(json_string_value(stype), "text")) {
        const json_t *data;
        if ((st = get_string(src, sp, "data", true, &data, err))) goto fail;
        if (text_add(&doc, json_string_value(data), json_string_length(data), "\n")) goto oom;
    } else if (!strcmp(json_string_value(stype), "content")) {
        const json_t *c = member(src, "content");
        path_key(p, sp, "content");
        if (json_is_string(c)) {
            if (text_add(&doc, json_string_value(c), json_string_length(c), "\n")) goto oom;
        } else if (json_is_array(c)) {
            size_t i;
            const json_t *b;
            json_array_foreach(c, i, b)
            {
                char bp[PATH_BYTES];
                const char *type;
                const json_t *txt;
                path_index(bp, p, i);
                if ((st = block_type(b, bp, &type, err))) goto fail;
                if (strcmp(type, "text")) {
                    st = hr_err_set(err, HR_ERR_INVALID,
                                    "%s.type: only text blocks are supported in a document", bp);
                    goto fail;
                }
                if ((st = get_string(b, bp, "text", true, &txt, err))) goto fail;
                if (text_add(&doc, json_string_value(txt), json_string_length(txt), "\n")) goto oom;
            }
        } else {
            st = hr_err_set(err, c ? HR_ERR_TYPE : HR_ERR_INVALID, "%s: %s", p,
                            c ? "expected a string or an array of text blocks" : "required");
            goto fail;
        }
    } else {
        st = hr_err_set(err, HR_ERR_INVALID,
                        "%s.type: \"%.32s\" documents are not supported (this server is "
                        "text-only; send the text with source type \"text\")",
                        sp, json_string_value(stype));
        goto fail;
    }
    st = text_add(t, doc.s ? doc.s : "", doc.len, sep) ? nomem(err) : HR_OK;
    text_free(&doc);
    return st;
oom:
    st = nomem(err);
fail:
    text_free(&doc);
    return st;
}

/* A tool_result's `content` (string or blocks) as text. */
static enum hr_status tool_result_text(const json_t *block, const char *path, struct text *t,
                                       struct hr_err *err)
{
    char p[PATH_BYTES];
    const json_t *c = member(block, "content");
    path_key(p, path, "content");
    t->any = true; /* an absent content is the empty string */
    if (!c) return HR_OK;
    if (json_is_string(c))
        return text_put(t, json_string_value(c), json_string_length(c)) ? nomem(err) : HR_OK;
    if (!json_is_array(c))
        return hr_err_set(err, HR_ERR_TYPE, "%s: expected a string or an array of blocks", p);
    t->any = false;
    size_t i;
    const json_t *b;
    json_array_foreach(c, i, b)
    {
        char bp[PATH_BYTES];
        const char *type;
        enum hr_status st;
        path_index(bp, p, i);
        if ((st = block_type(b, bp, &type, err))) return st;
        if (!strcmp(type, "text")) {
            const json_t *s;
            if ((st = get_string(b, bp, "text", true, &s, err))) return st;
            if (text_add(t, json_string_value(s), json_string_length(s), "\n")) return nomem(err);
        } else if (!strcmp(type, "tool_reference")) {
            const json_t *name;
            if ((st = get_string(b, bp, "tool_name", true, &name, err))) return st;
            if (text_add(t, "Tool loaded: ", 13, "\n") ||
                text_put(t, json_string_value(name), json_string_length(name)))
                return nomem(err);
        } else if (!strcmp(type, "image")) {
            static const char ph[] = "[image omitted: this server is text-only]";
            if (text_add(t, ph, sizeof(ph) - 1, "\n")) return nomem(err);
        } else if (!strcmp(type, "document")) {
            if ((st = document_text(b, bp, t, "\n", err))) return st;
        } else {
            return unknown_block(bp, type, " in a tool_result", err);
        }
    }
    t->any = true;
    return HR_OK;
}

/* {"role": role, "content": content}; takes `content` in every case. */
static json_t *message(const char *role, json_t *content)
{
    json_t *m = json_object();
    if (!m || !content) {
        json_decref(m);
        json_decref(content);
        return NULL;
    }
    int bad = json_object_set_new(m, "role", json_string(role));
    bad |= json_object_set_new(m, "content", content);
    if (bad) {
        json_decref(m);
        return NULL;
    }
    return m;
}

/* A user turn: text blocks gather into user messages, each tool_result becomes a
 * tool message where it stands. */
static enum hr_status anthropic_user(const json_t *content, const char *path, json_t *msgs,
                                     struct hr_err *err)
{
    char cp[PATH_BYTES];
    path_key(cp, path, "content");
    if (json_is_string(content))
        return append_new(msgs, message("user", json_incref((json_t *)content)), err);
    struct text t = {0};
    bool emitted = false;
    enum hr_status st = HR_OK;
    size_t i;
    const json_t *b;
    json_array_foreach(content, i, b)
    {
        char bp[PATH_BYTES];
        const char *type;
        path_index(bp, cp, i);
        if ((st = block_type(b, bp, &type, err))) goto done;
        if (!strcmp(type, "text")) {
            const json_t *s;
            if ((st = get_string(b, bp, "text", true, &s, err))) goto done;
            if (text_add(&t, json_string_value(s), json_string_length(s), "\n")) {
                st = nomem(err);
                goto done;
            }
        } else if (!strcmp(type, "document")) {
            if ((st = document_text(b, bp, &t, "\n", err))) goto done;
        } else if (!strcmp(type, "tool_result")) {
            const json_t *id;
            bool is_error = false;
            if ((st = get_string(b, bp, "tool_use_id", true, &id, err)) ||
                (st = get_bool(b, bp, "is_error", &is_error, err)))
                goto done;
            /* Text that came before the result stays before it. */
            if (t.any) {
                if ((st = append_new(msgs, message("user", text_json(&t)), err))) goto done;
                text_free(&t);
            }
            struct text r = {0};
            if ((st = tool_result_text(b, bp, &r, err))) {
                text_free(&r);
                goto done;
            }
            json_t *m = message("tool", text_json(&r));
            text_free(&r);
            if (m && (st = set_new(m, "tool_call_id", json_incref((json_t *)id), err))) {
                json_decref(m);
                goto done;
            }
            if ((st = append_new(msgs, m, err))) goto done;
            emitted = true;
        } else if (!strcmp(type, "image")) {
            st = hr_err_set(err, HR_ERR_INVALID,
                            "%s: image blocks are not supported (this server is text-only)", bp);
            goto done;
        } else if (!strcmp(type, "tool_use") || !strcmp(type, "thinking") ||
                   !strcmp(type, "redacted_thinking")) {
            st = hr_err_set(err, HR_ERR_INVALID, "%s.type: \"%s\" blocks belong in assistant turns",
                            bp, type);
            goto done;
        } else {
            st = unknown_block(bp, type, "", err);
            goto done;
        }
    }
    /* Text after the last result, or a turn with no blocks at all (kept, as an empty turn). */
    if (t.any || !emitted) st = append_new(msgs, message("user", text_json(&t)), err);
done:
    text_free(&t);
    return st;
}

/* {id, type:"function", function:{name, arguments}}; takes `arguments` in every case. */
static json_t *tool_call(const json_t *id, const json_t *name, json_t *arguments)
{
    json_t *fn = json_object(), *call = json_object();
    if (!fn || !call || !arguments) {
        json_decref(fn);
        json_decref(call);
        json_decref(arguments);
        return NULL;
    }
    int bad = json_object_set(fn, "name", (json_t *)name);
    bad |= json_object_set_new(fn, "arguments", arguments);
    if (id) bad |= json_object_set(call, "id", (json_t *)id);
    bad |= json_object_set_new(call, "type", json_string("function"));
    bad |= json_object_set_new(call, "function", fn);
    if (bad) {
        json_decref(call);
        return NULL;
    }
    return call;
}

static enum hr_status anthropic_assistant(const json_t *content, const char *path, json_t *msgs,
                                          struct hr_err *err)
{
    char cp[PATH_BYTES];
    path_key(cp, path, "content");
    if (json_is_string(content))
        return append_new(msgs, message("assistant", json_incref((json_t *)content)), err);
    struct text t = {0}, reasoning = {0};
    json_t *calls = json_array();
    enum hr_status st = calls ? HR_OK : nomem(err);
    size_t i;
    const json_t *b;
    json_array_foreach(content, i, b)
    {
        char bp[PATH_BYTES];
        const char *type;
        const json_t *s;
        if (st) break;
        path_index(bp, cp, i);
        if ((st = block_type(b, bp, &type, err))) break;
        if (!strcmp(type, "text")) {
            if (!(st = get_string(b, bp, "text", true, &s, err)) &&
                text_add(&t, json_string_value(s), json_string_length(s), "\n"))
                st = nomem(err);
        } else if (!strcmp(type, "thinking")) {
            if (!(st = get_string(b, bp, "thinking", true, &s, err)) &&
                text_add(&reasoning, json_string_value(s), json_string_length(s), "\n"))
                st = nomem(err);
        } else if (!strcmp(type, "tool_use")) {
            const json_t *id, *name, *input = member(b, "input");
            if ((st = get_string(b, bp, "id", true, &id, err)) ||
                (st = get_string(b, bp, "name", true, &name, err)))
                break;
            if (input && !json_is_object(input)) {
                st = hr_err_set(err, HR_ERR_TYPE, "%s.input: expected an object", bp);
                break;
            }
            json_t *args = input ? arguments_string(input) : json_string("{}");
            st = append_new(calls, tool_call(id, name, args), err);
        } else if (!strcmp(type, "redacted_thinking") || !strcmp(type, "server_tool_use") ||
                   (strlen(type) > 12 && !strcmp(type + strlen(type) - 12, "_tool_result"))) {
            /* Encrypted reasoning and server-tool records: nothing a local model can read. */
        } else if (!strcmp(type, "image") || !strcmp(type, "document") ||
                   !strcmp(type, "tool_result")) {
            st = hr_err_set(err, HR_ERR_INVALID, "%s.type: \"%s\" blocks belong in user turns", bp,
                            type);
        } else {
            st = unknown_block(bp, type, "", err);
        }
    }
    if (st == HR_OK) {
        bool has_calls = json_array_size(calls) > 0;
        json_t *m = message("assistant", t.any       ? text_json(&t)
                                         : has_calls ? json_null()
                                                     : json_string(""));
        if (!m)
            st = nomem(err);
        else if ((reasoning.any &&
                  (st = set_new(m, "reasoning_content", text_json(&reasoning), err))) ||
                 (has_calls && (st = set_new(m, "tool_calls", json_incref(calls), err))))
            json_decref(m);
        else
            st = append_new(msgs, m, err);
    }
    json_decref(calls);
    text_free(&t);
    text_free(&reasoning);
    return st;
}

/* Text of a system string or array of text blocks; billing-header blocks dropped. */
static enum hr_status system_text(const json_t *v, const char *path, struct text *t,
                                  struct hr_err *err)
{
    static const char billing[] = "x-anthropic-billing-header:";
    struct text one = {0};
    enum hr_status st = HR_OK;
    if (json_is_string(v)) {
        if (json_string_length(v) &&
            text_add(&one, json_string_value(v), json_string_length(v), ""))
            st = nomem(err);
    } else if (json_is_array(v)) {
        size_t i;
        const json_t *b;
        json_array_foreach(v, i, b)
        {
            char bp[PATH_BYTES];
            const char *type;
            const json_t *s;
            path_index(bp, path, i);
            if ((st = block_type(b, bp, &type, err))) break;
            if (strcmp(type, "text")) {
                st = hr_err_set(err, HR_ERR_INVALID,
                                "%s.type: only text blocks are allowed in a system prompt", bp);
                break;
            }
            if ((st = get_string(b, bp, "text", true, &s, err))) break;
            if (!strncmp(json_string_value(s), billing, sizeof(billing) - 1))
                continue; /* Claude Code's per-request billing tag, not an instruction */
            if (text_add(&one, json_string_value(s), json_string_length(s), "\n")) {
                st = nomem(err);
                break;
            }
        }
    } else {
        st = hr_err_set(err, HR_ERR_TYPE, "%s: expected a string or an array of text blocks", path);
    }
    if (st == HR_OK && one.len && text_add(t, one.s, one.len, "\n\n")) st = nomem(err);
    text_free(&one);
    return st;
}

static enum hr_status anthropic_messages(const json_t *body, struct hr_api_request *r,
                                         struct hr_err *err)
{
    const json_t *msgs = member(body, "messages");
    if (!msgs) return hr_err_set(err, HR_ERR_INVALID, "messages: required");
    if (!json_is_array(msgs)) return hr_err_set(err, HR_ERR_TYPE, "messages: expected an array");
    if (json_array_size(msgs) == 0)
        return hr_err_set(err, HR_ERR_INVALID, "messages: at least one message is required");
    struct text sys = {0};
    enum hr_status st = HR_OK;
    const json_t *top = member(body, "system");
    if (top && (st = system_text(top, "system", &sys, err))) goto done;
    if (!(r->messages = json_array())) {
        st = nomem(err);
        goto done;
    }
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m)
    {
        char p[PATH_BYTES];
        const json_t *role;
        path_index(p, "messages", i);
        if (!json_is_object(m)) {
            st = hr_err_set(err, HR_ERR_TYPE, "%s: expected an object", p);
            goto done;
        }
        if ((st = get_string(m, p, "role", true, &role, err))) goto done;
        const char *rs = json_string_value(role);
        const json_t *content = member(m, "content");
        if (!content) {
            st = hr_err_set(err, HR_ERR_INVALID, "%s.content: required", p);
            goto done;
        }
        if (!json_is_string(content) && !json_is_array(content)) {
            st = hr_err_set(err, HR_ERR_TYPE,
                            "%s.content: expected a string or an array of content blocks", p);
            goto done;
        }
        char cp[PATH_BYTES];
        path_key(cp, p, "content");
        if (!strcmp(rs, "user"))
            st = anthropic_user(content, p, r->messages, err);
        else if (!strcmp(rs, "assistant"))
            st = anthropic_assistant(content, p, r->messages, err);
        else if (!strcmp(rs, "system"))
            st = system_text(content, cp, &sys, err);
        else
            st = hr_err_set(err, HR_ERR_INVALID,
                            "%s.role: must be \"user\", \"assistant\" or \"system\"", p);
        if (st) goto done;
    }
    if (!sys.any && json_array_size(r->messages) == 0) {
        /* Only empty system entries: nothing for a template to render. */
        st = hr_err_set(err, HR_ERR_INVALID, "messages: only empty system messages");
        goto done;
    }
    if (sys.any) {
        json_t *sm = message("system", text_json(&sys));
        if (!sm || json_array_insert_new(r->messages, 0, sm)) st = nomem(err);
    }
done:
    text_free(&sys);
    return st;
}

static enum hr_status anthropic_tools(const json_t *body, struct hr_api_request *r,
                                      struct hr_err *err)
{
    const json_t *tools = member(body, "tools"), *tc = member(body, "tool_choice");
    enum hr_status st;
    if (tools) {
        if (!json_is_array(tools)) return hr_err_set(err, HR_ERR_TYPE, "tools: expected an array");
        if (!(r->tools = json_array())) return nomem(err);
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t)
        {
            char p[PATH_BYTES];
            const json_t *type, *name, *desc, *schema;
            path_index(p, "tools", i);
            if (!json_is_object(t))
                return hr_err_set(err, HR_ERR_TYPE, "%s: expected an object", p);
            if ((st = get_string(t, p, "type", false, &type, err))) return st;
            if (type && strcmp(json_string_value(type), "custom"))
                continue; /* a server tool (web search, code execution, ...): not run here */
            if ((st = get_string(t, p, "name", true, &name, err)) ||
                (st = get_string(t, p, "description", false, &desc, err)))
                return st;
            schema = member(t, "input_schema");
            if (schema && !json_is_object(schema))
                return hr_err_set(err, HR_ERR_TYPE, "%s.input_schema: expected an object", p);
            if ((st = append_new(r->tools, openai_tool(name, desc, schema), err))) return st;
        }
    }
    if (tc) {
        const json_t *type, *name;
        if (!json_is_object(tc))
            return hr_err_set(err, HR_ERR_TYPE, "tool_choice: expected an object");
        if ((st = get_string(tc, "tool_choice", "type", true, &type, err))) return st;
        const char *ts = json_string_value(type);
        if (!strcmp(ts, "auto"))
            r->tool_choice = HR_API_TOOL_AUTO;
        else if (!strcmp(ts, "any"))
            r->tool_choice = HR_API_TOOL_REQUIRED;
        else if (!strcmp(ts, "none"))
            r->tool_choice = HR_API_TOOL_NONE;
        else if (!strcmp(ts, "tool")) {
            if ((st = get_string(tc, "tool_choice", "name", true, &name, err))) return st;
            r->tool_choice = HR_API_TOOL_NAMED;
            if (!(r->tool_choice_name = strdup(json_string_value(name)))) return nomem(err);
        } else
            return hr_err_set(err, HR_ERR_INVALID,
                              "tool_choice.type: must be \"auto\", \"any\", \"tool\" or \"none\"");
    }
    return settle_tools(r, err);
}

/*
 * Reasoning effort, for templates that read `reasoning_effort` (gpt-oss's
 * harmony template writes "Reasoning: low|medium|high" in its system
 * message; others ignore it). Harmony knows three levels, so the APIs'
 * other words map to the nearest: "none" and "minimal" to low, "xhigh" and
 * "max" to high. An unknown word is an error naming the field.
 */
static enum hr_status effort_level(const char *word, const char *path, const char **out,
                                   struct hr_err *err)
{
    static const struct {
        const char *word, *level;
    } map[] = {{"none", "low"},     {"minimal", "low"}, {"low", "low"},  {"medium", "medium"},
               {"high", "high"},    {"xhigh", "high"},  {"max", "high"}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (!strcmp(word, map[i].word)) {
            *out = map[i].level;
            return HR_OK;
        }
    }
    return hr_err_set(err, HR_ERR_INVALID,
                      "%s: must be \"none\", \"minimal\", \"low\", \"medium\", \"high\", "
                      "\"xhigh\" or \"max\"",
                      path);
}

/* Sets kwargs.reasoning_effort unless the request's template kwargs did. */
static enum hr_status set_effort(struct hr_api_request *r, const char *level, struct hr_err *err)
{
    if (!r->kwargs && !(r->kwargs = json_object())) return nomem(err);
    if (json_object_get(r->kwargs, "reasoning_effort")) return HR_OK;
    return set_new(r->kwargs, "reasoning_effort", json_string(level), err);
}

/*
 * Anthropic's thinking budget as an effort: Claude Code asks 4000 tokens
 * for "think", 10000 for "think hard", 31999 for "ultrathink", so up to
 * 4096 is low, up to 16384 medium, above high; thinking disabled is low
 * (harmony models always reason). output_config.effort, when given, wins.
 */
static enum hr_status anthropic_effort(const json_t *body, struct hr_api_request *r,
                                       struct hr_err *err)
{
    const json_t *oc = member(body, "output_config"), *effort = NULL;
    enum hr_status st;
    if (oc && !json_is_object(oc))
        return hr_err_set(err, HR_ERR_TYPE, "output_config: expected an object");
    if (oc && (st = get_string(oc, "output_config", "effort", false, &effort, err))) return st;
    const char *level = NULL;
    if (effort) {
        if ((st = effort_level(json_string_value(effort), "output_config.effort", &level, err)))
            return st;
    } else {
        const json_t *th = member(body, "thinking");
        const json_t *budget = th ? member(th, "budget_tokens") : NULL;
        double b;
        if (th && !r->thinking)
            level = "low";
        else if (budget && as_integer(budget, &b))
            level = b <= 4096 ? "low" : b <= 16384 ? "medium" : "high";
    }
    return level ? set_effort(r, level, err) : HR_OK;
}

static enum hr_status anthropic_thinking(const json_t *body, struct hr_api_request *r,
                                         struct hr_err *err)
{
    const json_t *th = member(body, "thinking"), *type;
    enum hr_status st;
    if (th) {
        if (!json_is_object(th))
            return hr_err_set(err, HR_ERR_TYPE, "thinking: expected an object");
        if ((st = get_string(th, "thinking", "type", true, &type, err))) return st;
        const char *ts = json_string_value(type);
        /* "adaptive" lets the model decide; a model here decides by its template. */
        if (!strcmp(ts, "enabled") || !strcmp(ts, "adaptive"))
            r->thinking = true;
        else if (strcmp(ts, "disabled"))
            return hr_err_set(err, HR_ERR_INVALID,
                              "thinking.type: must be \"enabled\", \"adaptive\" or \"disabled\"");
        const json_t *budget = member(th, "budget_tokens");
        double b;
        if (budget && !as_integer(budget, &b))
            return hr_err_set(err, HR_ERR_TYPE, "thinking.budget_tokens: expected an integer");
    }
    /* Qwen3-style templates read enable_thinking; the others ignore it. */
    if (!(r->kwargs = json_object())) return nomem(err);
    if ((st = set_new(r->kwargs, "enable_thinking", json_boolean(r->thinking), err))) return st;
    return anthropic_effort(body, r, err);
}

static enum hr_status parse_anthropic(const json_t *body, bool count_tokens,
                                      struct hr_api_request *r, struct hr_err *err)
{
    enum hr_status st;
    if ((st = parse_model(body, r, err)) || (st = anthropic_messages(body, r, err)) ||
        (st = anthropic_tools(body, r, err)) || (st = anthropic_thinking(body, r, err)))
        return st;
    const json_t *meta = member(body, "metadata");
    if (meta && !json_is_object(meta))
        return hr_err_set(err, HR_ERR_TYPE, "metadata: expected an object");
    if (count_tokens)
        return HR_OK; /* nothing will be generated: no max_tokens, sampling or stream */
    const json_t *mt = member(body, "max_tokens");
    if (!mt) return hr_err_set(err, HR_ERR_INVALID, "max_tokens: required");
    struct hr_sampler_params *s = &r->sampling;
    if ((st = get_max_tokens(mt, "max_tokens", &r->max_tokens, err)) ||
        (st = get_number(body, "temperature", 0, 2, false, &s->temperature, err)) ||
        (st = get_number(body, "top_p", 0, 1, true, &s->top_p, err)) ||
        (st = parse_top_k(body, &s->top_k, err)) ||
        (st = get_bool(body, "", "stream", &r->stream, err)))
        return st;
    return parse_stop(body, "stop_sequences", false, r, err);
}

/* ---- OpenAI Chat Completions ---------------------------------------------------- */

/* content: a string, null, or an array of text parts (copied as {type, text}). */
static enum hr_status openai_content(const json_t *c, const char *path, json_t **out,
                                     struct hr_err *err)
{
    char cp[PATH_BYTES];
    path_key(cp, path, "content");
    *out = NULL;
    if (!c) {
        *out = json_null();
        return HR_OK;
    }
    if (json_is_string(c)) {
        *out = json_incref((json_t *)c);
        return HR_OK;
    }
    if (!json_is_array(c))
        return hr_err_set(err, HR_ERR_TYPE, "%s: expected a string or an array of parts", cp);
    json_t *parts = json_array();
    if (!parts) return nomem(err);
    size_t i;
    const json_t *p;
    json_array_foreach(c, i, p)
    {
        char pp[PATH_BYTES];
        const char *type;
        const json_t *text;
        enum hr_status st;
        path_index(pp, cp, i);
        if ((st = block_type(p, pp, &type, err))) goto fail;
        if (strcmp(type, "text")) {
            if (!strcmp(type, "image_url") || !strcmp(type, "input_audio") || !strcmp(type, "file"))
                st = hr_err_set(err, HR_ERR_INVALID,
                                "%s.type: \"%s\" parts are not supported (this server is "
                                "text-only)",
                                pp, type);
            else
                st = hr_err_set(err, HR_ERR_INVALID, "%s.type: unknown content part type \"%.64s\"",
                                pp, type);
            goto fail;
        }
        if ((st = get_string(p, pp, "text", true, &text, err))) goto fail;
        json_t *part = json_object();
        if (!part || json_object_set_new(part, "type", json_string("text")) ||
            json_object_set(part, "text", (json_t *)text)) {
            json_decref(part);
            st = nomem(err);
            goto fail;
        }
        if ((st = append_new(parts, part, err))) goto fail;
        continue;
    fail:
        json_decref(parts);
        return st;
    }
    *out = parts;
    return HR_OK;
}

static enum hr_status openai_tool_calls(const json_t *calls, const char *path, json_t *m,
                                        struct hr_err *err)
{
    char cp[PATH_BYTES];
    path_key(cp, path, "tool_calls");
    if (!json_is_array(calls)) return hr_err_set(err, HR_ERR_TYPE, "%s: expected an array", cp);
    if (json_array_size(calls) == 0) return HR_OK;
    json_t *out = json_array();
    if (!out) return nomem(err);
    enum hr_status st = HR_OK;
    size_t i;
    const json_t *c;
    json_array_foreach(calls, i, c)
    {
        char p[PATH_BYTES], fp[PATH_BYTES];
        const json_t *id, *type, *fn, *name, *args;
        path_index(p, cp, i);
        path_key(fp, p, "function");
        if (!json_is_object(c)) {
            st = hr_err_set(err, HR_ERR_TYPE, "%s: expected an object", p);
            break;
        }
        if ((st = get_string(c, p, "id", false, &id, err)) ||
            (st = get_string(c, p, "type", false, &type, err)))
            break;
        if (type && strcmp(json_string_value(type), "function")) {
            st = hr_err_set(err, HR_ERR_INVALID, "%s.type: must be \"function\"", p);
            break;
        }
        fn = member(c, "function");
        if (!json_is_object(fn)) {
            st = hr_err_set(err, fn ? HR_ERR_TYPE : HR_ERR_INVALID, "%s: %s", fp,
                            fn ? "expected an object" : "required");
            break;
        }
        if ((st = get_string(fn, fp, "name", true, &name, err))) break;
        /* A string as OpenAI sends it; some clients send the object itself. */
        args = member(fn, "arguments");
        json_t *a;
        if (!args)
            a = json_string("{}");
        else if (json_is_string(args))
            a = json_incref((json_t *)args);
        else if (json_is_object(args))
            a = arguments_string(args);
        else {
            st = hr_err_set(err, HR_ERR_TYPE, "%s.arguments: expected a string", fp);
            break;
        }
        if ((st = append_new(out, tool_call(id, name, a), err))) break;
    }
    if (st == HR_OK) return set_new(m, "tool_calls", out, err);
    json_decref(out);
    return st;
}

static enum hr_status openai_message(const json_t *m, const char *p, json_t *msgs,
                                     struct hr_err *err)
{
    const json_t *role, *name, *reasoning, *id;
    enum hr_status st;
    if (!json_is_object(m)) return hr_err_set(err, HR_ERR_TYPE, "%s: expected an object", p);
    if ((st = get_string(m, p, "role", true, &role, err)) ||
        (st = get_string(m, p, "name", false, &name, err)))
        return st;
    const char *rs = json_string_value(role);
    if (!strcmp(rs, "developer"))
        rs = "system"; /* OpenAI's newer name for it; templates know "system" */
    else if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") &&
             strcmp(rs, "tool"))
        return hr_err_set(err, HR_ERR_INVALID,
                          "%s.role: must be \"system\", \"developer\", \"user\", \"assistant\" "
                          "or \"tool\"",
                          p);
    json_t *content;
    if ((st = openai_content(member(m, "content"), p, &content, err))) return st;
    json_t *out = message(rs, content);
    if (!out) return nomem(err);
    if (name && (st = set_new(out, "name", json_incref((json_t *)name), err))) goto fail;
    if (!strcmp(rs, "assistant")) {
        const json_t *calls = member(m, "tool_calls");
        if ((st = get_string(m, p, "reasoning_content", false, &reasoning, err)) ||
            (reasoning &&
             (st = set_new(out, "reasoning_content", json_incref((json_t *)reasoning), err))) ||
            (calls && (st = openai_tool_calls(calls, p, out, err))))
            goto fail;
        /* Null content is the OpenAI form of a turn that only calls tools; an assistant
         * turn without calls says nothing, which templates take as "". */
        if (json_is_null(content) && !json_object_get(out, "tool_calls") &&
            (st = set_new(out, "content", json_string(""), err)))
            goto fail;
    } else if (json_is_null(content) && (st = set_new(out, "content", json_string(""), err))) {
        goto fail;
    }
    if (!strcmp(rs, "tool")) {
        if ((st = get_string(m, p, "tool_call_id", false, &id, err)) ||
            (id && (st = set_new(out, "tool_call_id", json_incref((json_t *)id), err))))
            goto fail;
    }
    return append_new(msgs, out, err);
fail:
    json_decref(out);
    return st;
}

static enum hr_status openai_tools(const json_t *body, struct hr_api_request *r, struct hr_err *err)
{
    const json_t *tools = member(body, "tools"), *tc = member(body, "tool_choice");
    enum hr_status st;
    if (tools) {
        if (!json_is_array(tools)) return hr_err_set(err, HR_ERR_TYPE, "tools: expected an array");
        if (!(r->tools = json_array())) return nomem(err);
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t)
        {
            char p[PATH_BYTES], fp[PATH_BYTES];
            const json_t *type, *fn, *name, *desc, *params;
            path_index(p, "tools", i);
            path_key(fp, p, "function");
            if (!json_is_object(t))
                return hr_err_set(err, HR_ERR_TYPE, "%s: expected an object", p);
            if ((st = get_string(t, p, "type", false, &type, err))) return st;
            if (type && strcmp(json_string_value(type), "function"))
                return hr_err_set(err, HR_ERR_INVALID,
                                  "%s.type: only \"function\" tools are supported", p);
            fn = member(t, "function");
            if (!json_is_object(fn))
                return hr_err_set(err, fn ? HR_ERR_TYPE : HR_ERR_INVALID, "%s: %s", fp,
                                  fn ? "expected an object" : "required");
            if ((st = get_string(fn, fp, "name", true, &name, err)) ||
                (st = get_string(fn, fp, "description", false, &desc, err)))
                return st;
            params = member(fn, "parameters");
            if (params && !json_is_object(params))
                return hr_err_set(err, HR_ERR_TYPE, "%s.parameters: expected an object", fp);
            if ((st = append_new(r->tools, openai_tool(name, desc, params), err))) return st;
        }
    }
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto"))
            r->tool_choice = HR_API_TOOL_AUTO;
        else if (!strcmp(s, "none"))
            r->tool_choice = HR_API_TOOL_NONE;
        else if (!strcmp(s, "required"))
            r->tool_choice = HR_API_TOOL_REQUIRED;
        else
            return hr_err_set(err, HR_ERR_INVALID,
                              "tool_choice: must be \"auto\", \"none\", \"required\" or an object "
                              "naming a function");
    } else if (json_is_object(tc)) {
        /* {type:"function", function:{name}}; the Responses API's {type, name} too. */
        const json_t *fn = member(tc, "function"), *name;
        if (fn && !json_is_object(fn))
            return hr_err_set(err, HR_ERR_TYPE, "tool_choice.function: expected an object");
        st = fn ? get_string(fn, "tool_choice.function", "name", true, &name, err)
                : get_string(tc, "tool_choice", "name", false, &name, err);
        if (st) return st;
        if (!name) return hr_err_set(err, HR_ERR_INVALID, "tool_choice.function: required");
        r->tool_choice = HR_API_TOOL_NAMED;
        if (!(r->tool_choice_name = strdup(json_string_value(name)))) return nomem(err);
    } else if (tc) {
        return hr_err_set(err, HR_ERR_TYPE, "tool_choice: expected a string or an object");
    }
    return settle_tools(r, err);
}

static enum hr_status parse_openai_chat(const json_t *body, struct hr_api_request *r,
                                        struct hr_err *err)
{
    enum hr_status st;
    if ((st = parse_model(body, r, err))) return st;
    const json_t *msgs = member(body, "messages");
    if (!msgs) return hr_err_set(err, HR_ERR_INVALID, "messages: required");
    if (!json_is_array(msgs)) return hr_err_set(err, HR_ERR_TYPE, "messages: expected an array");
    if (json_array_size(msgs) == 0)
        return hr_err_set(err, HR_ERR_INVALID, "messages: at least one message is required");
    if (!(r->messages = json_array())) return nomem(err);
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m)
    {
        char p[PATH_BYTES];
        path_index(p, "messages", i);
        if ((st = openai_message(m, p, r->messages, err))) return st;
    }
    if ((st = openai_tools(body, r, err)) || (st = parse_openai_sampling(body, r, err))) return st;
    /* max_completion_tokens replaced max_tokens; when both come, the newer wins. */
    const json_t *mct = member(body, "max_completion_tokens"), *mt = member(body, "max_tokens");
    if (mct)
        st = get_max_tokens(mct, "max_completion_tokens", &r->max_tokens, err);
    else if (mt)
        st = get_max_tokens(mt, "max_tokens", &r->max_tokens, err);
    if (st) return st;
    const json_t *rf = member(body, "response_format"), *rt;
    if (rf) {
        if (!json_is_object(rf))
            return hr_err_set(err, HR_ERR_TYPE, "response_format: expected an object");
        if ((st = get_string(rf, "response_format", "type", true, &rt, err))) return st;
        const char *ts = json_string_value(rt);
        if (!strcmp(ts, "json_object") || !strcmp(ts, "json_schema"))
            r->json_object = true;
        else if (strcmp(ts, "text"))
            return hr_err_set(err, HR_ERR_INVALID,
                              "response_format.type: must be \"text\", "
                              "\"json_object\" or \"json_schema\"");
    }
    const json_t *kw = member(body, "chat_template_kwargs");
    if (kw) {
        if (!json_is_object(kw))
            return hr_err_set(err, HR_ERR_TYPE, "chat_template_kwargs: expected an object");
        /* chat-render.h refuses these (they are the request itself); say so here, as a 400. */
        static const char *const reserved[] = {"messages", "tools", "documents",
                                               "add_generation_prompt"};
        for (size_t k = 0; k < sizeof(reserved) / sizeof(reserved[0]); k++)
            if (json_object_get(kw, reserved[k]))
                return hr_err_set(err, HR_ERR_INVALID,
                                  "chat_template_kwargs.%s: set by the request, not a template "
                                  "variable",
                                  reserved[k]);
        if (!(r->kwargs = json_deep_copy(kw))) return nomem(err);
    }
    const json_t *effort;
    if ((st = get_string(body, "", "reasoning_effort", false, &effort, err))) return st;
    if (effort) {
        const char *level = NULL;
        if ((st = effort_level(json_string_value(effort), "reasoning_effort", &level, err)) ||
            (st = set_effort(r, level, err)))
            return st;
    }
    const json_t *user;
    return get_string(body, "", "user", false, &user, err);
}

/* ---- OpenAI Completions --------------------------------------------------------- */

static enum hr_status completion_tokens(const json_t *arr, const char *path,
                                        struct hr_api_request *r, struct hr_err *err)
{
    size_t n = json_array_size(arr);
    if (n == 0) return hr_err_set(err, HR_ERR_INVALID, "%s: the prompt is empty", path);
    if (!(r->prompt_tokens = malloc(n * sizeof(*r->prompt_tokens)))) return nomem(err);
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t))
            return hr_err_set(err, HR_ERR_TYPE, "%s.%zu: expected a token id (an integer)", path,
                              i);
        json_int_t id = json_integer_value(t);
        if (id < 0 || id > INT32_MAX)
            return hr_err_set(err, HR_ERR_RANGE,
                              "%s.%zu: token id %" JSON_INTEGER_FORMAT " out of range", path, i,
                              id);
        r->prompt_tokens[i] = (int32_t)id;
    }
    r->n_prompt_tokens = n;
    return HR_OK;
}

static enum hr_status completion_prompt(const json_t *body, struct hr_api_request *r,
                                        struct hr_err *err)
{
    const json_t *p = member(body, "prompt");
    if (!p) return hr_err_set(err, HR_ERR_INVALID, "prompt: required");
    if (json_is_array(p)) {
        size_t n = json_array_size(p);
        const json_t *first = json_array_get(p, 0);
        if (n == 0) return hr_err_set(err, HR_ERR_INVALID, "prompt: the prompt is empty");
        if (json_is_integer(first)) return completion_tokens(p, "prompt", r, err);
        /* Several prompts are a batch with one choice each; one request, one prompt here. */
        if (n > 1) return hr_err_set(err, HR_ERR_INVALID, "prompt: only one prompt per request");
        if (json_is_array(first)) return completion_tokens(first, "prompt.0", r, err);
        if (!json_is_string(first))
            return hr_err_set(err, HR_ERR_TYPE,
                              "prompt.0: expected a string or an array of token ids");
        p = first;
    } else if (!json_is_string(p)) {
        return hr_err_set(err, HR_ERR_TYPE,
                          "prompt: expected a string, an array of strings or of token ids");
    }
    r->prompt_len = json_string_length(p);
    r->prompt = malloc(r->prompt_len + 1);
    if (!r->prompt) return nomem(err);
    memcpy(r->prompt, json_string_value(p), r->prompt_len + 1);
    return HR_OK;
}

static enum hr_status parse_openai_completion(const json_t *body, struct hr_api_request *r,
                                              struct hr_err *err)
{
    enum hr_status st;
    if ((st = parse_model(body, r, err)) || (st = completion_prompt(body, r, err)) ||
        (st = parse_openai_sampling(body, r, err)) ||
        (st = get_bool(body, "", "echo", &r->echo, err)))
        return st;
    const json_t *mt = member(body, "max_tokens");
    r->max_tokens = 16; /* the legacy API's default */
    if (mt && (st = get_max_tokens(mt, "max_tokens", &r->max_tokens, err))) return st;
    const json_t *user;
    return get_string(body, "", "user", false, &user, err);
}

/* ---- entry points ---------------------------------------------------------------- */

enum hr_status hr_api_parse(enum hr_api_kind kind, bool count_tokens, const char *body, size_t len,
                            struct hr_api_request *out, struct hr_err *err)
{
    memset(out, 0, sizeof(*out));
    out->kind = kind;
    json_error_t je;
    /* Duplicate keys are allowed (the last wins), as most JSON readers do. */
    json_t *root = json_loadb(body ? body : "", body ? len : 0, 0, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_null_character)
            return hr_err_set(err, HR_ERR_INVALID,
                              "request body is not valid JSON: strings may not contain \\u0000 "
                              "(line %d, column %d)",
                              je.line, je.column);
        return hr_err_set(err, HR_ERR_INVALID,
                          "request body is not valid JSON: %s (line %d, column %d)", je.text,
                          je.line, je.column);
    }
    enum hr_status st;
    if (!json_is_object(root)) {
        st = hr_err_set(err, HR_ERR_TYPE, "request body: expected a JSON object");
    } else {
        out->sampling = api_sampling_defaults();
        out->tool_choice = HR_API_TOOL_AUTO;
        switch (kind) {
        case HR_API_ANTHROPIC:
            st = parse_anthropic(root, count_tokens, out, err);
            break;
        case HR_API_OPENAI_CHAT:
            st = parse_openai_chat(root, out, err);
            break;
        case HR_API_OPENAI_COMPLETION:
            st = parse_openai_completion(root, out, err);
            break;
        default:
            st = hr_err_set(err, HR_ERR_INVALID, "unknown API kind %d", (int)kind);
            break;
        }
    }
    json_decref(root);
    if (st != HR_OK) {
        hr_api_request_free(out);
        out->kind = kind;
    }
    return st;
}

void hr_api_request_free(struct hr_api_request *r)
{
    if (!r) return;
    free(r->model);
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->kwargs);
    free(r->tool_choice_name);
    free(r->prompt);
    free(r->prompt_tokens);
    for (uint32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    memset(r, 0, sizeof(*r));
}
