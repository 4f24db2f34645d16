/*
 * test-chat-parse.c - src/chat/chat-parse: recorded model-style outputs in
 * every tool-call format, with reasoning, malformed calls and awkward text.
 *
 * Every output goes through the parser several ways: whole, one byte at a
 * time, and cut into random chunks (fixed seeds, small and large chunks).
 * The structured results (content, reasoning and calls in order, adjacent
 * deltas of one kind joined) must be identical, and equal to what the test
 * expects. A malformed call must come back as content byte for byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rand.h"
#include "chat/chat-parse.h"

/* ---- results ---- */

struct seg {
    enum hr_chat_event_kind kind;
    char *text; /* content/reasoning, joined; or the call's arguments */
    size_t len;
    char *name, *id;
    size_t index;
};

struct result {
    struct seg *v;
    size_t n, cap;
};

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    assert_non_null(d);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static void collect(struct result *r, const struct hr_chat_events *ev)
{
    for (size_t i = 0; i < ev->n; i++) {
        const struct hr_chat_event *e = &ev->ev[i];
        if (e->kind != HR_CHAT_EVENT_TOOL_CALL) {
            assert_true(e->len > 0);
            assert_int_equal(e->text[e->len], '\0');
            struct seg *last = r->n ? &r->v[r->n - 1] : NULL;
            if (last && last->kind == e->kind) {
                last->text = realloc(last->text, last->len + e->len + 1);
                assert_non_null(last->text);
                memcpy(last->text + last->len, e->text, e->len);
                last->len += e->len;
                last->text[last->len] = '\0';
                continue;
            }
        }
        if (r->n == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 8;
            r->v = realloc(r->v, r->cap * sizeof(*r->v));
            assert_non_null(r->v);
        }
        struct seg *s = &r->v[r->n++];
        memset(s, 0, sizeof(*s));
        s->kind = e->kind;
        if (e->kind == HR_CHAT_EVENT_TOOL_CALL) {
            assert_int_equal(strlen(e->arguments), e->arguments_len);
            s->text = dup_n(e->arguments, e->arguments_len);
            s->len = e->arguments_len;
            s->name = dup_n(e->name, strlen(e->name));
            s->id = e->id ? dup_n(e->id, strlen(e->id)) : NULL;
            s->index = e->call_index;
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
    memset(r, 0, sizeof(*r));
}

enum cut { CUT_WHOLE, CUT_BYTES, CUT_SMALL, CUT_LARGE };

/* Parses s[0..n) fed in the pieces `cut` and `seed` describe. */
static struct result parse_cut(const struct hr_chat_parse_opts *o, const char *s, size_t n,
                               enum cut cut, uint64_t seed)
{
    struct hr_chat_parser *p;
    struct hr_err err;
    assert_int_equal(hr_chat_parser_init(o, &p, &err), HR_OK);
    struct hr_rng rng;
    hr_rng_seed(&rng, seed);
    struct result r = {0};
    struct hr_chat_events ev;
    for (size_t i = 0; i < n;) {
        size_t k = cut == CUT_WHOLE   ? n
                   : cut == CUT_BYTES ? 1
                   : cut == CUT_SMALL ? 1 + hr_rng_u64(&rng) % 7
                                      : 1 + hr_rng_u64(&rng) % 64;
        if (k > n - i)
            k = n - i;
        assert_int_equal(hr_chat_parser_feed(p, s + i, k, &ev, &err), HR_OK);
        collect(&r, &ev);
        i += k;
    }
    assert_int_equal(hr_chat_parser_finish(p, &ev, &err), HR_OK);
    collect(&r, &ev);
    hr_chat_parser_free(p);
    return r;
}

static void result_equal(const struct result *a, const struct result *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->v[i].kind, b->v[i].kind);
        assert_int_equal(a->v[i].len, b->v[i].len);
        assert_memory_equal(a->v[i].text, b->v[i].text, a->v[i].len);
        if (a->v[i].kind == HR_CHAT_EVENT_TOOL_CALL) {
            assert_string_equal(a->v[i].name, b->v[i].name);
            assert_int_equal(a->v[i].index, b->v[i].index);
            assert_int_equal(a->v[i].id == NULL, b->v[i].id == NULL);
            if (a->v[i].id)
                assert_string_equal(a->v[i].id, b->v[i].id);
        }
    }
}

