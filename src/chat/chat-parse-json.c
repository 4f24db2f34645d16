/*
 * chat-parse-json.c - the JSON side of output parsing: finding where a
 * streamed JSON value ends, and reading complete call JSON.
 *
 * Validation is jansson's (strict RFC 8259, valid UTF-8); jansson also
 * tells us the shape (which members exist, their types, the decoded name).
 * The argument text, though, is cut from the model's own bytes and only
 * stripped of whitespace, because jansson keeps no number text: 0.1 would
 * come back as 0.10000000000000001 and 1e5 as 100000.0. Cutting needs the
 * byte span of a member, which jansson does not record, so a small walker
 * below finds spans in text that jansson has already accepted; it can
 * therefore assume well-formed input and only has to stay in bounds.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat/chat-parse-impl.h"

/* ---- the streaming end finder ---- */

void hr_chat_jscan_init(struct hr_chat_jscan *s)
{
    s->depth = 0;
    s->in_str = s->esc = false;
}

/* Bytes that may appear outside strings in JSON: structure, whitespace, and
 * the characters of numbers and of true/false/null. */
static bool json_bare_byte(unsigned char c)
{
    return strchr(",:{}[] \t\n\r-+.0123456789eEtrufalsn", c) != NULL && c != '\0';
}

enum hr_chat_jscan_result hr_chat_jscan_feed(struct hr_chat_jscan *s, const char *b, size_t n,
                                             size_t *used)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)b[i];
        if (s->in_str) {
            if (s->esc)
                s->esc = false;
            else if (c == '\\')
                s->esc = true;
            else if (c == '"')
                s->in_str = false;
            else if (c < 0x20)
                return HR_CHAT_JSCAN_BAD; /* JSON strings cannot hold raw control bytes */
            continue;
        }
        switch (c) {
        case '"':
            s->in_str = true;
            break;
        case '{':
        case '[':
            if (s->depth == HR_CHAT_PARSE_MAX_DEPTH)
                return HR_CHAT_JSCAN_BAD;
            s->stack[s->depth++] = c;
            break;
        case '}':
        case ']':
            if (s->depth == 0 || s->stack[s->depth - 1] != (c == '}' ? '{' : '['))
                return HR_CHAT_JSCAN_BAD;
            if (--s->depth == 0) {
                *used = i + 1;
                return HR_CHAT_JSCAN_DONE;
            }
            break;
        default:
            if (!json_bare_byte(c) || s->depth == 0)
                return HR_CHAT_JSCAN_BAD;
        }
    }
    *used = n;
    return HR_CHAT_JSCAN_MORE;
}

/* ---- spans in validated text ---- */

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

/* The index just past the value starting at s[i] (after whitespace). */
static size_t skip_value(const char *s, size_t n, size_t i)
{
    i = skip_ws(s, n, i);
    if (i >= n)
        return n;
    if (s[i] == '"') {
        for (i++; i < n; i++) {
            if (s[i] == '\\')
                i++;
            else if (s[i] == '"')
                return i + 1;
        }
        return n;
    }
    if (s[i] == '{' || s[i] == '[') {
        size_t depth = 0;
        bool in_str = false;
        for (; i < n; i++) {
            char c = s[i];
            if (in_str) {
                if (c == '\\')
                    i++;
                else if (c == '"')
                    in_str = false;
            } else if (c == '"') {
                in_str = true;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if ((c == '}' || c == ']') && --depth == 0) {
                return i + 1;
            }
        }
        return n;
    }
    while (i < n && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']')
        i++;
    return i;
}

/* Whether the string token s[a..b) (quotes included) decodes to key. */
static bool key_equals(const char *s, size_t a, size_t b, const char *key)
{
    size_t klen = strlen(key);
    if (b - a < 2)
        return false;
    if (!memchr(s + a, '\\', b - a))
        return b - a - 2 == klen && memcmp(s + a + 1, key, klen) == 0;
    /* An escaped key ("n\u0061me") is rare enough to decode the slow way. */
    json_t *k = json_loadb(s + a, b - a, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    bool eq = k && json_is_string(k) && json_string_length(k) == klen &&
              memcmp(json_string_value(k), key, klen) == 0;
    json_decref(k);
    return eq;
}

/* The span of the last member named key of the object starting at s[at]
 * (jansson keeps the last of duplicate keys too). */
static bool member_span(const char *s, size_t n, size_t at, const char *key, size_t *vs,
                        size_t *ve)
{
    bool found = false;
    size_t i = skip_ws(s, n, at) + 1;
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n || s[i] == '}')
            return found;
        size_t ka = i, kb = skip_value(s, n, i);
        i = skip_ws(s, n, kb) + 1; /* past ':' */
        size_t a = skip_ws(s, n, i), b = skip_value(s, n, a);
        if (key_equals(s, ka, kb, key))
            *vs = a, *ve = b, found = true;
        i = skip_ws(s, n, b);
        if (i < n && s[i] == ',')
            i++;
    }
}

