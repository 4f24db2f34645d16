/*
 * test-api-writer.c - src/server/api-writer.c, api-error.c, api-buf.c: the
 * bytes of responses and errors in the Anthropic and OpenAI shapes.
 *
 * Every output is parsed back: SSE into (event name, JSON data) messages,
 * each data line through jansson, and compared with json_equal to the
 * object the protocol asks for, message by message and in order. Streams
 * are also folded back into one document the way the SDKs accumulate them
 * (Anthropic's MessageStream, OpenAI's ChatCompletionStream) and compared
 * with what the same events give when not streaming, so the deltas and the
 * whole document cannot drift apart.
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
#include <jansson.h>

#include "base/rand.h"
#include "server/api.h"

#define SEED 1234

/* ---- helpers ---- */

static void assert_json_eq(json_t *got, json_t *want)
{
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
        char *w = json_dumps(want, JSON_COMPACT | JSON_ENCODE_ANY);
        print_error("got:  %s\nwant: %s\n", g ? g : "(null)", w ? w : "(null)");
        free(g);
        free(w);
        fail();
    }
}

static json_t *parse(const char *s, size_t n)
{
    json_error_t e;
    json_t *v = json_loadb(s, n, JSON_ALLOW_NUL, &e);
    if (!v) {
        print_error("bad JSON (%s): %.*s\n", e.text, (int)n, s);
        fail();
    }
    return v;
}

struct msg {
    char event[64]; /* "" when the message has no event line */
    bool comment;   /* an SSE comment (": ping") */
    bool done;      /* data: [DONE] */
    json_t *data;
};

struct msgs {
    struct msg v[64];
    size_t n;
};

/* Splits an SSE stream into messages; every one must end with a blank line. */
static void sse_parse(const char *s, size_t n, struct msgs *m)
{
    memset(m, 0, sizeof(*m));
    size_t i = 0;
    while (i < n) {
        const char *end = strstr(s + i, "\n\n");
        assert_non_null(end);
        assert_true(m->n < 64);
        struct msg *g = &m->v[m->n++];
        size_t stop = (size_t)(end - s);
        while (i < stop) {
            const char *nl = memchr(s + i, '\n', stop - i);
            size_t le = nl ? (size_t)(nl - s) : stop;
            const char *line = s + i;
            size_t ll = le - i;
            if (ll >= 7 && memcmp(line, "event: ", 7) == 0) {
                assert_true(ll - 7 < sizeof(g->event));
                memcpy(g->event, line + 7, ll - 7);
            } else if (ll >= 6 && memcmp(line, "data: ", 6) == 0) {
                assert_null(g->data);
                assert_false(g->done);
                if (ll - 6 == 6 && memcmp(line + 6, "[DONE]", 6) == 0)
                    g->done = true;
                else
                    g->data = parse(line + 6, ll - 6);
            } else if (ll >= 1 && line[0] == ':') {
                g->comment = true;
            } else {
                print_error("unexpected SSE line: %.*s\n", (int)ll, line);
                fail();
            }
            i = le + 1;
        }
        i = stop + 2;
    }
}

static void msgs_free(struct msgs *m)
{
    for (size_t i = 0; i < m->n; i++) json_decref(m->v[i].data);
    m->n = 0;
}

static json_t *jstr(const char *s, size_t n)
{
    return json_stringn(s, n);
}

/* ---- scripted events ---- */

static struct hr_chat_event ev_content(const char *s)
{
    return (struct hr_chat_event){.kind = HR_CHAT_EVENT_CONTENT, .text = s, .len = strlen(s)};
}

static struct hr_chat_event ev_reason(const char *s)
{
    return (struct hr_chat_event){.kind = HR_CHAT_EVENT_REASONING, .text = s, .len = strlen(s)};
}

static struct hr_chat_event ev_call(size_t index, const char *name, const char *args,
                                    const char *id)
{
    return (struct hr_chat_event){.kind = HR_CHAT_EVENT_TOOL_CALL,
                                  .call_index = index,
                                  .name = name,
                                  .arguments = args,
                                  .arguments_len = strlen(args),
                                  .id = id};
}

/* A streamed call's start and one piece of its arguments (qwen3-coder). */
static struct hr_chat_event ev_begin(size_t index, const char *name)
{
    return (struct hr_chat_event){
        .kind = HR_CHAT_EVENT_TOOL_CALL_BEGIN, .call_index = index, .name = name};
}

static struct hr_chat_event ev_args(size_t index, const char *piece)
{
    return (struct hr_chat_event){
        .kind = HR_CHAT_EVENT_TOOL_ARGS, .call_index = index, .text = piece, .len = strlen(piece)};
}

#define ARGS0 "{\"city\":\"Paris\",\"n\":0.1}"
#define ARGS1 "{\"q\":\"x\\\"y\\u00e9\",\"list\":[1,2,{}]}"

/* reasoning, text, two calls: the whole vocabulary of events */
static const struct hr_chat_event *script_full(size_t *n)
{
    static struct hr_chat_event ev[6];
    ev[0] = ev_reason("Let me think.");
    ev[1] = ev_reason(" More.");
    ev[2] = ev_content("Hello, ");
    ev[3] = ev_content("world! \xc3\xbcn\xc3\xaf\n\"q\" \\ \t\x01 \xe2\x80\xa8");
    ev[4] = ev_call(0, "get_weather", ARGS0, NULL);
    ev[5] = ev_call(1, "lookup", ARGS1, NULL);
    *n = 6;
    return ev;
}

static const char *stops[] = {"STOP", "END"};

static struct hr_api_writer_config config(enum hr_api_kind kind, bool stream)
{
    static const char *const ids[] = {"msg_test", "chatcmpl-test", "cmpl-test"};
    return (struct hr_api_writer_config){.kind = kind,
                                         .stream = stream,
                                         .model = "test-model",
                                         .id = ids[kind],
                                         .created = 1700000000,
                                         .n_prompt = 100,
                                         .n_cached = 40,
                                         .stop = stops,
                                         .n_stop = 2,
                                         .seed = SEED};
}

/* start, every event, finish; checks that each streaming call appended
 * whole messages and that non-streaming calls appended nothing before
 * finish. */
static void run(const struct hr_api_writer_config *cfg, const struct hr_chat_event *ev, size_t n,
                enum hr_api_finish finish, int32_t stop_index, uint32_t n_output,
                struct hr_api_buf *out)
{
    struct hr_api_writer *w;
    struct hr_err err;
    assert_int_equal(hr_api_writer_init(cfg, &w, &err), HR_OK);
    assert_int_equal(hr_api_writer_start(w, out), HR_OK);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(hr_api_writer_event(w, &ev[i], out), HR_OK);
        if (cfg->stream && out->len)
            assert_memory_equal(out->data + out->len - 2, "\n\n", 2);
        else if (!cfg->stream)
            assert_int_equal(out->len, 0);
    }
    assert_int_equal(hr_api_writer_finish(w, finish, stop_index, n_output, out), HR_OK);
    hr_api_writer_free(w);
}

/* The ids the writer draws for calls without one, in order. */
static void expected_ids(const char *prefix, char ids[][64], size_t n)
{
    struct hr_rng r;
    hr_rng_seed(&r, SEED);
    for (size_t i = 0; i < n; i++) hr_chat_call_id_make(ids[i], 64, prefix, &r);
}