/* Parses s every way and checks that all ways agree; returns the result. */
static struct result parse_all(const struct hr_chat_parse_opts *o, const char *s, size_t n)
{
    struct result whole = parse_cut(o, s, n, CUT_WHOLE, 0);
    const enum cut cuts[] = {CUT_BYTES, CUT_SMALL, CUT_SMALL, CUT_SMALL, CUT_LARGE, CUT_LARGE};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        struct result r = parse_cut(o, s, n, cuts[i], 1000 + i);
        result_equal(&whole, &r);
        result_free(&r);
    }
    return whole;
}

/* ---- expectations ---- */

struct want {
    char kind; /* 'C' content, 'R' reasoning, 'T' tool call */
    const char *text; /* the text, or the call's name */
    const char *args;
    const char *id;
};

#define C(t)        {'C', t, NULL, NULL}
#define R(t)        {'R', t, NULL, NULL}
#define T(n, a)     {'T', n, a, NULL}
#define TI(n, a, i) {'T', n, a, i}
#define N(a)        (sizeof(a) / sizeof((a)[0]))

static void print_result(const struct result *r)
{
    for (size_t i = 0; i < r->n; i++) {
        const struct seg *s = &r->v[i];
        if (s->kind == HR_CHAT_EVENT_TOOL_CALL)
            print_message("  T[%zu] %s %s id=%s\n", s->index, s->name, s->text,
                          s->id ? s->id : "-");
        else
            print_message("  %c \"%s\"\n", s->kind == HR_CHAT_EVENT_CONTENT ? 'C' : 'R', s->text);
    }
}

static void expect_n(const struct hr_chat_parse_opts *o, const char *s, size_t n,
                     const struct want *w, size_t n_want)
{
    struct result r = parse_all(o, s, n);
    if (r.n != n_want)
        print_result(&r);
    assert_int_equal(r.n, n_want);
    size_t calls = 0;
    for (size_t i = 0; i < n_want; i++) {
        const struct seg *g = &r.v[i];
        enum hr_chat_event_kind k = w[i].kind == 'C'   ? HR_CHAT_EVENT_CONTENT
                                    : w[i].kind == 'R' ? HR_CHAT_EVENT_REASONING
                                                       : HR_CHAT_EVENT_TOOL_CALL;
        if (g->kind != k)
            print_result(&r);
        assert_int_equal(g->kind, k);
        if (k == HR_CHAT_EVENT_TOOL_CALL) {
            assert_string_equal(g->name, w[i].text);
            assert_string_equal(g->text, w[i].args);
            assert_int_equal(g->index, calls++);
            if (w[i].id)
                assert_string_equal(g->id, w[i].id);
            else
                assert_null(g->id);
        } else {
            assert_string_equal(g->text, w[i].text);
        }
    }
    result_free(&r);
}

static void expect(const struct hr_chat_parse_opts *o, const char *s, const struct want *w,
                   size_t n_want)
{
    expect_n(o, s, strlen(s), w, n_want);
}

/* A malformed call: everything comes back as content, exactly. */
static void expect_text(const struct hr_chat_parse_opts *o, const char *s)
{
    const struct want w[] = {C(s)};
    expect(o, s, w, *s ? 1 : 0);
}

static struct hr_chat_parse_opts opts(enum hr_chat_format f)
{
    struct hr_chat_parse_opts o = hr_chat_parse_defaults();
    o.format = f;
    o.tools = true;
    return o;
}

/* ---- Hermes / Qwen ---- */

/* Qwen3 with thinking on: the template put "<think>\n" in the prompt. */
static void test_qwen3_reasoning_then_two_calls(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HERMES);
    o.in_reasoning = true;
    const char *out =
        "Okay, the user wants the weather in Paris and in Tokyo.\nI should call get_weather "
        "for each city.\n</think>\n\nI'll look up both cities.\n\n<tool_call>\n{\"name\": "
        "\"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Tokyo\", \"unit\": \"celsius\"}}\n</tool_call>";
    const struct want w[] = {
        R("Okay, the user wants the weather in Paris and in Tokyo.\nI should call get_weather "
          "for each city."),
        C("I'll look up both cities."),
        T("get_weather", "{\"city\":\"Paris\",\"unit\":\"celsius\"}"),
        T("get_weather", "{\"city\":\"Tokyo\",\"unit\":\"celsius\"}"),
    };
    expect(&o, out, w, N(w));
}

