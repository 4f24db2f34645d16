/*
 * api-check.h - what fuzz-api-anthropic.c and fuzz-api-openai.c check on
 * every parsed request (src/server/api-request.c), shared by both targets.
 *
 *   - the status is HR_OK or one of the parse errors (INVALID, TYPE,
 *     RANGE; NOMEM only if memory ran out); an error leaves *out empty and
 *     a non-empty message that fits struct hr_err;
 *   - a parsed request keeps the promises of api.h: a model name, messages
 *     in OpenAI chat form (objects with a known role, content a string, a
 *     text-part array, or null next to tool calls; tool-call arguments a
 *     string), tools NULL or a non-empty array, a named tool choice that is
 *     among the tools, stop strings of 1 to 1024 bytes, sampling in range;
 *   - chat messages are a fixed point: the normalized messages and tools,
 *     sent back as an OpenAI chat request, parse to themselves;
 *   - they render through a ChatML template that prints tools, reasoning,
 *     tool calls (arguments through tojson) and tool results.
 *
 * abort() on any failure, besides ASan/UBSan/LeakSanitizer.
 */
#ifndef HR_TESTS_FUZZ_API_CHECK_H
#define HR_TESTS_FUZZ_API_CHECK_H

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat-render.h"
#include "server/api.h"

static inline void check(int ok)
{
    if (!ok) abort();
}

static const char api_check_template[] =
    "{%- if tools %}{{ '<|im_start|>system\\n# Tools' }}"
    "{%- for t in tools %}{{ '\\n' + (t | tojson) }}{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}"
    "{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{- m.content if m.content is string else '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}</tool_call>{%- endfor %}"
    "{%- if m.role == 'tool' %} (result of {{ m.tool_call_id }}){% endif %}"
    "{{- '<|im_end|>\\n' }}{% endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static inline bool is_role(const char *r)
{
    return !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") ||
           !strcmp(r, "tool");
}

static inline void check_messages(const json_t *msgs)
{
    check(json_is_array(msgs));
    check(json_array_size(msgs) > 0);
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m)
    {
        check(json_is_object(m));
        const json_t *role = json_object_get(m, "role"), *c = json_object_get(m, "content");
        const json_t *calls = json_object_get(m, "tool_calls");
        check(json_is_string(role) && is_role(json_string_value(role)));
        check(json_is_string(c) || json_is_array(c) || (json_is_null(c) && calls));
        if (json_is_array(c)) {
            size_t k;
            const json_t *p;
            json_array_foreach(c, k, p)
            {
                check(json_is_string(json_object_get(p, "text")));
            }
        }
        if (calls) {
            check(!strcmp(json_string_value(role), "assistant"));
            check(json_is_array(calls) && json_array_size(calls) > 0);
            size_t k;
            const json_t *call;
            json_array_foreach(calls, k, call)
            {
                const json_t *fn = json_object_get(call, "function");
                check(json_is_string(json_object_get(fn, "name")));
                check(json_is_string(json_object_get(fn, "arguments")));
            }
        }
    }
}

/* Arguments made from an object (not a client's string) read back as that object. */
static inline void check_made_arguments(const json_t *msgs)
{
    size_t i, k;
    const json_t *m, *call;
    json_array_foreach(msgs, i, m)
    {
        json_array_foreach(json_object_get(m, "tool_calls"), k, call)
        {
            const json_t *a = json_object_get(json_object_get(call, "function"), "arguments");
            json_t *v = json_loads(json_string_value(a), 0, NULL);
            check(json_is_object(v));
            json_decref(v);
        }
    }
}

static inline void check_request(const struct hr_api_request *r)
{
    check(r->model != NULL);
    if (r->kind != HR_API_OPENAI_COMPLETION) check_messages(r->messages);
    if (r->tools) {
        check(json_is_array(r->tools) && json_array_size(r->tools) > 0);
        check(r->tool_choice != HR_API_TOOL_NONE);
    }
    if (r->tool_choice == HR_API_TOOL_NAMED)
        check(r->tool_choice_name != NULL && r->tools != NULL);
    else
        check(r->tool_choice_name == NULL);
    check(r->kwargs == NULL || json_is_object(r->kwargs));
    check(r->n_stop <= 256 && (r->n_stop == 0) == (r->stop == NULL));
    for (uint32_t i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        check(n >= 1 && n <= 1024);
    }
    const struct hr_sampler_params *s = &r->sampling;
    check(s->temperature >= 0 && s->temperature <= 2);
    check(s->top_p > 0 && s->top_p <= 1);
    check(s->min_p >= 0 && s->min_p <= 1);
    check(s->top_k >= 0);
    check(s->presence_penalty >= -2 && s->presence_penalty <= 2);
    check(s->frequency_penalty >= -2 && s->frequency_penalty <= 2);
    check(s->penalty_last_n == 0 || s->penalty_last_n == 64);
}

/* Parses, checks an error's shape; returns the status. */
static inline enum hr_status api_parse_checked(enum hr_api_kind kind, bool count_tokens,
                                               const uint8_t *data, size_t size,
                                               struct hr_api_request *r)
{
    struct hr_err err;
    memset(&err, 0x5a, sizeof(err));
    enum hr_status st = hr_api_parse(kind, count_tokens, (const char *)data, size, r, &err);
    check(st == HR_OK || st == HR_ERR_INVALID || st == HR_ERR_TYPE || st == HR_ERR_RANGE ||
          st == HR_ERR_NOMEM);
    if (st != HR_OK) {
        size_t n = strnlen(err.msg, sizeof(err.msg));
        check(n > 0 && n < sizeof(err.msg));
        check(!r->model && !r->messages && !r->tools && !r->kwargs && !r->stop && !r->prompt &&
              !r->prompt_tokens && !r->tool_choice_name);
    } else {
        check(r->kind == kind);
        check_request(r);
    }
    return st;
}

/* The normalized chat form parses to itself as an OpenAI request. */
static inline void check_fixed_point(const struct hr_api_request *r)
{
    json_t *body = json_object();
    check(body != NULL);
    json_object_set_new(body, "model", json_string(r->model));
    json_object_set(body, "messages", r->messages);
    if (r->tools) json_object_set(body, "tools", r->tools);
    char *text = json_dumps(body, JSON_COMPACT);
    check(text != NULL);
    struct hr_api_request again;
    struct hr_err err;
    enum hr_status st = hr_api_parse(HR_API_OPENAI_CHAT, false, text, strlen(text), &again, &err);
    check(st == HR_OK);
    check(json_equal(again.messages, r->messages));
    check(r->tools ? json_equal(again.tools, r->tools) : again.tools == NULL);
    hr_api_request_free(&again);
    free(text);
    json_decref(body);
}

static inline void check_render(const struct hr_api_request *r)
{
    static struct hr_chat_template *ct;
    if (!ct) {
        struct hr_err err;
        check(hr_chat_template_init(api_check_template, NULL, NULL, &ct, &err) == HR_OK);
    }
    struct hr_chat_request req = {
        .messages = r->messages,
        .tools = r->tools,
        .kwargs = r->kwargs,
        .add_generation_prompt = true,
    };
    char *out = NULL;
    size_t n = 0;
    struct hr_err err;
    enum hr_status st = hr_chat_render(ct, &req, &out, &n, &err);
    /* LIMIT: a hostile body can hit the renderer's bounds (64 MiB, nesting). */
    check(st == HR_OK || st == HR_ERR_LIMIT);
    check((st == HR_OK) == (out != NULL));
    free(out);
}

#endif