/* ---- Anthropic: expected messages ---- */

static void expect_event(const struct msg *m, const char *event, json_t *want)
{
    assert_string_equal(m->event, event);
    assert_false(m->comment);
    assert_non_null(m->data);
    assert_json_eq(m->data, want);
    json_decref(want);
}

static json_t *a_usage(int in, int out, int cached)
{
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", in, "output_tokens", out,
                     "cache_read_input_tokens", cached, "cache_creation_input_tokens", 0);
}

static json_t *a_start(void)
{
    return json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}}", "type", "message_start",
                     "message", "id", "msg_test", "type", "message", "role", "assistant", "model",
                     "test-model", "content", "stop_reason", "stop_sequence", "usage",
                     a_usage(60, 0, 40));
}

static json_t *a_block_start(int index, json_t *block)
{
    return json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", index,
                     "content_block", block);
}

static json_t *a_delta(int index, const char *type, const char *field, const char *text)
{
    return json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", index,
                     "delta", "type", type, field, text);
}

static json_t *a_stop(int index)
{
    return json_pack("{s:s,s:i}", "type", "content_block_stop", "index", index);
}

static json_t *a_message_delta(const char *reason, const char *seq, int n_output)
{
    return json_pack("{s:s,s:{s:s,s:s?},s:{s:i}}", "type", "message_delta", "delta", "stop_reason",
                     reason, "stop_sequence", seq, "usage", "output_tokens", n_output);
}

static void test_anthropic_stream_thinking(void **state)
{
    (void)state;
    size_t n;
    const struct hr_chat_event *ev = script_full(&n);
    struct hr_api_writer_config cfg = config(HR_API_ANTHROPIC, true);
    cfg.thinking = true;
    struct hr_api_buf out = {0};
    run(&cfg, ev, n, HR_API_FINISH_STOP, -1, 42, &out);
    char ids[2][64];
    expected_ids("toolu_", ids, 2);

    struct msgs m;
    sse_parse(out.data, out.len, &m);
    assert_int_equal(m.n, 18);
    size_t k = 0;
    expect_event(&m.v[k++], "message_start", a_start());
    expect_event(&m.v[k++], "content_block_start",
                 a_block_start(0, json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "",
                                            "signature", "")));
    expect_event(&m.v[k++], "content_block_delta",
                 a_delta(0, "thinking_delta", "thinking", "Let me think."));
    expect_event(&m.v[k++], "content_block_delta",
                 a_delta(0, "thinking_delta", "thinking", " More."));
    expect_event(&m.v[k++], "content_block_delta",
                 a_delta(0, "signature_delta", "signature", "aGVhZHJvb206bXNnX3Rlc3Q6MA=="));
    expect_event(&m.v[k++], "content_block_stop", a_stop(0));
    expect_event(&m.v[k++], "content_block_start",
                 a_block_start(1, json_pack("{s:s,s:s}", "type", "text", "text", "")));
    expect_event(&m.v[k++], "content_block_delta", a_delta(1, "text_delta", "text", ev[2].text));
    expect_event(&m.v[k++], "content_block_delta", a_delta(1, "text_delta", "text", ev[3].text));
    expect_event(&m.v[k++], "content_block_stop", a_stop(1));
    expect_event(&m.v[k++], "content_block_start",
                 a_block_start(2, json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", ids[0],
                                            "name", "get_weather", "input")));
    expect_event(&m.v[k++], "content_block_delta",
                 a_delta(2, "input_json_delta", "partial_json", ARGS0));
    expect_event(&m.v[k++], "content_block_stop", a_stop(2));
    expect_event(&m.v[k++], "content_block_start",
                 a_block_start(3, json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", ids[1],
                                            "name", "lookup", "input")));
    expect_event(&m.v[k++], "content_block_delta",
                 a_delta(3, "input_json_delta", "partial_json", ARGS1));
    expect_event(&m.v[k++], "content_block_stop", a_stop(3));
    expect_event(&m.v[k++], "message_delta", a_message_delta("tool_use", NULL, 42));
    expect_event(&m.v[k++], "message_stop", json_pack("{s:s}", "type", "message_stop"));
    assert_int_equal(k, m.n);
    /* the literal wire form of the first line, as the SDKs' SSE parsers see it */
    assert_memory_equal(out.data, "event: message_start\ndata: {\"type\":\"message_start\"", 50);
    msgs_free(&m);
    hr_api_buf_free(&out);
}

static void test_anthropic_stream_no_thinking(void **state)
{
    (void)state;
    size_t n;
    const struct hr_chat_event *ev = script_full(&n);
    struct hr_api_writer_config cfg = config(HR_API_ANTHROPIC, true);
    struct hr_api_buf out = {0};
    run(&cfg, ev, n, HR_API_FINISH_STOP, -1, 42, &out);
    struct msgs m;
    sse_parse(out.data, out.len, &m);
    /* start, text block (start, 2 deltas, stop), 2 calls x 3, message_delta, message_stop */
    assert_int_equal(m.n, 1 + 4 + 6 + 2);
    assert_string_equal(m.v[1].event, "content_block_start");
    expect_event(&m.v[1], "content_block_start",
                 a_block_start(0, json_pack("{s:s,s:s}", "type", "text", "text", "")));
    expect_event(
        &m.v[5], "content_block_start",
        a_block_start(1, json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id",
                                   json_string_value(json_object_get(
                                       json_object_get(m.v[5].data, "content_block"), "id")),
                                   "name", "get_weather", "input")));
    expect_event(&m.v[10], "content_block_stop", a_stop(2));
    assert_null(strstr(out.data, "thinking"));
    assert_null(strstr(out.data, "Let me think"));
    msgs_free(&m);
    hr_api_buf_free(&out);
}

static json_t *a_document(json_t *content, const char *reason, const char *seq, int n_output)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:s?,s:o}", "id", "msg_test", "type", "message",
                     "role", "assistant", "model", "test-model", "content", content, "stop_reason",
                     reason, "stop_sequence", seq, "usage", a_usage(60, n_output, 40));
}

static void test_anthropic_document(void **state)
{
    (void)state;
    size_t n;
    const struct hr_chat_event *ev = script_full(&n);
    char ids[2][64];
    expected_ids("toolu_", ids, 2);
    char text[256];
    snprintf(text, sizeof(text), "%s%s", ev[2].text, ev[3].text);

    for (int thinking = 0; thinking < 2; thinking++) {
        struct hr_api_writer_config cfg = config(HR_API_ANTHROPIC, false);
        cfg.thinking = thinking;
        struct hr_api_buf out = {0};
        run(&cfg, ev, n, HR_API_FINISH_STOP, -1, 42, &out);
        json_t *got = parse(out.data, out.len);
        json_t *content = json_array();
        if (thinking)
            json_array_append_new(content, json_pack("{s:s,s:s,s:s}", "type", "thinking",
                                                     "thinking", "Let me think. More.", "signature",
                                                     "aGVhZHJvb206bXNnX3Rlc3Q6MA=="));
        json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text", "text", text));
        json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                                 ids[0], "name", "get_weather", "input",
                                                 parse(ARGS0, strlen(ARGS0))));
        json_array_append_new(content,
                              json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", ids[1],
                                        "name", "lookup", "input", parse(ARGS1, strlen(ARGS1))));
        json_t *want = a_document(content, "tool_use", NULL, 42);
        assert_json_eq(got, want);
        /* The arguments are spliced as written: numbers keep their text. */
        assert_non_null(strstr(out.data, "\"input\":" ARGS0));
        assert_non_null(strstr(out.data, "\"input\":" ARGS1));
        json_decref(got);
        json_decref(want);
        hr_api_buf_free(&out);
    }
}