/* The start of element idx of the array starting at s[at]. */
static size_t element_at(const char *s, size_t n, size_t at, size_t idx)
{
    size_t i = skip_ws(s, n, at) + 1;
    for (size_t k = 0; k < idx; k++) {
        i = skip_value(s, n, i);
        i = skip_ws(s, n, i);
        if (i < n && s[i] == ',')
            i++;
    }
    return skip_ws(s, n, i);
}

/* Copies s[0..n) without whitespace outside strings; -1 when out of memory. */
static int compact(const char *s, size_t n, char **out, size_t *out_len)
{
    char *o = malloc(n + 1);
    if (!o)
        return -1;
    size_t k = 0;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (is_ws(c)) {
            continue;
        }
        o[k++] = c;
    }
    o[k] = '\0';
    *out = o;
    *out_len = k;
    return 1;
}

int hr_chat_json_object_compact(const char *s, size_t n, char **out, size_t *out_len)
{
    json_t *v = json_loadb(s, n, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
    bool ok = v && json_is_object(v);
    json_decref(v);
    return ok ? compact(s, n, out, out_len) : 0;
}

int hr_chat_json_value_compact(const char *s, size_t n, char **out, size_t *out_len)
{
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
    bool ok = v != NULL;
    json_decref(v);
    return ok ? compact(s, n, out, out_len) : 0;
}

/* ---- parameter schemas (qwen3-coder) ---- */

static bool type_names(const json_t *type, const char *name)
{
    if (json_is_string(type))
        return strcmp(json_string_value(type), name) == 0;
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t)
    {
        if (json_is_string(t) && strcmp(json_string_value(t), name) == 0)
            return true;
    }
    return false;
}

/* Whether a value of this schema is a string, by llama.cpp's rules
 * (common_schema_info::resolves_to_string, less $ref and format, which are
 * rare in tool parameters; either way such a value is still parsed as JSON
 * and kept as a string when it is not JSON). */
static bool schema_is_string(const json_t *s, int depth)
{
    if (!json_is_object(s) || depth > 16)
        return false;
    if (type_names(json_object_get(s, "type"), "string"))
        return true;
    static const char *const any[] = {"oneOf", "anyOf"};
    for (int k = 0; k < 2; k++) {
        size_t i;
        const json_t *alt;
        json_array_foreach(json_object_get(s, any[k]), i, alt)
        {
            if (schema_is_string(alt, depth + 1))
                return true;
        }
    }
    const json_t *all = json_object_get(s, "allOf");
    if (json_array_size(all) > 0) {
        bool every = true;
        size_t i;
        const json_t *alt;
        json_array_foreach(all, i, alt)
        {
            every = every && schema_is_string(alt, depth + 1);
        }
        if (every)
            return true;
    }
    if (json_is_string(json_object_get(s, "const")))
        return true;
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(s, "enum"), i, e)
    {
        if (json_is_string(e))
            return true;
    }
    return json_object_get(s, "pattern") || json_object_get(s, "minLength") ||
           json_object_get(s, "maxLength");
}

/* Whether the schema, or one of its oneOf/anyOf/allOf branches, names type `t`. */
static bool schema_allows(const json_t *s, const char *t, int depth)
{
    if (!json_is_object(s) || depth > 16)
        return false;
    if (type_names(json_object_get(s, "type"), t))
        return true;
    static const char *const any[] = {"oneOf", "anyOf", "allOf"};
    for (int k = 0; k < 3; k++) {
        size_t i;
        const json_t *alt;
        json_array_foreach(json_object_get(s, any[k]), i, alt)
        {
            if (schema_allows(alt, t, depth + 1))
                return true;
        }
    }
    return false;
}

/* The function object of the tool named fn: OpenAI's "function" member or
 * the bare/Anthropic tool itself; NULL when none is named so. */
static const json_t *tool_function(const json_t *tools, const char *fn)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        const json_t *f = json_object_get(t, "function");
        if (!json_is_object(f))
            f = t;
        const json_t *name = json_object_get(f, "name");
        if (json_is_string(name) && strcmp(json_string_value(name), fn) == 0)
            return f;
    }
    return NULL;
}

bool hr_chat_tool_known(const json_t *tools, const char *fn)
{
    return tool_function(tools, fn) != NULL;
}

unsigned hr_chat_param_kind(const json_t *tools, const char *fn, const char *key)
{
    const json_t *f = tool_function(tools, fn);
    const json_t *params = json_object_get(f, "parameters");
    if (!params)
        params = json_object_get(f, "input_schema");
    const json_t *s = json_object_get(json_object_get(params, "properties"), key);
    if (!json_is_object(s) || schema_is_string(s, 0))
        return HR_CHAT_PARAM_STRING;
    return (schema_allows(s, "boolean", 0) ? HR_CHAT_PARAM_BOOL : 0) |
           (schema_allows(s, "null", 0) ? HR_CHAT_PARAM_NULL : 0);
}