/* The model opens <think> itself (no thinking in the prompt). */
static void test_think_in_output(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HERMES);
    const struct want w[] = {R("Simple greeting."), C("Hello! How can I help?")};
    expect(&o, "<think>\nSimple greeting.\n</think>\n\nHello! How can I help?", w, N(w));
    /* Empty reasoning, as Qwen3 writes with thinking off. */
    const struct want w2[] = {C("Hi.")};
    expect(&o, "<think>\n\n</think>\n\nHi.", w2, N(w2));
    /* <think> later in the text is not reasoning. */
    expect_text(&o, "Tags like <think> are just text here.</think>");
    /* Reasoning off: the tags are content. */
    o.reasoning = false;
    expect_text(&o, "<think>x</think>y");
    /* Cut off while thinking: all of it is reasoning. */
    o.reasoning = true;
    const struct want w3[] = {R("Let me count: 1, 2, 3")};
    expect(&o, "  <think>Let me count: 1, 2, 3", w3, N(w3));
    o.in_reasoning = true;
    expect(&o, "\nLet me count: 1, 2, 3", w3, N(w3));
}

static void test_hermes_nested_json(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HERMES);
    const char *out =
        "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"/tmp/notes.md\", "
        "\"content\": \"End a call with </tool_call> and say \\\"hi\\\".\\n caf\\u00e9 "
        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 {not: json}\", \"opts\": "
        "{\"mode\": [1, 2.50, -3e-2, 12345678901234567890], \"x\": null, \"y\": true}}}\n"
        "</tool_call>";
    const struct want w[] = {
        T("write_file",
          "{\"path\":\"/tmp/notes.md\",\"content\":\"End a call with </tool_call> and say "
          "\\\"hi\\\".\\n caf\\u00e9 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 "
          "{not: json}\",\"opts\":{\"mode\":[1,2.50,-3e-2,12345678901234567890],\"x\":null,"
          "\"y\":true}}"),
    };
    expect(&o, out, w, N(w));
}

static void test_hermes_text_around_calls(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HERMES);
    const struct want w[] = {
        C("Let me check."),
        T("ls", "{\"dir\":\".\"}"),
        C("Done: the directory has 3 files."),
    };
    expect(&o,
           "Let me check.\n<tool_call>{\"name\":\"ls\",\"arguments\":{ \"dir\" : \".\" }}"
           "</tool_call>\n\nDone: the directory has 3 files.",
           w, N(w));
    /* Other shapes inside the tags: no arguments, "parameters", the OpenAI
     * form with arguments as a JSON string, an array of calls. */
    const struct want w2[] = {
        T("now", "{}"),
        T("f", "{\"a\":1}"),
        TI("g", "{\"b\":[true]}", "call_7"),
        T("h", "{}"),
        T("i", "{\"c\":\"d\"}"),
    };
    expect(&o,
           "<tool_call>{\"name\": \"now\"}</tool_call><tool_call>{\"name\": \"f\", "
           "\"parameters\": {\"a\": 1}}</tool_call><tool_call>{\"type\": \"function\", \"id\": "
           "\"call_7\", \"function\": {\"name\": \"g\", \"arguments\": \"{\\\"b\\\": "
           "[true]}\"}}</tool_call>\n<tool_call>[{\"name\": \"h\", \"arguments\": null}, "
           "{\"name\": \"i\", \"arguments\": {\"c\": \"d\"}}]</tool_call>",
           w2, N(w2));
}