/* Folds an Anthropic stream into a Message as the SDK's MessageStream does. */
static json_t *anthropic_fold(const struct msgs *m)
{
    json_t *msg = NULL;
    json_t *partial = json_array(); /* partial_json text per block */
    for (size_t i = 0; i < m->n; i++) {
        const struct msg *g = &m->v[i];
        if (g->comment || strcmp(g->event, "ping") == 0) continue;
        assert_string_equal(json_string_value(json_object_get(g->data, "type")), g->event);
        if (strcmp(g->event, "message_start") == 0) {
            assert_null(msg);
            msg = json_deep_copy(json_object_get(g->data, "message"));
            continue;
        }
        assert_non_null(msg);
        json_t *content = json_object_get(msg, "content");
        if (strcmp(g->event, "content_block_start") == 0) {
            assert_int_equal(json_integer_value(json_object_get(g->data, "index")),
                             json_array_size(content));
            json_array_append(content, json_object_get(g->data, "content_block"));
            json_array_append_new(partial, json_string(""));
        } else if (strcmp(g->event, "content_block_delta") == 0) {
            size_t idx = (size_t)json_integer_value(json_object_get(g->data, "index"));
            assert_true(idx + 1 == json_array_size(content)); /* only the last block is open */
            json_t *b = json_array_get(content, idx);
            json_t *d = json_object_get(g->data, "delta");
            const char *type = json_string_value(json_object_get(d, "type"));
            const char *field = strcmp(type, "text_delta") == 0        ? "text"
                                : strcmp(type, "thinking_delta") == 0  ? "thinking"
                                : strcmp(type, "signature_delta") == 0 ? "signature"
                                                                       : "partial_json";
            json_t *have = strcmp(field, "partial_json") == 0 ? json_array_get(partial, idx)
                                                              : json_object_get(b, field);
            json_t *add = json_object_get(d, field);
            assert_non_null(have);
            assert_non_null(add);
            size_t n1 = json_string_length(have), n2 = json_string_length(add);
            char *cat = malloc(n1 + n2 + 1);
            memcpy(cat, json_string_value(have), n1);
            memcpy(cat + n1, json_string_value(add), n2);
            json_string_setn(have, cat, n1 + n2);
            free(cat);
        } else if (strcmp(g->event, "content_block_stop") == 0) {
            size_t idx = (size_t)json_integer_value(json_object_get(g->data, "index"));
            json_t *b = json_array_get(content, idx);
            json_t *p = json_array_get(partial, idx);
            if (strcmp(json_string_value(json_object_get(b, "type")), "tool_use") == 0)
                json_object_set_new(b, "input", parse(json_string_value(p), json_string_length(p)));
            if (json_object_get(b, "signature"))
                assert_true(json_string_length(json_object_get(b, "signature")) > 0);
        } else if (strcmp(g->event, "message_delta") == 0) {
            json_t *d = json_object_get(g->data, "delta");
            json_object_set(msg, "stop_reason", json_object_get(d, "stop_reason"));
            json_object_set(msg, "stop_sequence", json_object_get(d, "stop_sequence"));
            json_object_set(json_object_get(msg, "usage"), "output_tokens",
                            json_object_get(json_object_get(g->data, "usage"), "output_tokens"));
        } else {
            assert_string_equal(g->event, "message_stop");
            assert_int_equal(i + 1, m->n);
        }
    }
    json_decref(partial);
    return msg;
}

/* Every script, finish and thinking setting: stream folded == document. */
static const struct {
    enum hr_api_finish finish;
    int32_t stop_index;
} finishes[] = {
    {HR_API_FINISH_STOP, -1},   {HR_API_FINISH_STOP_SEQ, 1}, {HR_API_FINISH_STOP_SEQ, 7},
    {HR_API_FINISH_LENGTH, -1}, {HR_API_FINISH_STOP_SEQ, 0},
};

static void scripts(size_t s, const struct hr_chat_event **ev, size_t *n)
{
    static struct hr_chat_event v[8];
    switch (s) {
    case 0:
        *ev = script_full(n);
        return;
    case 1: /* nothing at all */
        *ev = v;
        *n = 0;
        return;
    case 2: /* text with a NUL, then reasoning again, then text */
        v[0] = (struct hr_chat_event){.kind = HR_CHAT_EVENT_CONTENT, .text = "a\0b", .len = 3};
        v[1] = ev_reason("late thought");
        v[2] = ev_content("c");
        v[3] = ev_call(0, "f", "{}", "abc123XYZ");
        v[4] = ev_content("after the call");
        *ev = v;
        *n = 5;
        return;
    case 3: /* calls only */
        v[0] = ev_call(0, "f", "{\"a\":1}", NULL);
        v[1] = ev_call(1, "g", "{}", NULL);
        *ev = v;
        *n = 2;
        return;
    case 4: { /* streamed calls (qwen3-coder with stream_args): begin, pieces, the call */
        static struct hr_chat_event w[10];
        w[0] = ev_content("Checking.");
        w[1] = ev_begin(0, "get_weather");
        w[2] = ev_args(0, "{\"city\":\"Paris\"");
        w[3] = ev_args(0, ",\"n\":0.1}");
        w[4] = ev_call(0, "get_weather", ARGS0, NULL);
        w[4].streamed = true;
        w[5] = ev_begin(1, "now");
        w[6] = ev_args(1, "{}");
        w[7] = ev_call(1, "now", "{}", NULL);
        w[7].streamed = true;
        w[8] = ev_content("Then more text.");
        *ev = w;
        *n = 9;
        return;
    }
    }
    fail();
}

#define N_SCRIPTS 5

static void test_anthropic_stream_equals_document(void **state)
{
    (void)state;
    for (size_t s = 0; s < N_SCRIPTS; s++)
        for (size_t f = 0; f < sizeof(finishes) / sizeof(finishes[0]); f++)
            for (int thinking = 0; thinking < 2; thinking++) {
                const struct hr_chat_event *ev;
                size_t n;
                scripts(s, &ev, &n);
                struct hr_api_writer_config cfg = config(HR_API_ANTHROPIC, true);
                cfg.thinking = thinking;
                struct hr_api_buf a = {0}, b = {0};
                run(&cfg, ev, n, finishes[f].finish, finishes[f].stop_index, 17, &a);
                cfg.stream = false;
                run(&cfg, ev, n, finishes[f].finish, finishes[f].stop_index, 17, &b);
                struct msgs m;
                sse_parse(a.data, a.len, &m);
                json_t *folded = anthropic_fold(&m);
                json_t *doc = parse(b.data, b.len);
                assert_json_eq(folded, doc);
                json_decref(folded);
                json_decref(doc);
                msgs_free(&m);
                hr_api_buf_free(&a);
                hr_api_buf_free(&b);
            }
}

