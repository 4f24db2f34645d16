/*
 * fuzz-chat-parse.c - libFuzzer target for the streaming output parser
 * (src/chat/chat-parse).
 *
 * Input layout:
 *   byte 0   bits 0-1 the format (generic, hermes, llama3, mistral);
 *            bit 2 tools offered; bit 3 the output starts inside <think>;
 *            bit 4 reasoning off; bit 5 a small max_held_bytes (16..79,
 *            from byte 1), so the cap is reached often; bit 6 the format
 *            is qwen3-coder instead, with tool schemas (TOOLS below) that
 *            type parameters f.s (string), f.n (number), f.b (boolean),
 *            f.o (object) and f.a (no type); with bits 0-1 both set, bit 6
 *            makes it harmony (gpt-oss) instead; bit 7 stream_args (call
 *            begins and argument pieces, qwen3-coder only);
 *   byte 1   the chunking seed (and the cap's low bits);
 *   the rest the model output.
 *
 * The output is parsed whole, one byte at a time, and in chunks whose sizes
 * come from byte 1. Checked (abort() on failure, besides ASan/UBSan):
 *   - the three give the same content, reasoning and calls in order, once
 *     adjacent deltas of one kind are joined (the parser's invariant);
 *   - every delta is non-empty, valid UTF-8 and NUL-terminated;
 *   - every call has a non-empty name, arguments that jansson reads as an
 *     object, and indexes 0, 1, 2...; a streamed call's begin has its index
 *     and name, and its argument pieces concatenate to its arguments;
 *   - with no tools and no reasoning, the content is the input with
 *     invalid UTF-8 replaced, byte for byte.
 *
 * Built with -fsanitize=fuzzer in the fuzz preset; otherwise linked with
 * replay-main.c so `make test` replays tests/fuzz/corpus/chat-parse/ and
 * every kept input in tests/fuzz/crashes/chat-parse/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/rand.h"
#include "chat/chat-parse.h"
#include "tokenizer/unicode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

struct seg {
    enum hr_chat_event_kind kind;
    char *text, *name, *id;
    size_t len;
};

struct result {
    struct seg *v;
    size_t n, cap, n_calls;
    char *pieces; /* the open streamed call's argument pieces, joined */
    size_t n_pieces;
    bool begun;   /* a call begin came and its call has not */
};

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t l;
        if (hr_utf8_next((const uint8_t *)s + i, n - i, &l) != HR_UTF8_OK)
            return false;
        i += l;
    }
    return true;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    check(d != NULL);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static void collect(struct result *r, const struct hr_chat_events *ev)
{
    for (size_t i = 0; i < ev->n; i++) {
        const struct hr_chat_event *e = &ev->ev[i];
        struct seg *last = r->n ? &r->v[r->n - 1] : NULL;
        if (e->kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN) {
            check(!r->begun && e->call_index == r->n_calls && e->name && e->name[0]);
            r->begun = true;
            r->n_pieces = 0;
        } else if (e->kind == HR_CHAT_EVENT_TOOL_ARGS) {
            check(r->begun && e->call_index == r->n_calls);
            r->pieces = realloc(r->pieces, r->n_pieces + e->len + 1);
            check(r->pieces != NULL);
            memcpy(r->pieces + r->n_pieces, e->text, e->len);
            r->n_pieces += e->len;
        } else if (e->kind == HR_CHAT_EVENT_TOOL_CALL) {
            check(e->streamed == r->begun);
            check(!e->streamed ||
                  (r->n_pieces == e->arguments_len && memcmp(r->pieces, e->arguments, r->n_pieces) == 0));
            r->begun = false;
        }
        if (e->kind != HR_CHAT_EVENT_TOOL_CALL && e->kind != HR_CHAT_EVENT_TOOL_CALL_BEGIN) {
            check(e->len > 0 && e->text[e->len] == '\0' && valid_utf8(e->text, e->len));
            if (last && last->kind == e->kind) {
                last->text = realloc(last->text, last->len + e->len + 1);
                check(last->text != NULL);
                memcpy(last->text + last->len, e->text, e->len);
                last->len += e->len;
                continue;
            }
        } else if (e->kind == HR_CHAT_EVENT_TOOL_CALL) {
            check(e->call_index == r->n_calls++);
            check(e->name && e->name[0] && e->arguments && strlen(e->arguments) == e->arguments_len);
            json_t *a = json_loadb(e->arguments, e->arguments_len, JSON_ALLOW_NUL |
                                   JSON_DECODE_INT_AS_REAL, NULL);
            check(a != NULL && json_is_object(a));
            json_decref(a);
        }
        if (r->n == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 8;
            r->v = realloc(r->v, r->cap * sizeof(*r->v));
            check(r->v != NULL);
        }
        struct seg *s = &r->v[r->n++];
        memset(s, 0, sizeof(*s));
        s->kind = e->kind;
        if (e->kind == HR_CHAT_EVENT_TOOL_CALL) {
            s->text = dup_n(e->arguments, e->arguments_len);
            s->len = e->arguments_len;
            s->name = dup_n(e->name, strlen(e->name));
            s->id = e->id ? dup_n(e->id, strlen(e->id)) : NULL;
        } else if (e->kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN) {
            s->text = dup_n("", 0);
            s->name = dup_n(e->name, strlen(e->name));
        } else {
            s->text = dup_n(e->text, e->len);
            s->len = e->len;
        }
    }
}