static void test_hermes_malformed(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HERMES);
    /* Text that mentions the tag. */
    expect_text(&o, "Qwen wraps calls in <tool_call> tags; a partial <tool_c is fine too.");
    expect_text(&o, "Ends with a partial tag <tool_ca");
    expect_text(&o, "<tool_call>");
    /* Bad JSON: a trailing comma, a bare key, an unterminated string. */
    expect_text(&o, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,}}\n</tool_call>");
    expect_text(&o, "<tool_call>{name: \"f\"}</tool_call> after");
    expect_text(&o, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x}}</tool_call>");
    /* Valid JSON that is no call: no name, empty name, arguments an array,
     * arguments a string that is not an object, a number. */
    expect_text(&o, "<tool_call>{\"arguments\": {}}</tool_call>");
    expect_text(&o, "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>");
    expect_text(&o, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>");
    expect_text(&o, "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>");
    expect_text(&o, "<tool_call>{\"name\": 3}</tool_call>");
    expect_text(&o, "<tool_call>[]</tool_call>");
    /* Unclosed at the end of the stream, and junk between JSON and tag. */
    expect_text(&o, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n");
    expect_text(&o, "<tool_call>{\"name\": \"f\"} x</tool_call>");
    /* A broken call followed by a good one: scanning resumes after the
     * broken call's tag. */
    const struct want w[] = {C("<tool_call>{oops}</tool_call>"), T("f", "{}")};
    expect(&o, "<tool_call>{oops}</tool_call>\n<tool_call>{\"name\":\"f\"}</tool_call>", w, N(w));
}

/* ---- Llama 3.1+ ---- */

static void test_llama3(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_LLAMA3);
    const struct want w1[] = {
        T("get_weather", "{\"location\":\"San Francisco, CA\",\"unit\":\"fahrenheit\"}")};
    expect(&o,
           "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"San Francisco, CA\", "
           "\"unit\": \"fahrenheit\"}}",
           w1, N(w1));
    expect(&o,
           "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"San "
           "Francisco, CA\", \"unit\": \"fahrenheit\"}}",
           w1, N(w1));
    /* Several calls, by ';' and by newlines, "arguments" too. */
    const struct want w2[] = {
        T("search", "{\"q\":\"llama 3.1\"}"),
        T("get_time", "{}"),
        T("add", "{\"a\":1,\"b\":2}"),
    };
    expect(&o,
           "<|python_tag|>{\"name\": \"search\", \"arguments\": {\"q\": \"llama 3.1\"}}; "
           "{\"name\": \"get_time\", \"parameters\": {}};\n{\"name\": \"add\", \"parameters\": "
           "{\"a\": 1, \"b\": 2}}",
           w2, N(w2));
    expect(&o,
           "\n{\"name\": \"search\", \"parameters\": {\"q\": \"llama 3.1\"}}\n{\"name\": "
           "\"get_time\", \"parameters\": {}}\n\n{\"name\": \"add\", \"parameters\": {\"a\": 1, "
           "\"b\": 2}}",
           w2, N(w2));
    /* Text, then a tagged call. */
    const struct want w3[] = {C("Searching now."), T("search", "{\"q\":\"x\"}")};
    expect(&o, "Searching now. <|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}",
           w3, N(w3));
    /* JSON that is no call, JSON not at the start, built-in tool syntax. */
    expect_text(&o, "{\"answer\": 42, \"unit\": \"m\"}");
    expect_text(&o, "The call is {\"name\": \"f\", \"parameters\": {}} as JSON.");
    expect_text(&o, "<|python_tag|>brave_search.call(query=\"weather\")");
    expect_text(&o, "{\"name\": \"f\", \"parameters\": {\"a\": ");
    /* A call, then text. */
    const struct want w4[] = {T("f", "{}"), C("and that's it")};
    expect(&o, "{\"name\": \"f\", \"parameters\": {}}; and that's it", w4, N(w4));
    /* No tools offered: a JSON answer stays content. */
    o.tools = false;
    expect_text(&o, "{\"name\": \"f\", \"parameters\": {}}");
    expect_text(&o, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}");
}

/* ---- Mistral ---- */