static void test_anthropic_stop_reasons(void **state)
{
    (void)state;
    struct hr_chat_event text = ev_content("hi");
    struct hr_chat_event call = ev_call(0, "f", "{}", NULL);
    const struct {
        const struct hr_chat_event *ev;
        enum hr_api_finish finish;
        int32_t stop_index;
        const char *reason, *seq;
    } cases[] = {
        {&text, HR_API_FINISH_STOP, -1, "end_turn", NULL},
        {&text, HR_API_FINISH_STOP_SEQ, 1, "stop_sequence", "END"},
        {&text, HR_API_FINISH_STOP_SEQ, 0, "stop_sequence", "STOP"},
        {&text, HR_API_FINISH_STOP_SEQ, 2, "stop_sequence", NULL},
        {&text, HR_API_FINISH_STOP_SEQ, -1, "stop_sequence", NULL},
        {&text, HR_API_FINISH_LENGTH, 1, "max_tokens", NULL},
        {&call, HR_API_FINISH_STOP, -1, "tool_use", NULL},
        {&call, HR_API_FINISH_LENGTH, -1, "max_tokens", NULL},
        {&call, HR_API_FINISH_STOP_SEQ, 1, "stop_sequence", "END"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct hr_api_writer_config cfg = config(HR_API_ANTHROPIC, false);
        struct hr_api_buf out = {0};
        run(&cfg, cases[i].ev, 1, cases[i].finish, cases[i].stop_index, 3, &out);
        json_t *doc = parse(out.data, out.len);
        json_t *want =
            json_pack("{s:s,s:s?}", "stop_reason", cases[i].reason, "stop_sequence", cases[i].seq);
        json_t *got = json_pack("{s:O,s:O}", "stop_reason", json_object_get(doc, "stop_reason"),
                                "stop_sequence", json_object_get(doc, "stop_sequence"));
        assert_json_eq(got, want);
        json_decref(got);
        json_decref(want);
        json_decref(doc);
        hr_api_buf_free(&out);
    }
}

static void test_anthropic_empty(void **state)
{
    (void)state;
    struct hr_api_writer_config cfg = config(HR_API_ANTHROPIC, true);
    struct hr_api_buf out = {0};
    run(&cfg, NULL, 0, HR_API_FINISH_LENGTH, -1, 0, &out);
    struct msgs m;
    sse_parse(out.data, out.len, &m);
    assert_int_equal(m.n, 3);
    expect_event(&m.v[0], "message_start", a_start());
    expect_event(&m.v[1], "message_delta", a_message_delta("max_tokens", NULL, 0));
    expect_event(&m.v[2], "message_stop", json_pack("{s:s}", "type", "message_stop"));
    msgs_free(&m);
    hr_api_buf_reset(&out);

    cfg.stream = false;
    run(&cfg, NULL, 0, HR_API_FINISH_STOP, -1, 0, &out);
    json_t *doc = parse(out.data, out.len);
    json_t *want = a_document(json_array(), "end_turn", NULL, 0);
    assert_json_eq(doc, want);
    json_decref(doc);
    json_decref(want);
    hr_api_buf_free(&out);
}

/* A call that carries the model's id keeps it and draws nothing. */
static void test_call_ids(void **state)
{
    (void)state;
    struct hr_chat_event ev[2] = {ev_call(0, "f", "{}", "abc123XYZ"), ev_call(1, "g", "{}", NULL)};
    char anth[1][64], oai[1][64];
    expected_ids("toolu_", anth, 1);
    expected_ids("call_", oai, 1);
    assert_int_equal(strlen(anth[0]), 6 + 24);

    struct hr_api_writer_config cfg = config(HR_API_ANTHROPIC, false);
    struct hr_api_buf out = {0};
    run(&cfg, ev, 2, HR_API_FINISH_STOP, -1, 1, &out);
    json_t *doc = parse(out.data, out.len);
    json_t *c = json_object_get(doc, "content");
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "id")),
                        "abc123XYZ");
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 1), "id")), anth[0]);
    json_decref(doc);
    hr_api_buf_reset(&out);

    cfg = config(HR_API_OPENAI_CHAT, false);
    run(&cfg, ev, 2, HR_API_FINISH_STOP, -1, 1, &out);
    doc = parse(out.data, out.len);
    json_t *calls = json_object_get(
        json_object_get(json_array_get(json_object_get(doc, "choices"), 0), "message"),
        "tool_calls");
    assert_string_equal(json_string_value(json_object_get(json_array_get(calls, 0), "id")),
                        "abc123XYZ");
    assert_string_equal(json_string_value(json_object_get(json_array_get(calls, 1), "id")), oai[0]);
    json_decref(doc);
    hr_api_buf_free(&out);

    /* No id in the config: one is made in the API's form. */
    const char *prefix[] = {"msg_", "chatcmpl-", "cmpl-"};
    for (int k = 0; k < 3; k++) {
        cfg = config((enum hr_api_kind)k, false);
        cfg.id = NULL;
        run(&cfg, NULL, 0, HR_API_FINISH_STOP, -1, 1, &out);
        doc = parse(out.data, out.len);
        const char *id = json_string_value(json_object_get(doc, "id"));
        assert_non_null(id);
        assert_int_equal(strncmp(id, prefix[k], strlen(prefix[k])), 0);
        assert_int_equal(strlen(id), strlen(prefix[k]) + 24);
        json_decref(doc);
        hr_api_buf_free(&out);
    }
}

/* ---- OpenAI chat ---- */

static json_t *o_usage(int prompt, int completion, int cached)
{
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", prompt, "completion_tokens",
                     completion, "total_tokens", prompt + completion, "prompt_tokens_details",
                     "cached_tokens", cached);
}

static json_t *o_chunk(json_t *delta, const char *finish, bool usage_null)
{
    json_t *c = json_pack("{s:s,s:s,s:i,s:s,s:s,s:[{s:i,s:o,s:n,s:s?}]}", "id", "chatcmpl-test",
                          "object", "chat.completion.chunk", "created", 1700000000, "model",
                          "test-model", "system_fingerprint", "headroom", "choices", "index", 0,
                          "delta", delta, "logprobs", "finish_reason", finish);
    if (usage_null) json_object_set_new(c, "usage", json_null());
    return c;
}

static void expect_data(const struct msg *m, json_t *want)
{
    assert_string_equal(m->event, "");
    assert_non_null(m->data);
    assert_json_eq(m->data, want);
    json_decref(want);
}

