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

#include <jansson.h>

/* ---- results ---- */

struct seg {
    enum hr_chat_event_kind kind;
    char *text; /* content/reasoning, joined; or the call's arguments */
    size_t len;
    char *name, *id;
    size_t index;
    bool streamed;
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
        if (e->kind != HR_CHAT_EVENT_TOOL_CALL && e->kind != HR_CHAT_EVENT_TOOL_CALL_BEGIN) {
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
            s->streamed = e->streamed;
        } else if (e->kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN) {
            s->text = dup_n("", 0);
            s->name = dup_n(e->name, strlen(e->name));
            s->index = e->call_index;
        } else {
            s->text = dup_n(e->text, e->len);
            s->len = e->len;
            s->index = e->call_index;
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
        assert_int_equal(a->v[i].index, b->v[i].index);
        assert_int_equal(a->v[i].streamed, b->v[i].streamed);
        if (a->v[i].kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN)
            assert_string_equal(a->v[i].name, b->v[i].name);
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
    char kind; /* 'C' content, 'R' reasoning, 'T' tool call ('S' streamed), 'B' call
                * begin, 'A' argument pieces */
    const char *text; /* the text, or the call's name */
    const char *args;
    const char *id;
};

#define C(t)        {'C', t, NULL, NULL}
#define R(t)        {'R', t, NULL, NULL}
#define T(n, a)     {'T', n, a, NULL}
#define TS(n, a)    {'S', n, a, NULL}
#define B(n)        {'B', n, NULL, NULL}
#define A(t)        {'A', t, NULL, NULL}
#define TI(n, a, i) {'T', n, a, i}
#define N(a)        (sizeof(a) / sizeof((a)[0]))

static void print_result(const struct result *r)
{
    for (size_t i = 0; i < r->n; i++) {
        const struct seg *s = &r->v[i];
        if (s->kind == HR_CHAT_EVENT_TOOL_CALL)
            print_message("  %c[%zu] %s %s id=%s\n", s->streamed ? 'S' : 'T', s->index, s->name,
                          s->text, s->id ? s->id : "-");
        else if (s->kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN)
            print_message("  B[%zu] %s\n", s->index, s->name);
        else if (s->kind == HR_CHAT_EVENT_TOOL_ARGS)
            print_message("  A[%zu] %s\n", s->index, s->text);
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
                                    : w[i].kind == 'B' ? HR_CHAT_EVENT_TOOL_CALL_BEGIN
                                    : w[i].kind == 'A' ? HR_CHAT_EVENT_TOOL_ARGS
                                                       : HR_CHAT_EVENT_TOOL_CALL;
        if (g->kind != k)
            print_result(&r);
        assert_int_equal(g->kind, k);
        if (k == HR_CHAT_EVENT_TOOL_CALL_BEGIN || k == HR_CHAT_EVENT_TOOL_ARGS) {
            assert_int_equal(g->index, calls);
            if (k == HR_CHAT_EVENT_TOOL_CALL_BEGIN)
                assert_string_equal(g->name, w[i].text);
            else
                assert_string_equal(g->text, w[i].text);
        } else if (k == HR_CHAT_EVENT_TOOL_CALL) {
            if (strcmp(g->text, w[i].args) != 0)
                print_result(&r);
            assert_string_equal(g->name, w[i].text);
            assert_string_equal(g->text, w[i].args);
            assert_int_equal(g->streamed, w[i].kind == 'S');
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

/* ---- Qwen3-Coder / Qwen3.5 XML ---- */

/* The request's tools, as the server passes them (OpenAI form; the second
 * in Anthropic's form, which the parser reads too). */
static const char QC_TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"metric\":{\"type\":\"boolean\"},\"zip\":{\"type\":\"string\"},\"opts\":{\"type\":"
    "\"object\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"ratio\":"
    "{\"type\":\"number\"},\"note\":{\"type\":[\"string\",\"null\"]},\"maybe\":{\"anyOf\":"
    "[{\"type\":\"integer\"},{\"type\":\"string\"}]},\"level\":{\"enum\":[\"low\",\"high\"]},"
    "\"any\":{},\"flag\":{\"type\":[\"boolean\",\"null\"]},\"code\":{\"type\":\"string\","
    "\"pattern\":\"x\"},\"nothing\":{\"type\":\"null\"}}}}},"
    "{\"name\":\"write_file\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"path\":"
    "{\"type\":\"string\"},\"content\":{\"type\":\"string\"},\"mode\":{\"type\":\"integer\"}}}}]";

static json_t *qc_tools(void)
{
    json_t *t = json_loads(QC_TOOLS, 0, NULL);
    assert_non_null(t);
    return t;
}

static struct hr_chat_parse_opts qc_opts(const json_t *tools)
{
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_QWEN3_CODER);
    o.tool_defs = tools;
    return o;
}

/* Qwen3-Coder's own layout, as its template renders calls in history. */
static void test_qwen3_coder_calls(void **state)
{
    (void)state;
    json_t *tools = qc_tools();
    struct hr_chat_parse_opts o = qc_opts(tools);
    const char *out =
        "I'll check the weather.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
        "Paris\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n"
        "</parameter>\n<parameter=zip>\n75001\n</parameter>\n<parameter=opts>\n{\"a\": [1, "
        "2.50, -3e-2], \"b\": null}\n</parameter>\n<parameter=ratio>\n0.1\n</parameter>\n"
        "<parameter=tags>\n[\"a\", \"b c\"]\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.py\n</parameter>\n"
        "<parameter=content>\n\n  if a < b:\n\tprint(\"</function>\", '\\\\')\n\n</parameter>\n"
        "<parameter=mode>\n420\n</parameter>\n</function>\n</tool_call>";
    const struct want w[] = {
        C("I'll check the weather."),
        T("get_weather", "{\"city\":\"Paris\",\"days\":3,\"metric\":true,\"zip\":\"75001\","
                         "\"opts\":{\"a\":[1,2.50,-3e-2],\"b\":null},\"ratio\":0.1,"
                         "\"tags\":[\"a\",\"b c\"]}"),
        T("write_file", "{\"path\":\"/tmp/a.py\",\"content\":\"\\n  if a < b:\\n\\tprint("
                        "\\\"</function>\\\", '\\\\\\\\')\\n\",\"mode\":420}"),
    };
    expect(&o, out, w, N(w));
    /* Text between and after calls, no newlines around the tags, an empty
     * call, and a value on the tag's line. */
    const struct want w2[] = {
        C("First:"), T("get_weather", "{\"city\":\"Oslo\"}"), C("Then:"), T("now", "{}"),
        C("Done."),
    };
    expect(&o,
           "First:<tool_call><function=get_weather><parameter=city>Oslo</parameter></function>"
           "</tool_call>Then:\n<tool_call>\n<function=now>\n</function>\n</tool_call>\n\nDone.",
           w2, N(w2));
    json_decref(tools);
}

/* Schema-typed values: what stays a string, what is parsed, the fallbacks. */
static void test_qwen3_coder_types(void **state)
{
    (void)state;
    json_t *tools = qc_tools();
    struct hr_chat_parse_opts o = qc_opts(tools);
    static const struct {
        const char *fn, *key, *value, *json;
    } cases[] = {
        /* Strings are verbatim: numbers, booleans, JSON and whitespace too;
         * only one newline on each side belongs to the format. */
        {"get_weather", "city", "42", "\"42\""},
        {"get_weather", "zip", "007", "\"007\""},
        {"get_weather", "city", "true", "\"true\""},
        {"get_weather", "city", "{\"a\": 1}", "\"{\\\"a\\\": 1}\""},
        {"get_weather", "city", "\n  two\n lines \n\n", "\"\\n  two\\n lines \\n\\n\""},
        {"get_weather", "city", "", "\"\""},
        {"get_weather", "city", "tab\there \"q\" back\\slash \x01 caf\xc3\xa9 \xff!",
         "\"tab\\there \\\"q\\\" back\\\\slash \\u0001 caf\xc3\xa9 \xef\xbf\xbd!\""},
        {"get_weather", "note", "null", "\"null\""},   /* ["string","null"] */
        {"get_weather", "maybe", "5", "\"5\""},        /* anyOf with a string */
        {"get_weather", "level", "high", "\"high\""},  /* string enum */
        {"get_weather", "code", "1", "\"1\""},         /* pattern implies string */
        /* Other types are JSON, number text as written. */
        {"get_weather", "days", " 12 ", "12"},
        {"get_weather", "days", "1e3", "1e3"},
        {"get_weather", "ratio", "-0.10", "-0.10"},
        {"get_weather", "ratio", "123456789012345678901234567890",
         "123456789012345678901234567890"},
        {"get_weather", "metric", "false", "false"},
        {"get_weather", "nothing", "null", "null"},
        {"get_weather", "opts", "{\n  \"k\": \"v w\",\n  \"n\": [ ]\n}", "{\"k\":\"v w\",\"n\":[]}"},
        {"get_weather", "any", "[1, {\"x\": true}]", "[1,{\"x\":true}]"}, /* no type: JSON */
        {"get_weather", "days", "\"7\"", "\"7\""}, /* a JSON string is kept as one */
        /* Python's booleans, as the template's `| string` writes them. */
        {"get_weather", "metric", "True", "true"},
        {"get_weather", "flag", "False", "false"},
        {"get_weather", "flag", "None", "null"},    /* ["boolean","null"] */
        {"get_weather", "nothing", "None", "null"}, /* "null" */
        {"get_weather", "metric", "None", "\"None\""}, /* boolean only */
        {"get_weather", "note", "None", "\"None\""},   /* a string first */
        /* Not JSON: a string after all. */
        {"get_weather", "days", "three", "\"three\""},
        {"get_weather", "days", "", "\"\""},
        {"get_weather", "ratio", "1.", "\"1.\""},
        {"get_weather", "metric", "yes", "\"yes\""},
        {"get_weather", "opts", "{a: 1}", "\"{a: 1}\""},
        {"get_weather", "days", "True", "\"True\""}, /* not a boolean parameter */
        /* Unknown parameter, unknown tool: strings. */
        {"get_weather", "extra", "42", "\"42\""},
        {"no_such_tool", "days", "42", "\"42\""},
        {"write_file", "mode", "0644", "\"0644\""}, /* a leading zero is not JSON */
        {"write_file", "mode", "644", "644"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        char out[512], args[512];
        snprintf(out, sizeof(out),
                 "<tool_call>\n<function=%s>\n<parameter=%s>\n%s\n</parameter>\n</function>\n"
                 "</tool_call>",
                 cases[i].fn, cases[i].key, cases[i].value);
        snprintf(args, sizeof(args), "{\"%s\":%s}", cases[i].key, cases[i].json);
        const struct want w[] = {T(cases[i].fn, args)};
        expect(&o, out, w, N(w));
    }
    /* Without tool definitions every value is a string. */
    o.tool_defs = NULL;
    const struct want w[] = {T("get_weather", "{\"days\":\"3\",\"metric\":\"true\"}")};
    expect(&o,
           "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n"
           "<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>",
           w, N(w));
    /* A key that needs escaping, and a parameter given twice (kept twice, in
     * order: the client's JSON parser keeps the last). */
    o.tool_defs = tools;
    const struct want w2[] = {T("f", "{\"a \\\"b\\\"\":\"1\",\"x\":\"1\",\"x\":\"2\"}")};
    expect(&o,
           "<tool_call><function=f><parameter=a \"b\">1</parameter><parameter=x>1</parameter>"
           "<parameter=x>2</parameter></function></tool_call>",
           w2, N(w2));
    json_decref(tools);
}

/* Qwen3-Coder sometimes leaves out <tool_call>; as llama.cpp, a call may
 * then start at <function=NAME> when NAME is a tool the request offers. */
static void test_qwen3_coder_bare(void **state)
{
    (void)state;
    json_t *tools = qc_tools();
    struct hr_chat_parse_opts o = qc_opts(tools);
    const struct want w[] = {
        C("I'll call it."),
        T("get_weather", "{\"city\":\"Paris\"}"),
        C("And:"),
        T("write_file", "{\"path\":\"a\"}"),
    };
    expect(&o,
           "I'll call it.\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
           "</function>\n</tool_call>\nAnd:\n<tool_call>\n<function=write_file>\n<parameter=path>\n"
           "a\n</parameter>\n</function>\n</tool_call>",
           w, N(w));
    /* Without the closing tag too: the call is committed. */
    const struct want w2[] = {T("get_weather", "{\"days\":2}"), C("Done.")};
    expect(&o, "<function=get_weather><parameter=days>2</parameter></function>\nDone.", w2, N(w2));
    /* Not a tool, not a call: code and prose stay text. */
    expect_text(&o, "#include <functional>\nstd::function<int()> f; <function=main> <function=");
    expect_text(&o, "<function=get_weather");
    expect_text(&o, "see <function=no_such_tool>\n<parameter=a>\n1\n</parameter>\n</function>");
    o.tool_defs = NULL; /* no names to check against: never */
    expect_text(&o, "<function=get_weather>\n</function>\n</tool_call>");
    json_decref(tools);
}

/* Qwen3.5 thinks first: the prompt ends with "<think>\n". */
static void test_qwen3_coder_reasoning(void **state)
{
    (void)state;
    json_t *tools = qc_tools();
    struct hr_chat_parse_opts o = qc_opts(tools);
    o.in_reasoning = true;
    const struct want w[] = {
        R("The user wants Paris.\nCall the tool."),
        C("Checking."),
        T("get_weather", "{\"city\":\"Paris\",\"days\":2}"),
    };
    expect(&o,
           "The user wants Paris.\nCall the tool.\n</think>\n\nChecking.\n\n<tool_call>\n"
           "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n"
           "</parameter>\n</function>\n</tool_call>",
           w, N(w));
    /* Straight from reasoning to a call, without </think>: llama.cpp ends
     * the reasoning at <tool_call> too. A broken call after it is content. */
    const struct want w1[] = {R("Call it."), T("get_weather", "{\"days\":1}")};
    expect(&o,
           "Call it.\n\n<tool_call>\n<function=get_weather>\n<parameter=days>\n1\n</parameter>\n"
           "</function>\n</tool_call>",
           w1, N(w1));
    const struct want w1b[] = {R("Hmm </think"), C("<tool_call>oops")};
    expect(&o, "Hmm </think <tool_call>oops", w1b, N(w1b));
    const struct want w1c[] = {R("Hmm <tool_cal")};
    expect(&o, "Hmm <tool_cal", w1c, N(w1c));
    /* Hermes keeps the old rule: only </think> ends reasoning. */
    struct hr_chat_parse_opts oh = opts(HR_CHAT_FORMAT_HERMES);
    oh.in_reasoning = true;
    const struct want w1d[] = {R("a <tool_call>{\"name\":\"f\"}</tool_call>"), C("b")};
    expect(&oh, "a <tool_call>{\"name\":\"f\"}</tool_call></think>b", w1d, N(w1d));
    /* Thinking off: the template closed the block in the prompt. */
    o.in_reasoning = false;
    const struct want w2[] = {T("get_weather", "{\"days\":1}")};
    expect(&o,
           "<tool_call>\n<function=get_weather>\n<parameter=days>\n1\n</parameter>\n</function>\n"
           "</tool_call>",
           w2, N(w2));
    /* No tools offered: the markup is content. */
    o.tools = false;
    expect_text(&o, "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>");
    json_decref(tools);
}

static void test_qwen3_coder_malformed(void **state)
{
    (void)state;
    json_t *tools = qc_tools();
    struct hr_chat_parse_opts o = qc_opts(tools);
    /* Before the call is committed ("<function=NAME>" read), a mismatch
     * degrades the whole region to content, as in the other formats. */
    expect_text(&o, "Calls look like <tool_call> then <function=name>, see <tool_c");
    expect_text(&o, "<function=f>\n<parameter=city>\nParis\n</parameter>\n</function>");
    expect_text(&o, "<tool_call>");
    expect_text(&o, "<tool_call>\n<function=");
    expect_text(&o, "<tool_call>\n<function=get_weather");
    expect_text(&o, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"); /* hermes */
    expect_text(&o, "<tool_call><function=get weather></function></tool_call>");
    expect_text(&o, "<tool_call><function=></function></tool_call>");
    expect_text(&o, "<tool_call>x<function=f></function></tool_call>");
    /* After it, the call is the complete parameters read so far, and the
     * element that broke it onwards is content (whitespace before dropped):
     * cut off in a value, before </function>, before </tool_call>. */
    const struct want w1[] = {C("Sure."), T("f", "{}"), C("<parameter=a>\n1\n")};
    expect(&o, "Sure.\n<tool_call>\n<function=f>\n<parameter=a>\n1\n", w1, N(w1));
    const struct want w2[] = {T("f", "{\"a\":\"1\"}")};
    expect(&o, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n", w2, N(w2));
    expect(&o, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n", w2, N(w2));
    const struct want w3[] = {T("f", "{\"a\":\"1\"}"), C("</tool_")};
    expect(&o, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_", w3,
           N(w3));
    /* Bad keys, junk between the tags, two functions in one block. */
    const struct want w4[] = {T("f", "{}"), C("<parameter=>1</parameter></function></tool_call>")};
    expect(&o, "<tool_call><function=f><parameter=>1</parameter></function></tool_call>", w4, N(w4));
    const struct want w5[] = {T("f", "{}"),
                              C("<parameter=a\nb>1</parameter></function></tool_call>")};
    expect(&o, "<tool_call><function=f><parameter=a\nb>1</parameter></function></tool_call>", w5,
           N(w5));
    const struct want w6[] = {T("f", "{}"), C("junk</function></tool_call>")};
    expect(&o, "<tool_call><function=f>junk</function></tool_call>", w6, N(w6));
    const struct want w7[] = {T("f", "{}"), C("junk</tool_call>")};
    expect(&o, "<tool_call><function=f></function>junk</tool_call>", w7, N(w7));
    const struct want w8[] = {T("f", "{}"), C("<function=g></function></tool_call>")};
    expect(&o, "<tool_call><function=f></function><function=g></function></tool_call>", w8, N(w8));
    /* A broken call, then a good one. */
    const struct want w9[] = {
        T("f", "{}"),
        C("oops</function></tool_call>"),
        T("f", "{\"a\":\"1\"}"),
    };
    expect(&o,
           "<tool_call><function=f>oops</function></tool_call>\n<tool_call><function=f>"
           "<parameter=a>1</parameter></function></tool_call>",
           w9, N(w9));
    /* max_held_bytes bounds one value and the arguments as a whole: the
     * parameter that passes it is dropped and ends the call. */
    char big[600];
    memset(big, 'x', sizeof(big));
    char out[2000], rest[800];
    snprintf(out, sizeof(out),
             "<tool_call><function=f><parameter=a>%.*s</parameter></function></tool_call>",
             (int)sizeof(big), big);
    snprintf(rest, sizeof(rest), "<parameter=a>%.*s</parameter></function></tool_call>",
             (int)sizeof(big), big);
    o.max_held_bytes = 300;
    const struct want w10[] = {T("f", "{}"), C(rest)};
    expect(&o, out, w10, N(w10));
    o.max_held_bytes = 1000;
    struct result r = parse_all(&o, out, strlen(out));
    assert_int_equal(r.n, 1);
    assert_int_equal(r.v[0].kind, HR_CHAT_EVENT_TOOL_CALL);
    assert_int_equal(r.v[0].len, sizeof(big) + 8);
    result_free(&r);
    snprintf(out, sizeof(out),
             "<tool_call><function=f><parameter=a>%.*s</parameter><parameter=b>%.*s</parameter>"
             "</function></tool_call>",
             400, big, 400, big);
    snprintf(rest, sizeof(rest), "<parameter=b>%.*s</parameter></function></tool_call>", 400, big);
    char args[500];
    snprintf(args, sizeof(args), "{\"a\":\"%.*s\"}", 400, big);
    const struct want w11[] = {T("f", args), C(rest)};
    o.max_held_bytes = 600;
    expect(&o, out, w11, N(w11));
    json_decref(tools);
}

/* With stream_args (a streaming response): the name as soon as it is read,
 * the arguments a parameter at a time, then the call marked streamed. */
static void test_qwen3_coder_stream(void **state)
{
    (void)state;
    json_t *tools = qc_tools();
    struct hr_chat_parse_opts o = qc_opts(tools);
    o.stream_args = true;
    const struct want w[] = {
        C("Checking."),
        B("get_weather"),
        A("{\"city\":\"Paris\",\"days\":3}"),
        TS("get_weather", "{\"city\":\"Paris\",\"days\":3}"),
        B("now"),
        A("{}"),
        TS("now", "{}"),
        C("Done."),
        B("f"),
        A("{\"a\":\"1\"}"),
        TS("f", "{\"a\":\"1\"}"),
        C("<parameter=b>\ncut"),
    };
    expect(&o,
           "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
           "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
           "<function=now>\n</function>\n</tool_call>\nDone.\n<tool_call>\n<function=f>\n"
           "<parameter=a>\n1\n</parameter>\n<parameter=b>\ncut",
           w, N(w));
    /* Each piece arrives as soon as its parameter is complete. */
    static const struct {
        const char *feed;
        char kind; /* of the last event: 'B', 'A', 'S', or 0 for none */
        const char *text;
    } steps[] = {
        {"<tool_call>\n<function=get_wea", 0, NULL},
        {"ther>\n", 'B', "get_weather"},
        {"<parameter=city>\nPar", 0, NULL},
        {"is\n</parameter>", 'A', "{\"city\":\"Paris\""},
        {"\n<parameter=days>\n3\n</param", 0, NULL},
        {"eter>\n", 'A', ",\"days\":3"},
        {"</function>\n</tool_call", 0, NULL},
        {">", 'S', "{\"city\":\"Paris\",\"days\":3}"},
    };
    struct hr_chat_parser *p;
    struct hr_err err;
    struct hr_chat_events ev;
    assert_int_equal(hr_chat_parser_init(&o, &p, &err), HR_OK);
    for (size_t i = 0; i < N(steps); i++) {
        assert_int_equal(hr_chat_parser_feed(p, steps[i].feed, strlen(steps[i].feed), &ev, &err),
                         HR_OK);
        if (!steps[i].kind) {
            assert_int_equal(ev.n, 0);
            continue;
        }
        assert_true(ev.n > 0);
        const struct hr_chat_event *e = &ev.ev[ev.n - 1];
        assert_int_equal(e->call_index, 0);
        if (steps[i].kind == 'B') {
            assert_int_equal(e->kind, HR_CHAT_EVENT_TOOL_CALL_BEGIN);
            assert_string_equal(e->name, steps[i].text);
        } else if (steps[i].kind == 'A') {
            assert_int_equal(e->kind, HR_CHAT_EVENT_TOOL_ARGS);
            assert_string_equal(e->text, steps[i].text);
        } else {
            assert_int_equal(e->kind, HR_CHAT_EVENT_TOOL_CALL);
            assert_true(e->streamed);
            assert_string_equal(e->arguments, steps[i].text);
            assert_int_equal(ev.n, 2); /* the closing "}" piece, then the call */
            assert_string_equal(ev.ev[0].text, "}");
        }
    }
    assert_int_equal(hr_chat_parser_finish(p, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 0);
    hr_chat_parser_free(p);
    json_decref(tools);
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
        if (f == HR_CHAT_FORMAT_HARMONY) /* no <think>: see test_harmony_* */
            continue;
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

/* ---- harmony (gpt-oss) ---- */

/* What gpt-oss writes after the prompt's "<|start|>assistant": reasoning in
 * the analysis channel, then a call (recipient after the channel, as the
 * model writes it; <|call|> is end-of-generation, so the server's stream
 * ends before it), or a final answer. */
static void test_harmony_turns(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HARMONY);
    const struct want w1[] = {
        R("The user asks for the weather in Paris. Use get_weather."),
        T("get_weather", "{\"city\":\"Paris\",\"days\":3}"),
    };
    const char *call = "<|channel|>analysis<|message|>The user asks for the weather in Paris. "
                       "Use get_weather.<|end|><|start|>assistant<|channel|>commentary "
                       "to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
                       "\"Paris\", \"days\": 3}";
    expect(&o, call, w1, N(w1));
    /* The same with the <|call|> the server would not feed, and with the
     * recipient in the role header (as the template renders history). */
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s<|call|>", call);
    expect(&o, buf, w1, N(w1));
    const struct want w2[] = {T("get_weather", "{\"city\":\"Paris\"}")};
    expect(&o, " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Paris\"}",
           w2, N(w2));
    /* Reasoning, a preamble in commentary, and the final answer; <|return|>
     * ends it when fed. */
    const struct want w3[] = {
        R("Tool said 18C."),
        C("Checking once more.Paris: 18 °C, sunny."),
    };
    expect(&o,
           "<|channel|>analysis<|message|>Tool said 18C.<|end|><|start|>assistant<|channel|>"
           "commentary<|message|>Checking once more.<|end|><|start|>assistant<|channel|>final"
           "<|message|>Paris: 18 °C, sunny.<|return|>",
           w3, N(w3));
    /* No reasoning at all; the final channel without tools offered. */
    const struct want w4[] = {C("Hello <b>there</b> <|not a marker|>")};
    o.tools = false;
    expect(&o, "<|channel|>final<|message|>Hello <b>there</b> <|not a marker|>", w4, N(w4));
    /* Without tools a call is not run: its arguments are content. */
    const struct want w5[] = {R("think"), C("{\"a\":1}")};
    expect(&o,
           "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary "
           "to=functions.f <|constrain|>json<|message|>{\"a\":1}",
           w5, N(w5));
}

/* Harmony streams: a header is held until <|message|>, then the body goes
 * out as it arrives, holding only a possible <|end|>. */
static void test_harmony_latency(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HARMONY);
    struct hr_chat_parser *p;
    struct hr_err err;
    struct hr_chat_events ev;
    assert_int_equal(hr_chat_parser_init(&o, &p, &err), HR_OK);
    const char *a = "<|channel|>analysis<|mess";
    assert_int_equal(hr_chat_parser_feed(p, a, strlen(a), &ev, &err), HR_OK);
    assert_int_equal(ev.n, 0);
    const char *b = "age|>Think about it <|en";
    assert_int_equal(hr_chat_parser_feed(p, b, strlen(b), &ev, &err), HR_OK);
    assert_int_equal(ev.n, 1);
    assert_int_equal(ev.ev[0].kind, HR_CHAT_EVENT_REASONING);
    assert_string_equal(ev.ev[0].text, "Think about it");
    const char *c = "d|><|start|>assistant<|channel|>final<|message|>The answer";
    assert_int_equal(hr_chat_parser_feed(p, c, strlen(c), &ev, &err), HR_OK);
    assert_int_equal(ev.n, 1);
    assert_int_equal(ev.ev[0].kind, HR_CHAT_EVENT_CONTENT);
    assert_string_equal(ev.ev[0].text, "The answer");
    assert_int_equal(hr_chat_parser_finish(p, &ev, &err), HR_OK);
    assert_int_equal(ev.n, 0);
    hr_chat_parser_free(p);
}

/* Malformed harmony: text that is no header, a header without a channel,
 * arguments that are not an object, a stream cut inside a header. */
static void test_harmony_malformed(void **state)
{
    (void)state;
    struct hr_chat_parse_opts o = opts(HR_CHAT_FORMAT_HARMONY);
    expect_text(&o, "Plain text, no header.");
    expect_text(&o, "<|channel|>final");
    const struct want w1[] = {C("Hi.")};
    expect(&o, "<|channel|>final<|message|>Hi.<|end|>\n", w1, N(w1));
    const struct want w2[] = {
        R("r"),
        C("<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>"
          "{\"a\": [1, 2"),
    };
    expect(&o,
           "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>commentary "
           "to=functions.f <|constrain|>json<|message|>{\"a\": [1, 2",
           w2, N(w2));
    const struct want w3[] = {C("to=x<|message|>hello")};
    expect(&o, "to=x<|message|>hello", w3, N(w3));
    /* Whitespace: before a header dropped, before text kept. */
    const struct want w4[] = {C(" \nno header")};
    expect(&o, " \nno header", w4, N(w4));
    const struct want w5[] = {R("a"), C("b")};
    expect(&o, "\n<|channel|>analysis<|message|>a<|end|>\n\n<|start|>assistant<|channel|>final<|message|>b",
           w5, N(w5));
    /* The completions API (reasoning off) sees the markup raw. */
    o.reasoning = false;
    o.tools = false;
    expect_text(&o, "<|channel|>analysis<|message|>x<|end|>");
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
    /* Qwen3-Coder and Qwen3.5 (the real templates are checked by
     * tests/e2e/coder-tools.test.mjs): all three markers are needed. */
    assert_int_equal(hr_chat_format_detect("{{- '\\n<tool_call>\\n<function=' + tool_call.name + "
                                           "'>\\n' }}{{- '<parameter=' + args_name + '>\\n' }}"),
                     HR_CHAT_FORMAT_QWEN3_CODER);
    assert_int_equal(hr_chat_format_detect("<tool_call> <function=f>"), HR_CHAT_FORMAT_HERMES);
    assert_int_equal(hr_chat_format_detect("<function=f> <parameter=x>"), HR_CHAT_FORMAT_GENERIC);
    assert_string_equal(hr_chat_format_name(HR_CHAT_FORMAT_QWEN3_CODER), "qwen3-coder");
    /* gpt-oss (the real template is checked by tests/e2e/harmony.test.mjs). */
    assert_int_equal(hr_chat_format_detect("{{- \"<|start|>assistant<|channel|>final<|message|>\" "
                                           "}} <tool_call>"),
                     HR_CHAT_FORMAT_HARMONY);
    assert_string_equal(hr_chat_format_name(HR_CHAT_FORMAT_HARMONY), "harmony");
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
        cmocka_unit_test(test_qwen3_coder_calls),
        cmocka_unit_test(test_qwen3_coder_types),
        cmocka_unit_test(test_qwen3_coder_bare),
        cmocka_unit_test(test_qwen3_coder_reasoning),
        cmocka_unit_test(test_qwen3_coder_malformed),
        cmocka_unit_test(test_qwen3_coder_stream),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_generic),
        cmocka_unit_test(test_empty_and_whitespace),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_long_whitespace),
        cmocka_unit_test(test_held_cap),
        cmocka_unit_test(test_streaming_latency),
        cmocka_unit_test(test_harmony_turns),
        cmocka_unit_test(test_harmony_malformed),
        cmocka_unit_test(test_harmony_latency),
        cmocka_unit_test(test_format_detect),
        cmocka_unit_test(test_call_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