static void test_mistral(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_MISTRAL);
    const struct want w1[] = {
        TI("get_weather", "{\"city\":\"Paris\",\"unit\":\"celsius\"}", "a1B2c3D4e"),
        TI("get_time", "{\"tz\":\"Europe/Paris\"}", "f5G6h7I8j"),
    };
    expect(&o,
           "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
           "\"unit\": \"celsius\"}, \"id\": \"a1B2c3D4e\"}, {\"name\": \"get_time\", "
           "\"arguments\": {\"tz\": \"Europe/Paris\"}, \"id\": \"f5G6h7I8j\"}]",
           w1, N(w1));
    /* The v11+ form, one [TOOL_CALLS] per call, with and without [CALL_ID]. */
    const struct want w2[] = {
        C("Checking."),
        T("get_weather", "{\"city\":\"Paris\"}"),
        TI("get_time", "{}", "x9Y8z7W6v"),
    };
    expect(&o,
           "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time"
           "[CALL_ID]x9Y8z7W6v[ARGS]{}",
           w2, N(w2));
    /* Malformed: no [ARGS], args not an object, bad JSON, nothing after. */
    expect_text(&o, "[TOOL_CALLS]get_weather{\"city\": \"Paris\"}");
    expect_text(&o, "[TOOL_CALLS]f[ARGS][1]");
    expect_text(&o, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {]");
    expect_text(&o, "[TOOL_CALLS]");
    expect_text(&o, "Use [TOOL_CALL] or [TOOL_CALLS x");
}

/* ---- generic ---- */

static void test_generic(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_GENERIC);
    const struct want w1[] = {T("get_weather", "{\"city\":\"Paris\"}")};
    expect(&o, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n", w1, N(w1));
    expect(&o, " {\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}",
           w1, N(w1));
    expect(&o, "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}", w1,
           N(w1));
    const struct want w2[] = {T("a", "{}"), T("b", "{\"x\":1}")};
    expect(&o,
           "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", "
           "\"parameters\": {\"x\": 1}}]}",
           w2, N(w2));
    /* Not a whole-output call: trailing text, a plain JSON answer, text first. */
    expect_text(&o, "{\"name\": \"get_weather\", \"arguments\": {}} and more");
    expect_text(&o, "{\"response\": \"Paris is sunny.\"}");
    expect_text(&o, "Answer: {\"name\": \"f\", \"arguments\": {}}");
    o.tools = false;
    expect_text(&o, "{\"name\": \"get_weather\", \"arguments\": {}}");
}

/* ---- edges ---- */

static void test_empty_and_whitespace(void **state)
{
    (void)state;
    for (int f = 0; f < HR_CHAT_FORMAT_COUNT; f++) {
        struct hr_chat_parse_opts o = opts((enum hr_chat_format)f);
        expect_text(&o, "");
        expect_text(&o, "\n\n  ");
        o.in_reasoning = true;
        expect_text(&o, "");
        const struct want w[] = {C("x")};
        expect(&o, "\n</think>\n\nx", w, N(w));
    }
}

/* Invalid UTF-8 becomes U+FFFD, one per maximal subpart, however it is cut. */
static void test_utf8(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HERMES);
    const struct want w[] = {C("a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd\xe2\x82\xac"
                               "c\xef\xbf\xbd"),
                             T("f", "{}")};
    expect(&o, "a\xe2\x82" "b\xff\xc0\xe2\x82\xac" "c\xf0\x9f\x98<tool_call>{\"name\":\"f\"}"
               "</tool_call>",
           w, N(w));
    const struct want w2[] = {C("\xe6\x97\xa5\xef\xbf\xbd")};
    expect(&o, "\xe6\x97\xa5\xe6\x97", w2, N(w2));
    /* Invalid UTF-8 inside a call: jansson refuses it, the call is text. */
    const struct want w3[] = {C("<tool_call>{\"name\":\"f\xef\xbf\xbd\"}</tool_call>")};
    expect(&o, "<tool_call>{\"name\":\"f\xff\"}</tool_call>", w3, N(w3));
    /* A NUL byte is content like any other. */
    const char nul[] = "a\0b";
    struct result r = parse_all(&o, nul, 3);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.v[0].len, 3);
    assert_memory_equal(r.v[0].text, nul, 3);
    result_free(&r);
}