static void test_chat_stream(void **state)
{
    (void)state;
    size_t n;
    const struct hr_chat_event *ev = script_full(&n);
    char ids[2][64];
    expected_ids("call_", ids, 2);
    for (int usage = 0; usage < 2; usage++) {
        struct hr_api_writer_config cfg = config(HR_API_OPENAI_CHAT, true);
        cfg.include_usage = usage;
        cfg.thinking = false; /* no effect on OpenAI: reasoning always streams */
        struct hr_api_buf out = {0};
        run(&cfg, ev, n, HR_API_FINISH_STOP, -1, 42, &out);
        struct msgs m;
        sse_parse(out.data, out.len, &m);
        assert_int_equal(m.n, 1 + 4 + 4 + 1 + (size_t)usage + 1);
        size_t k = 0;
        expect_data(&m.v[k++], o_chunk(json_pack("{s:s,s:s}", "role", "assistant", "content", ""),
                                       NULL, usage));
        expect_data(&m.v[k++],
                    o_chunk(json_pack("{s:s}", "reasoning_content", "Let me think."), NULL, usage));
        expect_data(&m.v[k++],
                    o_chunk(json_pack("{s:s}", "reasoning_content", " More."), NULL, usage));
        expect_data(&m.v[k++], o_chunk(json_pack("{s:s}", "content", ev[2].text), NULL, usage));
        expect_data(&m.v[k++], o_chunk(json_pack("{s:s}", "content", ev[3].text), NULL, usage));
        const char *names[2] = {"get_weather", "lookup"}, *args[2] = {ARGS0, ARGS1};
        for (int c = 0; c < 2; c++) {
            expect_data(&m.v[k++],
                        o_chunk(json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index",
                                          c, "id", ids[c], "type", "function", "function", "name",
                                          names[c], "arguments", ""),
                                NULL, usage));
            expect_data(&m.v[k++], o_chunk(json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls", "index",
                                                     c, "function", "arguments", args[c]),
                                           NULL, usage));
        }
        expect_data(&m.v[k++], o_chunk(json_object(), "tool_calls", usage));
        if (usage)
            expect_data(&m.v[k++],
                        json_pack("{s:s,s:s,s:i,s:s,s:s,s:[],s:o}", "id", "chatcmpl-test", "object",
                                  "chat.completion.chunk", "created", 1700000000, "model",
                                  "test-model", "system_fingerprint", "headroom", "choices",
                                  "usage", o_usage(100, 42, 40)));
        assert_true(m.v[k].done);
        assert_null(m.v[k].data);
        assert_int_equal(k + 1, m.n);
        assert_memory_equal(out.data + out.len - 14, "data: [DONE]\n\n", 14);
        assert_memory_equal(out.data, "data: {\"id\":\"chatcmpl-test\"", 27);
        msgs_free(&m);
        hr_api_buf_free(&out);
    }
}

static json_t *o_document(json_t *message, const char *finish, int n_output)
{
    return json_pack("{s:s,s:s,s:i,s:s,s:s,s:[{s:i,s:o,s:n,s:s}],s:o}", "id", "chatcmpl-test",
                     "object", "chat.completion", "created", 1700000000, "model", "test-model",
                     "system_fingerprint", "headroom", "choices", "index", 0, "message", message,
                     "logprobs", "finish_reason", finish, "usage", o_usage(100, n_output, 40));
}

static void test_chat_document(void **state)
{
    (void)state;
    size_t n;
    const struct hr_chat_event *ev = script_full(&n);
    char ids[2][64];
    expected_ids("call_", ids, 2);
    char text[256];
    snprintf(text, sizeof(text), "%s%s", ev[2].text, ev[3].text);

    struct hr_api_writer_config cfg = config(HR_API_OPENAI_CHAT, false);
    struct hr_api_buf out = {0};
    run(&cfg, ev, n, HR_API_FINISH_STOP, -1, 42, &out);
    json_t *got = parse(out.data, out.len);
    json_t *want =
        o_document(json_pack("{s:s,s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}},{s:s,s:s,s:{s:s,s:s}}]}",
                             "role", "assistant", "content", text, "reasoning_content",
                             "Let me think. More.", "tool_calls", "id", ids[0], "type", "function",
                             "function", "name", "get_weather", "arguments", ARGS0, "id", ids[1],
                             "type", "function", "function", "name", "lookup", "arguments", ARGS1),
                   "tool_calls", 42);
    assert_json_eq(got, want);
    json_decref(got);
    json_decref(want);
    hr_api_buf_reset(&out);

    /* Only calls: content null, no reasoning_content. */
    const struct hr_chat_event *ev3;
    scripts(3, &ev3, &n);
    run(&cfg, ev3, n, HR_API_FINISH_STOP, -1, 5, &out);
    got = parse(out.data, out.len);
    want =
        o_document(json_pack("{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:s}},{s:s,s:s,s:{s:s,s:s}}]}", "role",
                             "assistant", "content", "tool_calls", "id", ids[0], "type", "function",
                             "function", "name", "f", "arguments", "{\"a\":1}", "id", ids[1],
                             "type", "function", "function", "name", "g", "arguments", "{}"),
                   "tool_calls", 5);
    assert_json_eq(got, want);
    json_decref(got);
    json_decref(want);
    hr_api_buf_reset(&out);

    /* Nothing at all: content "", no tool_calls; a stop string is "stop". */
    run(&cfg, NULL, 0, HR_API_FINISH_STOP_SEQ, 1, 0, &out);
    got = parse(out.data, out.len);
    want = o_document(json_pack("{s:s,s:s}", "role", "assistant", "content", ""), "stop", 0);
    assert_json_eq(got, want);
    json_decref(got);
    json_decref(want);
    hr_api_buf_reset(&out);

    /* Text and the token limit: "length". */
    struct hr_chat_event t = ev_content("partial");
    run(&cfg, &t, 1, HR_API_FINISH_LENGTH, -1, 9, &out);
    got = parse(out.data, out.len);
    want =
        o_document(json_pack("{s:s,s:s}", "role", "assistant", "content", "partial"), "length", 9);
    assert_json_eq(got, want);
    json_decref(got);
    json_decref(want);
    hr_api_buf_free(&out);
}

/* Folds a chat stream as the OpenAI SDK's ChatCompletionStream does. */
static json_t *chat_fold(const struct msgs *m, bool usage)
{
    json_t *content = json_string(""), *reasoning = json_string(""), *calls = json_array();
    json_t *finish = NULL, *use = NULL;
    bool had_reasoning = false, had_role = false, done = false;
    for (size_t i = 0; i < m->n; i++) {
        const struct msg *g = &m->v[i];
        if (g->comment) continue;
        assert_false(done);
        if (g->done) {
            done = true;
            continue;
        }
        assert_string_equal(json_string_value(json_object_get(g->data, "object")),
                            "chat.completion.chunk");
        assert_int_equal(json_object_get(g->data, "usage") != NULL, usage);
        json_t *choices = json_object_get(g->data, "choices");
        if (json_array_size(choices) == 0) {
            assert_true(usage);
            use = json_deep_copy(json_object_get(g->data, "usage"));
            continue;
        }
        assert_null(finish); /* nothing after the finish chunk but usage */
        json_t *c = json_array_get(choices, 0);
        json_t *d = json_object_get(c, "delta");
        if (json_object_get(d, "role")) {
            assert_false(had_role);
            assert_int_equal(i, 0);
            had_role = true;
        }
        json_t *f = json_object_get(c, "finish_reason");
        if (!json_is_null(f)) finish = json_deep_copy(f);
        struct {
            const char *key;
            json_t *into;
        } texts[2] = {{"content", content}, {"reasoning_content", reasoning}};
        for (int t = 0; t < 2; t++) {
            json_t *add = json_object_get(d, texts[t].key);
            if (!add) continue;
            if (t == 1) had_reasoning = true;
            size_t n1 = json_string_length(texts[t].into), n2 = json_string_length(add);
            char *cat = malloc(n1 + n2 + 1);
            memcpy(cat, json_string_value(texts[t].into), n1);
            memcpy(cat + n1, json_string_value(add), n2);
            json_string_setn(texts[t].into, cat, n1 + n2);
            free(cat);
        }
        json_t *tc = json_object_get(d, "tool_calls");
        for (size_t k = 0; k < json_array_size(tc); k++) {
            json_t *frag = json_array_get(tc, k);
            size_t idx = (size_t)json_integer_value(json_object_get(frag, "index"));
            json_t *fn = json_object_get(frag, "function");
            if (idx == json_array_size(calls)) { /* the first fragment of a call */
                assert_non_null(json_object_get(frag, "id"));
                json_array_append_new(
                    calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", json_object_get(frag, "id"),
                                     "type", "function", "function", "name",
                                     json_object_get(fn, "name"), "arguments", ""));
            }
            json_t *a = json_object_get(json_object_get(json_array_get(calls, idx), "function"),
                                        "arguments");
            json_t *add = json_object_get(fn, "arguments");
            size_t n1 = json_string_length(a), n2 = json_string_length(add);
            char *cat = malloc(n1 + n2 + 1);
            memcpy(cat, json_string_value(a), n1);
            memcpy(cat + n1, json_string_value(add), n2);
            json_string_setn(a, cat, n1 + n2);
            free(cat);
        }
    }
    assert_true(done && had_role && finish);
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    if (json_array_size(calls) && json_string_length(content) == 0)
        json_object_set_new(msg, "content", json_null());
    else
        json_object_set(msg, "content", content);
    if (had_reasoning) json_object_set(msg, "reasoning_content", reasoning);
    if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
    json_t *doc = json_pack("{s:s,s:s,s:i,s:s,s:s,s:[{s:i,s:o,s:n,s:o}]}", "id", "chatcmpl-test",
                            "object", "chat.completion", "created", 1700000000, "model",
                            "test-model", "system_fingerprint", "headroom", "choices", "index", 0,
                            "message", msg, "logprobs", "finish_reason", finish);
    if (use) json_object_set_new(doc, "usage", use);
    json_decref(content);
    json_decref(reasoning);
    json_decref(calls);
    return doc;
}