/* ---- call shapes ---- */

struct calls {
    struct hr_chat_call_text *v;
    size_t n, cap;
};

/* A copy of a JSON string value if it is non-empty and holds no NUL; NULL
 * otherwise (*oom tells the two NULLs apart). */
static char *dup_name(json_t *v, bool *oom)
{
    if (!json_is_string(v))
        return NULL;
    size_t len = json_string_length(v);
    const char *s = json_string_value(v);
    if (len == 0 || strlen(s) != len)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *oom = true;
    return d;
}

/* Reads one call from the object o whose text starts at s[at]. Returns 1,
 * 0 when it is not a call, -1 when out of memory. */
static int one_call(struct calls *c, json_t *o, const char *s, size_t n, size_t at,
                    json_t *outer_id)
{
    if (!json_is_object(o))
        return 0;
    json_t *name = json_object_get(o, "name");
    json_t *id = json_object_get(o, "id");
    if (!id)
        id = outer_id;
    if (!name) {
        /* The OpenAI shape: {"type": "function", "function": {...}, "id": ...}. */
        json_t *f = json_object_get(o, "function");
        size_t fa, fb;
        if (!json_is_object(f) || !member_span(s, n, at, "function", &fa, &fb))
            return 0;
        return one_call(c, f, s, n, fa, id);
    }
    const char *key = "arguments";
    json_t *args = json_object_get(o, key);
    if (!args)
        args = json_object_get(o, key = "parameters");

    struct hr_chat_call_text t = {0};
    bool oom = false;
    int r = 1;
    t.name = dup_name(name, &oom);
    if (!t.name) {
        r = oom ? -1 : 0;
        goto fail;
    }
    if (!args || json_is_null(args)) {
        t.args = strdup("{}");
        t.args_len = 2;
        r = t.args ? 1 : -1;
    } else if (json_is_object(args)) {
        size_t a, b;
        r = member_span(s, n, at, key, &a, &b) ? compact(s + a, b - a, &t.args, &t.args_len) : 0;
    } else if (json_is_string(args)) {
        r = hr_chat_json_object_compact(json_string_value(args), json_string_length(args),
                                        &t.args, &t.args_len);
    } else {
        r = 0;
    }
    if (r != 1)
        goto fail;
    if (id) {
        t.id = dup_name(id, &oom);
        if (oom) {
            r = -1;
            goto fail;
        }
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 4;
        struct hr_chat_call_text *v = realloc(c->v, cap * sizeof(*v));
        if (!v) {
            r = -1;
            goto fail;
        }
        c->v = v, c->cap = cap;
    }
    c->v[c->n++] = t;
    return 1;
fail:
    free(t.name);
    free(t.args);
    free(t.id);
    return r;
}

static int array_calls(struct calls *c, json_t *arr, const char *s, size_t n, size_t at)
{
    size_t count = json_array_size(arr);
    if (count == 0)
        return 0;
    for (size_t i = 0; i < count; i++) {
        int r = one_call(c, json_array_get(arr, i), s, n, element_at(s, n, at, i), NULL);
        if (r != 1)
            return r;
    }
    return 1;
}

void hr_chat_call_texts_free(struct hr_chat_call_text *calls, size_t n)
{
    for (size_t i = 0; calls && i < n; i++) {
        free(calls[i].name);
        free(calls[i].args);
        free(calls[i].id);
    }
    free(calls);
}

int hr_chat_json_calls(const char *s, size_t n, struct hr_chat_call_text **out)
{
    *out = NULL;
    json_t *root = json_loadb(s, n, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
    if (!root)
        return 0;
    struct calls c = {0};
    size_t at = skip_ws(s, n, 0), a, b;
    int r = 0;
    json_t *inner;
    if (json_is_array(root)) {
        r = array_calls(&c, root, s, n, at);
    } else if (json_object_get(root, "name") || json_object_get(root, "function")) {
        r = one_call(&c, root, s, n, at, NULL);
    } else if (json_is_array(inner = json_object_get(root, "tool_calls"))) {
        r = member_span(s, n, at, "tool_calls", &a, &b) ? array_calls(&c, inner, s, n, a) : 0;
    } else if (json_is_object(inner = json_object_get(root, "tool_call"))) {
        r = member_span(s, n, at, "tool_call", &a, &b) ? one_call(&c, inner, s, n, a, NULL) : 0;
    }
    json_decref(root);
    if (r != 1) {
        hr_chat_call_texts_free(c.v, c.n);
        return r;
    }
    *out = c.v;
    return (int)c.n;
}