/* Whitespace before a marker is held only up to HR_CHAT_PARSE_WS_HOLD. */
static void test_long_whitespace(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HERMES);
    enum { W = HR_CHAT_PARSE_WS_HOLD + 40 };
    char out[W + 64], content[W + 8];
    memset(out, ' ', sizeof(out));
    memcpy(out, "x", 1);
    strcpy(out + 1 + W, "<tool_call>{\"name\":\"f\"}</tool_call>");
    memset(content, ' ', sizeof(content));
    content[0] = 'x';
    content[1 + W] = '\0';
    const struct want w[] = {C(content), T("f", "{}")};
    expect(&o, out, w, N(w));
    /* Exactly at the bound, the run is dropped. */
    strcpy(out + 1 + HR_CHAT_PARSE_WS_HOLD, "<tool_call>{\"name\":\"f\"}</tool_call>");
    const struct want w2[] = {C("x"), T("f", "{}")};
    expect(&o, out, w2, N(w2));
    /* A long run at the start of the output is content, and <think> after it too. */
    memset(out, '\n', W);
    strcpy(out + W, "<think>a</think>");
    o.reasoning = true;
    expect_text(&o, out);
}

/* A call longer than max_held_bytes degrades to text. */
static void test_held_cap(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HERMES);
    const char *out = "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":\"0123456789\"}}</tool_call>";
    o.max_held_bytes = strlen(out);
    const struct want w[] = {T("f", "{\"a\":\"0123456789\"}")};
    expect(&o, out, w, N(w));
    o.max_held_bytes = strlen(out) - 1;
    expect_text(&o, out);
    o.max_held_bytes = 20;
    expect_text(&o, out);
    /* Deep nesting beyond HR_CHAT_PARSE_MAX_DEPTH. */
    o.max_held_bytes = 0;
    char deep[2 * HR_CHAT_PARSE_MAX_DEPTH + 64];
    size_t k = (size_t)sprintf(deep, "<tool_call>{\"name\":\"f\",\"arguments\":");
    for (int i = 0; i < HR_CHAT_PARSE_MAX_DEPTH; i++)
        deep[k++] = '[';
    deep[k] = '\0';
    expect_text(&o, deep);
    /* The generic and llama3 formats hold output starting with '{' until
     * decided: over the cap it is content. */
    o = opts(HR_CHAT_FORMAT_GENERIC);
    o.max_held_bytes = 16;
    expect_text(&o, "{\"name\": \"get_weather\", \"arguments\": {}}");
    o.format = HR_CHAT_FORMAT_LLAMA3;
    expect_text(&o, "{\"name\": \"get_weather\", \"parameters\": {}}");
}