static void test_chat_stream_equals_document(void **state)
{
    (void)state;
    for (size_t s = 0; s < N_SCRIPTS; s++)
        for (size_t f = 0; f < sizeof(finishes) / sizeof(finishes[0]); f++) {
            const struct hr_chat_event *ev;
            size_t n;
            scripts(s, &ev, &n);
            struct hr_api_writer_config cfg = config(HR_API_OPENAI_CHAT, true);
            cfg.include_usage = true;
            struct hr_api_buf a = {0}, b = {0};
            run(&cfg, ev, n, finishes[f].finish, finishes[f].stop_index, 17, &a);
            cfg.stream = false;
            run(&cfg, ev, n, finishes[f].finish, finishes[f].stop_index, 17, &b);
            struct msgs m;
            sse_parse(a.data, a.len, &m);
            json_t *folded = chat_fold(&m, true);
            json_t *doc = parse(b.data, b.len);
            assert_json_eq(folded, doc);
            json_decref(folded);
            json_decref(doc);
            msgs_free(&m);
            hr_api_buf_free(&a);
            hr_api_buf_free(&b);
        }
}

/* ---- OpenAI completions ---- */

static json_t *c_chunk(const char *text, size_t len, const char *finish, bool usage_null)
{
    json_t *c = json_pack("{s:s,s:s,s:i,s:s,s:s,s:[{s:o,s:i,s:n,s:s?}]}", "id", "cmpl-test",
                          "object", "text_completion", "created", 1700000000, "model", "test-model",
                          "system_fingerprint", "headroom", "choices", "text", jstr(text, len),
                          "index", 0, "logprobs", "finish_reason", finish);
    if (usage_null) json_object_set_new(c, "usage", json_null());
    return c;
}

static void test_completion(void **state)
{
    (void)state;
    struct hr_chat_event ev[3] = {ev_content("Once upon"), ev_content(" a time"),
                                  ev_call(0, "f", "{\"x\":1}", NULL)};
    const char *call_text = "{\"name\":\"f\",\"arguments\":{\"x\":1}}";
    for (int usage = 0; usage < 2; usage++) {
        struct hr_api_writer_config cfg = config(HR_API_OPENAI_COMPLETION, true);
        cfg.include_usage = usage;
        /* start writes nothing: completions have no role chunk */
        struct hr_api_writer *w;
        assert_int_equal(hr_api_writer_init(&cfg, &w, NULL), HR_OK);
        struct hr_api_buf out = {0};
        assert_int_equal(hr_api_writer_start(w, &out), HR_OK);
        assert_int_equal(out.len, 0);
        hr_api_writer_free(w);

        run(&cfg, ev, 3, HR_API_FINISH_LENGTH, -1, 6, &out);
        struct msgs m;
        sse_parse(out.data, out.len, &m);
        assert_int_equal(m.n, 3 + 1 + (size_t)usage + 1);
        size_t k = 0;
        expect_data(&m.v[k++], c_chunk("Once upon", 9, NULL, usage));
        expect_data(&m.v[k++], c_chunk(" a time", 7, NULL, usage));
        expect_data(&m.v[k++], c_chunk(call_text, strlen(call_text), NULL, usage));
        expect_data(&m.v[k++], c_chunk("", 0, "length", usage));
        if (usage)
            expect_data(&m.v[k++], json_pack("{s:s,s:s,s:i,s:s,s:s,s:[],s:o}", "id", "cmpl-test",
                                             "object", "text_completion", "created", 1700000000,
                                             "model", "test-model", "system_fingerprint",
                                             "headroom", "choices", "usage", o_usage(100, 6, 40)));
        assert_true(m.v[k].done);
        msgs_free(&m);
        hr_api_buf_reset(&out);

        cfg.stream = false;
        run(&cfg, ev, 3, HR_API_FINISH_STOP, -1, 6, &out);
        json_t *got = parse(out.data, out.len);
        char text[128];
        snprintf(text, sizeof(text), "Once upon a time%s", call_text);
        /* a call written as text is not a call: the finish stays "stop" */
        json_t *want =
            json_pack("{s:s,s:s,s:i,s:s,s:s,s:[{s:s,s:i,s:n,s:s}],s:o}", "id", "cmpl-test",
                      "object", "text_completion", "created", 1700000000, "model", "test-model",
                      "system_fingerprint", "headroom", "choices", "text", text, "index", 0,
                      "logprobs", "finish_reason", "stop", "usage", o_usage(100, 6, 40));
        assert_json_eq(got, want);
        json_decref(got);
        json_decref(want);
        hr_api_buf_free(&out);
    }
}

/* ---- pings, order, escaping ---- */