static void result_free(struct result *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].text);
        free(r->v[i].name);
        free(r->v[i].id);
    }
    free(r->v);
    free(r->pieces);
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_equal(const struct result *a, const struct result *b)
{
    check(a->n == b->n);
    for (size_t i = 0; i < a->n; i++) {
        const struct seg *x = &a->v[i], *y = &b->v[i];
        check(x->kind == y->kind && x->len == y->len && memcmp(x->text, y->text, x->len) == 0);
        check(same_str(x->name, y->name) && same_str(x->id, y->id));
    }
}

/* chunk 0: whole; 1: bytes; otherwise sizes 1..chunk from the seed. */
static struct result parse(const struct hr_chat_parse_opts *o, const char *s, size_t n,
                           size_t chunk, uint64_t seed)
{
    struct hr_chat_parser *p;
    struct hr_err err;
    check(hr_chat_parser_init(o, &p, &err) == HR_OK);
    struct hr_rng rng;
    hr_rng_seed(&rng, seed);
    struct result r = {0};
    struct hr_chat_events ev;
    for (size_t i = 0; i < n;) {
        size_t k = chunk == 0 ? n : chunk == 1 ? 1 : 1 + hr_rng_u64(&rng) % chunk;
        if (k > n - i)
            k = n - i;
        check(hr_chat_parser_feed(p, s + i, k, &ev, &err) == HR_OK);
        collect(&r, &ev);
        i += k;
    }
    check(hr_chat_parser_finish(p, &ev, &err) == HR_OK);
    collect(&r, &ev);
    check(hr_chat_parser_n_calls(p) == r.n_calls && !r.begun);
    hr_chat_parser_free(p);
    return r;
}

/* The input with invalid UTF-8 replaced as the parser documents. */
static char *sanitized(const char *s, size_t n, size_t *out_len)
{
    char *o = malloc(3 * n + 1);
    check(o != NULL);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        if (hr_utf8_next((const uint8_t *)s + i, n - i, &l) == HR_UTF8_OK) {
            memcpy(o + k, s + i, l);
            k += l;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
        }
        i += l;
    }
    *out_len = k;
    return o;
}

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"number\"},"
    "\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},\"a\":{}}}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *tools;
    if (!tools)
        tools = json_loads(TOOLS, 0, NULL); /* kept for the process's life */
    check(tools != NULL);
    if (size < 2)
        return 0;
    unsigned flags = data[0], seed = data[1];
    const char *s = (const char *)data + 2;
    size_t n = size - 2;
    struct hr_chat_parse_opts o = hr_chat_parse_defaults();
    o.format = (enum hr_chat_format)(flags & 3);
    o.tools = flags & 4;
    o.in_reasoning = flags & 8;
    o.reasoning = !(flags & 16);
    if (flags & 32)
        o.max_held_bytes = 16 + (seed & 63);
    if (flags & 64) {
        o.format = (flags & 3) == 3 ? HR_CHAT_FORMAT_HARMONY : HR_CHAT_FORMAT_QWEN3_CODER;
        o.tool_defs = tools;
    }
    o.stream_args = flags & 128;

    struct result whole = parse(&o, s, n, 0, 0);
    struct result bytes = parse(&o, s, n, 1, 0);
    struct result chunks = parse(&o, s, n, 2 + seed % 40, seed);
    check_equal(&whole, &bytes);
    check_equal(&whole, &chunks);

    if (!o.tools && !o.reasoning) {
        size_t len;
        char *want = sanitized(s, n, &len);
        check(len == 0 ? whole.n == 0
                       : whole.n == 1 && whole.v[0].kind == HR_CHAT_EVENT_CONTENT &&
                             whole.v[0].len == len && memcmp(whole.v[0].text, want, len) == 0);
        free(want);
    }
    result_free(&whole);
    result_free(&bytes);
    result_free(&chunks);
    return 0;
}