/* What is emitted while streaming: held back only while it could matter. */
static void test_streaming_latency(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HERMES);
    struct hr_chat_parser *p;
    struct hr_err err;
    struct hr_chat_events ev;
    assert_int_equal(hr_chat_parser_init(&o, &p, &err), HR_OK);
    assert_int_equal(hr_chat_parser_feed(p, "Hello <tool_c", 13, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 1);
    assert_string_equal(ev.ev[0].text, "Hello");
    assert_int_equal(hr_chat_parser_feed(p, "hair> ok\xe2\x82", 10, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 1);
    assert_string_equal(ev.ev[0].text, " <tool_chair> ok");
    assert_int_equal(hr_chat_parser_feed(p, "\xac <tool_call>{\"name\"", 20, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 1);
    assert_string_equal(ev.ev[0].text, "\xe2\x82\xac");
    assert_int_equal(hr_chat_parser_feed(p, ": \"f\"}</tool_call>", 18, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 1);
    assert_int_equal(ev.ev[0].kind, HR_CHAT_EVENT_TOOL_CALL);
    assert_string_equal(ev.ev[0].name, "f");
    assert_string_equal(ev.ev[0].arguments, "{}");
    assert_null(ev.ev[0].id);
    assert_int_equal(hr_chat_parser_finish(p, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 0);
    assert_int_equal(hr_chat_parser_n_calls(p), 1);
    assert_int_equal(hr_chat_parser_feed(p, "x", 1, &ev, &err), HR_ERR_INVALID);
    assert_int_equal(hr_chat_parser_finish(p, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 0);
    hr_chat_parser_free(p);
    hr_chat_parser_free(NULL);

    /* Reasoning streams too, holding only a possible "</think>". */
    o.in_reasoning = true;
    assert_int_equal(hr_chat_parser_init(&o, &p, &err), HR_OK);
    assert_int_equal(hr_chat_parser_feed(p, "\nStep one. </thi", 16, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 1);
    assert_int_equal(ev.ev[0].kind, HR_CHAT_EVENT_REASONING);
    assert_string_equal(ev.ev[0].text, "Step one.");
    assert_int_equal(hr_chat_parser_feed(p, "nk>\n\nAnswer", 11, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 1);
    assert_int_equal(ev.ev[0].kind, HR_CHAT_EVENT_CONTENT);
    assert_string_equal(ev.ev[0].text, "Answer");
    hr_chat_parser_free(p);
}

static void test_format_detect(void **state)
{
    (void)state;
    assert_int_equal(hr_chat_format_detect(NULL), HR_CHAT_FORMAT_GENERIC);
    assert_int_equal(hr_chat_format_detect("{{ '<|im_start|>' }}"), HR_CHAT_FORMAT_GENERIC);
    assert_int_equal(hr_chat_format_detect("{{- '<tool_call>\\n{\"name\": \"' }}"),
                     HR_CHAT_FORMAT_HERMES);
    assert_int_equal(hr_chat_format_detect("{{- '<|python_tag|>' + tool_call.name }}"),
                     HR_CHAT_FORMAT_LLAMA3);
    assert_int_equal(hr_chat_format_detect("<|start_header_id|>ipython<|end_header_id|> "
                                           "{{ '\"parameters\": ' }}"),
                     HR_CHAT_FORMAT_LLAMA3);
    assert_int_equal(hr_chat_format_detect("{{ '[TOOL_CALLS]' }} <tool_call>"),
                     HR_CHAT_FORMAT_MISTRAL);
    struct hr_err err;
    for (int f = 0; f < HR_CHAT_FORMAT_COUNT; f++) {
        enum hr_chat_format g;
        assert_int_equal(hr_chat_format_from_name(hr_chat_format_name(f), &g, &err), HR_OK);
        assert_int_equal(g, f);
    }
    enum hr_chat_format g;
    assert_int_equal(hr_chat_format_from_name("qwen", &g, &err), HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "qwen"));
    assert_string_equal(hr_chat_format_name(HR_CHAT_FORMAT_COUNT), "?");
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_COUNT);
    struct hr_chat_parser *p;
    assert_int_equal(hr_chat_parser_init(&o, &p, &err), HR_ERR_INVALID);
    assert_null(p);

    const char *pr = "<|im_start|>assistant\n<think>\n";
    assert_true(hr_chat_prompt_opens_reasoning(pr, strlen(pr)));
    pr = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_false(hr_chat_prompt_opens_reasoning(pr, strlen(pr)));
    assert_false(hr_chat_prompt_opens_reasoning("", 0));
}

static void test_call_ids(void **state)
{
    (void)state;
    struct hr_rng rng;
    hr_rng_seed(&rng, 7);
    char a[64], b[64];
    assert_int_equal(hr_chat_call_id_make(a, sizeof(a), "toolu_", &rng), 30);
    assert_int_equal(hr_chat_call_id_make(b, sizeof(b), "toolu_", &rng), 30);
    assert_memory_equal(a, "toolu_", 6);
    assert_string_not_equal(a, b);
    for (size_t i = 6; i < 30; i++)
        assert_non_null(strchr("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                               a[i]));
    assert_int_equal(hr_chat_call_id_make(a, 8, "call_", &rng), 7);
    assert_int_equal(strlen(a), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_reasoning_then_two_calls),
        cmocka_unit_test(test_think_in_output),
        cmocka_unit_test(test_hermes_nested_json),
        cmocka_unit_test(test_hermes_text_around_calls),
        cmocka_unit_test(test_hermes_malformed),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_generic),
        cmocka_unit_test(test_empty_and_whitespace),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_long_whitespace),
        cmocka_unit_test(test_held_cap),
        cmocka_unit_test(test_streaming_latency),
        cmocka_unit_test(test_format_detect),
        cmocka_unit_test(test_call_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