static void test_ping(void **state)
{
    (void)state;
    const char *want[3] = {"event: ping\ndata: {\"type\": \"ping\"}\n\n", ": ping\n\n",
                           ": ping\n\n"};
    for (int k = 0; k < 3; k++)
        for (int stream = 0; stream < 2; stream++) {
            struct hr_api_writer_config cfg = config((enum hr_api_kind)k, stream);
            struct hr_api_writer *w;
            assert_int_equal(hr_api_writer_init(&cfg, &w, NULL), HR_OK);
            struct hr_api_buf out = {0};
            /* a ping may come before start, while the request is queued */
            assert_int_equal(hr_api_writer_ping(w, &out), HR_OK);
            assert_string_equal(stream ? want[k] : "", out.len ? out.data : "");
            hr_api_buf_reset(&out);
            assert_int_equal(hr_api_writer_start(w, &out), HR_OK);
            assert_int_equal(hr_api_writer_ping(w, &out), HR_OK);
            if (stream)
                assert_non_null(strstr(out.data, want[k]));
            else
                assert_int_equal(out.len, 0);
            struct msgs m;
            sse_parse(out.data, out.len, &m);
            if (stream && k == HR_API_ANTHROPIC) {
                assert_string_equal(m.v[1].event, "ping");
                json_t *p = json_pack("{s:s}", "type", "ping");
                assert_json_eq(m.v[1].data, p);
                json_decref(p);
            }
            msgs_free(&m);
            hr_api_buf_free(&out);
            hr_api_writer_free(w);
        }
}

/* An event or finish without start still gives a well-formed stream. */
static void test_no_start(void **state)
{
    (void)state;
    struct hr_chat_event t = ev_content("x");
    for (int k = 0; k < 3; k++) {
        struct hr_api_writer_config cfg = config((enum hr_api_kind)k, true);
        struct hr_api_buf with = {0}, without = {0};
        run(&cfg, &t, 1, HR_API_FINISH_STOP, -1, 1, &with);
        struct hr_api_writer *w;
        assert_int_equal(hr_api_writer_init(&cfg, &w, NULL), HR_OK);
        assert_int_equal(hr_api_writer_event(w, &t, &without), HR_OK);
        assert_int_equal(hr_api_writer_finish(w, HR_API_FINISH_STOP, -1, 1, &without), HR_OK);
        hr_api_writer_free(w);
        assert_int_equal(with.len, without.len);
        assert_memory_equal(with.data, without.data, with.len);
        hr_api_buf_reset(&without);
        assert_int_equal(hr_api_writer_init(&cfg, &w, NULL), HR_OK);
        assert_int_equal(hr_api_writer_finish(w, HR_API_FINISH_STOP, -1, 1, &without), HR_OK);
        hr_api_writer_free(w);
        struct msgs m;
        sse_parse(without.data, without.len, &m);
        assert_true(m.n >= 2);
        msgs_free(&m);
        hr_api_buf_free(&with);
        hr_api_buf_free(&without);
    }
}

/* Every byte value a text delta may hold survives the round trip, as does
 * text beyond the buffer's first growth. */
static void test_escaping(void **state)
{
    (void)state;
    char text[512];
    size_t n = 0;
    for (int c = 0; c < 0x80; c++) text[n++] = (char)c;
    const char *multi = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x80\xa8\xef\xbf\xbf";
    memcpy(text + n, multi, strlen(multi));
    n += strlen(multi);
    struct hr_chat_event ev = {.kind = HR_CHAT_EVENT_CONTENT, .text = text, .len = n};
    for (int k = 0; k < 3; k++) {
        struct hr_api_writer_config cfg = config((enum hr_api_kind)k, false);
        struct hr_api_buf out = {0};
        run(&cfg, &ev, 1, HR_API_FINISH_STOP, -1, 1, &out);
        json_t *doc = parse(out.data, out.len);
        json_t *choice = json_array_get(json_object_get(doc, "choices"), 0);
        json_t *s =
            k == HR_API_ANTHROPIC
                ? json_object_get(json_array_get(json_object_get(doc, "content"), 0), "text")
            : k == HR_API_OPENAI_CHAT
                ? json_object_get(json_object_get(choice, "message"), "content")
                : json_object_get(choice, "text");
        json_t *want = jstr(text, n);
        assert_json_eq(s, want);
        json_decref(want);
        json_decref(doc);
        /* non-ASCII is written as UTF-8, not \u escapes; NUL as \u0000 */
        assert_non_null(strstr(out.data, "\xf0\x9f\x98\x80"));
        assert_non_null(strstr(out.data, "\\u0000\\u0001"));
        assert_non_null(strstr(out.data, "\\n"));
        hr_api_buf_free(&out);
    }
}

/* ---- the buffer ---- */

static void test_buf(void **state)
{
    (void)state;
    struct hr_api_buf b = {0};
    assert_int_equal(hr_api_buf_put(&b, "", 0), HR_OK);
    assert_int_equal(b.len, 0);
    assert_int_equal(hr_api_buf_put(&b, "abc", 3), HR_OK);
    assert_int_equal(hr_api_buf_printf(&b, "-%d-%s", 42, "x"), HR_OK);
    assert_string_equal(b.data, "abc-42-x");
    assert_int_equal(b.len, 8);
    char big[5000];
    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(hr_api_buf_printf(&b, "[%s]", big), HR_OK);
    assert_int_equal(b.len, 8 + 2 + 4999);
    assert_int_equal(strlen(b.data), b.len);
    assert_int_equal(b.data[8], '[');
    assert_int_equal(b.data[b.len - 1], ']');
    size_t cap = b.cap;
    hr_api_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, cap);
    assert_int_equal(hr_api_buf_put(&b, "q", 1), HR_OK);
    assert_string_equal(b.data, "q");
    hr_api_buf_free(&b);
    assert_null(b.data);
    hr_api_buf_free(&b);
    hr_api_buf_free(NULL);
}

/* ---- errors ---- */

static const struct {
    enum hr_api_error_class cls;
    unsigned anthropic_status, openai_status;
    const char *anthropic_type, *openai_type, *openai_code;
} error_table[] = {
    {HR_API_ERR_INVALID, 400, 400, "invalid_request_error", "invalid_request_error", NULL},
    {HR_API_ERR_TOO_LONG, 400, 400, "invalid_request_error", "invalid_request_error",
     "context_length_exceeded"},
    {HR_API_ERR_AUTH, 401, 401, "authentication_error", "authentication_error", "invalid_api_key"},
    {HR_API_ERR_NOT_FOUND, 404, 404, "not_found_error", "not_found_error", NULL},
    {HR_API_ERR_METHOD, 405, 405, "invalid_request_error", "invalid_request_error",
     "method_not_allowed"},
    {HR_API_ERR_TOO_LARGE, 413, 413, "request_too_large", "invalid_request_error",
     "request_too_large"},
    {HR_API_ERR_OVERLOADED, 529, 503, "overloaded_error", "server_error", "overloaded"},
    {HR_API_ERR_UNAVAILABLE, 503, 503, "api_error", "server_error", "unavailable"},
    {HR_API_ERR_INTERNAL, 500, 500, "api_error", "server_error", NULL},
};

static void test_error_classes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++) {
        if (error_table[i].cls == HR_API_ERR_TOO_LONG) continue; /* its own test */
        struct hr_api_error e = {.cls = error_table[i].cls, .retry_after_s = 5};
        snprintf(e.message, sizeof(e.message), "message %zu: \"quoted\"", i);
        for (int k = 0; k < 3; k++) {
            enum hr_api_kind kind = (enum hr_api_kind)k;
            bool anthropic = kind == HR_API_ANTHROPIC;
            assert_int_equal(hr_api_error_status(kind, e.cls), anthropic
                                                                   ? error_table[i].anthropic_status
                                                                   : error_table[i].openai_status);
            struct hr_api_buf out = {0};
            assert_int_equal(hr_api_error_body(kind, &e, &out), HR_OK);
            json_t *got = parse(out.data, out.len);
            json_t *want = anthropic
                               ? json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                                           error_table[i].anthropic_type, "message", e.message)
                               : json_pack("{s:{s:s,s:s,s:n,s:s?}}", "error", "message", e.message,
                                           "type", error_table[i].openai_type, "param", "code",
                                           error_table[i].openai_code);
            assert_json_eq(got, want);
            json_decref(want);

            /* the SSE form carries the same body */
            size_t body_len = out.len;
            assert_int_equal(hr_api_error_sse(kind, &e, &out), HR_OK);
            const char *sse = out.data + body_len;
            struct msgs m;
            sse_parse(sse, out.len - body_len, &m);
            assert_int_equal(m.n, 1);
            assert_string_equal(m.v[0].event, anthropic ? "error" : "");
            assert_json_eq(m.v[0].data, got);
            assert_string_equal(sse + strlen(sse) - 2, "\n\n");
            msgs_free(&m);
            json_decref(got);

            /* an empty message gets the class's default sentence */
            struct hr_api_error d = {.cls = e.cls};
            hr_api_buf_reset(&out);
            assert_int_equal(hr_api_error_body(kind, &d, &out), HR_OK);
            got = parse(out.data, out.len);
            json_t *err = json_object_get(got, "error");
            assert_true(json_string_length(json_object_get(err, "message")) > 0);
            json_decref(got);
            hr_api_buf_free(&out);
        }
    }
    /* a class out of range is an internal error, never a crash */
    assert_int_equal(hr_api_error_status(HR_API_ANTHROPIC, (enum hr_api_error_class)99), 500);
}

static void test_error_too_long(void **state)
{
    (void)state;
    struct hr_api_error e = {.cls = HR_API_ERR_TOO_LONG,
                             .n_prompt = 40000,
                             .max_prompt = 32768,
                             .estimated_bytes = 5000000000ull,
                             .limit_bytes = 4294967296ull};
    struct hr_api_buf out = {0};
    assert_int_equal(hr_api_error_status(HR_API_ANTHROPIC, e.cls), 400);
    assert_int_equal(hr_api_error_body(HR_API_ANTHROPIC, &e, &out), HR_OK);
    json_t *got = parse(out.data, out.len);
    json_t *want = json_pack("{s:s,s:{s:s,s:s,s:I,s:I}}", "type", "error", "error", "type",
                             "invalid_request_error", "message",
                             "prompt is too long: 40000 tokens > 32768 maximum", "estimated_bytes",
                             (json_int_t)5000000000ll, "limit_bytes", (json_int_t)4294967296ll);
    assert_json_eq(got, want);
    json_decref(got);
    json_decref(want);
    hr_api_buf_reset(&out);

    assert_int_equal(hr_api_error_body(HR_API_OPENAI_CHAT, &e, &out), HR_OK);
    got = parse(out.data, out.len);
    want = json_pack("{s:{s:s,s:s,s:s,s:s,s:I,s:I}}", "error", "message",
                     "This model's maximum context length is 32768 tokens. However, your "
                     "messages resulted in 40000 tokens.",
                     "type", "invalid_request_error", "param", "messages", "code",
                     "context_length_exceeded", "estimated_bytes", (json_int_t)5000000000ll,
                     "limit_bytes", (json_int_t)4294967296ll);
    assert_json_eq(got, want);
    json_decref(got);
    json_decref(want);
    hr_api_buf_reset(&out);

    /* completions say "prompt"; a detail sentence travels beside the message */
    e.estimated_bytes = 0;
    e.limit_bytes = 0;
    snprintf(e.message, sizeof(e.message), "the context is 32768 tokens");
    assert_int_equal(hr_api_error_body(HR_API_OPENAI_COMPLETION, &e, &out), HR_OK);
    got = parse(out.data, out.len);
    want = json_pack("{s:{s:s,s:s,s:s,s:s,s:i,s:i,s:s}}", "error", "message",
                     "This model's maximum context length is 32768 tokens. However, your "
                     "prompt resulted in 40000 tokens.",
                     "type", "invalid_request_error", "param", "prompt", "code",
                     "context_length_exceeded", "estimated_bytes", 0, "limit_bytes", 0, "detail",
                     "the context is 32768 tokens");
    assert_json_eq(got, want);
    json_decref(got);
    json_decref(want);
    hr_api_buf_reset(&out);

    /* the message matches the regular expression Claude Code uses, in SSE too */
    assert_int_equal(hr_api_error_sse(HR_API_ANTHROPIC, &e, &out), HR_OK);
    assert_non_null(strstr(out.data, "event: error\ndata: {\"type\":\"error\",\"error\":{"));
    assert_non_null(strstr(out.data, "\"prompt is too long: 40000 tokens > 32768 maximum\""));
    hr_api_buf_reset(&out);
    assert_int_equal(hr_api_error_sse(HR_API_OPENAI_CHAT, &e, &out), HR_OK);
    assert_memory_equal(out.data, "data: {\"error\":{", 16);
    assert_null(strstr(out.data, "[DONE]"));
    hr_api_buf_free(&out);
}

/* A message cut inside a character, or holding stray bytes, still makes
 * valid JSON: the bad bytes become U+FFFD. */
static void test_error_bad_utf8(void **state)
{
    (void)state;
    struct hr_api_error e = {.cls = HR_API_ERR_INVALID};
    memset(e.message, 'a', sizeof(e.message));
    e.message[sizeof(e.message) - 2] = '\xc3'; /* a two-byte character cut short */
    e.message[sizeof(e.message) - 1] = '\0';
    e.message[10] = '\xff';
    struct hr_api_buf out = {0};
    assert_int_equal(hr_api_error_body(HR_API_ANTHROPIC, &e, &out), HR_OK);
    json_t *got = parse(out.data, out.len);
    const char *msg = json_string_value(json_object_get(json_object_get(got, "error"), "message"));
    assert_memory_equal(msg + 10, "\xef\xbf\xbd", 3);
    assert_memory_equal(msg + strlen(msg) - 3, "\xef\xbf\xbd", 3);
    json_decref(got);
    /* a message filling the whole array without a NUL is read to its end */
    memset(e.message, 'b', sizeof(e.message));
    hr_api_buf_reset(&out);
    assert_int_equal(hr_api_error_body(HR_API_OPENAI_CHAT, &e, &out), HR_OK);
    got = parse(out.data, out.len);
    assert_int_equal(json_string_length(json_object_get(json_object_get(got, "error"), "message")),
                     sizeof(e.message));
    json_decref(got);
    hr_api_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_anthropic_stream_thinking),
        cmocka_unit_test(test_anthropic_stream_no_thinking),
        cmocka_unit_test(test_anthropic_document),
        cmocka_unit_test(test_anthropic_stream_equals_document),
        cmocka_unit_test(test_anthropic_stop_reasons),
        cmocka_unit_test(test_anthropic_empty),
        cmocka_unit_test(test_call_ids),
        cmocka_unit_test(test_chat_stream),
        cmocka_unit_test(test_chat_document),
        cmocka_unit_test(test_chat_stream_equals_document),
        cmocka_unit_test(test_completion),
        cmocka_unit_test(test_ping),
        cmocka_unit_test(test_no_start),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_error_classes),
        cmocka_unit_test(test_error_too_long),
        cmocka_unit_test(test_error_bad_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
